"""Records of the LLM layer and the `LM` protocol every layer and caller is typed against.

A *request* asks for samples `first_sample .. first_sample + n - 1` of one prompt; a *result*
carries them plus what it took to get them (cache hits, HTTP requests, retries, tokens, cost).
A request with an `adapter` (its answer type) asks for n *valid* answers and may spend the draws its
`draws` policy allows (face/llm/validating.py: the one draw-until-valid loop); its result carries every draw.
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from pydantic import Field

from face.secrets import redact
from face.settings import settings

from .usage import BudgetExceeded

Messages = tuple[tuple[str, str], ...]


class LLMCallError(RuntimeError):
    """A request failed after all retries (or with a non-retryable error). The message is redacted
    (face.secrets): an endpoint may quote the key it got ("Incorrect API key provided: sk-..."), and the message
    goes to the stop line, run.log, llm_usage.json and MLflow's stop_reason."""

    def __init__(self, message: str, retries: int = 0):
        super().__init__(redact(message))
        self.retries = retries  # retries spent before giving up (for accounting)


class LLMRequestRefused(LLMCallError):
    """The endpoint refused a request as it is (an HTTP 4xx other than 408 / 409 / 429): not retried, nothing
    cached, never an invalid answer; the run stops. ``str()`` is one line with the endpoint's own reason."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status  # the HTTP status (the endpoint probe tells a missing feature from a bad key by it)


@settings("draws", frozen=True)
class Draws:
    """How many draws a request with an answer type may spend on its n valid answers: round 1 draws samples
    first_sample .. first_sample + n - 1, each later round the next fresh indices, one per answer still missing,
    for at most ``rounds`` rounds and ``max_extra`` draws beyond the first n (None: no cap but the rounds). The one
    draw policy: ``method.scoring.draws``, ``method.particles.draws`` and a baseline's ``method.draws`` are this."""

    rounds: int = Field(ge=1)
    max_extra: int | None = Field(ge=0)

    def room(self, missing: int, extra: int) -> int:
        """Draws the next round may make: one per missing answer, within ``max_extra`` (``extra`` spent so far)."""
        return missing if self.max_extra is None else min(missing, self.max_extra - extra)


# a request with an answer type and no policy of its own: 4 draws per answer at most
DEFAULT_DRAWS = Draws(rounds=4, max_extra=None)


@dataclass(frozen=True)
class Provisional:
    """What an answer type's ``parse`` returns for an answer usable only when no draw is valid (scoring's
    ``logprobs_missing=parsed``: a parsed score without logprobs): it is redrawn like an invalid one, and kept
    for an answer still missing after the last draw."""

    value: Any
    reason: str


@dataclass(frozen=True)
class TokenLogprob:
    token: str
    logprob: float
    top: list[tuple[str, float]]


@dataclass
class Completion:
    text: str
    finish_reason: str
    logprobs: list[TokenLogprob] | None = None
    cached: bool = False
    sample_index: int = 0
    dry_run: bool = False  # placeholder from a dry run: carries NO content
    # set only for requests with an `adapter` (an answer type): the parsed answer, or why there is none
    value: Any = None  # the adapter's value when the answer is valid (or provisional: `error` set too)
    error: str | None = None  # the reason the answer is invalid

    @property
    def valid(self) -> bool:
        """A usable answer: not a dry-run placeholder and not marked invalid."""
        return not self.dry_run and self.error is None


@dataclass(frozen=True)
class ChatRequest:
    messages: Messages
    n: int = 1
    temperature: float | None = None  # None: the config's value
    max_tokens: int | None = None
    top_p: float | None = None
    # canonical form {"type": "json_schema", "json_schema": {"name", "schema"}}; the transport
    # converts it to the endpoint's wire format
    response_format: dict | None = field(default=None, hash=False, compare=False)
    logprobs: bool = False
    top_logprobs: int = 0
    tag: str = ""
    first_sample: int = 0  # samples are indices first_sample .. first_sample+n-1
    # optional answer type (a face.llm.adapters.JsonAdapter, or anything with `parse(Completion) -> value | str |
    # Provisional`): every draw is parsed, invalid ones are re-drawn within `draws` and never cached as valid.
    # Neither is part of equality, hash or the cache key.
    adapter: Any = field(default=None, hash=False, compare=False, repr=False)
    draws: Draws | None = field(default=None, hash=False, compare=False, repr=False)  # None: DEFAULT_DRAWS
    # response_format is a dict (unhashable): compared and hashed through its JSON text (order-preserving)
    format_key: str = field(default="", init=False, repr=False)

    def __post_init__(self) -> None:
        # messages as (role, content) pairs, from a string (one user message), pairs or {"role", "content"} dicts
        messages = [("user", self.messages)] if isinstance(self.messages, str) else self.messages
        pairs = ((m["role"], m["content"]) if isinstance(m, dict) else m for m in messages)
        object.__setattr__(self, "messages", tuple((str(role), str(content)) for role, content in pairs))
        if self.n < 1:
            raise ValueError("ChatRequest.n must be >= 1")
        if self.top_logprobs and not self.logprobs:
            object.__setattr__(self, "logprobs", True)
        object.__setattr__(self, "format_key", json.dumps(self.response_format))

    @property
    def indices(self) -> range:
        return range(self.first_sample, self.first_sample + self.n)

    def message_dicts(self) -> list[dict[str, str]]:
        return [{"role": r, "content": c} for r, c in self.messages]


@dataclass
class ChatResult:
    request: ChatRequest
    samples: list[Completion]  # with an adapter: every draw, in index order (the n first, then the redraws)
    cached_samples: int = 0
    http_requests: int = 0
    http_samples: int = 0  # samples drawn over HTTP (the n of the HTTP requests sent)
    retries: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    latency_s: float = 0.0
    usage: Any = None  # the endpoint's ``usage`` as it came (read by the budget: face.llm.usage.reported_tokens)
    error: str | None = None  # set (and samples empty) only with run_batch(on_error="return")
    answer_retries: int = 0  # extra draws made to replace invalid answers (requests with an adapter)
    rejected_answers: int = 0  # draws that failed the adapter's validation (incl. ones later replaced)
    counted: bool = field(default=False, repr=False, compare=False)  # a caller counted what it made of it

    @property
    def answers(self) -> list[Completion]:
        """The valid answers, in draw order (at most n; requests with an adapter)."""
        return [s for s in self.samples if s.valid][: self.request.n]

    @property
    def invalid_samples(self) -> int:
        """Answers still missing after the last draw (requests with an adapter; dry-run placeholders are none)."""
        if self.request.adapter is None:
            return 0
        return max(0, self.request.n - sum(s.error is None for s in self.samples))

    @property
    def text(self) -> str:
        return self.samples[0].text

    @property
    def texts(self) -> list[str]:
        return [s.text for s in self.samples]


def request_params(cfg: Any, req: ChatRequest) -> dict[str, Any]:
    """The sampling parameters of a request after the config's defaults (what a sample depends on)."""
    if req.logprobs and not cfg.supports_logprobs:
        raise ValueError(f"backend {cfg.backend!r} (model {cfg.model}) does not support logprobs "
                         "(llm.supports_logprobs=false); score by sampling instead")
    return {
        "temperature": cfg.temperature if req.temperature is None else req.temperature,
        "top_p": cfg.top_p if req.top_p is None else req.top_p,
        "max_tokens": cfg.max_tokens if req.max_tokens is None else req.max_tokens,
        "response_format": req.response_format if cfg.supports_json_schema else None,
        "logprobs": bool(req.logprobs),
        "top_logprobs": int(req.top_logprobs) if req.logprobs else 0,
    }


@runtime_checkable
class LM(Protocol):
    """What scoring, decomposition and every later stage use. Each layer of the stack has its ``chat`` (all samples
    of one request)."""

    cfg: Any  # LLMConfig: capabilities (supports_json_schema, supports_logprobs, ...) and settings
    usage: Any  # Usage: accounting, budgets, artifacts

    async def chat(self, req: ChatRequest) -> ChatResult: ...

    def run_batch(self, requests: Sequence[ChatRequest], desc: str = "LLM",
                  on_error: str = "raise") -> list[ChatResult]: ...


def validate(sample: Completion, adapter: Any) -> Completion:
    """Parse `sample` with `adapter` once (sets `value`, `error`, or both for a provisional answer); dry-run
    placeholders stay as they are. A sample stored marked invalid (`error` set) stays invalid; it is parsed only
    by an answer type that keeps provisional answers (``keeps_provisional``), for its provisional value."""
    if adapter is None or sample.dry_run or sample.value is not None:
        return sample
    if sample.error is not None and not getattr(adapter, "keeps_provisional", False):
        return sample
    parsed = adapter.parse(sample)
    if isinstance(parsed, Provisional):
        sample.value, sample.error = parsed.value, sample.error or parsed.reason
    elif isinstance(parsed, str):
        sample.error = sample.error or parsed
    elif sample.error is None:
        sample.value = parsed
    return sample


def runs(indices: Sequence[int], size: int) -> list[list[int]]:
    """Consecutive runs of sorted sample indices, each at most `size` long (one HTTP request each)."""
    out: list[list[int]] = []
    for i in indices:
        if out and out[-1][-1] + 1 == i and len(out[-1]) < size:
            out[-1].append(i)
        else:
            out.append([i])
    return out


def raise_first(errors: Sequence[BaseException]) -> None:
    """Re-raise a budget stop in preference to other failures (the batch-level message depends on it)."""
    if errors:
        raise next((e for e in errors if isinstance(e, BudgetExceeded)), errors[0])


def merge(req: ChatRequest, parts: Sequence[ChatResult], samples: dict[int, Completion]) -> ChatResult:
    """One result for `req` from the results of its sub-requests (+ samples found elsewhere)."""
    for p in parts:
        samples.update((s.sample_index, s) for s in p.samples)
    summed = ("http_requests", "http_samples", "retries", "input_tokens", "output_tokens", "cost_usd")
    return ChatResult(request=req, samples=[samples[i] for i in req.indices],
                      cached_samples=sum(s.cached for s in samples.values()),
                      **{k: sum(getattr(p, k) for p in parts) for k in summed})
