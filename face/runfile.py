"""Run files in the FACE authors' format, so their evaluation script accepts ours and vice versa.

``[{"conv_id", "turns": [{"turn_ind", "turn_level_pred": {aspect: float}}], "dial_level_pred": {aspect: float}}]``
Legacy aliases ``dialog_overall`` / ``overall_impression`` are read as ``dialogue_overall``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Collection

import pandas as pd

from face.data.io import check_type, field, read_json
from face.datasets.crsarena import ASPECT_ALIASES
from face.errors import DataError
from face.files import atomic_open
from face.predictions import DIALOGUE_COLUMNS, TURN_COLUMNS, Predictions


def to_records(preds: Predictions) -> list[dict]:
    convs: dict[str, dict] = {}

    def conv(conv_id: str) -> dict:
        return convs.setdefault(conv_id, {"conv_id": conv_id, "turns": {}, "dial_level_pred": {}})

    for row in preds.turn.itertuples(index=False):
        conv(row.conv_id)["turns"].setdefault(int(row.turn_ind), {})[row.aspect] = float(row.pred)
    for row in preds.dialogue.itertuples(index=False):
        conv(row.conv_id)["dial_level_pred"][row.aspect] = float(row.pred)
    return [{"conv_id": c["conv_id"],
             "turns": [{"turn_ind": t, "turn_level_pred": p} for t, p in sorted(c["turns"].items())],
             "dial_level_pred": c["dial_level_pred"]} for c in convs.values()]


def write_run_file(preds: Predictions, path: str | Path) -> Path:
    """Write atomically (a crash never leaves a half-written run file)."""
    path = Path(path)
    with atomic_open(path) as f:
        json.dump(to_records(preds), f, indent=1)
    return path


def _aspect(name: str, known: Collection[str] | None, path: Path, rec: str) -> str:
    canon = ASPECT_ALIASES.get(name, name)
    if known is not None and canon not in known:
        raise DataError(path, f"unknown aspect {name!r}; known: {', '.join(known)}", rec)
    return canon


def _value(v: object, path: Path, rec: str) -> float:
    v = float(check_type(v, float, path, rec))
    if math.isnan(v) or math.isinf(v):
        raise DataError(path, f"prediction is {v}", rec)
    return v


def read_run_file(path: str | Path, known: Collection[str] | None = None) -> Predictions:
    """Predictions of a run file; ``known``: the dataset's aspect names (others are an error)."""
    path = Path(path)
    raw = check_type(read_json(path), list, path, "top level")
    if not raw:
        raise DataError(path, "no conversations (an empty run file)", "top level")
    turn_rows, dial_rows = [], []
    seen: set[str] = set()
    for i, obj in enumerate(raw):
        conv_id = field(obj, "conv_id", str, path, f"index {i}")
        rec = f"conversation {conv_id!r}"
        if conv_id in seen:
            raise DataError(path, f"duplicate conversation (again at index {i})", rec)
        seen.add(conv_id)
        turns_seen: set[int] = set()
        for j, t in enumerate(field(obj, "turns", list, path, rec) if "turns" in obj else []):
            t_rec = f"{rec}, turns[{j}]"
            turn_ind = field(t, "turn_ind", int, path, t_rec)
            if turn_ind in turns_seen:
                raise DataError(path, f"duplicate turn_ind {turn_ind}", t_rec)
            turns_seen.add(turn_ind)
            for name, v in field(t, "turn_level_pred", dict, path, t_rec).items():
                turn_rows.append((_aspect(name, known, path, t_rec), conv_id, turn_ind,
                                  _value(v, path, f"{t_rec}, {name}")))
        for name, v in (check_type(obj.get("dial_level_pred") or {}, dict, path, rec)).items():
            dial_rows.append((_aspect(name, known, path, rec), conv_id, _value(v, path, f"{rec}, {name}")))
    return Predictions(pd.DataFrame(turn_rows, columns=TURN_COLUMNS), pd.DataFrame(dial_rows, columns=DIALOGUE_COLUMNS))
