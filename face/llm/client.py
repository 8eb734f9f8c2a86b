"""The LLM client: cache -> budget -> concurrency-limited HTTP with our own retries.

    with make_client(cfg) as client:
        results = client.run_batch(requests, desc="scoring")   # sync
        result = await client.chat(request)                   # async

All HTTP goes through one `openai.AsyncOpenAI` per client and event loop (SDK
retries disabled; retries, backoff and Retry-After are handled here).
"""
from __future__ import annotations

import asyncio
import email.utils
import json
import logging
import random
import time
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from .cache import SampleCache, sample_key
from .config import LLMConfig
from .usage import BudgetExceeded, CallRecord, Usage

log = logging.getLogger("face.llm")

Messages = tuple[tuple[str, str], ...]
httpx: Any = None  # the HTTP library the openai SDK uses (httpx, or httpx2 in newer SDKs)


# ---------------------------------------------------------------- records
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
    temperature: float | None = None
    max_tokens: int | None = None
    top_p: float | None = None
    response_format: dict | None = field(default=None, hash=False, compare=False)
    logprobs: bool = False
    top_logprobs: int = 0
    tag: str = ""
    first_sample: int = 0  # samples are indices first_sample .. first_sample+n-1

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

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def text(self) -> str:
        return self.samples[0].text

    @property
    def texts(self) -> list[str]:
        return [s.text for s in self.samples]


class LLMCallError(RuntimeError):
    """A request failed after all retries (or with a non-retryable error)."""


# ---------------------------------------------------------------- helpers
def backoff_delay(attempt: int, base: float, cap: float, rng: random.Random) -> float:
    """Exponential backoff with 'equal jitter': in [d/2, d], d = min(cap, base * 2**attempt)."""
    d = min(cap, base * (2 ** attempt))
    return d / 2 + rng.random() * d / 2


def parse_retry_after(headers: Any) -> float | None:
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
            dt = email.utils.parsedate_to_datetime(ra)
            return max(0.0, dt.timestamp() - time.time())
        except (TypeError, ValueError):
            return None


def _retryable(exc: BaseException) -> tuple[bool, float | None]:
    """(retry?, retry_after seconds) for an exception raised by the openai SDK."""
    import openai

    if isinstance(exc, (openai.APITimeoutError, openai.APIConnectionError, asyncio.TimeoutError)):
        return True, None
    if isinstance(exc, openai.APIStatusError):
        code = exc.status_code
        if code in (408, 409, 429) or code >= 500:
            return True, parse_retry_after(getattr(exc.response, "headers", None))
        return False, None
    return False, None


def wire_response_format(rf: dict, style: str) -> dict:
    """The response_format as the endpoint expects it (see LLMConfig.json_schema_format)."""
    if style == "json_object_schema" and rf.get("type") == "json_schema":
        return {"type": "json_object", "schema": (rf.get("json_schema") or {}).get("schema", {})}
    return rf


def _parse_logprobs(lp: Any) -> list[TokenLogprob] | None:
    if not lp or not lp.get("content"):
        return None
    out = []
    for t in lp["content"]:
        top = [(x["token"], float(x["logprob"])) for x in (t.get("top_logprobs") or [])]
        out.append(TokenLogprob(t["token"], float(t["logprob"]), top))
    return out


def _lp_to_json(lps: list[TokenLogprob] | None) -> list | None:
    return None if lps is None else [[t.token, t.logprob, [list(x) for x in t.top]] for t in lps]


def _lp_from_json(data: list | None) -> list[TokenLogprob] | None:
    return None if data is None else [TokenLogprob(t, lp, [(a, b) for a, b in top]) for t, lp, top in data]


class _LoopState:
    """Per-event-loop resources (the SDK client and the semaphore are bound to a loop)."""

    def __init__(self, api: Any, concurrency: int):
        self.api = api
        self.sem = asyncio.Semaphore(concurrency)


# ---------------------------------------------------------------- client
class LLMClient:
    def __init__(self, cfg: LLMConfig):
        self.cfg = cfg
        self.usage = Usage(price_input_per_mtok=cfg.price_input_per_mtok,
                           price_output_per_mtok=cfg.price_output_per_mtok,
                           max_calls=cfg.max_calls, max_cost_usd=cfg.max_cost_usd,
                           dry_run=cfg.dry_run, cache_dir=cfg.cache_dir if cfg.cache else None)
        self.base_url: str | None = cfg.base_url
        self.model: str = cfg.model
        self.cache: SampleCache | None = SampleCache(cfg.cache_dir) if (cfg.cache and cfg.cache_dir) else None
        self._server: Any = None  # LocalServer / ScriptedServer context manager
        self._started = False
        self._loop: asyncio.AbstractEventLoop | None = None  # private loop of run_batch
        self._states: dict[int, _LoopState] = {}
        self._rng = random.Random()
        self.in_flight = 0
        self.max_in_flight = 0

    # ---- lifecycle ----------------------------------------------------
    def start(self) -> "LLMClient":
        if self._started:
            return self
        backend = self.cfg.backend
        if backend == "local":
            from face.llm.local import LocalServer  # lazy: needs the model package

            self._server = LocalServer(self.cfg.local)
            info = self._server.__enter__()
            self.base_url, self.model = info.base_url, info.model
        elif backend == "scripted" and not self.cfg.base_url:
            from .scripted import ScriptedServer

            self._server = ScriptedServer(**self.cfg.local)
            info = self._server.__enter__()
            self.base_url = info.base_url
        elif backend == "openai" and not self.base_url:
            self.base_url = "https://api.openai.com/v1"
        if not self.base_url:
            raise ValueError(f"llm.base_url is required for backend {backend!r}")
        self._started = True
        return self

    def close(self) -> None:
        if self._loop is not None and not self._loop.is_closed():
            state = self._states.pop(id(self._loop), None)
            if state is not None:
                try:
                    self._loop.run_until_complete(state.api.close())
                except Exception:  # pragma: no cover
                    pass
            self._loop.close()
        self._loop = None
        self._states.clear()
        if self.cache is not None:
            self.cache.close()
            self.cache = None
        if self._server is not None:
            server, self._server = self._server, None
            server.__exit__(None, None, None)
        self._started = False

    def __enter__(self) -> "LLMClient":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _state(self) -> _LoopState:
        loop = asyncio.get_running_loop()
        st = self._states.get(id(loop))
        if st is None:
            import openai

            global httpx
            import openai._base_client as _bc
            httpx = _bc.httpx2 if hasattr(_bc, "httpx2") else _bc.httpx
            api = openai.AsyncOpenAI(base_url=self.base_url, api_key=self.cfg.api_key(),
                                     max_retries=0, timeout=self.cfg.timeout_s)
            st = self._states[id(loop)] = _LoopState(api, self.cfg.concurrency)
        return st

    # ---- request parameters -------------------------------------------
    def _params(self, req: ChatRequest) -> dict[str, Any]:
        cfg = self.cfg
        if req.logprobs and not cfg.supports_logprobs:
            raise ValueError(f"backend {cfg.backend!r} (model {cfg.model}) does not support logprobs "
                             "(llm.supports_logprobs=false); score by sampling instead")
        rf = req.response_format if cfg.supports_json_schema else None
        return {
            "temperature": cfg.temperature if req.temperature is None else req.temperature,
            "top_p": cfg.top_p if req.top_p is None else req.top_p,
            "max_tokens": cfg.max_tokens if req.max_tokens is None else req.max_tokens,
            "response_format": rf,
            "logprobs": bool(req.logprobs),
            "top_logprobs": int(req.top_logprobs) if req.logprobs else 0,
        }

    def key_for(self, req: ChatRequest, sample_index: int) -> str:
        p = self._params(req)
        return sample_key({"model": self.model, "messages": [list(m) for m in req.messages], **p,
                           "seed": self.cfg.seed, "sample_index": sample_index})

    # ---- the call -----------------------------------------------------
    async def chat(self, req: ChatRequest) -> ChatResult:
        """All n samples of one request: cached ones from the cache, the rest over HTTP."""
        if not self._started:
            self.start()
        t0 = time.perf_counter()
        params = self._params(req)
        indices = list(range(req.first_sample, req.first_sample + req.n))
        keys = [self.key_for(req, i) for i in indices]
        got: dict[int, Completion] = {}
        if self.cache is not None:
            hit = self.cache.get_many(keys)
            for i, k in zip(indices, keys):
                if k in hit:
                    p = hit[k]
                    got[i] = Completion(p["text"], p["finish_reason"], _lp_from_json(p.get("logprobs")),
                                        cached=True, sample_index=i)
        missing = [i for i in indices if i not in got]
        rec = CallRecord(tag=req.tag, n=req.n, cached_samples=len(got), dry_run=self.cfg.dry_run)
        step = self.cfg.n_per_request
        chunks = [missing[j:j + step] for j in range(0, len(missing), step)]
        # a chunk is consecutive in `missing` but may skip cached indices; split on gaps
        chunks = [c for chunk in chunks for c in _contiguous(chunk)]
        try:
            if chunks:
                parts = await asyncio.gather(*(self._send(req, params, c, dict(zip(indices, keys)), rec)
                                               for c in chunks), return_exceptions=True)
                errs = [p for p in parts if isinstance(p, BaseException)]
                if errs:
                    budget = [e for e in errs if isinstance(e, BudgetExceeded)]
                    raise budget[0] if budget else errs[0]
                for part in parts:
                    got.update(part)
        except BaseException as e:
            rec.error = ("budget: " if isinstance(e, BudgetExceeded) else "") + f"{type(e).__name__}: {e}"
            rec.latency_s = time.perf_counter() - t0
            self.usage.add(rec)
            raise
        rec.latency_s = time.perf_counter() - t0
        self.usage.add(rec)
        return ChatResult(request=req, samples=[got[i] for i in indices], cached_samples=rec.cached_samples,
                          http_requests=rec.http_requests, retries=rec.retries, input_tokens=rec.input_tokens,
                          output_tokens=rec.output_tokens, cost_usd=rec.cost_usd, latency_s=rec.latency_s)

    async def _send(self, req: ChatRequest, params: dict, idx: list[int], keys: dict[int, str],
                    rec: CallRecord) -> dict[int, Completion]:
        """One HTTP request for the consecutive sample indices `idx` (with retries)."""
        cfg = self.cfg
        est = self.usage.estimate(req.messages, params["max_tokens"], len(idx))
        st = self._state()
        async with st.sem:
            self.usage.reserve(req.tag, est)  # raises BudgetExceeded; no await before sending
            if cfg.dry_run:
                rec.input_tokens += est[0]
                rec.output_tokens += est[1]
                rec.cost_usd += est[2]
                return {i: Completion("", "dry_run", None, cached=False, sample_index=i, dry_run=True) for i in idx}
            body: dict[str, Any] = {"model": self.model, "messages": req.message_dicts(), "n": len(idx),
                                    "temperature": params["temperature"], "max_tokens": params["max_tokens"]}
            if params["top_p"] is not None:
                body["top_p"] = params["top_p"]
            if cfg.seed is not None:
                body["seed"] = cfg.seed + idx[0]
            if params["response_format"] is not None:
                body["response_format"] = wire_response_format(params["response_format"], cfg.json_schema_format)
            if params["logprobs"]:
                body["logprobs"] = True
                if params["top_logprobs"]:
                    body["top_logprobs"] = params["top_logprobs"]
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            t0 = time.perf_counter()
            try:
                data = await self._post_with_retries(st, body, req.tag, rec)
            except BaseException:
                self.usage.release(est[2])
                raise
            finally:
                self.in_flight -= 1
            latency = time.perf_counter() - t0
        choices = sorted(data.get("choices") or [], key=lambda c: c.get("index", 0))
        if len(choices) != len(idx):
            self.usage.release(est[2])
            raise LLMCallError(f"endpoint returned {len(choices)} choices for n={len(idx)}; "
                               f"set llm.n_per_request=1 for this backend")
        u = data.get("usage") or {}
        tin, tout = int(u.get("prompt_tokens") or 0), int(u.get("completion_tokens") or 0)
        c = self.usage.settle(est[2], tin, tout, latency)
        rec.http_requests += 1
        rec.input_tokens += tin
        rec.output_tokens += tout
        rec.cost_usd += c
        out: dict[int, Completion] = {}
        rows = []
        for i, ch in zip(idx, choices):
            msg = ch.get("message") or {}
            comp = Completion(text=msg.get("content") or "", finish_reason=ch.get("finish_reason") or "",
                              logprobs=_parse_logprobs(ch.get("logprobs")), cached=False, sample_index=i)
            out[i] = comp
            rows.append((keys[i], self.model, req.tag, i, {"text": comp.text, "finish_reason": comp.finish_reason,
                                                         "logprobs": _lp_to_json(comp.logprobs)}))
        if self.cache is not None:
            self.cache.put_many(rows)  # written as soon as it arrives
        return out

    async def _post_with_retries(self, st: _LoopState, body: dict, tag: str, rec: CallRecord) -> dict:
        cfg = self.cfg
        attempt = 0
        while True:
            try:
                # the SDK's low-level post: its auth, headers, timeouts and error types, without the
                # per-call typed-params transform of chat.completions.create (~3 ms/call)
                resp = await st.api.post("/chat/completions", cast_to=httpx.Response, body=body)
                return json.loads(resp.content)
            except Exception as exc:  # noqa: BLE001 - classified below
                retry, retry_after = _retryable(exc)
                if not retry or attempt >= cfg.max_retries:
                    raise LLMCallError(f"LLM request failed (tag={tag!r}, attempts={attempt + 1}): "
                                       f"{type(exc).__name__}: {_short(exc)}") from exc
                delay = backoff_delay(attempt, cfg.backoff_base_s, cfg.backoff_max_s, self._rng)
                if retry_after is not None:
                    delay = min(max(delay, retry_after), max(cfg.backoff_max_s, 120.0))
                attempt += 1
                rec.retries += 1
                log.info("retry %d/%d in %.2fs after %s (tag=%s)", attempt, cfg.max_retries, delay,
                         type(exc).__name__, tag)
                await asyncio.sleep(delay)

    # ---- batches --------------------------------------------------------
    async def chat_many(self, requests: Sequence[ChatRequest], desc: str = "LLM",
                        on_error: str = "raise") -> list[ChatResult]:
        """Async batch: order preserved, progress bar, errors raised after the batch settles.

        on_error="raise": after every request finished or failed, raise BudgetExceeded (if the
        budget stopped the batch) or LLMCallError; finished calls are in the cache either way.
        on_error="return": failed requests give a ChatResult with `error` set and no samples."""
        requests = list(requests)
        bar = _Progress(len(requests), desc, enabled=self.cfg.progress, usage=self.usage)

        async def one(r: ChatRequest) -> ChatResult | BaseException:
            try:
                res = await self.chat(r)
                bar.update(res.cached_samples, failed=False)
                return res
            except Exception as e:  # noqa: BLE001
                bar.update(0, failed=True)
                return e

        try:
            out = await asyncio.gather(*(one(r) for r in requests))
        finally:
            bar.close()
        errors = [(i, e) for i, e in enumerate(out) if isinstance(e, BaseException)]
        for _, e in errors:
            if not isinstance(e, (LLMCallError, BudgetExceeded)):
                raise e  # a bug or invalid request, not an endpoint failure
        if errors and on_error == "raise":
            budget = [e for _, e in errors if isinstance(e, BudgetExceeded)]
            done = len(requests) - len(errors)
            if budget:
                raise BudgetExceeded(f"{budget[0]} Batch {desc!r}: {done} of {len(requests)} requests "
                                     f"completed, {len(errors)} not done.") from budget[0]
            raise LLMCallError(f"{len(errors)} of {len(requests)} requests in batch {desc!r} failed; "
                               f"first: {errors[0][1]}") from errors[0][1]
        return [r if isinstance(r, ChatResult) else
                ChatResult(request=requests[i], samples=[], error=f"{type(r).__name__}: {r}")
                for i, r in enumerate(out)]

    def run_batch(self, requests: Iterable[ChatRequest], desc: str = "LLM",
                  on_error: str = "raise") -> list[ChatResult]:
        """Synchronous batch on the client's private event loop (callable repeatedly)."""
        return self.run_async(self.chat_many(list(requests), desc=desc, on_error=on_error))

    def run_async(self, coro: Any) -> Any:
        """Run a coroutine using this client on its private event loop (not from inside a loop)."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            coro.close()
            raise RuntimeError("run_batch()/run_async() called inside a running event loop; "
                               "use `await client.chat_many(...)` instead")
        if not self._started:
            self.start()
        if self._loop is None or self._loop.is_closed():
            self._loop = asyncio.new_event_loop()
        return self._loop.run_until_complete(coro)

    def run(self, request: ChatRequest) -> ChatResult:
        return self.run_batch([request], desc=request.tag or "LLM")[0]


def _contiguous(idx: list[int]) -> list[list[int]]:
    out: list[list[int]] = []
    for i in idx:
        if out and out[-1][-1] + 1 == i:
            out[-1].append(i)
        else:
            out.append([i])
    return out


def _short(exc: BaseException, limit: int = 300) -> str:
    s = str(exc)
    return s if len(s) <= limit else s[:limit] + "..."


class _Progress:
    """tqdm bar: done/total, cache hits, failures, cost so far."""

    def __init__(self, total: int, desc: str, enabled: bool, usage: Usage):
        self.usage = usage
        self.hits = 0
        self.fail = 0
        self.bar = None
        if enabled and total:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, desc=desc, mininterval=0.5, leave=True, dynamic_ncols=True)

    def update(self, hits: int, failed: bool) -> None:
        self.hits += hits
        self.fail += failed
        if self.bar is not None:
            self.bar.update(1)
            done = self.bar.n == self.bar.total
            if done or self.bar.n % 20 == 0:
                cost = self.usage.est_cost_usd if self.usage.dry_run else self.usage.spent_usd
                self.bar.set_postfix(hits=self.hits, fail=self.fail,
                                     cost=f"${cost:.4f}" + (" (dry-run estimate)" if self.usage.dry_run else ""),
                                     refresh=done)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def make_client(cfg: LLMConfig | dict) -> LLMClient:
    """Client for any backend; use as a context manager (starts/stops the local server)."""
    if not isinstance(cfg, LLMConfig):
        cfg = LLMConfig.from_dict(cfg)
    return LLMClient(cfg)
