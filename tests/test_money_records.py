"""Score records on their way out (face/pipeline/records.py) and what a score is made of (face/pipeline/estimators.py),
checked against values written by hand: a score is stored as given (no rounding), a particle's text is the one of
its own turn, a null score is missing (NaN, never 0), the counts of a run add up record by record."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from helpers import approx

from face.pipeline.estimators import SamplingEstimator
from face.pipeline.records import AspectScores, ScoreSink, ScoreTally, per_conversation, read_score_file
from face.pipeline.scoring import ScoreRecord, ScoringSpec
from face.predictions import Predictions


def _rec(turn: int, particle: int, score: float, conv: str = "c1", instr: str = "i1", **kw) -> ScoreRecord:
    return ScoreRecord("relevance", conv, turn, particle, instr, score, "sampling", 5, kw.pop("n_valid", 5), **kw)


def _p(act: str) -> SimpleNamespace:
    return SimpleNamespace(dialogue_act=act, mention="m", user_feedback="f")


DECOMPS = {("c1", 1): SimpleNamespace(particles=[_p("t1p0"), _p("t1p1")]),
           ("c1", 3): SimpleNamespace(particles=[_p("t3p0"), _p("t3p1")])}


def test_the_sink_keeps_scores_unrounded_and_files_each_particle_under_its_own_turn(tmp_path):
    path = tmp_path / "particle_scores.jsonl"
    with ScoreSink(path, DECOMPS) as sink:
        for r in (_rec(1, 0, 2.345), _rec(1, 1, 1.0 / 3), _rec(3, 1, math.nan, n_valid=0, fallback="none"),
                  _rec(3, 0, 0.6)):
            sink.add(r)
        df = sink.take()
    assert list(df["turn_ind"]) == [1, 1, 3, 3] and list(df["particle_ind"]) == [0, 1, 1, 0]
    assert df["score"].iloc[0] == 2.345 and df["score"].iloc[1] == 1.0 / 3 and math.isnan(df["score"].iloc[2])
    assert list(df["fallback"].notna()) == [False, False, True, False] and df["fallback"].iloc[2] == "none"
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert [x["particle"]["dialogue_act"] for x in lines] == ["t1p0", "t1p1", "t3p1", "t3p0"]
    assert [x["score"] for x in lines] == [2.345, 1.0 / 3, None, 0.6]


def test_a_null_score_is_read_back_as_missing_not_as_zero(tmp_path):
    path = tmp_path / "s.jsonl"
    rows = [{"aspect": "a", "conv_id": "c", "turn_ind": 1, "particle_ind": 0, "instruction_id": "i", "score": s}
            for s in (None, 1.5)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    df = read_score_file(path)
    assert math.isnan(df["score"].iloc[0]) and df["score"].iloc[1] == 1.5


def _detail() -> pd.DataFrame:
    # a scored record, one without a valid answer (NaN), one whose samples were all scored as the lowest
    return pd.DataFrame({"score": [2.0, math.nan, 1.0], "n_valid": [5, 0, 0], "n_retried": [1, 3, 4],
                         "n_defaulted": [0, 0, 5], "valid_mass": [0.5, math.nan, 0.7],
                         "fallback": [None, "no_valid_sample", "5 invalid sample(s) scored 1"]})


def test_the_tally_counts_missing_scores_not_defaulted_ones_and_averages_masses_that_exist():
    t = ScoreTally()
    t.add(_detail())
    m = t.metrics(logprobs=True)
    assert (m["scores.total"], m["scores.without_valid_answer"], m["scores.fallbacks"], m["scores.retried_draws"],
            m["scores.defaulted_samples"], m["scores.dropped_units"]) == (3, 1, 2, 8, 5, 1)
    assert m["scores.mean_valid_mass"] == approx((0.5 + 0.7) / 2)


def test_scores_without_a_valid_answer_are_left_out_of_the_aggregation():
    seen: list[pd.DataFrame] = []

    def aggregate(df: pd.DataFrame) -> Predictions:
        seen.append(df)
        return Predictions(df, df.iloc[:0])

    sink = ScoreSink(None)
    scores = AspectScores(sink, ScoreTally(), {"c1": 2}, aggregate)
    scores.add(_rec(1, 0, 2.0))
    scores.add(_rec(1, 1, math.nan, n_valid=0))
    scores.result()
    assert len(seen) == 1 and list(seen[0]["score"]) == [2.0]


def test_records_are_planned_per_unit_and_instruction():
    units = [SimpleNamespace(conv_id="a")] * 2 + [SimpleNamespace(conv_id="b")]
    assert per_conversation(units, 3) == {"a": 6, "b": 3}


BASE = dict(aspect="a", conv_id="c", turn_ind=1, particle_ind=0, instruction_id="i", estimator="sampling")


def _spec(**kw) -> ScoringSpec:
    return ScoringSpec("sampling", 3, **kw)


def test_a_sampled_score_is_the_mean_of_the_first_n_valid_draws():
    est = SamplingEstimator()
    r = est.record([(3, None), (None, None), (1, None), (2, None), (5, None)], _spec(), 1, BASE)
    assert r.score == 2.0 and r.n_valid == 3 and r.fallback is None  # (3 + 1 + 2) / 3, the 5 is beyond n


def test_every_missing_sample_counts_as_the_lowest_score():
    r = SamplingEstimator().record([(4, None), (None, None), (None, None)], _spec(), 1, BASE)
    assert r.score == approx((4 + 1 + 1) / 3) and r.n_defaulted == 2 and r.n_valid == 1


def test_the_mean_of_samples_is_their_mean_not_their_median():
    assert SamplingEstimator().combine([1, 1, 4]) == 2.0
    assert np.isclose(SamplingEstimator().combine([0, 1]), 0.5)


def test_the_sink_keeps_valid_masses_and_files_no_particle_for_a_whole_turn(tmp_path):
    path = tmp_path / "particle_scores.jsonl"
    with ScoreSink(path, DECOMPS) as sink:
        sink.add(_rec(1, 0, 1.0, valid_mass=0.25))
        sink.add(_rec(5, -1, 2.0))  # a whole turn (no decomposition of turn 5 exists)
        df = sink.take()
    assert df["valid_mass"].iloc[0] == 0.25 and math.isnan(df["valid_mass"].iloc[1])
    assert [json.loads(x)["particle"] for x in path.read_text().splitlines()][1] is None
    empty = ScoreSink(None).take()
    assert len(empty) == 0 and list(empty.columns) == ["aspect", "conv_id", "turn_ind", "particle_ind",
                                                       "instruction_id", "score", "n_valid", "n_retried",
                                                       "n_defaulted", "valid_mass", "fallback"]


def test_a_score_file_reads_back_with_its_particles_and_samples(tmp_path):
    path = tmp_path / "particle_scores.jsonl"
    with ScoreSink(path, DECOMPS) as sink:
        sink.add(_rec(3, 1, 1.5, samples=[1, None, 2]))
        sink.add(_rec(5, -1, math.nan, n_valid=0))
    df = read_score_file(path, detail=True)
    assert list(df["turn_ind"]) == [3, 5] and list(df["particle_ind"]) == [1, -1]
    assert (df["dialogue_act"].iloc[0], df["mention"].iloc[0], df["n_valid"].iloc[0]) == ("t3p1", "m", 5)
    assert df["samples"].iloc[0] == [1, None, 2] and pd.isna(df["dialogue_act"].iloc[1])
    assert df["score"].iloc[0] == 1.5 and math.isnan(df["score"].iloc[1])
    assert "dialogue_act" not in read_score_file(path).columns


def test_a_score_file_without_records_or_with_a_bad_particle_is_refused(tmp_path):
    from face.errors import DataError

    blank = tmp_path / "blank.jsonl"
    blank.write_text("\n\n")
    with pytest.raises(DataError, match="no score records") as e:
        read_score_file(blank)
    assert e.value.path == str(blank)
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"aspect": "a", "conv_id": "c", "turn_ind": 1, "particle_ind": 0,
                               "instruction_id": "i", "score": 1.0, "particle": [1]}) + "\n")
    with pytest.raises(DataError, match="'particle' must be an object") as e:
        read_score_file(bad, detail=True)
    assert (e.value.path, e.value.record) == (str(bad), "line 1")


def test_the_tally_without_masses_reports_a_zero_mean_and_only_with_logprobs():
    t = ScoreTally()
    t.add(_detail().assign(valid_mass=math.nan))
    assert t.metrics(logprobs=True)["scores.mean_valid_mass"] == 0.0
    assert "scores.mean_valid_mass" not in ScoreTally().metrics(logprobs=False)


def test_parts_are_cut_as_soon_as_whole_conversations_reach_the_chunk_size():
    parts: list[int] = []

    def aggregate(df: pd.DataFrame) -> Predictions:
        parts.append(len(df))
        return Predictions(df, df.iloc[:0])

    scores = AspectScores(ScoreSink(None), ScoreTally(), {"a": 2, "b": 1}, aggregate, chunk_rows=2)
    scores.add(_rec(1, 0, 1.0, conv="a"))
    scores.add(_rec(1, 1, 2.0, conv="a"))
    assert parts == [2] and scores.sink.rows == 0  # conversation a is whole and 2 rows reached: aggregated now
    scores.add(_rec(1, 0, 3.0, conv="b"))
    scores.result()
    assert parts == [2, 1]


def test_an_aspect_without_masses_adds_nothing_to_the_mean_valid_mass():
    t = ScoreTally()
    t.end_aspect()  # an aspect whose records carried no mass
    t.add(_detail())
    assert t.metrics(logprobs=True)["scores.mean_valid_mass"] == approx((0.5 + 0.7) / 2)
