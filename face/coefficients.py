"""The correlation coefficients, one registry: a coefficient is chosen by name here and nowhere else.

``REGISTRY[name]`` (Pearson, Spearman, Kendall tau-b, as scipy computes them) gives four forms of one coefficient:

- ``test(x, y)``: scipy's function, the value and its p-value (the meta-evaluation's point estimates);
- ``value(x, y)``: the value alone for one pair of vectors, cheap (the optimizer's reward, thousands of times);
- ``rows(a, b)``: the value between ``a[r]`` and ``b[r]`` for every row ``r`` (``b`` may be one row, shared):
  bootstrap replicates of system means, every candidate set of instructions at once;
- ``weighted(x, y, w)``: the value on (x, y) repeated ``w[r]`` times for every row of integer weights ``w`` (a
  bootstrap replicate as weights; exactly the coefficient of the resampled data set).

NaN where a coefficient is undefined (a side that does not vary). tests/test_coefficients.py checks every form against
scipy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

# ---------------------------------------------------------------- one pair of vectors

def ranks(x: np.ndarray) -> np.ndarray:
    """Average ranks (1-based; ties share their mean rank), as scipy's rankdata, without its overhead."""
    return _Ties(x).ranks(np.ones((1, len(x))))[0]


def _pearson(x: np.ndarray, y: np.ndarray) -> float:
    x = x - x.mean()
    y = y - y.mean()
    return float(x @ y / np.sqrt((x @ x) * (y @ y)))


def _spearman(x: np.ndarray, y: np.ndarray) -> float:
    return _pearson(ranks(x), ranks(y))


def _kendall(x: np.ndarray, y: np.ndarray) -> float:
    return float(_scipy("kendall")(x, y)[0])


# ---------------------------------------------------------------- row by row

def _rows_pearson(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    da, db = a - a.mean(1, keepdims=True), b - b.mean(1, keepdims=True)
    saa, sbb = (da * da).sum(1), (db * db).sum(1)
    # a row that does not vary: what is left of subtracting its mean is float noise (relative to its size)
    flat = (saa <= 1e-24 * (a * a).sum(1)) | (sbb <= 1e-24 * (b * b).sum(1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(flat, np.nan, (da * db).sum(1) / np.sqrt(saa * sbb))


def _rows_spearman(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    from scipy import stats

    return _rows_pearson(stats.rankdata(a, axis=1), stats.rankdata(b, axis=1))


PAIRS_BLOCK = 1 << 22  # row × item-pair signs built at once by the row-wise Kendall (32 MB of float64)


def _rows_kendall(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    i, j = np.triu_indices(a.shape[1], 1)
    step = max(1, PAIRS_BLOCK // max(len(i), 1))
    b = np.broadcast_to(b, a.shape)
    out = np.empty(len(a))
    for r in range(0, len(a), step):  # a block of rows at a time: memory ~ PAIRS_BLOCK
        sa, sb = np.sign(a[r:r + step, i] - a[r:r + step, j]), np.sign(b[r:r + step, i] - b[r:r + step, j])
        den = (len(i) - (sa == 0).sum(1)) * (len(i) - (sb == 0).sum(1))
        with np.errstate(invalid="ignore", divide="ignore"):
            out[r:r + step] = np.where(den > 0, (sa * sb).sum(1) / np.sqrt(den), np.nan)
    return out


# ---------------------------------------------------------------- weighted (bootstrap replicates)

def weighted_pearson(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Pearson r of (x, y) repeated w times, for every row of the weight matrix ``w`` (B × n)."""
    sw = w.sum(1)
    sx, sy = w @ x, w @ y
    sxx, syy, sxy = w @ (x * x), w @ (y * y), w @ (x * y)
    cov = sw * sxy - sx * sy
    vx, vy = sw * sxx - sx * sx, sw * syy - sy * sy
    with np.errstate(invalid="ignore", divide="ignore"):
        r = cov / np.sqrt(vx * vy)
    # a side that does not vary: its variance is what is left of cancelling sums, a few ulps of sw·Σwx² (relative,
    # so a constant side is caught whatever the scale of the other side or the number of items)
    r[(vx <= 1e-12 * sw * sxx) | (vy <= 1e-12 * sw * syy)] = np.nan
    return r


class _Ties:
    """The groups of equal values of a vector (for vectorised ranking): ``groups(w)`` sums each group's weights."""

    def __init__(self, x: np.ndarray):
        self.order = np.argsort(x, kind="stable")
        xs = x[self.order]
        new = np.r_[True, xs[1:] != xs[:-1]]
        self.starts = np.flatnonzero(new)  # start of each tie group in sorted order
        self.group_of_item = np.empty(len(x), dtype=int)  # tie group of each item (original order)
        self.group_of_item[self.order] = np.cumsum(new) - 1

    def groups(self, w: np.ndarray) -> np.ndarray:
        return np.add.reduceat(w[:, self.order], self.starts, axis=1)

    def ranks(self, w: np.ndarray) -> np.ndarray:
        """Average ranks (1-based) of each item within each weighted replicate."""
        wg = self.groups(w)
        return (np.cumsum(wg, axis=1) - wg + (wg + 1) / 2)[:, self.group_of_item]


ROWS = 100  # weighted replicates ranked at once: memory ~ ROWS × items, not replicates × items


def weighted_spearman(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Spearman rho of each weighted replicate (rows of ``w`` in blocks of ``ROWS``: each row on its own, so the
    values are those of the whole matrix at once)."""
    tx, ty = _Ties(x), _Ties(y)
    return np.concatenate([np.empty(0), *(_spearman_rows(tx, ty, w[i:i + ROWS]) for i in range(0, len(w), ROWS))])


def _spearman_rows(tx: _Ties, ty: _Ties, w: np.ndarray) -> np.ndarray:
    rx, ry = tx.ranks(w), ty.ranks(w)
    sw = w.sum(1)
    sx, sy = (w * rx).sum(1), (w * ry).sum(1)
    cov = sw * (w * rx * ry).sum(1) - sx * sy
    var = (sw * (w * rx * rx).sum(1) - sx * sx) * (sw * (w * ry * ry).sum(1) - sy * sy)
    with np.errstate(invalid="ignore", divide="ignore"):
        r = cov / np.sqrt(var)
    r[var <= 0] = np.nan
    return r


KENDALL_BLOCK = 1 << 22  # elements of S built at once (16 MB of float32), whatever the number of items


def weighted_kendall(x: np.ndarray, y: np.ndarray, w: np.ndarray, chunk: int = 256) -> np.ndarray:
    """Kendall tau-b of each weighted replicate: (C − D) / sqrt((n0 − n1)(n0 − n2)).

    C − D = ½ wᵀ S w with S_ij = sign(x_i − x_j)·sign(y_i − y_j); copies of one item tie on both sides. S is built a
    block of columns at a time (memory linear in the items, not quadratic); every partial sum is an integer below
    2^24, exact in float32, so the blocks add up to the same value as the whole product.
    """
    x32, y32 = x.astype(np.float32), y.astype(np.float32)
    n_items = len(x)
    step = max(1, KENDALL_BLOCK // max(n_items, 1))
    tx, ty = _Ties(x), _Ties(y)
    out = np.empty(len(w))
    for i in range(0, len(w), chunk):
        wc = w[i:i + chunk]
        wc32 = wc.astype(np.float32)
        cd = np.zeros(len(wc))
        for j in range(0, n_items, step):
            s = np.sign(x32[:, None] - x32[None, j:j + step])
            s *= np.sign(y32[:, None] - y32[None, j:j + step])
            cd += (wc[:, j:j + step] * (wc32 @ s)).sum(1)
        cd *= 0.5
        n = wc.sum(1)
        n0 = n * (n - 1) / 2
        gx, gy = tx.groups(wc), ty.groups(wc)
        denom = (n0 - (gx * (gx - 1) / 2).sum(1)) * (n0 - (gy * (gy - 1) / 2).sum(1))
        with np.errstate(invalid="ignore", divide="ignore"):
            out[i:i + chunk] = np.where(denom > 0, cd / np.sqrt(np.maximum(denom, 0)), np.nan)
    return out


# ---------------------------------------------------------------- the registry

def _scipy(name: str) -> Callable:
    from scipy import stats  # here, not at the top: ~0.5 s to import, and a small job may never correlate

    return {"pearson": stats.pearsonr, "spearman": stats.spearmanr, "kendall": stats.kendalltau}[name]


@dataclass(frozen=True)
class Coefficient:
    name: str
    value: Callable[[np.ndarray, np.ndarray], float]
    rows: Callable[[np.ndarray, np.ndarray], np.ndarray]
    weighted: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]

    def test(self, x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
        """scipy's value and p-value."""
        res = _scipy(self.name)(x, y)
        return float(res[0]), float(res[1])


REGISTRY: dict[str, Coefficient] = {c.name: c for c in (
    Coefficient("pearson", _pearson, _rows_pearson, weighted_pearson),
    Coefficient("spearman", _spearman, _rows_spearman, weighted_spearman),
    Coefficient("kendall", _kendall, _rows_kendall, weighted_kendall),
)}
NAMES: tuple[str, ...] = tuple(REGISTRY)


def coefficient(name: str) -> Coefficient:
    """The coefficient called ``name`` (ValueError naming the known ones otherwise)."""
    if name not in REGISTRY:
        raise ValueError(f"unknown coefficient {name!r}; choose from {', '.join(NAMES)}")
    return REGISTRY[name]


def rows_correlation(a: np.ndarray, b: np.ndarray, name: str) -> np.ndarray:
    """The coefficient between a[r] and b[r] for every row r (``b`` may be one row, shared by every row of ``a``)."""
    return coefficient(name).rows(np.asarray(a, float), np.asarray(b, float))
