"""Meta-evaluation: correlation of predictions with human labels at turn, dialogue and system level.

- Turn level: one item per labelled assistant turn; dialogue level: one item per conversation.
- Splits: the dataset's splits (CRSArena-Eval: ``redial`` / ``opendialkg``) and ``all`` (pooled).
- System level: one point per system (a CRS, a response generator): mean prediction vs mean human label.
- Coefficients: Pearson, Spearman, Kendall (tau-b, as scipy): one registry, ``face.coefficients``.
- 95 % bootstrap CIs by resampling conversations (all turns of a drawn conversation come along; at
  system level conversations are resampled within each system). Vectorised: every bootstrap replicate
  is a row of integer weights, and the weighted coefficients (``Coefficient.weighted``) are exactly the
  coefficients of the resampled data set (tested against scipy on the expanded sample).
"""

from __future__ import annotations

import functools
import logging
from typing import Iterable, Sequence

import numpy as np
import pandas as pd

from face.aspects import Aspect
from face.coefficients import NAMES, REGISTRY, rows_correlation
from face.console import progress
from face.data.schema import Conversation
from face.predictions import Predictions, round_preds
from face.resample import draw_counts, percentile_interval

log = logging.getLogger(__name__)


@functools.cache
def warn_once(text: str) -> None:
    """A warning printed once per process: the same missing interval is met for every aspect, split and level (nine
    identical lines on a 3-conversation run), and saying it once says it all."""
    log.warning("%s", text)


COEFFICIENTS = NAMES  # Pearson, Spearman, Kendall: face.coefficients
LEVELS = ("turn", "dialogue", "system")
RESULT_COLUMNS = ["level", "aspect", "split", "coefficient", "value", "p_value", "ci_low", "ci_high", "n",
                  "n_missing"]


# ---------------------------------------------------------------- point estimates (scipy)

def correlate(pred: np.ndarray, human: np.ndarray, names: Sequence[str] = COEFFICIENTS
              ) -> dict[str, tuple[float, float]]:
    """coefficient -> (value, p-value) for every coefficient (or only ``names``); NaN where undefined (fewer than 3
    items or a constant side)."""
    pred, human = np.asarray(pred, float), np.asarray(human, float)
    if len(pred) < 3 or np.ptp(pred) == 0 or np.ptp(human) == 0:
        return {c: (float("nan"), float("nan")) for c in names}
    return {name: REGISTRY[name].test(pred, human) for name in names}


# ---------------------------------------------------------------- resampling

def cluster_weights(clusters: np.ndarray, n_boot: int, rng: np.random.Generator,
                    strata: np.ndarray | None = None) -> np.ndarray:
    """B × n integer weights: resample clusters (conversations) with replacement, optionally within strata.

    ``clusters`` gives each item's cluster; every item of a drawn cluster gets its cluster's count.
    """
    counts, inv = cluster_counts(clusters, n_boot, rng, strata)
    return counts[:, inv]


def cluster_counts(clusters: np.ndarray, n_boot: int, rng: np.random.Generator,
                   strata: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``cluster_weights`` before it is spread over the items: (B × clusters counts, each item's cluster)."""
    uniq, inv = np.unique(clusters, return_inverse=True)
    k = len(uniq)
    counts = np.zeros((n_boot, k))
    if strata is None:
        groups = [np.arange(k)]
    else:
        cluster_stratum = np.empty(k, dtype=object)
        cluster_stratum[inv] = strata
        groups = [np.flatnonzero(cluster_stratum == s) for s in pd.unique(cluster_stratum)]
    for members in groups:
        counts[:, members] = draw_counts(len(members), n_boot, rng)
    return counts, inv


ROWS = 100  # bootstrap replicates spread over the items at once: memory ~ ROWS × items, not replicates × items
MIN_CLUSTERS = 2  # fewer conversations (per split, or per system) than this: no interval


def bootstrap_ci(pred: np.ndarray, human: np.ndarray, clusters: np.ndarray, n_boot: int = 1000,
                 seed: int = 0, confidence: float = 0.95,
                 coefficients: Sequence[str] = COEFFICIENTS) -> dict[str, tuple[float, float]]:
    """Percentile CI of each coefficient, resampling clusters (conversations). No interval (NaN) with fewer
    than 3 items or fewer than ``MIN_CLUSTERS`` conversations: resampling one conversation only repeats it."""
    if n_boot <= 0 or len(pred) < 3 or len(np.unique(clusters)) < MIN_CLUSTERS:
        if n_boot > 0 and len(pred) >= 3:
            warn_once(f"no bootstrap interval: the items come from {len(np.unique(clusters))} conversation(s), "
                      f"need >= {MIN_CLUSTERS}")
        return {c: (float("nan"), float("nan")) for c in coefficients}
    rng = np.random.default_rng(seed)
    counts, inv = cluster_counts(np.asarray(clusters), n_boot, rng)
    x, y = np.asarray(pred, float), np.asarray(human, float)
    # the replicates a block of ROWS at a time, spread over the items only then: memory ~ ROWS × items
    blocks: dict[str, list[np.ndarray]] = {c: [] for c in coefficients}
    for i in range(0, n_boot, ROWS):
        w = counts[i:i + ROWS][:, inv]
        for c in coefficients:
            blocks[c].append(REGISTRY[c].weighted(x, y, w))
    return {c: percentile_interval(np.concatenate(blocks[c]), confidence) for c in coefficients}


def paired_difference(pred_a: np.ndarray, pred_b: np.ndarray, human: np.ndarray, clusters: np.ndarray,
                      coefficient: str, n_boot: int = 1000, seed: int = 0, confidence: float = 0.95
                      ) -> tuple[float, float, float]:
    """coef(a, human) − coef(b, human) and its paired percentile CI: both predictions are correlated on the
    same resampled conversations, so what they share cancels (the CI of a difference, not two CIs)."""
    return paired_replicates(pred_a, pred_b, human, clusters, coefficient, n_boot, seed, confidence)[:3]


def paired_replicates(pred_a: np.ndarray, pred_b: np.ndarray, human: np.ndarray, clusters: np.ndarray,
                      coefficient: str, n_boot: int, seed: int, confidence: float
                      ) -> tuple[float, float, float, np.ndarray]:
    """``paired_difference`` and the difference in each resample it drew (NaN where a side does not vary; none
    when there are too few items or clusters to resample), for a p-value read from the same resamples."""
    a, b, y = (np.asarray(v, float) for v in (pred_a, pred_b, human))
    diff = correlate(a, y, [coefficient])[coefficient][0] - correlate(b, y, [coefficient])[coefficient][0]
    if n_boot <= 0 or len(y) < 3 or len(np.unique(clusters)) < MIN_CLUSTERS:
        return diff, float("nan"), float("nan"), np.empty(0)
    w = cluster_weights(np.asarray(clusters), n_boot, np.random.default_rng(seed))
    weighted = REGISTRY[coefficient].weighted
    vals = weighted(a, y, w) - weighted(b, y, w)
    return diff, *percentile_interval(vals, confidence), vals


# ---------------------------------------------------------------- system level

def system_means(values: np.ndarray, systems: np.ndarray, w: np.ndarray | None = None) -> tuple[list, np.ndarray]:
    """Mean of ``values`` per system (columns, sorted system names); one row per weight row. Rounded to
    ``PRED_DECIMALS`` like every prediction: a matrix product's last bits depend on how BLAS splits it (threads,
    load), and equal means must tie exactly whatever they were, or rank correlations over a few systems move."""
    names = sorted(set(systems))
    onehot = (np.asarray(systems)[:, None] == np.array(names)[None, :]).astype(float)
    if w is None:
        w = np.ones((1, len(values)))
    with np.errstate(invalid="ignore", divide="ignore"):
        return names, round_preds((w @ (onehot * np.asarray(values, float)[:, None])) / (w @ onehot))


# ---------------------------------------------------------------- items: predictions joined with labels

def items(preds: Predictions, convs: Iterable[Conversation], aspect: Aspect) -> pd.DataFrame:
    """Labelled items of one aspect with their prediction (NaN where missing).

    Columns: conv_id, turn_ind (turn level only), split, system, human, pred.
    """
    level, name = aspect.level, aspect.name
    rows = []
    for c in convs:
        if level == "turn":
            for t in c.evaluated_turns():
                if name in t.labels:
                    rows.append((c.conv_id, t.turn_ind, c.split, c.system, t.labels[name]))
        elif name in c.labels:
            rows.append((c.conv_id, -1, c.split, c.system, c.labels[name]))
    df = pd.DataFrame(rows, columns=["conv_id", "turn_ind", "split", "system", "human"])
    table, key = (preds.turn, ["conv_id", "turn_ind"]) if level == "turn" else (preds.dialogue, ["conv_id"])
    return df.merge(table[table["aspect"] == name][[*key, "pred"]], on=key, how="left", validate="one_to_one")


def meta_evaluate(preds: Predictions, convs: Sequence[Conversation], aspects: Sequence[Aspect],
                  splits: Sequence[str] = ("all",), levels: Sequence[str] = LEVELS,
                  n_boot: int = 1000, seed: int = 0, confidence: float = 0.95) -> pd.DataFrame:
    """Every correlation, as a long table with columns ``RESULT_COLUMNS``.

    ``level`` is ``turn`` / ``dialogue`` (each aspect at its own level) or ``system``.
    Items without a prediction are dropped and counted in ``n_missing``.
    """
    rows = []
    # the bootstrap takes seconds per aspect on the full data: a bar while it runs (cleared after; see face.console)
    todo = progress(aspects, f"bootstrap CIs ({n_boot} resamples)", unit="aspect", leave=False) if n_boot else aspects
    for spec in todo:
        df = items(preds, convs, spec)
        aspect, native = spec.name, spec.level
        for split in splits:
            sdf = df if split == "all" else df[df["split"] == split]
            have = sdf.dropna(subset=["pred"])
            n_missing = len(sdf) - len(have)
            if native in levels:
                point = correlate(have["pred"].to_numpy(), have["human"].to_numpy())
                ci = bootstrap_ci(have["pred"].to_numpy(), have["human"].to_numpy(), have["conv_id"].to_numpy(),
                                  n_boot, seed, confidence)
                for c in COEFFICIENTS:
                    rows.append((native, aspect, split, c, *point[c], *ci[c], len(have), n_missing))
            if "system" in levels:
                for c, (value, p, lo, hi, n) in system_correlations(have, n_boot, seed, confidence).items():
                    rows.append(("system", aspect, split, c, value, p, lo, hi, n, n_missing))
    return pd.DataFrame(rows, columns=RESULT_COLUMNS)


def system_correlations(items_df: pd.DataFrame, n_boot: int = 1000, seed: int = 0, confidence: float = 0.95
                        ) -> dict[str, tuple[float, float, float, float, int]]:
    """coefficient -> (value, p, ci_low, ci_high, number of systems) over per-system means."""
    pred, human = items_df["pred"].to_numpy(float), items_df["human"].to_numpy(float)
    systems, convs = items_df["system"].to_numpy(), items_df["conv_id"].to_numpy()
    names, mp = system_means(pred, systems)
    _, mh = system_means(human, systems)
    point = correlate(mp[0], mh[0])
    ci = {c: (float("nan"), float("nan")) for c in COEFFICIENTS}
    per_system = pd.Series(convs).groupby(systems).nunique()
    if n_boot > 0 and len(names) >= 3 and per_system.min() < MIN_CLUSTERS:
        warn_once(f"no system-level interval: a system has {per_system.min()} conversation(s), need >= "
                  f"{MIN_CLUSTERS} per system")
    elif n_boot > 0 and len(names) >= 3:
        w = cluster_weights(convs, n_boot, np.random.default_rng(seed), strata=systems)
        _, bp = system_means(pred, systems, w)
        _, bh = system_means(human, systems, w)
        ci = {c: percentile_interval(rows_correlation(bp, bh, c), confidence) for c in COEFFICIENTS}
    return {c: (*point[c], *ci[c], len(names)) for c in COEFFICIENTS}


def system_table(preds: Predictions, convs: Sequence[Conversation], aspect: Aspect) -> pd.DataFrame:
    """Per-system mean prediction and mean human label (for the system-level scatter)."""
    df = items(preds, convs, aspect).dropna(subset=["pred"])
    return (df.groupby("system").agg(pred=("pred", "mean"), human=("human", "mean"), n=("pred", "size"),
                                     split=("split", "first"))
            .reset_index().assign(aspect=aspect.name))
