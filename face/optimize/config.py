"""Optimizer settings (``conf/optimizer/*.yaml``); every key is a field here, checked on construction."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Mapping

REWARDS = ("spearman", "pearson", "kendall")
ERRORS = ("rank", "abs")
STARTS = ("initial", "initial_aspect")


@dataclass(frozen=True)
class SplitConfig:
    folds: int = 2  # conversation-level folds, stratified by system
    fold: int = 0  # the held-out (test) fold; the others are for optimization
    dev_fraction: float = 0.25  # share of the optimization conversations kept aside as dev (per system)
    seed: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.folds, int) or self.folds < 2:
            raise ValueError(f"optimizer.split.folds must be an integer >= 2, got {self.folds!r}")
        if not isinstance(self.fold, int) or not 0 <= self.fold < self.folds:
            raise ValueError(f"optimizer.split.fold must be in 0..{self.folds - 1}, got {self.fold!r}")
        if not 0 <= self.dev_fraction < 1:
            raise ValueError(f"optimizer.split.dev_fraction must be in [0, 1), got {self.dev_fraction!r}")


@dataclass(frozen=True)
class WriterConfig:
    """Sampling of the gradient and rewrite calls."""

    temperature: float = 1.0
    max_tokens: int = 700
    examples: int = 4  # worst-predicted items shown to the gradient prompt
    example_chars: int = 400  # an utterance is cut to this many characters in the gradient prompt

    def __post_init__(self) -> None:
        if self.temperature < 0 or self.max_tokens < 1 or self.examples < 1 or self.example_chars < 20:
            raise ValueError(f"optimizer.writer: bad values {asdict(self)}")


@dataclass(frozen=True)
class OptimizerConfig:
    """The loop of the paper (their values as defaults): beam b, α gradients, β rewrites per gradient, UCB c."""

    name: str = "paper"
    alpha: int = 4  # textual gradients per beam instruction
    beta: int = 4  # rewrites per gradient
    beam: int = 4  # instructions kept per round
    ucb_c: float = 1.0  # UCB exploration constant
    rounds: int = 3
    expand_minibatch: int = 20  # training items scored to find the worst-predicted ones
    error: str = "rank"  # rank: |rank(pred) - rank(gold)| | abs: |pred - gold|
    pulls: int = 128  # bandit pulls per round (one pull = reward on a fresh minibatch)
    pull_minibatch: int = 20  # items per pull
    reward: str = "spearman"  # correlation used as reward and as held-out metric
    top_k: int = 16  # size of the final ranked instruction set (the authors: 16 of 96)
    start: str = "initial"  # initial: the paper's generic initial instruction | initial_aspect: ours per aspect
    scorer: str = "live"  # live (LLM) | replay (released scores; no gradients / rewrites)
    seed: int = 0
    split: SplitConfig = field(default_factory=SplitConfig)
    writer: WriterConfig = field(default_factory=WriterConfig)
    resume: str | None = None  # a checkpoint directory of an earlier run to continue
    stop_after_round: int | None = None  # stop cleanly after this round (checkpoint intact), e.g. to split work

    def __post_init__(self) -> None:
        if isinstance(self.split, Mapping):
            object.__setattr__(self, "split", SplitConfig(**self.split))
        if isinstance(self.writer, Mapping):
            object.__setattr__(self, "writer", WriterConfig(**self.writer))
        for key in ("alpha", "beta", "beam", "rounds", "expand_minibatch", "pulls", "pull_minibatch", "top_k"):
            v = getattr(self, key)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"optimizer.{key} must be an integer >= 1, got {v!r}")
        if not isinstance(self.ucb_c, (int, float)) or self.ucb_c < 0:
            raise ValueError(f"optimizer.ucb_c must be a number >= 0, got {self.ucb_c!r}")
        if self.reward not in REWARDS:
            raise ValueError(f"optimizer.reward must be one of {REWARDS}, got {self.reward!r}")
        if self.error not in ERRORS:
            raise ValueError(f"optimizer.error must be one of {ERRORS}, got {self.error!r}")
        if self.start not in STARTS:
            raise ValueError(f"optimizer.start must be one of {STARTS}, got {self.start!r}")
        if self.scorer not in ("live", "replay"):
            raise ValueError(f"optimizer.scorer must be live or replay, got {self.scorer!r}")
        if self.stop_after_round is not None and self.stop_after_round < 1:
            raise ValueError(f"optimizer.stop_after_round must be >= 1 or null, got {self.stop_after_round!r}")

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> OptimizerConfig:
        known = {f.name for f in fields(OptimizerConfig)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown optimizer setting(s) {unknown}; known: {sorted(known)}")
        return OptimizerConfig(**dict(d))

    def fingerprint_fields(self) -> dict[str, Any]:
        """What determines the result (not where to resume from, nor when to stop)."""
        d = asdict(self)
        for k in ("resume", "stop_after_round", "name"):
            d.pop(k)
        return d


def fingerprint(obj: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]
