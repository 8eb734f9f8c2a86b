"""Table 2 of the paper: the FACE row (7 aspects × 2 splits × Pearson/Spearman) beside the published one."""

from __future__ import annotations

from face.experiments.common import Plan, experiment
from face.experiments.result import ExperimentResult
from face.report import figures
from face.report.tables import comparison_table, print_table, write_table


def run(plan: Plan) -> ExperimentResult:
    cfg = plan.cfg
    with experiment(plan) as ctx:
        tracker = ctx.tracker
        out = ctx.predict()
        ctx.save_run(out.predictions)
        results = ctx.evaluate(out.predictions)
        published = ctx.published()
        comp = comparison_table(results, published)
        n_ok = int(comp["within_0_001"].sum())
        caption = (f"FACE on {ctx.subset}: ours vs the published Table 2 (delta = ours rounded to 3 decimals − "
                   f"published). {n_ok}/{len(comp)} values within ±0.001. 95% bootstrap CIs "
                   f"({cfg.metaeval.n_boot} resamples of conversations, seed {cfg.seed}). Source: {out.label}.")
        paths = write_table(comp, ctx.out_dir, "table2_face", caption)
        paths += write_table(results, ctx.out_dir, "correlations", f"All correlations. {caption}", digits=4)
        for split in ("redial", "opendialkg"):
            for coef in ("pearson", "spearman"):
                paths.append(figures.bars_vs_published(
                    results, published, split, coef, "FACE (ours, released scores)",
                    f"Published bars: Table 2 of the paper. Ours: {out.label}; {ctx.subset}; error bars: 95% "
                    f"bootstrap CI.", ctx.out_dir / "figures" / f"bars_{split}_{coef}.png"))
        print_table(caption, comp.drop(columns=["ci_low", "ci_high"]))
        ctx.log_results(results, out.label)
        tracker.log_metrics({"table2.values_within_0_001": n_ok, "table2.values_total": len(comp),
                             "table2.max_abs_delta": float((comp["ours"] - comp["published"]).abs().max())})
        tracker.log_artifacts(paths, "results")
        return ctx.result(output=out, results=results, comparison=comp)
