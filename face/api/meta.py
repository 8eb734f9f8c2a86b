"""``face.meta_evaluate``: the correlations of a ``face.Result``'s scores with human labels (the labels in its
conversations, a CRSArena-Eval file, or a DataFrame), every argument checked first."""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from face import metaeval
from face.api.result import Result
from face.datasets.crsarena import ASPECT_ALIASES, load_conversations
from face.errors import ConfigError, DataError
from face.experiments.settings import RunSettings


def _label_frame(labels: Any) -> pd.DataFrame:
    """``labels`` as a DataFrame (conv_id, turn_ind, aspect, label): a CRSArena-Eval file is read."""
    if isinstance(labels, (str, os.PathLike)):
        convs = load_conversations(Path(labels), require_labels=False)
        rows: list[tuple[str, int | None, str, float]] = [(c.conv_id, None, a, v) for c in convs
                                                          for a, v in c.labels.items()]
        rows += [(c.conv_id, t.turn_ind, a, v) for c in convs for t in c.turns for a, v in t.labels.items()]
        return pd.DataFrame(rows, columns=["conv_id", "turn_ind", "aspect", "label"])
    if not isinstance(labels, pd.DataFrame):
        raise ConfigError(f"labels must be a DataFrame (conv_id, [turn_ind], aspect, label) or a CRSArena-Eval file, "
                          f"got {type(labels).__name__}")
    missing = [c for c in ("conv_id", "aspect", "label") if c not in labels.columns]
    if missing:
        raise DataError("labels", f"missing columns {', '.join(missing)} (expected conv_id, aspect, label and, for "
                                  "turn-level labels, turn_ind)")
    return labels


def _number(value: Any, what: str, row: int) -> float:
    if isinstance(value, bool):
        raise DataError("labels", f"{what} {value!r} is not a number", f"row {row}")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise DataError("labels", f"{what} {value!r:.40} is not a number", f"row {row}") from None


def _turn(value: Any, row: int) -> int | None:
    """A row's turn index: None (absent, NaN: a dialogue label) or an integer."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    number = _number(value, "turn_ind", row)
    if not number.is_integer():
        raise DataError("labels", f"turn_ind {value!r} is not an integer", f"row {row}")
    return int(number)


def _with_labels(result: Result, labels: Any, from_file: bool) -> list:
    """The result's conversations with the human labels of ``labels``, each row checked: its conversation and turn
    in the result, a numeric label, an aspect the result holds (a file's labels of other aspects are left out)."""
    frame, convs = _label_frame(labels), result.conversations
    known, held = {c.conv_id: c for c in convs}, {a.name for a in result.aspects}
    unknown = sorted(set(frame["conv_id"].astype(str)) - set(known))
    if unknown:
        raise DataError("labels", f"{len(unknown)} conversation(s) not in the result, e.g. {unknown[0]!r}")
    turn_labels: dict[tuple[str, int], dict] = {}
    dial_labels: dict[str, dict] = {}
    for i, r in enumerate(frame.itertuples(index=False)):
        aspect = ASPECT_ALIASES.get(r.aspect, r.aspect) if isinstance(r.aspect, str) else r.aspect
        if aspect not in held:
            if from_file:
                continue
            raise DataError("labels", f"aspect {r.aspect!r:.40} is not one of the result's ({', '.join(sorted(held))})",
                            f"row {i}")
        value = _number(r.label, "label", i)
        if not math.isfinite(value):
            continue  # no label
        turn = _turn(getattr(r, "turn_ind", None), i)  # no column: a dialogue label
        if turn is None:
            dial_labels.setdefault(str(r.conv_id), {})[aspect] = value
        elif turn not in {t.turn_ind for t in known[str(r.conv_id)].turns}:
            raise DataError("labels", f"conversation {str(r.conv_id)!r} has no turn {turn}", f"row {i}")
        else:
            turn_labels.setdefault((str(r.conv_id), turn), {})[aspect] = value
    return [dataclasses.replace(c, labels=dial_labels.get(c.conv_id, {}), turns=tuple(
        dataclasses.replace(t, labels=turn_labels.get((c.conv_id, t.turn_ind), {})) for t in c.turns)) for c in convs]


def meta_evaluate(result: Result, labels: pd.DataFrame | str | os.PathLike | None = None, *,
                  levels: Sequence[str] = metaeval.LEVELS, n_boot: int = 1000, seed: int = 0,
                  confidence: float = 0.95) -> pd.DataFrame:
    """Correlations of ``result``'s scores with human labels: Pearson, Spearman and Kendall with bootstrap CIs
    (resampling conversations), at turn and dialogue level (each aspect at its own) and system level (one mean per
    system; needs 2+ systems), per split of the conversations and pooled (``all``).

    ``labels``: None (the labels in the evaluated conversations, e.g. CRSArena-Eval's file), a CRSArena-Eval file
    (its labels of the result's aspects), or a DataFrame with columns ``conv_id``, ``aspect`` (one of the result's),
    ``label`` (a number) and ``turn_ind`` (absent or NaN: a dialogue label). Returns one row per level × aspect ×
    split × coefficient: ``value``, ``p_value``, ``ci_low``, ``ci_high``, ``n`` (items with a prediction),
    ``n_missing`` (labelled items without one)."""
    if not isinstance(result, Result):
        raise ConfigError(f"meta_evaluate takes the Result of face.evaluate, got {type(result).__name__}")
    levels = [levels] if isinstance(levels, str) else levels
    if not isinstance(levels, Sequence) or not all(isinstance(v, str) for v in levels):
        raise ConfigError(f"levels: a list of {', '.join(metaeval.LEVELS)}, got {levels!r:.60}")
    bad = sorted(set(levels) - set(metaeval.LEVELS))
    if bad or not levels:
        raise ConfigError(f"levels: {bad or 'none'} (choose from {', '.join(metaeval.LEVELS)})")
    given: dict[str, Any] = {"seed": seed, "metaeval": {"n_boot": n_boot, "confidence": confidence}}
    RunSettings(**given)  # typed as a run's: one line naming the bad one (the rest: conf/config.yaml's)
    convs = (result.conversations if labels is None else
             _with_labels(result, labels, from_file=isinstance(labels, (str, os.PathLike))))
    held = {a.name for a in result.aspects}
    if not any(set(c.labels) & held or any(set(t.labels) & held for t in c.turns) for c in convs):
        raise DataError("labels", "no human label of the result's aspects for the evaluated conversations: pass "
                                  "labels= (a DataFrame or a CRSArena-Eval file)")
    splits = sorted({c.split for c in convs} - {"all"})
    splits = [*splits, "all"] if len(splits) != 1 else splits
    return metaeval.meta_evaluate(result.predictions, convs, result.aspects, splits, list(levels), n_boot, seed,
                                  confidence)
