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

import logging
from pathlib import Path
from typing import cast

import pandas as pd
from omegaconf import DictConfig, OmegaConf

from face.data import PUBLISHED_TABLE
from face.experiments.common import Parts, Plan, experiment
from face.experiments.result import ExperimentResult
from face.files import atomic_path
from face.report.tables import SPLIT_LABELS, order_aspects, print_table, write_table
from face.significance import comparison_table
from face.tracking import summary_metrics

log = logging.getLogger(__name__)
# our method name -> the published row of the same method (FACE paper Table 2)
PUBLISHED_NAME = {"face": "FACE", "llm_direct": "LLM-Direct", "llm_cot_icl": "LLM-CoT+ICL", "g_eval": "G-Eval",
                  "face_transfer": "FACE (FACE paper)"}
NOT_RECOMPUTED = {
    "UniEval": "needs the UniEval T5 weights (not installable from a package registry here)",
    "FACE w/o train": "run ablation_no_optimization for ours",
    "GPTScore": "needs prompt log-likelihoods (echo=True), which chat endpoints do not return",
}


def _method_cfgs(cfg: DictConfig) -> dict[str, DictConfig]:
    out = {}
    for name, node in (cfg.get("baselines") or {}).items():
        out[name] = cast(DictConfig, OmegaConf.merge(node, {"name": name}))
    out[cfg.method.name] = cfg.method
    return out


def parts(cfg: DictConfig) -> Parts:
    """The published table, and every baseline beside the method."""
    return Parts(extra_files=(PUBLISHED_TABLE,), method_cfgs=_method_cfgs(cfg))


def run(plan: Plan) -> ExperimentResult:
    cfg = plan.cfg
    reference = cfg.method.name
    with experiment(plan) as ctx:
        tracker, is_usr = ctx.tracker, ctx.dataset.response_level
        preds, labels, rows, dry = {}, {}, [], False
        levels = ("turn", "system") if is_usr else ("turn", "dialogue", "system")
        for name, method in ctx.methods.items():
            out, res = ctx.predict_and_evaluate(name, method, levels)
            labels[name] = out.label
            if res is None:
                dry = True
                continue
            ctx.save_run(out.predictions, f"run_file_{name}.json")
            tracker.log_metrics(summary_metrics(res, "" if name == reference else f"{name}."))  # headline: ours
            preds[name] = out.predictions
            rows.append(res.assign(method=name))
        if dry:
            print("Dry run: nothing was sent. " + " | ".join(labels.values()), flush=True)
            return ctx.result(dry_run=True, labels=labels)
        results = pd.concat(rows, ignore_index=True)
        published = ctx.published()
        note = (f"{ctx.subset}; 95% CIs: {cfg.metaeval.n_boot} bootstrap resamples of "
                f"{'contexts' if is_usr else 'conversations'}. Methods: "
                + " | ".join(f"{k}: {v}" for k, v in labels.items()))
        if is_usr:
            note += ("; system level: over the response generators (5 on Topical-Chat, 4 on PersonaChat: a "
                     "correlation over so few points says little)")
        long = long_table(results, published, labels, ctx.splits)
        paths = write_table(long, ctx.out_dir, "table_long", f"{cfg.task_name}: ours and published. {note}", digits=4)
        for coef in ("spearman", "pearson"):
            wide = wide_table(long, coef)
            paths += write_table(wide, ctx.out_dir, f"table_{coef}",
                                 f"{cfg.task_name} ({coef}, turn / dialogue level): one row per method and source. "
                                 f"{note}", digits=3)
            print_table(f"{cfg.task_name} — {coef}", wide)
        cluster_of = {c.conv_id: c.conv_id.split(":", 1)[0] for c in ctx.convs} if is_usr else None
        if len(preds) > 1 and reference in preds:
            sig = comparison_table(preds, reference, ctx.convs, ctx.aspects, ctx.splits, n_boot=cfg.metaeval.n_boot,
                                   seed=cfg.seed, confidence=cfg.metaeval.confidence, cluster_of=cluster_of)
            paths += write_table(sig, ctx.out_dir, "significance",
                                 f"{reference} minus each baseline on the same items: paired bootstrap over "
                                 f"{'contexts' if is_usr else 'conversations'} (diff, 95% CI, two-sided p) and "
                                 f"Williams' test (Pearson; assumes independent items). {note}", digits=4)
            print_table(f"{cfg.task_name}: significance ({reference} − baseline)",
                        sig.drop(columns=["method_a", "level", "n_clusters"]), 3)
        short = (f"{ctx.subset}; ours: LLM {cfg.llm.model} ({cfg.llm.backend}); 95% CIs over "
                 f"{'contexts' if is_usr else 'conversations'}; published values hatched (no CI). Full labels: "
                 "table_long.md")
        paths += figures(long, ctx, short)
        if is_usr:
            paths += transfer_outputs(results, ctx, reference, short)
        tracker.log_artifacts(paths, "results")
        return ctx.result(results=results, tables={"long": long}, labels=labels)


def long_table(results: pd.DataFrame, published: pd.DataFrame, labels: dict, splits) -> pd.DataFrame:
    mine = results[results["level"].isin(["turn", "dialogue"]) & results["coefficient"].isin(["pearson", "spearman"])]
    ours = mine.assign(source=mine["method"].map(lambda m: f"ours: {labels[m]}"),
                       method=mine["method"].map(lambda m: PUBLISHED_NAME.get(m, m)))
    ours = ours[["method", "source", "aspect", "level", "split", "coefficient", "value", "ci_low", "ci_high", "n"]]
    pub = published[published["split"].isin(splits) & published["coefficient"].isin(["pearson", "spearman"])]
    pub = pub.dropna(subset=["value"])
    src = pub["source"] if "source" in pub else pd.Series("FACE paper Table 2 (authors' baselines.json)",
                                                              index=pub.index)
    why = pub["method"].map(lambda m: f"; not recomputed: {NOT_RECOMPUTED[m]}" if m in NOT_RECOMPUTED else "")
    pub = pub.assign(source="published: " + src + why, level="", ci_low=float("nan"), ci_high=float("nan"), n=None)
    out = pd.concat([ours, pub[ours.columns]], ignore_index=True)
    return order_aspects(out)


def wide_table(long: pd.DataFrame, coefficient: str) -> pd.DataFrame:
    d = long[long["coefficient"] == coefficient]
    d = d.assign(column=d["split"].map(lambda s: SPLIT_LABELS.get(s, s)) + " " + d["aspect"])
    wide = d.pivot_table(index=["method", "source"], columns="column", values="value", sort=False).reset_index()
    return wide


def figures(long: pd.DataFrame, ctx, note: str) -> list[Path]:
    from face.report.figures import bars_by_quality

    out = []
    ours = long[long["source"].str.startswith("ours")]
    pub = long[long["source"].str.startswith("published")]
    for split in ctx.splits:
        for coef in ("spearman", "pearson"):
            o = ours[ours["split"] == split]
            if o.empty:
                continue
            out.append(bars_by_quality(o, pub[pub["split"] == split], coef, "method",
                                       f"{ctx.dataset.title} {SPLIT_LABELS.get(split, split)} — {coef}",
                                       note, ctx.out_dir / "figures" / f"bars_{split}_{coef}.png"))
    return out


def transfer_outputs(results: pd.DataFrame, ctx, reference: str, note: str) -> list[Path]:
    """Per FACE aspect: published FACE on CRSArena-Eval (ReDial, OpenDialKG) → ours on this USR corpus (and the
    other corpus when its transfer experiment has written its results), Spearman, turn level."""
    from face.datasets.crsarena import CRSArenaEval
    from face.report.figures import transfer_figure

    method = ctx.methods.get(reference)
    mapping = getattr(method, "mapping", None)
    if not mapping:
        return []
    mine = results[(results["method"] == reference) & (results["level"] == "turn")
                   & (results["coefficient"] == "spearman") & (results["split"] == "all")]
    rows = [{"dataset": ctx.dataset.title.replace("USR ", ""), "aspect": f"{mapping[r.aspect]} → {r.aspect}",
             "value": r.value, "ci_low": r.ci_low, "ci_high": r.ci_high, "source": "ours"}
            for r in mine.itertuples() if r.aspect in mapping]
    path = ctx.out_dir / "transfer_spearman.csv"
    with atomic_path(path) as tmp:
        pd.DataFrame(rows).to_csv(tmp, index=False)
    other = {"topical_chat": "transfer_persona_chat", "persona_chat": "transfer_topical_chat"}[ctx.dataset.corpus]
    other_csv = Path(ctx.cfg.paths.results_dir) / other / "transfer_spearman.csv"
    if other_csv.exists():
        rows += pd.read_csv(other_csv).to_dict("records")
    try:
        crs = CRSArenaEval().published(ctx.data_dir)
    except Exception as e:  # the released published table is not fetched for a USR run
        log.info("no CRSArena published values for the transfer figure: %s", e)
        crs = pd.DataFrame(columns=["method", "split", "aspect", "coefficient", "value"])
    crs = crs[(crs["method"] == "FACE") & (crs["coefficient"] == "spearman")]
    head = []
    for target, src in mapping.items():
        for r in crs[crs["aspect"] == src].itertuples():
            head.append({"dataset": f"CRSArena {SPLIT_LABELS.get(r.split, r.split)} (published)",
                         "aspect": f"{src} → {target}", "value": r.value, "ci_low": r.value, "ci_high": r.value,
                         "source": "published"})
    df = pd.DataFrame(head + rows)
    if df.empty:
        return [path]
    order = ["CRSArena ReDial (published)", "CRSArena OpenDialKG (published)", "Topical-Chat", "PersonaChat"]
    df = df.assign(_o=df["dataset"].map({d: i for i, d in enumerate(order)})).sort_values("_o", kind="stable")
    fig = transfer_figure(df.drop(columns="_o"), "spearman",
                          "FACE's CRSArena instructions: CRSArena-Eval → Topical-Chat → PersonaChat",
                          note, ctx.out_dir / "figures" / "transfer_spearman.png")
    return [path, fig]
