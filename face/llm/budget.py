"""Budgets and accounting, as two layers of the stack.

`BudgetLM` sits right above the transport: it splits a request into HTTP-sized pieces
(`llm.n_per_request` samples each), runs at most `llm.concurrency` of them at once, and checks
the caps (`llm.max_calls`, `llm.max_cost_usd`) right before each one is sent, reserving its true
upper bound (face/llm/sizes.py: the prompt's UTF-8 bytes + the chat template's overhead, max_tokens × n)
-- so concurrent tasks cannot jointly overshoot -- or, with `llm.dry_run`, counts and prices it instead
of sending it. A request's cost is the endpoint's reported tokens (its bound where it reports none); an
endpoint misreport (face/llm/usage.py) stops a run under llm.max_cost_usd. `AccountingLM` is the outermost layer:
one record per request (tag, cache hits, samples, HTTP requests, tokens, cost, latency, error) in `Usage`.
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from typing import Any

from .base import ChatRequest, ChatResult, Completion, LLMCallError, merge, raise_first, request_params, runs
from .limiter import Limiter
from .usage import Piece, Usage


class BudgetLM:
    def __init__(self, inner: Any, cfg: Any, usage: Usage):
        self.inner, self.cfg, self.usage = inner, cfg, usage
        self._limiters: dict[int, Limiter] = {}  # per event loop (futures belong to one loop)
        self.limiter: Limiter | None = None  # the one of the loop that ran last
        self._events: dict[int, asyncio.Event] = {}  # per event loop: a reservation was given back
        if hasattr(inner, "on_throttle"):
            # the transport reports 429 / 503 (+ Retry-After) while one of this loop's requests is retried
            inner.on_throttle = lambda retry_after_s: self._limiter().throttle(retry_after_s)
        usage.concurrency = lambda: {} if self.limiter is None else self.limiter.summary()

    def _limiter(self) -> Limiter:
        loop, cfg = id(asyncio.get_running_loop()), self.cfg
        if loop not in self._limiters:
            self._limiters[loop] = Limiter(cfg.concurrency, cfg.concurrency_start, cfg.adaptive_concurrency,
                                           cfg.latency_tolerance)
        self.limiter = self._limiters[loop]
        return self.limiter

    async def chat(self, req: ChatRequest) -> ChatResult:
        if req.n <= self.cfg.n_per_request:  # one piece: the request itself
            return await self._send(req)
        pieces = [replace(req, n=len(r), first_sample=r[0]) for r in runs(req.indices, self.cfg.n_per_request)]
        parts = await asyncio.gather(*(self._send(p) for p in pieces), return_exceptions=True)
        raise_first([p for p in parts if isinstance(p, BaseException)])
        return merge(req, [p for p in parts if isinstance(p, ChatResult)], {})

    async def _send(self, req: ChatRequest) -> ChatResult:
        p = request_params(self.cfg, req)
        piece = Piece.of(req.tag, req.messages, p["max_tokens"], req.n, p["response_format"])
        lim = self._limiter()
        await lim.acquire()
        latency = None
        try:
            while self.usage.must_wait(piece):  # only requests in flight stand in the way: wait until one settles
                await self._events.setdefault(id(asyncio.get_running_loop()), asyncio.Event()).wait()
            reserved = self.usage.reserve(piece)  # raises BudgetExceeded; no await between it and sending
            if self.cfg.dry_run:  # placeholders carrying no content, priced at the estimate
                tin, tout = piece.est_input_tokens, piece.bound.output_tokens
                return ChatResult(request=req, samples=[Completion("", "dry_run", sample_index=i, dry_run=True)
                                                        for i in req.indices],
                                  input_tokens=tin, output_tokens=tout,
                                  cost_usd=self.usage.cost(tin, tout))
            t0 = time.perf_counter()
            try:
                res = await self.inner.chat(req)
            except BaseException as e:
                self.usage.release(reserved)
                self._notify()
                self.usage.retries += e.retries if isinstance(e, LLMCallError) else 0
                raise
            if not res.retries:
                latency = time.perf_counter() - t0
        finally:
            lim.release(latency)
        self.usage.retries += res.retries
        res.http_samples = req.n
        try:
            self.usage.settle(piece, reserved, res.usage, sum(len(s.text.encode()) for s in res.samples),
                              res.latency_s, into=res)
        finally:
            self._notify()
        return res

    def _notify(self) -> None:
        """Wake this loop's requests waiting for a reservation to be given back."""
        waiting = self._events.pop(id(asyncio.get_running_loop()), None)
        if waiting is not None:
            waiting.set()


class AccountingLM:
    def __init__(self, inner: Any, usage: Usage):
        self.inner, self.usage = inner, usage

    async def chat(self, req: ChatRequest) -> ChatResult:
        t0 = time.perf_counter()
        try:
            res = await self.inner.chat(req)
        except BaseException as e:
            self.usage.add(ChatResult(request=req, samples=[], latency_s=time.perf_counter() - t0), error=e)
            raise
        res.latency_s = time.perf_counter() - t0
        self.usage.add(res)
        return res
