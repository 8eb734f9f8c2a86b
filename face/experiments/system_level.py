"""System level: one point per CRS (9). FACE's mean prediction vs (a) the mean human label of
CRSArena-Eval and (b) a human ranking from the CRSArena-Dial arena votes (Bradley–Terry)."""

from __future__ import annotations

from functools import partial

import numpy as np
import pandas as pd
from omegaconf import DictConfig

from face import arena_ranking as arena
from face.datasets.crsarena import CRSArenaEval
from face.experiments.common import ConfigError, Parts, Plan, arena_files, arena_votes, experiment
from face.experiments.result import ExperimentResult, Table
from face.metaeval import COEFFICIENTS, cluster_weights, correlate, items, rows_correlation, system_means, system_table
from face.methods import build
from face.report import figures
from face.report.tables import order_aspects
from face.resample import percentile_interval
from face.tracking import correlation_metrics


def _vs_arena(preds, ctx, spec, votes) -> list[tuple]:
    """FACE per-CRS means vs Bradley–Terry ratings, CI resampling conversations (within CRS) and votes."""
    n_boot, prior, seed = ctx.cfg.arena.n_boot, ctx.cfg.arena.prior, ctx.settings.seed
    df = items(preds, ctx.convs, spec).dropna(subset=["pred"]).rename(columns={"system": "crs"})
    names, means = system_means(df["pred"].to_numpy(), df["crs"].to_numpy())
    rating = arena.bradley_terry(arena.pair_counts(votes, names), prior)
    point = correlate(means[0], rating)
    w = cluster_weights(df["conv_id"].to_numpy(), n_boot, np.random.default_rng(seed), strata=df["crs"].to_numpy())
    _, bmeans = system_means(df["pred"].to_numpy(), df["crs"].to_numpy(), w)
    bratings = arena.bootstrap_ratings(votes, names, n_boot, seed + 1, prior)
    confidence = ctx.settings.metaeval.confidence
    return [("arena_bt", spec.name, "all", c, point[c][0], point[c][1],
             *percentile_interval(rows_correlation(bmeans, bratings, c), confidence), len(names), 0)
            for c in COEFFICIENTS]


def _stats(results: pd.DataFrame, aspect: str) -> str:
    """``Spearman ρ = v [lo, hi], n = k systems`` for the scatter of one aspect."""
    r = results[(results["aspect"] == aspect) & (results["coefficient"] == "spearman")]
    if r.empty:
        return ""
    x = r.iloc[0]
    ci = "" if np.isnan(x["ci_low"]) else f" [{x['ci_low']:.3f}, {x['ci_high']:.3f}]"
    return f"Spearman ρ = {x['value']:.3f}{ci}\nn = {int(x['n'])} systems (held fixed)"


LEVEL_GROUPS = (("turn level", lambda a: a.level == "turn"),
                ("dialogue level without dialogue_overall",
                 lambda a: a.level == "dialogue" and a.name != "dialogue_overall"),
                ("dialogue_overall", lambda a: a.name == "dialogue_overall"))
MEANS_CAPTION = ("Means of the per-aspect system-level values of system_level.md, by group of aspects. An inference, "
                 "not a reproduction: summaries of the paper quote 0.902 (system level) and 0.93 (turn level); the "
                 "mean Pearson with the human labels over the four dialogue-level aspects other than dialogue_overall "
                 "and over the two turn-level aspects are the aggregations that give those numbers here (the paper's "
                 "table itself was not read). The per-aspect values (system_level.md) are the primary result.")


def level_means(results: pd.DataFrame, aspects) -> pd.DataFrame:
    """Per comparison (human labels, arena), aspect group and coefficient: the mean of the per-aspect system-level
    values. The groups are those whose means match numbers quoted from the paper (an inference: see
    docs/comparing_systems.md); the per-aspect values stay the primary result."""
    rows = []
    for level in ("system_vs_human_labels", "system_vs_arena_bt"):
        for group, member in LEVEL_GROUPS:
            names = [a.name for a in aspects if member(a)]
            for coef in COEFFICIENTS:
                r = results[(results["level"] == level) & (results["coefficient"] == coef)
                            & results["aspect"].isin(names)]
                if len(r):
                    rows.append((level, group, ", ".join(names), coef, float(r["value"].mean()), len(r)))
    return pd.DataFrame(rows, columns=["level", "group", "aspects", "coefficient", "mean_value", "n_aspects"])


def parts(cfg: DictConfig) -> Parts:
    """The arena votes to fetch; the dataset must be CRSArena-Eval (checked with the other settings)."""
    if not isinstance(build(cfg.dataset), CRSArenaEval):  # a ValueError of the dataset's: the runner's ConfigError
        raise ConfigError("system_level compares with the CRSArena-Dial arena votes: use dataset=crsarena_eval")
    return Parts(extra_files=arena_files(cfg))


def run(plan: Plan) -> ExperimentResult:
    cfg = plan.cfg
    with experiment(plan) as ctx:
        out = ctx.predict()
        m = ctx.settings.metaeval
        human = ctx.evaluate(out.predictions, ["system"], splits=["all"])
        votes = arena_votes(ctx)
        ranking = arena.ranking_table(votes, cfg.arena.prior)
        vs_arena = pd.DataFrame([r for a in ctx.aspects for r in _vs_arena(out.predictions, ctx, a, votes)],
                                columns=human.columns)
        # the two human rankings against each other (labels of CRSArena-Eval vs arena votes)
        sys_tab = {a.name: system_table(out.predictions, ctx.convs, a) for a in ctx.aspects}
        overall = sys_tab["dialogue_overall"] if "dialogue_overall" in sys_tab else next(iter(sys_tab.values()))
        overall = overall.rename(columns={"system": "crs"}).merge(
            ranking[["crs", "bt_rating", "votes", "win_rate"]], on="crs", how="left")
        h_vs_a = correlate(overall["human"].to_numpy(), overall["bt_rating"].to_numpy())
        results = pd.concat([human.assign(level="system_vs_human_labels"), vs_arena.assign(level="system_vs_arena_bt")])
        results = order_aspects(results)
        note = (f"{out.label}; {ctx.subset}; {len(votes)} arena votes ({', '.join(cfg.arena.vote_sources)}), "
                f"Bradley–Terry with {cfg.arena.prior} virtual ties per pair; 95% CIs: {m.n_boot} resamples of "
                f"conversations within each CRS, the 9 systems held fixed (and {cfg.arena.n_boot} resamples of "
                "votes for the arena).")
        means = level_means(results, ctx.aspects)
        tables = {"system_level": Table(results, f"System-level correlations over the CRSs. {note}"),
                  "system_level_means": Table(means, f"{MEANS_CAPTION} {note}"),
                  "arena_ranking": Table(ranking, f"Human system ranking from {len(votes)} CRSArena-Dial votes "
                                                  "(Bradley–Terry)."),
                  "system_means_dialogue_overall": Table(
                      overall, f"Per-CRS means, dialogue_overall. Human labels vs arena rating: Spearman "
                               f"{h_vs_a['spearman'][0]:.3f}, Kendall {h_vs_a['kendall'][0]:.3f}. {note}")}
        drawn = {f"figures/scatter_{a}.png": partial(figures.system_scatter, tab, f"{a}: FACE vs human, one point per "
                                                     "CRS", note, stats=_stats(human, a)) for a, tab in sys_tab.items()}
        drawn["figures/scatter_dialogue_overall_vs_arena.png"] = partial(
            figures.system_scatter, overall.assign(human=overall["bt_rating"]),
            "dialogue_overall: FACE vs arena (Bradley–Terry)", note, y_label="arena BT rating (log-strength)",
            label_col="crs", stats=_stats(vs_arena, "dialogue_overall"))
        headline = results[(results["aspect"] == "dialogue_overall")]
        return ctx.result(
            output=out, results=results, correlations={"": human}, tables=tables, figures=drawn,
            shown=[(f"System level, dialogue_overall. {note}", headline.drop(columns=["n_missing"])),
                   ("Arena ranking (Bradley–Terry)", ranking)],
            metrics={**correlation_metrics(vs_arena.assign(level="system"), against="arena"),
                     **{f"human_labels_vs_arena.{c}": h_vs_a[c][0] for c in COEFFICIENTS}})
