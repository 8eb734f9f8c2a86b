"""Aggregation ablation: mean / median / max / min over a particle's instructions and over particles."""

from __future__ import annotations

import itertools

import pandas as pd
from omegaconf import DictConfig

from face.aggregate import AGGREGATORS, aggregate
from face.experiments.common import experiment, released_scores
from face.methods.released import LABEL
from face.report import figures
from face.report.tables import order_aspects, print_table, write_table


def run(cfg: DictConfig) -> dict:
    a = cfg.ablation
    for agg in (*a.instruction_aggs, *a.particle_aggs):
        if agg not in AGGREGATORS:
            raise ValueError(f"unknown aggregator {agg!r}; choose from {AGGREGATORS}")
    with experiment(cfg) as ctx:
        tracker = ctx.tracker
        scores = released_scores(ctx, "re-aggregates the released scores")
        levels = ctx.inputs().levels
        rows = []
        for inst_agg, part_agg in itertools.product(a.instruction_aggs, a.particle_aggs):
            res = ctx.evaluate(aggregate(scores, levels, inst_agg, part_agg), ["turn", "dialogue"], a.n_boot)
            rows.append(res.assign(instruction_agg=inst_agg, particle_agg=part_agg,
                                   setting=f"{inst_agg} / {part_agg}"))
        results = order_aspects(pd.concat(rows, ignore_index=True))
        cols = ["setting", "instruction_agg", "particle_agg", "aspect", "level", "split", "coefficient", "value",
                "ci_low", "ci_high", "n"]
        note = (f"{LABEL}; {ctx.subset}; {'no CIs' if a.n_boot == 0 else f'{a.n_boot} bootstrap resamples'}. "
                "Setting = aggregator over a particle's instructions / over particles of a turn or dialogue.")
        paths = write_table(results[cols], ctx.out_dir, "aggregation", f"Aggregation ablation. {note}")
        for split in ctx.splits:
            for coef in ("pearson", "spearman"):
                d = results[(results["split"] == split) & (results["coefficient"] == coef)]
                paths.append(figures.aggregation_heatmap(
                    d, "aspect", note, ctx.out_dir / "figures" / f"aggregation_{split}_{coef}.png",
                    f"{coef} by aggregation — {split}"))
        d = results[(results["split"] == "all") & (results["coefficient"] == "spearman")]
        print_table(f"Spearman (pooled splits) by aggregation. {note}",
                    d.pivot(index="setting", columns="aspect", values="value").reset_index())
        tracker.log_metrics({f"{r.instruction_agg}_{r.particle_agg}.{r.level}.{r.aspect}.{r.split}.{r.coefficient}":
                             r.value for r in results.itertuples(index=False)})
        tracker.log_artifacts(paths, "results")
        return {"results": results, "out_dir": ctx.out_dir}
