"""Fault injection, written once for the scripted server and the fault proxy.

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
"""
from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from .service import Reply, error_body

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
