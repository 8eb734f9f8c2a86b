"""Records of the LLM layer and the `LM` protocol every layer and caller is typed against.

A *request* asks for samples `first_sample .. first_sample + n - 1` of one prompt; a *result*
carries them plus what it took to get them (cache hits, HTTP requests, retries, tokens, cost).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, Self, runtime_checkable

from face.secrets import redact

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

    def __init__(self, message: str, status: int, code: str | None = None):
        super().__init__(message)
        self.status, self.code = status, code


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
    # set only for requests with an `adapter` (a validator): the parsed answer, or why there is none
    value: Any = None  # the adapter's model instance when the answer is valid
    error: str | None = None  # the reason the answer is invalid (after the retries of llm.answer_retries)
    attempts: int = 1  # draws it took (1 + answer retries)
    rejected: list[str] = field(default_factory=list)  # one line per rejected draw ("sample 7: truncated ...")

    @property
    def valid(self) -> bool:
        """A usable answer: not a dry-run placeholder and not marked invalid."""
        return not self.dry_run and self.error is None


def _normalise_messages(messages: Any) -> Messages:
    if isinstance(messages, str):
        return (("user", messages),)
    out = []
    for m in messages:
        if isinstance(m, dict):
            out.append((str(m["role"]), str(m["content"])))
        else:
            role, content = m
            out.append((str(role), str(content)))
    return tuple(out)


def _freeze(obj: Any) -> Any:
    """Hashable, order-preserving view of a JSON-like value (for response_format)."""
    if isinstance(obj, dict):
        return tuple((k, _freeze(v)) for k, v in obj.items())
    if isinstance(obj, list):
        return tuple(_freeze(v) for v in obj)
    return obj


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
    # optional validator (a face.llm.adapters.JsonAdapter, or anything with `parse(Completion) -> value | str`):
    # every sample is parsed, invalid ones are re-drawn (llm.answer_retries) and never cached as valid.
    # Not part of equality, hash or the cache key.
    adapter: Any = field(default=None, hash=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "messages", _normalise_messages(self.messages))
        if self.n < 1:
            raise ValueError("ChatRequest.n must be >= 1")
        if self.top_logprobs and not self.logprobs:
            object.__setattr__(self, "logprobs", True)

    # response_format is a dict (unhashable): compare/hash through a frozen view
    def _key(self) -> tuple:
        return (self.messages, self.n, self.temperature, self.max_tokens, self.top_p,
                _freeze(self.response_format), self.logprobs, self.top_logprobs, self.tag, self.first_sample)

    def __hash__(self) -> int:
        return hash(self._key())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ChatRequest) and self._key() == other._key()

    @property
    def indices(self) -> range:
        return range(self.first_sample, self.first_sample + self.n)

    def message_dicts(self) -> list[dict[str, str]]:
        return [{"role": r, "content": c} for r, c in self.messages]


@dataclass
class ChatResult:
    request: ChatRequest
    samples: list[Completion]
    cached_samples: int = 0
    http_requests: int = 0
    retries: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    latency_s: float = 0.0
    error: str | None = None  # set (and samples empty) only with run_batch(on_error="return")
    answer_retries: int = 0  # extra draws made to replace invalid answers (requests with an adapter)
    rejected_answers: int = 0  # draws that failed the adapter's validation (incl. ones later replaced)

    @property
    def invalid_samples(self) -> int:
        """Samples still invalid after the answer retries (requests with an adapter)."""
        return sum(s.error is not None for s in self.samples)

    @property
    def values(self) -> list[Any]:
        """The parsed answers (None where a sample is invalid); requests with an adapter."""
        return [s.value for s in self.samples]

    @property
    def ok(self) -> bool:
        return self.error is None

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
class Chat(Protocol):
    """One layer of the stack: all samples of one request."""

    async def chat(self, req: ChatRequest) -> ChatResult: ...


@runtime_checkable
class LM(Chat, Protocol):
    """What scoring, decomposition and every later stage use."""

    cfg: Any  # LLMConfig: capabilities (supports_json_schema, supports_logprobs, ...) and settings
    usage: Any  # Usage: accounting, budgets, artifacts

    async def chat_many(self, requests: Sequence[ChatRequest], desc: str = "LLM",
                        on_error: str = "raise") -> list[ChatResult]: ...

    def run_batch(self, requests: Sequence[ChatRequest], desc: str = "LLM",
                  on_error: str = "raise") -> list[ChatResult]: ...

    def run_async(self, coro: Any) -> Any: ...

    def __enter__(self) -> Self: ...

    def __exit__(self, *exc: object) -> None: ...


@runtime_checkable
class Server(Protocol):
    """A supervised model server started beside the client (built from `llm.server`)."""

    base_url: str | None  # set by start()
    model: str

    def start(self) -> Any: ...

    def stop(self) -> None: ...


def validate(sample: Completion, adapter: Any) -> Completion:
    """Parse `sample` with `adapter` once (sets `value` or `error`); dry-run placeholders stay as they are."""
    if adapter is None or sample.dry_run or sample.value is not None or sample.error is not None:
        return sample
    parsed = adapter.parse(sample)
    if isinstance(parsed, str):
        sample.error = parsed
    else:
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
    from .usage import BudgetExceeded

    if errors:
        budget = [e for e in errors if isinstance(e, BudgetExceeded)]
        raise budget[0] if budget else errors[0]


def merge(req: ChatRequest, parts: Sequence[ChatResult], samples: dict[int, Completion]) -> ChatResult:
    """One result for `req` from the results of its sub-requests (+ samples found elsewhere)."""
    for p in parts:
        samples.update((s.sample_index, s) for s in p.samples)
    return ChatResult(request=req, samples=[samples[i] for i in req.indices],
                      cached_samples=sum(s.cached for s in samples.values()),
                      http_requests=sum(p.http_requests for p in parts), retries=sum(p.retries for p in parts),
                      input_tokens=sum(p.input_tokens for p in parts),
                      output_tokens=sum(p.output_tokens for p in parts), cost_usd=sum(p.cost_usd for p in parts))
