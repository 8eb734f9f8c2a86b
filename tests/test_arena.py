"""Bradley–Terry recovers a known ordering from simulated votes; ties count half."""

from __future__ import annotations

import numpy as np

from face.arena import bradley_terry, pair_counts, ranking_table
from face.data.schema import ArenaVote


def _simulate(strengths: dict[str, float], n: int, seed: int = 0, tie_rate: float = 0.2) -> list[ArenaVote]:
    rng = np.random.default_rng(seed)
    names = list(strengths)
    votes = []
    for k in range(n):
        a, b = rng.choice(names, 2, replace=False)
        if rng.random() < tie_rate:
            winner = None
        else:
            pa = np.exp(strengths[a]) / (np.exp(strengths[a]) + np.exp(strengths[b]))
            winner = a if rng.random() < pa else b
        votes.append(ArenaVote(str(k), "u", a, b, winner, "sim"))
    return votes


def test_recovers_true_order():
    truth = {"a": 1.5, "b": 0.5, "c": 0.0, "d": -1.0}
    table = ranking_table(_simulate(truth, 3000))
    assert list(table["crs"]) == ["a", "b", "c", "d"]  # ties (counted as half wins) shrink gaps, not the order
    est = ranking_table(_simulate(truth, 3000, tie_rate=0.0)).set_index("crs")["bt_rating"]
    assert abs((est["a"] - est["d"]) - 2.5) < 0.4


def test_ties_are_half_wins_and_prior_keeps_ratings_finite():
    votes = [ArenaVote("1", "u", "x", "y", "x", "s"), ArenaVote("2", "u", "x", "y", None, "s")]
    c = pair_counts(votes)
    assert c.wins[0, 1] == 1.5 and c.wins[1, 0] == 0.5 and c.games[0, 1] == 2
    r = bradley_terry(c, prior=0.5)
    assert np.isfinite(r).all() and r[0] > r[1] and abs(r.sum()) < 1e-9
