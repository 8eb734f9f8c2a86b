"""Typed JSON answers: one adapter per answer type.

An adapter pairs the JSON schema sent with a request with a pydantic model that validates the
reply. `adapter.request(req, native)` asks for the schema natively (a canonical json_schema
`response_format`; the transport converts it to the endpoint's wire format) or, for endpoints
without schema support, appends the schema to the last user message. `adapter.parse(answer)`
extracts the JSON leniently (bare JSON, a ``` fence, JSON among prose) and validates it; it
returns the model instance or the reason the answer is invalid (a str)::

    scores = score_adapter([1, 2, 3])
    req = scores.request(ChatRequest(messages=...), native=client.cfg.supports_json_schema)
    answer = scores.parse(result.samples[0])   # ScoreAnswer(score=2) or "invalid JSON: ..."

The schemas of `score_adapter` and `particles_adapter` are given explicitly: they are part of
the cache keys, so they stay byte-identical to what the project sent before the adapters.
Their validation accepts exactly what the project accepted before (tests compare).
"""
from __future__ import annotations

import contextlib
import functools
import json
import math
import re
from collections.abc import Sequence
from dataclasses import replace
from typing import Annotated, Any, Generic, Literal, TypeVar

from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator
from pydantic.functional_validators import AfterValidator

from .base import ChatRequest, Completion

T = TypeVar("T", bound=BaseModel)

_FENCE_RE = re.compile(r"```(?:json|JSON)?\s*\n?(.*?)```", re.DOTALL)


def extract_json(text: str) -> Any:
    """Parse JSON from model output: bare JSON, a ``` code fence, or JSON after/among prose.

    Raises ValueError if no JSON value can be found."""
    for candidate in (text, *(m.group(1) for m in _FENCE_RE.finditer(text))):  # the whole text, then each fence
        with contextlib.suppress(ValueError):
            return json.loads(candidate.strip())
    dec = json.JSONDecoder()
    for m in re.finditer(r"[{\[]", text):
        with contextlib.suppress(ValueError):
            return dec.raw_decode(text, m.start())[0]
    raise ValueError(f"no JSON found in model output: {text[:120]!r}")

def last_json_object(text: str) -> tuple[dict, int] | None:
    """The last top-level JSON object in ``text`` that parses, with its start offset (reasoning comes
    before it; an object nested in a larger one is part of that one)."""
    dec = json.JSONDecoder()
    found, i = None, text.find("{")
    while i != -1:
        try:
            obj, end = dec.raw_decode(text, i)
        except ValueError:
            i = text.find("{", i + 1)
            continue
        if isinstance(obj, dict):
            found = (obj, i)
        i = text.find("{", end)
    return found


class JsonAdapter(Generic[T]):
    """Schema for the request + validation of the reply for one answer type (a pydantic model)."""

    def __init__(self, model: type[T], name: str = "answer", schema: dict | None = None):
        self.model = model
        self.name = name
        self.schema = schema if schema is not None else model.model_json_schema()

    def request(self, req: ChatRequest, native: bool, validate: bool = False) -> ChatRequest:
        """`req` asking for this answer type: natively, or with the schema in the prompt. With
        `validate`, the request also carries this adapter: the client returns parsed samples
        (`Completion.value`), re-draws invalid ones and never caches them as valid."""
        if validate:
            req = replace(req, adapter=self)
        if native:
            return replace(req, response_format={"type": "json_schema",
                                                 "json_schema": {"name": self.name, "schema": self.schema}})
        msgs = list(req.messages)
        idx = max((i for i, (r, _) in enumerate(msgs) if r == "user"), default=len(msgs) - 1)
        role, content = msgs[idx]
        msgs[idx] = (role, content.rstrip() + "\n\nRespond with only a JSON value that conforms to this JSON schema "
                     "(no other text):\n" + json.dumps(self.schema, separators=(",", ":")))
        return replace(req, messages=tuple(msgs), response_format=None)

    def parse(self, answer: Completion | str) -> T | str:
        """The validated answer, or why it is invalid (a cut-off answer is invalid)."""
        if isinstance(answer, Completion):
            if answer.dry_run:
                return "dry_run placeholder (no content)"
            if answer.finish_reason == "length":
                return "truncated (finish_reason=length)"
            answer = answer.text
        try:
            obj = extract_json(answer)
        except ValueError as e:
            return f"invalid JSON: {e}"
        return self.validate(obj)

    def validate(self, obj: Any) -> T | str:
        """An already decoded JSON value against the model: the instance, or why it is invalid."""
        try:
            return self.model.model_validate(obj)
        except ValidationError as e:
            return "schema: " + "; ".join(f"{'.'.join(map(str, err['loc'])) or '$'}: {err['msg']}"
                                          for err in e.errors()[:5])


# ---------------------------------------------------------------- scores on a discrete scale
def _score_value(v: Any) -> Any:
    # a number that equals an integer (2 or 2.0); never a bool or a string
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v != int(v):
        raise ValueError(f"score must be an integer, got {v!r}")
    return int(v)


def _bare_score(v: Any) -> Any:
    return v if isinstance(v, dict) else {"score": v}  # a bare number counts as the score


def score_adapter(scale: Sequence[int]) -> JsonAdapter:
    """Adapter for `{"score": s}` with s one of `scale` (an enum: llama.cpp ignores numeric bounds).

    Accepts a bare number too, and ignores other keys, as the project always has. One adapter per
    scale (memoised: building a pydantic model costs ~0.5 ms, and scoring asks once per sample)."""
    return _score_adapter(tuple(int(s) for s in scale))


@functools.lru_cache(maxsize=64)
def _score_adapter(values: tuple[int, ...]) -> JsonAdapter:
    class ScoreAnswer(BaseModel):  # other keys ignored (pydantic's default)
        score: Literal[values]  # type: ignore[valid-type]
        _value = field_validator("score", mode="before")(_score_value)
        _bare = model_validator(mode="before")(_bare_score)

    schema = {"type": "object", "properties": {"score": {"type": "integer", "enum": list(values)}},
              "required": ["score"], "additionalProperties": False}
    return JsonAdapter(ScoreAnswer, name="score", schema=schema)


# ---------------------------------------------------------------- conversation particles
def particles_adapter(dialogue_acts: Sequence[str], max_mention_words: int = 12) -> JsonAdapter:
    """Adapter for `{"particles": [{"dialogue_act", "mention", "user_feedback"}, ...]}`.

    The schema is the one sent since the first release (it asks for 1 to 12 particles). Validation is the
    authors': a list of particles, possibly empty (a turn with nothing to judge); a known dialogue act; a
    mention of 1..max_mention_words words (stripped); feedback stripped, None when missing or not a string;
    other keys ignored."""
    acts = tuple(dialogue_acts)

    def words(v: str) -> str:
        if not 1 <= len(v.split()) <= max_mention_words:
            raise ValueError(f"mention must have 1-{max_mention_words} words")
        return v.strip()

    class Particle(BaseModel):  # other keys ignored (pydantic's default), here and in the answer
        dialogue_act: Literal[acts]  # type: ignore[valid-type]
        mention: Annotated[str, Field(strict=True), AfterValidator(words)]
        user_feedback: Annotated[Any, AfterValidator(lambda v: v.strip() if isinstance(v, str) else None)] = None

    class ParticlesAnswer(BaseModel):
        particles: list[Particle]

    particle = {"type": "object",
                "properties": {"dialogue_act": {"type": "string", "enum": list(acts)},
                               "mention": {"type": "string", "minLength": 1, "maxLength": 120},
                               "user_feedback": {"type": "string", "maxLength": 400}},
                "required": ["dialogue_act", "mention", "user_feedback"], "additionalProperties": False}
    schema = {"type": "object",
              "properties": {"particles": {"type": "array", "minItems": 1, "maxItems": 12, "items": particle}},
              "required": ["particles"], "additionalProperties": False}
    return JsonAdapter(ParticlesAnswer, name="particles", schema=schema)
