"""The replay judge over HTTP (aiohttp): ``make_app``, ``ReplayServer`` (the configured server of a client,
``llm=replay``) and ``main`` (``python -m face.testing.replay``)."""
from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import urllib.request

from aiohttp import web

from .. import service
from ..service import AppThread, read_json, spawn, wait_for_stop
from .answers import MODEL, Judge
from .data import DATA_FILES, ReplayData, load

MAX_BODY_BYTES = 1024 * 1024  # a request body over this is refused (413); FACE's longest prompts are ~20 KB


def make_app(judge: Judge, latency_s: float = 0.0) -> web.Application:
    """The judge's endpoints; every error answer is JSON: ``{"error": {"message": "replay judge: …", "type",
    "code", "param"}}``."""

    async def chat(request: web.Request) -> web.Response:
        body = await read_json(request)
        if latency_s > 0:
            await asyncio.sleep(latency_s)
        out = judge.answer(body)
        return web.Response(body=json.dumps(out, ensure_ascii=False).encode(), content_type="application/json")

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": judge.model, "object": "model",
                                                               "owned_by": "face-replay"}]})

    async def health(request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def stats(request: web.Request) -> web.Response:
        return web.json_response(judge.report())

    app = service.make_app(MAX_BODY_BYTES, "replay judge: ")
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/health", health)
    app.router.add_get("/v1/replay/stats", stats)
    return app


class ReplayServer:
    """The replay judge as the configured server of a client (``llm.server``): started before the first request,
    stopped after the last; ``report()`` is its count of what it answered (identical prompts included).

    ``process=True`` (the default) runs it in a process of its own, so its CPU is not the client's; ``False``
    in a thread of this process (tests)."""

    data_files = DATA_FILES  # fetched by the experiment before anything runs

    def __init__(self, data_dir: str, model: str = MODEL, host: str = "127.0.0.1", port: int = 0,
                 latency_s: float = 0.0, process: bool = True):
        self.data_dir, self.model, self.host, self.port = str(data_dir), model, host, port
        self.latency_s, self.process = latency_s, process
        self.base_url: str | None = None
        self._proc: subprocess.Popen | None = None
        self._thread: AppThread | None = None
        self._judge: Judge | None = None

    def start(self) -> ReplayServer:
        if self.process:
            self._proc, self.base_url = spawn("face.testing.replay", "--data-dir", self.data_dir, "--host", self.host,
                                              "--port", str(self.port), "--latency", str(self.latency_s),
                                              "--model", self.model)
        else:
            judge = self._judge = Judge(load(self.data_dir), self.model)
            self._thread = AppThread("replay-judge", lambda: make_app(judge, self.latency_s), self.host, self.port)
            self.base_url = f"http://{self.host}:{self._thread.start()}/v1"
        return self

    def report(self) -> dict | None:
        """What the judge answered so far (None when it cannot be asked)."""
        if self._judge is not None:
            return self._judge.report()
        try:
            with urllib.request.urlopen(f"{self.base_url}/replay/stats", timeout=30) as r:
                return json.loads(r.read())
        except (OSError, ValueError):
            return None

    def stop(self) -> None:
        if self._proc is not None:
            if self._proc.stdin is not None:
                self._proc.stdin.close()
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
            self._proc = None
        if self._thread is not None:
            self._thread.stop()
            self._thread = self._judge = None
        self.base_url = None

    def __enter__(self) -> ReplayServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="The replay judge: FACE's prompts answered with the FACE authors' "
                                             "released judgements of CRSArena-Eval (an OpenAI-compatible server)")
    ap.add_argument("--data-dir", default="data/raw", help="directory laid out as the project fetches the data")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0, help="0: a free port (printed)")
    ap.add_argument("--latency", type=float, default=0.0, help="seconds before each answer")
    ap.add_argument("--model", default=MODEL)
    ap.add_argument("--until-stdin-closes", action="store_true",
                    help="stop when standard input reaches its end (a parent that started it has gone)")
    a = ap.parse_args(argv)
    try:
        judge = Judge(ReplayData(a.data_dir), a.model)
    except (OSError, ValueError, KeyError) as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        sys.exit(2)
    server = AppThread("replay-judge", lambda: make_app(judge, a.latency), a.host, a.port)
    port = server.start()
    print(f"READY http://{a.host}:{port}/v1", flush=True)
    try:
        wait_for_stop(a.until_stdin_closes)
    finally:
        server.stop()
