"""A fault-injecting HTTP proxy for OpenAI-compatible endpoints (test tool).

Put it between the client and any server (`llm.base_url=<proxy>/v1`): it forwards
`POST /v1/chat/completions` and injects, on a deterministic share `rate` of requests (chosen by the
hash of the request body, on its first arrival only, so a retry of the same request goes through),
one of these faults:

  transport level   429 (Retry-After), 500 (JSON error), html502 (an HTML 502 page from a "gateway"),
                    timeout (no answer before the client's timeout), reset (connection aborted),
                    cut_json (HTTP 200 whose JSON body is cut in half), html200 (HTTP 200, HTML page)
  answer level      truncated (the answer cut in half, finish_reason "length"), garbled (the answer
                    replaced by text that is not the expected JSON)

Transport faults must be retried by the transport; answer faults are valid HTTP replies whose
content fails the request's adapter (face.llm.validating re-draws them).

    with FaultProxy(upstream="http://127.0.0.1:8000/v1", rate=0.2) as proxy:
        ... llm.base_url = proxy.base_url ...
    proxy.log  # one entry per request: {"hash", "attempt", "fault"}

CLI: python -m face.testing.faultproxy --upstream URL --rate 0.2 --kinds 429,500,reset --log FILE
"""
from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import signal
import threading
from typing import Any

from aiohttp import ClientSession, ClientTimeout, web

from face.llm.background import BackgroundLoop

TRANSPORT_KINDS = ("429", "500", "html502", "timeout", "reset", "cut_json", "html200")
ANSWER_KINDS = ("truncated", "garbled")
ALL_KINDS = TRANSPORT_KINDS + ANSWER_KINDS

_HTML = (b"<html><head><title>502 Bad Gateway</title></head><body><center><h1>502 Bad Gateway</h1>"
         b"</center><hr><center>nginx</center></body></html>")


def _unit(text: str) -> float:
    return int(hashlib.sha256(text.encode()).hexdigest()[:13], 16) / float(16 ** 13)


class FaultProxy:
    def __init__(self, upstream: str, rate: float = 0.2, kinds: tuple[str, ...] | list[str] = TRANSPORT_KINDS,
                 hang_s: float = 2.0, retry_after_s: float = 0.01, host: str = "127.0.0.1", port: int = 0,
                 salt: str = "", log_file: str | None = None):
        bad = set(kinds) - set(ALL_KINDS)
        if bad:
            raise ValueError(f"unknown fault kinds {sorted(bad)}; choose from {ALL_KINDS}")
        self.upstream = upstream.rstrip("/")
        self.rate, self.kinds, self.hang_s, self.retry_after_s = rate, tuple(kinds), hang_s, retry_after_s
        self.host, self.port, self.salt = host, port, salt
        self.log: list[dict[str, Any]] = []
        self.log_file = log_file
        self._attempts: dict[str, int] = {}
        self._lock = threading.Lock()
        self._bg: BackgroundLoop | None = None
        self._runner: web.AppRunner | None = None
        self._session: ClientSession | None = None
        self.base_url: str | None = None

    # ---- faults ---------------------------------------------------------
    def pick(self, h: str, attempt: int) -> str | None:
        if attempt > 0 or not self.kinds or _unit(self.salt + h + "fault") >= self.rate:
            return None
        return self.kinds[int(hashlib.sha256((self.salt + h + "kind").encode()).hexdigest()[:8], 16)
                          % len(self.kinds)]

    def faults(self) -> list[str]:
        return [e["fault"] for e in self.log if e["fault"]]

    async def _forward(self, raw: bytes, headers: dict[str, str]) -> tuple[int, bytes, str]:
        assert self._session is not None
        async with self._session.post(self.upstream + "/chat/completions", data=raw, headers=headers) as r:
            return r.status, await r.read(), r.headers.get("Content-Type", "application/json")

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        h = hashlib.sha256(raw).hexdigest()
        with self._lock:
            attempt = self._attempts.get(h, 0)
            self._attempts[h] = attempt + 1
        fault = self.pick(h, attempt)
        entry = {"hash": h[:16], "attempt": attempt, "fault": fault}
        with self._lock:
            self.log.append(entry)
            if self.log_file:
                with open(self.log_file, "a", encoding="utf-8") as f:
                    f.write(json.dumps(entry) + "\n")
        if fault == "429":
            return web.json_response({"error": {"message": "rate limited (proxy)"}}, status=429,
                                     headers={"Retry-After": f"{self.retry_after_s:g}"})
        if fault == "500":
            return web.json_response({"error": {"message": "internal error (proxy)"}}, status=500)
        if fault == "html502":
            return web.Response(body=_HTML, status=502, content_type="text/html")
        if fault == "html200":
            return web.Response(body=_HTML, status=200, content_type="text/html")
        if fault == "timeout":
            await asyncio.sleep(self.hang_s)
            return web.json_response({"error": {"message": "too late (proxy)"}}, status=504)
        if fault == "reset":
            if request.transport is not None:
                request.transport.abort()
            return web.Response(status=500)
        fwd = {k: v for k, v in request.headers.items() if k.lower() in ("authorization", "content-type")}
        status, body, ctype = await self._forward(raw, fwd)
        if fault == "cut_json":
            return web.Response(body=body[: max(1, len(body) // 2)], status=200, content_type="application/json")
        if fault in ANSWER_KINDS and status == 200:
            data = json.loads(body)
            for ch in data.get("choices", []):
                text = (ch.get("message") or {}).get("content") or ""
                if fault == "truncated":
                    ch["message"]["content"], ch["finish_reason"] = text[: max(1, len(text) // 2)], "length"
                else:
                    ch["message"]["content"] = "As an AI judge I would say it is quite good overall."
            body = json.dumps(data).encode()
        return web.Response(body=body, status=status, content_type=ctype.split(";")[0])

    # ---- lifecycle --------------------------------------------------------
    async def _start(self) -> None:
        self._session = ClientSession(timeout=ClientTimeout(total=600))
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self._chat)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.2)
        await self._runner.setup()
        await web.TCPSite(self._runner, self.host, self.port).start()
        self.port = self._runner.addresses[0][1]
        self.base_url = f"http://{self.host}:{self.port}/v1"

    async def _cleanup(self) -> None:
        if self._session is not None:
            await self._session.close()
        if self._runner is not None:
            await self._runner.cleanup()

    def start(self) -> FaultProxy:
        self._bg = BackgroundLoop("fault-proxy")
        self._bg.start(self._start, self._cleanup)
        return self

    def stop(self) -> None:
        if self._bg is not None:
            self._bg.stop()
            self._bg = None

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Fault-injecting proxy for an OpenAI-compatible endpoint")
    ap.add_argument("--upstream", required=True)
    ap.add_argument("--rate", type=float, default=0.2)
    ap.add_argument("--kinds", default=",".join(TRANSPORT_KINDS))
    ap.add_argument("--hang", type=float, default=2.0)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--log", default=None)
    a = ap.parse_args(argv)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    with FaultProxy(a.upstream, a.rate, tuple(k for k in a.kinds.split(",") if k), a.hang, port=a.port,
                    log_file=a.log) as proxy:
        print(f"READY {proxy.base_url}", flush=True)
        while not stop.wait(0.2):
            pass


if __name__ == "__main__":
    main()
