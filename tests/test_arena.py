"""Bradley–Terry strengths: a closed-form two-player case, scipy's maximum likelihood on the real arena votes
(counted from the CSVs with the csv module), hand-counted tables, and recovery of a simulated ordering."""

from __future__ import annotations

import csv
import math

import numpy as np
import pytest
from scipy import optimize

from face.arena_ranking import bradley_terry, pair_counts, ranking_table
from face.data import ARENA_VOTES
from face.data.schema import ArenaVote
from face.datasets.arena import load_votes


def _vote(a: str, b: str, winner: str | None) -> ArenaVote:
    return ArenaVote("s", "u", a, b, winner, "test")


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


def _scipy_bt(wins: np.ndarray, games: np.ndarray, prior: float) -> np.ndarray:
    """Independent fit: maximise the BT log-likelihood sum_ij w_ij (r_i - log(e^r_i + e^r_j)) with scipy,
    on counts with ``prior`` virtual games per pair split half/half (the documented regularisation)."""
    k = len(wins)
    off = 1 - np.eye(k)
    w = wins + 0.5 * prior * off
    assert np.allclose(w + w.T, (games + prior * off) * off)  # every game is a win for one side or half for each

    def nll(r):
        diff = r[:, None] - np.logaddexp(r[:, None], r[None, :])
        return -(w * diff * off).sum()

    r = optimize.minimize(nll, np.zeros(k), method="BFGS", options={"gtol": 1e-10}).x
    return r - r.mean()


def test_two_players_closed_form_strength_ratio():
    # x beats y 3 times, y beats x once. MLE: p_x / p_y = wins_x / wins_y.
    votes = [_vote("x", "y", "x")] * 3 + [_vote("x", "y", "y")]
    # no prior: ratio 3/1 -> ratings ±log(3)/2 (centred)
    r = bradley_terry(pair_counts(votes), prior=0.0)
    assert r == pytest.approx([math.log(3) / 2, -math.log(3) / 2], abs=1e-8)
    # prior 0.5 = half a virtual tie: wins 3 + 0.25 vs 1 + 0.25 -> ratio 3.25 / 1.25 = 2.6
    r = bradley_terry(pair_counts(votes), prior=0.5)
    assert r == pytest.approx([math.log(2.6) / 2, -math.log(2.6) / 2], abs=1e-8)


def test_pair_counts_by_hand_ties_are_half_wins():
    votes = [_vote("x", "y", "x"), _vote("x", "y", None), _vote("z", "x", "z"), _vote("y", "y", "y")]
    c = pair_counts(votes)
    assert c.names == ["x", "y", "z"]
    # x-y: x won once, one tie -> x 1.5, y 0.5; z beat x once; the self-pairing y-y is ignored
    np.testing.assert_array_equal(c.wins, [[0, 1.5, 0], [0.5, 0, 0], [1, 0, 0]])
    np.testing.assert_array_equal(c.games, [[0, 2, 1], [2, 0, 0], [1, 0, 0]])


def test_ranking_table_counts_by_hand():
    votes = [_vote("x", "y", "x"), _vote("x", "y", None), _vote("z", "x", "z"), _vote("z", "y", "y")]
    t = ranking_table(votes).set_index("crs")
    # x: 3 votes (won 1, tied 1, lost 1); y: 3 (won 1, tied 1, lost 1); z: 2 (won 1, lost 1)
    assert t.loc["x", ["votes", "wins", "ties", "losses"]].tolist() == [3, 1, 1, 1]
    assert t.loc["y", ["votes", "wins", "ties", "losses"]].tolist() == [3, 1, 1, 1]
    assert t.loc["z", ["votes", "wins", "ties", "losses"]].tolist() == [2, 1, 0, 1]
    assert t.loc["x", "win_rate"] == pytest.approx((1 + 0.5) / 3) and t.loc["z", "win_rate"] == pytest.approx(0.5)
    assert list(t["bt_rating"]) == sorted(t["bt_rating"], reverse=True)


@pytest.mark.parametrize("prior", [0.5, 2.0])
def test_mm_fit_equals_scipy_maximum_likelihood_on_the_arena_votes(data_dir, prior):
    # counts straight from the CSVs, independent of the loader and of pair_counts
    rows = []
    for f in ARENA_VOTES.values():
        with open(data_dir / f, newline="", encoding="utf-8") as fh:
            rows += list(csv.DictReader(fh))
    assert len(rows) == 185
    names = sorted({r["crs1"] for r in rows} | {r["crs2"] for r in rows})
    assert len(names) == 9
    ix = {n: i for i, n in enumerate(names)}
    wins, games = np.zeros((9, 9)), np.zeros((9, 9))
    for r in rows:
        i, j = ix[r["crs1"]], ix[r["crs2"]]
        games[i, j] += 1
        games[j, i] += 1
        if r["vote"] == "tie":
            wins[i, j] += 0.5
            wins[j, i] += 0.5
        else:
            wins[ix[r["vote"]], j if r["vote"] == r["crs1"] else i] += 1
    votes = [v for s, f in ARENA_VOTES.items() for v in load_votes(data_dir / f, s)]
    counts = pair_counts(votes)
    assert counts.names == names
    np.testing.assert_array_equal(counts.wins, wins)
    np.testing.assert_array_equal(counts.games, games)
    np.testing.assert_allclose(bradley_terry(counts, prior=prior), _scipy_bt(wins, games, prior), atol=1e-5)


def test_recovers_true_order_from_simulated_votes():
    truth = {"a": 1.5, "b": 0.5, "c": 0.0, "d": -1.0}
    table = ranking_table(_simulate(truth, 3000))
    assert list(table["crs"]) == ["a", "b", "c", "d"]  # ties (counted as half wins) shrink gaps, not the order
    est = ranking_table(_simulate(truth, 3000, tie_rate=0.0)).set_index("crs")["bt_rating"]
    assert abs((est["a"] - est["d"]) - 2.5) < 0.4


def test_prior_keeps_a_never_winning_player_finite():
    votes = [_vote("x", "y", "x")] * 4  # without a prior y's strength would be 0 (rating -inf)
    r = bradley_terry(pair_counts(votes), prior=0.5)
    # wins 4.25 vs 0.25 -> ratio 17 -> ratings ±log(17)/2
    assert r == pytest.approx([math.log(17) / 2, -math.log(17) / 2], abs=1e-8)
