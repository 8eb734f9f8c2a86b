"""A fault-injecting HTTP proxy for OpenAI-compatible endpoints (test tool).

Put it between the client and any server (``llm.base_url=<proxy>/v1``): it forwards ``POST /v1/chat/completions``
and injects, on a deterministic share ``rate`` of requests (chosen by the hash of the request body, on its first
arrival only, so a retry of the same request goes through), one of the faults of ``face.testing.faults``:
transport faults (429, 500, html502, timeout, reset, cut_json, html200) that the transport must retry, and answer
faults (truncated, garbled, malformed) whose content fails the request's adapter (face.llm re-draws them).

    with FaultProxy(upstream="http://127.0.0.1:8000/v1", rate=0.2) as proxy:
        ... llm.base_url = proxy.base_url ...
    proxy.log  # one entry per request: {"hash", "attempt", "fault"}
"""
from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import AsyncIterator, Sequence

from aiohttp import ClientSession, ClientTimeout, web

from .faults import ANSWER_KINDS, TRANSPORT_KINDS, FaultInjector, fault_reply, half, spoil
from .service import Served, abort, make_app, response

__all__ = ["ANSWER_KINDS", "TRANSPORT_KINDS", "FaultProxy"]


class FaultProxy(Served):
    def __init__(self, upstream: str, rate: float = 0.2, kinds: Sequence[str] = TRANSPORT_KINDS,
                 hang_s: float = 2.0, retry_after_s: float = 0.01):
        super().__init__("fault-proxy")
        self.injector = FaultInjector(rate, kinds)
        self.upstream = upstream.rstrip("/")
        self.hang_s, self.retry_after_s = hang_s, retry_after_s
        self._session: ClientSession | None = None

    def faults(self) -> list[str]:
        return [e["fault"] for e in self.log if e["fault"]]

    def _app(self) -> web.Application:
        app = make_app(64 * 1024 * 1024, "fault proxy: ")
        app.router.add_post("/v1/chat/completions", self._chat)
        app.cleanup_ctx.append(self._session_ctx)
        return app

    async def _session_ctx(self, app: web.Application) -> AsyncIterator[None]:
        async with ClientSession(timeout=ClientTimeout(total=600)) as self._session:
            yield

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        h = hashlib.sha256(raw).hexdigest()
        attempt, fault = self.injector.draw(h)
        self.record({"hash": h[:16], "attempt": attempt, "fault": fault})
        reply = await fault_reply(fault, source="proxy", retry_after_s=self.retry_after_s, hang_s=self.hang_s,
                                  wait=asyncio.sleep, disconnect=lambda: abort(request))
        if reply is not None:
            return response(reply)
        fwd = {k: v for k, v in request.headers.items() if k.lower() in ("authorization", "content-type")}
        assert self._session is not None
        async with self._session.post(self.upstream + "/chat/completions", data=raw, headers=fwd) as r:
            status, body, ctype = r.status, await r.read(), r.headers.get("Content-Type", "application/json")
        if fault == "cut_json":
            return web.Response(body=half(body), status=200, content_type="application/json")
        if fault in ("truncated", "garbled", "malformed") and status == 200:
            body = _spoil_answers(fault, body)
        return web.Response(body=body, status=status, content_type=ctype.split(";")[0])


def _spoil_answers(fault: str, body: bytes) -> bytes:
    """An upstream chat completion with every choice's answer truncated or garbled."""
    data = json.loads(body)
    for ch in data.get("choices", []):
        text = (ch.get("message") or {}).get("content") or ""
        if fault == "truncated":
            ch["message"]["content"], ch["finish_reason"] = half(text), "length"
        else:
            ch["message"]["content"] = spoil(fault, text)
    return json.dumps(data).encode()

