"""face.comparison.stats: the bootstrap, the studentized tests and Holm against hand-computed cases and scipy; the
resampling unit is the conversation."""

from __future__ import annotations

import statistics

import numpy as np
import pytest
from scipy import stats as sps

from face.comparison import stats
from face.resample import draw_counts, percentile_interval


def _units(per_conv: list[list[float]]) -> stats.Units:
    """One aspect; conversation c's scores ``per_conv[c]`` (its turns)."""
    return stats.Units(np.array([f"c{i}" for i in range(len(per_conv))], dtype=object),
                       np.array([[sum(x)] for x in per_conv], float), np.array([[len(x)] for x in per_conv], float))


def _dialogue(values) -> stats.Units:
    return _units([[float(v)] for v in values])


# ---------------------------------------------------------------- hand-computed cases

def test_replicate_means_are_the_means_of_the_expanded_resamples():
    convs = [[1.0, 2.0], [1.0], [1.5, 2.5]]
    counts = np.array([[1, 1, 1], [2, 1, 0], [0, 0, 3]], float)
    m = stats.moments(_units(convs), counts)
    expanded = [[x for c, k in enumerate(row) for _ in range(int(k)) for x in convs[c]] for row in counts]
    assert m.boot_mean[:, 0] == pytest.approx([statistics.mean(e) for e in expanded])  # 1.6, 1.4, 2.0
    assert m.boot_mean[:, 0] == pytest.approx([1.6, 1.4, 2.0])
    assert m.mean[0] == pytest.approx(8 / 5)


def test_the_variance_of_a_ratio_mean_by_hand_and_of_a_plain_mean_as_s2_over_n():
    convs = [[1.0, 2.0], [1.0], [1.5, 2.5], [0.0, 0.0, 3.0]]
    m = stats.moments(_units(convs), np.ones((1, 4)))
    total, n = sum(map(sum, convs)), sum(map(len, convs))
    mean, nbar = total / n, n / 4
    z = [(sum(c) - mean * len(c)) / nbar for c in convs]  # the linearised ratio estimator
    assert m.var[0] == pytest.approx(sum(v * v for v in z) / (4 * 3))
    values = [0.5, 1.0, 3.0, 2.0, 2.5]
    d = stats.moments(_dialogue(values), np.ones((1, 5)))
    assert d.var[0] == pytest.approx(statistics.variance(values) / 5)


def test_the_studentized_p_value_and_interval_by_hand():
    # d = 1, se = 0.5: t = 2. Replicates: t* = (1.5-1)/0.5 = 1, (0.5-1)/0.5 = -1, (3-1)/1 = 2, (1-1)/0.5 = 0
    res = stats.studentized(np.array([1.0]), np.array([0.25]), np.array([[1.5], [0.5], [3.0], [1.0]]),
                            np.array([[0.25], [0.25], [1.0], [0.25]]), confidence=0.5)
    assert res.t[0] == pytest.approx(2.0)
    assert res.p_value[0] == pytest.approx((1 + 1) / (4 + 1))  # one |t*| >= 2 (the tie counts)
    # the 50 % quantile of |t*| = {0, 1, 1, 2} (position 1.5, the order statistic above it): 1 -> 1 ± 1 · 0.5
    assert (res.ci_low[0], res.ci_high[0]) == pytest.approx((0.5, 1.5))


def test_a_p_value_is_never_zero_its_resolution_is_one_over_b_plus_one():
    a, b = _dialogue([1, 1.1, 0.9, 1.05]), _dialogue([3, 3.1, 2.9, 3.05])
    rng = np.random.default_rng(0)
    res = stats.unpaired(stats.moments(a, draw_counts(4, 999, rng)),
                         stats.moments(b, draw_counts(4, 999, rng)), 0.95)
    assert res.p_value[0] == pytest.approx(1 / 1000)


def test_holm_by_hand_and_nan_left_out():
    p = np.array([0.01, 0.04, np.nan, 0.03, 0.005])
    # sorted 0.005·4 = .02, 0.01·3 = .03, 0.03·2 = .06, 0.04·1 = .04 -> running max .06
    assert stats.holm(p) == pytest.approx([0.03, 0.06, np.nan, 0.06, 0.02], nan_ok=True)
    assert stats.holm(np.array([0.5, 0.9])) == pytest.approx([1.0, 1.0])


def test_holm_against_a_loop_reference():
    rng = np.random.default_rng(3)
    p = rng.random(40) ** 3
    order = sorted(range(40), key=lambda i: p[i])
    ref, running = [0.0] * 40, 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (40 - rank) * p[i]))
        ref[i] = running
    assert stats.holm(p) == pytest.approx(ref)


def test_the_sizing_quantiles_are_students_t_at_alpha_over_the_family_by_the_printed_tables():
    # t_{.975,10} = 2.228139, t_{.8,10} = 0.879058, t_{.995,10} = 3.169273 (m = 5: α / 2m = .005); z: 1.959964
    # (an interval quantile of 0: t's alone)
    assert stats.detectable(1.0, 10, 0.05, 0.8, 1, 0.0) == pytest.approx(2.228139 + 0.879058, abs=1e-5)
    assert stats.detectable(1.0, 10, 0.05, 0.8, 5, 0.0) == pytest.approx(3.169273 + 0.879058, abs=1e-5)
    assert stats.detectable(1.0, 1e7, 0.05, 0.8, 1, 0.0) == pytest.approx(1.959964 + 0.841621, abs=1e-5)
    # the difference detectable at se 0.1 with 11 conversations in a family of 5, and never below the interval's
    # half-width: a studentized quantile of 4 (heavier than t's 3.17) is used in its place
    se, df = np.array([0.1, 0.1]), np.array([10.0, 10.0])
    got = stats.detectable(se, df, 0.05, 0.8, 5, np.array([2.0, 4.0]))
    assert got == pytest.approx([0.1 * (3.169273 + 0.879058), 0.1 * (4.0 + 0.879058)], abs=1e-6)


def test_the_variance_and_sizing_at_the_smallest_sizes_they_are_defined_for():
    # two conversations: the variance of their mean is s² / 2 (s² = 2 for 1 and 3); one: undefined
    assert stats.moments(_dialogue([1.0, 3.0]), np.ones((1, 2))).var[0] == pytest.approx(1.0)
    assert np.isnan(stats.moments(_dialogue([1.0]), np.ones((1, 1))).var[0])
    # one degree of freedom: t_{.975,1} = 12.706205, t_{.8,1} = 1.376382 (printed tables); below one, no size
    assert stats.detectable(1.0, 1, 0.05, 0.8, 1, 0.0) == pytest.approx(12.706205 + 1.376382, abs=1e-5)
    assert np.isnan(stats.detectable(1.0, 0, 0.05, 0.8, 1, 0.0))
    # resamples for Holm over m tests: 10 m / α, and at least 10,000 unless another minimum is given
    assert (stats.boot_size(1, 0.05), stats.boot_size(100, 0.05), stats.boot_size(3, 0.05, 0)) == (10_000, 20_000, 600)


def test_the_paired_variance_by_hand_on_conversations_of_unequal_turns_and_none_for_one_conversation():
    a = [[1.0, 2.0], [1.0], [1.5, 2.5], [0.0, 0.0, 3.0]]
    b = [[2.0, 2.0], [0.0, 1.0, 1.0], [1.0], [1.0, 4.0]]  # 12 over 8 turns; a: 11 over 8

    def z(convs):  # the linearised ratio estimator per conversation, as in the unpaired case above
        mean, nbar = sum(map(sum, convs)) / sum(map(len, convs)), sum(map(len, convs)) / len(convs)
        return np.array([(sum(c) - mean * len(c)) / nbar for c in convs])

    test = stats.paired(_units(a), _units(b), draw_counts(4, 200, np.random.default_rng(0)), 0.95)
    assert test.diff[0] == pytest.approx(12 / 8 - 11 / 8)
    assert test.se[0] ** 2 == pytest.approx(((z(b) - z(a)) ** 2).sum() / (4 * 3))
    one = stats.paired(_dialogue([1.0]), _dialogue([3.0]), np.ones((50, 1)), 0.95)
    assert one.diff[0] == 2.0 and np.isnan(one.se[0])


def test_conversations_needed_by_hand():
    # σ² = 1, target 1, one test: n ≥ (t_{.975,n-1} + t_{.8,n-1})². n = 10: (2.262157 + 0.883034)² = 9.89 ≤ 10;
    # n = 9: (2.306004 + 0.888890)² = 10.21 > 9 -> 10 (the normal approximation's 7.85 would say 8)
    assert stats.needed(np.array([1.0]), 1.0, 0.05, 0.8, 1)[0] == 10
    # σ² = 4 (twice the sd): n ≥ 4 (t + t)²: n = 34: 4 (2.034515 + 0.852649)² = 33.34 ≤ 34; n = 33: 4 (2.036933 +
    # 0.852998)² = 33.41 > 33
    assert stats.needed(np.array([4.0]), 1.0, 0.05, 0.8, 1)[0] == 34
    assert stats.needed(np.array([4.0]), 2.0, 0.05, 0.8, 1)[0] == 10  # σ / target as for σ² = 1, target 1
    assert stats.needed(np.array([0.0, np.nan]), 1.0, 0.05, 0.8, 1) == pytest.approx([2, np.nan], nan_ok=True)


def test_ranks_and_beats():
    boot = np.array([[3.0, 1.0, 2.0], [3.0, 2.0, 2.0], [1.0, 2.0, 3.0]])
    assert stats.ranks(boot).tolist() == [[1, 3, 2], [1, 2, 2], [3, 2, 1]]
    b = stats.beats(boot)
    assert b[0, 1] == pytest.approx(2 / 3) and b[1, 2] == pytest.approx((0 + 0.5 + 0) / 3)
    assert b[0, 1] + b[1, 0] == pytest.approx(1)


# ---------------------------------------------------------------- against scipy

def test_the_statistics_are_welch_and_paired_t_exactly():
    rng = np.random.default_rng(1)
    x, y = rng.normal(1.0, 1.0, 30), rng.normal(1.4, 1.5, 40)
    counts = np.ones((1, 30))
    mx, my = stats.moments(_dialogue(x), counts), stats.moments(_dialogue(y), np.ones((1, 40)))
    welch = sps.ttest_ind(y, x, equal_var=False).statistic
    assert stats.unpaired(mx, my, 0.95).t[0] == pytest.approx(welch, rel=1e-10)
    y2 = x + rng.normal(0.3, 0.5, 30)
    assert stats.paired(_dialogue(x), _dialogue(y2), counts, 0.95).t[0] == pytest.approx(
        sps.ttest_rel(y2, x).statistic, rel=1e-10)


def test_bootstrap_p_values_and_intervals_match_the_t_tests_on_large_normal_samples():
    rng = np.random.default_rng(2)
    x, y = rng.normal(0.0, 1.0, 300), rng.normal(0.17, 1.0, 300)
    mx = stats.moments(_dialogue(x), draw_counts(300, 20_000, rng))
    my = stats.moments(_dialogue(y), draw_counts(300, 20_000, rng))
    res = stats.unpaired(mx, my, 0.95)
    ref = sps.ttest_ind(y, x, equal_var=False)
    assert 0.01 < ref.pvalue < 0.2
    assert res.p_value[0] == pytest.approx(ref.pvalue, abs=0.01)
    lo, hi = ref.confidence_interval(0.95)
    assert (res.ci_low[0], res.ci_high[0]) == pytest.approx((lo, hi), abs=0.02)
    y2 = x + rng.normal(0.08, 0.6, 300)
    res = stats.paired(_dialogue(x), _dialogue(y2), draw_counts(300, 20_000, rng), 0.95)
    assert res.p_value[0] == pytest.approx(sps.ttest_rel(y2, x).pvalue, abs=0.01)


def test_the_mean_interval_matches_scipy_bootstrap_percentile():
    rng = np.random.default_rng(4)
    x = rng.gamma(2.0, 1.0, 80)
    m = stats.moments(_dialogue(x), draw_counts(80, 20_000, rng))
    lo, hi = percentile_interval(m.boot_mean[:, 0], 0.95)
    ref = sps.bootstrap((x,), np.mean, n_resamples=20_000, method="percentile", random_state=5).confidence_interval
    assert (lo, hi) == pytest.approx((ref.low, ref.high), abs=0.02)


# ---------------------------------------------------------------- the resampling unit is the conversation

def test_duplicating_every_turn_inside_its_conversation_changes_nothing():
    """A turn-level resampler would see twice the items and narrow every interval; conversations are the unit."""
    rng = np.random.default_rng(5)
    convs_a = [list(rng.normal(1, 0.5, rng.integers(1, 6))) for _ in range(25)]
    convs_b = [list(rng.normal(1.2, 0.5, rng.integers(1, 6))) for _ in range(25)]
    res = []
    for k in (1, 2):
        a, b = _units([c * k for c in convs_a]), _units([c * k for c in convs_b])
        r = np.random.default_rng(0)
        ma, mb = stats.moments(a, draw_counts(25, 4000, r)), stats.moments(b, draw_counts(25, 4000, r))
        res.append((percentile_interval(ma.boot_mean[:, 0], 0.95), stats.unpaired(ma, mb, 0.95)))
    (ci1, t1), (ci2, t2) = res
    assert np.allclose(ci1, ci2) and np.allclose(t1.p_value, t2.p_value) and np.allclose(t1.ci_low, t2.ci_low)


def test_the_interval_is_as_wide_as_the_conversations_not_the_turns_say():
    # 40 conversations of 10 identical turn scores each: 40 independent values, not 400
    rng = np.random.default_rng(6)
    conv_scores = rng.normal(1.0, 0.6, 40)
    u = _units([[s] * 10 for s in conv_scores])
    m = stats.moments(u, draw_counts(40, 20_000, rng))
    lo, hi = percentile_interval(m.boot_mean[:, 0], 0.95)
    by_conversation = 2 * 1.96 * np.std(conv_scores, ddof=1) / np.sqrt(40)
    assert hi - lo == pytest.approx(by_conversation, rel=0.1)  # by turn it would be √10 ≈ 3.2 × narrower
