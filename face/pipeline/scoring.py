"""Score scoring units (particles, or whole turns / dialogues) for an aspect under each instruction.

A particle's score under one instruction is the expected score of the LLM's score distribution:
- ``sampling``: n samples (temperature > 0), their mean;
- ``logprobs``: one call, the probability-weighted mean over the valid score tokens at the position of
  the score inside the final JSON answer (renormalised; the valid probability mass is recorded).

Two prompts (``ScoringSpec.reasoning``):
- ``True`` (default, the paper's): numbered turns with roles; for turn-level aspects the two previous
  turns, the current assistant turn, the particle and the user's response; for dialogue-level aspects
  the whole dialogue and the particle with the number of the turn it came from; the aspect's
  particle-based definition and the description of every score level (the dataset's annotation
  scheme); the instruction; an invitation to think step by step. The answer is the last JSON object
  of the reply.
- ``False`` (cheaper, ours): a compact prompt answered by a schema-constrained ``{"score": k}`` only.

Invalid answers (``InvalidPolicy``): an invalid sample is drawn again, up to ``attempts`` draws in all
(the authors: 10); a sample still invalid then counts as the scale's lowest score (``fallback=min``, the
authors' rule) or is left out (``fallback=drop``: the mean of the valid samples, no score without any).
With ``logprobs``, an answer without logprobs at its score is redrawn the same way; if no draw has them,
``logprobs_missing`` decides: ``parsed`` (its parsed integer), ``redraw`` (invalid: ``fallback`` applies) or
``min`` (the lowest score). Every retry and default is counted in the score record, and in the client's usage
(``count_answers``: llm_usage.json, the ``llm_*`` metrics, the console line).

Both prompts put what the requests of one turn share first (context, aspect, grades), then the
instruction, then the particle, and calls are ordered the same way, so llama.cpp / vLLM / SGLang reuse
the cached prefix. In the reasoning prompt, conversation text is whitespace-normalised onto one line per
turn, so a turn cannot open a new block of the prompt.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field, replace
from typing import Callable, ClassVar, Iterable, Iterator, Sequence

from face.aspects import Aspect
from face.data.schema import Conversation, Instruction, Particle
from face.llm.adapters import last_json_object
from face.pipeline.particles import Decomposition, history_text, next_user_turn
from face.prompts import render

UNITS = ("particle", "whole")
ORDERS = ("prefix", "naive")
FALLBACKS = ("min", "drop")
LOGPROBS_MISSING = ("parsed", "redraw", "min")


@dataclass(frozen=True)
class InvalidPolicy:
    """What happens to an answer that is not a valid score."""

    attempts: int = 10  # draws per sample in all before giving up (the authors: 10)
    fallback: str = "min"  # min: the scale's lowest score (the authors) | drop: leave the sample out
    # estimator=logprobs, an answer without logprobs at its score (redrawn like an invalid one first), if no draw
    # has them: parsed: its parsed integer is the score | redraw: it counts as invalid (``fallback`` applies) |
    # min: the scale's lowest score
    logprobs_missing: str = "parsed"

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"method.invalid.attempts must be >= 1, got {self.attempts}")
        if self.fallback not in FALLBACKS:
            raise ValueError(f"method.invalid.fallback must be one of {FALLBACKS}, got {self.fallback!r}")
        if self.logprobs_missing not in LOGPROBS_MISSING:
            raise ValueError(f"method.invalid.logprobs_missing must be one of {LOGPROBS_MISSING}, "
                             f"got {self.logprobs_missing!r}")


@dataclass(frozen=True)
class ScoringSpec:
    """How a unit is scored under one instruction."""

    estimator: str = "sampling"  # sampling (n samples, mean) | logprobs (one call, probability-weighted)
    n: int = 5  # samples per unit × instruction (sampling)
    temperature: float | None = 0.6
    max_tokens: int | None = None  # None: 768 with reasoning (the authors), 16 without
    top_logprobs: int = 5
    order: str = "prefix"  # prefix (requests sharing a prompt prefix run together) | naive
    reasoning: bool = True  # think step by step before the JSON answer (the paper) | the answer only
    invalid: InvalidPolicy = field(default_factory=InvalidPolicy)

    def __post_init__(self) -> None:
        if isinstance(self.invalid, dict):
            object.__setattr__(self, "invalid", InvalidPolicy(**self.invalid))
        if self.estimator not in ESTIMATORS and "." not in self.estimator:
            raise ValueError(f"unknown estimator {self.estimator!r}; choose from {tuple(ESTIMATORS)} or give a "
                             "class as module.Class")
        _ = self.scorer  # a class of the user's: imported now, before anything runs
        if self.order not in ORDERS:
            raise ValueError(f"unknown order {self.order!r}; choose from {ORDERS}")
        if self.n < 1:
            raise ValueError(f"the number of samples n must be >= 1, got {self.n}")

    @functools.cached_property
    def scorer(self) -> Estimator:
        """The estimator named by ``estimator``: a built-in name or the dotted path of a class."""
        from face.errors import import_class

        return (ESTIMATORS.get(self.estimator) or import_class(self.estimator, "method.estimator"))()

    @property
    def samples(self) -> int:
        """Completions per unit × instruction."""
        return self.scorer.answers(self)

    @property
    def answer_tokens(self) -> int:
        return self.max_tokens or (768 if self.reasoning else 16)


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
    score: float  # NaN when no valid answer (fallback=drop)
    estimator: str
    n_requested: int
    n_valid: int
    samples: list = field(default_factory=list)  # parsed values of every draw (None = invalid)
    valid_mass: float | None = None  # logprobs: probability mass on valid score tokens
    distribution: dict | None = None  # logprobs: value -> probability
    fallback: str | None = None
    n_retried: int = 0  # extra draws made to replace invalid answers
    n_defaulted: int = 0  # samples counted as the lowest score after every attempt was invalid


UNLABELLED = ("skip", "score")


def units_for(aspect: Aspect, convs: Sequence[Conversation], decomps: dict[tuple[str, int], Decomposition],
              unit: str = "particle", unlabelled: str = "skip") -> list[Unit]:
    """What gets scored for ``aspect``: every particle of the evaluated turns, or whole turns / dialogues.

    ``unlabelled="skip"`` (the authors): in a conversation whose turns carry human labels, a turn-level aspect
    is not scored on the turns without a label for it (the released relevance judgements leave out the 5
    such turns of CRSArena-Eval); conversations without turn labels (your own logs) are scored in full."""
    if unit not in UNITS:
        raise ValueError(f"unknown unit {unit!r}; choose from {UNITS}")
    if unlabelled not in UNLABELLED:
        raise ValueError(f"method.unlabelled_turns must be one of {UNLABELLED}, got {unlabelled!r}")
    level = aspect.level
    out = []
    for c in convs:
        if unit == "whole" and level == "dialogue":
            out.append(Unit(aspect, c.conv_id, -1, -1, None))
            continue
        for t in turns_for(aspect, c, unlabelled):
            if unit == "whole":
                out.append(Unit(aspect, c.conv_id, t.turn_ind, -1, None))
                continue
            d = decomps.get((c.conv_id, t.turn_ind))
            if d is None:
                raise KeyError(f"no particles for conversation {c.conv_id!r}, turn {t.turn_ind}")
            out += [Unit(aspect, c.conv_id, t.turn_ind, i, p) for i, p in enumerate(d.particles)]
    return out


def turns_for(aspect: Aspect, conv: Conversation, unlabelled: str = "skip") -> list:
    """The assistant turns of ``conv`` scored for ``aspect`` (see ``units_for``)."""
    turns = conv.evaluated_turns()
    if unlabelled == "skip" and aspect.level == "turn" and any(t.labels for t in conv.turns):
        turns = [t for t in turns if aspect.name in t.labels]
    return turns


# ---------------------------------------------------------------- prompts

def particle_text(p: Particle | None, whole: str) -> str:
    if p is None:
        return f"(no particle: rate the {whole} as a whole)"
    return f"- dialogue act: {p.dialogue_act}\n- mention: {p.mention}\n- user feedback: {p.user_feedback}"


def one_line(text: str) -> str:
    """Whitespace-normalised text (the authors' clean-up; also keeps a turn on its own line)."""
    return " ".join(text.split())


def numbered(turns) -> str:
    """``Turn N - ROLE: text``, one line per turn."""
    if not turns:
        return "(no earlier turns)"
    return "\n".join(f"Turn {t.turn_ind} - {t.role}: {one_line(t.utterance)}" for t in turns)


def score_messages(unit: Unit, conv: Conversation, instruction: str, judged: str = "conversational recommender systems",
                   reasoning: bool = False) -> tuple[tuple[str, str], ...]:
    """The scoring prompt; ``judged`` names the kind of system (the dataset's wording)."""
    if reasoning:
        return _reasoning_messages(unit, conv, instruction, judged)
    spec = unit.aspect
    common = dict(aspect=spec.name.replace("_", " "), definition=spec.definition, low=spec.low, high=spec.high,
                  instruction=instruction.strip(), judged=judged)
    if spec.level == "turn":
        turn = conv.turn(unit.turn_ind)
        before = [t for t in conv.turns if t.turn_ind < unit.turn_ind][-2:]
        return render("score_turn.txt", history=history_text(before), turn=turn.utterance.strip(),
                      next_user=next_user_turn(conv, turn) or "(the conversation ended here)",
                      particle=particle_text(unit.particle, "assistant turn"), **common)
    heading = "Particle to rate:"
    if unit.particle is not None:  # which turn it came from (the dialogue is shown without turn numbers)
        k = [t.turn_ind for t in conv.assistant_turns()].index(unit.turn_ind) + 1
        heading = f"Particle to rate (from the assistant's {ordinal(k)} turn):"
    return render("score_dialogue.txt", dialogue=_transcript(conv, history_text), particle_heading=heading,
                  particle=particle_text(unit.particle, "dialogue"), **common)


def ordinal(k: int) -> str:
    """1st, 2nd, 3rd, 4th, ..., 11th, 12th, 13th, 21st, ..."""
    suffix = "th" if 10 <= k % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(k % 10, "th")
    return f"{k}{suffix}"


def _reasoning_messages(unit: Unit, conv: Conversation, instruction: str, judged: str) -> tuple[tuple[str, str], ...]:
    spec = unit.aspect
    whole = unit.particle is None
    common = dict(aspect=spec.name.replace("_", " "), judged=judged, low=spec.low, high=spec.high,
                  instruction=instruction.strip(), definition=spec.definition if whole else spec.of_particle,
                  grades=spec.level_lines() or f"- an integer from {spec.low} (worst) to {spec.high} (best)")
    if spec.level == "turn":
        history, turn, nxt = _per_conv(conv, ("turn context", unit.turn_ind),
                                       lambda: _turn_context(conv, unit.turn_ind))
        target = ("Target: the whole current assistant turn." if whole else
                  f"Target particle (from the current assistant turn):\n{particle_text(unit.particle, '')}")
        return render("score_turn_reasoning.txt", history=history, turn=turn, next_user=nxt, target=target, **common)
    target = ("Target: the whole dialogue." if whole else
              f"Target particle (from assistant turn {unit.turn_ind}):\n{particle_text(unit.particle, '')}")
    return render("score_dialogue_reasoning.txt", dialogue=_transcript(conv, numbered), target=target, **common)


def _turn_context(conv: Conversation, turn_ind: int) -> tuple[str, str, str]:
    """(the two turns before, the turn, the user's response) as the reasoning prompt shows them."""
    turn = conv.turn(turn_ind)
    before = [t for t in conv.turns if t.turn_ind < turn_ind][-2:]
    nxt = next_user_turn(conv, turn)
    return numbered(before), numbered([turn]), one_line(nxt) if nxt else "N/A"


_PER_CONV: dict[tuple, tuple[Conversation, object]] = {}


def _per_conv(conv: Conversation, key: tuple, make: Callable[[], object]):
    """``make()``, remembered for the last conversations: the requests of a conversation follow each other and
    show the same text (the dialogue, a turn's context) with every particle and instruction."""
    k = (id(conv), *key)
    got = _PER_CONV.get(k)
    if got is None or got[0] is not conv:
        if len(_PER_CONV) > 256:
            _PER_CONV.clear()
        got = _PER_CONV[k] = (conv, make())
    return got[1]


def _transcript(conv: Conversation, how) -> str:
    """``how(conv.turns)`` (the whole dialogue), remembered per conversation."""
    return _per_conv(conv, ("transcript", id(how)), lambda: how(conv.turns))


# ---------------------------------------------------------------- answers

def score_value(answer, scale: Sequence[int]) -> int | None:
    """The score of one completion (or text) if it is a valid answer on ``scale``, else None."""
    from face.llm.adapters import score_adapter

    got = score_adapter(scale).parse(answer)
    return None if isinstance(got, str) else got.score



def reasoned_value(answer, scale: Sequence[int]) -> int | None:
    """The score of a reasoned reply: the last JSON object's ``score``, if valid on ``scale``."""
    if getattr(answer, "finish_reason", "") == "length" or getattr(answer, "dry_run", False):
        return None
    found = last_json_object(getattr(answer, "text", answer))
    if found is None:
        return None
    from face.llm.adapters import score_adapter

    got = score_adapter(scale).validate(found[0])
    return None if isinstance(got, str) else got.score


def reasoned_expectation(completion, scale: Sequence[int]):
    """The expected score read at the score token of the reply's final JSON object (None if absent)."""
    from face.llm.logprobs import expected_score

    if not completion.logprobs or completion.finish_reason == "length":
        return None
    found = last_json_object(completion.text)
    if found is None:
        return None
    offset, start = 0, None
    for i, t in enumerate(completion.logprobs):  # the first token that reaches into the final object
        offset += len(t.token)
        if offset > found[1]:
            start = i
            break
    if start is None:
        return None
    tail = completion.logprobs[start:]
    return expected_score(replace(completion, text="".join(t.token for t in tail), logprobs=tail), scale)


# ---------------------------------------------------------------- requests and records

@dataclass(frozen=True)
class Planned:
    unit: Unit
    instruction: Instruction
    request: object  # face.llm.ChatRequest


def plan(units: Sequence[Unit], instructions: Sequence[Instruction], convs: dict[str, Conversation],
         spec: ScoringSpec, json_schema: bool, judged: str = "conversational recommender systems") -> list[Planned]:
    """One request per unit × instruction, in prefix-sharing order (or ``naive``: instruction-major)."""
    return list(plan_iter(units, instructions, convs, spec, json_schema, judged))


def plan_iter(units: Sequence[Unit], instructions: Sequence[Instruction], convs: dict[str, Conversation],
              spec: ScoringSpec, json_schema: bool, judged: str = "conversational recommender systems"
              ) -> Iterator[Planned]:
    """``plan`` as a generator: each prompt is rendered when it is needed (a paper-size stage plans 10^5)."""
    from face.llm.adapters import score_adapter

    scorer = spec.scorer
    rank = {i.instruction_id: r for r, i in enumerate(instructions)}
    pairs = [(u, i) for u in units for i in instructions]
    # the prompt reads context -> instruction -> particle; "prefix" sorts the same way, so consecutive
    # requests differ only in the short particle; "naive" is the plain loop over units, then instructions
    if spec.order == "prefix":
        pairs.sort(key=lambda p: (p[0].conv_id, p[0].turn_ind if p[0].aspect.level == "turn" else 0,
                                  rank[p[1].instruction_id], p[0].turn_ind, p[0].particle_ind))
    for u, ins in pairs:
        messages = score_messages(u, convs[u.conv_id], ins.text, judged, spec.reasoning)
        req = scorer.request(messages, spec, f"score:{u.aspect.name}")
        if json_schema and not spec.reasoning:  # a schema would rule the reasoning out
            req = score_adapter(u.aspect.scale).request(req, native=True)
        yield Planned(u, ins, req)


def _sample_value(p: Planned, s, spec: ScoringSpec):
    """(value or None, ExpectedScore or None) of one completion."""
    return spec.scorer.parse(s, p.unit.aspect.scale, spec.reasoning)


def _mean(values: list) -> float:
    """The mean of a few integer samples: their exact sum over their count (= numpy's mean, without its cost)."""
    return float(sum(values) / len(values))


def _n_valid(parsed, spec: ScoringSpec) -> int:
    return spec.scorer.n_valid(parsed)


def record_from_samples(p: Planned, samples, spec: ScoringSpec, parse=None) -> ScoreRecord:
    """One score from every draw of a unit × instruction (invalid ones replaced, then the policy applied);
    ``parse(sample)``: its ``_sample_value`` (by default computed here)."""
    u = p.unit
    base = dict(aspect=u.aspect.name, conv_id=u.conv_id, turn_ind=u.turn_ind, particle_ind=u.particle_ind,
                instruction_id=p.instruction.instruction_id, estimator=spec.estimator)
    if any(getattr(s, "dry_run", False) for s in samples):
        return ScoreRecord(score=math.nan, n_requested=spec.samples, n_valid=0, fallback="dry_run", **base)
    parsed = [parse(s) if parse else _sample_value(p, s, spec) for s in samples]
    base.update(samples=[v for v, _ in parsed], n_retried=max(0, len(samples) - spec.samples))
    return spec.scorer.record(parsed, spec, u.aspect.low, base)


# ---------------------------------------------------------------- estimators: a score from the LLM's answers

class Estimator:
    """How a unit × instruction is scored from the LLM's answers: the request (how many answers, how sampled),
    what one answer says (``parse``: its value, and what else it carries), how many valid answers make a score,
    and the score from them (``record``). ``method.estimator`` names one: ``sampling``, ``logprobs``, or the
    dotted path of a class of your own."""

    name: ClassVar[str] = "custom"
    memo_parse: ClassVar[bool] = False  # parse depends on the reply's text, finish reason and the scale alone
    reads_logprobs: ClassVar[bool] = False  # records carry a score distribution (valid_mass metrics)

    def answers(self, spec: ScoringSpec) -> int:
        """Valid answers wanted per unit × instruction."""
        raise NotImplementedError

    def request(self, messages, spec: ScoringSpec, tag: str):
        raise NotImplementedError

    def parse(self, sample, scale: Sequence[int], reasoning: bool) -> tuple[int | None, object | None]:
        raise NotImplementedError

    def n_valid(self, parsed) -> int:
        raise NotImplementedError

    def record(self, parsed, spec: ScoringSpec, low: int, base: dict) -> ScoreRecord:
        raise NotImplementedError

    def describe(self, spec: ScoringSpec) -> str:
        return f"estimator: {spec.estimator}"


class SamplingEstimator(Estimator):
    """n answers sampled at the temperature; the score is their mean (``combine``). An answer that is not a valid
    score is redrawn; what is still missing after ``invalid.attempts`` draws counts as the scale's lowest
    (``invalid.fallback=min``, the authors) or is left out (``drop``)."""

    name: ClassVar[str] = "sampling"
    memo_parse: ClassVar[bool] = True

    def answers(self, spec: ScoringSpec) -> int:
        return spec.n

    def request(self, messages, spec: ScoringSpec, tag: str):
        from face.llm import ChatRequest

        return ChatRequest(messages=messages, n=spec.n, temperature=spec.temperature, max_tokens=spec.answer_tokens,
                           tag=tag)

    def parse(self, sample, scale, reasoning):
        return (reasoned_value(sample, scale) if reasoning else score_value(sample, scale)), None

    def n_valid(self, parsed) -> int:
        return sum(v is not None for v, _ in parsed)

    def combine(self, values: list[int]) -> float:
        """The score of a unit × instruction from its valid sampled values."""
        return _mean(values)

    def record(self, parsed, spec: ScoringSpec, low: int, base: dict) -> ScoreRecord:
        valid = [v for v, _ in parsed if v is not None][: spec.n]
        missing = spec.n - len(valid)
        if missing and spec.invalid.fallback == "min":
            return ScoreRecord(score=self.combine(valid + [low] * missing), n_requested=spec.n, n_valid=len(valid),
                               fallback=f"{missing} invalid sample(s) scored {low}", n_defaulted=missing, **base)
        reason = None if not missing else "no_valid_sample" if not valid else f"{missing} invalid sample(s) dropped"
        return ScoreRecord(score=self.combine(valid) if valid else math.nan, n_requested=spec.n,
                           n_valid=len(valid), fallback=reason, **base)

    def describe(self, spec: ScoringSpec) -> str:
        return f"estimator: {spec.estimator} (n={spec.n}, T={spec.temperature})"


class LogprobsEstimator(Estimator):
    """One greedy answer; the score is the probability-weighted mean over the valid score tokens at the position
    of the answer's score (G-Eval style)."""

    name: ClassVar[str] = "logprobs"
    reads_logprobs: ClassVar[bool] = True

    def answers(self, spec: ScoringSpec) -> int:
        return 1

    def request(self, messages, spec: ScoringSpec, tag: str):
        from face.llm import ChatRequest

        return ChatRequest(messages=messages, n=1, temperature=0.0, max_tokens=spec.answer_tokens, logprobs=True,
                           top_logprobs=spec.top_logprobs, tag=tag)

    def parse(self, sample, scale, reasoning):
        from face.llm.logprobs import expected_score

        value = reasoned_value(sample, scale) if reasoning else score_value(sample, scale)
        es = reasoned_expectation(sample, scale) if reasoning else expected_score(sample, scale)
        return value, es if es is not None and es.value is not None else None

    def n_valid(self, parsed) -> int:
        return int(any(e is not None for _, e in parsed))

    def record(self, parsed, spec: ScoringSpec, low: int, base: dict) -> ScoreRecord:
        es = next((e for _, e in parsed if e is not None), None)
        if es is not None:
            return ScoreRecord(score=float(es.value), n_requested=1, n_valid=1, valid_mass=es.valid_mass,
                               distribution={str(k): v for k, v in es.distribution.items()}, **base)
        valid = [v for v, _ in parsed if v is not None]
        policy = spec.invalid.logprobs_missing  # what an answer without logprobs is worth
        if valid and policy == "parsed":  # the answer parsed but no usable logprobs at its position: say so
            return ScoreRecord(score=float(valid[0]), n_requested=1, n_valid=1,
                               fallback="parsed_value_without_logprobs", **base)
        if valid and policy == "min":
            return ScoreRecord(score=float(low), n_requested=1, n_valid=0, n_defaulted=1,
                               fallback=f"no logprobs: scored {low}", **base)
        why = "no logprobs" if valid else "no valid answer"  # (redraw: an answer without logprobs is invalid)
        if spec.invalid.fallback == "min":
            return ScoreRecord(score=float(low), n_requested=1, n_valid=0, n_defaulted=1,
                               fallback=f"{why}: scored {low}", **base)
        return ScoreRecord(score=math.nan, n_requested=1, n_valid=0, fallback=why.replace(" ", "_"), **base)

    def describe(self, spec: ScoringSpec) -> str:
        return f"estimator: {spec.estimator} (top {spec.top_logprobs} logprobs)"


ESTIMATORS: dict[str, type[Estimator]] = {c.name: c for c in (SamplingEstimator, LogprobsEstimator)}


def count_answers(client, tag: str, rec: ScoreRecord, rejected: int) -> None:
    """What one score record says of the LLM's answers, into the client's usage (``llm_usage.json``, the
    ``llm_*`` metrics and the summary line count them with the adapters' answers): ``rejected`` draws were not a
    valid answer, ``n_retried`` extra draws, ``n_requested - n_valid`` samples left without a valid answer,
    ``n_defaulted`` of them scored as the lowest, an answer scored without its logprobs."""
    usage = getattr(client, "usage", None)
    if usage is None or not hasattr(usage, "note_scores") or rec.fallback == "dry_run":
        return
    usage.note_scores(tag, rejected=rejected, redraws=rec.n_retried, invalid=rec.n_requested - rec.n_valid,
                      defaulted=rec.n_defaulted,
                      logprob_fallbacks=int(rec.fallback is not None and "logprobs" in rec.fallback))


def score(client, planned: Sequence[Planned], spec: ScoringSpec, desc: str = "scoring") -> list[ScoreRecord]:
    """Score every planned unit × instruction (``score_stream``, collected in a list)."""
    out: list[ScoreRecord] = []
    score_stream(client, planned, spec, out.append, desc, len(planned))
    return out


def score_stream(client, planned: Iterable[Planned], spec: ScoringSpec, emit: Callable[[ScoreRecord], None],
                 desc: str = "scoring", total: int | None = None) -> None:
    """Score every planned unit × instruction; each record goes to ``emit`` in the order planned, as soon as it
    and every earlier one are done, so memory holds what is in flight, not the run (``planned`` may be a
    generator). An invalid draw is replaced by a new one (fresh sample indices, so a rerun is served from the
    cache) until each has its samples or ``spec.invalid.attempts`` is spent. Identical requests (two identical
    particles of one turn) are sent once and share their samples. A unit whose samples are all in the cache is
    scored without a task. Stops at the first request that fails for good: a refused one at once, otherwise
    after the requests in flight have finished (they stay cached)."""
    client.run_async(_score_stream(client, planned, spec, emit, desc, total))


async def _score_stream(client, planned: Iterable[Planned], spec: ScoringSpec, emit: Callable[[ScoreRecord], None],
                        desc: str, total: int | None) -> None:
    import asyncio
    import itertools
    from collections import deque

    from face.llm import BudgetExceeded, LLMRequestRefused
    from face.llm.client import Progress

    window = max(64, 4 * int(client.cfg.concurrency))
    bar = Progress(total or 0, desc, enabled=client.cfg.progress, usage=client.usage)
    queue: deque = deque()  # (planned, (samples, parsed) or the task drawing them), in the order planned
    shared: dict = {}  # request -> its task while in flight (identical requests wait for the same one)
    memo: dict = {}  # (text, finish reason, scale) -> parsed value: replies repeat (a short or a replayed one)

    def parse_all(p: Planned, samples) -> list:
        if not spec.scorer.memo_parse:
            return [_sample_value(p, s, spec) for s in samples]
        out, scale = [], p.unit.aspect.scale
        for s in samples:
            key = (s.text, s.finish_reason, s.dry_run, scale)
            v = memo.get(key)
            if v is None:
                if len(memo) > 100_000:
                    memo.clear()
                v = memo[key] = _sample_value(p, s, spec)
            out.append(v)
        return out

    def complete(parsed) -> bool:
        return spec.samples - _n_valid(parsed, spec) <= 0

    async def draw(p: Planned) -> tuple[list, list]:
        want = spec.samples
        for _ in range(spec.invalid.attempts):
            req = replace(p.request, n=want)
            res = await client.chat(req)  # the cache layer serves what it holds (the stream looked first)
            samples = res.samples
            if any(getattr(s, "dry_run", False) for s in samples):
                return samples, [(None, None)] * len(samples)
            parsed = parse_all(p, samples)
            if complete(parsed):
                break
            want += spec.samples - _n_valid(parsed, spec)
        return samples, parsed

    looked_up = client.cached_stream(planned, lambda p: p.request)  # the cache read ahead, in a thread

    def fill() -> None:
        for p, hit in itertools.islice(looked_up, window - len(queue)):
            got = shared.get(p.request)
            if got is None:
                parsed = None if hit is None else parse_all(p, hit.samples)
                if hit is not None and complete(parsed):
                    got = (hit.samples, parsed)
                else:
                    got = shared[p.request] = asyncio.ensure_future(draw(p))
                    got.add_done_callback(lambda _, key=p.request: shared.pop(key, None))
            queue.append((p, got))

    try:
        fill()
        while queue:
            p, got = queue.popleft()
            if isinstance(got, asyncio.Future):
                try:
                    got = await got
                except LLMRequestRefused:
                    raise
                except Exception as e:  # let what is in flight finish (it is cached), then stop
                    rest = [g for _, g in queue if isinstance(g, asyncio.Future)]
                    settled = await asyncio.gather(*rest, return_exceptions=True)
                    done = total - len(queue) - 1 if total else None
                    budget = [x for x in [e, *settled] if isinstance(x, BudgetExceeded)]
                    if budget:
                        raise BudgetExceeded(f"{budget[0]} Stage {desc!r}: {done} of {total} scores completed.") \
                            from budget[0]
                    raise
            samples, parsed = got
            by_id = {id(s): v for s, v in zip(samples, parsed)}
            rec = record_from_samples(p, samples, spec, lambda s, by_id=by_id: by_id[id(s)])
            count_answers(client, p.request.tag, rec, len(samples) - _n_valid(parsed, spec))
            emit(rec)
            bar.update(sum(bool(getattr(s, "cached", False)) for s in samples), failed=False)
            if len(queue) <= window // 2:
                fill()
    finally:
        for _, got in queue:
            if isinstance(got, asyncio.Future):
                got.cancel()
        looked_up.close()
        bar.close()
