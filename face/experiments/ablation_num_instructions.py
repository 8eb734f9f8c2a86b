"""How many instructions are needed? Correlation for k random instructions out of 16 (several seeds)."""

from __future__ import annotations

from functools import partial

import pandas as pd

from face.console import progress
from face.experiments.common import Plan, experiment, released_scores
from face.experiments.result import ExperimentResult, Table
from face.metaeval import meta_evaluate
from face.pipeline.aggregate import aggregate, instruction_ids, random_instruction_subsets
from face.pipeline.released import LABEL
from face.report import figures
from face.report.tables import order_aspects


def run(plan: Plan) -> ExperimentResult:
    a = plan.cfg.ablation
    with experiment(plan) as ctx:
        scores = released_scores(ctx, "subsets the released per-instruction scores")
        levels = ctx.inputs().levels
        rows = []
        jobs = [(asp, k, seed) for asp in ctx.aspects for k in a.ks for seed in range(a.n_seeds)]
        for spec, k, seed in progress(jobs, "k-instruction subsets", unit="subset"):
            s = scores[scores["aspect"] == spec.name]
            ids = instruction_ids(s)
            if k == len(ids) and seed > 0:
                continue  # only one subset of size 16
            subset = random_instruction_subsets(ids, k, [ctx.settings.seed * 1000 + seed])[0]
            res = meta_evaluate(aggregate(s, levels, instructions=subset), ctx.convs, [spec], ctx.splits,
                                ["turn", "dialogue"], n_boot=0)
            rows += [(r.aspect, r.split, r.coefficient, k, seed, r.value, ",".join(subset))
                     for r in res.itertuples(index=False)]
        raw = pd.DataFrame(rows, columns=["aspect", "split", "coefficient", "k", "seed", "value", "instructions"])
        summary = order_aspects(raw.groupby(["aspect", "split", "coefficient", "k"], sort=False)["value"]
                                .agg(mean="mean", sd="std", n_subsets="size").reset_index().fillna({"sd": 0.0}))
        note = (f"{LABEL}; {ctx.subset}; k random instructions of 16, {a.n_seeds} seeds per k "
                f"(one subset at k=16); mean ± sd over subsets.")
        pooled = summary[(summary["coefficient"] == "spearman") & (summary["split"] == "all")]
        return ctx.result(
            tables={"k_instructions": Table(summary, f"Correlation vs number of instructions k. {note}"),
                    # 12 significant digits: the last bits of a correlation depend on how BLAS splits its sums
                    "k_instructions_raw": Table(raw, float_format="%.12g")},
            figures={f"figures/k_curve_{coef}.png": partial(figures.k_curve, summary[summary["split"] != "all"], coef,
                                                            note) for coef in ("pearson", "spearman")},
            shown=[(f"Spearman (pooled splits), mean over subsets, by k. {note}",
                    order_aspects(pooled.pivot(index="aspect", columns="k", values="mean").reset_index()))],
            metrics={f"summary.k{k}_spearman_mean": float(g["mean"].mean()) for k, g in pooled.groupby("k")},
            description=f"**Correlation vs number of instructions** ({note}) — the table is "
                        "`results/k_instructions.csv`.")
