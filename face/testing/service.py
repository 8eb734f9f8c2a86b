"""What the three test servers (scripted, fault proxy, replay judge) share over HTTP.

* One error answer: every refusal, whatever its status (400, 404, 405, 413, 429, 500, 504), is JSON in the OpenAI
  shape ``{"error": {"message", "type", "code", "param"}}`` (``error_body``; the middleware of ``make_app``
  makes it so for what aiohttp itself refuses — an unknown path, a wrong method, a body over the size limit — and
  for an exception a handler did not expect, which is logged by the server, never sent).
* The request body as one JSON value (``parse_json``): a body that is not JSON, or nests deeper than the parser
  follows, is a 400 ``bad_json``; a reply whatever serves it (``Reply``), as an aiohttp response (``response``).
* A server (``Served``): its aiohttp app served by an event loop in a daemon thread of this process, and its request
  log: in memory and, if asked, appended to a JSON-lines file as requests come; a process that serves until
  SIGTERM / SIGINT or the end of its standard input (``serve``), started by ``spawn``.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Self

from aiohttp import web

from face.llm.client import settle

log = logging.getLogger(__name__)

Reply = tuple[int, bytes, str, dict]  # a reply, whatever serves it: (status, body, content type, headers)
_TYPES = {429: "rate_limit", 500: "server_error", 502: "server_error", 504: "server_error"}
_HTTP_CODES = {404: "not_found", 405: "method_not_allowed", 413: "body_too_large"}


class RequestError(Exception):
    """A request refused with ``status`` and the JSON error answer (``code``; ``param``: the field at fault)."""

    def __init__(self, code: str | None, message: str, *, status: int = 400, param: str | None = None):
        super().__init__(message)
        self.code, self.status, self.param = code, status, param


def error_body(message: str, code: str | None, *, status: int = 400, param: str | None = None) -> dict:
    return {"error": {"message": message, "type": _TYPES.get(status, "invalid_request_error"), "code": code,
                      "param": param}}


def _http_message(e: web.HTTPException, request: web.Request) -> str:
    if e.status == 404:
        return f"no such endpoint: {request.method} {request.path}"
    if e.status == 405:
        return f"{request.method} is not served at {request.path} (allowed: {e.headers.get('Allow', '')})"
    if e.status == 413:
        return f"the request body is too large ({e.text})"
    return e.text or e.reason


def parse_json(raw: bytes) -> Any:
    """A request body as one JSON value, or RequestError ``bad_json``."""
    try:
        return json.loads(raw)
    except RecursionError:
        raise RequestError("bad_json", "the request body nests deeper than the JSON parser follows") from None
    except ValueError as e:  # UnicodeDecodeError included
        raise RequestError("bad_json", f"the request body is not JSON ({e})") from None


def response(reply: Reply) -> web.Response:
    status, body, ctype, headers = reply
    return web.Response(body=body, status=status, headers={"Content-Type": ctype, **headers})


def abort(request: web.Request) -> None:
    """Drop the connection of a request without a reply."""
    if request.transport is not None:
        request.transport.abort()


async def _health(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


def make_app(max_body_bytes: int, prefix: str) -> web.Application:
    """An aiohttp app whose every error answer is the JSON one (``prefix`` starts every message) and whose request
    bodies are at most this size; ``GET /health`` answers ``{"status": "ok"}``."""

    @web.middleware
    async def json_errors(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                          ) -> web.StreamResponse:
        allow = None
        try:
            return await handler(request)
        except RequestError as e:
            err = e
        except web.HTTPException as e:
            if e.status < 400:
                raise
            allow = {"Allow": e.headers["Allow"]} if "Allow" in e.headers else None
            err = RequestError(_HTTP_CODES.get(e.status), _http_message(e, request), status=e.status)
        except Exception:
            log.exception("%s %s failed", request.method, request.path)
            err = RequestError("internal_error", "internal error (the server logged it)", status=500)
        return web.json_response(error_body(prefix + str(err), err.code, status=err.status, param=err.param),
                                 status=err.status, headers=allow)

    app = web.Application(client_max_size=max_body_bytes, middlewares=[json_errors])
    app.router.add_get("/health", _health)
    return app


def arguments(description: str, model: str) -> argparse.ArgumentParser:
    """The command line every test server takes (a server adds its own)."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0, help="0: a free port (printed)")
    ap.add_argument("--latency", dest="latency_s", type=float, default=0.0, help="seconds before each answer")
    ap.add_argument("--model", default=model)
    ap.add_argument("--until-stdin-closes", action="store_true",
                    help="stop when standard input reaches its end (a parent that started it has gone)")
    return ap


def serve(server: Served, until_stdin_closes: bool) -> None:
    """Start ``server`` (a failure: its message on stderr, exit status 2), print ``READY <base_url>``, serve until
    SIGTERM or SIGINT — or, with ``until_stdin_closes``, until standard input ends (the parent that started this
    process with a pipe to it has gone, however it ended)."""
    try:
        server.start()
    except (OSError, ValueError, KeyError) as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        sys.exit(2)
    for stop in (signal.SIGTERM, signal.SIGINT):  # exit status 0, raised where the main thread waits below
        signal.signal(stop, lambda *_: sys.exit(0))
    try:
        print(f"READY {server.base_url}", flush=True)
        if until_stdin_closes:
            sys.stdin.read()
        else:
            signal.pause()
    finally:
        server.stop()


def spawn(module: str, *args: str) -> tuple[subprocess.Popen, str]:
    """``python -m <module> *args --until-stdin-closes`` (a server that prints ``READY <base_url>`` once it serves) in
    a process of its own: (the Popen, its base URL). Its standard input is a pipe from this process: when this process
    ends, however it ends (kill -9 included), the pipe closes and the server stops."""
    root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    stderr = tempfile.TemporaryFile("w+")  # noqa: SIM115 - the child's (a pipe nobody reads could fill and block it)
    p = subprocess.Popen([sys.executable, "-m", module, *args, "--until-stdin-closes"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=stderr, text=True, env=env)
    line = p.stdout.readline() if p.stdout else ""
    if not line.startswith("READY "):
        p.wait(timeout=30)
        stderr.seek(0)
        err = stderr.read().strip().splitlines()
        raise RuntimeError(f"{module} did not start: {(err or [line.strip()])[-1]}")
    return p, line.split()[1]


class Served:
    """A test server: its aiohttp app (``_app()``, built on the serving loop) served on ``host:port`` by an event loop
    of its own in a daemon thread of this process (``thread``, None once stopped); ``base_url`` once started; a
    context manager. Its request log (``log``, one dict per request) is in memory and, if ``log_file`` is set,
    appended to that JSON-lines file as requests come (``record``)."""

    base_url: str | None = None

    def __init__(self, name: str, host: str = "127.0.0.1", port: int = 0, log_file: str | None = None):
        self.name, self.host, self.port, self.log_file = name, host, port, log_file
        self.log: list[dict] = []
        self._log_lock = threading.Lock()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.thread: threading.Thread | None = None

    def record(self, entry: dict) -> None:
        with self._log_lock:
            self.log.append(entry)
            if self.log_file:
                with open(self.log_file, "a", encoding="utf-8") as f:
                    f.write(json.dumps(entry) + "\n")

    def _app(self) -> web.Application:
        raise NotImplementedError

    async def _up(self) -> web.AppRunner:
        runner = web.AppRunner(self._app(), access_log=None, shutdown_timeout=0.2)
        await runner.setup()
        await web.TCPSite(runner, self.host, self.port).start()
        self.port = runner.addresses[0][1]
        return runner

    def start(self) -> Self:
        """Serve in a background thread; returns once the port is bound (raising what binding raised)."""
        ready, err = threading.Event(), []

        def run() -> None:
            loop = self.loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            try:
                runner = loop.run_until_complete(self._up())
            except BaseException as e:  # handed to the starting thread
                err.append(e)
                return
            finally:
                ready.set()
            loop.run_forever()
            settle(loop)
            loop.run_until_complete(runner.cleanup())
            loop.close()

        self.thread = threading.Thread(target=run, name=self.name, daemon=True)
        self.thread.start()
        if not ready.wait(30.0):
            raise TimeoutError(f"{self.name} did not start within 30 s")
        if err:
            raise err[0]
        self.base_url = f"http://{self.host}:{self.port}/v1"
        return self

    def stop(self) -> None:
        """Cancel what is left, run the app's cleanup, close the loop."""
        if self.loop is not None and self.thread is not None and self.thread.is_alive():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10.0)
        self.thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
