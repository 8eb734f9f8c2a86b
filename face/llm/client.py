"""The client: starts the configured server (if any), builds the stack, runs batches.

    with make_client(cfg) as client:
        results = client.run_batch(requests, desc="scoring")   # sync
        result = await client.chat(request)                   # async

Validated answers: give a request an adapter (face.llm.adapters); every sample comes back parsed,
invalid ones re-drawn up to llm.answer_retries times, and nothing invalid is cached as valid::

    scores = score_adapter([0, 1, 2])
    req = scores.request(ChatRequest(messages=msgs, n=5, tag="score"), native=cfg.supports_json_schema,
                         validate=True)            # = replace(req, adapter=scores) + the schema
    [res] = client.run_batch([req], desc="scoring")
    for s in res.samples:
        if s.error is None:      # s.valid; s.value is ScoreAnswer(score=2), s.text the raw answer
            use(s.value.score)
        else:                    # no valid draw in 1 + llm.answer_retries: s.error says why; s.rejected lists
            ...                  # every rejected draw; counted in usage (invalid_answers, answer_retries)

The stack, outermost first (each layer has `async chat(request) -> ChatResult`):
AccountingLM (per-call records) -> ValidatingLM (adapter: parse, re-draw invalid answers) ->
CachingLM (per-sample cache) -> BudgetLM (HTTP-sized pieces,
concurrency, caps, dry run) -> OpenAITransport (one HTTP request, retries), or with `llm.batch=true`
BatchTransport (the pieces as lines of OpenAI Batch API jobs; face/llm/batch.py). A backend is a
config: `llm.server` names a server class started beside the client (`face.llm.local.LocalServer`,
`face.testing.scripted.ScriptedServer`), or is null for an endpoint at `llm.base_url`.
"""
from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Self

from face.console import Progress as Reporter
from face.errors import import_class

from .base import ChatRequest, ChatResult, LLMCallError, LLMRequestRefused, Server
from .budget import AccountingLM, BudgetLM
from .cache import CachingLM, SampleCache, request_key
from .config import LLMConfig
from .transport import OpenAITransport
from .usage import BudgetExceeded, CallRecord, Usage, estimate_tokens
from .validating import ValidatingLM

log = logging.getLogger("face.llm")


def build(spec: dict[str, Any]) -> Any:
    """`{"_target_": "pkg.module.Name", **kwargs}` -> pkg.module.Name(**kwargs)."""
    kwargs = dict(spec)
    return import_class(kwargs.pop("_target_"), "llm.server._target_")(**kwargs)


class LLMClient:
    def __init__(self, cfg: LLMConfig):
        self.cfg = cfg
        price_in, price_out = cfg.prices
        self.usage = Usage(price_input_per_mtok=price_in, price_output_per_mtok=price_out,
                           max_calls=cfg.max_calls, max_cost_usd=cfg.max_cost_usd,
                           dry_run=cfg.dry_run, cache_dir=cfg.cache_dir if cfg.cache else None)
        self.server: Server | None = None
        self.base_url: str | None = None
        self.model: str = cfg.model
        self.transport: OpenAITransport | None = None
        self.budget: BudgetLM | None = None
        self.cache: CachingLM | None = None
        self._lm: AccountingLM | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # private loop of run_batch

    # ---- lifecycle ----------------------------------------------------
    def start(self) -> LLMClient:
        if self._lm is not None:
            return self
        cfg = self.cfg
        self.base_url, self.model = cfg.base_url, cfg.model
        if cfg.server is not None:
            server = build(cfg.server)
            server.start()
            self.server = server
            self.base_url, self.model = server.base_url, server.model
        urls = cfg.base_urls if cfg.server is None else [self.base_url] if self.base_url else []
        if not urls:
            raise ValueError(f"llm.base_url is required when no llm.server is configured (backend {cfg.backend!r})")
        self.base_url = urls[0]
        cfg = self.cfg = self._know_endpoint(cfg)  # the endpoint probed first: every layer is built knowing it
        cached = bool(cfg.cache and cfg.cache_dir)
        if cfg.batch:
            from .batch import BatchTransport

            # a batch line's custom_id is the cache key of its first sample
            key_for = functools.partial(request_key, cfg, self.model) if cached else None
            self.transport = BatchTransport(cfg, urls[0], self.model, Path(cfg.cache_dir) / "batches", key_for)
        else:
            self.transport = OpenAITransport(cfg, urls, self.model)
        # a batch takes every piece at once: the concurrency cap is for HTTP requests, not batch lines
        self.budget = BudgetLM(self.transport, cfg.replace(concurrency=10**9, adaptive_concurrency=False)
                               if cfg.batch else cfg, self.usage)
        inner: Any = self.budget
        if cached:
            inner = self.cache = CachingLM(self.budget, SampleCache(cfg.cache_dir), cfg, self.model)
        self._lm = AccountingLM(ValidatingLM(inner, cfg, self.usage), cfg, self.usage)
        return self

    def _know_endpoint(self, cfg: LLMConfig) -> LLMConfig:
        """The config with `n_per_request` fitted to the endpoint: n is used only where honoured (probed once
        per base URL and model, remembered in cache_dir/endpoints.json). Nothing is sent in a dry run. The probe's
        requests are retried, counted (tag "probe") and capped like any other; without room in the budget for
        them the config is trusted; a probe that fails after its retries stops the run (LLMCallError)."""
        if not cfg.probe or cfg.n_per_request <= 1 or cfg.batch:
            return cfg
        from . import probe

        caps = probe.load(cfg.cache_dir if cfg.cache else None, self.base_url, self.model)
        if caps is None and not cfg.dry_run and not _loop_running():
            if self._loop is None or self._loop.is_closed():
                self._loop = asyncio.new_event_loop()
            # the probe's own transport (closed after it): the same retry policy as every request
            transport = OpenAITransport(cfg.replace(timeout_s=min(cfg.timeout_s, 30.0)), self.base_url, self.model)

            async def ask() -> probe.Capabilities:
                try:
                    return await probe.probe(functools.partial(self._probe_send, transport), self.base_url,
                                             self.model)
                finally:
                    await transport.aclose()

            try:
                caps = self._loop.run_until_complete(ask())
            except BudgetExceeded as e:  # no room for the probe: trust the config, for this run only
                log.warning("the endpoint probe does not fit the LLM budget (%s); trusting llm.n_per_request=%d "
                            "as configured", str(e).split(" (next request")[0], cfg.n_per_request)
                return cfg
            except LLMRequestRefused:
                raise
            except LLMCallError as e:  # failed after its retries: the run stops (never remembered)
                raise LLMCallError(f"the endpoint probe of {self.base_url} failed: {e}", retries=e.retries) from e
            probe.save(cfg.cache_dir if cfg.cache else None, caps)
            log.info("endpoint %s (%s): n %s, logprobs %s, JSON schema %s", self.base_url, self.model,
                     "honoured" if caps.n else f"not honoured ({caps.max_n_seen} choice(s) for n=3)",
                     caps.logprobs, caps.json_schema)
            for what, has, key in (("log-probabilities", caps.logprobs, "supports_logprobs"),
                                   ("JSON-schema answers", caps.json_schema, "supports_json_schema")):
                if has is False and getattr(cfg, key):
                    log.warning("endpoint %s does not seem to support %s; set llm.%s=false if requests fail",
                                self.base_url, what, key)
        if caps is not None and not caps.n:
            return cfg.replace(n_per_request=1)
        return cfg

    async def _probe_send(self, transport: OpenAITransport, body: dict[str, Any]) -> dict:
        """One probe request, as every request: within the budget (``Usage.reserve``), retried by the transport,
        its tokens, cost and retries counted under the tag ``probe``."""
        msgs = tuple((m["role"], m["content"]) for m in body["messages"])
        est = self.usage.estimate(msgs, body["max_tokens"], body.get("n", 1))
        reserved = self.usage.reserve("probe", est)
        t0 = time.perf_counter()
        try:
            data, retries = await transport.post(body, "probe")
        except BaseException as e:
            self.usage.release(reserved)
            self.usage.note_retries(getattr(e, "retries", 0))
            self.usage.add(CallRecord(tag="probe", n=body.get("n", 1), latency_s=time.perf_counter() - t0,
                                      error=f"{type(e).__name__}: {e}"))
            raise
        latency = time.perf_counter() - t0
        self.usage.note_retries(retries)
        reported = data.get("usage") or {}
        out_est = sum(estimate_tokens(len((c.get("message") or {}).get("content") or ""))
                      for c in data.get("choices") or [])
        tin, tout, cost = self.usage.settle(reserved, est, int(reported.get("prompt_tokens") or 0),
                                            int(reported.get("completion_tokens") or 0), latency, out_est)
        self.usage.add(CallRecord(tag="probe", n=body.get("n", 1), http_requests=1, retries=retries,
                                  latency_s=latency, input_tokens=tin, output_tokens=tout, cost_usd=cost))
        return data

    def close(self) -> None:
        if self.cfg.usage_file and (self.usage.calls or self.usage.dry_run_requests):
            try:  # also after a budget stop, Ctrl-C or a failed batch: what was paid for is on record
                self.usage.write_artifact(self.cfg.usage_file)
            except OSError as e:
                log.warning("could not write %s: %s", self.cfg.usage_file, e)
        if self._loop is not None and not self._loop.is_closed():
            if self.transport is not None:
                self._loop.run_until_complete(self.transport.aclose())
            self._loop.close()
        self._loop = None
        if self.cache is not None:
            self.cache.store.close()
        self.transport = self.budget = self.cache = self._lm = None
        if self.server is not None:
            server, self.server = self.server, None
            server.stop()

    def __enter__(self) -> Self:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- calls ----------------------------------------------------------
    async def chat(self, req: ChatRequest) -> ChatResult:
        """All n samples of one request: cached ones from the cache, the rest over HTTP."""
        if self._lm is None:
            self.start()
        return await self._lm.chat(req)

    def cached_stream(self, items: Iterable[Any], request: Callable[[Any], ChatRequest], chunk: int = 256
                      ) -> Iterator[tuple[Any, ChatResult | None]]:
        """``(item, cached(request(item)))`` for every item, in order, the cache read one chunk ahead in a thread of
        its own: SQLite lets go of the GIL while it searches, so a paper-size warm rerun (≈ 3.5 M samples) reads the
        cache while this thread renders prompts and scores the chunk before."""
        items = iter(items)
        if self._lm is None:
            self.start()
        if self.cache is None or self.cfg.dry_run:
            yield from ((x, None) for x in items)
            return
        from concurrent.futures import ThreadPoolExecutor

        cache = self.cache
        ahead: deque = deque()
        with ThreadPoolExecutor(1, thread_name_prefix="cache-read") as pool:
            while True:
                batch = list(itertools.islice(items, chunk))
                if batch:
                    reqs = [request(x) for x in batch]
                    keys = [cache.keys_for(r) for r in reqs]
                    ahead.append((batch, reqs, keys, pool.submit(
                        cache.store.read_committed, [k for ks in keys for k in ks.values()])))
                if not ahead or (batch and len(ahead) < 2):
                    if not ahead:
                        return
                    continue
                batch, reqs, keys, found = ahead.popleft()
                for x, req, res in zip(batch, reqs, cache.results(reqs, keys, found.result())):
                    if res is not None and req.adapter is not None and any(s.error is not None for s in res.samples):
                        res = None
                    if res is not None:
                        self.usage.add(CallRecord(tag=req.tag, n=req.n, cached_samples=res.cached_samples))
                    yield x, res

    async def chat_many(self, requests: Sequence[ChatRequest], desc: str = "LLM",
                        on_error: str = "raise") -> list[ChatResult]:
        """Async batch: order preserved, progress bar, errors raised after the batch settles.

        on_error="raise": after every request finished or failed, raise BudgetExceeded (if the
        budget stopped the batch) or LLMCallError; finished calls are in the cache either way.
        on_error="return": failed requests give a ChatResult with `error` set and no samples."""
        requests = list(requests)
        bar = Progress(len(requests), desc, enabled=self.cfg.progress, usage=self.usage)
        refused: list[LLMRequestRefused] = []

        async def one(r: ChatRequest) -> ChatResult | BaseException:
            if refused:
                return refused[0]
            try:
                res = await self.chat(r)
                bar.update(res.cached_samples, failed=False)
                return res
            except LLMRequestRefused as e:  # the endpoint will not answer this as it is: stop the batch
                refused.append(e)
                for t in tasks:
                    t.cancel()
                return e
            except Exception as e:
                bar.update(0, failed=True)
                return e

        tasks = [asyncio.ensure_future(one(r)) for r in requests]
        try:
            out = await asyncio.gather(*tasks, return_exceptions=True)
        finally:
            bar.close()
        if refused:
            raise refused[0]
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
        if self._lm is None:
            self.start()
        if self._loop is None or self._loop.is_closed():
            self._loop = asyncio.new_event_loop()
        return self._loop.run_until_complete(coro)

    def run(self, request: ChatRequest) -> ChatResult:
        return self.run_batch([request], desc=request.tag or "LLM")[0]


def _loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


class Progress:
    """An LLM batch's progress (``face.console.Progress``: a bar on a terminal, a line every 30 s in a log):
    requests done/total, cache hits, failures and the cost so far."""

    def __init__(self, total: int, desc: str, enabled: bool, usage: Usage):
        self.usage = usage
        self.hits = 0
        self.fail = 0
        self.reporter = Reporter(total, desc, unit="requests", enabled=enabled, info=self._info)

    def _info(self) -> dict[str, str]:
        cost = self.usage.est_cost_usd if self.usage.dry_run else self.usage.spent_usd
        return {"hits": str(self.hits), "fail": str(self.fail),
                "cost": f"${cost:.4f}" + (" (dry-run estimate)" if self.usage.dry_run else "")}

    def update(self, hits: int, failed: bool) -> None:
        self.hits += hits
        self.fail += failed
        self.reporter.update(1)

    def close(self) -> None:
        self.reporter.close()


def make_client(cfg: LLMConfig | dict) -> LLMClient:
    """The LM stack for a config; use as a context manager (starts/stops the configured server)."""
    return LLMClient(cfg if isinstance(cfg, LLMConfig) else LLMConfig.from_dict(cfg))
