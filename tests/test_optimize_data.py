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
