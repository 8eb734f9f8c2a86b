"""The sequential ``face compare`` (face/sequential.py) measured on CRSArena-Eval's nine CRSs with the released
judgements (no LLM): what it would have cost and decided had it scored the conversations one batch at a time.

* Every pair of the 9 systems × 7 aspects, ``orders`` random scoring orders each: ``batch`` conversations of each
  system per step (unpaired: different systems have different conversations), an anytime-valid confidence sequence
  (PrPl-EB) for the difference of the per-conversation means of each aspect at α / 7 (the family: the pair's
  aspects), each aspect stopping when decided. Measured: the share of the pair's conversations scored before the
  aspect stopped, its decision, and whether it agrees with the fixed-n verdict on all conversations (face compare's
  unpaired bootstrap-t with Holm over the pair's 7 aspects: ``face.comparison.stats``) and with the human means.
* Calibration: each system's conversations split at random into halves (no true difference), the sequential rule
  run on the halves: how often an aspect (and the family) is declared better or worse.
* $ saved: the conversations × aspects not scored, at a reference price per conversation × aspect (config).
The unit is the conversation's mean score of the aspect (its turns' mean for a turn-level aspect; the fixed-n
verdict weights conversations by their turns, as face compare does).
"""

from __future__ import annotations

import itertools
import re
import time
from typing import Literal

import numpy as np
import pandas as pd
from omegaconf import DictConfig
from pydantic import Field

from face.comparison import engine, stats
from face.experiments.common import Parts, Plan, experiment, own_settings
from face.experiments.result import ExperimentResult, Table
from face.metaeval import items
from face.report import figures
from face.resample import draw_counts
from face.sequential import interleave, mean_sequence, order_paired_steps, stopping
from face.settings import settings as typed


@typed("sequential", conf="experiment/sequential_comparison.yaml:sequential")
class Settings:
    """``sequential:`` of conf/experiment/sequential_comparison.yaml."""

    methods: list[Literal["betting", "eb", "asymptotic"]] = Field(min_length=1)
    by_order: list[Literal["betting", "eb", "asymptotic"]]  # also run with the sides paired by scoring order
    alpha: float = Field(gt=0, lt=0.5)
    target_diff: float = Field(gt=0, le=1)  # share of the scale's range
    batch: int = Field(ge=1)
    orders: int = Field(ge=1)
    calibration_splits: int = Field(ge=1)
    fixed_boot: int = Field(ge=200)
    reference_usd: float = Field(ge=0)
    reference_conversations: int = Field(ge=1)


def parts(cfg: DictConfig) -> Parts:
    own_settings(Settings, cfg, "sequential")
    return Parts()


def _systems(ctx, preds) -> dict[str, dict[str, np.ndarray]]:
    """Per system: conversation ids, FACE's and the humans' per-conversation means (C × K, NaN: no score), and
    FACE's sums and counts (face compare's units)."""
    scored = pd.concat([items(preds, ctx.convs, a).dropna(subset=["pred"]).assign(aspect=a.name) for a in ctx.aspects])
    long = scored.groupby(["system", "conv_id", "aspect"]).agg(
        pred=("pred", "mean"), human=("human", "mean"), pred_sum=("pred", "sum"), n=("pred", "count")).reset_index()
    names = [a.name for a in ctx.aspects]
    out = {}
    for system, g in long.groupby("system", sort=True):
        wide = g.pivot(index="conv_id", columns="aspect").sort_index()
        out[system] = {"ids": wide.index.to_numpy(), "pred": wide["pred"][names].to_numpy(float),
                       "human": wide["human"][names].to_numpy(float),
                       "sums": wide["pred_sum"][names].fillna(0).to_numpy(float),
                       "counts": wide["n"][names].fillna(0).to_numpy(float)}
    return out


def _fixed(systems: dict, s: Settings, seed: int, side: str) -> dict[tuple[str, str], list[str]]:
    """face compare's verdict of every pair on all conversations (unpaired bootstrap-t, Holm over the 7 aspects)."""
    rng = np.random.default_rng(seed)
    mom = {}
    with stats.one_thread():
        for name, x in systems.items():
            sums, counts = (x["sums"], x["counts"]) if side == "pred" else (
                np.nan_to_num(x["human"]), (~np.isnan(x["human"])).astype(float))
            units = stats.Units(x["ids"], sums, counts)
            mom[name] = stats.moments(units, draw_counts(len(units), s.fixed_boot, rng))
    tests = {(a, b): stats.unpaired(mom[a], mom[b], 1 - s.alpha) for a, b in itertools.combinations(systems, 2)}
    return {pair: engine.verdicts(pd.Series(test.diff), pd.Series(stats.holm(test.p_value)), s.alpha)
            for pair, test in tests.items()}


def _rule(systems: dict, orders: dict, scales, s: Settings, method: str, by_order: bool):
    """The sequential rule of a pair of systems (names) run over their scoring orders: (share of the pair's
    conversations scored when each aspect stopped, its decision), orders × K. Each aspect at α/K: each side's CS at
    α/K/2 (computed once per system), or (``by_order``) one CS for the differences of the sides paired by order."""
    level = s.alpha / len(scales)
    sides = {} if by_order else {name: [mean_sequence(x["pred"][orders[name], j], level / 2, lo, hi, method)
                                        for j, (lo, hi) in enumerate(scales)] for name, x in systems.items()}

    def rule(a: str, b: str) -> tuple[np.ndarray, np.ndarray]:
        share, decision = [], []
        for j, (lo, hi) in enumerate(scales):
            if by_order:
                xa, xb = systems[a]["pred"][orders[a], j], systems[b]["pred"][orders[b], j]
                low, up, seen_a, seen_b = order_paired_steps(xa, xb, level, lo, hi, s.batch, method)
            else:
                low, up, seen_a, seen_b = interleave(sides[a][j], sides[b][j], s.batch)
            first, dec = stopping(low, up, s.target_diff * (hi - lo))
            share.append((seen_a + seen_b)[first] / (orders[a].shape[1] + orders[b].shape[1]))
            decision.append(dec)
        return np.column_stack(share), np.column_stack(decision)
    return rule


def _cells(systems: dict, aspects, label: str, rule, fixed: dict, human_fixed: dict) -> pd.DataFrame:
    """Every pair × aspect over the scoring orders (each system's drawn once; a pair's r-th order interleaves its
    systems' r-th orders)."""
    rows = []
    for a, b in itertools.combinations(systems, 2):
        xa, xb = systems[a], systems[b]
        share, dec = rule(a, b)
        human_diff = np.nanmean(xb["human"], 0) - np.nanmean(xa["human"], 0)
        for j, spec in enumerate(aspects):
            sep = dec[:, j] < 2
            direction = np.where(dec[:, j] == 0, 1, -1)
            fixed_sign = {"better": 1, "worse": -1}.get(fixed[(a, b)][j], 0)
            rows.append((label, spec.name, a, b, len(xa["ids"]), len(xb["ids"]), fixed[(a, b)][j],
                         human_fixed[(a, b)][j], human_diff[j], share[:, j].mean(), np.median(share[:, j]),
                         np.quantile(share[:, j], 0.9), *(np.mean(dec[:, j] == i) for i in range(4)),
                         np.mean(direction[sep] == fixed_sign) if sep.any() else np.nan,
                         np.mean(direction[sep] == np.sign(human_diff[j])) if sep.any() else np.nan,
                         (1 - share[:, j].mean()) * (len(xa["ids"]) + len(xb["ids"]))))
    return pd.DataFrame(rows, columns=["method", "aspect", "baseline", "candidate", "n_baseline", "n_candidate",
                                       "fixed_verdict", "human_verdict", "human_diff", "share_mean", "share_median",
                                       "share_p90", "better", "worse", "no_diff", "undecided", "agree_fixed",
                                       "agree_human_means", "conversations_saved"])


def _calibration(systems: dict, aspects, s: Settings, seed: int, method: str, by_order: bool,
                 label: str) -> pd.DataFrame:
    """Per system × aspect: how often the halves of one system are declared different (better or worse)."""
    scales = [(a.low, a.high) for a in aspects]
    rng = np.random.default_rng(seed + 2)
    rows = []
    for name, x in systems.items():
        perm = np.argsort(rng.random((s.calibration_splits, len(x["ids"]))), axis=1)
        h = len(x["ids"]) // 2
        rule = _rule({"a": x, "b": x}, {"a": perm[:, :h], "b": perm[:, h:2 * h]}, scales, s, method, by_order)
        wrong = rule("a", "b")[1] < 2
        rows += [(label, name, a.name, s.calibration_splits, wrong[:, j].mean()) for j, a in enumerate(aspects)]
        rows.append((label, name, "any aspect (family)", s.calibration_splits, wrong.any(axis=1).mean()))
    return pd.DataFrame(rows, columns=["method", "system", "aspect", "splits", "error"])


def _summary(cells: pd.DataFrame, usd: float) -> pd.DataFrame:
    """Per method × aspect and over all: the share needed (all cells; the cells the fixed-n verdict separates),
    decisions, agreement with the fixed-n verdict and the human means (of the orders that declared a direction, each
    cell weighted by them), $ saved."""
    def row(method: str, name: str, g: pd.DataFrame) -> tuple:
        sep = g[g["fixed_verdict"] != engine.VERDICTS[2]]
        w = g["better"] + g["worse"]

        def agree(col: str) -> float:
            return float((g[col].fillna(0) * w).sum() / w.sum()) if w.sum() else np.nan
        return (method, name, len(g), len(sep), sep["share_mean"].mean(), sep["share_median"].mean(),
                sep["share_p90"].mean(), g["share_mean"].mean(), float(w.mean()), float(g["no_diff"].mean()),
                float(sep["no_diff"].mean()), float(g["undecided"].mean()), agree("agree_fixed"),
                agree("agree_human_means"), float(g["conversations_saved"].sum() * usd),
                float((g["n_baseline"] + g["n_candidate"]).sum() * usd))
    rows = []
    for method, m in cells.groupby("method", sort=False):
        rows += [row(method, a, g) for a, g in m.groupby("aspect", sort=False)] + [row(method, "all aspects", m)]
    return pd.DataFrame(rows, columns=["method", "aspect", "cells", "fixed_separated", "share_separated_mean",
                                       "share_separated_median", "share_separated_p90", "share_all_mean",
                                       "declared_direction", "declared_no_diff", "no_diff_on_separated", "undecided",
                                       "agree_fixed", "agree_human_means", "usd_saved", "usd_all"])


def _calibration_summary(cal: pd.DataFrame, alpha: float) -> pd.DataFrame:
    """Pooled over the systems: the error per aspect and of the family, its binomial sd at max(error, α)."""
    rows = []
    for (method, aspect), g in cal.groupby(["method", "aspect"], sort=False):
        n = int(g["splits"].sum())
        rate = float((g["error"] * g["splits"]).sum() / n)
        mc = float(np.sqrt(max(rate, alpha) * (1 - max(rate, alpha)) / n))
        rows.append((method, aspect, len(g), n, rate, mc, rate <= alpha + 2 * mc))
    return pd.DataFrame(rows, columns=["method", "aspect", "systems", "sequences", "error", "mc_error", "within"])


def run(plan: Plan) -> ExperimentResult:
    s = own_settings(Settings, plan.cfg, "sequential")
    with experiment(plan) as ctx:
        start, seed = time.perf_counter(), ctx.settings.seed
        out = ctx.predict()
        systems = _systems(ctx, out.predictions)
        usd = s.reference_usd / s.reference_conversations / len(ctx.aspects)
        fixed, human_fixed = _fixed(systems, s, seed, "pred"), _fixed(systems, s, seed, "human")
        rng, scales = np.random.default_rng(seed + 1), [(a.low, a.high) for a in ctx.aspects]
        orders = {name: np.argsort(rng.random((s.orders, len(x["ids"]))), axis=1) for name, x in systems.items()}
        runs = [(m, False, m) for m in s.methods] + [(m, True, f"{m}, paired by order") for m in s.by_order]
        cells = pd.concat([_cells(systems, ctx.aspects, label, _rule(systems, orders, scales, s, m, o), fixed,
                                  human_fixed) for m, o, label in runs])
        cal = pd.concat([_calibration(systems, ctx.aspects, s, seed, m, o, label) for m, o, label in runs])
        summary, cal_summary = _summary(cells, usd), _calibration_summary(cal, s.alpha)
        return ctx.result(output=out, **_report(out.label, ctx.subset, s, usd, cells, summary, cal_summary),
                          metrics={**_metrics(summary, cal_summary), "runtime_s": time.perf_counter() - start})


def _metrics(summary: pd.DataFrame, cal: pd.DataFrame) -> dict[str, float]:
    out: dict[str, float] = {}
    for total in summary[summary["aspect"] == "all aspects"].itertuples():  # one row per method
        family = cal[(cal["method"] == total.method) & (cal["aspect"] == "any aspect (family)")].iloc[0]
        key = re.sub(r"[^\w-]+", "_", total.method)  # an MLflow metric name: "asymptotic, paired by order" has a comma
        out |= {f"summary.{key}.share_separated": float(total.share_separated_mean),
                f"summary.{key}.agree_fixed": float(total.agree_fixed),
                f"summary.{key}.split_half_error": float(family["error"]),
                f"{key}.usd_saved": float(total.usd_saved), f"{key}.share_all": float(total.share_all_mean),
                f"{key}.agree_human_means": float(total.agree_human_means)}
    return out


METHOD_NAMES = {"betting": "hedged-capital betting CS (Waudby-Smith & Ramdas 2024, Thm 3; exact)",
                "eb": "PrPl-EB CS (Waudby-Smith & Ramdas 2024, Thm 2; exact)",
                "asymptotic": "Gaussian-mixture asymptotic CS (Waudby-Smith et al. 2024; asymptotic only)"}
BY_ORDER = ("'paired by order': the i-th conversation scored of each system paired, one CS at α/7 for the "
            "differences (scale range doubled), until the smaller system runs out")


def _report(label: str, subset: str, s: Settings, usd: float, cells, summary, cal) -> dict:
    methods = "; ".join(f"{m}: {METHOD_NAMES[m]}" for m in dict.fromkeys([*s.methods, *s.by_order]))
    methods += f"; {BY_ORDER}" if s.by_order else ""
    src = (f"{label}; {subset}; 9 CRSs, 36 pairs × 7 aspects; {s.orders} random scoring orders of each system's "
           f"conversations (a pair's r-th order interleaves its systems' r-th orders), {s.batch} conversations of each "
           f"system per step; per aspect a confidence sequence for each system's mean at α/14 = {s.alpha / 14:.5f}, "
           f"the difference's interval from the two (the family, the pair's 7 aspects, at α = {s.alpha}); target ±"
           f"{s.target_diff} × the scale's range. Methods: {methods}. Reference price ${usd:.4f} per conversation × "
           f"aspect: ${s.reference_usd:g} / {s.reference_conversations} conversations / 7 aspects, the dry-run "
           "estimate of the paper setting at gpt-4o-mini list prices (docs/live_llm.md).")
    summ = (f"Share of the pair's conversations scored before an aspect stopped (1 if never decided; per cell its "
            f"mean, median and 90th percentile over the orders, averaged over the cells): on the cells "
            f"the fixed-n verdict separates (face compare's unpaired bootstrap-t on all conversations, Holm over the "
            f"pair's 7 aspects, {s.fixed_boot} resamples) and on all cells; the rates of the decisions over cells × "
            f"orders; agree_*: of the orders that declared a direction, the share in the fixed-n verdict's / the "
            f"human means' direction; no_diff_on_separated: the orders that declared no difference larger than the "
            f"target on a cell the fixed-n verdict separates; usd_saved: the conversations × aspects not scored over "
            f"the 36 pairs (mean over orders), in $; usd_all: scoring all of them. {src}")
    calib = (f"Error on random halves of one system (no true difference): the share of {s.calibration_splits} "
             f"halvings per system declared better or worse by the sequential rule (per aspect; family: any of the "
             f"7), pooled over the 9 systems; mc_error: binomial sd at max(error, α); within: error ≤ α + 2 mc_error. "
             f"{src}")
    note = f"Mean share of conversations not scored per aspect (1 − share), per method. {src}"
    totals = summary[summary["aspect"] == "all aspects"]
    return {"tables": {"summary": Table(summary, summ), "cells": Table(cells, f"Every pair × aspect. {summ}"),
                       "calibration": Table(cal, calib, 4)},
            "figures": {"figures/saving_per_aspect.png": lambda p: figures.saving_bars(summary, note, p)},
            "shown": [(f"Sequential comparison. {summ}", summary), (f"Calibration. {calib}", cal),
                      *(f"Headline ({r.method}): {r.share_separated_mean:.1%} of the conversations needed on the "
                        f"cells the fixed-n verdict separates; agreement with it {r.agree_fixed:.1%}"
                        for r in totals.itertuples())]}
