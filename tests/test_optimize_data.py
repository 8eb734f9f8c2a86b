"""What the optimizer scores on: the stratified split (no conversation on two sides, seeded) and the replay scorer
(the released scores aggregated as the pipeline aggregates them)."""

from __future__ import annotations

import numpy as np

from face.data.schema import Conversation, Turn
from face.data.split import split_conversations
from face.optimize.checkpoint import Candidate

# ------------------------------------------------------------------ split

def _convs(n_per_system=(10, 7, 4)):
    out = []
    for s, n in enumerate(n_per_system):
        for i in range(n):
            out.append(Conversation(f"c{s}_{i}", (Turn(0, "USER", "hi"), Turn(1, "ASST", "hello", {"relevance": 2})),
                                    {}, system=f"sys{s}"))
    return out


def test_stratified_split_has_no_conversation_on_both_sides_and_is_seeded():
    convs = _convs()
    for fold in (0, 1, 2):
        sp = split_conversations(convs, folds=3, fold=fold, dev_fraction=0.25, seed=3)
        sides = [set(sp.train), set(sp.dev), set(sp.test)]
        assert not (sides[0] & sides[1]) and not (sides[0] & sides[2]) and not (sides[1] & sides[2])
        assert set().union(*sides) == {c.conv_id for c in convs}
        for s, n in enumerate((10, 7, 4)):  # every system is spread over the folds (stratified)
            in_test = sum(c.startswith(f"c{s}_") for c in sp.test)
            assert abs(in_test - n / 3) <= 1
    tests = [set(split_conversations(convs, 3, f, 0.0, 3).test) for f in range(3)]
    assert set().union(*tests) == {c.conv_id for c in convs} and sum(map(len, tests)) == len(convs)  # a partition
    assert split_conversations(convs, 3, 0, 0.25, 3) == split_conversations(list(reversed(convs)), 3, 0, 0.25, 3)
    assert split_conversations(convs, 3, 0, 0.25, 3) != split_conversations(convs, 3, 0, 0.25, 4)


# ------------------------------------------------------------------ replay scorer = the released aggregation

def test_replay_scorer_matches_released_aggregation(data_dir):
    from face.data import CRSARENA_EVAL
    from face.datasets.crsarena import ASPECTS, load_conversations
    from face.optimize.items import items_for
    from face.optimize.scorers import ReplayScorer
    from face.pipeline.aggregate import aggregate
    from face.pipeline.released import load_scores

    convs = load_conversations(data_dir / CRSARENA_EVAL)[:30]
    for name in ("relevance", "efficiency"):
        a = ASPECTS[name]
        scores = load_scores(data_dir, [name], {c.conv_id for c in convs})
        items = items_for(a, convs)
        sc = ReplayScorer(scores, items, a.level)
        cov = sc.covered()
        preds = aggregate(scores, {name: a.level})
        table = preds.turn if a.level == "turn" else preds.dialogue.assign(turn_ind=-1)
        ref = {(r.conv_id, r.turn_ind): r.pred for r in table.itertuples()}
        got = sc.predict_set([Candidate(i, "") for i in sc.ids], cov)
        assert np.allclose(got, [ref[(items[i].conv_id, items[i].turn_ind)] for i in cov])


# ------------------------------------------------------------------ live scorer = the pipeline's aggregation

def _live_scorer(aspect_name: str, empty_score: float | None = None):
    """A live scorer whose every (instruction, particle) score is known already (nothing is sent): conversation c0
    has turn 1 with two particles and turn 3 with none, c1 has turn 1 with three particles."""
    from face.data.schema import Particle
    from face.datasets.crsarena import ASPECTS
    from face.optimize.items import items_for
    from face.optimize.scorers import LiveScorer
    from face.pipeline.particles import Decomposition

    a = ASPECTS[aspect_name]
    labels = {aspect_name: 1} if a.level == "turn" else {}
    convs = [Conversation(cid, (Turn(0, "USER", "hi"), Turn(1, "ASST", "a", labels), Turn(2, "USER", "so?"),
                                Turn(3, "ASST", "b", labels)), {} if a.level == "turn" else {aspect_name: 1})
             for cid in ("c0", "c1")]
    counts = {("c0", 1): 2, ("c0", 3): 0, ("c1", 1): 3, ("c1", 3): 1}
    decomps = {k: Decomposition(*k, tuple(Particle("inform", f"m{i}") for i in range(n)), "llm")
               for k, n in counts.items()}
    sc = LiveScorer(None, a, convs, items_for(a, convs), decomps, None, False, empty_score=empty_score)
    given = {"A": {("c0", 1): [2.0, 1.0], ("c1", 1): [0.0, 1.0, 1.0], ("c1", 3): [np.nan]},
             "B": {("c0", 1): [1.0, 0.0], ("c1", 1): [2.0, 2.0, 2.0], ("c1", 3): [np.nan]}}
    for cid, by_turn in given.items():
        for u in {u for units in sc.units for u in units}:
            sc.memo[(cid, u)] = by_turn[(u.conv_id, u.turn_ind)][u.particle_ind]
    return sc


def test_live_scorer_averages_over_instructions_and_particles_and_drops_a_turn_without_particles():
    sc = _live_scorer("relevance")
    assert [(it.conv_id, it.turn_ind) for it in sc.items] == [("c0", 1), ("c0", 3), ("c1", 1), ("c1", 3)]
    idx = np.arange(4)
    a, b = Candidate("A", ""), Candidate("B", "")
    # by hand: A on c0#1 = (2+1)/2; c0#3 has no particle (the pipeline's default: no prediction); c1#1 = 2/3;
    # c1#3's only particle has no valid answer (NaN)
    np.testing.assert_allclose(sc.predict(a, idx), [1.5, np.nan, 2 / 3, np.nan], rtol=0, atol=1e-9)
    # the set {A, B}: the mean over instructions × particles, (2+1+1+0)/4 and (0+1+1+2+2+2)/6
    np.testing.assert_allclose(sc.predict_set([a, b], idx), [1.0, np.nan, 8 / 6, np.nan], rtol=0, atol=1e-9)
    assert sc.covered().tolist() == [0, 2, 3]  # the turn without particles is not an item to score
    assert [e["pred"] for e in sc.explain(a, np.array([0]))] == [1.5]
    low = _live_scorer("relevance", empty_score=0.0)  # method.empty_turn=min: the scale's lowest
    np.testing.assert_allclose(low.predict(a, idx), [1.5, 0.0, 2 / 3, np.nan], rtol=0, atol=1e-9)
    assert low.covered().tolist() == [0, 1, 2, 3]


def test_live_scorer_predicts_a_dialogue_from_the_particles_of_all_its_turns():
    sc = _live_scorer("efficiency")
    assert [(it.conv_id, it.turn_ind) for it in sc.items] == [("c0", -1), ("c1", -1)]
    a, b = Candidate("A", ""), Candidate("B", "")
    # c0: A's particles 2, 1 -> 1.5; c1: 0, 1, 1 and a NaN (dropped) -> 2/3; {A, B} on c1: (0+1+1+2+2+2)/6
    np.testing.assert_allclose(sc.predict(a, np.arange(2)), [1.5, 2 / 3], rtol=0, atol=1e-9)
    np.testing.assert_allclose(sc.predict_set([a, b], np.arange(2)), [1.0, 8 / 6], rtol=0, atol=1e-9)
