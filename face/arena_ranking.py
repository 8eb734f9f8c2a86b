"""A human system ranking from the CRSArena-Dial pairwise votes: Bradley–Terry strengths.

Model: P(i beats j) = p_i / (p_i + p_j). Fitted by Hunter's (2004) MM algorithm; a tie counts as
half a win for each side. To keep every strength finite (a CRS that never won would get p = 0),
each pair of CRSs also gets ``prior`` virtual ties. Reported rating: log p, centred to mean 0.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd

from face.data.schema import ArenaVote


@dataclass(frozen=True)
class PairCounts:
    names: list[str]
    wins: np.ndarray  # wins[i, j]: (half-)wins of i over j
    games: np.ndarray  # games[i, j]: comparisons between i and j


def pair_counts(votes: Sequence[ArenaVote], names: Sequence[str] | None = None,
                weights: np.ndarray | None = None) -> PairCounts:
    names = sorted(names or {v.crs1 for v in votes} | {v.crs2 for v in votes})
    idx = {n: i for i, n in enumerate(names)}
    k = len(names)
    wins, games = np.zeros((k, k)), np.zeros((k, k))
    for v, wt in zip(votes, np.ones(len(votes)) if weights is None else weights):
        if v.crs1 == v.crs2 or v.crs1 not in idx or v.crs2 not in idx:
            continue
        i, j = idx[v.crs1], idx[v.crs2]
        share = 0.5 if v.winner is None else float(v.winner == v.crs1)  # crs1's share of the win: a tie halves it
        games[i, j] += wt
        games[j, i] += wt
        wins[i, j] += share * wt
        wins[j, i] += (1 - share) * wt
    return PairCounts(names, wins, games)


def bradley_terry(counts: PairCounts, prior: float = 0.5, tol: float = 1e-10, max_iter: int = 10_000) -> np.ndarray:
    """Log-strengths (mean 0) maximising the BT likelihood of the (regularised) counts."""
    k = len(counts.names)
    off = 1 - np.eye(k)
    wins = counts.wins + 0.5 * prior * off
    games = counts.games + prior * off
    total_wins = wins.sum(1)
    p = np.ones(k)
    for _ in range(max_iter):
        new = total_wins / (games / (p[:, None] + p[None, :])).sum(1)
        new /= np.exp(np.log(new).mean())
        converged = np.max(np.abs(new - p)) < tol
        p = new
        if converged:
            break
    r = np.log(p)
    return r - r.mean()


def ranking_table(votes: Sequence[ArenaVote], prior: float = 0.5) -> pd.DataFrame:
    """Per CRS: Bradley–Terry rating, votes, wins, ties, losses, win rate (ties as half)."""
    counts = pair_counts(votes)
    rating = bradley_terry(counts, prior)
    games = counts.games.sum(1)
    won = Counter(v.winner for v in votes if v.winner is not None)
    tied = Counter(c for v in votes if v.winner is None for c in (v.crs1, v.crs2))
    wins, ties = (np.array([n[c] for c in counts.names], float) for n in (won, tied))
    return pd.DataFrame({"crs": counts.names, "bt_rating": rating, "votes": games, "wins": wins, "ties": ties,
                         "losses": games - wins - ties,
                         "win_rate": (wins + 0.5 * ties) / np.maximum(games, 1)}).sort_values(
        "bt_rating", ascending=False).reset_index(drop=True)


def bootstrap_ratings(votes: Sequence[ArenaVote], names: Sequence[str], n_boot: int, seed: int,
                      prior: float = 0.5) -> np.ndarray:
    """B × k Bradley–Terry ratings, resampling votes with replacement."""
    rng = np.random.default_rng(seed)
    out = np.empty((n_boot, len(names)))
    for b in range(n_boot):
        w = np.bincount(rng.integers(0, len(votes), len(votes)), minlength=len(votes)).astype(float)
        out[b] = bradley_terry(pair_counts(votes, names, w), prior)
    return out
