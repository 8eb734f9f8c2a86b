"""Optimizer settings (``conf/optimizer/*.yaml``); every key is a field here, checked on construction."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from face.llm.sizes import Samples
from face.settings import Number, nested, settings

Reward = Literal["spearman", "pearson", "kendall"]  # the names of face.coefficients (tests hold them equal)


@settings("optimizer.split", frozen=True, conf="optimizer/paper.yaml:split")
class SplitConfig:
    folds: int = Field(ge=2)  # conversation-level folds, stratified by system
    fold: int = Field(ge=0)  # the held-out (test) fold; the others are for optimization
    dev_fraction: Number = Field(ge=0, lt=1)  # share of the optimization conversations kept aside as dev
    seed: int

    @model_validator(mode="after")
    def _fold_of_folds(self) -> SplitConfig:
        if self.fold >= self.folds:
            raise ValueError(f"optimizer.split.fold must be in 0..{self.folds - 1}, got {self.fold!r}")
        return self


@settings("optimizer.writer", frozen=True, conf="optimizer/paper.yaml:writer")
class WriterConfig:
    """Sampling of the gradient and rewrite calls."""

    temperature: Number = Field(ge=0)
    max_tokens: int = Field(ge=1)
    examples: int = Field(ge=1)  # worst-predicted items shown to the gradient prompt
    example_chars: int = Field(ge=20)  # an utterance is cut to this many characters in the gradient prompt


@settings("optimizer", frozen=True, conf="optimizer/paper.yaml")
class OptimizerConfig:
    """The loop of the paper (their values as defaults): beam b, α gradients, β rewrites per gradient, UCB c."""

    name: str
    alpha: Samples  # textual gradients per beam instruction
    beta: Samples  # rewrites per gradient
    beam: int = Field(ge=1)  # instructions kept per round
    ucb_c: Number = Field(ge=0)  # UCB exploration constant
    rounds: int = Field(ge=1)
    expand_minibatch: int = Field(ge=1)  # training items scored to find the worst-predicted ones
    error: Literal["rank", "abs"]  # rank: |rank(pred) - rank(gold)| | abs: |pred - gold|
    pulls: int = Field(ge=1)  # bandit pulls per round (one pull = reward on a fresh minibatch)
    pull_minibatch: int = Field(ge=1)  # items per pull
    reward: Reward  # correlation used as reward and as held-out metric
    top_k: int = Field(ge=1)  # size of the final ranked instruction set (the authors: 16 of 96)
    # initial: the paper's generic initial instruction | initial_aspect: ours per aspect
    start: Literal["initial", "initial_aspect"]
    scorer: Literal["live", "replay"]  # live (LLM) | replay (released scores; no gradients / rewrites)
    seed: int
    split: Annotated[SplitConfig, nested(SplitConfig)]
    writer: Annotated[WriterConfig, nested(WriterConfig)]
    resume: str | None  # a checkpoint directory of an earlier run to continue
    stop_after_round: int | None = Field(ge=1)  # stop cleanly after this round (checkpoint intact)

    def fingerprint_fields(self) -> dict[str, Any]:
        """What determines the result (not where to resume from, nor when to stop)."""
        return {k: v for k, v in asdict(self).items() if k not in ("resume", "stop_after_round", "name")}
