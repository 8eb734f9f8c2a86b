"""Score scoring units (particles, or whole turns / dialogues) for an aspect under each instruction.

A particle's score under one instruction is the expected score of the LLM's score distribution:
- ``sampling``: n samples (temperature > 0), mean of the valid ones;
- ``logprobs``: one call, the probability-weighted mean over the valid score tokens at the answer
  position (renormalised; the valid probability mass is recorded).
A unit without any valid answer gets NaN and a ``fallback`` reason; it never becomes a score.

Turn-level aspects see the two previous turns, the assistant turn, the particle and the user's next
turn; dialogue-level aspects see the whole dialogue and the particle.

Prompts read aspect -> context -> instruction -> particle, and calls are ordered the same way, so
consecutive requests share everything but the particle: llama.cpp / vLLM / SGLang reuse the cached
prefix instead of re-reading the conversation.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Sequence

import numpy as np
import pandas as pd

from face.aspects import Aspect
from face.data.schema import Conversation, Instruction, Particle
from face.particles import Decomposition, history_text, next_user_turn
from face.prompts import render

ESTIMATORS = ("sampling", "logprobs")
UNITS = ("particle", "whole")
ORDERS = ("prefix", "naive")


@dataclass(frozen=True)
class ScoringSpec:
    """How a unit is scored under one instruction."""

    estimator: str = "sampling"  # sampling (n samples, mean) | logprobs (one call, probability-weighted)
    n: int = 5  # samples per unit × instruction (sampling)
    temperature: float | None = 0.6
    max_tokens: int = 16
    top_logprobs: int = 5
    order: str = "prefix"  # prefix (requests sharing a prompt prefix run together) | naive

    def __post_init__(self) -> None:
        if self.estimator not in ESTIMATORS:
            raise ValueError(f"unknown estimator {self.estimator!r}; choose from {ESTIMATORS}")
        if self.order not in ORDERS:
            raise ValueError(f"unknown order {self.order!r}; choose from {ORDERS}")
        if self.n < 1:
            raise ValueError(f"the number of samples n must be >= 1, got {self.n}")

    @property
    def samples(self) -> int:
        """Completions per unit × instruction."""
        return self.n if self.estimator == "sampling" else 1


@dataclass(frozen=True)
class Unit:
    """What gets scored: a particle (particle_ind >= 0) or a whole turn / dialogue (particle_ind == -1)."""

    aspect: Aspect
    conv_id: str
    turn_ind: int  # -1: the whole dialogue
    particle_ind: int
    particle: Particle | None


@dataclass
class ScoreRecord:
    aspect: str
    conv_id: str
    turn_ind: int
    particle_ind: int
    instruction_id: str
    score: float  # NaN when no valid answer
    estimator: str
    n_requested: int
    n_valid: int
    samples: list = field(default_factory=list)  # parsed values (None = invalid)
    valid_mass: float | None = None  # logprobs: probability mass on valid score tokens
    distribution: dict | None = None  # logprobs: value -> probability
    fallback: str | None = None


def units_for(aspect: Aspect, convs: Sequence[Conversation], decomps: dict[tuple[str, int], Decomposition],
              unit: str = "particle") -> list[Unit]:
    """What gets scored for ``aspect``: every particle of the evaluated turns, or whole turns / dialogues."""
    if unit not in UNITS:
        raise ValueError(f"unknown unit {unit!r}; choose from {UNITS}")
    level = aspect.level
    out = []
    for c in convs:
        if unit == "whole" and level == "dialogue":
            out.append(Unit(aspect, c.conv_id, -1, -1, None))
            continue
        for t in c.evaluated_turns():
            if unit == "whole":
                out.append(Unit(aspect, c.conv_id, t.turn_ind, -1, None))
                continue
            d = decomps.get((c.conv_id, t.turn_ind))
            if d is None:
                raise KeyError(f"no particles for conversation {c.conv_id!r}, turn {t.turn_ind}")
            out += [Unit(aspect, c.conv_id, t.turn_ind, i, p) for i, p in enumerate(d.particles)]
    return out


def particle_text(p: Particle | None, whole: str) -> str:
    if p is None:
        return f"(no particle: rate the {whole} as a whole)"
    return f"- dialogue act: {p.dialogue_act}\n- mention: {p.mention}\n- user feedback: {p.user_feedback}"


def score_messages(unit: Unit, conv: Conversation, instruction: str,
                   judged: str = "conversational recommender systems") -> tuple[tuple[str, str], ...]:
    """The scoring prompt; ``judged`` names the kind of system (the dataset's wording)."""
    spec = unit.aspect
    common = dict(aspect=spec.name.replace("_", " "), definition=spec.definition, low=spec.low, high=spec.high,
                  instruction=instruction.strip(), judged=judged)
    if spec.level == "turn":
        turn = conv.turn(unit.turn_ind)
        before = [t for t in conv.turns if t.turn_ind < unit.turn_ind][-2:]
        return render("score_turn.txt", history=history_text(before), turn=turn.utterance.strip(),
                      next_user=next_user_turn(conv, turn) or "(the conversation ended here)",
                      particle=particle_text(unit.particle, "assistant turn"), **common)
    return render("score_dialogue.txt", dialogue=history_text(conv.turns),
                  particle=particle_text(unit.particle, "dialogue"), **common)


def score_value(answer, scale: Sequence[int]) -> int | None:
    """The score of one completion (or text) if it is a valid answer on ``scale``, else None."""
    from face.llm.adapters import score_adapter

    got = score_adapter(scale).parse(answer)
    return None if isinstance(got, str) else got.score


@dataclass(frozen=True)
class Planned:
    unit: Unit
    instruction: Instruction
    request: object  # face.llm.ChatRequest


def plan(units: Sequence[Unit], instructions: Sequence[Instruction], convs: dict[str, Conversation],
         spec: ScoringSpec, json_schema: bool, judged: str = "conversational recommender systems") -> list[Planned]:
    """One request per unit × instruction, in prefix-sharing order (or ``naive``: instruction-major)."""
    from face.llm import ChatRequest
    from face.llm.adapters import score_adapter

    rank = {i.instruction_id: r for r, i in enumerate(instructions)}
    pairs = [(u, i) for u in units for i in instructions]
    # the prompt reads context -> instruction -> particle; "prefix" sorts the same way, so consecutive
    # requests differ only in the short particle; "naive" is the plain loop over units, then instructions
    if spec.order == "prefix":
        pairs.sort(key=lambda p: (p[0].conv_id, p[0].turn_ind if p[0].aspect.level == "turn" else 0,
                                  rank[p[1].instruction_id], p[0].turn_ind, p[0].particle_ind))
    out = []
    for u, ins in pairs:
        adapter = score_adapter(u.aspect.scale)
        messages = score_messages(u, convs[u.conv_id], ins.text, judged)
        if spec.estimator == "sampling":
            req = ChatRequest(messages=messages, n=spec.n, temperature=spec.temperature, max_tokens=spec.max_tokens,
                              tag=f"score:{u.aspect.name}")
        else:
            req = ChatRequest(messages=messages, n=1, temperature=0.0, max_tokens=spec.max_tokens, logprobs=True,
                              top_logprobs=spec.top_logprobs, tag=f"score:{u.aspect.name}")
        if json_schema:  # without schema support the prompt's own answer format line is the request
            req = adapter.request(req, native=True)
        out.append(Planned(u, ins, req))
    return out


def record_from_result(p: Planned, result, estimator: str) -> ScoreRecord:
    from face.llm.logprobs import expected_score

    u = p.unit
    scale = u.aspect.scale
    base = dict(aspect=u.aspect.name, conv_id=u.conv_id, turn_ind=u.turn_ind, particle_ind=u.particle_ind,
                instruction_id=p.instruction.instruction_id, estimator=estimator)
    if any(getattr(s, "dry_run", False) for s in result.samples):
        return ScoreRecord(score=math.nan, n_requested=len(result.samples), n_valid=0, fallback="dry_run", **base)
    values = [score_value(s, scale) for s in result.samples]
    valid = [v for v in values if v is not None]
    if estimator == "sampling":
        score = float(np.mean(valid)) if valid else math.nan
        return ScoreRecord(score=score, n_requested=len(values), n_valid=len(valid), samples=values,
                           fallback=None if valid else "no_valid_sample", **base)
    es = expected_score(result.samples[0], scale)
    if es is not None and es.value is not None:
        return ScoreRecord(score=float(es.value), n_requested=1, n_valid=1, samples=values, valid_mass=es.valid_mass,
                           distribution={str(k): v for k, v in es.distribution.items()}, **base)
    if valid:  # the answer parsed but no usable logprobs at its position: say so
        return ScoreRecord(score=float(valid[0]), n_requested=1, n_valid=1, samples=values,
                           fallback="parsed_value_without_logprobs", **base)
    return ScoreRecord(score=math.nan, n_requested=1, n_valid=0, samples=values, fallback="no_valid_answer", **base)


def score(client, planned: Sequence[Planned], estimator: str, desc: str = "scoring") -> list[ScoreRecord]:
    results = client.run_batch([p.request for p in planned], desc=desc)
    return [record_from_result(p, r, estimator) for p, r in zip(planned, results)]


def records_frame(records: Sequence[ScoreRecord]) -> pd.DataFrame:
    return pd.DataFrame([asdict(r) for r in records])
