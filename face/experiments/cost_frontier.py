"""The cost frontier of FACE's settings on CRSArena-Eval, no LLM: what a conversation costs against how well the
scores agree with the humans.

* Correlation: for k of the 16 released instructions (``ks``; ``n_seeds`` random k-subsets each, as
  ablation_num_instructions draws them), the authors' released per-particle scores averaged over the subset
  (``face.pipeline.aggregate``) and correlated with the human labels, pooled over the splits: each aspect at its own
  level (turn or dialogue) and at system level (``face.metaeval``). A k's value is the mean over its subsets; its
  interval the percentile interval of that mean over bootstrap resamples of conversations (the same resamples for
  every subset; at system level within each system, as ``face.metaeval`` draws them).
* Cost: the live method's own estimate (``Face.estimate``, ``face/pipeline/estimate.py``) of the full data at the
  paper's sample counts and the reference prices (``priced.llm``), one per score estimator (``estimators``): the
  decomposition once, each aspect's scoring × k / 16 (a request per unit × instruction: the expected cost of a
  random k-subset), per conversation.
* Only the released judgements' own setting (``measured``: sampling n = 5, the reasoning prompt) has correlations:
  another estimator changes the scores, which only a real judge can show. The other rows carry their cost alone.
* The Pareto set (per level, aspect and coefficient): the measured points no cheaper point matches or beats.
"""

from __future__ import annotations

import dataclasses
from functools import partial
from typing import Any

import numpy as np
import pandas as pd
from omegaconf import DictConfig, OmegaConf
from pydantic import Field, model_validator

from face.coefficients import REGISTRY, rows_correlation
from face.console import progress
from face.data import RELEASED_PARTICLES
from face.experiments.common import Parts, Plan, experiment, own_settings, released_scores
from face.experiments.result import ExperimentResult, Table
from face.llm import LLMConfig
from face.llm.sizes import cost_usd
from face.metaeval import cluster_weights, correlate, system_means
from face.methods import build
from face.optimize.config import Reward
from face.optimize.items import items_for
from face.optimize.scorers import ReplayScorer
from face.pipeline.aggregate import random_instruction_subsets
from face.pipeline.estimate import COUNTS
from face.pipeline.released import LABEL
from face.predictions import round_preds
from face.report import figures
from face.report.tables import ordered
from face.resample import percentile_interval
from face.settings import settings as typed

NOT_MEASURED = "not measurable without a real judge (the released scores are sampled n = 5, with reasoning)"


@typed("frontier", conf="experiment/cost_frontier.yaml:frontier")
class Settings:
    """``frontier:`` of conf/experiment/cost_frontier.yaml."""

    ks: list[int] = Field(min_length=1)
    n_seeds: int = Field(ge=1)
    n_boot: int = Field(ge=100)
    coefficients: list[Reward] = Field(min_length=1)  # face.coefficients' names
    estimators: dict[str, dict[str, Any]] = Field(min_length=1)  # name -> method.scoring settings
    measured: str  # the estimator of the released judgements

    @model_validator(mode="after")
    def _known(self) -> Settings:
        if self.measured not in self.estimators:
            raise ValueError(f"frontier.measured must name one of frontier.estimators {list(self.estimators)}, "
                             f"got {self.measured!r}")
        return self


def parts(cfg: DictConfig) -> Parts:
    own_settings(Settings, cfg, "frontier")
    return Parts(extra_files=(RELEASED_PARTICLES,))  # the estimate counts the released particles


# ---------------------------------------------------------------- cost

def costs(ctx, s: Settings) -> pd.DataFrame:
    """Per estimator × k: requests, samples, tokens and $ per conversation (the live method's estimate)."""
    llm = LLMConfig.from_dict(ctx.cfg.priced.llm)
    inputs = dataclasses.replace(ctx.inputs(), llm=llm)
    rows = []
    for name, scoring in s.estimators.items():
        method = build(OmegaConf.merge(OmegaConf.to_container(ctx.cfg.priced.method, resolve=True),
                                       {"scoring": scoring}))
        instructions = {a.name: method.instruction_set(ctx.data_dir, a) for a in ctx.aspects}
        table = method.estimate(inputs, instructions, method.proxy(inputs))
        counts = table.set_index("stage")[list(COUNTS)]
        # one instruction of every aspect: its scoring stage over its instructions (a request per unit × instruction)
        one = sum(counts.loc[f"score:{a}"] / len(v) for a, v in instructions.items())
        for k in s.ks:
            total = (counts.loc["decompose"] + one * k) / len(ctx.convs)
            rows.append({"estimator": name, "k": k, **total.to_dict(),
                         "usd": cost_usd(total["input_tokens"], total["output_tokens"], *llm.prices)})
    return pd.DataFrame(rows)


# ---------------------------------------------------------------- correlation

def correlations(ctx, scores: pd.DataFrame, s: Settings) -> pd.DataFrame:
    """Per level × aspect × coefficient × k: the mean over the k-subsets of the correlation, its sd over them and
    the percentile interval of the mean over the bootstrap resamples. A subset's predictions: the mean of its
    instructions' (``ReplayScorer``: every released particle has a score under every instruction, so this is
    ``aggregate`` over the subset), rounded as every prediction is."""
    seed, confidence = ctx.settings.seed, ctx.settings.metaeval.confidence
    rows = []
    for spec in progress(ctx.aspects, "k-instruction subsets", unit="aspect"):
        replay = ReplayScorer(scores[scores["aspect"] == spec.name], items_for(spec, ctx.convs), spec.level)
        cov = replay.covered()  # items with a prediction (turns without particles have none)
        y = replay.gold[cov]
        convs = np.array([replay.items[i].conv_id for i in cov])
        systems = np.array([replay.items[i].system for i in cov])
        w = {spec.level: cluster_weights(convs, s.n_boot, np.random.default_rng(seed)),
             "system": cluster_weights(convs, s.n_boot, np.random.default_rng(seed), strata=systems)}
        human = system_means(y, systems)[1][0], system_means(y, systems, w["system"])[1]
        for k in s.ks:
            subsets = random_instruction_subsets(replay.ids, k, [seed * 1000 + i for i in range(s.n_seeds)])
            subsets = subsets[:1] if k == len(replay.ids) else subsets  # one subset of all the instructions
            values: dict[tuple[str, Reward], list[float]] = {}
            reps = {(level, c): np.empty(s.n_boot) for level in (spec.level, "system") for c in s.coefficients}
            for j, subset in enumerate(subsets):
                x = round_preds(replay.matrix[[replay.row[i] for i in subset]][:, cov].mean(0))
                mine = slice(j, None, len(subsets))  # the resamples this subset scores
                px, bx = system_means(x, systems)[1][0], system_means(x, systems, w["system"][mine])[1]
                for c in s.coefficients:
                    values.setdefault((spec.level, c), []).append(correlate(x, y, [c])[c][0])
                    values.setdefault(("system", c), []).append(correlate(px, human[0], [c])[c][0])
                    reps[(spec.level, c)][mine] = REGISTRY[c].weighted(x, y, w[spec.level][mine])
                    reps[("system", c)][mine] = rows_correlation(bx, human[1][mine], c)
            for (level, c), v in values.items():
                rows.append((level, spec.name, c, k, float(np.mean(v)), float(np.std(v, ddof=1)) if len(v) > 1
                             else 0.0, *percentile_interval(reps[(level, c)], confidence), len(v), len(y)))
    return pd.DataFrame(rows, columns=["level", "aspect", "coefficient", "k", "value", "sd_subsets", "ci_low",
                                       "ci_high", "n_subsets", "n_items"])


def frontier(corr: pd.DataFrame, cost: pd.DataFrame, measured: str) -> pd.DataFrame:
    """Every level × aspect × coefficient × estimator × k: its cost and (measured estimator only) correlation; Pareto:
    a measured point above every cheaper measured point."""
    out = cost.merge(corr, on="k", how="left")
    unmeasured = out["estimator"] != measured
    out.loc[unmeasured, ["value", "sd_subsets", "ci_low", "ci_high", "n_subsets"]] = np.nan
    out["correlation"] = np.where(unmeasured, "not measurable without a real judge", "measured")
    keys = ["level", "aspect", "coefficient"]
    seen = out[~unmeasured].sort_values([*keys, "usd"], kind="stable")
    best_cheaper = seen.groupby(keys)["value"].transform(lambda v: v.shift().cummax()).fillna(-np.inf)
    out["pareto"] = (seen["value"] > best_cheaper).reindex(out.index, fill_value=False)
    rank = {name: i for i, name in enumerate(["turn", "dialogue", "system", *ordered(out["aspect"]),
                                              *dict.fromkeys(corr["coefficient"]), *dict.fromkeys(cost["estimator"])])}
    out = out.sort_values([*keys, "estimator", "k"], key=lambda c: c.map(rank) if c.name != "k" else c, kind="stable")
    return out[[*keys, "estimator", "k", "usd", *COUNTS, "value", "ci_low", "ci_high", "sd_subsets", "n_subsets",
                "n_items", "correlation", "pareto"]].reset_index(drop=True)


def run(plan: Plan) -> ExperimentResult:
    s = own_settings(Settings, plan.cfg, "frontier")
    with experiment(plan) as ctx:
        scores = released_scores(ctx, "subsets the released per-instruction scores")
        cost = costs(ctx, s)
        table = frontier(correlations(ctx, scores, s), cost, s.measured)
        return ctx.result(**_report(ctx, s, cost, table))


def _report(ctx, s: Settings, cost: pd.DataFrame, table: pd.DataFrame) -> dict:
    llm, live = ctx.cfg.priced.llm, ctx.cfg.priced.method
    sample = (f"{LABEL}; {ctx.subset}; correlations pooled over the splits; k random instructions of the 16 "
              f"({s.n_seeds} subsets per k, one at k = 16)")
    priced = (f"Cost per conversation: the live method's estimate (face/pipeline/estimate.py, as llm.dry_run prints "
              f"it) of CRSArena-Eval's {len(ctx.convs)} conversations × {len(ctx.aspects)} aspects at "
              f"{llm.model} list prices (${llm.price_input_per_mtok}/M input, ${llm.price_output_per_mtok}/M output "
              f"tokens), divided by the conversations: the decomposition ({live.particles.k} samples a turn, "
              f"reasoning, the same in every row) plus each aspect's scoring × k / 16 (one request per particle × "
              f"instruction: the expected cost of a random k-subset), the particles counted those the authors "
              f"released; input ~4 characters a token; assumed answers {live.cost.score_reasoning_tokens} tokens a "
              f"reasoned score sample ({5 * live.cost.score_reasoning_tokens} a request of n = 5), "
              f"{live.cost.score_output_tokens} a bare {{\"score\": k}}, {live.cost.decompose_reasoning_tokens} a "
              f"reasoned decomposition (method.cost); requests: one prompt's samples (sampling: n = 5; logprobs: 1, "
              f"its score token's distribution read).")
    interval = (f"value: mean over the subsets; ci_low/ci_high: {ctx.settings.metaeval.confidence:.0%} percentile "
                f"interval over {s.n_boot} bootstrap resamples of conversations (system level: within each system), "
                f"the subsets taking the resamples in turn (at k = 16 face.metaeval's interval); sd_subsets: the sd "
                f"over the subsets")
    caption = (f"The cost frontier. {sample}. {interval}. Correlation of the other estimators: {NOT_MEASURED}. "
               f"pareto: measured and above every cheaper measured point. {priced}")
    head = table[(table["correlation"] == "measured") & (table["coefficient"] == s.coefficients[0])]
    pivot = head.pivot_table(index=["level", "aspect"], columns="k", values="value", sort=False).reset_index()
    note = (f"{sample}; y: {interval.split('; sd_subsets')[0]}; filled: Pareto; x ticks: each k's $ per "
            f"conversation ({s.measured}); dotted: the other estimators' cost, correlation not measurable here.")
    means = head.groupby(["level", "k"])["value"].mean()
    pareto = table[table["pareto"]].drop(columns=["samples", "http_requests", "correlation", "pareto"])
    return {"tables": {"frontier": Table(table, caption, 4),
                       "pareto": Table(pareto, f"The Pareto set: the rows of frontier.md marked pareto. {caption}", 4),
                       "cost": Table(cost, f"Cost per conversation by score estimator and k. {priced}", 4)},
            "figures": {f"figures/cost_frontier_{c}.png": partial(figures.cost_frontier, table, c, note)
                        for c in s.coefficients},
            "shown": [(f"Cost per conversation. {priced}", cost),
                      (f"{s.coefficients[0]} by k ({s.measured}). {sample}", pivot)],
            "metrics": {**{f"summary.k{k}_usd": float(g["usd"].iloc[0])
                           for k, g in cost[cost["estimator"] == s.measured].groupby("k")},
                        **{f"summary.{level}.k{k}_{s.coefficients[0]}": float(v) for (level, k), v in means.items()}},
            "description": f"**Cost frontier** ({sample}) — `results/cost_frontier/frontier.md`."}
