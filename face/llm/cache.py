"""Persistent per-sample LLM cache: one SQLite file (WAL mode) in cache_dir, and `CachingLM`,
the layer of the stack that serves samples from it and stores new ones.

One row per *sample*: key = sha256 of the canonical JSON of everything that
determines that sample (model, messages, sampling parameters, response format,
logprob settings, base seed, sample index). The API key and the base_url are
never part of a key or a row. Samples are committed as soon as they arrive --
everything that arrived during one turn of the event loop in one transaction --
so a killed run loses nothing that finished. WAL + busy_timeout + one short
transaction per write make it safe for many asyncio tasks (one connection,
one thread) and for several processes sharing the file.

`CachingLM.chat(req)` looks every sample of the request up, sends only the missing ones (one
sub-request per consecutive run of at most `n_per_request` indices) and stores each run as
soon as it arrives. Dry-run placeholders are never stored. For a request with an `adapter` (a
validator), every sample is parsed before it is stored: an invalid one is stored *marked invalid*
(`"invalid": reason` in its payload; the key is unchanged) and always comes back with
`Completion.error` set, never as a valid sample -- so a rerun replays the same decision for free.
Cached samples are re-validated on read, so answers cached before validation existed are caught too.
"""
from __future__ import annotations

import asyncio
import functools
import hashlib
import json
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from .base import ChatRequest, ChatResult, Completion, TokenLogprob, merge, raise_first, request_params, runs, validate
from .store import CACHE_FILE, SampleCache, check_cache_dir  # noqa: F401 - the cache's store, named from here too

_decode = functools.lru_cache(maxsize=10_000)(json.loads)  # a payload's JSON (read only): answers repeat
_INDEX_MARK = -7_319_046_251  # an integer no request uses: marks where sample_index goes in the canonical JSON


def request_keys(cfg: Any, model: str, req: ChatRequest, indices: Iterable[int]) -> dict[int, str]:
    """The cache key of each sample ``i`` in ``indices`` of ``req`` sent to ``model`` with the settings ``cfg``: the
    sha256 of the canonical JSON of everything that determines it (unchanged since the first cache was written:
    fixtures test it). The fields are serialised and hashed once, then the index added (the canonical JSON of an int
    is its decimal string)."""
    fields = {"model": model, "messages": [list(m) for m in req.messages], **request_params(cfg, req),
              "seed": cfg.seed, "sample_index": _INDEX_MARK}
    text = json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    # the last mark is the index's own: the keys sorted after "sample_index" hold numbers, not text or objects
    head, tail = (part.encode("utf-8") for part in text.rsplit(f'"sample_index":{_INDEX_MARK}', 1))
    start = hashlib.sha256(head + b'"sample_index":')  # the long part hashed once, then copied per index
    out = {}
    for i in indices:
        h = start.copy()
        h.update(str(int(i)).encode() + tail)
        out[i] = h.hexdigest()
    return out


def request_key(cfg: Any, model: str, req: ChatRequest, sample_index: int) -> str:
    """The cache key of sample ``sample_index`` of ``req`` (``request_keys``)."""
    return request_keys(cfg, model, req, [sample_index])[sample_index]


def _lp_to_json(lps: list[TokenLogprob] | None) -> list | None:
    return None if lps is None else [[t.token, t.logprob, [list(x) for x in t.top]] for t in lps]


def _lp_from_json(data: list | None) -> list[TokenLogprob] | None:
    return None if data is None else [TokenLogprob(t, lp, [(a, b) for a, b in top]) for t, lp, top in data]


class CachingLM:
    """Serves samples from the store, sends only the missing ones and stores them (see the module doc); with other
    processes on the same cache, only the ones nobody else is sending (face/llm/claims.py)."""

    def __init__(self, inner: Any, store: SampleCache, cfg: Any, model: str):
        self.inner, self.store, self.cfg, self.model = inner, store, cfg, model
        # requests the read-ahead found not wholly cached: their keys and the payloads it did find (chat uses them)
        self.known: dict[ChatRequest, tuple[dict[int, str], dict[str, str]]] = {}

    def keys_for(self, req: ChatRequest) -> dict[int, str]:
        """The cache key of every sample of `req`."""
        return request_keys(self.cfg, self.model, req, req.indices)

    def _cached(self, req: ChatRequest) -> tuple[dict[int, str], dict[int, Completion]]:
        known = self.known.pop(req, None)
        if known is None:
            keys = self.keys_for(req)
            hit: dict[str, Any] = self.store.get_many(keys.values())
        else:  # looked up ahead: a sample stored since then is found when it is claimed
            keys, hit = known
        return keys, {i: self._sample(p, i, req) for i, k in keys.items() if (p := hit.get(k)) is not None}

    def _sample(self, payload: dict | str, i: int, req: ChatRequest) -> Completion:
        p = _decode(payload) if isinstance(payload, str) else payload
        return validate(Completion(p["text"], p["finish_reason"], _lp_from_json(p.get("logprobs")), cached=True,
                                   sample_index=i, error=p.get("invalid")), req.adapter)

    def results(self, reqs: list[ChatRequest], keys: list[dict[int, str]], hit: dict) -> list[ChatResult | None]:
        """The results of `reqs` from looked-up payloads (dicts, or their JSON text); None where one is missing
        (its keys and what was found are kept for ``chat``)."""
        out: list[ChatResult | None] = []
        if len(self.known) > 10_000:  # requests never asked (identical ones share a result): let them go
            self.known.clear()
        for req, ks in zip(reqs, keys):
            payloads: list[Any] = [hit.get(ks[i]) for i in req.indices]
            if any(p is None for p in payloads):
                self.known[req] = (ks, {k: p for k in ks.values() if (p := hit.get(k)) is not None})
                out.append(None)
                continue
            samples = [self._sample(p, i, req) for i, p in zip(req.indices, payloads)]
            out.append(ChatResult(request=req, samples=samples, cached_samples=req.n))
        return out

    async def chat(self, req: ChatRequest) -> ChatResult:
        keys, got = self._cached(req)
        missing = [i for i in req.indices if i not in got]
        parts: list[ChatResult] = []
        try:
            while missing:  # more than once only when another process let go of samples this one waited for
                missing = await self._get(req, keys, missing, got, parts)
        except BaseException:  # failed or cancelled -- even between its claim and its send: its claims given back
            self.store.release(keys.values())
            raise
        return merge(req, parts, got)

    async def _get(self, req: ChatRequest, keys: dict[int, str], missing: list[int], got: dict[int, Completion],
                   parts: list[ChatResult]) -> list[int]:
        """Send the missing samples this process may send, wait for the ones another is sending; the samples
        found go to ``got``, the results sent to ``parts``. Returns the samples still missing (let go by their
        sender: to claim again)."""
        mine, theirs = missing, set()
        if not self.cfg.dry_run:  # (a dry run sends nothing: nothing to claim)
            claimed = await self.store.claim([keys[i] for i in missing])
            got.update((i, self._sample(claimed.found[keys[i]], i, req)) for i in missing if keys[i] in claimed.found)
            mine = [i for i in missing if keys[i] in claimed.mine]
            theirs = {keys[i] for i in missing if keys[i] in claimed.theirs}
        subs = [req if r == list(req.indices) else replace(req, n=len(r), first_sample=r[0])
                for r in runs(mine, self.cfg.n_per_request)]
        jobs = [self._fetch(s, keys) for s in subs] + ([self.store.claims.wait(theirs)] if theirs else [])
        # the sub-requests' results, then the wait's (found, free) when another process sends; one job (the common
        # case) awaited without a task
        done: list[Any] = [await jobs[0]] if len(jobs) == 1 else await asyncio.gather(*jobs, return_exceptions=True)
        raise_first([p for p in done if isinstance(p, BaseException)])
        parts += done[:len(subs)]
        if not theirs:
            return []
        found, free = done[-1]
        got.update((i, self._sample(found[keys[i]], i, req)) for i in missing if keys[i] in found)
        return [i for i in missing if keys[i] in free]

    async def _fetch(self, req: ChatRequest, keys: dict[int, str]) -> ChatResult:
        res = await self.inner.chat(req)
        for s in res.samples:
            validate(s, req.adapter)
        self.store.put_many(((keys[s.sample_index], self.model, req.tag, s.sample_index, _payload(s))
                             for s in res.samples if not s.dry_run), release=[keys[i] for i in req.indices])
        return res


def _payload(s: Completion) -> dict:
    p = {"text": s.text, "finish_reason": s.finish_reason, "logprobs": _lp_to_json(s.logprobs)}
    if s.error is not None:
        p["invalid"] = s.error  # never served as a valid sample
    return p
