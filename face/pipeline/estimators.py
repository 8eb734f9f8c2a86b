"""A score from the LLM's answers: the answer readers, the estimators (``sampling``, ``logprobs``, or a class of your
own) and the answer type a scoring request is validated with (``ScoreAnswer``: one per estimator, scale, prompt and
policy; the one draw-until-valid loop of the LLM layer, face/llm/validating.py, redraws what it rejects).

A particle's score under one instruction is the expected score of the LLM's score distribution:
- ``sampling``: n samples (temperature > 0), their mean;
- ``logprobs``: one call, the probability-weighted mean over the valid score tokens at the position of
  the score inside the final JSON answer (renormalised; the valid probability mass is recorded).

Invalid answers: an invalid sample is drawn again within ``method.scoring.draws`` (the authors: 10 rounds); a
sample still invalid then counts as the scale's lowest score (``fallback=min``, the authors' rule) or is left out
(``fallback=drop``: the mean of the valid samples, no score without any). With ``logprobs``, an answer without
logprobs at its score is redrawn the same way; if no draw has them, ``logprobs_missing`` decides: ``parsed`` (its
parsed integer: a provisional answer the loop keeps), ``redraw`` (invalid: ``fallback`` applies) or ``min`` (the
lowest score).
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Sequence

from face.llm import ChatRequest
from face.llm.adapters import last_json_object, score_adapter
from face.llm.base import Provisional
from face.llm.logprobs import expected_score

ScoringSpec = Any  # face.pipeline.scoring.ScoringSpec (the layer above: it names the estimator it uses)


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



def score_value(answer, scale: Sequence[int]) -> int | None:
    """The score of one completion (or text) if it is a valid answer on ``scale``, else None."""
    got = score_adapter(scale).parse(answer)
    return None if isinstance(got, str) else got.score



def reasoned_value(answer, scale: Sequence[int]) -> int | None:
    """The score of a reasoned reply: the last JSON object's ``score``, if valid on ``scale``."""
    if getattr(answer, "finish_reason", "") == "length" or getattr(answer, "dry_run", False):
        return None
    found = last_json_object(getattr(answer, "text", answer))
    if found is None:
        return None
    got = score_adapter(scale).validate(found[0])
    return None if isinstance(got, str) else got.score


def reasoned_expectation(completion, scale: Sequence[int]):
    """The expected score read at the score token of the reply's final JSON object (None if absent)."""
    if not completion.logprobs or completion.finish_reason == "length":
        return None
    found = last_json_object(completion.text)
    if found is None:
        return None
    ends = itertools.accumulate(len(t.token) for t in completion.logprobs)
    start = next((i for i, end in enumerate(ends) if end > found[1]), None)  # the first token reaching into it
    if start is None:
        return None
    tail = completion.logprobs[start:]
    return expected_score(replace(completion, text="".join(t.token for t in tail), logprobs=tail), scale)



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

    def judge(self, parsed: tuple, spec: ScoringSpec) -> tuple | str | Provisional:
        """What the draw-until-valid loop makes of one answer's ``parse``: the answer (valid), why it is not, or a
        ``Provisional`` answer (redrawn, kept when no draw is valid). By default valid as ``n_valid`` says."""
        return parsed if self.n_valid([parsed]) else "not a valid score"

    def keeps_provisional(self, spec: ScoringSpec) -> bool:
        """Whether ``judge`` may answer ``Provisional`` (answers stored marked invalid are then read again)."""
        return False

    def record(self, parsed, spec: ScoringSpec, low: int, base: dict) -> ScoreRecord:
        raise NotImplementedError

    def describe(self, spec: ScoringSpec) -> str:
        return f"estimator: {spec.estimator}"


class SamplingEstimator(Estimator):
    """n answers sampled at the temperature; the score is their mean (``combine``). An answer that is not a valid
    score is redrawn; what is still missing after ``draws`` counts as the scale's lowest (``fallback=min``, the
    authors) or is left out (``drop``)."""

    name: ClassVar[str] = "sampling"
    memo_parse: ClassVar[bool] = True

    def answers(self, spec: ScoringSpec) -> int:
        return spec.n

    def request(self, messages, spec: ScoringSpec, tag: str):
        return ChatRequest(messages=messages, n=spec.n, temperature=spec.temperature, max_tokens=spec.answer_tokens,
                           tag=tag)

    def parse(self, sample, scale, reasoning):
        return (reasoned_value(sample, scale) if reasoning else score_value(sample, scale)), None

    def n_valid(self, parsed) -> int:
        return sum(v is not None for v, _ in parsed)

    def combine(self, values: list[int]) -> float:
        """The score of a unit × instruction from its valid sampled values: their exact sum over their count (=
        numpy's mean, without its cost)."""
        return float(sum(values) / len(values))

    def record(self, parsed, spec: ScoringSpec, low: int, base: dict) -> ScoreRecord:
        valid = [v for v, _ in parsed if v is not None][: spec.n]
        missing = spec.n - len(valid)
        if missing and spec.fallback == "min":
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
        return ChatRequest(messages=messages, n=1, temperature=0.0, max_tokens=spec.answer_tokens, logprobs=True,
                           top_logprobs=spec.top_logprobs, tag=tag)

    def parse(self, sample, scale, reasoning):
        value = reasoned_value(sample, scale) if reasoning else score_value(sample, scale)
        es = reasoned_expectation(sample, scale) if reasoning else expected_score(sample, scale)
        return value, es if es is not None and es.value is not None else None

    def n_valid(self, parsed) -> int:
        return int(any(e is not None for _, e in parsed))

    def judge(self, parsed: tuple, spec: ScoringSpec) -> tuple | str | Provisional:
        value, es = parsed
        if es is not None:
            return parsed
        if value is None:
            return "not a valid score"
        if spec.logprobs_missing == "parsed":
            return Provisional(parsed, "no logprobs at the score")
        return "no logprobs at the score"

    def keeps_provisional(self, spec: ScoringSpec) -> bool:
        return spec.logprobs_missing == "parsed"

    def record(self, parsed, spec: ScoringSpec, low: int, base: dict) -> ScoreRecord:
        es = next((e for _, e in parsed if e is not None), None)
        if es is not None:
            return ScoreRecord(score=float(es.value), n_requested=1, n_valid=1, valid_mass=es.valid_mass,
                               distribution={str(k): v for k, v in es.distribution.items()}, **base)
        valid = [v for v, _ in parsed if v is not None]
        policy = spec.logprobs_missing  # what an answer without logprobs is worth
        if valid and policy == "parsed":  # the answer parsed but no usable logprobs at its position: say so
            return ScoreRecord(score=float(valid[0]), n_requested=1, n_valid=1,
                               fallback="parsed_value_without_logprobs", **base)
        why = "no logprobs" if valid else "no valid answer"  # (redraw: an answer without logprobs is invalid)
        if spec.fallback == "min" or (valid and policy == "min"):
            return ScoreRecord(score=float(low), n_requested=1, n_valid=0, n_defaulted=1,
                               fallback=f"{why}: scored {low}", **base)
        return ScoreRecord(score=math.nan, n_requested=1, n_valid=0, fallback=why.replace(" ", "_"), **base)

    def describe(self, spec: ScoringSpec) -> str:
        return f"estimator: {spec.estimator} (top {spec.top_logprobs} logprobs)"


ESTIMATORS: dict[str, type[Estimator]] = {c.name: c for c in (SamplingEstimator, LogprobsEstimator)}



class ScoreAnswer:
    """The answer type of a scoring request (DSPy style: it builds the request's format and reads the reply): one per
    scoring spec and scale. ``parse`` is what the draw-until-valid loop validates with; ``read`` is the estimator's
    reading of any answer, ``(value, extra)``, remembered by (text, finish reason) where the estimator allows it
    (replies repeat: a short one, or a replayed one)."""

    def __init__(self, spec: ScoringSpec, scale: Sequence[int]):
        self.spec, self.scale, self.scorer = spec, tuple(scale), spec.scorer
        self.keeps_provisional = self.scorer.keeps_provisional(spec)
        self._memo: dict[tuple[str, str], tuple] | None = {} if self.scorer.memo_parse else None

    def read(self, sample: Any) -> tuple:
        if self._memo is None:
            return self.scorer.parse(sample, self.scale, self.spec.reasoning)
        key = (sample.text, sample.finish_reason)
        got = self._memo.get(key)
        if got is None:
            if len(self._memo) > 100_000:
                self._memo.clear()
            got = self._memo[key] = self.scorer.parse(sample, self.scale, self.spec.reasoning)
        return got

    def parse(self, sample: Any) -> tuple | str | Provisional:
        return self.scorer.judge(self.read(sample), self.spec)

    def request(self, req: Any, json_schema: bool) -> Any:
        """``req`` in this answer type's format (a JSON schema where the endpoint takes one and the prompt asks
        for the score alone), validated by it within the spec's draws."""
        if json_schema and not self.spec.reasoning:  # a schema would rule the reasoning out
            req = score_adapter(self.scale).request(req, native=True)
        return replace(req, adapter=self, draws=self.spec.draws)


score_answer = functools.lru_cache(maxsize=256)(ScoreAnswer)  # one answer type per scoring spec and scale
