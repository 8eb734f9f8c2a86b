"""Know the endpoint: probe what an OpenAI-compatible endpoint honours, once per base URL and model.

Two tiny requests (one token each, run together): one with `n=3`, `logprobs` and `top_logprobs=1`
(three choices back: n is honoured; token log-probabilities back: logprobs work), one with a
JSON-schema `response_format` (accepted: constrained answers work). The answer is remembered in
`<llm.cache_dir>/endpoints.json` (and in memory), keyed by base URL and model, so later runs send
nothing. Probe requests are not samples: they are neither cached as samples nor counted in the usage.

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


def _status(exc: BaseException) -> int | None:
    return getattr(exc, "status_code", None)


async def _post(api: Any, body: dict) -> dict | None:
    """The reply of one probe request; None when the endpoint rejects the request (4xx)."""
    try:
        raw = await api.post("/chat/completions", cast_to=bytes, body=body)
    except Exception as exc:  # 400 / 422: this feature is not accepted; anything else: let the caller know
        if _status(exc) is not None and 400 <= _status(exc) < 500 and _status(exc) not in (401, 403, 404, 408, 429):
            return None
        raise
    return json.loads(raw)


async def probe(api: Any, base_url: str, model: str) -> Capabilities:
    """Ask the endpoint (an openai.AsyncOpenAI bound to it) what it honours."""
    msgs = [{"role": "user", "content": "Answer with one word: ok"}]
    base = {"model": model, "messages": msgs, "max_tokens": 1, "temperature": 1.0, "seed": 0}
    schema = {"type": "json_schema", "json_schema": {"name": "probe", "schema": {
        "type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}}}
    full, js = await asyncio.gather(_post(api, {**base, "n": 3, "logprobs": True, "top_logprobs": 1}),
                                    _post(api, {**base, "max_tokens": 8, "response_format": schema}),
                                    return_exceptions=True)
    for r in (full, js):
        if isinstance(r, BaseException):
            raise r
    logprobs: bool | None
    if full is None:  # n or logprobs rejected: ask for n alone
        nreply = await _post(api, {**base, "n": 3})
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
        tmp = p.with_name(f".{p.name}.{os.getpid()}.part")
        tmp.write_text(json.dumps(doc, indent=1, sort_keys=True))
        os.replace(tmp, p)
    except OSError as e:
        log.warning("could not remember the endpoint's capabilities in %s: %s", p, e)


def forget(base_url: str | None = None, model: str | None = None) -> None:
    """Drop remembered answers from memory (all, or one endpoint's)."""
    if base_url is None:
        _MEMORY.clear()
    else:
        _MEMORY.pop(endpoint_key(base_url, model or ""), None)
