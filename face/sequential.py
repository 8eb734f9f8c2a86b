"""Anytime-valid confidence sequences for means of bounded scores, and the sequential comparison built on them.

A confidence sequence (CS) ``(C_t)`` covers the true mean at *every* time at once: ``P(∃ t: μ ∉ C_t) ≤ α``. It may
therefore be looked at after every batch and the scoring stopped whenever it decides — at any stopping time, even
one chosen by looking — without the error rising above α (a fixed-n interval checked after every batch does not
have this property: peeking inflates its error; tests/test_sequential.py shows by how much).

Three CSs, written here from the papers (``confseq``, the authors' library, cannot be installed without internet):

* ``eb``: the **predictable plug-in empirical-Bernstein** CS (PrPl-EB) of Waudby-Smith & Ramdas, "Estimating means
  of bounded random variables by betting", JRSSB 86(1), 2024, Theorem 2, eq. (13)–(15). For ``X_i ∈ [0, 1]``:
  ``μ̂_t = (1/2 + Σ_{i≤t} X_i) / (t + 1)``, ``σ̂²_t = (1/4 + Σ_{i≤t} (X_i − μ̂_i)²) / (t + 1)`` (``μ̂_0 = 1/2``,
  ``σ̂²_0 = 1/4``); the predictable bet ``λ_t = min(√(2 log(2/α) / (σ̂²_{t−1} t log(1 + t))), c)``, ``c = 1/2``;
  ``v_i = 4 (X_i − μ̂_{i−1})²``, ``ψ_E(λ) = (−log(1 − λ) − λ) / 4``;
  ``C_t = Σ λ_i X_i / Σ λ_i ± (log(2/α) + Σ v_i ψ_E(λ_i)) / Σ λ_i``. Closed form; exact.
* ``betting`` (the default): the **hedged-capital** CS of the same paper (Theorem 3), on a grid of candidate means;
  exact, tighter than PrPl-EB.
* ``asymptotic``: the Gaussian-mixture **asymptotic** CS of Waudby-Smith, Arbour, Sinha, Kennedy & Ramdas
  ("Time-uniform central limit theory and asymptotic confidence sequences", Ann. Statist. 2024): far narrower on
  few scores, valid only as the number of scores grows (its error on small samples is measured, not guaranteed).

Every CS is intersected with [0, 1] and with every earlier ``C_s`` (the running intersection of a CS is a CS).
Scores on a scale ``[lo, hi]`` are mapped to [0, 1]. A **paired** comparison (the same conversations scored by both
systems) has one CS for the mean of the differences ``b − a ∈ [−(hi − lo), hi − lo]``; an **unpaired** one a CS at
α/2 for each side's mean, and the difference's interval ``[L_b − U_a, U_b − L_a]`` (valid by the union bound: both
sides' sequences cover at every time with probability ≥ 1 − α) — or, ``by_order``, the i-th conversation scored of
each side paired (independent random orders make the pairs independent draws with mean μ_b − μ_a) and one CS at α
for their differences. Several aspects: each aspect at α / K (Bonferroni); a union bound over time-uniform events
keeps the family's error ≤ α at any stopping time, also when each aspect stops on its own.

Decisions per aspect: ``better`` / ``worse`` when the difference's interval excludes 0, ``no difference larger than
target`` when it lies inside ``±target_diff``, else ``undecided``.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
import pandas as pd

BET_CAP = 0.5  # c: the largest bet (the paper suggests 1/2 or 3/4)
T_STAR = 50  # the asymptotic CS is tightest near this many scores (CRSArena-Eval: ≈ 52 conversations per system)
CHUNK = 32  # rows of the betting CS computed at a time (memory: CHUNK × T × GRID floats, twice)
GRID = 200  # candidate means of the betting CS: a resolution of 1/200 of the scale's range
DECISIONS = ("better", "worse", "no difference larger than target", "undecided")


def _shift(x: np.ndarray, first: float) -> np.ndarray:
    """x moved one step later along the last axis, ``first`` in front (the value before the first observation)."""
    return np.concatenate([np.full(x.shape[:-1] + (1,), first), x[..., :-1]], axis=-1)


def _running(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(seen, x with 0 where not seen, observations so far ``t``, ``μ̂_t``, ``σ̂²_t``) along the last axis: the
    PrPl-EB's regularised running mean and variance (1/2 and 1/4 as a prior observation)."""
    x = np.asarray(x, float)
    seen = ~np.isnan(x)
    x0 = np.where(seen, x, 0.0)
    t = np.cumsum(seen, axis=-1)
    mu = (0.5 + np.cumsum(x0, axis=-1)) / (t + 1)
    return seen, x0, t, mu, (0.25 + np.cumsum(seen * (x0 - mu) ** 2, axis=-1)) / (t + 1)


def _bet(seen: np.ndarray, t: np.ndarray, var: np.ndarray, alpha: float) -> np.ndarray:
    """The predictable bet before its cap, ``λ̇_t = √(2 log(2/α) / (σ̂²_{t−1} t log(1 + t)))`` (0 where not seen)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(seen, np.sqrt(2 * np.log(2 / alpha) / (_shift(var, 0.25) * t * np.log1p(t))), 0.0)


def _intersected(known: np.ndarray | bool, lower: np.ndarray, upper: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The bounds clipped to [0, 1] (all of it where nothing is ``known`` yet), running-intersected."""
    lower = np.where(known, np.clip(lower, 0, 1), 0.0)
    upper = np.where(known, np.clip(upper, 0, 1), 1.0)
    return np.maximum.accumulate(lower, axis=-1), np.minimum.accumulate(upper, axis=-1)


def eb_sequence(x: np.ndarray, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """The PrPl-EB CS at level 1 − α for the mean of ``x ∈ [0, 1]`` along the last axis: (lower, upper) after each
    observation, running-intersected. NaN is an observation not made (the bounds stay where they were)."""
    seen, x0, t, mu, var = _running(x)
    lam = np.minimum(_bet(seen, t, var, alpha), BET_CAP)
    psi = (-np.log1p(-lam) - lam) / 4
    v = 4 * (x0 - _shift(mu, 0.5)) ** 2
    s_lam = np.cumsum(lam, axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        centre = np.cumsum(lam * x0, axis=-1) / s_lam
        half = (np.log(2 / alpha) + np.cumsum(seen * v * psi, axis=-1)) / s_lam
    return _intersected(s_lam > 0, centre - half, centre + half)


def betting_sequence(x: np.ndarray, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """The hedged-capital CS (Waudby-Smith & Ramdas 2024, Theorem 3, θ = 1/2) at level 1 − α for the mean of
    ``x ∈ [0, 1]`` along the last axis, on ``GRID`` + 1 candidate means ``m``: ``K^±_t(m) = max(½ Π (1 + λ⁺_i(m)
    (X_i − m)), ½ Π (1 − λ⁻_i(m)(X_i − m)))`` with the predictable bets ``λ⁺_i(m) = min(λ̇_i, c/m)``, ``λ⁻_i(m) =
    min(λ̇_i, c/(1 − m))``, ``λ̇_i = √(2 log(2/α) / (σ̂²_{i−1} i log(1 + i)))``; ``C_t = {m: K^±_t(m) < 1/α}``, its
    ends moved out by one grid step (the grid's resolution), running-intersected. NaN: not observed."""
    x = np.asarray(x, float)
    if x.size == 0:
        return x.copy(), x.copy()
    seen, x0, t, _, var = _running(x)
    rate = _bet(seen, t, var, alpha)
    m = np.linspace(0, 1, GRID + 1)
    rows = x0.reshape(-1, x0.shape[-1])
    inside = np.concatenate([_inside(rows[i:i + CHUNK], seen.reshape(rows.shape)[i:i + CHUNK],
                                     rate.reshape(rows.shape)[i:i + CHUNK], m, alpha)
                             for i in range(0, len(rows), CHUNK)])
    inside = inside.reshape(x.shape + (GRID + 1,))
    step = 1 / GRID
    any_in = inside.any(axis=-1)
    lower = np.where(any_in, m[inside.argmax(axis=-1)] - step, 1.0)  # empty (never at the truth, w.p. ≥ 1 − α)
    upper = np.where(any_in, m[GRID - inside[..., ::-1].argmax(axis=-1)] + step, 0.0)
    return _intersected(True, lower, upper)


def _inside(x0: np.ndarray, seen: np.ndarray, rate: np.ndarray, m: np.ndarray, alpha: float) -> np.ndarray:
    """rows × T × G: whether ``max(½ K⁺_t(m), ½ K⁻_t(m)) < 1/α`` (in place, a chunk of rows at a time: memory)."""
    with np.errstate(divide="ignore"):
        caps = BET_CAP / m, BET_CAP / (1 - m)
    dev = (x0[..., None] - m) * seen[..., None]
    logs = []
    for bet_cap in caps:  # log K⁺_t(m), then log K⁻_t(m): the deviations negated in place
        log = np.minimum(rate[..., None], bet_cap)
        log *= dev
        np.log1p(log, out=log)
        logs.append(np.cumsum(log, axis=-2, out=log))
        np.negative(dev, out=dev)
    return np.maximum(logs[0], logs[1], out=logs[0]) < np.log(2 / alpha)


def mean_sequence(x: np.ndarray, alpha: float, lo: float, hi: float, method: str = "betting"
                  ) -> tuple[np.ndarray, np.ndarray]:
    """The CS (lower, upper after each observation, last axis) for the mean of scores in ``[lo, hi]``:
    ``betting`` (hedged capital), ``eb`` (PrPl-EB) or ``asymptotic`` (valid only asymptotically)."""
    low, up = METHODS[method]((np.asarray(x, float) - lo) / (hi - lo), alpha)  # on [0, 1]
    return lo + (hi - lo) * low, lo + (hi - lo) * up


def asymptotic_sequence(x: np.ndarray, alpha: float, t_star: int = T_STAR) -> tuple[np.ndarray, np.ndarray]:
    """The Gaussian-mixture asymptotic CS (Waudby-Smith, Arbour, Sinha, Kennedy & Ramdas, "Time-uniform central
    limit theory and asymptotic confidence sequences", Ann. Statist. 2024, Theorem 2.2) at level 1 − α for the mean
    of ``x ∈ [0, 1]``: ``μ̂_t ± σ̂_t √(2 (t ρ² + 1) / (t² ρ²) · log(√(t ρ² + 1) / α))``, ρ chosen to be tightest at
    ``t_star`` (``ρ² = (−2 log α + log(−2 log α + 1)) / t_star``). Valid only asymptotically. Deviation: σ̂²_t is the
    PrPl-EB's regularised variance ``(1/4 + Σ (X_i − μ̂_i)²) / (t + 1)`` (the largest variance of [0, 1] as a prior
    observation), so that the first few scores, alike by chance, do not give a zero width. NaN: not observed."""
    _, x0, t, _, var = _running(x)
    rho2 = (-2 * np.log(alpha) + np.log(-2 * np.log(alpha) + 1)) / t_star
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = np.cumsum(x0, axis=-1) / t
        half = np.sqrt(var * 2 * (t * rho2 + 1) / (t * t * rho2) * np.log(np.sqrt(t * rho2 + 1) / alpha))
    return _intersected(t > 0, mean - half, mean + half)


METHODS: dict[str, Callable[[np.ndarray, float], tuple[np.ndarray, np.ndarray]]] = {
    "betting": betting_sequence, "eb": eb_sequence, "asymptotic": asymptotic_sequence}


def interleave(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray], batch: int
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Both sides scored in turn, ``batch`` conversations of each per step (a side that runs out stops), from each
    side's CS (lower, upper after each of its conversations, last axis; each at α/2 for a difference at α): the
    difference's CS ``[L_b − U_a, U_b − L_a]`` after every step, and the conversations of each side scored by then."""
    n_a, n_b = a[0].shape[-1], b[0].shape[-1]
    steps = np.arange(1, -(-max(n_a, n_b) // batch) + 1)
    seen_a, seen_b = np.minimum(steps * batch, n_a), np.minimum(steps * batch, n_b)
    ia, ib = seen_a - 1, seen_b - 1
    return b[0][..., ib] - a[1][..., ia], b[1][..., ib] - a[0][..., ia], seen_a, seen_b


def order_paired_steps(a: np.ndarray, b: np.ndarray, alpha: float, lo: float, hi: float, batch: int,
                       method: str = "betting") -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Unpaired sides paired by scoring order: the i-th conversation scored of each system form a pair, one CS at α
    for the mean of ``b_i − a_i`` (the pairs of two independent random orders are independent draws with mean
    μ_b − μ_a, whatever the conversations' ids). ``batch`` pairs per step, until the smaller side runs out."""
    n = min(a.shape[-1], b.shape[-1])
    low, up = mean_sequence(b[..., :n] - a[..., :n], alpha, lo - hi, hi - lo, method)
    seen = np.minimum(np.arange(1, -(-n // batch) + 1) * batch, n)
    return low[..., seen - 1], up[..., seen - 1], seen, seen


def decide(lower: np.ndarray, upper: np.ndarray, target: float | None) -> np.ndarray:
    """Per interval of the difference (candidate − baseline): the index into ``DECISIONS``."""
    lower, upper = np.asarray(lower, float), np.asarray(upper, float)
    inside = (lower > -target) & (upper < target) if target else np.zeros(np.shape(lower), bool)
    return np.where(lower > 0, 0, np.where(upper < 0, 1, np.where(inside, 2, 3)))


def stopping(lower: np.ndarray, upper: np.ndarray, target: float | None) -> tuple[np.ndarray, np.ndarray]:
    """The first step (last axis) at which each sequence is decided and the decision there; never decided: the last
    step and ``undecided``."""
    d = decide(lower, upper, target)
    decided = d < 3
    first = np.where(decided.any(axis=-1), decided.argmax(axis=-1), d.shape[-1] - 1)
    return first, np.take_along_axis(d, first[..., None], axis=-1)[..., 0]


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
    method: str = "betting"
    by_order: bool = False  # unpaired: pair the sides by scoring order (one CS at α) instead of two CSs at α/2
    a: list[np.ndarray] = field(default_factory=list, repr=False)
    b: list[np.ndarray] = field(default_factory=list, repr=False)

    def update(self, a_batch: np.ndarray, b_batch: np.ndarray) -> pd.DataFrame:
        k = len(self.aspects)
        a_batch, b_batch = np.asarray(a_batch, float).reshape(-1, k), np.asarray(b_batch, float).reshape(-1, k)
        if self.paired and len(a_batch) != len(b_batch):
            raise ValueError(f"paired batches differ in length: {len(a_batch)} and {len(b_batch)}")
        for k, (lo, hi) in enumerate(self.scales):  # a score off its scale would void the sequence's guarantee
            bad = [float(v) for v in (*a_batch[:, k], *b_batch[:, k]) if not np.isnan(v) and not lo <= v <= hi]
            if bad:
                raise ValueError(f"{self.aspects[k]}: score(s) {bad[:3]} outside the scale [{lo}, {hi}]")
        self.a.append(a_batch)
        self.b.append(b_batch)
        return self.status()

    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """(lower, upper) of the difference per aspect, now."""
        a, b = self.scores()
        lo, hi = np.array(self.scales, float).T[..., None]  # a row per aspect
        level = self.alpha / len(self.aspects)
        if self.paired or self.by_order:
            n = min(len(a), len(b))
            return _last(mean_sequence((b[:n] - a[:n]).T, level, lo - hi, hi - lo, self.method), lo - hi, hi - lo)
        la, ua = _last(mean_sequence(a.T, level / 2, lo, hi, self.method), lo, hi)
        lb, ub = _last(mean_sequence(b.T, level / 2, lo, hi, self.method), lo, hi)
        return lb - ua, ub - la

    def scores(self) -> tuple[np.ndarray, np.ndarray]:
        """Every score seen of each side (rows: conversations, columns: aspects)."""
        empty = np.empty((0, len(self.aspects)))
        return np.vstack([empty, *self.a]), np.vstack([empty, *self.b])

    def status(self) -> pd.DataFrame:
        lower, upper = self.bounds()
        a, b = self.scores()
        return pd.DataFrame({"aspect": list(self.aspects), "n_baseline": (~np.isnan(a)).sum(axis=0),
                             "n_candidate": (~np.isnan(b)).sum(axis=0), "ci_low": lower, "ci_high": upper,
                             "decision": [DECISIONS[i] for i in decide(lower, upper, self.target_diff)]})

    def done(self) -> bool:
        return bool((decide(*self.bounds(), self.target_diff) < 3).all())


def _last(bounds: tuple[np.ndarray, np.ndarray], lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row's bounds after its last observation (before any: the whole range ``[lo, hi]`` of the row)."""
    lower, upper = bounds
    return (lower[:, -1], upper[:, -1]) if lower.shape[-1] else (lo[:, 0], hi[:, 0])


def conversations_needed(low: float, high: float, n: int, target: float | None = None, most: int = 10**9) -> float:
    """An estimate of the conversations per side after which an undecided interval ``[low, high]`` of the difference,
    seen after ``n`` per side, would decide — *if* its centre stayed where it is and its half-width ``h`` shrank like
    ``√(log(1 + n) / n)`` (the rate of these sequences' widths, up to constants): the smallest ``m ≥ n`` with
    ``h √(log(1 + m) / m) / √(log(1 + n) / n) < g``, ``g`` the largest half-width that decides (``|centre|``: 0
    excluded; with a target, also ``target − |centre|``: inside ±target). ``inf``: no width decides (the centre at 0
    and no target) or more than ``most`` would be needed. An extrapolation, not a bound."""
    centre, half = (low + high) / 2, (high - low) / 2
    goal = max(abs(centre), target - abs(centre) if target else 0.0)
    if goal <= 0 or n < 1:
        return math.inf

    def decides(m: int) -> bool:
        return half * math.sqrt(math.log1p(m) / m) < goal * math.sqrt(math.log1p(n) / n)

    if decides(n):
        return n
    if most < n or not decides(most):
        return math.inf
    return n + bisect.bisect_left(range(n, most + 1), True, key=decides)  # the width shrinks as m grows
