"""`ValidatingLM`: the layer that turns a request's `adapter` into validated samples.

For a request without an adapter it does nothing. For one with an adapter, every sample is parsed
(`adapter.parse(completion) -> value | reason`); an invalid sample at position i of a request for
samples first_sample .. first_sample+n-1 is re-drawn as sample index first_sample + i + a*n for
a = 1 .. llm.answer_retries (a fresh seed: the cache cannot hand back the same invalid text, and a
rerun asks for exactly the same indices, so it is served from the cache). The sample returned at
position i is the first valid draw (`value` set) or, when every draw was invalid, the last one with
`error` set. Invalid draws are stored in the cache *marked invalid* (face.llm.cache), never as
valid samples. Counts go to the result (`answer_retries`, `rejected_answers`) and to the usage.
"""
from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

from .base import Chat, ChatRequest, ChatResult, raise_first, validate
from .usage import Usage


class ValidatingLM:
    def __init__(self, inner: Chat, cfg: Any, usage: Usage):
        self.inner, self.cfg, self.usage = inner, cfg, usage

    async def chat(self, req: ChatRequest) -> ChatResult:
        res = await self.inner.chat(req)
        adapter = req.adapter
        if adapter is None:
            return res
        for s in res.samples:
            validate(s, adapter)
        bad = [pos for pos, s in enumerate(res.samples) if s.error is not None]
        if not bad:
            return res
        extra: list[ChatResult] = []

        async def redraw(pos: int) -> None:
            cur = res.samples[pos]
            rejected = [f"sample {cur.sample_index}: {cur.error}"]
            attempts = 1
            for a in range(1, int(self.cfg.answer_retries) + 1):
                r = await self.inner.chat(replace(req, n=1, first_sample=req.first_sample + pos + a * req.n))
                extra.append(r)
                attempts += 1
                cur = validate(r.samples[0], adapter)
                if cur.error is None:
                    break
                rejected.append(f"sample {cur.sample_index}: {cur.error}")
            cur.attempts, cur.rejected = attempts, rejected
            if cur.error is not None:
                s = "" if attempts == 1 else "s"
                cur.error = f"no valid answer in {attempts} draw{s}; last: {cur.error}"
                self.usage.note_invalid(req.tag, cur.error)
            res.samples[pos] = cur

        if len(bad) == 1:
            await redraw(bad[0])
        else:
            out = await asyncio.gather(*(redraw(p) for p in bad), return_exceptions=True)
            raise_first([x for x in out if isinstance(x, BaseException)])
        res.answer_retries = sum(len(r.samples) for r in extra)
        res.rejected_answers = sum(len(s.rejected) for s in res.samples)
        res.cached_samples += sum(r.cached_samples for r in extra)
        res.http_requests += sum(r.http_requests for r in extra)
        res.retries += sum(r.retries for r in extra)
        res.input_tokens += sum(r.input_tokens for r in extra)
        res.output_tokens += sum(r.output_tokens for r in extra)
        res.cost_usd += sum(r.cost_usd for r in extra)
        return res

