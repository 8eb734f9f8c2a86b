"""Know the endpoint: probe what an OpenAI-compatible endpoint honours, once per base URL and model.

Two tiny requests (one token each, run together): one with `n=3`, `logprobs` and `top_logprobs=1`
(three choices back: n is honoured; token log-probabilities back: logprobs work), one with a
JSON-schema `response_format` (accepted: constrained answers work). The answer is remembered in
`<llm.cache_dir>/endpoints.json` (and in memory), keyed by base URL and model, so later runs send
nothing. Probe requests are requests like any other, only not samples: retried on every transient fault with
the transport's policy, counted in the usage under the tag "probe" and subject to `llm.max_calls` /
`llm.max_cost_usd` (when the budget has no room for them the probe is skipped and the config trusted; nothing
is remembered then). A probe that fails after its retries stops the run; it is never remembered.

Only `n` is acted upon (`LLMClient`: `llm.n_per_request` > 1 is used where n is honoured, one request
per sample where it is not). Log-probabilities and JSON schemas are part of the cache keys of what
is asked, so a mismatch with `llm.supports_logprobs` / `llm.supports_json_schema` is reported, never
switched silently. `llm.probe=false` trusts the config as it is.
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from face.files import atomic_write_text

log = logging.getLogger("face.llm")

ENDPOINTS_FILE = "endpoints.json"
_MEMORY: dict[str, Capabilities] = {}


@dataclass
class Capabilities:
    base_url: str
    model: str
    n: bool  # several choices per request
    max_n_seen: int  # choices returned for n=3
    logprobs: bool | None  # None: unknown (the probe failed for another reason)
    json_schema: bool | None
    probed_at: float = 0.0

    @classmethod
    def from_dict(cls, d: dict) -> Capabilities:
        return cls(**{k: d.get(k) for k in cls.__dataclass_fields__})


def endpoint_key(base_url: str, model: str) -> str:
    return f"{base_url.rstrip('/')} {model}"


async def _ask(send: Any, body: dict) -> dict | None:
    """The reply of one probe request; None when the endpoint refuses it as it is (a 4xx other than 401 / 403 /
    404: this feature is not accepted). ``send`` retries transient faults like any other request."""
    from .base import LLMRequestRefused

    try:
        return await send(body)
    except LLMRequestRefused as exc:
        if exc.status in (401, 403, 404):
            raise
        return None


async def probe(send: Any, base_url: str, model: str) -> Capabilities:
    """Ask the endpoint what it honours; ``send(body) -> completion`` posts one request (retried, counted and
    capped as every request is: ``LLMClient``)."""
    msgs = [{"role": "user", "content": "Answer with one word: ok"}]
    base = {"model": model, "messages": msgs, "max_tokens": 1, "temperature": 1.0, "seed": 0}
    schema = {"type": "json_schema", "json_schema": {"name": "probe", "schema": {
        "type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}}}
    full, js = await asyncio.gather(_ask(send, {**base, "n": 3, "logprobs": True, "top_logprobs": 1}),
                                    _ask(send, {**base, "max_tokens": 8, "response_format": schema}),
                                    return_exceptions=True)
    for r in (full, js):
        if isinstance(r, BaseException):
            raise r
    logprobs: bool | None
    if full is None:  # n or logprobs rejected: ask for n alone
        nreply = await _ask(send, {**base, "n": 3})
        logprobs = None if nreply is None else False
    else:
        nreply = full
        logprobs = any((c.get("logprobs") or {}).get("content") for c in full.get("choices") or [])
    seen = len((nreply or {}).get("choices") or [])
    return Capabilities(base_url=base_url, model=model, n=seen == 3, max_n_seen=seen, logprobs=logprobs,
                        json_schema=js is not None, probed_at=time.time())


def load(cache_dir: str | os.PathLike | None, base_url: str, model: str) -> Capabilities | None:
    key = endpoint_key(base_url, model)
    if key in _MEMORY:
        return _MEMORY[key]
    if cache_dir is None:
        return None
    p = Path(cache_dir) / ENDPOINTS_FILE
    with contextlib.suppress(OSError, ValueError, TypeError):
        d = json.loads(p.read_text()).get(key)
        if d:
            _MEMORY[key] = Capabilities.from_dict(d)
            return _MEMORY[key]
    return None


def save(cache_dir: str | os.PathLike | None, caps: Capabilities) -> None:
    key = endpoint_key(caps.base_url, caps.model)
    _MEMORY[key] = caps
    if cache_dir is None:
        return
    p = Path(cache_dir) / ENDPOINTS_FILE
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        try:
            doc = json.loads(p.read_text())
        except (OSError, ValueError):
            doc = {}
        doc[key] = asdict(caps)
        atomic_write_text(p, json.dumps(doc, indent=1, sort_keys=True))
    except OSError as e:
        log.warning("could not remember the endpoint's capabilities in %s: %s", p, e)


def forget(base_url: str | None = None, model: str | None = None) -> None:
    """Drop remembered answers from memory (all, or one endpoint's)."""
    if base_url is None:
        _MEMORY.clear()
    else:
        _MEMORY.pop(endpoint_key(base_url, model or ""), None)
