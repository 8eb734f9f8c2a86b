"""Paper scale in flat memory (issue 33): an aspect's scores are aggregated conversation by conversation as they
arrive, and the plan is never held as a list -- with the same predictions, to the bit, in the same order and dtypes,
as one aggregation of every record (what the live method did before)."""

from __future__ import annotations

import math
import random

import numpy as np
import pandas as pd
import pytest

from face.aspects import Aspect
from face.data.schema import Instruction
from face.pipeline.aggregate import aggregate
from face.pipeline.records import AspectScores, ScoreSink, ScoreTally, per_conversation
from face.pipeline.score_prompts import Unit
from face.pipeline.scoring import ScoreRecord, _prefix_order

TURN = Aspect("relevance", "turn", (0, 1, 2), "Is it relevant?")
DIAL = Aspect("dialogue_overall", "dialogue", (1, 2, 3, 4, 5), "Good dialogue?")
LEVELS = {"relevance": "turn", "dialogue_overall": "dialogue"}
INSTR = ["i0", "i1", "i2"]


def _units(rng: random.Random, aspect: Aspect, n_convs: int) -> list[Unit]:
    units = []
    for c in rng.sample(range(100), n_convs):  # conversation ids in no sorted order
        for t in range(1, 2 * rng.randint(1, 3), 2):
            units += [Unit(aspect, f"c{c}", t, p, None) for p in range(rng.randint(1, 4))]
    return units


def _record(rng: random.Random, u: Unit, instruction: str) -> ScoreRecord:
    score = math.nan if rng.random() < 0.1 else rng.choice([0, 1, 2]) + rng.random() / 3  # sums that round
    mass = None if rng.random() < 0.3 else rng.random()
    return ScoreRecord(u.aspect.name, u.conv_id, u.turn_ind, u.particle_ind, instruction, score, "sampling", 5,
                       5 - int(math.isnan(score)), valid_mass=mass, n_retried=rng.randint(0, 2),
                       n_defaulted=rng.randint(0, 1), fallback="min" if rng.random() < 0.05 else None)


def _records(seed: int, aspect: Aspect, interleave: bool = False) -> tuple[list[Unit], list[ScoreRecord]]:
    rng = random.Random(seed)
    units = _units(rng, aspect, 12)
    records = [_record(rng, u, i) for u in units for i in INSTR]  # by conversation (as both plan orders go)
    if interleave:
        rng.shuffle(records)
    return units, records


def _agg(scores: pd.DataFrame):
    return aggregate(scores, LEVELS, "mean", "mean")


def _at_once(records: list[ScoreRecord]):
    """What the live method did before: every record of the aspect in one frame, then one aggregation."""
    tally = ScoreTally()
    with ScoreSink(None) as sink:
        for r in records:
            sink.add(r)
        detail = tally.add(sink.take())
    preds = _agg(detail[detail["score"].notna()][["aspect", "conv_id", "turn_ind", "particle_ind",
                                                  "instruction_id", "score"]])
    return preds, tally.metrics(logprobs=True)


def _streamed(units: list[Unit], records: list[ScoreRecord], chunk_rows: int):
    tally = ScoreTally()
    with ScoreSink(None) as sink:
        scores = AspectScores(sink, tally, per_conversation(units, len(INSTR)), _agg, chunk_rows=chunk_rows)
        most = 0
        for r in records:
            scores.add(r)
            most = max(most, sink.rows)
        preds = scores.result()
    return preds, tally.metrics(logprobs=True), len(scores.parts), most


@pytest.mark.parametrize("aspect", [TURN, DIAL])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_streamed_aggregation_equals_one_aggregation_to_the_bit(aspect, seed):
    units, records = _records(seed, aspect)
    want, want_metrics = _at_once(records)
    per_conv = max(per_conversation(units, len(INSTR)).values())
    got, metrics, n_parts, most = _streamed(units, records, chunk_rows=10)
    assert n_parts > 3  # it did aggregate part by part
    assert most <= 10 + per_conv  # the sink never held more than a part and one conversation
    pd.testing.assert_frame_equal(got.turn, want.turn, check_exact=True)
    pd.testing.assert_frame_equal(got.dialogue, want.dialogue, check_exact=True)
    assert metrics == want_metrics  # counts, and the mean valid mass to the bit


def test_interleaved_conversations_are_held_until_none_is_half_received():
    units, records = _records(5, TURN, interleave=True)
    want, want_metrics = _at_once(records)
    got, metrics, n_parts, _ = _streamed(units, records, chunk_rows=10)
    assert n_parts == 1  # shuffled: some conversation is always half-received, so one aggregation at the end
    pd.testing.assert_frame_equal(got.turn, want.turn, check_exact=True)
    assert metrics == want_metrics


def test_no_records_give_the_empty_aggregation():
    want, _ = _at_once([])
    got, _, _, _ = _streamed([], [], chunk_rows=10)
    pd.testing.assert_frame_equal(got.turn, want.turn)
    pd.testing.assert_frame_equal(got.dialogue, want.dialogue)


def test_prefix_order_is_the_stable_sort_of_the_unit_major_pairs():
    rng = random.Random(3)
    units = _units(rng, TURN, 6) + _units(rng, DIAL, 4)
    units += units[:3]  # tied units (the same key): their order must survive
    instructions = [Instruction(k, f"text {k}") for k in ("b", "a", "c", "a")]  # a duplicated id ranks last
    rank = {i.instruction_id: r for r, i in enumerate(instructions)}
    pairs = [(u, i) for u in units for i in instructions]
    want = sorted(pairs, key=lambda p: (p[0].conv_id, p[0].turn_ind if p[0].aspect.level == "turn" else 0,
                                        rank[p[1].instruction_id], p[0].turn_ind, p[0].particle_ind))
    got = list(_prefix_order(units, instructions))
    assert len(got) == len(want)
    assert all(gu is wu and gi is wi for (gu, gi), (wu, wi) in zip(got, want))


def test_valid_masses_are_summed_as_one_column():
    tally = ScoreTally()
    values = np.random.default_rng(0).random(1001) * 1e-3
    values[::7] = np.nan
    for part in np.array_split(values, 9):
        tally.add(pd.DataFrame({"score": part, "fallback": None, "n_retried": 0, "n_defaulted": 0,
                                "valid_mass": part}))
    tally.end_aspect()
    whole = pd.Series(values).dropna()
    assert tally.mass_sum == float(whole.sum()) and tally.mass_n == len(whole)
