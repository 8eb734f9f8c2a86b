"""Anytime-valid confidence sequences for means of bounded scores, and the sequential comparison built on them.

A confidence sequence (CS) ``(C_t)`` covers the true mean at *every* time at once: ``P(∃ t: μ ∉ C_t) ≤ α``. It may
therefore be looked at after every batch and the scoring stopped whenever it decides — at any stopping time, even
one chosen by looking — without the error rising above α (a fixed-n interval checked after every batch does not
have this property: peeking inflates its error; tests/test_sequential.py shows by how much).

The CS is the **predictable plug-in empirical-Bernstein** sequence (PrPl-EB) of Waudby-Smith & Ramdas, "Estimating
means of bounded random variables by betting", JRSSB 86(1), 2024, Theorem 2 and eq. (13)–(15); written here from
the paper (``confseq``, its authors' library, cannot be installed without internet). For ``X_i ∈ [0, 1]``:

* ``μ̂_t = (1/2 + Σ_{i≤t} X_i) / (t + 1)``, ``σ̂²_t = (1/4 + Σ_{i≤t} (X_i − μ̂_i)²) / (t + 1)`` (``μ̂_0 = 1/2``,
  ``σ̂²_0 = 1/4``);
* the predictable bet ``λ_t = min(√(2 log(2/α) / (σ̂²_{t−1} t log(1 + t))), c)``, ``c = 1/2``;
* ``v_i = 4 (X_i − μ̂_{i−1})²``, ``ψ_E(λ) = (−log(1 − λ) − λ) / 4``;
* ``C_t = Σ λ_i X_i / Σ λ_i ± (log(2/α) + Σ v_i ψ_E(λ_i)) / Σ λ_i``, intersected with [0, 1] and with every earlier
  ``C_s`` (the running intersection of a CS is a CS).

Scores on a scale ``[lo, hi]`` are mapped to [0, 1]. A **paired** comparison (the same conversations scored by both
systems) has one CS for the mean of the differences ``b − a ∈ [−(hi − lo), hi − lo]``; an **unpaired** one a CS at
α/2 for each side's mean, and the difference's interval ``[L_b − U_a, U_b − L_a]`` (valid by the union bound: both
sides' sequences cover at every time with probability ≥ 1 − α). Several aspects: each aspect at α / K
(Bonferroni); a union bound over time-uniform events keeps the family's error ≤ α at any stopping time, also when
each aspect stops on its own. Not done: the hedged-capital (betting) CS of the same paper, tighter but with a root
search per step.

Decisions per aspect: ``better`` / ``worse`` when the difference's interval excludes 0, ``no difference larger than
target`` when it lies inside ``±target_diff``, else ``undecided``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import pandas as pd

BET_CAP = 0.5  # c: the largest bet (the paper suggests 1/2 or 3/4)
DECISIONS = ("better", "worse", "no difference larger than target", "undecided")


def _shift(x: np.ndarray, first: float) -> np.ndarray:
    """x moved one step later along the last axis, ``first`` in front (the value before the first observation)."""
    return np.concatenate([np.full(x.shape[:-1] + (1,), first), x[..., :-1]], axis=-1)


def eb_sequence(x: np.ndarray, alpha: float, cap: float = BET_CAP) -> tuple[np.ndarray, np.ndarray]:
    """The PrPl-EB CS at level 1 − α for the mean of ``x ∈ [0, 1]`` along the last axis: (lower, upper) after each
    observation, running-intersected. NaN is an observation not made (the bounds stay where they were)."""
    x = np.asarray(x, float)
    seen = ~np.isnan(x)
    x0 = np.where(seen, x, 0.0)
    t = np.cumsum(seen, axis=-1)
    mu = (0.5 + np.cumsum(x0, axis=-1)) / (t + 1)
    var = (0.25 + np.cumsum(seen * (x0 - mu) ** 2, axis=-1)) / (t + 1)
    mu_prev, var_prev = _shift(mu, 0.5), _shift(var, 0.25)
    log_term = np.log(2 / alpha)
    with np.errstate(divide="ignore", invalid="ignore"):
        lam = np.minimum(np.sqrt(2 * log_term / (var_prev * t * np.log1p(t))), cap)
    lam = np.where(seen, lam, 0.0)
    psi = (-np.log1p(-lam) - lam) / 4
    v = 4 * (x0 - mu_prev) ** 2
    s_lam = np.cumsum(lam, axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        centre = np.cumsum(lam * x0, axis=-1) / s_lam
        half = (log_term + np.cumsum(seen * v * psi, axis=-1)) / s_lam
    lower = np.where(s_lam > 0, np.clip(centre - half, 0, 1), 0.0)
    upper = np.where(s_lam > 0, np.clip(centre + half, 0, 1), 1.0)
    return np.maximum.accumulate(lower, axis=-1), np.minimum.accumulate(upper, axis=-1)


def mean_sequence(x: np.ndarray, alpha: float, lo: float, hi: float) -> tuple[np.ndarray, np.ndarray]:
    """The CS (lower, upper after each observation, last axis) for the mean of scores in ``[lo, hi]``."""
    low, up = eb_sequence((np.asarray(x, float) - lo) / (hi - lo), alpha)
    return lo + (hi - lo) * low, lo + (hi - lo) * up


def paired_sequence(d: np.ndarray, alpha: float, width: float) -> tuple[np.ndarray, np.ndarray]:
    """The CS for the mean of paired differences ``d ∈ [−width, width]`` (width = hi − lo of the scale)."""
    return mean_sequence(d, alpha, -width, width)


def unpaired_steps(a: np.ndarray, b: np.ndarray, alpha: float, lo: float, hi: float, batch: int
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Both sides scored in turn, ``batch`` conversations of each per step (a side that runs out stops): the
    difference's CS (b − a, each side at α/2) after every step, last axis, and the conversations of each side
    scored by then. ``a``: (..., n_a) scores in scoring order, ``b``: (..., n_b)."""
    n_a, n_b = a.shape[-1], b.shape[-1]
    steps = np.arange(1, -(-max(n_a, n_b) // batch) + 1)
    seen_a, seen_b = np.minimum(steps * batch, n_a), np.minimum(steps * batch, n_b)
    la, ua = mean_sequence(a, alpha / 2, lo, hi)
    lb, ub = mean_sequence(b, alpha / 2, lo, hi)
    ia, ib = seen_a - 1, seen_b - 1
    return lb[..., ib] - ua[..., ia], ub[..., ib] - la[..., ia], seen_a, seen_b


def decide(lower: np.ndarray, upper: np.ndarray, target: float | None) -> np.ndarray:
    """Per interval of the difference (candidate − baseline): the index into ``DECISIONS``."""
    lower, upper = np.asarray(lower, float), np.asarray(upper, float)
    inside = (lower > -target) & (upper < target) if target else np.zeros(np.shape(lower), bool)
    return np.where(lower > 0, 0, np.where(upper < 0, 1, np.where(inside, 2, 3)))


@dataclass
class SequentialComparison:
    """Candidate (b) − baseline (a) per aspect, fed batch by batch: ``update(a_batch, b_batch)`` with each batch's
    scores per conversation (rows) and aspect (columns; NaN: not scored), paired row by row when ``paired``.
    Every aspect at α / K; its bounds and decision after each update (``status``). The bounds are recomputed from
    every score seen (one formula for the live loop and the vectorised experiment)."""

    aspects: Sequence[str]
    scales: Sequence[tuple[float, float]]
    alpha: float = 0.05
    target_diff: float | None = None
    paired: bool = False
    a: list[np.ndarray] = field(default_factory=list, repr=False)
    b: list[np.ndarray] = field(default_factory=list, repr=False)

    def update(self, a_batch: np.ndarray, b_batch: np.ndarray) -> pd.DataFrame:
        k = len(self.aspects)
        a_batch, b_batch = np.asarray(a_batch, float).reshape(-1, k), np.asarray(b_batch, float).reshape(-1, k)
        if self.paired and len(a_batch) != len(b_batch):
            raise ValueError(f"paired batches differ in length: {len(a_batch)} and {len(b_batch)}")
        self.a.append(a_batch)
        self.b.append(b_batch)
        return self.status()

    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """(lower, upper) of the difference per aspect, now."""
        a, b = np.vstack([np.empty((0, len(self.aspects))), *self.a]), np.vstack(
            [np.empty((0, len(self.aspects))), *self.b])
        level = self.alpha / len(self.aspects)
        lows, ups = [], []
        for k, (lo, hi) in enumerate(self.scales):
            if self.paired:
                low, up = _last(*paired_sequence(b[:, k] - a[:, k], level, hi - lo), -(hi - lo), hi - lo)
            else:
                la, ua = _last(*mean_sequence(a[:, k], level / 2, lo, hi), lo, hi)
                lb, ub = _last(*mean_sequence(b[:, k], level / 2, lo, hi), lo, hi)
                low, up = lb - ua, ub - la
            lows.append(low)
            ups.append(up)
        return np.array(lows), np.array(ups)

    def status(self) -> pd.DataFrame:
        lower, upper = self.bounds()
        n_a = [int((~np.isnan(np.vstack(self.a)[:, k])).sum()) if self.a else 0 for k in range(len(self.aspects))]
        n_b = [int((~np.isnan(np.vstack(self.b)[:, k])).sum()) if self.b else 0 for k in range(len(self.aspects))]
        return pd.DataFrame({"aspect": list(self.aspects), "n_baseline": n_a, "n_candidate": n_b, "ci_low": lower,
                             "ci_high": upper, "decision": [DECISIONS[i] for i in decide(lower, upper,
                                                                                         self.target_diff)]})

    def done(self) -> bool:
        return bool((decide(*self.bounds(), self.target_diff) < 3).all())


def _last(lower: np.ndarray, upper: np.ndarray, lo: float, hi: float) -> tuple[float, float]:
    """The bounds after the last observation (before any: the whole range)."""
    return (float(lower[-1]), float(upper[-1])) if len(lower) else (lo, hi)
