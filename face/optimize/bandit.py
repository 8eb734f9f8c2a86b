"""Allocating evaluation to candidates: UCB1, uniform (round-robin) and random choice.

UCB1: after t pulls in all, arm i with n_i pulls and mean reward m_i has the upper confidence bound
``m_i + c * sqrt(ln t / n_i)``; an arm never pulled has bound +inf. Each step pulls the arm with the
largest bound (ties: the lowest index). After the budget, ``top(k)`` ranks arms by mean reward (ties:
more pulls, then the lower index); arms never pulled rank last.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np


class Bandit:
    def __init__(self, n_arms: int, c: float = 1.0):
        self.c = float(c)
        self.n = np.zeros(n_arms, dtype=int)
        self.total = np.zeros(n_arms, dtype=float)
        self.t = 0

    def means(self) -> np.ndarray:
        return np.where(self.n > 0, self.total / np.maximum(self.n, 1), np.nan)

    def bounds(self) -> np.ndarray:
        """Upper confidence bound of every arm (+inf for an arm not pulled yet)."""
        bonus = self.c * np.sqrt(math.log(max(self.t, 1)) / np.maximum(self.n, 1))
        return np.where(self.n > 0, self.means() + bonus, math.inf)

    def choose_ucb(self) -> int:
        return int(np.argmax(self.bounds()))  # first maximum on ties

    def update(self, arm: int, reward: float) -> None:
        self.n[arm] += 1
        self.total[arm] += reward
        self.t += 1

    def run(self, pull: Callable[[int], float], budget: int, policy: str = "ucb") -> Bandit:
        """``budget`` pulls, each of the arm ``policy`` chooses: ``ucb`` (``choose_ucb``) or ``uniform`` (in turn)."""
        for _ in range(budget):
            arm = self.choose_ucb() if policy == "ucb" else self.t % len(self.n)
            self.update(arm, pull(arm))
        return self

    def top(self, k: int) -> list[int]:
        means = self.means()
        return sorted(range(len(self.n)), key=lambda i: (self.n[i] == 0, -(means[i] if self.n[i] else 0.0),
                                                         -self.n[i], i))[:k]


def random_choice(n_arms: int, k: int, rng: np.random.Generator) -> list[int]:
    return sorted(rng.choice(n_arms, size=min(k, n_arms), replace=False).tolist())
