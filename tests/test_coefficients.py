"""One registry of correlation coefficients (face.coefficients), every form checked against scipy, and the three
places that choose a coefficient by name (the meta-evaluation, the optimizer's reward, the selection experiment)
reading it from there."""

from __future__ import annotations

from typing import get_args

import numpy as np
import pytest
from scipy import stats

from face import coefficients
from face.coefficients import NAMES, REGISTRY, coefficient, rows_correlation

SCIPY = {"pearson": stats.pearsonr, "spearman": stats.spearmanr, "kendall": stats.kendalltau}


def _data(seed: int, n: int = 40) -> tuple[np.ndarray, np.ndarray]:
    """Predictions with ties (rounded) and integer labels: the shapes the project correlates."""
    rng = np.random.default_rng(seed)
    x = np.round(rng.normal(size=n), 1)
    y = np.clip(np.round(x + rng.normal(size=n)), -2, 2)
    return x, y


def test_the_registry_names_the_three_coefficients_and_every_chooser_offers_exactly_them():
    from face.metaeval import COEFFICIENTS
    from face.optimize.config import Reward

    assert NAMES == ("pearson", "spearman", "kendall")
    assert COEFFICIENTS == NAMES
    assert set(get_args(Reward)) == set(NAMES)  # optimizer.reward: a Literal, kept equal to the registry
    with pytest.raises(ValueError, match="unknown coefficient 'spearmann'; choose from pearson, spearman, kendall"):
        coefficient("spearmann")


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("seed", range(4))
def test_value_and_test_equal_scipy(name, seed):
    x, y = _data(seed)
    want = SCIPY[name](x, y)
    assert REGISTRY[name].value(x, y) == pytest.approx(want[0], abs=1e-12)
    value, p = REGISTRY[name].test(x, y)
    assert (value, p) == (pytest.approx(want[0], abs=1e-12), pytest.approx(want[1], rel=1e-9))


@pytest.mark.parametrize("name", NAMES)
def test_rows_equal_scipy_row_by_row_with_a_matrix_or_one_shared_row(name):
    rng = np.random.default_rng(7)
    a = np.round(rng.normal(size=(30, 12)), 1)
    b = np.round(a + rng.normal(size=a.shape), 0)
    got = rows_correlation(a, b, name)
    assert got == pytest.approx([SCIPY[name](a[r], b[r])[0] for r in range(len(a))], abs=1e-12)
    shared = rows_correlation(a, b[:1], name)  # one row of b for every row of a
    assert shared == pytest.approx([SCIPY[name](a[r], b[0])[0] for r in range(len(a))], abs=1e-12)


@pytest.mark.parametrize("name", NAMES)
def test_a_row_that_does_not_vary_has_no_coefficient(name):
    a = np.array([[1.0, 2.0, 3.0, 4.0], [2.5, 2.5, 2.5, 2.5]])
    got = rows_correlation(a, np.array([[1.0, 3.0, 2.0, 4.0]]), name)
    assert np.isfinite(got[0]) and np.isnan(got[1])
    assert np.isnan(rows_correlation(a, np.full((1, 4), 2.0), name)).all()


def test_rowwise_kendall_in_blocks_equals_one_block(monkeypatch):
    rng = np.random.default_rng(3)
    a, b = np.round(rng.normal(size=(50, 30)), 1), np.round(rng.normal(size=(1, 30)), 0)
    whole = rows_correlation(a, b, "kendall")
    monkeypatch.setattr(coefficients, "PAIRS_BLOCK", 500)  # 1 row of 435 pairs per block
    assert np.array_equal(rows_correlation(a, b, "kendall"), whole)
    assert rows_correlation(np.empty((0, 30)), b, "kendall").shape == (0,)


@pytest.mark.parametrize("name", NAMES)
def test_the_optimizers_reward_and_the_selection_experiment_read_the_registry(name, monkeypatch):
    from face.experiments.optimize_selection import row_correlations
    from face.optimize.items import correlation

    x, y = _data(11)
    assert correlation(x, y, name) == pytest.approx(SCIPY[name](x, y)[0], abs=1e-12)
    preds = np.stack([x, -x, np.round(x * 2 + 1, 1)])
    assert row_correlations(preds, y, name) == pytest.approx([SCIPY[name](p, y)[0] for p in preds], abs=1e-12)
    # the same registry entry answers all three: replace it and every caller follows
    fake = coefficients.Coefficient(name, lambda a, b: 0.5, lambda a, b: np.full(len(a), 0.25),
                                    REGISTRY[name].weighted)
    monkeypatch.setitem(REGISTRY, name, fake)
    assert correlation(x, y, name) == 0.5
    assert list(row_correlations(preds, y, name)) == [0.25] * 3
    with pytest.raises(ValueError, match="unknown coefficient"):
        correlation(x, y, "kendal")
