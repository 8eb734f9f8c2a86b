"""One method on one dataset (crsarena_main and the single-run ablations): run the method, meta-evaluate
at turn / dialogue / system level, compare with a published row where the dataset has one."""

from __future__ import annotations

from functools import partial

from face.experiments.common import Plan, experiment
from face.experiments.result import ExperimentResult, Table
from face.report.diagnostic_report import aspect_means
from face.report.tables import comparison_table
from face.tracking.names import mean_metrics, means_description


def run(plan: Plan) -> ExperimentResult:
    cfg = plan.cfg
    with experiment(plan) as ctx:
        out = ctx.predict()
        if out.dry_run:
            return ctx.result(dry_run=True, output=out)
        if not any(c.labels or any(t.labels for t in c.turns) for c in ctx.convs):  # no human labels: predict only
            means = aspect_means(out.predictions, ctx.aspects)  # the MLflow run's metrics and description
            return ctx.result(output=out, metrics=mean_metrics(means),
                              description=means_description(means, out.label, ctx.subset),
                              shown=[f"No human labels in {ctx.subset}: predictions only, written to "
                                     f"{ctx.run_dir / 'run_file.json'}. {out.label}"])
        results = ctx.evaluate(out.predictions)
        note = (f"{out.label}; {ctx.subset}; 95% CIs: {ctx.settings.metaeval.n_boot} bootstrap resamples of "
                "conversations (system level: within each system, the systems held fixed; none where a split or a "
                "system has fewer than 2 conversations)")
        tables = {"correlations": Table(results, f"All correlations. {note}", 4)}
        published, compare_to = ctx.published(), cfg.get("compare_to", "FACE")
        own_splits = [s for s in ctx.splits if s != "all"]
        done = {"output": out, "results": results, "tables": tables, "correlations": {"": results}}
        if not (published["method"] == compare_to).any():
            shown = results[results["coefficient"].isin(["pearson", "spearman"])]
            return ctx.result(**done, shown=[(f"{cfg.task_name} ({ctx.dataset.title} has no published '{compare_to}' "
                                              f"row). {note}", shown.drop(columns=["p_value", "n_missing"]))])
        comp = comparison_table(results, published, method=compare_to, splits=tuple(own_splits))
        tables["vs_published"] = Table(comp, f"{cfg.task_name}: ours vs published '{compare_to}' row. Ours: {note}. "
                                             "Not a paper result unless the LLM, instructions and data match the "
                                             "paper's setting.")
        drawn = [s for s in own_splits  # nothing to draw for a split without a Spearman (a small subset, no labels)
                 if not results[(results["split"] == s) & (results["coefficient"] == "spearman")]["value"].isna().all()]
        from face.report import figures  # matplotlib and seaborn (~0.4 s) only when there is a figure

        ours = f"ours ({ctx.llm.model if ctx.llm else None})"
        bars = {f"figures/bars_{s}_spearman.png": partial(figures.bars_vs_published, results, published, s,
                                                          "spearman", ours, note, dataset_title=ctx.dataset.title)
                for s in drawn}
        return ctx.result(**done, comparison=comp, figures=bars, shown=[
            (f"{cfg.task_name} vs published '{compare_to}'. {note}", comp.drop(columns=["within_0_001"]))])
