"""Live FACE on CRSArena-Eval (crsarena_main and the single-run ablations): run the method, meta-evaluate
at turn / dialogue / system level, compare with a published row, report and log everything."""

from __future__ import annotations

from omegaconf import DictConfig

from face.experiments.common import evaluate, prepare, published_table, save_run
from face.methods import predict, required_files
from face.report import figures
from face.report.tables import comparison_table, print_table, write_table
from face.tracking import Tracker, correlation_metrics


def run(cfg: DictConfig) -> dict:
    with Tracker(cfg) as tracker:
        tracker.log_config()
        ctx = prepare(cfg, required_files(cfg, cfg.aspects), tracker)
        out = predict(cfg, ctx.convs, ctx.aspects, tracker)
        tracker.log_artifacts(out.artifacts, "run")
        tracker.log_metrics(out.metrics)
        if out.dry_run:
            print(f"Dry run: nothing was sent. {out.label}", flush=True)
            return {"dry_run": True, "out_dir": ctx.out_dir}
        run_file = save_run(out.predictions, ctx, tracker)
        if not ctx.has_labels:
            print(f"No human labels in {ctx.subset}: predictions only, written to {run_file}. {out.label}", flush=True)
            return {"run_file": run_file, "output": out, "out_dir": ctx.out_dir}
        results = evaluate(cfg, out.predictions, ctx)
        published = published_table(ctx)
        compare_to = cfg.get("compare_to", "FACE")
        comp = comparison_table(results, published, method=compare_to)
        note = f"{out.label}; {ctx.subset}"
        paths = write_table(comp, ctx.out_dir, "vs_published",
                            f"{cfg.task_name}: ours vs published '{compare_to}' row. Ours: {note}. Not a paper "
                            "result unless the LLM, instructions and data match the paper's setting.")
        paths += write_table(results, ctx.out_dir, "correlations", f"All correlations. {note}", digits=4)
        for split in ("redial", "opendialkg"):
            paths.append(figures.bars_vs_published(results, published, split, "spearman", f"ours ({cfg.llm.model})",
                                                   note, ctx.out_dir / "figures" / f"bars_{split}_spearman.png"))
        print_table(f"{cfg.task_name} vs published '{compare_to}'. {note}", comp.drop(columns=["within_0_001"]))
        tracker.log_metrics(correlation_metrics(results))
        tracker.log_artifacts(paths, "results")
        return {"results": results, "comparison": comp, "output": out, "out_dir": ctx.out_dir}
