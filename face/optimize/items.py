"""Evaluation items of one aspect (a labelled assistant turn, or a labelled dialogue), rewards and errors."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
from scipy import stats

from face.aspects import Aspect
from face.coefficients import coefficient
from face.data.schema import Conversation
from face.predictions import round_preds


@dataclass(frozen=True)
class Item:
    conv_id: str
    turn_ind: int  # -1: the whole dialogue
    gold: float
    system: str = ""


def items_for(aspect: Aspect, convs: Sequence[Conversation]) -> list[Item]:
    """Every labelled unit of ``aspect`` at its level, in conversation order."""
    if aspect.level == "dialogue":
        return [Item(c.conv_id, -1, float(c.labels[aspect.name]), c.system) for c in convs if aspect.name in c.labels]
    return [Item(c.conv_id, t.turn_ind, float(t.labels[aspect.name]), c.system)
            for c in convs for t in c.evaluated_turns() if aspect.name in t.labels]


def indices_of(items: Sequence[Item], conv_ids: Sequence[str]) -> np.ndarray:
    keep = set(conv_ids)
    return np.array([i for i, it in enumerate(items) if it.conv_id in keep], dtype=int)


def correlation(pred: np.ndarray, gold: np.ndarray, kind: str = "spearman") -> float:
    """The correlation ``kind`` (face.coefficients) of predictions (rounded like the project's, so equal predictions
    tie) with the gold labels; NaN where undefined (fewer than 3 items, a constant side)."""
    pred, gold = round_preds(pred), np.asarray(gold, float)
    ok = ~(np.isnan(pred) | np.isnan(gold))
    pred, gold = pred[ok], gold[ok]
    if len(pred) < 3 or np.ptp(pred) == 0 or np.ptp(gold) == 0:
        return float("nan")
    return coefficient(kind).value(pred, gold)


def reward(pred: np.ndarray, gold: np.ndarray, kind: str = "spearman") -> float:
    """A bandit reward: the correlation, 0 where it is undefined (constant predictions rank nothing)."""
    r = correlation(pred, gold, kind)
    return 0.0 if np.isnan(r) else r


def errors(pred: np.ndarray, gold: np.ndarray, kind: str = "rank") -> np.ndarray:
    """Per-item error: ``rank`` = |normalised rank of pred − normalised rank of gold|, ``abs`` = |pred − gold|.
    Items without a prediction get the largest error."""
    pred, gold = np.asarray(pred, float), np.asarray(gold, float)
    missing = np.isnan(pred)
    if kind == "abs":
        err = np.abs(pred - gold)
    else:
        n = max(len(pred) - 1, 1)
        filled = np.where(missing, np.nanmin(pred) if (~missing).any() else 0.0, pred)
        err = np.abs((stats.rankdata(filled) - 1) / n - (stats.rankdata(gold) - 1) / n)
    return np.where(missing, np.inf, err)


def worst(pred: np.ndarray, gold: np.ndarray, k: int, kind: str = "rank") -> np.ndarray:
    """Positions of the ``k`` worst-predicted items (largest error first; ties: earlier first)."""
    return np.argsort(-errors(pred, gold, kind), kind="stable")[:k]
