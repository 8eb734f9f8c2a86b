"""The optimizer's choices and rewards: UCB bounds and choices by hand, round-robin allocation, random draws of
distinct arms, rewards / errors / ranks against scipy, minibatches reproducible from the seed."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from face.coefficients import ranks
from face.optimize.bandit import Bandit, random_choice
from face.optimize.beam import minibatch
from face.optimize.items import correlation, errors, reward, worst

# ------------------------------------------------------------------ bandit

def test_ucb_bounds_and_choices_match_hand_computation():
    b = Bandit(3, c=1.0)
    assert b.bounds().tolist() == [math.inf] * 3 and b.choose_ucb() == 0  # unpulled arms first, lowest index
    rewards = {0: [0.5, 0.1], 1: [0.2], 2: [0.9]}
    seq = []

    def pull(a):
        seq.append(a)
        return rewards[a].pop(0)

    b.run(pull, 3)  # pulls 0, 1, 2 (each unpulled arm once, in order)
    assert seq == [0, 1, 2]
    # t = 3: bound_i = mean_i + sqrt(ln 3 / 1) = mean_i + 1.048147...
    bonus = math.sqrt(math.log(3))
    assert np.allclose(b.bounds(), [0.5 + bonus, 0.2 + bonus, 0.9 + bonus])
    assert b.choose_ucb() == 2
    b.update(0, 0.1)  # arm 0 now has mean 0.3 over 2 pulls; t = 4
    expect = [0.3 + math.sqrt(math.log(4) / 2), 0.2 + math.sqrt(math.log(4)), 0.9 + math.sqrt(math.log(4))]
    assert np.allclose(b.bounds(), expect)
    assert b.choose_ucb() == 2
    assert b.top(2) == [2, 0]  # by mean reward: 0.9, 0.3, 0.2
    # a larger c favours the arm with fewer pulls: arm 1 (0.2 + 4*1.177 = 4.91) over arm 0 (0.3 + 4*0.833 = 3.63)
    b.c = 4.0
    assert np.allclose(b.bounds()[1], 0.2 + 4 * math.sqrt(math.log(4)))
    c0 = Bandit(2, c=0.0)
    c0.update(0, 0.4)
    c0.update(1, 0.6)
    assert c0.choose_ucb() == 1  # c = 0: greedy


def test_uniform_allocation_is_round_robin_and_top_ranks_unpulled_last():
    b = Bandit(3, c=1.0).run(lambda a: [0.1, 0.5, 0.3][a], 7, "uniform")
    assert b.n.tolist() == [3, 2, 2]
    assert b.top(3) == [1, 2, 0]
    u = Bandit(3)
    u.update(2, -0.5)
    assert u.top(3) == [2, 0, 1]


def test_random_choice_draws_k_distinct_arms_uniformly_and_at_most_all():
    rng = np.random.default_rng(0)
    draws = [random_choice(16, 4, rng) for _ in range(4000)]
    assert all(len(set(d)) == 4 and d == sorted(d) and d[0] >= 0 and d[-1] < 16 for d in draws)
    counts = np.bincount(np.concatenate(draws), minlength=16)  # each arm expected 4000 * 4 / 16 = 1000 times
    assert stats.chisquare(counts).pvalue > 0.001
    assert random_choice(3, 5, rng) == [0, 1, 2]


# ------------------------------------------------------------------ items, rewards, errors

def test_rewards_errors_and_ranks():
    from scipy import stats

    rng = np.random.default_rng(1)
    x, y = rng.random(30), rng.integers(1, 4, 30).astype(float)
    assert np.allclose(ranks(y), stats.rankdata(y))
    assert correlation(x, y) == pytest.approx(stats.spearmanr(x, y)[0])
    assert correlation(x, y, "pearson") == pytest.approx(stats.pearsonr(x, y)[0])
    assert math.isnan(correlation(np.ones(5), np.arange(5.0))) and reward(np.ones(5), np.arange(5.0)) == 0.0
    pred, gold = np.array([3.0, 1.0, 2.0, np.nan]), np.array([1.0, 1.0, 2.0, 3.0])
    assert errors(pred, gold, "abs")[:3].tolist() == [2.0, 0.0, 0.0] and errors(pred, gold, "abs")[3] == np.inf
    assert worst(pred, gold, 2, "abs").tolist() == [3, 0]
    assert worst(np.array([1.0, 2.0, 3.0]), np.array([3.0, 2.0, 1.0]), 1, "rank").tolist() == [0]


def test_minibatches_are_reproducible_from_the_seed():
    pool = np.arange(100)
    a = [minibatch(np.random.default_rng(7), pool, 20) for _ in range(2)]
    assert np.array_equal(a[0], a[1]) and len(set(a[0])) == 20
    assert not np.array_equal(a[0], minibatch(np.random.default_rng(8), pool, 20))
    assert sorted(minibatch(np.random.default_rng(7), pool[:5], 20)) == list(range(5))
