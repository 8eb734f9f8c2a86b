"""Aggregation ablation: mean / median / max / min over a particle's instructions and over particles."""

from __future__ import annotations

import itertools
from functools import partial

import pandas as pd
from omegaconf import DictConfig

from face.experiments.common import ConfigError, Parts, Plan, experiment, released_scores
from face.experiments.result import ExperimentResult, Table
from face.metaeval import items, paired_difference
from face.pipeline.aggregate import AGGREGATORS, aggregate
from face.pipeline.released import LABEL
from face.report import figures
from face.report.tables import SPLIT_LABELS, order_aspects


def parts(cfg: DictConfig) -> Parts:
    """The aggregators named in ``ablation`` exist (checked with the other settings)."""
    a = cfg.ablation
    for agg in (*a.instruction_aggs, *a.particle_aggs):
        if agg not in AGGREGATORS:
            raise ConfigError(f"ablation: unknown aggregator {agg!r}; choose from {AGGREGATORS}")
    return Parts()


def run(plan: Plan) -> ExperimentResult:
    a = plan.cfg.ablation
    with experiment(plan) as ctx:
        scores = released_scores(ctx, "re-aggregates the released scores")
        rows, preds = [], {}
        for inst_agg, part_agg in itertools.product(a.instruction_aggs, a.particle_aggs):
            setting = f"{inst_agg} / {part_agg}"
            preds[setting] = aggregate(scores, ctx.inputs().levels, inst_agg, part_agg)
            res = ctx.evaluate(preds[setting], ["turn", "dialogue"], n_boot=0)
            rows.append(res.assign(instruction_agg=inst_agg, particle_agg=part_agg, setting=setting))
        results = order_aspects(pd.concat(rows, ignore_index=True))
        cols = ["setting", "instruction_agg", "particle_agg", "aspect", "level", "split", "coefficient", "value", "n"]
        n_boot = ctx.settings.metaeval.n_boot
        note = (f"{LABEL}; {ctx.subset}. Setting = aggregator over a particle's instructions / over particles of "
                "a turn or dialogue.")
        base = next(iter(preds))
        diffs = order_aspects(differences(preds, base, ctx, n_boot))
        heatmaps = {f"figures/aggregation_{split}_{coef}.png": partial(
            figures.aggregation_heatmap, results[(results["split"] == split) & (results["coefficient"] == coef)],
            "aspect", note, title=f"{figures.COEF_LABELS[coef]} by aggregation — {SPLIT_LABELS.get(split, split)}")
            for split in ctx.splits for coef in ("pearson", "spearman")}
        d = results[(results["split"] == "all") & (results["coefficient"] == "spearman")]
        pooled = diffs[diffs["split"] == "all"]
        return ctx.result(
            results=results, figures=heatmaps,
            tables={"aggregation": Table(results[cols], f"Aggregation ablation. {note}"),
                    "aggregation_differences": Table(
                        diffs, f"Each aggregation minus {base} (Spearman), with paired 95% bootstrap CIs ({n_boot} "
                               "resamples of conversations, both settings on the same resamples): a CI that excludes "
                               f"0 is a real difference. {note}")},
            shown=[(f"Spearman (pooled splits) by aggregation. {note}",
                    d.pivot(index="setting", columns="aspect", values="value").reset_index())],
            metrics={"summary.settings": len(preds), "summary.pooled_differences": len(pooled),
                     "summary.pooled_differences_excluding_0": int(((pooled["ci_low"] > 0)
                                                                    | (pooled["ci_high"] < 0)).sum())},
            description=f"**Aggregation ablation** ({note}) — every setting's correlations in "
                        f"`results/aggregation.csv`, each minus {base} with paired CIs in "
                        "`results/aggregation_differences.csv`.")


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
                                                 n_boot, ctx.settings.seed, ctx.settings.metaeval.confidence)
                rows.append((setting, aspect.name, aspect.level, split, coefficient, diff, lo, hi, len(d)))
    return pd.DataFrame(rows, columns=["setting", "aspect", "level", "split", "coefficient", "difference",
                                       "ci_low", "ci_high", "n"])
