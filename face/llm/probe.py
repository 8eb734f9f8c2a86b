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
import fcntl
import json
import logging
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from face.files import atomic_write_text

from .base import ChatRequest, ChatResult, LLMCallError, LLMRequestRefused
from .config import LLMConfig
from .transport import OpenAITransport
from .usage import BudgetExceeded, Piece, Usage

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


async def probe(cfg: LLMConfig, usage: Usage, base_url: str, model: str, cache_dir: str | os.PathLike | None,
                http_client: Callable[[Any], Any] | None = None) -> Capabilities | None:
    """Ask the endpoint what it honours, through the probe's own transport (closed after it: retried, counted in
    ``usage`` and capped as every request is: ``send``), remember and report its answer; None when the budget has no
    room for the probe. ``http_client``: the transport's (a server without a socket)."""
    transport = OpenAITransport(cfg.replace(timeout_s=min(cfg.timeout_s, 30.0)), base_url, model, http_client)
    msgs = [{"role": "user", "content": "Answer with one word: ok"}]
    base = {"model": model, "messages": msgs, "max_tokens": 1, "temperature": 1.0, "seed": 0}
    schema = {"type": "json_schema", "json_schema": {"name": "probe", "schema": {
        "type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}}}
    try:
        replies: tuple[dict | None | BaseException, dict | None | BaseException] = await asyncio.gather(
            send(usage, transport, {**base, "n": 3, "logprobs": True, "top_logprobs": 1}),
            send(usage, transport, {**base, "max_tokens": 8, "response_format": schema}), return_exceptions=True)
        full, js = replies
        if isinstance(full, BaseException):
            raise full
        if isinstance(js, BaseException):
            raise js
        if full is None:  # n or logprobs rejected: ask for n alone
            nreply = await send(usage, transport, {**base, "n": 3})
            logprobs = None if nreply is None else False
        else:
            nreply = full
            logprobs = any((c.get("logprobs") or {}).get("content") for c in full.get("choices") or [])
    except BudgetExceeded as e:  # no room for the probe: trust the config, for this run only
        if usage.misreport and usage.max_cost_usd is not None:  # an endpoint misreport under a cap: the stop
            raise
        log.warning("the endpoint probe does not fit the LLM budget (%s); trusting llm.n_per_request=%d "
                    "as configured", str(e).split(" (tag=")[0], cfg.n_per_request)
        return None
    except LLMRequestRefused:
        raise
    except LLMCallError as e:  # failed after its retries: the run stops (never remembered)
        raise LLMCallError(f"the endpoint probe of {base_url} failed: {e}", retries=e.retries) from e
    finally:
        await transport.aclose()
    seen = len((nreply or {}).get("choices") or [])
    caps = Capabilities(base_url=base_url, model=model, n=seen == 3, max_n_seen=seen, logprobs=logprobs,
                        json_schema=js is not None, probed_at=time.time())
    save(cache_dir, caps)
    log.info("endpoint %s (%s): n %s, logprobs %s, JSON schema %s", base_url, model,
             "honoured" if caps.n else f"not honoured ({caps.max_n_seen} choice(s) for n=3)",
             caps.logprobs, caps.json_schema)
    for what, has, key in (("log-probabilities", caps.logprobs, "supports_logprobs"),
                           ("JSON-schema answers", caps.json_schema, "supports_json_schema")):
        if has is False and getattr(cfg, key):
            log.warning("endpoint %s does not seem to support %s; set llm.%s=false if requests fail",
                        base_url, what, key)
    return caps


def endpoint_key(base_url: str, model: str) -> str:
    """What the saved capabilities are filed under: the endpoint and the model (load and save alike)."""
    return f"{base_url.rstrip('/')} {model}"


def load(cache_dir: str | os.PathLike | None, base_url: str, model: str) -> Capabilities | None:
    key = endpoint_key(base_url, model)
    if key in _MEMORY or cache_dir is None:
        return _MEMORY.get(key)
    with contextlib.suppress(OSError, ValueError, TypeError):
        if d := json.loads((Path(cache_dir) / ENDPOINTS_FILE).read_text()).get(key):
            _MEMORY[key] = Capabilities(**{k: d.get(k) for k in Capabilities.__dataclass_fields__})
            return _MEMORY[key]
    return None


def save(cache_dir: str | os.PathLike | None, caps: Capabilities) -> None:
    key = endpoint_key(caps.base_url, caps.model)
    _MEMORY[key] = caps
    if cache_dir is None:
        return
    p = Path(cache_dir) / ENDPOINTS_FILE  # (the folder: made by _one_prober)
    try:
        doc = {}
        with contextlib.suppress(OSError, ValueError):
            doc = json.loads(p.read_text())
        doc[key] = asdict(caps)
        atomic_write_text(p, json.dumps(doc, indent=1, sort_keys=True))
    except OSError as e:
        log.warning("could not remember the endpoint's capabilities in %s: %s", p, e)


def forget() -> None:
    """Drop every remembered answer from memory (as a new process starts)."""
    _MEMORY.clear()


# ---------------------------------------------------------------- the client's use of it

def fitted(cfg: LLMConfig, usage: Usage, base_url: str, model: str,
           loop: Callable[[], asyncio.AbstractEventLoop] | None,
           http_client: Callable[[Any], Any] | None = None) -> LLMConfig:
    """The config with `n_per_request` fitted to the endpoint: n is used only where honoured (probed once per base URL
    and model, on ``loop()``, remembered; no loop: not probed). Nothing is sent in a dry run. Without room in the budget
    for the probe the config is trusted; a probe that fails after its retries stops the run (LLMCallError).
    ``http_client``: the transport's (a server without a socket)."""
    if not cfg.probe or cfg.n_per_request <= 1 or cfg.batch:
        return cfg
    cache_dir = cfg.cache_dir if cfg.cache else None
    caps = load(cache_dir, base_url, model)
    if caps is None and not cfg.dry_run and loop is not None:
        with _one_prober(cache_dir):  # processes sharing the cache: one probes, the others read its answer
            caps = load(cache_dir, base_url, model) or loop().run_until_complete(
                probe(cfg, usage, base_url, model, cache_dir, http_client))
    return cfg if caps is None or caps.n else cfg.replace(n_per_request=1)


@contextlib.contextmanager
def _one_prober(cache_dir: str | os.PathLike | None) -> Iterator[None]:
    """Hold ``<cache_dir>/endpoints.json.lock`` (an exclusive ``flock``, let go when the process ends, however it
    ends) for the block: processes that share a cache probe an endpoint once between them."""
    with contextlib.ExitStack() as held:
        with contextlib.suppress(OSError):  # no lock to be had: each process probes for itself
            if cache_dir is not None:
                Path(cache_dir).mkdir(parents=True, exist_ok=True)
                f = held.enter_context(open(Path(cache_dir) / (ENDPOINTS_FILE + ".lock"), "a"))
                fcntl.flock(f, fcntl.LOCK_EX)
        yield


async def send(usage: Usage, transport: OpenAITransport, body: dict[str, Any]) -> dict | None:
    """One probe request, as every request: within the budget (its bound reserved), retried by the transport, its
    tokens, cost and retries counted under the tag ``probe``. None when the endpoint refuses it as it is (a 4xx
    other than 401 / 403 / 404: this feature is not accepted)."""
    req = ChatRequest(body["messages"], n=body.get("n", 1), tag="probe")
    piece = Piece.of("probe", req.messages, body["max_tokens"], req.n, body.get("response_format"))
    reserved = usage.reserve(piece)
    t0 = time.perf_counter()
    try:
        data, retries = await transport.post(body, "probe")
    except BaseException as e:
        usage.release(reserved)
        usage.retries += getattr(e, "retries", 0)
        usage.add(ChatResult(request=req, samples=[], latency_s=time.perf_counter() - t0), error=e)
        if isinstance(e, LLMRequestRefused) and e.status not in (401, 403, 404):
            return None
        raise
    usage.retries += retries
    res = ChatResult(request=req, samples=[], http_requests=1, http_samples=req.n, retries=retries,
                     latency_s=time.perf_counter() - t0)
    answers = sum(len(((c.get("message") or {}).get("content") or "").encode()) for c in data.get("choices") or [])
    try:
        usage.settle(piece, reserved, data.get("usage"), answers, res.latency_s, into=res)
    except BudgetExceeded as e:  # a misreport under a cap: recorded (usage.settle), then the run stops
        usage.add(res, error=e)
        raise
    usage.add(res)
    return data
