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
import email.utils
import json
import logging
import time
from typing import Any

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
    wait_random_exponential,
)

from .base import (
    ChatRequest,
    ChatResult,
    Completion,
    LLMCallError,
    TokenLogprob,
    request_params,
)

log = logging.getLogger("face.llm")

RETRY_STATUS = frozenset({408, 409, 429})
MAX_RETRY_AFTER_S = 120.0


def parse_retry_after(headers: Any) -> float | None:
    """Seconds to wait from `retry-after-ms` / `retry-after` (seconds or an HTTP date), if any."""
    if headers is None:
        return None
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return float(ms) / 1000
        except ValueError:
            pass
    ra = headers.get("retry-after")
    if not ra:
        return None
    try:
        return max(0.0, float(ra))
    except ValueError:
        try:
            return max(0.0, email.utils.parsedate_to_datetime(ra).timestamp() - time.time())
        except (TypeError, ValueError):
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


def wire_response_format(rf: dict, style: str) -> dict:
    """The canonical json_schema response_format as the endpoint expects it (llm.json_schema_format)."""
    if style == "json_object_schema" and rf.get("type") == "json_schema":
        return {"type": "json_object", "schema": (rf.get("json_schema") or {}).get("schema", {})}
    return rf


def parse_logprobs(lp: Any) -> list[TokenLogprob] | None:
    if not lp or not lp.get("content"):
        return None
    return [TokenLogprob(t["token"], float(t["logprob"]),
                         [(x["token"], float(x["logprob"])) for x in (t.get("top_logprobs") or [])])
            for t in lp["content"]]


class OpenAITransport:
    def __init__(self, cfg: Any, base_url: str, model: str):
        self.cfg = cfg
        self.base_url = base_url
        self.model = model
        self._apis: dict[int, Any] = {}  # openai.AsyncOpenAI per event loop: the SDK client is bound to one

    def _api(self) -> Any:
        import openai  # lazy: `import face.llm` stays cheap for code that only prices runs

        loop = id(asyncio.get_running_loop())
        api = self._apis.get(loop)
        if api is None:
            api = self._apis[loop] = openai.AsyncOpenAI(base_url=self.base_url, api_key=self.cfg.api_key(),
                                                        max_retries=0, timeout=self.cfg.timeout_s)
        return api

    async def aclose(self) -> None:
        """Close the SDK client of the running loop (clients of other loops die with their loop)."""
        api = self._apis.pop(id(asyncio.get_running_loop()), None)
        if api is not None:
            await api.close()

    def body(self, req: ChatRequest) -> dict[str, Any]:
        p = request_params(self.cfg, req)
        body: dict[str, Any] = {"model": self.model, "messages": req.message_dicts(), "n": req.n,
                                "temperature": p["temperature"], "max_tokens": p["max_tokens"]}
        if p["top_p"] is not None:
            body["top_p"] = p["top_p"]
        if self.cfg.seed is not None:
            body["seed"] = self.cfg.seed + req.first_sample
        if p["response_format"] is not None:
            body["response_format"] = wire_response_format(p["response_format"], self.cfg.json_schema_format)
        if p["logprobs"]:
            body["logprobs"] = True
            if p["top_logprobs"]:
                body["top_logprobs"] = p["top_logprobs"]
        return body

    def _wait(self, state: RetryCallState) -> float:
        cfg = self.cfg
        delay = wait_random_exponential(multiplier=cfg.backoff_base_s, max=cfg.backoff_max_s)(state)
        exc = state.outcome.exception() if state.outcome else None
        after = parse_retry_after(getattr(getattr(exc, "response", None), "headers", None))
        if after is not None:
            delay = min(max(delay, after), max(cfg.backoff_max_s, MAX_RETRY_AFTER_S))
        log.info("retry %d/%d in %.2fs after %s", state.attempt_number, cfg.max_retries, delay, type(exc).__name__)
        return delay

    async def chat(self, req: ChatRequest) -> ChatResult:
        """One HTTP request for the samples of `req` (retried); the result's `retries` counts the retries."""
        body = self.body(req)
        api = self._api()
        retrying = AsyncRetrying(retry=retry_if_exception(retryable), wait=self._wait,
                                 stop=stop_after_attempt(self.cfg.max_retries + 1), reraise=True)
        t0 = time.perf_counter()
        attempts = 0
        try:
            async for attempt in retrying:
                with attempt:
                    attempts = attempt.retry_state.attempt_number
                    # the SDK's public low-level post (its auth, headers, timeouts, error types) without
                    # the per-call typed-params transform of chat.completions.create
                    raw = await api.post("/chat/completions", cast_to=bytes, body=body)
                    data = decode_completion(raw)
        except Exception as exc:
            msg = str(exc) if len(str(exc)) <= 300 else str(exc)[:300] + "..."
            raise LLMCallError(f"LLM request failed (tag={req.tag!r}, attempts={attempts}): "
                               f"{type(exc).__name__}: {msg}", retries=max(0, attempts - 1)) from exc
        latency = time.perf_counter() - t0
        choices = sorted(data.get("choices") or [], key=lambda c: c.get("index", 0))
        if len(choices) != req.n:
            raise LLMCallError(f"endpoint returned {len(choices)} choices for n={req.n}; "
                               "set llm.n_per_request=1 for this backend", retries=attempts - 1)
        usage = data.get("usage") or {}
        samples = [Completion(text=(ch.get("message") or {}).get("content") or "",
                              finish_reason=ch.get("finish_reason") or "",
                              logprobs=parse_logprobs(ch.get("logprobs")), sample_index=i)
                   for i, ch in zip(req.indices, choices)]
        return ChatResult(request=req, samples=samples, http_requests=1, retries=attempts - 1,
                          input_tokens=int(usage.get("prompt_tokens") or 0),
                          output_tokens=int(usage.get("completion_tokens") or 0), latency_s=latency)
