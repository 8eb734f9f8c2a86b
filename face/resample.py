"""The bootstrap's shared parts: how often each unit is drawn in each resample, and the percentile interval of the
replicates. The meta-evaluation (conversations resampled, within strata or not), ``face compare`` and the
system-level experiment all resample through these two."""

from __future__ import annotations

import numpy as np

CHUNK = 10_000  # replicates drawn at a time (memory ~ CHUNK × units); even, so a chunked draw is one long draw


def draw_counts(n_units: int, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """B × n: how often each of n units is drawn in each of B resamples of size n with replacement."""
    out = np.empty((n_boot, n_units))
    for start in range(0, n_boot, CHUNK):
        b = min(CHUNK, n_boot - start)
        draws = rng.integers(0, n_units, size=(b, n_units)) + np.arange(b)[:, None] * n_units
        out[start:start + b] = np.bincount(draws.ravel(), minlength=b * n_units).reshape(b, n_units)
    return out


def percentile_interval(replicates: np.ndarray, confidence: float) -> tuple[float, float]:
    """The ``confidence`` percentile interval of the replicates, NaN ones left out (all NaN: no interval, NaN)."""
    vals = np.asarray(replicates, float)
    vals = vals[~np.isnan(vals)]
    if not len(vals):
        return float("nan"), float("nan")
    lo, hi = np.percentile(vals, [50 * (1 - confidence), 50 * (1 + confidence)])
    return float(lo), float(hi)
