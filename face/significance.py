"""Is one evaluator's correlation with the human labels really higher than another's on the same items?

Two tests, both paired (the two evaluators score the same items, so their errors are correlated):

- ``paired_bootstrap``: the difference of the two correlations with its percentile CI, from
  ``face.metaeval.paired_difference`` (clusters — conversations, or USR contexts — are resampled, every
  item of a drawn cluster comes along), plus a two-sided bootstrap p-value read from the same resamples:
  ``p = min(1, 2·min(P*(d ≤ 0), P*(d ≥ 0)))``. It rejects at α exactly when the (1 − α) percentile CI
  excludes 0. Any coefficient.
- ``williams``: Williams' t-test for two dependent correlations sharing one variable (Steiger 1980,
  eq. 14; the test the WMT metrics tasks use): r(a, human) vs r(b, human) given r(a, b), n − 3 degrees
  of freedom. Pearson only, and it assumes independent items: with several items per context (USR) or
  several turns per conversation it is anti-conservative; the clustered bootstrap is the one to trust.

``comparison_table`` puts both beside every (aspect, split, coefficient) of a set of methods compared with
one reference method (FACE vs each baseline).
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

import numpy as np
import pandas as pd
from scipy import stats

from face.aspects import Aspect
from face.data.schema import Conversation
from face.metaeval import correlate, items, paired_replicates
from face.predictions import Predictions

COMPARISON_COLUMNS = ["aspect", "level", "split", "coefficient", "method_a", "method_b", "value_a", "value_b",
                      "diff", "ci_low", "ci_high", "p_bootstrap", "p_williams", "n", "n_clusters"]


def williams(r_ay: float, r_by: float, r_ab: float, n: int) -> tuple[float, float]:
    """Williams' t and its two-sided p-value for H0: rho(a, y) = rho(b, y), a and b measured on the same n items.

    t = (r_ay − r_by) · sqrt((n − 1)(1 + r_ab)) / sqrt(2 K (n − 1)/(n − 3) + ((r_ay + r_by)/2)² (1 − r_ab)³),
    K = 1 − r_ay² − r_by² − r_ab² + 2 r_ay r_by r_ab (the determinant of the 3 × 3 correlation matrix)."""
    if n <= 3 or not all(math.isfinite(v) for v in (r_ay, r_by, r_ab)):
        return float("nan"), float("nan")
    k = 1 - r_ay ** 2 - r_by ** 2 - r_ab ** 2 + 2 * r_ay * r_by * r_ab
    denom = 2 * k * (n - 1) / (n - 3) + ((r_ay + r_by) / 2) ** 2 * (1 - r_ab) ** 3
    if denom <= 0:
        return float("nan"), float("nan")
    t = (r_ay - r_by) * math.sqrt((n - 1) * (1 + r_ab)) / math.sqrt(denom)
    return float(t), float(2 * stats.t.sf(abs(t), n - 3))


def williams_test(pred_a: np.ndarray, pred_b: np.ndarray, human: np.ndarray) -> tuple[float, float]:
    """Williams' test on raw values (Pearson correlations computed here)."""
    a, b, y = (np.asarray(v, float) for v in (pred_a, pred_b, human))
    if len(y) <= 3 or min(np.ptp(a), np.ptp(b), np.ptp(y)) == 0:
        return float("nan"), float("nan")
    r_ay, r_by, r_ab = (float(np.corrcoef(u, v)[0, 1]) for u, v in ((a, y), (b, y), (a, b)))
    return williams(r_ay, r_by, r_ab, len(y))


def paired_bootstrap(pred_a: np.ndarray, pred_b: np.ndarray, human: np.ndarray, clusters: np.ndarray,
                     coefficient: str, n_boot: int = 1000, seed: int = 0, confidence: float = 0.95
                     ) -> dict[str, float]:
    """``{diff, ci_low, ci_high, p_value}`` for coef(a, human) − coef(b, human), resampling clusters.

    diff and CI are ``metaeval.paired_difference``'s; the p-value is read from the same resamples."""
    diff, lo, hi, d = paired_replicates(pred_a, pred_b, human, clusters, coefficient, n_boot, seed, confidence)
    d = d[~np.isnan(d)]
    p = float(min(1.0, 2 * min(np.mean(d <= 0), np.mean(d >= 0)))) if len(d) else float("nan")
    return {"diff": float(diff), "ci_low": lo, "ci_high": hi, "p_value": p}


def _joined(a: str, pred_a: Predictions, b: str, pred_b: Predictions, convs: Sequence[Conversation], aspect: Aspect
            ) -> pd.DataFrame:
    """One row per labelled item both methods predicted, with a column of each method's prediction."""
    key = ["conv_id", "turn_ind"]
    df_b = items(pred_b, convs, aspect).rename(columns={"pred": b})
    return items(pred_a, convs, aspect).rename(columns={"pred": a}).merge(df_b[[*key, b]], on=key).dropna(subset=[a, b])


def comparison_table(preds: Mapping[str, Predictions], reference: str, convs: Sequence[Conversation],
                     aspects: Sequence[Aspect], splits: Sequence[str] = ("all",),
                     coefficients: Sequence[str] = ("pearson", "spearman"), n_boot: int = 1000, seed: int = 0,
                     confidence: float = 0.95, cluster_of: Mapping[str, str] | None = None) -> pd.DataFrame:
    """``reference`` − every other method, per aspect (at its own level), split and coefficient.

    Items: those both methods of a pair predicted (so both correlations are on the same items). Clusters: the
    conversation, or ``cluster_of[conv_id]`` (USR: the context, shared by its responses)."""
    rows = []
    others = [m for m in preds if m != reference]
    for aspect in aspects:
        for other in others:  # each pair on the items both predicted
            df = _joined(reference, preds[reference], other, preds[other], convs, aspect)
            clusters = df["conv_id"].map(cluster_of) if cluster_of else df["conv_id"]
            df = df.assign(cluster=clusters.to_numpy())
            for split in splits:
                sdf = df if split == "all" else df[df["split"] == split]
                y = sdf["human"].to_numpy(float)
                a, b = sdf[reference].to_numpy(float), sdf[other].to_numpy(float)
                for coef in coefficients:
                    va, vb = correlate(a, y, [coef])[coef][0], correlate(b, y, [coef])[coef][0]
                    bs = paired_bootstrap(a, b, y, sdf["cluster"].to_numpy(), coef, n_boot, seed, confidence)
                    pw = williams_test(a, b, y)[1] if coef == "pearson" else float("nan")
                    rows.append((aspect.name, aspect.level, split, coef, reference, other, va, vb, bs["diff"],
                                 bs["ci_low"], bs["ci_high"], bs["p_value"], pw, len(sdf),
                                 sdf["cluster"].nunique()))
    return pd.DataFrame(rows, columns=COMPARISON_COLUMNS)
