"""Score scoring units (particles, or whole turns / dialogues) for an aspect under each instruction:
plan -> stream -> record.

- **plan**: one request per unit × instruction (``plan_iter``), in prefix-sharing order; the prompts are
  face/pipeline/score_prompts.py's, the request's answer type is the estimator's (``ScoreAnswer``,
  face/pipeline/estimators.py), its draws ``method.scoring.draws``.
- **stream**: the client's one batch driver (face/llm/stream.py: window, identical-request dedup, cache
  read-ahead); an invalid answer is redrawn by the LLM layer's one loop (face/llm/validating.py) with fresh sample
  indices extending the request's range (0..n-1, then n, n+1, ... for the missing ones: a rerun asks for the same
  and is served from the cache).
- **record**: one ``ScoreRecord`` from every draw (the fallback rules applied: ``min`` / ``drop``,
  ``logprobs_missing``). Every draw rejected, redraw and answer still missing is counted by the LLM layer, the
  samples scored as the lowest and the answers scored without logprobs here (``count_answers``), all into
  llm_usage.json, the ``llm_*`` metrics and the console line, once per request (identical requests, sent once,
  are counted once; each of their records carries the counts).

The names extensions subclass (``Estimator``, ``SamplingEstimator``) and the units are re-exported here.
"""

from __future__ import annotations

import functools
import itertools
import math
import operator
from dataclasses import dataclass
from typing import Annotated, Any, Callable, Iterable, Iterator, Literal, Sequence

from pydantic import Field, model_validator

from face.data.schema import Conversation, Instruction
from face.llm.base import Draws
from face.llm.sizes import Samples
from face.pipeline.estimators import ESTIMATORS, Estimator, SamplingEstimator, ScoreAnswer, ScoreRecord, score_answer
from face.pipeline.particles import registered
from face.pipeline.score_prompts import Unit, score_messages, turns_for, units_for
from face.settings import Number, nested, settings


@settings("method.scoring", frozen=True, conf="method/face.yaml:scoring")
class ScoringSpec:
    """How a unit is scored under one instruction (``method.scoring``)."""

    # sampling (n samples, mean) | logprobs (one call, probability-weighted) | module.Class
    estimator: Annotated[str, registered(ESTIMATORS)]
    n: Samples  # samples per unit × instruction (sampling; the authors: 5)
    temperature: Number | None = Field(ge=0, le=2)  # the authors: 0.6
    max_tokens: int | None = Field(ge=1)  # None: 768 with reasoning (the authors), 16 without
    top_logprobs: int = Field(ge=0, le=20)
    order: Literal["prefix", "naive"]  # prefix (requests sharing a prompt prefix run together) | naive
    reasoning: bool  # think step by step before the JSON answer (the paper) | the answer only
    draws: Annotated[Draws, nested(Draws)]
    fallback: Literal["min", "drop"]  # a sample still invalid: the scale's lowest (the authors) | left out
    # estimator=logprobs, no draw with logprobs at its score: parsed (its integer) | redraw (invalid: the fallback
    # applies) | min (the scale's lowest)
    logprobs_missing: Literal["parsed", "redraw", "min"]

    @model_validator(mode="after")
    def _importable(self) -> ScoringSpec:
        _ = self.scorer  # a class of the user's: imported now, before anything runs
        return self

    @functools.cached_property
    def scorer(self) -> Estimator:
        """The estimator named by ``estimator``: a built-in name or the dotted path of a class."""
        from face.errors import import_class

        return (ESTIMATORS.get(self.estimator) or import_class(self.estimator, "method.scoring.estimator"))()

    @property
    def samples(self) -> int:
        """Valid answers wanted per unit × instruction."""
        return self.scorer.answers(self)

    @property
    def answer_tokens(self) -> int:
        return self.max_tokens or (768 if self.reasoning else 16)

    def answer(self, scale: Sequence[int]) -> ScoreAnswer:
        """The answer type of this spec's requests on ``scale``."""
        return score_answer(self, tuple(int(s) for s in scale))


@dataclass(frozen=True)
class Planned:
    unit: Unit
    instruction: Instruction
    request: Any  # face.llm.ChatRequest


def plan(units: Sequence[Unit], instructions: Sequence[Instruction], convs: dict[str, Conversation],
         spec: ScoringSpec, json_schema: bool, judged: str = "conversational recommender systems") -> list[Planned]:
    """One request per unit × instruction, in prefix-sharing order (or ``naive``: instruction-major)."""
    return list(plan_iter(units, instructions, convs, spec, json_schema, judged))


def plan_iter(units: Sequence[Unit], instructions: Sequence[Instruction], convs: dict[str, Conversation],
              spec: ScoringSpec, json_schema: bool, judged: str = "conversational recommender systems"
              ) -> Iterator[Planned]:
    """``plan`` as a generator: each prompt is rendered when it is needed (a paper-size stage plans 10^5)."""
    pairs = _prefix_order(units, instructions) if spec.order == "prefix" else \
        ((u, i) for u in units for i in instructions)
    for u, ins in pairs:
        messages = score_messages(u, convs[u.conv_id], ins.text, judged, spec.reasoning)
        req = spec.scorer.request(messages, spec, f"score:{u.aspect.name}")
        yield Planned(u, ins, spec.answer(u.aspect.scale).request(req, json_schema))


def _prefix_order(units: Sequence[Unit], instructions: Sequence[Instruction]) -> Iterator[tuple[Unit, Instruction]]:
    """Every unit × instruction in prefix-sharing order, one at a time: the prompt reads context -> instruction ->
    particle, so the pairs go by conversation (and turn, for a turn-level aspect), then instruction, then particle
    -- the order of a stable sort of the unit-major pairs by that key, without holding the pairs (10^5 a stage)."""
    rank = {i.instruction_id: r for r, i in enumerate(instructions)}  # an id given twice: its last place
    ranked = [[i for i in instructions if rank[i.instruction_id] == r] for r in sorted(set(rank.values()))]

    def group(u: Unit) -> tuple[str, int]:
        return u.conv_id, u.turn_ind if u.aspect.level == "turn" else 0

    ordered = sorted(units, key=lambda u: (*group(u), u.turn_ind, u.particle_ind))
    for _, members in itertools.groupby(ordered, key=group):
        same = list(members)
        for tied in ranked:
            for u in same:
                for ins in tied:
                    yield u, ins


def record_from_samples(p: Planned, samples: Sequence[Any], spec: ScoringSpec) -> ScoreRecord:
    """One score from every draw of a unit × instruction, in draw order (the fallback rules applied)."""
    u = p.unit
    base: dict[str, Any] = dict(aspect=u.aspect.name, conv_id=u.conv_id, turn_ind=u.turn_ind,
                                particle_ind=u.particle_ind, instruction_id=p.instruction.instruction_id,
                                estimator=spec.estimator)
    if any(getattr(s, "dry_run", False) for s in samples):
        return ScoreRecord(score=math.nan, n_requested=spec.samples, n_valid=0, fallback="dry_run", **base)
    answer = spec.answer(u.aspect.scale)
    parsed = [s.value if getattr(s, "value", None) is not None else answer.read(s) for s in samples]
    base.update(samples=[v for v, _ in parsed], n_retried=max(0, len(samples) - spec.samples))
    return spec.scorer.record(parsed, spec, u.aspect.low, base)


def count_answers(client: Any, tag: str, rec: ScoreRecord) -> None:
    """What one score record adds to the client's usage beyond what every request counts (llm_usage.json, the
    ``llm_*`` metrics and the summary line): ``n_defaulted`` samples scored as the lowest, an answer scored without
    its logprobs."""
    usage = getattr(client, "usage", None)
    if usage is None or not hasattr(usage, "note_scores") or rec.fallback == "dry_run":
        return
    usage.note_scores(tag, defaulted=rec.n_defaulted,
                      logprob_fallbacks=int(rec.fallback is not None and "logprobs" in rec.fallback))


def score(client: Any, planned: Sequence[Planned], spec: ScoringSpec, desc: str = "scoring") -> list[ScoreRecord]:
    """Score every planned unit × instruction (``score_stream``, collected in a list)."""
    out: list[ScoreRecord] = []
    score_stream(client, planned, spec, out.append, desc, len(planned))
    return out


def score_stream(client: Any, planned: Iterable[Planned], spec: ScoringSpec, emit: Callable[[ScoreRecord], None],
                 desc: str = "scoring", total: int | None = None) -> None:
    """Score every planned unit × instruction; each record goes to ``emit`` in the order planned, as soon as it and
    every earlier one are done, so memory holds what is in flight, not the run (``planned`` may be a generator).
    The client's batch driver sends them (face/llm/stream.py) and stops as it says."""

    def record(p: Planned, res: Any) -> None:
        rec = record_from_samples(p, res.samples, spec)
        if not res.counted:  # identical requests share one result: its counts go in once
            res.counted = True
            count_answers(client, p.request.tag, rec)
        emit(rec)

    client.run_stream(planned, operator.attrgetter("request"), record, desc, total)


# the names of the rooms beside it that extensions and callers import from here
__all__ = ["Estimator", "SamplingEstimator", "ScoreRecord", "Unit", "score_messages", "turns_for", "units_for"]
