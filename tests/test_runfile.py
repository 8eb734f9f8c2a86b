"""Run files are written and read in the authors' format (checked against hand-written files and the authors'
released run file); legacy aliases are read; bad files fail clearly."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from face.data import RELEASED_RUN
from face.datasets.crsarena import ASPECTS
from face.errors import DataError
from face.predictions import Predictions
from face.runfile import read_run_file, write_run_file

PREDS = Predictions(
    pd.DataFrame([("relevance", "c1", 1, 0.5), ("interestingness", "c1", 1, 1.25), ("relevance", "c1", 3, 2.0)],
                 columns=["aspect", "conv_id", "turn_ind", "pred"]),
    pd.DataFrame([("dialogue_overall", "c1", 3.0), ("efficiency", "c2", 0.5)], columns=["aspect", "conv_id", "pred"]))


def test_written_file_is_the_authors_format_with_these_values(tmp_path):
    text = write_run_file(PREDS, tmp_path / "run.json").read_text()
    assert text.splitlines()[1] == " {"  # indented by one space, as the committed run files are
    raw = json.loads(text)
    # PREDS written out by hand in the authors' format: turns sorted by turn_ind, one entry per conversation
    assert raw == [
        {"conv_id": "c1",
         "turns": [{"turn_ind": 1, "turn_level_pred": {"relevance": 0.5, "interestingness": 1.25}},
                   {"turn_ind": 3, "turn_level_pred": {"relevance": 2.0}}],
         "dial_level_pred": {"dialogue_overall": 3.0}},
        {"conv_id": "c2", "turns": [], "dial_level_pred": {"efficiency": 0.5}},
    ]
    turns = [t for c in raw for t in c["turns"]]
    assert all(type(t["turn_ind"]) is int for t in turns)  # 1, not 1.0
    assert all(type(v) is float for t in turns for v in t["turn_level_pred"].values())
    assert all(type(v) is float for c in raw for v in c["dial_level_pred"].values())


def test_reads_a_hand_written_file_in_the_authors_format(tmp_path):
    p = tmp_path / "run.json"
    p.write_text(json.dumps([
        {"conv_id": "c1", "turns": [{"turn_ind": 1, "turn_level_pred": {"relevance": 0.5, "interestingness": 1}},
                                    {"turn_ind": 3, "turn_level_pred": {"relevance": 2.0}}],
         "dial_level_pred": {"dialogue_overall": 3.0}},
        {"conv_id": "c2", "turns": [], "dial_level_pred": {"efficiency": 0.5}}]))
    preds = read_run_file(p)
    assert sorted(preds.turn.itertuples(index=False, name=None)) == [
        ("interestingness", "c1", 1, 1.0), ("relevance", "c1", 1, 0.5), ("relevance", "c1", 3, 2.0)]
    assert sorted(preds.dialogue.itertuples(index=False, name=None)) == [("dialogue_overall", "c1", 3.0),
                                                                        ("efficiency", "c2", 0.5)]


def test_legacy_aliases_are_read(tmp_path):
    p = tmp_path / "legacy.json"
    p.write_text(json.dumps([{"conv_id": "a", "turns": [], "dial_level_pred": {"dialog_overall": 1.0}},
                             {"conv_id": "b", "turns": [], "dial_level_pred": {"overall_impression": 2.0}}]))
    got = sorted(read_run_file(p).dialogue.itertuples(index=False, name=None))
    assert got == [("dialogue_overall", "a", 1.0), ("dialogue_overall", "b", 2.0)]


def test_authors_released_run_file_reads_every_value(data_dir):
    raw = json.loads((data_dir / RELEASED_RUN).read_text())
    alias = {"dialog_overall": "dialogue_overall", "overall_impression": "dialogue_overall"}
    want_turn = sorted((a, c["conv_id"], t["turn_ind"], v) for c in raw for t in c["turns"]
                       for a, v in t["turn_level_pred"].items())
    want_dial = sorted((alias.get(a, a), c["conv_id"], v) for c in raw for a, v in c["dial_level_pred"].items())
    # facts of the released file: 467 conversations; 2,220 scored turns × 2 turn aspects; 466 × 5 dialogue aspects
    assert len(raw) == 467 and len(want_turn) == 2220 * 2 and len(want_dial) == 466 * 5
    preds = read_run_file(data_dir / RELEASED_RUN, known=list(ASPECTS))
    assert sorted(preds.turn.itertuples(index=False, name=None)) == want_turn
    assert sorted(preds.dialogue.itertuples(index=False, name=None)) == want_dial


@pytest.mark.parametrize("payload,match", [
    ([{"turns": []}], r"index 0.*missing key 'conv_id'"),
    ([{"conv_id": "a", "turns": [{"turn_ind": 1, "turn_level_pred": {"charm": 1}}]}], "unknown aspect 'charm'"),
    ([{"conv_id": "a", "turns": [{"turn_ind": 1, "turn_level_pred": {"relevance": "x"}}]}], "expected a number"),
    ([{"conv_id": "a", "dial_level_pred": {"efficiency": float("nan")}}], "prediction is nan"),
    ({"conv_id": "a"}, "top level.*expected a list"),
    ([], "no conversations"),
    ([{"conv_id": 7}], r"index 0.*conv_id"),
    ([{"conv_id": "a", "turns": {"turn_ind": 1}}], "conversation 'a'.*turns"),
    ([{"conv_id": "a", "turns": [{"turn_ind": "1", "turn_level_pred": {}}]}], r"turns\[0\].*turn_ind"),
    ([{"conv_id": "a", "turns": [{"turn_ind": 1, "turn_level_pred": [1]}]}], r"turns\[0\].*turn_level_pred"),
    ([{"conv_id": "a", "dial_level_pred": [0.5]}], "conversation 'a'.*expected an object"),
    ([{"conv_id": "a", "turns": [{"turn_ind": 1, "turn_level_pred": {}}, {"turn_ind": 1, "turn_level_pred": {}}]}],
     "duplicate turn_ind 1"),
    ([{"conv_id": "a"}, {"conv_id": "a"}], "duplicate conversation"),
    ([{"conv_id": "a", "dial_level_pred": {"efficiency": True}}], "expected a number"),
])
def test_bad_run_files(tmp_path, payload, match):
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(payload))
    with pytest.raises(DataError, match=match) as err:
        read_run_file(p, known=list(ASPECTS))
    assert str(err.value).startswith(f"{p} [")  # the file first, then the record, then what is wrong
