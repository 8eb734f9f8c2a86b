"""Aggregation ablation: mean / median / max / min over a particle's instructions and over particles."""

from __future__ import annotations

import itertools

import pandas as pd
from omegaconf import DictConfig

from face.experiments.common import ConfigError, Parts, Plan, experiment, released_scores
from face.experiments.result import ExperimentResult
from face.metaeval import items, paired_difference
from face.pipeline.aggregate import AGGREGATORS, aggregate
from face.pipeline.released import LABEL
from face.report import figures
from face.report.tables import SPLIT_LABELS, order_aspects, print_table, write_table


def parts(cfg: DictConfig) -> Parts:
    """The aggregators named in ``ablation`` exist (checked with the other settings)."""
    a = cfg.ablation
    for agg in (*a.instruction_aggs, *a.particle_aggs):
        if agg not in AGGREGATORS:
            raise ConfigError(f"ablation: unknown aggregator {agg!r}; choose from {AGGREGATORS}")
    return Parts()


def run(plan: Plan) -> ExperimentResult:
    cfg = plan.cfg
    a = cfg.ablation
    with experiment(plan) as ctx:
        tracker = ctx.tracker
        scores = released_scores(ctx, "re-aggregates the released scores")
        levels = ctx.inputs().levels
        rows, preds = [], {}
        for inst_agg, part_agg in itertools.product(a.instruction_aggs, a.particle_aggs):
            setting = f"{inst_agg} / {part_agg}"
            preds[setting] = aggregate(scores, levels, inst_agg, part_agg)
            res = ctx.evaluate(preds[setting], ["turn", "dialogue"], n_boot=0)
            rows.append(res.assign(instruction_agg=inst_agg, particle_agg=part_agg, setting=setting))
        results = order_aspects(pd.concat(rows, ignore_index=True))
        cols = ["setting", "instruction_agg", "particle_agg", "aspect", "level", "split", "coefficient", "value", "n"]
        n_boot = cfg.metaeval.n_boot
        note = (f"{LABEL}; {ctx.subset}. Setting = aggregator over a particle's instructions / over particles of "
                "a turn or dialogue.")
        paths = write_table(results[cols], ctx.out_dir, "aggregation", f"Aggregation ablation. {note}")
        base = next(iter(preds))
        diffs = order_aspects(differences(preds, base, ctx, n_boot))
        paths += write_table(diffs, ctx.out_dir, "aggregation_differences",
                             f"Each aggregation minus {base} (Spearman), with paired 95% bootstrap CIs ({n_boot} "
                             f"resamples of conversations, both settings on the same resamples): a CI that excludes 0 "
                             f"is a real difference. {note}")
        for split in ctx.splits:
            for coef in ("pearson", "spearman"):
                d = results[(results["split"] == split) & (results["coefficient"] == coef)]
                paths.append(figures.aggregation_heatmap(
                    d, "aspect", note, ctx.out_dir / "figures" / f"aggregation_{split}_{coef}.png",
                    f"{figures.COEF_LABELS[coef]} by aggregation — {SPLIT_LABELS.get(split, split)}"))
        d = results[(results["split"] == "all") & (results["coefficient"] == "spearman")]
        print_table(f"Spearman (pooled splits) by aggregation. {note}",
                    d.pivot(index="setting", columns="aspect", values="value").reset_index())
        pooled = diffs[diffs["split"] == "all"]
        tracker.log_metrics({"summary.settings": len(preds), "summary.pooled_differences": len(pooled),
                             "summary.pooled_differences_excluding_0": int(((pooled["ci_low"] > 0)
                                                                            | (pooled["ci_high"] < 0)).sum())})
        tracker.describe(f"**Aggregation ablation** ({note}) — every setting's correlations in "
                         f"`results/aggregation.csv`, each minus {base} with paired CIs in "
                         "`results/aggregation_differences.csv`.")
        tracker.log_artifacts(paths, "results")
        return ctx.result(results=results, tables={"differences": diffs})


def differences(preds: dict, base: str, ctx, n_boot: int, coefficient: str = "spearman") -> pd.DataFrame:
    """Every setting's correlation minus the ``base`` setting's, per aspect and split, with paired CIs."""
    rows = []
    for aspect in ctx.aspects:
        ref = items(preds[base], ctx.convs, aspect).dropna(subset=["pred"])
        for setting, p in preds.items():
            if setting == base:
                continue
            df = ref.merge(items(p, ctx.convs, aspect)[["conv_id", "turn_ind", "pred"]], on=["conv_id", "turn_ind"],
                           suffixes=("_base", ""), how="inner").dropna(subset=["pred"])
            for split in ctx.splits:
                d = df if split == "all" else df[df["split"] == split]
                diff, lo, hi = paired_difference(d["pred"], d["pred_base"], d["human"], d["conv_id"], coefficient,
                                                 n_boot, ctx.cfg.seed, ctx.cfg.metaeval.confidence)
                rows.append((setting, aspect.name, aspect.level, split, coefficient, diff, lo, hi, len(d)))
    return pd.DataFrame(rows, columns=["setting", "aspect", "level", "split", "coefficient", "difference",
                                       "ci_low", "ci_high", "n"])
