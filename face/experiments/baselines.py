"""FACE and the baselines on the same items: crsarena_baselines (the Table 2 layout) and the USR transfer
experiments (transfer_topical_chat, transfer_persona_chat).

``cfg.method`` is FACE (live, or FaceTransfer on USR); ``cfg.baselines`` maps a name to a baseline method
config. Every method predicts, writes its run file and is meta-evaluated; then:

- ``table_long``: every cell — ours (labelled with the LLM and method that produced it) and the published
  value of the same method where one exists (labelled with its source); the published-only rows (UniEval,
  FACE w/o train on CRSArena; USR's and the FACE paper's numbers on USR) are kept, labelled as published;
- ``table_<coefficient>``: the same as one row per method and source, one column per split × aspect;
- ``significance``: FACE minus each baseline on the items both predicted (paired bootstrap over
  conversations — USR: contexts — with the CI of the difference and a p-value; Williams' test for Pearson);
- figures: bars per aspect and method with 95 % CIs beside the published values; on USR the transfer
  figure (CRSArena-Eval → Topical-Chat → PersonaChat per FACE aspect).
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Callable, cast

import pandas as pd
from omegaconf import DictConfig, OmegaConf

from face.data import PUBLISHED_TABLE
from face.experiments.common import Parts, Plan, experiment
from face.experiments.result import ExperimentResult, Table
from face.report.tables import SPLIT_LABELS, order_aspects
from face.significance import comparison_table

# our method name -> the published row of the same method (FACE paper Table 2)
PUBLISHED_NAME = {"face": "FACE", "llm_direct": "LLM-Direct", "llm_cot_icl": "LLM-CoT+ICL", "g_eval": "G-Eval",
                  "face_transfer": "FACE (FACE paper)"}
NOT_RECOMPUTED = {
    "UniEval": "needs the UniEval T5 weights (not installable from a package registry here)",
    "FACE w/o train": "run ablation_no_optimization for ours",
    "GPTScore": "needs prompt log-likelihoods (echo=True), which chat endpoints do not return",
}


def parts(cfg: DictConfig) -> Parts:
    """The published table, and every baseline beside the method."""
    baselines = {name: cast(DictConfig, OmegaConf.merge(node, {"name": name}))
                 for name, node in (cfg.get("baselines") or {}).items()}
    return Parts(extra_files=(PUBLISHED_TABLE,), method_cfgs={**baselines, cfg.method.name: cfg.method})


def run(plan: Plan) -> ExperimentResult:
    cfg = plan.cfg
    reference = cfg.method.name
    with experiment(plan) as ctx:
        is_usr, m = ctx.dataset.response_level, ctx.settings.metaeval
        levels = ("turn", "system") if is_usr else ("turn", "dialogue", "system")
        outs = {name: ctx.predict(method) for name, method in ctx.methods.items()}
        labels = {name: out.label for name, out in outs.items()}
        if any(out.dry_run for out in outs.values()):
            return ctx.result(dry_run=True, outputs=outs)
        corr = {name: ctx.evaluate(out.predictions, levels) for name, out in outs.items()}
        results = pd.concat([res.assign(method=name) for name, res in corr.items()], ignore_index=True)
        items = "contexts" if is_usr else "conversations"
        note = (f"{ctx.subset}; 95% CIs: {m.n_boot} bootstrap resamples of {items}. Methods: "
                + " | ".join(f"{k}: {v}" for k, v in labels.items()))
        if is_usr:
            note += ("; system level: over the response generators (5 on Topical-Chat, 4 on PersonaChat: a "
                     "correlation over so few points says little)")
        long = long_table(results, ctx.published(), labels, ctx.splits)
        tables = {"table_long": Table(long, f"{cfg.task_name}: ours and published. {note}", 4)}
        shown: list = []
        for coef in ("spearman", "pearson"):
            wide = wide_table(long, coef)
            tables[f"table_{coef}"] = Table(wide, f"{cfg.task_name} ({coef}, turn / dialogue level): one row per "
                                                  f"method and source. {note}")
            shown.append((f"{cfg.task_name} — {coef}", wide))
        if len(outs) > 1 and reference in outs:
            sig = comparison_table({k: o.predictions for k, o in outs.items()}, reference, ctx.convs, ctx.aspects,
                                   ctx.splits, n_boot=m.n_boot, seed=ctx.settings.seed, confidence=m.confidence,
                                   cluster_of={c.conv_id: c.conv_id.split(":", 1)[0] for c in ctx.convs}
                                   if is_usr else None)
            tables["significance"] = Table(sig, f"{reference} minus each baseline on the same items: paired bootstrap "
                                                f"over {items} (diff, 95% CI, two-sided p) and Williams' test "
                                                f"(Pearson; assumes independent items). {note}", 4)
            shown.append((f"{cfg.task_name}: significance ({reference} − baseline)",
                          sig.drop(columns=["method_a", "level", "n_clusters"]), 3))
        llm = f"{ctx.llm.model} ({ctx.llm.backend})" if ctx.llm else "none"
        short = (f"{ctx.subset}; ours: LLM {llm}; 95% CIs over {items}; published "
                 "values hatched (no CI). Full labels: table_long.md")
        drawn = figures(long, ctx, short)
        if is_usr:
            transfer(results, ctx, reference, short, tables, drawn)
        return ctx.result(outputs=outs, results=results, tables=tables, shown=shown, figures=drawn,
                          correlations={"" if name == reference else f"{name}.": res for name, res in corr.items()})


def long_table(results: pd.DataFrame, published: pd.DataFrame, labels: dict, splits) -> pd.DataFrame:
    mine = results[results["level"].isin(["turn", "dialogue"]) & results["coefficient"].isin(["pearson", "spearman"])]
    ours = mine.assign(source=mine["method"].map(lambda m: f"ours: {labels[m]}"),
                       method=mine["method"].map(lambda m: PUBLISHED_NAME.get(m, m)))
    ours = ours[["method", "source", "aspect", "level", "split", "coefficient", "value", "ci_low", "ci_high", "n"]]
    pub = published[published["split"].isin(splits) & published["coefficient"].isin(["pearson", "spearman"])]
    pub = pub.dropna(subset=["value"])
    src = pub.get("source", "FACE paper Table 2 (authors' baselines.json)")
    why = pub["method"].map(lambda m: f"; not recomputed: {NOT_RECOMPUTED[m]}" if m in NOT_RECOMPUTED else "")
    pub = pub.assign(source="published: " + src + why, level="", ci_low=float("nan"), ci_high=float("nan"), n=None)
    return order_aspects(pd.concat([ours, pub[ours.columns]], ignore_index=True))


def wide_table(long: pd.DataFrame, coefficient: str) -> pd.DataFrame:
    d = long[long["coefficient"] == coefficient]
    d = d.assign(column=d["split"].map(lambda s: SPLIT_LABELS.get(s, s)) + " " + d["aspect"])
    return d.pivot_table(index=["method", "source"], columns="column", values="value", sort=False).reset_index()


def figures(long: pd.DataFrame, ctx, note: str) -> dict[str, Callable[[Path], Path]]:
    from face.report.figures import bars_by_quality

    ours = long[long["source"].str.startswith("ours")]
    pub = long[long["source"].str.startswith("published")]
    return {f"figures/bars_{split}_{coef}.png": partial(
        bars_by_quality, ours[ours["split"] == split], pub[pub["split"] == split], coef, "method",
        f"{ctx.dataset.title} {SPLIT_LABELS.get(split, split)} — {coef}", note)
        for split in ctx.splits for coef in ("spearman", "pearson") if not ours[ours["split"] == split].empty}


def transfer(results: pd.DataFrame, ctx, reference: str, note: str, tables: dict, drawn: dict) -> None:
    """Per FACE aspect: published FACE on CRSArena-Eval (ReDial, OpenDialKG) → ours on this USR corpus (and the
    other corpus when its transfer experiment has written its results), Spearman, turn level: this corpus's values
    (``transfer_spearman.csv``) into ``tables``, the figure into ``drawn``."""
    from face.datasets.crsarena import CRSArenaEval
    from face.report.figures import transfer_figure

    mapping = getattr(ctx.methods.get(reference), "mapping", None)
    if not mapping:
        return
    mine = results[(results["method"] == reference) & (results["level"] == "turn")
                   & (results["coefficient"] == "spearman") & (results["split"] == "all")]
    rows = [{"dataset": ctx.dataset.title.replace("USR ", ""), "aspect": f"{mapping[r.aspect]} → {r.aspect}",
             "value": r.value, "ci_low": r.ci_low, "ci_high": r.ci_high, "source": "ours"}
            for r in mine.itertuples() if r.aspect in mapping]
    other = {"topical_chat": "transfer_persona_chat", "persona_chat": "transfer_topical_chat"}[ctx.dataset.corpus]
    other_csv = Path(ctx.cfg.paths.results_dir) / other / "transfer_spearman.csv"
    others = pd.read_csv(other_csv).to_dict("records") if other_csv.exists() else []
    crs = CRSArenaEval().published(ctx.data_dir)  # its table is fetched for every run of these experiments (parts)
    crs = crs[(crs["method"] == "FACE") & (crs["coefficient"] == "spearman")]
    head = [{"dataset": f"CRSArena {SPLIT_LABELS.get(r.split, r.split)} (published)", "aspect": f"{src} → {target}",
             "value": r.value, "ci_low": r.value, "ci_high": r.value, "source": "published"}
            for target, src in mapping.items() for r in crs[crs["aspect"] == src].itertuples()]
    tables["transfer_spearman"] = Table(pd.DataFrame(rows))
    df = pd.DataFrame(head + rows + others)
    if df.empty:
        return
    order = ["CRSArena ReDial (published)", "CRSArena OpenDialKG (published)", "Topical-Chat", "PersonaChat"]
    df = df.assign(_o=df["dataset"].map({d: i for i, d in enumerate(order)})).sort_values("_o", kind="stable")
    drawn["figures/transfer_spearman.png"] = partial(
        transfer_figure, df.drop(columns="_o"), "spearman",
        "FACE's CRSArena instructions: CRSArena-Eval → Topical-Chat → PersonaChat", note)
