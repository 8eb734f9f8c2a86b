"""Run files round-trip in the authors' format; legacy aliases are read; bad files fail clearly."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from face.aggregate import Predictions
from face.data import RELEASED_RUN, DataError
from face.data.crsarena import ASPECTS
from face.runfile import read_run_file, write_run_file

PREDS = Predictions(
    pd.DataFrame([("relevance", "c1", 1, 0.5), ("interestingness", "c1", 1, 1.25), ("relevance", "c1", 3, 2.0)],
                 columns=["aspect", "conv_id", "turn_ind", "pred"]),
    pd.DataFrame([("dialogue_overall", "c1", 3.0), ("efficiency", "c2", 0.5)], columns=["aspect", "conv_id", "pred"]))


def _sorted(df):
    return df.sort_values(list(df.columns[:-1])).reset_index(drop=True)


def test_round_trip(tmp_path):
    p = write_run_file(PREDS, tmp_path / "run.json")
    back = read_run_file(p)
    pd.testing.assert_frame_equal(_sorted(back.turn), _sorted(PREDS.turn), check_dtype=False)
    pd.testing.assert_frame_equal(_sorted(back.dialogue), _sorted(PREDS.dialogue), check_dtype=False)


def test_written_file_matches_documented_schema(tmp_path):
    raw = json.loads(write_run_file(PREDS, tmp_path / "run.json").read_text())
    assert isinstance(raw, list)
    for conv in raw:
        assert set(conv) == {"conv_id", "turns", "dial_level_pred"}
        for t in conv["turns"]:
            assert set(t) == {"turn_ind", "turn_level_pred"} and isinstance(t["turn_ind"], int)
            assert all(isinstance(v, float) for v in t["turn_level_pred"].values())
    c1 = next(c for c in raw if c["conv_id"] == "c1")
    assert [t["turn_ind"] for t in c1["turns"]] == [1, 3]
    assert c1["dial_level_pred"] == {"dialogue_overall": 3.0}


def test_legacy_aliases_are_read(tmp_path):
    p = tmp_path / "legacy.json"
    p.write_text(json.dumps([{"conv_id": "a", "turns": [], "dial_level_pred": {"dialog_overall": 1.0}},
                             {"conv_id": "b", "turns": [], "dial_level_pred": {"overall_impression": 2.0}}]))
    assert set(read_run_file(p).dialogue["aspect"]) == {"dialogue_overall"}


def test_authors_released_run_file_reads(data_dir):
    preds = read_run_file(data_dir / RELEASED_RUN)
    assert set(preds.dialogue["aspect"]) == {"understanding", "task_completion", "interest_arousal", "efficiency",
                                             "dialogue_overall"}
    assert set(preds.turn["aspect"]) == {"relevance", "interestingness"}


@pytest.mark.parametrize("payload,match", [
    ([{"turns": []}], r"index 0.*missing key 'conv_id'"),
    ([{"conv_id": "a", "turns": [{"turn_ind": 1, "turn_level_pred": {"charm": 1}}]}], "unknown aspect 'charm'"),
    ([{"conv_id": "a", "turns": [{"turn_ind": 1, "turn_level_pred": {"relevance": "x"}}]}], "expected a number"),
    ([{"conv_id": "a", "dial_level_pred": {"efficiency": float("nan")}}], "prediction is nan"),
])
def test_bad_run_files(tmp_path, payload, match):
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(payload))
    with pytest.raises(DataError, match=match):
        read_run_file(p, known=list(ASPECTS))
