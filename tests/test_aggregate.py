"""Aggregation: turn = mean over the turn's particles × instructions; dialogue = over the conversation's."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from face.data import RELEASED_RUN, released_scores_file
from face.datasets.crsarena import ASPECTS
from face.datasets.face_released import load_particle_scores
from face.pipeline.aggregate import aggregate, particle_scores, random_instruction_subsets
from face.predictions import DIALOGUE_COLUMNS, TURN_COLUMNS, Predictions

ROWS = [  # aspect, conv, turn, particle, instruction, score
    ("relevance", "c1", 1, 0, "i1", 1.0), ("relevance", "c1", 1, 0, "i2", 2.0),
    ("relevance", "c1", 1, 1, "i1", 0.0), ("relevance", "c1", 1, 1, "i2", 0.0),
    ("relevance", "c1", 3, 0, "i1", 2.0), ("relevance", "c1", 3, 0, "i2", 2.0),
    ("understanding", "c1", 1, 0, "i1", 1.0), ("understanding", "c1", 1, 0, "i2", 1.0),
    ("understanding", "c1", 3, 0, "i1", 2.0), ("understanding", "c1", 3, 0, "i2", 0.0),
    ("understanding", "c1", 3, 1, "i1", 2.0), ("understanding", "c1", 3, 1, "i2", 2.0),
]
SCORES = pd.DataFrame(ROWS, columns=["aspect", "conv_id", "turn_ind", "particle_ind", "instruction_id", "score"])
LEVELS = {"relevance": "turn", "understanding": "dialogue"}


def _turn(p, t):
    return p.turn.set_index("turn_ind").loc[t, "pred"]


def test_mean_over_particles_and_instructions():
    p = aggregate(SCORES, LEVELS)
    assert _turn(p, 1) == pytest.approx((1 + 2 + 0 + 0) / 4)
    assert _turn(p, 3) == pytest.approx(2.0)
    assert list(p.turn["aspect"].unique()) == ["relevance"]  # turn aspects only at turn level
    assert p.dialogue.set_index("aspect").loc["understanding", "pred"] == pytest.approx(8 / 6)
    assert list(p.dialogue["aspect"]) == ["understanding"]


def test_other_aggregators():
    assert _turn(aggregate(SCORES, LEVELS, "max", "max"), 1) == 2.0
    assert _turn(aggregate(SCORES, LEVELS, "min", "mean"), 1) == pytest.approx(0.5)
    assert _turn(aggregate(SCORES, LEVELS, "mean", "min"), 1) == 0.0
    d = aggregate(SCORES, LEVELS, "mean", "median").dialogue["pred"].iloc[0]
    assert d == pytest.approx(1.0)  # particle means 1, 1, 2 -> median 1


def test_instruction_subset_and_errors():
    assert _turn(aggregate(SCORES, LEVELS, instructions=["i2"]), 1) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="not in the scores"):
        particle_scores(SCORES, instructions=["i9"])
    with pytest.raises(ValueError, match="unknown aggregator"):
        aggregate(SCORES, LEVELS, "mode")
    with pytest.raises(ValueError, match="no level known"):
        aggregate(SCORES, {"relevance": "turn"})


def test_summation_order_noise_cannot_break_ties():
    # 0.1 + 0.2 + 0.3 differs from 0.3 + 0.2 + 0.1 in the last bit; the predictions must still tie
    rows = [("relevance", "c", 1, 0, f"i{k}", v) for k, v in enumerate([0.1, 0.2, 0.3])]
    rows += [("relevance", "c", 3, 0, f"i{k}", v) for k, v in enumerate([0.3, 0.2, 0.1])]
    p = aggregate(pd.DataFrame(rows, columns=SCORES.columns), LEVELS)
    assert _turn(p, 1) == _turn(p, 3)
    # the same at dialogue level: two conversations whose particle means differ only in summation order
    rows = [("understanding", "a", 1, j, "i0", v) for j, v in enumerate([0.1, 0.2, 0.3])]
    rows += [("understanding", "b", 1, j, "i0", v) for j, v in enumerate([0.3, 0.2, 0.1])]
    d = aggregate(pd.DataFrame(rows, columns=SCORES.columns), LEVELS).dialogue.set_index("conv_id")["pred"]
    assert d["a"] == d["b"] == 0.2


def test_predictions_are_rounded_to_ten_decimals_and_empty_ones_have_their_columns():
    rows = [("relevance", "c", 1, j, "i0", v) for j, v in enumerate([0.0, 0.0, 1.0])]
    p = aggregate(pd.DataFrame(rows, columns=SCORES.columns), LEVELS)
    assert _turn(p, 1) == 0.3333333333  # 1/3 to PRED_DECIMALS = 10
    dial = [("understanding", "c", 1, j, "i0", v) for j, v in enumerate([0.0, 2.0, 2.0])]
    assert aggregate(pd.DataFrame(dial, columns=SCORES.columns), LEVELS).dialogue["pred"].tolist() == [1.3333333333]
    # unrounded, for means averaged again (the optimizer's replay): 1/3 to the last bit
    assert _turn(aggregate(pd.DataFrame(rows, columns=SCORES.columns), LEVELS, rounded=False), 1) == 1 / 3
    e = Predictions.empty()
    assert list(e.turn.columns) == TURN_COLUMNS and list(e.dialogue.columns) == DIALOGUE_COLUMNS


def test_random_subsets_take_any_k_from_one_to_all():
    ids = [f"i{k}" for k in range(5)]
    assert [len(s) for s in (random_instruction_subsets(ids, k, [0])[0] for k in (1, 5))] == [1, 5]
    for k in (0, 6):
        with pytest.raises(ValueError, match=f"k={k} must be between 1"):
            random_instruction_subsets(ids, k, [0])


def test_random_subsets_reproducible():
    ids = [f"i{k}" for k in range(16)]
    a = random_instruction_subsets(ids, 4, [0, 1, 2])
    assert a == random_instruction_subsets(ids, 4, [0, 1, 2])
    assert all(len(s) == 4 and len(set(s)) == 4 and set(s) <= set(ids) for s in a) and a[0] != a[1]
    assert random_instruction_subsets(ids, 16, [5]) == [sorted(ids)]  # k = all: the whole set
    with pytest.raises(ValueError):
        random_instruction_subsets(ids, 17, [0])


def test_released_scores_aggregate_to_the_authors_released_predictions(data_dir):
    """Mean over particles × instructions of the authors' per-particle scores = their face_run.json, every value."""
    raw = json.loads((data_dir / RELEASED_RUN).read_text())
    alias = {"dialog_overall": "dialogue_overall", "overall_impression": "dialogue_overall"}
    want_turn = {(a, c["conv_id"], t["turn_ind"]): v for c in raw for t in c["turns"]
                 for a, v in t["turn_level_pred"].items()}
    want_dial = {(alias.get(a, a), c["conv_id"]): v for c in raw for a, v in c["dial_level_pred"].items()}
    scores = pd.concat([load_particle_scores(data_dir / released_scores_file(a), a) for a in ASPECTS])
    p = aggregate(scores, {a: s.level for a, s in ASPECTS.items()})
    got_turn = {(r.aspect, r.conv_id, r.turn_ind): r.pred for r in p.turn.itertuples(index=False)}
    got_dial = {(r.aspect, r.conv_id): r.pred for r in p.dialogue.itertuples(index=False)}
    # the authors' file also holds 0.0 for 5 relevance turns that have no scores in the released scores file
    extra = want_turn.keys() - got_turn.keys()
    assert len(extra) == 5 and {k[0] for k in extra} == {"relevance"} and {want_turn[k] for k in extra} == {0.0}
    assert got_turn.keys() <= want_turn.keys() and got_dial.keys() == want_dial.keys()
    assert max(abs(got_turn[k] - want_turn[k]) for k in got_turn) < 1e-9
    assert max(abs(got_dial[k] - want_dial[k]) for k in want_dial) < 1e-9
