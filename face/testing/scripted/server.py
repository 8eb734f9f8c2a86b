"""``ScriptedServer``: the scripted chat endpoint (``POST /v1/chat/completions``, ``GET /v1/models``, ``GET /health``)
and the Batch API (``batches.BatchAPI``), with latency, faults (``face.testing.faults``), a rate limit and a request
log, served in a thread of this process; or in a process of its own: ``python -m face.testing.scripted`` (``main``),
started from a benchmark (``spawn``), its request log read back (``read_log``).

``InProcessServer``: the scripted server without a socket, for tests that do not test HTTP itself.

It answers exactly as ``ScriptedServer`` does -- the same responder, completion, usage, request log, forced and
drawn faults, rate limit, latency -- but through an HTTP client transport of this process instead of a port: the
client's ``OpenAITransport`` gets the SDK's httpx client with this transport (``http_client``), so everything
above the wire runs as in production (the openai SDK, its status errors, the retry policy, the reply decoding,
the layers of the stack). A transport fault is what the client would see over a socket: 429 / 500 / an HTML page /
a cut JSON body as replies, "timeout" as the read timeout of the client's own setting (a 504 after ``hang_s`` when
that is shorter), "reset" / "disconnect" as a connection closed without a reply. The chat endpoint and the model
list are served (a batch run needs an endpoint at ``llm.base_url``: ``ScriptedServer`` serves the Batch API).

    llm.server._target_=face.testing.scripted.InProcessServer     (the client starts and stops its own)
    with InProcessServer() as srv: ... llm.server = srv.spec() ...  (a test's own: its log, force(), responder)
"""
from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import random
import subprocess
import threading
import time
import weakref
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Self

import httpx2
from aiohttp import web

from .. import service
from ..faults import KINDS, STATUS, FaultInjector, fault_reply, half, spoil, unit
from ..service import Reply, RequestError, Served, abort, error_body, make_app, parse_json, response
from .answers import _h, default_responder, token_logprobs, tokenize
from .batches import BatchAPI

TRANSPORT_FAULTS = ("429", "500", "timeout")


class ScriptedServer(Served):
    """The chat completion of a request body (``_completion``): ``responder(body)`` per choice (the body with ``n=1``
    and ``seed = request seed + choice index``), usage tokens × ``usage_factor`` (left out without ``report_usage``),
    a share ``logprobs_missing`` of choices (by hash) without the logprobs asked for."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, latency_s: float = 0.0, fault_rate: float = 0.0,
                 fault_kinds: Sequence[str] = TRANSPORT_FAULTS, faults_per_request: int = 1,
                 retry_after_s: float | None = 0.05, hang_s: float = 5.0, log_file: str | None = None,
                 model: str = "scripted-model", responder: Callable[[dict], str] | None = None,
                 max_concurrent: int | None = None, usage_factor: float = 1.0, report_usage: bool = True,
                 logprobs_missing: float = 0.0):
        super().__init__("scripted-llm-server", host, port, log_file)
        self.faults = FaultInjector(fault_rate, fault_kinds, faults_per_request, mark=_h)
        self.force = self.faults.force  # force(*kinds): fault the next len(kinds) chat requests with these kinds
        self.latency_s = latency_s
        self.retry_after_s = retry_after_s
        self.hang_s = hang_s  # how long a "timeout" fault keeps the request unanswered
        self.responder, self.model, self.usage_factor = responder or default_responder, model, usage_factor
        self.report_usage, self.logprobs_missing = report_usage, logprobs_missing
        self.max_concurrent = max_concurrent  # a rate limit: 429 (+ Retry-After) beyond this many in flight
        self.rate_limited = 0
        self.batch = BatchAPI(lambda body: self._completion(body, None))
        self._auth_digests: set[str] = set()  # sha256 of Authorization headers seen (never logged)
        self._lock = threading.Lock()
        self._active = 0
        self.max_active = 0

    # ---- control ------------------------------------------------------
    def reset_log(self) -> None:
        """Forget the request log and the per-request attempt counters."""
        with self._lock:
            self.log.clear()
            self.faults.reset()
            self.max_active = 0

    def seen_auth(self, api_key: str) -> bool:
        """Whether a request carried `Authorization: Bearer <api_key>` (only a digest is kept)."""
        return hashlib.sha256(f"Bearer {api_key}".encode()).hexdigest() in self._auth_digests

    def ok_requests(self) -> list[dict]:
        return [r for r in self.log if r["status"] == 200 and r["fault"] is None]

    def _completion(self, body: dict, fault: str | None) -> dict:
        """(A subclass may change what is answered: tests/test_performance.py's endpoint that ignores n.)"""
        n = int(body.get("n") or 1)
        seed = body.get("seed")
        built = [self._choice(j, dict(body, n=1, seed=None if seed is None else seed + j), fault) for j in range(n)]
        choices, out_tokens = [c for c, _ in built], sum(t for _, t in built)
        prompt_tokens = sum(len(tokenize(str(m.get("content", "")))) + 3 for m in body.get("messages", []))
        prompt_tokens, out_tokens = round(prompt_tokens * self.usage_factor), round(out_tokens * self.usage_factor)
        reply = {"id": "chatcmpl-" + _h(body)[:12], "object": "chat.completion", "created": int(time.time()),
                 "model": body.get("model") or self.model, "choices": choices}
        if self.report_usage:
            reply["usage"] = {"prompt_tokens": prompt_tokens, "completion_tokens": out_tokens,
                              "total_tokens": prompt_tokens + out_tokens}
        return reply

    def _choice(self, j: int, sub: dict, fault: str | None) -> tuple[dict, int]:
        """Choice j (its request body ``sub``) and its number of tokens."""
        text = self.responder(sub)
        finish = "stop"
        toks = tokenize(text)
        max_tokens = sub.get("max_tokens")
        if max_tokens is not None and len(toks) > int(max_tokens):
            toks, finish = toks[: int(max_tokens)], "length"
        if fault == "truncated":
            toks, finish = half(toks), "length"
        text = "".join(toks)
        if fault in ("malformed", "garbled"):
            text = spoil(fault, text)
            toks = tokenize(text)
        lp = None
        if sub.get("logprobs") and not (self.logprobs_missing and unit(_h(sub.get("messages"), sub.get("seed"),
                                                                           "nolp")) < self.logprobs_missing):
            lp = {"content": token_logprobs(toks, int(sub.get("top_logprobs") or 0),
                                            random.Random(_h(text, sub.get("seed"))))}
        return {"index": j, "message": {"role": "assistant", "content": text}, "finish_reason": finish,
                "logprobs": lp}, len(toks)

    # ---- app ------------------------------------------------------------
    def _app(self) -> web.Application:
        app = make_app(64 * 1024 * 1024, "scripted server: ")
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        self.batch.add_routes(app)
        return app

    def model_list(self) -> dict:
        """The body of GET /v1/models: the one scripted model."""
        return {"object": "list", "data": [{"id": self.model, "object": "model", "owned_by": "scripted"}]}

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response(self.model_list())

    async def _reply(self, raw: bytes, authorization: str, wait: Callable[[float], Awaitable[None]],
                     disconnect: Callable[[], None]) -> Reply:
        """The reply to a chat request, whatever serves it (counted in the rate limit while it lasts, and in the
        request log): ``wait(s)`` is its latency and a timeout's hang, ``disconnect()`` a reset's dropped connection."""
        body = parse_json(raw)
        if not isinstance(body, dict):
            raise RequestError("invalid_type", "the request body must be a JSON object")
        h = _h(body)
        attempt, fault = self.faults.draw(h)
        with self._lock:
            self._auth_digests.add(hashlib.sha256(authorization.encode()).hexdigest())
            self._active += 1
            self.max_active = max(self.max_active, self._active)
            if self.max_concurrent is not None and self._active > self.max_concurrent:
                fault = "429"
                self.rate_limited += 1
        self.record({"t": time.time(), "hash": h, "attempt": attempt, "fault": fault,
                     "status": STATUS.get(fault or "", 200), "n": body.get("n", 1), "seed": body.get("seed"),
                     "model": body.get("model"), "max_tokens": body.get("max_tokens"),
                     "messages_hash": _h(body.get("messages"))[:16]})
        try:
            if self.latency_s > 0:
                await wait(self.latency_s)
            reply = await fault_reply(fault, source="scripted", retry_after_s=self.retry_after_s, hang_s=self.hang_s,
                                      wait=wait, disconnect=disconnect)
            if reply is not None:
                return reply
            completion = json.dumps(self._completion(body, fault)).encode()
            if fault == "cut_json":
                return 200, half(completion), "application/json", {}
            return 200, completion, "application/json; charset=utf-8", {}
        finally:
            with self._lock:
                self._active -= 1

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        reply = await self._reply(await request.read(), request.headers.get("Authorization", ""), asyncio.sleep,
                                  lambda: abort(request))
        return response(reply)


# ---------------------------------------------------------------- in process, without a socket
_NUMBER = itertools.count(1)  # each server its own URL (never resolved: no request leaves the process), so that
# what is remembered per endpoint (the probe's answer) is remembered per server, as per port over HTTP
_LIVE: weakref.WeakValueDictionary[str, InProcessServer] = weakref.WeakValueDictionary()


class InProcessServer(ScriptedServer):
    """``ScriptedServer``'s answers, served to this process's LLM client without a socket (``http_client``)."""

    def spec(self) -> dict[str, str]:
        """``llm.server`` naming this very server (started by its owner): a client built from it talks to this
        server, whose log, forced faults and responder the owner keeps."""
        _LIVE[str(id(self))] = self
        return {"_target_": f"{__name__}.attached", "key": str(id(self))}

    def start(self) -> Self:
        self.base_url = self.base_url or f"http://scripted-{next(_NUMBER)}.in-process/v1"
        return self

    def http_client(self, cfg: Any) -> Any:
        """The openai SDK's httpx client whose transport is this server (face.llm.transport.OpenAITransport)."""
        import openai

        return openai.DefaultAsyncHttpxClient(transport=httpx2.MockTransport(self.handle),
                                              timeout=getattr(cfg, "timeout_s", 60.0))

    async def handle(self, request: httpx2.Request) -> httpx2.Response:
        """One HTTP request, as the aiohttp app would answer it."""
        path = request.url.path
        if request.method == "GET" and path.endswith("/models"):
            return httpx2.Response(200, json=self.model_list())
        read_timeout = (request.extensions.get("timeout") or {}).get("read")

        async def wait(seconds: float) -> None:
            """Sleep ``seconds``, or until the client's read timeout, which then fires as it would over a socket."""
            if read_timeout is not None and seconds >= read_timeout:
                await asyncio.sleep(read_timeout)
                raise httpx2.ReadTimeout("timed out (in-process scripted server)", request=request)
            await asyncio.sleep(seconds)

        def disconnect() -> None:
            raise httpx2.RemoteProtocolError("Server disconnected without sending a response.", request=request)

        try:
            if request.method != "POST" or not path.endswith("/chat/completions"):
                raise RequestError("not_found", f"no such endpoint: {request.method} {path}", status=404)
            status, content, ctype, headers = await self._reply(
                request.content, request.headers.get("Authorization", ""), wait, disconnect)
        except RequestError as e:
            return httpx2.Response(e.status, json=error_body("scripted server: " + str(e), e.code, status=e.status))
        return httpx2.Response(status, content=content, headers={"Content-Type": ctype, **headers})


def attached(key: str) -> InProcessServer:
    """The live server a ``spec()`` names (the client's stop leaves it as it is: it has no socket, no thread)."""
    try:
        return _LIVE[key]
    except KeyError:
        raise ValueError(f"no live in-process scripted server {key!r} (its owner has let it go)") from None


def spawn(latency_s: float = 0.0, *args: str) -> tuple[subprocess.Popen, str]:
    """The server in a process of its own (benchmarks: its CPU is not the client's): (the Popen, its base URL)."""
    return service.spawn("face.testing.scripted", "--latency", str(latency_s), *args)


def read_log(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def main(argv: list[str] | None = None) -> None:
    ap = service.arguments("Scripted OpenAI-compatible test server", "scripted-model")
    ap.add_argument("--fault-rate", type=float, default=0.0)
    ap.add_argument("--fault-kinds", default=",".join(TRANSPORT_FAULTS), help=f"of {','.join(KINDS)}",
                    type=lambda kinds: tuple(k for k in kinds.split(",") if k))
    ap.add_argument("--faults-per-request", type=int, default=1)
    ap.add_argument("--retry-after", dest="retry_after_s", type=float, default=0.05)
    ap.add_argument("--hang", dest="hang_s", type=float, default=5.0)
    ap.add_argument("--max-concurrent", type=int, default=None, help="429 beyond this many requests in flight")
    ap.add_argument("--log", dest="log_file", default=None, help="append a JSON line per request to this file")
    settings = vars(ap.parse_args(argv))  # each named as the ScriptedServer argument it sets
    until_stdin_closes = settings.pop("until_stdin_closes")
    service.serve(ScriptedServer(**settings), until_stdin_closes)
