"""face.sequential: the PrPl-EB confidence sequence against the paper's definitions worked by hand, its time-uniform
coverage by simulation, and the proof that peeking is handled (a fixed-n interval checked after every batch rejects
far more often than α; the sequential rule at most α)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from face.sequential import (
    DECISIONS,
    SequentialComparison,
    asymptotic_sequence,
    betting_sequence,
    decide,
    eb_sequence,
    interleave,
    mean_sequence,
    order_paired_steps,
    stopping,
)


def unpaired_steps(a, b, alpha, lo, hi, batch, method):
    """The unpaired rule as the experiment runs it: each side's CS at α/2, interleaved batch by batch."""
    return interleave(mean_sequence(a, alpha / 2, lo, hi, method), mean_sequence(b, alpha / 2, lo, hi, method), batch)


def test_constant_half_sequence_is_one_half_plus_minus_log_over_c_t():
    # X_i = 1/2: μ̂_t = 1/2, X_i − μ̂_i = 0, σ̂²_t = (1/4)/(t+1), v_i = 0; λ_t = min(√(8 log(2/α) / log(1+t)), 1/2)
    # = 1/2 for t ≤ 100; so C_t = 1/2 ± log(2/α) / (t/2): α = 0.05, t = 100: ± 3.68888/50 = ± 0.0737776
    low, up = eb_sequence(np.full(100, 0.5), 0.05)
    assert up[-1] - 0.5 == pytest.approx(math.log(40) / 50, abs=1e-12)
    assert 0.5 - low[-1] == pytest.approx(math.log(40) / 50, abs=1e-12)
    assert up[19] - 0.5 == pytest.approx(math.log(40) / 10, abs=1e-12)  # t = 20


def test_two_observations_worked_by_hand():
    # X = (1, 0), α = 0.1, c = 1/2. t=1: μ̂_0 = 1/2, σ̂²_0 = 1/4, λ_1 = min(√(2 log 20 / (1/4 · 1 · log 2)), 1/2) = 1/2;
    # v_1 = 4 (1 − 1/2)² = 1; μ̂_1 = (1/2 + 1)/2 = 3/4; σ̂²_1 = (1/4 + (1 − 3/4)²)/2 = 5/32.
    # t=2: λ_2 = min(√(2 log 20 / (5/32 · 2 · log 3)), 1/2) = 1/2 (√(5.99/0.343) ≫ 1/2); v_2 = 4 (0 − 3/4)² = 9/4.
    # ψ(1/2) = (log 2 − 1/2)/4. Centre (1/2·1 + 1/2·0)/1 = 1/2; half = (log 20 + (1 + 9/4) ψ) / 1.
    psi = (math.log(2) - 0.5) / 4
    half = math.log(20) + 3.25 * psi
    low, up = eb_sequence(np.array([1.0, 0.0]), 0.1)
    assert (low[1], up[1]) == (pytest.approx(max(0.0, 0.5 - half)), pytest.approx(min(1.0, 0.5 + half)))
    # the same after 60 alternations of (1, 0) checked against a plain loop over the paper's formulas
    x = np.tile([1.0, 0.0], 30)
    mu, var, s_lam, s_lx, s_vpsi = 0.5, 0.25, 0.0, 0.0, 0.0
    total, sq = 0.0, 0.0
    for t, xi in enumerate(x, start=1):
        lam = min(math.sqrt(2 * math.log(20) / (var * t * math.log(1 + t))), 0.5)
        s_vpsi += 4 * (xi - mu) ** 2 * (-math.log(1 - lam) - lam) / 4
        s_lam, s_lx = s_lam + lam, s_lx + lam * xi
        total += xi
        mu = (0.5 + total) / (t + 1)
        sq += (xi - mu) ** 2
        var = (0.25 + sq) / (t + 1)
    low, up = eb_sequence(x, 0.1)
    h = (math.log(20) + s_vpsi) / s_lam
    # the running intersection can only be tighter; here the last interval is the tightest
    assert low[-1] == pytest.approx(max(low[:-1].max(), s_lx / s_lam - h), abs=1e-12)
    assert up[-1] == pytest.approx(min(up[:-1].min(), s_lx / s_lam + h), abs=1e-12)
    assert s_lx / s_lam - h > 0.2  # not the trivial [0, 1]


def test_missing_observations_leave_the_bounds_unchanged():
    x = np.array([0.2, np.nan, 0.4, np.nan, np.nan, 0.8])
    low, up = eb_sequence(x, 0.05)
    low2, up2 = eb_sequence(x[~np.isnan(x)], 0.05)
    np.testing.assert_allclose(low[[0, 2, 5]], low2, atol=1e-15)
    np.testing.assert_allclose(up[[0, 2, 5]], up2, atol=1e-15)
    assert low[1] == low[0] and up[4] == up[2]


def _capital(x: list[float], m: float, alpha: float) -> float:
    """max(½ K⁺_t(m), ½ K⁻_t(m)) of the hedged capital process, a plain loop over Theorem 3's definitions (c = 1/2)."""
    mu, var, total, sq, up, down = 0.5, 0.25, 0.0, 0.0, 1.0, 1.0
    for t, xi in enumerate(x, start=1):
        rate = math.sqrt(2 * math.log(2 / alpha) / (var * t * math.log(1 + t)))
        up *= 1 + min(rate, 0.5 / m if m > 0 else math.inf) * (xi - m)
        down *= 1 - min(rate, 0.5 / (1 - m) if m < 1 else math.inf) * (xi - m)
        total += xi
        mu = (0.5 + total) / (t + 1)
        sq += (xi - mu) ** 2
        var = (0.25 + sq) / (t + 1)
    return max(up, down) / 2


def test_betting_sequence_is_the_set_of_means_whose_capital_stays_below_one_over_alpha():
    rng = np.random.default_rng(11)
    x = rng.beta(6, 4, 80)
    low, up = betting_sequence(x, 0.05)
    grid = np.linspace(0, 1, 201)
    inside = [m for m in grid if _capital(list(x), m, 0.05) < 1 / 0.05]
    # the last interval holds every grid mean whose capital is below 1/α, widened by one grid step (and the running
    # intersection can only have narrowed it)
    assert low[-1] <= min(inside) and up[-1] >= max(inside)
    assert low[-1] >= min(inside) - 0.005 - 1e-12 and up[-1] <= max(inside) + 0.005 + 1e-12
    assert 0.05 < max(inside) - min(inside) < 0.4  # informative, not [0, 1]


def test_asymptotic_sequence_is_the_normal_mixture_boundary():
    # constant 1/2 from t = 1: mean 1/2, regularised variance (1/4)/(t + 1); ρ² from t* = 50 and α = 0.05
    alpha, t = 0.05, 40
    rho2 = (-2 * math.log(alpha) + math.log(-2 * math.log(alpha) + 1)) / 50
    half = math.sqrt(0.25 / (t + 1) * 2 * (t * rho2 + 1) / (t * t * rho2) * math.log(math.sqrt(t * rho2 + 1) / alpha))
    low, up = asymptotic_sequence(np.full(t, 0.5), alpha)
    assert (low[-1], up[-1]) == (pytest.approx(0.5 - half, abs=1e-12), pytest.approx(0.5 + half, abs=1e-12))


@pytest.mark.parametrize("method", ["eb", pytest.param("betting", marks=pytest.mark.slow)])  # betting: 1 s each
@pytest.mark.parametrize("draw, mean", [(lambda rng, s: rng.binomial(1, 0.3, s).astype(float), 0.3),
                                        (lambda rng, s: rng.beta(2, 5, s), 2 / 7)])
def test_time_uniform_miss_rate_is_at_most_alpha(method, draw, mean):
    # 1,000 sequences of 200: the share whose CS misses the true mean at ANY time ≤ α + 3 binomial sd (0.028)
    rng = np.random.default_rng(7)
    alpha, n = 0.1, 1000
    low, up = mean_sequence(draw(rng, (n, 200)), alpha, 0, 1, method)
    miss = ((low > mean) | (up < mean)).any(axis=1).mean()
    assert miss <= alpha + 3 * math.sqrt(alpha * (1 - alpha) / n)
    # and it is informative: after 200 observations narrower than ± 0.15 (Hoeffding's fixed-n ± 0.087 at α = 0.1)
    assert np.median(up[:, -1] - low[:, -1]) < 0.3


def test_asymptotic_miss_rate_on_smooth_scores_is_at_most_alpha():
    # asymptotic only: checked where it is meant to hold, on continuous scores like FACE's per-conversation means
    # (Beta(12, 8): sd 0.11), 2,000 sequences of 200, α = 0.05; bound α + 3 binomial sd (0.015)
    rng = np.random.default_rng(8)
    low, up = asymptotic_sequence(rng.beta(12, 8, (2000, 200)), 0.05)
    assert ((low > 0.6) | (up < 0.6)).any(axis=1).mean() <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / 2000)
    assert np.median(up[:, -1] - low[:, -1]) < 0.1  # far narrower than the exact sequences


def test_scale_maps_to_unit_interval():
    x = np.array([0.0, 2.0, 1.0, 1.4, 0.6] * 10)
    low, up = mean_sequence(x, 0.05, 0, 2, "eb")
    low1, up1 = eb_sequence(x / 2, 0.05)
    np.testing.assert_allclose(low, 2 * low1, atol=1e-12)
    np.testing.assert_allclose(up, 2 * up1, atol=1e-12)


def test_decisions_by_hand():
    lower = np.array([0.01, -0.5, -0.05, -0.05, -0.3])
    upper = np.array([0.4, -0.02, 0.05, 0.3, 0.3])
    got = [DECISIONS[i] for i in decide(lower, upper, 0.1)]
    assert got == ["better", "worse", "no difference larger than target", "undecided", "undecided"]
    assert DECISIONS[decide(np.array([-0.05]), np.array([0.05]), None)[0]] == "undecided"


def test_batch_by_batch_stops_on_a_clear_difference_and_not_on_none():
    rng = np.random.default_rng(3)
    cmp = SequentialComparison(["x", "y"], [(0, 2), (0, 2)], alpha=0.05, target_diff=0.5)
    steps = 0
    while not cmp.done() and steps < 100:
        a = np.column_stack([rng.choice([0.0, 0.4], 10), rng.uniform(0.8, 1.2, 10)])
        b = np.column_stack([rng.choice([1.6, 2.0], 10), rng.uniform(0.8, 1.2, 10)])
        status = cmp.update(a, b)
        steps += 1
    assert list(status["decision"]) == ["better", "no difference larger than target"]
    assert steps < 10
    assert status["n_baseline"].tolist() == [10 * steps] * 2


def test_paired_comparison_uses_the_differences():
    # paired: the same shift on every conversation, large spread between conversations: decided in few batches,
    # while the unpaired comparison of the same scores (spread on both sides) is not
    rng = np.random.default_rng(4)
    base = rng.choice([0.0, 2.0], (200, 1)) * 0.8
    paired = SequentialComparison(["x"], [(0, 2)], paired=True, method="eb")
    unpaired = SequentialComparison(["x"], [(0, 2)], paired=False, method="eb")
    for i in range(0, 200, 20):
        p = paired.update(base[i:i + 20], base[i:i + 20] + 0.4)
        u = unpaired.update(base[i:i + 20], base[i:i + 20] + 0.4)
    # paired: y = (0.4 + 2)/4 = 0.6 constant, half-width ≈ log(2/α)/(t/2) · 4 = 0.15 < 0.4 at t = 200
    assert p["decision"].iloc[0] == "better" and u["decision"].iloc[0] == "undecided"
    with pytest.raises(ValueError, match="paired batches"):
        paired.update(base[:2], base[:3])
    with pytest.raises(ValueError, match=r"x: score\(s\) \[2.5\] outside the scale \[0, 2\]"):
        paired.update(np.array([[1.0]]), np.array([[2.5]]))


def _null_sequences(n_seq: int = 2000, n: int = 200) -> tuple[np.ndarray, np.ndarray]:
    """Pairs of score sequences with NO true difference: both sides the same distribution on a 0–2 scale, in steps
    of 0.2 like the released scores."""
    rng = np.random.default_rng(2024)
    probs = sps.binom.pmf(np.arange(11), 10, 0.6)
    return (rng.choice(np.arange(11) * 0.2, (n_seq, n), p=probs), rng.choice(np.arange(11) * 0.2, (n_seq, n), p=probs))


MC_BOUND = 0.05 + 2.33 * math.sqrt(0.05 * 0.95 / 2000)  # α + 2.33 binomial sd over 2,000 sequences (one-sided 99 %)


def test_peeking_at_a_fixed_n_interval_inflates_the_error_the_sequence_does_not():
    """2,000 null pairs of sequences, 10 conversations per side per batch, 20 batches (200 per side). Fixed-n rule:
    Welch's t-interval at 95 % (the normal-theory counterpart of face compare's bootstrap-t; a t-interval for
    speed) checked after every batch, stop at the first that excludes 0. Sequential rules: the unpaired PrPl-EB and
    asymptotic differences at α = 0.05 checked after every batch (the betting sequence, 4 s: the slow test below).
    Monte Carlo bound: α + 2.33 binomial sd (0.0614, one-sided 99 %)."""
    a, b = _null_sequences()
    batch, n = 10, 200
    looks = np.arange(batch, n + 1, batch)
    ca, cb = np.cumsum(a, 1)[:, looks - 1], np.cumsum(b, 1)[:, looks - 1]
    qa, qb = np.cumsum(a * a, 1)[:, looks - 1], np.cumsum(b * b, 1)[:, looks - 1]
    va, vb = (qa - ca ** 2 / looks) / (looks - 1) / looks, (qb - cb ** 2 / looks) / (looks - 1) / looks
    df = (va + vb) ** 2 / (va ** 2 / (looks - 1) + vb ** 2 / (looks - 1))
    t = (cb / looks - ca / looks) / np.sqrt(va + vb)
    fixed = (np.abs(t) > sps.t.ppf(0.975, df)).any(axis=1).mean()
    rates = {}
    for method in ("eb", "asymptotic"):
        low, up, _, _ = unpaired_steps(a, b, 0.05, 0, 2, batch, method)
        rates[method] = ((low > 0) | (up < 0)).any(axis=1).mean()
    low, up, _, _ = order_paired_steps(a, b, 0.05, 0, 2, batch, "asymptotic")
    rates["asymptotic, paired by order"] = ((low > 0) | (up < 0)).any(axis=1).mean()
    print(f"peeking after each of 20 batches: fixed-n t-interval rejects {fixed:.3f}; sequential "
          + ", ".join(f"{k} {v:.4f}" for k, v in rates.items()) + f" (α = 0.05, Monte Carlo bound {MC_BOUND:.4f})")
    assert fixed > 0.15  # ≈ 3 × α: the error peeking buys
    assert all(r <= MC_BOUND for r in rates.values())


@pytest.mark.slow
def test_peeking_at_the_betting_sequence_after_every_batch_keeps_the_error_at_most_alpha():
    """The default sequence (hedged-capital betting) on the same 2,000 null pairs, checked after each of 20 batches."""
    a, b = _null_sequences()
    low, up, _, _ = unpaired_steps(a, b, 0.05, 0, 2, 10, "betting")
    assert ((low > 0) | (up < 0)).any(axis=1).mean() <= MC_BOUND


def test_stopping_is_the_first_decided_step():
    lower = np.array([[-1.0, -0.5, 0.1, 0.2], [-1.0, -0.9, -0.8, -0.7], [-1.0, -0.2, -0.1, -0.05]])
    upper = np.array([[1.0, 0.5, 0.9, 0.8], [1.0, 0.9, 0.8, 0.7], [1.0, 0.3, 0.15, 0.1]])
    first, decision = stopping(lower, upper, 0.2)
    assert first.tolist() == [2, 3, 2]
    assert [DECISIONS[i] for i in decision] == ["better", "undecided", "no difference larger than target"]


def test_pairs_by_scoring_order_are_one_sequence_of_the_differences():
    rng = np.random.default_rng(5)
    a, b = rng.uniform(0, 2, (3, 30)), rng.uniform(0, 2, (3, 25))
    low, up, seen, seen_b = order_paired_steps(a, b, 0.05, 0, 2, 4, "eb")
    assert seen.tolist() == [4, 8, 12, 16, 20, 24, 25] and seen.tolist() == seen_b.tolist()
    ref_low, ref_up = eb_sequence((b[:, :25] - a[:, :25] + 2) / 4, 0.05)
    np.testing.assert_allclose(low, 4 * ref_low[:, seen - 1] - 2, atol=1e-12)
    np.testing.assert_allclose(up, 4 * ref_up[:, seen - 1] - 2, atol=1e-12)


def test_batch_by_batch_by_order_pairs_the_sides_in_arrival_order():
    # the state object, fed 3 + 2 scores of a and 2 + 3 of b, pairs the first 4 of each in arrival order: its interval
    # is the PrPl-EB of those 4 differences at α (mapped from [−2, 2]), by hand through eb_sequence
    a1, a2 = np.array([[0.2], [1.0], [0.6]]), np.array([[1.4], [0.0]])
    b1, b2 = np.array([[1.2], [1.8]]), np.array([[2.0], [1.6], [0.4]])
    cmp = SequentialComparison(["x"], [(0, 2)], alpha=0.05, method="eb", by_order=True)
    cmp.update(a1, b1)
    status = cmp.update(a2, b2)
    d = np.array([1.2 - 0.2, 1.8 - 1.0, 2.0 - 0.6, 1.6 - 1.4])
    low, up = eb_sequence((d + 2) / 4, 0.05)
    assert status["ci_low"].iloc[0] == pytest.approx(4 * low[-1] - 2, abs=1e-12)
    assert status["ci_high"].iloc[0] == pytest.approx(4 * up[-1] - 2, abs=1e-12)
    assert status[["n_baseline", "n_candidate"]].iloc[0].tolist() == [5, 5]
