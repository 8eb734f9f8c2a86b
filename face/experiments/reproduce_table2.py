"""Table 2 of the paper: the FACE row (7 aspects × 2 splits × Pearson/Spearman) beside the published one."""

from __future__ import annotations

from functools import partial

from face.experiments.common import Plan, experiment
from face.experiments.result import ExperimentResult, Table
from face.report import figures
from face.report.tables import comparison_table


def run(plan: Plan) -> ExperimentResult:
    with experiment(plan) as ctx:
        out = ctx.predict()
        results = ctx.evaluate(out.predictions)
        published = ctx.published()
        comp = comparison_table(results, published)
        n_ok = int(comp["within_0_001"].sum())
        caption = (f"FACE on {ctx.subset}: ours vs the published Table 2 (delta = ours rounded to 3 decimals − "
                   f"published). {n_ok}/{len(comp)} values within ±0.001. 95% bootstrap CIs "
                   f"({ctx.settings.metaeval.n_boot} resamples of conversations, seed {ctx.settings.seed}). "
                   f"Source: {out.label}.")
        note = f"Published bars: Table 2 of the paper. Ours: {out.label}; {ctx.subset}; error bars: 95% bootstrap CI."
        bars = {f"figures/bars_{split}_{coef}.png": partial(figures.bars_vs_published, results, published, split, coef,
                                                            "FACE (ours, released scores)", note)
                for split in ("redial", "opendialkg") for coef in ("pearson", "spearman")}
        return ctx.result(
            output=out, results=results, comparison=comp, correlations={"": results}, figures=bars,
            tables={"table2_face": Table(comp, caption),
                    "correlations": Table(results, f"All correlations. {caption}", 4)},
            shown=[(caption, comp.drop(columns=["ci_low", "ci_high"]))],
            metrics={"table2.values_within_0_001": n_ok, "table2.values_total": len(comp),
                     "table2.max_abs_delta": float((comp["ours"] - comp["published"]).abs().max())})
