"""The statistics of ``face compare``: per-system means and pairwise differences with bootstrap intervals.

The resampling unit is the **conversation**. A system's score for an aspect is the mean over its scored items (a
turn-level aspect: every scored assistant turn; a dialogue-level aspect: every scored conversation), i.e. the ratio
``Σ_c S_c / Σ_c N_c`` of per-conversation sums ``S_c`` and counts ``N_c``. A bootstrap replicate draws conversations
with replacement (``counts[b, c]``: how often conversation c was drawn in replicate b), every turn of a drawn
conversation coming along, and recomputes the ratio: ``(counts @ S) / (counts @ N)``. Everything is a matrix product
over the B × C count matrix, for all aspects at once.

* Means: the percentile interval of the replicate means (conversations resampled within the system).
* Differences (candidate − baseline): the **studentized (bootstrap-t)** test. ``t = d / se`` with the plug-in
  standard error of the ratio estimator (linearised: ``z_c = (S_c − m N_c) / N̄``, ``se² = Σ z_c² / (C (C − 1))``);
  each replicate gives ``t* = (d* − d) / se*``. Two-sided p-value ``(1 + #{|t*| ≥ |t|}) / (B + 1)`` (never 0:
  its resolution is 1 / (B + 1)), interval ``d ± q · se`` with ``q`` the ``confidence`` quantile of ``|t*|``: the
  interval excludes 0 exactly when p < 1 − confidence (up to the resolution). Paired (the same conversation ids in
  both runs): one count matrix over the shared conversations, both sides resampled together, ``z_c`` the difference
  of the two sides' linearised values. Unpaired: each side resampled on its own, ``se² = se_a² + se_b²``.
* Holm's step-down adjustment of a family of p-values; the smallest difference the verdict detects at a given power,
  and the conversations per system it needs for a target difference, both sized for the Holm-adjusted verdict of a
  family of m tests: its first step tests at α / m (Bonferroni's level, which Holm never falls below), so the
  critical value is Student's t quantile ``t_{1 − α/(2m), n − 1}`` — and never below the interval's own
  studentized quantile — plus ``t_{power, n − 1}``.
* Ranks with intervals and P(X beats Y) from the replicate means of several systems.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import numpy as np

ZERO = 1e-9  # a standard error below this × the size of the differences is zero (float noise)


def one_thread() -> contextlib.AbstractContextManager:
    """BLAS on one thread while the bootstrap runs: its products are thin (B × C by C × K, C ≈ 50) and threads only
    contend: 12 600 × 26 by 26 × 7 took 27 ms on two busy cores with OpenBLAS's 2 threads, 1.4 ms on one."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # not installed: BLAS as configured
        return contextlib.nullcontext()
    return threadpool_limits(1, user_api="blas")


@dataclass(frozen=True)
class Units:
    """One system's scores per conversation (rows, ids ``ids``) for K aspects (columns): ``sums[c, k]`` the sum of
    conversation c's scores for aspect k, ``counts[c, k]`` how many scores (0: none for that aspect)."""

    ids: np.ndarray
    sums: np.ndarray
    counts: np.ndarray

    def take(self, rows: np.ndarray) -> Units:
        return Units(self.ids[rows], self.sums[rows], self.counts[rows])

    def __len__(self) -> int:
        return len(self.ids)


@dataclass(frozen=True)
class Moments:
    """Point mean and plug-in variance of the mean per aspect (K), and the same for every replicate (B × K)."""

    mean: np.ndarray
    var: np.ndarray
    boot_mean: np.ndarray
    boot_var: np.ndarray


@dataclass(frozen=True)
class PairTest:
    """candidate − baseline per aspect (K): difference, its interval, p-value, the studentized statistic t = diff /
    plug-in se (Welch's t unpaired, the paired t on paired dialogue scores) and that plug-in se."""

    diff: np.ndarray
    ci_low: np.ndarray
    ci_high: np.ndarray
    p_value: np.ndarray
    t: np.ndarray
    se: np.ndarray


def _ratio(w: np.ndarray, s: np.ndarray, n: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per weight row: the ratio mean m = w·S / w·N, the weighted total w·N and Σ w (S − m N)² (per aspect)."""
    k = s.shape[1]
    prod = w @ np.hstack([s, n, s * s, s * n, n * n])  # one product for the five sums
    sw, nw, ss, sn, nn = (prod[:, i * k:(i + 1) * k] for i in range(5))
    with np.errstate(invalid="ignore", divide="ignore"):
        m = sw / nw
    q = ss - 2 * m * sn + m * m * nn
    return m, nw, np.maximum(q, 0.0)


def _var(q: np.ndarray, nw: np.ndarray, c: int) -> np.ndarray:
    """Plug-in variance of a ratio mean over c conversations: Σ z² / (c (c − 1)), z = (S − m N) / (nw / c)."""
    if c < 2:
        return np.full(np.shape(q), np.nan)
    with np.errstate(invalid="ignore", divide="ignore"):
        return q * c / ((c - 1) * nw * nw)


def moments(units: Units, counts: np.ndarray) -> Moments:
    """The system's mean and its variance, on the data and in every replicate of ``counts`` (B × C)."""
    c = len(units)
    m, nw, q = _ratio(np.ones((1, c)), units.sums, units.counts)
    bm, bnw, bq = _ratio(counts, units.sums, units.counts)
    return Moments(m[0], _var(q, nw, c)[0], bm, _var(bq, bnw, c))


def _paired_var(w: np.ndarray, a: Units, b: Units) -> tuple[np.ndarray, np.ndarray]:
    """(m_b − m_a, plug-in variance of that difference) per weight row, a and b resampled together."""
    c = len(a)
    ma, nwa, qa = _ratio(w, a.sums, a.counts)
    mb, nwb, qb = _ratio(w, b.sums, b.counts)
    # Σ w (S_a − m_a N_a)(S_b − m_b N_b) per weight row and aspect
    k = a.sums.shape[1]
    prod = w @ np.hstack([a.sums * b.sums, a.sums * b.counts, a.counts * b.sums, a.counts * b.counts])
    ss, sn, ns, nn = (prod[:, i * k:(i + 1) * k] for i in range(4))
    qab = ss - mb * sn - ma * ns + ma * mb * nn
    if c < 2:
        return mb - ma, np.full(np.shape(ma), np.nan)
    with np.errstate(invalid="ignore", divide="ignore"):
        s = qa / (nwa * nwa) + qb / (nwb * nwb) - 2 * qab / (nwa * nwb)
    return mb - ma, np.maximum(s, 0.0) * c / (c - 1)


def studentized(d: np.ndarray, v: np.ndarray, boot_d: np.ndarray, boot_v: np.ndarray,
                confidence: float) -> PairTest:
    """The bootstrap-t p-value and interval of ``d`` (K) from its plug-in variance ``v`` and the replicates'
    differences and variances (B × K). A standard error is zero below float noise relative to the differences'
    size (``ZERO``): a constant shift of every conversation leaves a variance of ~1e-30, not 0. Zero se: t = 0 if
    the difference is zero too, else infinite (a replicate likewise, its deviation from ``d`` in place of ``d``)."""
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        scale = np.fmax(np.abs(d), np.nanmax(np.abs(boot_d), axis=0, initial=0.0))
        eps = ZERO * scale
        dev = boot_d - d
        v_zero = ~(v > eps * eps)
        t = np.where(v_zero, np.where(np.abs(d) <= eps, 0.0, np.inf), d / np.sqrt(v))
        tb = np.where(boot_v > eps * eps, dev / np.sqrt(boot_v), np.where(np.abs(dev) <= eps, 0.0, np.inf))
    tb = np.where(np.isnan(boot_d), np.nan, tb)
    ok = np.isfinite(d) & ~np.isnan(v)
    b = np.sum(~np.isnan(tb), axis=0)
    at = np.abs(t)
    hits = np.sum(np.abs(tb) >= np.where(np.isinf(at), np.inf, at * (1 - 1e-12)), axis=0)  # ties count against it
    p = np.where(ok & (b > 0), (1 + hits) / (b + 1), np.nan)
    q = np.array([np.nanquantile(np.abs(tb[:, k]), confidence, method="higher") if ok[k] and b[k] else np.nan
                  for k in range(len(d))])
    with np.errstate(invalid="ignore"):
        half = np.where(v_zero, 0.0, q * np.sqrt(np.where(v_zero, 0.0, v)))
    se = np.where(ok, np.sqrt(np.where(v_zero, 0.0, v)), np.nan)
    return PairTest(d, np.where(ok, d - half, np.nan), np.where(ok, d + half, np.nan), p, np.where(ok, t, np.nan), se)


def unpaired(a: Moments, b: Moments, confidence: float) -> PairTest:
    """candidate (b) − baseline (a), each resampled on its own (their replicates drawn independently)."""
    return studentized(b.mean - a.mean, a.var + b.var, b.boot_mean - a.boot_mean, a.boot_var + b.boot_var,
                       confidence)


def paired(a: Units, b: Units, counts: np.ndarray, confidence: float) -> PairTest:
    """candidate (b) − baseline (a) on the same conversations (rows aligned), resampled together by ``counts``."""
    d, v = _paired_var(np.ones((1, len(a))), a, b)
    bd, bv = _paired_var(counts, a, b)
    return studentized(d[0], v[0], bd, bv, confidence)


def holm(p: np.ndarray) -> np.ndarray:
    """Holm's step-down adjusted p-values (NaN stays NaN and is not counted in the family): the i-th smallest
    of m p-values becomes max over j ≤ i of min(1, (m − j + 1) p_(j))."""
    p = np.asarray(p, float)
    out = np.full(p.shape, np.nan)
    ok = ~np.isnan(p)
    vals = p[ok]
    m = len(vals)
    order = np.argsort(vals, kind="stable")
    out[np.flatnonzero(ok)[order]] = np.minimum(1.0, np.maximum.accumulate((m - np.arange(m)) * vals[order]))
    return out


def _t(q: float, df: np.ndarray | float) -> np.ndarray:
    """Student's t quantile ``q`` at ``df`` degrees of freedom (NaN below 1)."""
    from scipy.stats import t as student

    df = np.asarray(df, float)
    return np.where(df >= 1, student.ppf(q, np.where(df >= 1, df, 1.0)), np.nan)


def detectable(se: np.ndarray, df: np.ndarray, alpha: float, power: float, n_tests: int,
               interval_q: np.ndarray) -> np.ndarray:
    """The smallest difference the Holm-adjusted verdict over ``n_tests`` detects with probability ``power``, from
    the difference's standard error: ``(crit + t_{power, df}) · se``, ``crit`` the larger of t_{1 − α/(2m), df} and
    the interval's studentized quantile ``interval_q`` (half-width / se): never below the interval's half-width."""
    crit = np.fmax(_t(1 - alpha / (2 * n_tests), df), np.asarray(interval_q, float))
    return (crit + _t(power, df)) * np.asarray(se, float)


def needed(per_conversation_var: np.ndarray, target: float, alpha: float, power: float, n_tests: int
           ) -> np.ndarray:
    """Conversations per system for the Holm-adjusted verdict over ``n_tests`` to detect ``target`` with
    probability ``power``: the smallest n ≥ 2 with n ≥ ((t_{1 − α/(2m), n − 1} + t_{power, n − 1}) · σ / target)²,
    where σ² is the variance of one conversation's contribution to the difference (paired: of the difference;
    unpaired: the sum of both systems'). The right side falls as n grows, so the n that satisfy it are all those
    from the smallest on."""
    def enough(n: int, v: float) -> bool:
        return n >= (float(_t(1 - alpha / (2 * n_tests), n - 1) + _t(power, n - 1)) / target) ** 2 * v

    var = np.asarray(per_conversation_var, float)
    out = np.full(var.shape, np.nan)
    for k, v in np.ndenumerate(var):
        if not np.isfinite(v):
            continue
        lo, hi = 1, 2  # enough(hi), not enough(lo) once the doubling stops
        while not enough(hi, v):
            lo, hi = hi, 2 * hi
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if enough(mid, v) else (mid, hi)
        out[k] = hi
    return out


def ranks(boot_means: np.ndarray) -> np.ndarray:
    """Competition ranks (1 = highest mean) of S systems in every row of a B × S matrix (NaN: ranked last)."""
    x = np.where(np.isnan(boot_means), -np.inf, boot_means)
    return 1 + (x[:, None, :] > x[:, :, None]).sum(axis=2)


def beats(boot_means: np.ndarray) -> np.ndarray:
    """S × S: P(row system's mean > column system's mean) over the replicates, ties counted half."""
    x = boot_means
    gt = (x[:, :, None] > x[:, None, :]).mean(axis=0)
    eq = (x[:, :, None] == x[:, None, :]).mean(axis=0)
    out = gt + 0.5 * eq
    np.fill_diagonal(out, np.nan)
    return out


def boot_size(n_tests: int, alpha: float, minimum: int = 10_000) -> int:
    """Replicates enough for Holm over ``n_tests`` p-values: the smallest possible p, 1 / (B + 1), adjusted by Holm
    (× n_tests), must be at most α / 10, else a family of many tests could never reject."""
    return max(minimum, math.ceil(10 * n_tests / alpha))
