"""Transport: one HTTP request to an OpenAI-compatible endpoint, with retries.

`OpenAITransport.chat(req)` sends exactly one `/chat/completions` request for the samples of
`req` (n = req.n, seed = base seed + req.first_sample) through the openai SDK (`AsyncOpenAI`,
one per event loop; the SDK's own retries are off) and retries it with tenacity on 408 / 409 /
429 / 5xx / timeouts / connection errors: exponential backoff with jitter, at least the
server's Retry-After. A reply that is not a chat completion (an HTTP 200 whose body is cut or not
JSON, an HTML page from a proxy, no `choices`) counts as transient and is retried the same way.
Splitting n, caching and budgets are the business of the layers above.
"""
from __future__ import annotations

import asyncio
import contextlib
import email.utils
import json
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt, wait_random_exponential

from .base import ChatRequest, ChatResult, Completion, LLMCallError, LLMRequestRefused, TokenLogprob, request_params

log = logging.getLogger("face.llm")

RETRY_STATUS = frozenset({408, 409, 429})
THROTTLE_STATUS = frozenset({429, 503})  # "too many requests": the adaptive limit backs off
MAX_RETRY_AFTER_S = 120.0


def parse_retry_after(headers: Any) -> float | None:
    """Seconds to wait from `retry-after-ms` / `retry-after` (seconds or an HTTP date), if any."""
    ms, ra = (None, None) if headers is None else (headers.get("retry-after-ms"), headers.get("retry-after"))
    with contextlib.suppress(ValueError):
        if ms:
            return float(ms) / 1000
    if ra:
        with contextlib.suppress(ValueError):
            return max(0.0, float(ra))
        with contextlib.suppress(TypeError, ValueError):
            return max(0.0, email.utils.parsedate_to_datetime(ra).timestamp() - time.time())
    return None


class BadResponse(Exception):
    """A 2xx reply that is not a chat completion (cut or non-JSON body, HTML page, no choices): transient."""


def decode_completion(raw: bytes) -> dict:
    """The completion object of a raw reply body, or BadResponse."""
    try:
        data = json.loads(raw)
    except (ValueError, TypeError) as exc:
        raise BadResponse(f"reply is not JSON: {bytes(raw[:120])!r}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("choices"), list) or not data["choices"]:
        raise BadResponse(f"reply is not a chat completion: {str(data)[:120]!r}")
    if not all(isinstance(c, dict) for c in data["choices"]):
        raise BadResponse("reply has malformed choices")
    return data


def retryable(exc: BaseException) -> bool:
    import openai

    if isinstance(exc, (BadResponse, openai.APITimeoutError, openai.APIConnectionError, asyncio.TimeoutError)):
        return True
    return isinstance(exc, openai.APIStatusError) and (exc.status_code in RETRY_STATUS or exc.status_code >= 500)


def parse_logprobs(lp: Any) -> list[TokenLogprob] | None:
    if not lp or not lp.get("content"):
        return None
    return [TokenLogprob(t["token"], float(t["logprob"]),
                         [(x["token"], float(x["logprob"])) for x in (t.get("top_logprobs") or [])])
            for t in lp["content"]]


def _http_client(cfg: Any) -> Any:
    """The SDK's HTTP client: `llm.http_client=aiohttp` (default) is the SDK's own aiohttp transport
    (`openai.DefaultAioHttpClient`: far less CPU per request at high concurrency than httpx), `httpx` the
    SDK's httpx default."""
    import openai

    sdk_client = openai.DefaultAioHttpClient if cfg.http_client == "aiohttp" else openai.DefaultAsyncHttpxClient
    return sdk_client(timeout=cfg.timeout_s)


class OpenAITransport:
    """One HTTP request per `chat()`; with several base URLs (replicas of one model), each request --
    and each retry -- goes to the replica with the fewest requests in flight. ``http_client(cfg)``, when given,
    makes the SDK's HTTP client instead of ``llm.http_client``'s (a server that answers in this process without a
    socket hands its own: face.testing.scripted.InProcessServer); everything above the wire stays the same."""

    def __init__(self, cfg: Any, base_url: str | Sequence[str], model: str,
                 http_client: Callable[[Any], Any] | None = None):
        self.cfg = cfg
        self.http_client = http_client or _http_client
        self.base_urls = [base_url] if isinstance(base_url, str) else list(base_url)  # (the client checks: not none)
        self.base_url = self.base_urls[0]
        self.model = model
        self._apis: dict[tuple[int, str], Any] = {}  # openai.AsyncOpenAI per (event loop, URL): bound to one loop
        self.in_flight = dict.fromkeys(self.base_urls, 0)
        self._rr = 0
        self.on_throttle: Callable[[float | None], None] | None = None  # set by BudgetLM (adaptive concurrency)

    def _api(self, url: str | None = None) -> Any:
        import openai  # lazy: `import face.llm` stays cheap for code that only prices runs

        url = url or self.base_url
        key = (id(asyncio.get_running_loop()), url)
        api = self._apis.get(key)
        if api is None:
            api = self._apis[key] = openai.AsyncOpenAI(base_url=url, api_key=self.cfg.api_key(),
                                                       max_retries=0, timeout=self.cfg.timeout_s,
                                                       http_client=self.http_client(self.cfg))
        return api

    def _pick(self, avoid: str | None = None) -> str:
        urls = self.base_urls
        self._rr += 1
        order = urls[self._rr % len(urls):] + urls[:self._rr % len(urls)]  # ties: round robin
        cands = [u for u in order if u != avoid] or order
        return min(cands, key=self.in_flight.__getitem__)

    async def aclose(self) -> None:
        """Close the SDK clients of the running loop (clients of other loops die with their loop)."""
        loop = id(asyncio.get_running_loop())
        for key in [k for k in self._apis if k[0] == loop]:
            await self._apis.pop(key).close()

    def body(self, req: ChatRequest) -> dict[str, Any]:
        """The request's chat-completion body: its sampling parameters, without the ones left unset."""
        p = request_params(self.cfg, req)
        rf = p["response_format"]  # the canonical json_schema one, as the endpoint expects it (llm.json_schema_format)
        if self.cfg.json_schema_format == "json_object_schema" and rf is not None and rf.get("type") == "json_schema":
            rf = {"type": "json_object", "schema": (rf.get("json_schema") or {}).get("schema", {})}
        body = {"model": self.model, "messages": req.message_dicts(), "n": req.n, "temperature": p["temperature"],
                "max_tokens": p["max_tokens"], "top_p": p["top_p"],
                "seed": None if self.cfg.seed is None else self.cfg.seed + req.first_sample, "response_format": rf,
                "logprobs": p["logprobs"] or None, "top_logprobs": p["top_logprobs"] or None}
        return {k: v for k, v in body.items() if v is not None}

    def _wait(self, state: RetryCallState) -> float:
        cfg = self.cfg
        delay = wait_random_exponential(multiplier=cfg.backoff_base_s, max=cfg.backoff_max_s)(state)
        exc = state.outcome.exception() if state.outcome else None
        after = parse_retry_after(getattr(getattr(exc, "response", None), "headers", None))
        if after is not None:
            delay = min(max(delay, after), max(cfg.backoff_max_s, MAX_RETRY_AFTER_S))
        if self.on_throttle is not None and getattr(exc, "status_code", None) in THROTTLE_STATUS:
            self.on_throttle(after)
        log.info("retry %d/%d in %.2fs after %s", state.attempt_number, cfg.max_retries, delay, type(exc).__name__)
        return delay

    async def chat(self, req: ChatRequest) -> ChatResult:
        """One HTTP request for the samples of `req` (retried); the result's `retries` counts the retries."""
        t0 = time.perf_counter()
        data, retries = await self.post(self.body(req), req.tag)
        return completion_result(req, data, retries=retries, latency_s=time.perf_counter() - t0)

    async def post(self, body: dict[str, Any], tag: str) -> tuple[dict, int]:
        """POST one chat-completion body with the retry policy (every request goes through here, the endpoint
        probe's too): (the decoded completion, retries spent); LLMRequestRefused for a 4xx no retry can fix,
        LLMCallError once the retries are spent."""
        attempts = 0
        url = None
        try:
            async for attempt in AsyncRetrying(retry=retry_if_exception(retryable), wait=self._wait,
                                               stop=stop_after_attempt(self.cfg.max_retries + 1), reraise=True):
                with attempt:
                    attempts = attempt.retry_state.attempt_number
                    url = self._pick(avoid=url)  # a retry prefers another replica
                    self.in_flight[url] += 1
                    try:
                        # the SDK's public low-level post (its auth, headers, timeouts, error types) without
                        # the per-call typed-params transform of chat.completions.create
                        raw = await self._api(url).post("/chat/completions", cast_to=bytes, body=body)
                    finally:
                        self.in_flight[url] -= 1
                    data = decode_completion(raw)
        except Exception as exc:
            refused = refusal(exc, tag)
            if refused is not None:
                raise refused from exc
            msg = str(exc) if len(str(exc)) <= 300 else str(exc)[:300] + "..."
            raise LLMCallError(f"LLM request failed (tag={tag!r}, attempts={attempts}): "
                               f"{type(exc).__name__}: {msg}", retries=max(0, attempts - 1)) from exc
        return data, attempts - 1


def refusal(exc: BaseException, tag: str) -> LLMRequestRefused | None:
    """An HTTP 4xx that no retry can fix, as LLMRequestRefused with the endpoint's own message (else None)."""
    import openai

    if not isinstance(exc, openai.APIStatusError) or retryable(exc) or not 400 <= exc.status_code < 500:
        return None
    body = exc.body if isinstance(exc.body, dict) else {}
    err = body.get("error", body) if isinstance(body.get("error", body), dict) else {}
    reason = " ".join(str(err.get("message") or exc.message or exc).split())
    code = err.get("code")
    return LLMRequestRefused(f"the LLM endpoint refused a request (HTTP {exc.status_code}"
                             f"{', ' + str(code) if code else ''}; tag {tag!r}): {reason[:600]}", exc.status_code)


def completion_result(req: ChatRequest, data: dict, retries: int = 0, latency_s: float = 0.0) -> ChatResult:
    """The samples of `req` from a decoded chat-completion body (an HTTP answer or a Batch API output line)."""
    choices = sorted(data.get("choices") or [], key=lambda c: c.get("index", 0))
    if len(choices) != req.n:
        raise LLMCallError(f"endpoint returned {len(choices)} choices for n={req.n}; "
                           "set llm.n_per_request=1 for this backend", retries=retries)
    samples = [Completion(text=(ch.get("message") or {}).get("content") or "",
                          finish_reason=ch.get("finish_reason") or "",
                          logprobs=parse_logprobs(ch.get("logprobs")), sample_index=i)
               for i, ch in zip(req.indices, choices)]
    return ChatResult(request=req, samples=samples, http_requests=1, retries=retries, usage=data.get("usage"),
                      latency_s=latency_s)
