"""How many instructions are needed? Correlation for k random instructions out of 16 (several seeds)."""

from __future__ import annotations

import pandas as pd

from face.console import progress
from face.experiments.common import Plan, experiment, released_scores
from face.experiments.result import ExperimentResult
from face.files import atomic_path
from face.metaeval import meta_evaluate
from face.pipeline.aggregate import aggregate, instruction_ids, random_instruction_subsets
from face.pipeline.released import LABEL
from face.report import figures
from face.report.tables import order_aspects, print_table, write_table


def run(plan: Plan) -> ExperimentResult:
    cfg = plan.cfg
    a = cfg.ablation
    with experiment(plan) as ctx:
        tracker = ctx.tracker
        scores = released_scores(ctx, "subsets the released per-instruction scores")
        levels = ctx.inputs().levels
        splits = ctx.splits
        rows = []
        jobs = [(asp, k, seed) for asp in ctx.aspects for k in a.ks for seed in range(a.n_seeds)]
        for spec, k, seed in progress(jobs, "k-instruction subsets", unit="subset"):
            aspect = spec.name
            s = scores[scores["aspect"] == aspect]
            ids = instruction_ids(s)
            if k > len(ids):
                raise ValueError(f"k={k} but {aspect} has only {len(ids)} instructions")
            if k == len(ids) and seed > 0:
                continue  # only one subset of size 16
            subset = random_instruction_subsets(ids, k, [cfg.seed * 1000 + seed])[0]
            res = meta_evaluate(aggregate(s, levels, instructions=subset), ctx.convs, [spec], splits,
                                ["turn", "dialogue"], n_boot=0)
            rows += [(aspect, r.split, r.coefficient, k, seed, r.value, ",".join(subset))
                     for r in res.itertuples(index=False)]
        raw = pd.DataFrame(rows, columns=["aspect", "split", "coefficient", "k", "seed", "value", "instructions"])
        summary = (raw.groupby(["aspect", "split", "coefficient", "k"], sort=False)["value"]
                   .agg(mean="mean", sd="std", n_subsets="size").reset_index().fillna({"sd": 0.0}))
        summary = order_aspects(summary)
        note = (f"{LABEL}; {ctx.subset}; k random instructions of 16, {a.n_seeds} seeds per k "
                f"(one subset at k=16); mean ± sd over subsets.")
        paths = write_table(summary, ctx.out_dir, "k_instructions", f"Correlation vs number of instructions k. {note}")
        # 12 significant digits: the last bits of a correlation depend on how BLAS splits its sums (threads, load)
        with atomic_path(ctx.out_dir / "k_instructions_raw.csv") as tmp:
            raw.to_csv(tmp, index=False, float_format="%.12g")
        paths.append(ctx.out_dir / "k_instructions_raw.csv")
        for coef in ("pearson", "spearman"):
            paths.append(figures.k_curve(summary[summary["split"] != "all"], coef, note,
                                         ctx.out_dir / "figures" / f"k_curve_{coef}.png"))
        wide = summary[(summary["coefficient"] == "spearman") & (summary["split"] == "all")].pivot(
            index="aspect", columns="k", values="mean").reset_index()
        print_table(f"Spearman (pooled splits), mean over subsets, by k. {note}", order_aspects(wide))
        pooled = summary[(summary["coefficient"] == "spearman") & (summary["split"] == "all")]
        tracker.log_metrics({f"summary.k{k}_spearman_mean": float(g["mean"].mean()) for k, g in pooled.groupby("k")})
        tracker.describe(f"**Correlation vs number of instructions** ({note}) — the table is "
                         "`results/k_instructions.csv`.")
        tracker.log_artifacts(paths, "results")
        return ctx.result(tables={"summary": summary, "raw": raw})
