"""The replay judge over HTTP (aiohttp): ``ReplayServer`` (the configured server of a client,
``llm=replay``) and ``main`` (``python -m face.testing.replay``)."""
from __future__ import annotations

import asyncio
import json
import subprocess
import urllib.request

from aiohttp import web

from ..service import Served, arguments, make_app, parse_json, serve, spawn
from .answers import MODEL, Judge
from .data import DATA_FILES, load

MAX_BODY_BYTES = 1024 * 1024  # a request body over this is refused (413); FACE's longest prompts are ~20 KB


class ReplayServer(Served):
    """The replay judge as the configured server of a client (``llm.server``): started before the first request,
    stopped after the last; ``report()`` is its count of what it answered (identical prompts included).

    ``process=True`` (the default) runs it in a process of its own, so its CPU is not the client's; ``False``
    in a thread of this process (tests)."""

    data_files = DATA_FILES  # fetched by the experiment before anything runs

    def __init__(self, data_dir: str, model: str = MODEL, host: str = "127.0.0.1", port: int = 0,
                 latency_s: float = 0.0, process: bool = True):
        super().__init__("replay-judge", host, port)  # (its request log is not kept: the judge counts what it answered)
        self.data_dir, self.model, self.latency_s, self.process = str(data_dir), model, latency_s, process
        self._proc: subprocess.Popen | None = None
        self._judge: Judge | None = None

    def _app(self) -> web.Application:
        """The judge's endpoints; every error answer is JSON: ``{"error": {"message": "replay judge: …", "type",
        "code", "param"}}``."""
        judge = self._judge
        assert judge is not None

        async def chat(request: web.Request) -> web.Response:
            body = parse_json(await request.read())
            if self.latency_s > 0:
                await asyncio.sleep(self.latency_s)
            out = judge.answer(body)
            return web.Response(body=json.dumps(out, ensure_ascii=False).encode(), content_type="application/json")

        async def models(request: web.Request) -> web.Response:
            return web.json_response({"object": "list", "data": [{"id": judge.model, "object": "model",
                                                                   "owned_by": "face-replay"}]})

        async def stats(request: web.Request) -> web.Response:
            return web.json_response(judge.report())

        app = make_app(MAX_BODY_BYTES, "replay judge: ")
        app.router.add_post("/v1/chat/completions", chat)
        app.router.add_get("/v1/models", models)
        app.router.add_get("/v1/replay/stats", stats)
        return app

    def start(self) -> ReplayServer:
        if not self.process:  # the data read here, not on the serving loop (whose start is timed)
            self._judge = Judge(load(self.data_dir), self.model)
            return super().start()
        self._proc, self.base_url = spawn("face.testing.replay", "--data-dir", self.data_dir, "--host", self.host,
                                          "--port", str(self.port), "--latency", str(self.latency_s), "--model",
                                          self.model)
        return self

    def report(self) -> dict | None:
        """What the judge answered so far, asked at ``/v1/replay/stats`` (None when it cannot be asked)."""
        try:
            with urllib.request.urlopen(f"{self.base_url}/replay/stats", timeout=30) as r:
                return json.loads(r.read())
        except (OSError, ValueError):
            return None

    def stop(self) -> None:
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.communicate(timeout=10)  # (closes its standard input: it stops on that too)
            except subprocess.TimeoutExpired:
                self._proc.kill()
            self._proc = None
        super().stop()
        self._judge = self.base_url = None


def main(argv: list[str] | None = None) -> None:
    ap = arguments("The replay judge: FACE's prompts answered with the FACE authors' released judgements of "
                   "CRSArena-Eval (an OpenAI-compatible server)", MODEL)
    ap.add_argument("--data-dir", default="data/raw", help="directory laid out as the project fetches the data")
    a = ap.parse_args(argv)
    serve(ReplayServer(a.data_dir, a.model, a.host, a.port, a.latency_s, process=False), a.until_stdin_closes)
