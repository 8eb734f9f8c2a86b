"""JSON answers with re-sampling: a typed answer per sample, or the recorded reason there is none.

`chat_json_samples` asks for an adapter's answer type (face.llm.adapters) and validates every
sample. An invalid sample is retried with a *different sample index* (so the cache cannot return
the same invalid text); after `max_attempts` the result has `value=None` and the reason in
`fallback` (also noted in the usage) -- never a silent default.
"""
from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from .adapters import JsonAdapter, extract_json
from .base import LM, ChatRequest

__all__ = ["JsonResult", "chat_json", "chat_json_samples", "extract_json", "run_json_batch"]


@dataclass
class JsonResult:
    value: Any  # the adapter's model instance; None when every attempt failed
    attempts: int
    fallback: str | None  # reason when value is None (or for dry runs), else None
    raw_texts: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # one line per rejected attempt
    sample_index: int = 0  # sample index of the accepted answer

    @property
    def ok(self) -> bool:
        return self.fallback is None


async def chat_json_samples(client: LM, request: ChatRequest, adapter: JsonAdapter,
                            max_attempts: int = 3) -> list[JsonResult]:
    """request.n samples, each validated; invalid sample i of attempt a is retried as sample index
    first_sample + i + a*n (a fresh seed, not the cached invalid one)."""
    req = adapter.request(request, native=client.cfg.supports_json_schema)
    n, base = req.n, req.first_sample
    first = await client.chat(req)
    results: list[JsonResult] = []
    pending: list[tuple[int, JsonResult]] = []
    for i, comp in enumerate(first.samples):
        jr = JsonResult(value=None, attempts=1, fallback=None, raw_texts=[comp.text], sample_index=comp.sample_index)
        results.append(jr)
        if comp.dry_run:
            jr.fallback = "dry_run"
            continue
        parsed = adapter.parse(comp)
        if isinstance(parsed, str):
            jr.errors.append(parsed)
            pending.append((i, jr))
        else:
            jr.value = parsed

    async def retry(i: int, jr: JsonResult) -> None:
        for a in range(1, max_attempts):
            comp = (await client.chat(replace(req, n=1, first_sample=base + i + a * n))).samples[0]
            jr.attempts += 1
            jr.raw_texts.append(comp.text)
            parsed = adapter.parse(comp)
            if not isinstance(parsed, str):
                jr.value, jr.sample_index = parsed, comp.sample_index
                return
            jr.errors.append(parsed)
        s = "" if jr.attempts == 1 else "s"
        jr.fallback = f"no valid JSON after {jr.attempts} attempt{s}; last error: {jr.errors[-1]}"
        client.usage.note_fallback(req.tag, jr.fallback)

    await asyncio.gather(*(retry(i, jr) for i, jr in pending))
    return results


async def chat_json(client: LM, request: ChatRequest, adapter: JsonAdapter, max_attempts: int = 3) -> JsonResult:
    """One validated answer (request.n is taken as 1)."""
    return (await chat_json_samples(client, replace(request, n=1), adapter, max_attempts))[0]


def run_json_batch(client: LM, requests: Sequence[ChatRequest], adapter: JsonAdapter, max_attempts: int = 3,
                   desc: str = "LLM json") -> list[list[JsonResult]]:
    """Synchronous batch: for each request, its n validated JsonResults (order preserved)."""
    return client.run_async(_json_batch(client, list(requests), adapter, max_attempts, desc))


async def _json_batch(client: LM, requests: list[ChatRequest], adapter: JsonAdapter, max_attempts: int,
                      desc: str) -> list[list[JsonResult]]:
    from .client import Progress

    bar = Progress(len(requests), desc, enabled=client.cfg.progress, usage=client.usage)

    async def one(r: ChatRequest) -> list[JsonResult]:
        out = await chat_json_samples(client, r, adapter, max_attempts)
        bar.update(0, failed=any(j.value is None for j in out))
        return out

    try:
        out = await asyncio.gather(*(one(r) for r in requests), return_exceptions=True)
    finally:
        bar.close()
    for x in out:
        if isinstance(x, BaseException):
            raise x  # every other request has settled (and is cached)
    return out
