"""face.resample: the bootstrap's draws (each resample is n units drawn with replacement) and the percentile
interval, against hand-computed values, the binomial law and numpy's own percentile."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as sps

from face.resample import CHUNK, draw_counts, percentile_interval


def test_every_resample_draws_n_units_each_as_often_as_the_binomial_law_says():
    n, b = 7, 40_000
    counts = draw_counts(n, b, np.random.default_rng(1))
    assert counts.shape == (b, n) and (counts.sum(1) == n).all() and (counts >= 0).all()
    # a unit is drawn Binomial(n, 1/n) times in a resample: the frequencies of 0..3 draws within 0.01
    for k in range(4):
        assert (counts == k).mean() == pytest.approx(sps.binom.pmf(k, n, 1 / n), abs=0.01)


def test_a_draw_in_chunks_is_the_same_stream_as_one_long_draw():
    """Replicates are drawn CHUNK at a time (memory); the counts are those of drawing every index in one go."""
    n, b = 3, CHUNK + 5
    ref_rng = np.random.default_rng(9)
    draws = ref_rng.integers(0, n, size=(b, n))
    ref = np.stack([np.bincount(row, minlength=n) for row in draws])
    rng = np.random.default_rng(9)
    assert np.array_equal(draw_counts(n, b, rng), ref)
    assert rng.integers(0, 2**62) == ref_rng.integers(0, 2**62)  # and leaves the generator where one draw does


def test_the_percentile_interval_by_hand_nan_left_out():
    vals = np.r_[np.arange(101.0), np.nan, np.nan]  # 0..100: the 5th and 95th percentiles are 5 and 95
    assert percentile_interval(vals, 0.90) == pytest.approx((5.0, 95.0), abs=1e-12)
    # 1, 2, 3, 4: linear interpolation at 2.5 % and 97.5 % of the way: 1 + 0.075 and 4 − 0.075
    assert percentile_interval(np.array([4.0, 1.0, 3.0, 2.0]), 0.95) == pytest.approx((1.075, 3.925), abs=1e-12)


def test_no_interval_from_replicates_that_are_all_nan():
    lo, hi = percentile_interval(np.full(5, np.nan), 0.95)
    assert np.isnan(lo) and np.isnan(hi)
