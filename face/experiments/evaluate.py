"""One method on one dataset (crsarena_main and the single-run ablations): run the method, meta-evaluate
at turn / dialogue / system level, compare with a published row where the dataset has one, report and
log everything."""

from __future__ import annotations

from face.experiments.common import Plan, experiment
from face.experiments.result import ExperimentResult
from face.report.tables import comparison_table, print_table, write_table


def run(plan: Plan) -> ExperimentResult:
    cfg = plan.cfg
    with experiment(plan) as ctx:
        tracker = ctx.tracker
        out = ctx.predict_logged()
        if out.dry_run:
            return ctx.result(dry_run=True, output=out)
        run_file = ctx.save_run(out.predictions)
        if not ctx.has_labels:
            print(f"No human labels in {ctx.subset}: predictions only, written to {run_file}. {out.label}", flush=True)
            return ctx.result(output=out, files={"run_file": run_file})
        results = ctx.evaluate(out.predictions)
        note = (f"{out.label}; {ctx.subset}; 95% CIs: {cfg.metaeval.n_boot} bootstrap resamples of conversations "
                "(system level: within each system, the systems held fixed; none where a split or a system has "
                "fewer than 2 conversations)")
        paths = write_table(results, ctx.out_dir, "correlations", f"All correlations. {note}", digits=4)
        published = ctx.published()
        compare_to = cfg.get("compare_to", "FACE")
        own_splits = [s for s in ctx.splits if s != "all"]
        if (published["method"] == compare_to).any():
            comp = comparison_table(results, published, method=compare_to, splits=tuple(own_splits))
            paths += write_table(comp, ctx.out_dir, "vs_published",
                                 f"{cfg.task_name}: ours vs published '{compare_to}' row. Ours: {note}. Not a paper "
                                 "result unless the LLM, instructions and data match the paper's setting.")
            for split in own_splits:
                if results[(results["split"] == split) & (results["coefficient"] == "spearman")]["value"].isna().all():
                    continue  # nothing to draw (a small subset, no labels on this split)
                from face.report import figures  # matplotlib and seaborn (~0.4 s) only when there is a figure

                paths.append(figures.bars_vs_published(
                    results, published, split, "spearman", f"ours ({cfg.llm.model})", note,
                    ctx.out_dir / "figures" / f"bars_{split}_spearman.png", ctx.dataset.title))
            print_table(f"{cfg.task_name} vs published '{compare_to}'. {note}", comp.drop(columns=["within_0_001"]))
        else:
            comp = None
            shown = results[results["coefficient"].isin(["pearson", "spearman"])]
            print_table(f"{cfg.task_name} ({ctx.dataset.title} has no published '{compare_to}' row). {note}",
                        shown.drop(columns=["p_value", "n_missing"]))
        ctx.log_results(results, out.label)
        tracker.log_artifacts(paths, "results")
        return ctx.result(output=out, results=results, comparison=comp, files={"run_file": run_file})
