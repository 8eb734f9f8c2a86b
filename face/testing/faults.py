"""Fault injection, written once for the scripted server and the fault proxy (``FaultProxy``).

Which request is faulted (``FaultInjector``): a deterministic share ``rate`` of requests, chosen by the hash of the
request, on its first ``per_request`` arrivals only, so that a retry of the same request goes through; or the next
requests, in order, with the kinds given to ``force``. How (``KINDS``):

  transport   429 (with Retry-After), 500 (a JSON error), html502 (an HTML 502 page from a "gateway"), timeout (no
              answer for ``hang_s``, then a 504), reset or disconnect (the connection aborted), cut_json (HTTP 200
              whose JSON body is cut in half), html200 (HTTP 200, an HTML page)
  answer      truncated (the answer cut in half, finish_reason "length"), garbled (the answer replaced by prose
              that is not the expected JSON), malformed (half the answer, then text that is not JSON)

Transport faults must be retried by the transport (``fault_reply`` gives the reply; ``cut_json``: ``half`` the body);
answer faults are valid HTTP replies whose content fails the request's adapter (``half``, ``spoil``;
face.llm re-draws them).

``FaultProxy``: a fault-injecting HTTP proxy for OpenAI-compatible endpoints (test tool).

Put it between the client and any server (``llm.base_url=<proxy>/v1``): it forwards ``POST /v1/chat/completions``
and injects, on a deterministic share ``rate`` of requests (chosen by the hash of the request body, on its first
arrival only, so a retry of the same request goes through), one of the faults above:
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
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TypeVar

from aiohttp import ClientSession, ClientTimeout, web

from .service import Reply, Served, abort, error_body, make_app, response

TRANSPORT_KINDS = ("429", "500", "html502", "timeout", "reset", "cut_json", "html200")
ANSWER_KINDS = ("truncated", "garbled")
# every kind either server injects: "disconnect" is "reset" under the scripted server's name; "malformed" keeps half
# of the answer before the text that is not JSON
KINDS = (*TRANSPORT_KINDS, "disconnect", *ANSWER_KINDS, "malformed")
STATUS = {"429": 429, "500": 500, "html502": 502, "timeout": 504}  # the HTTP status of a fault's reply (else 200)
_HTML = (b"<html><head><title>502 Bad Gateway</title></head><body><center><h1>502 Bad Gateway</h1>"
         b"</center><hr><center>nginx</center></body></html>")

S = TypeVar("S", str, bytes, list)


def unit(hexdigest: str) -> float:
    """A hex digest as a number in [0, 1)."""
    return int(hexdigest[:13], 16) / float(16 ** 13)


class FaultInjector:
    """Which request is faulted, and with which kind. ``mark(h, tag)`` is the hex digest a draw reads for request
    hash ``h`` (tag "fault": whether, "kind": which)."""

    def __init__(self, rate: float = 0.0, kinds: Sequence[str] = TRANSPORT_KINDS, per_request: int = 1,
                 mark: Callable[[str, str], str] | None = None):
        self.rate, self.kinds, self.per_request = rate, _known(kinds), per_request
        # the fault proxy's draw: sha256 of the request hash + what is drawn
        self.mark = mark or (lambda h, tag: hashlib.sha256((h + tag).encode()).hexdigest())
        self._attempts: dict[str, int] = {}
        self._forced: list[str] = []
        self._lock = threading.Lock()

    def force(self, *kinds: str) -> None:
        """Fault the next len(kinds) requests with these kinds, in order."""
        with self._lock:
            self._forced.extend(_known(kinds))

    def draw(self, h: str) -> tuple[int, str | None]:
        """(how many times this request arrived before, the fault it gets now or None)."""
        with self._lock:
            attempt = self._attempts.get(h, 0)
            self._attempts[h] = attempt + 1
            if self._forced:
                return attempt, self._forced.pop(0)
        return attempt, self.pick(h, attempt)

    def pick(self, h: str, attempt: int) -> str | None:
        if self.rate <= 0 or attempt >= self.per_request or not self.kinds or unit(self.mark(h, "fault")) >= self.rate:
            return None
        return self.kinds[int(self.mark(h, "kind")[:8], 16) % len(self.kinds)]

    def reset(self) -> None:
        """Forget how often each request arrived."""
        with self._lock:
            self._attempts.clear()


def _known(kinds: Sequence[str]) -> tuple[str, ...]:
    bad = set(kinds) - set(KINDS)
    if bad:
        raise ValueError(f"unknown fault kinds {sorted(bad)}; choose from {KINDS}")
    return tuple(kinds)


_ERRORS = {"429": ("rate limited", "rate_limited"), "500": ("internal error", "internal_error"),
           "timeout": ("no answer in time", "timeout")}  # a JSON error reply's message and code


async def fault_reply(kind: str | None, *, source: str, retry_after_s: float | None, hang_s: float,
                      wait: Callable[[float], Awaitable[None]], disconnect: Callable[[], None]) -> Reply | None:
    """The reply of a transport fault given before any answer exists -- 429, 500, html502, html200, and timeout's 504
    after ``wait(hang_s)`` -- whatever serves it (an aiohttp app, the in-process wire); reset / disconnect:
    ``disconnect()`` drops the connection. None: answer the request (maybe spoiled)."""
    if kind in ("reset", "disconnect"):
        disconnect()
        return 500, b"", "text/plain", {}
    if kind == "timeout":
        await wait(hang_s)
    if kind in ("html502", "html200"):
        return STATUS.get(kind, 200), _HTML, "text/html", {}
    if kind not in _ERRORS:
        return None
    message, code = _ERRORS[kind]
    headers = {"Retry-After": f"{retry_after_s:g}"} if kind == "429" and retry_after_s is not None else {}
    body = json.dumps(error_body(f"{message} ({source})", code, status=STATUS[kind])).encode()
    return STATUS[kind], body, "application/json", headers


def half(seq: S) -> S:
    """The first half of a text, a byte string or a list of tokens (at least one element)."""
    return seq[: max(1, len(seq) // 2)]


def spoil(kind: str | None, text: str) -> str:
    """An answer's text after a garbling fault (any other kind leaves it as it is)."""
    if kind == "garbled":
        return "As an AI judge I would say it is quite good overall."
    if kind == "malformed":
        return half(text) + " <<garbled output>>"
    return text


# ---------------------------------------------------------------- the fault proxy
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

