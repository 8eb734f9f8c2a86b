"""Budgets and accounting, as two layers of the stack.

`BudgetLM` sits right above the transport: it splits a request into HTTP-sized pieces
(`llm.n_per_request` samples each), runs at most `llm.concurrency` of them at once, and checks
the caps (`llm.max_calls`, `llm.max_cost_usd`) right before each one is sent -- so concurrent
tasks cannot jointly overshoot -- or, with `llm.dry_run`, counts and prices it instead of
sending it. `AccountingLM` is the outermost layer: one record per call (tag, cache hits, HTTP
requests, tokens, cost, latency, error) in `Usage`.
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from typing import Any

from .base import (
    Chat,
    ChatRequest,
    ChatResult,
    Completion,
    LLMCallError,
    merge,
    raise_first,
    request_params,
    runs,
)
from .usage import BudgetExceeded, CallRecord, Usage


class BudgetLM:
    def __init__(self, inner: Chat, cfg: Any, usage: Usage):
        self.inner, self.cfg, self.usage = inner, cfg, usage
        self._sems: dict[int, asyncio.Semaphore] = {}  # per event loop
        self.in_flight = 0
        self.max_in_flight = 0

    def _sem(self) -> asyncio.Semaphore:
        loop = id(asyncio.get_running_loop())
        if loop not in self._sems:
            self._sems[loop] = asyncio.Semaphore(self.cfg.concurrency)
        return self._sems[loop]

    async def chat(self, req: ChatRequest) -> ChatResult:
        pieces = [replace(req, n=len(r), first_sample=r[0]) for r in runs(req.indices, self.cfg.n_per_request)]
        if len(pieces) == 1:
            return await self._send(pieces[0])
        parts = await asyncio.gather(*(self._send(p) for p in pieces), return_exceptions=True)
        raise_first([p for p in parts if isinstance(p, BaseException)])
        return merge(req, parts, {})

    async def _send(self, req: ChatRequest) -> ChatResult:
        est = self.usage.estimate(req.messages, request_params(self.cfg, req)["max_tokens"], req.n)
        async with self._sem():
            self.usage.reserve(req.tag, est)  # raises BudgetExceeded; no await between it and sending
            if self.cfg.dry_run:
                return ChatResult(request=req, samples=[Completion("", "dry_run", sample_index=i, dry_run=True)
                                                        for i in req.indices],
                                  input_tokens=est[0], output_tokens=est[1], cost_usd=est[2])
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            try:
                res = await self.inner.chat(req)
            except BaseException as e:
                self.usage.release(est[2])
                self.usage.note_retries(e.retries if isinstance(e, LLMCallError) else 0)
                raise
            finally:
                self.in_flight -= 1
        self.usage.note_retries(res.retries)
        res.cost_usd = self.usage.settle(est[2], res.input_tokens, res.output_tokens, res.latency_s)
        return res


class AccountingLM:
    def __init__(self, inner: Chat, cfg: Any, usage: Usage):
        self.inner, self.cfg, self.usage = inner, cfg, usage

    async def chat(self, req: ChatRequest) -> ChatResult:
        t0 = time.perf_counter()
        try:
            res = await self.inner.chat(req)
        except BaseException as e:
            self.usage.add(CallRecord(tag=req.tag, n=req.n, dry_run=self.cfg.dry_run,
                                      latency_s=time.perf_counter() - t0,
                                      error=("budget: " if isinstance(e, BudgetExceeded) else "")
                                      + f"{type(e).__name__}: {e}"))
            raise
        res.latency_s = time.perf_counter() - t0
        self.usage.add(CallRecord(tag=req.tag, n=req.n, cached_samples=res.cached_samples,
                                  http_requests=res.http_requests, retries=res.retries, latency_s=res.latency_s,
                                  input_tokens=res.input_tokens, output_tokens=res.output_tokens,
                                  cost_usd=res.cost_usd, dry_run=self.cfg.dry_run,
                                  answer_retries=res.answer_retries, rejected_answers=res.rejected_answers,
                                  invalid_answers=res.invalid_samples))
        return res
