"""A scripted, deterministic OpenAI-compatible HTTP server (test double).

Endpoints: POST /v1/chat/completions, GET /v1/models, GET /health, and the Batch API's
POST /v1/files, GET /v1/files/{id}/content, POST /v1/batches, GET /v1/batches/{id},
POST /v1/batches/{id}/cancel (a batch's lines are answered as the same chat requests would be,
after `batch_delay_s`; `batch_gate` (a threading.Event) holds every batch in progress while clear;
custom_ids in `batch_fail_ids` get an error line; with `batch_expire_after` = k a batch answers its
first k lines and expires).

* Deterministic: every choice's text is `responder(body)` where `body` is the
  request JSON with `n=1` and `seed = request seed + choice index`, so one
  request with n=3 and seed s gives the same texts as three n=1 requests with
  seeds s, s+1, s+2. The default responder returns a deterministic valid
  instance of a json_schema response_format (or of a schema embedded in the
  prompt, wrapped in prose and a code fence), otherwise echo-ish text.
* logprobs/top_logprobs over simple tokens; numeric tokens get a deterministic
  distribution over the digits.
* Accounting: `usage_factor` multiplies the reported `usage` tokens (an endpoint whose tokenizer counts
  more than the client's estimate), `report_usage=False` leaves `usage` out; `logprobs_missing` is the
  share of choices (by hash of messages and seed) answered without logprobs although they were asked for.
* Latency (asyncio.sleep) and fault injection: "429" (with Retry-After),
  "500", "timeout" (hangs past the client timeout), "malformed" (not-JSON
  content), "truncated" (finish_reason "length", cut text), "disconnect".
  Faults are chosen from the request hash and the attempt count (a request
  is faulted on its first `faults_per_request` arrivals at most), so a retry
  of the same request can succeed; or forced with `server.force("429", ...)`.
* A rate limit (`max_concurrent`): a request arriving while that many are in flight gets a 429 with
  Retry-After (as a rate-limited API does), to test adaptive concurrency.
* A request log (in memory, optionally JSON lines appended to a file). The
  Authorization header is never logged.

In-process:  with ScriptedServer(latency_s=0.1) as info: info.base_url
As the configured server of a client: llm.server = {_target_: face.testing.scripted.ScriptedServer, ...}
Subprocess:  python -m face.testing.scripted --port P --log FILE [--latency 0.1 --fault-rate 0.2]
"""
from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import math
import random
import re
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from face.llm.background import BackgroundLoop

FAULT_KINDS = ("429", "500", "timeout", "malformed", "truncated", "disconnect")
TRANSPORT_FAULTS = ("429", "500", "timeout")
_TOKEN_RE = re.compile(r"\s*\d|\s*[A-Za-z]+|\s*[^\sA-Za-z\d]|\s+")


def _h(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def _unit(hexdigest: str) -> float:
    return int(hexdigest[:13], 16) / float(16 ** 13)


def tokenize(text: str) -> list[str]:
    """Simple tokens: words, single digits, single punctuation marks, each with leading whitespace."""
    return _TOKEN_RE.findall(text)


# ------------------------------------------------------------ schema instances
def schema_instance(schema: dict, rng: random.Random) -> Any:
    """A deterministic (given rng) valid instance of a small JSON-schema subset."""
    if "enum" in schema:
        return rng.choice(list(schema["enum"]))
    if "const" in schema:
        return schema["const"]
    t = schema.get("type", "object")
    if isinstance(t, list):
        t = next(x for x in t if x != "null") if any(x != "null" for x in t) else "null"
    if t == "object":
        props = schema.get("properties", {})
        return {k: schema_instance(v, rng) for k, v in props.items()}
    if t == "array":
        lo = int(schema.get("minItems", 1))
        hi = int(schema.get("maxItems", lo + 2))
        items = schema.get("items", {"type": "string"})
        return [schema_instance(items, rng) for _ in range(rng.randint(lo, max(lo, hi)))]
    if t == "integer":
        lo = math.ceil(schema.get("minimum", 0))
        hi = math.floor(schema.get("maximum", lo + 10))
        return rng.randint(lo, max(lo, hi))
    if t == "number":
        lo = float(schema.get("minimum", 0.0))
        hi = float(schema.get("maximum", lo + 1.0))
        return round(lo + rng.random() * (hi - lo), 3)
    if t == "boolean":
        return rng.random() < 0.5
    if t == "null":
        return None
    # string
    words = ["good", "relevant", "clear", "specific", "polite", "helpful", "vague", "short"]
    lo = int(schema.get("minLength", 1))
    hi = int(schema.get("maxLength", max(lo, 40)))
    s = " ".join(rng.choice(words) for _ in range(rng.randint(1, 5)))
    while len(s) < lo:
        s += " " + rng.choice(words)
    return s[:hi]


def _schema_in_prompt(messages: list[dict]) -> dict | None:
    """A JSON schema embedded in the last user message (prompt-only structured output)."""
    for m in reversed(messages):
        if m.get("role") != "user":
            continue
        for line in str(m.get("content", "")).splitlines():
            line = line.strip()
            if line.startswith("{") and '"type"' in line:
                try:
                    obj = json.loads(line)
                except ValueError:
                    continue
                if isinstance(obj, dict) and "type" in obj:
                    return obj
        return None
    return None


_SCORE_FORMAT = re.compile(r'\{"score": <integer from (-?\d+) to (-?\d+)>\}\s*$')
_TARGET_TURN = re.compile(r"Target assistant turn:\nTurn \d+ - \w+: (.*)")


def _reasoned_answer(messages: list[dict], rng: random.Random) -> str | None:
    """Reasoning, then the JSON answer, for this project's step-by-step prompts (scoring, decomposition)."""
    last = next((str(m.get("content", "")) for m in reversed(messages) if m.get("role") == "user"), "")
    m = _SCORE_FORMAT.search(last)
    if m:
        score = rng.randint(int(m.group(1)), int(m.group(2)))
        return f"Step 1: I read the context and the target.\nStep 2: I apply the grades.\n{{\"score\": {score}}}"
    m = _TARGET_TURN.search(last)
    if m and '{"particles": [' in last:
        parts = [s.strip() for s in re.split(r"(?<=[?.!])\s+", m.group(1)) if s.strip()]
        particles = [{"dialogue_act": "preference elicitation" if s.endswith("?") else "recommendation",
                      "mention": " ".join(s.split()[:12]), "user_feedback": "NO_FEEDBACK_PROVIDED"} for s in parts]
        return "Step 1: the turn.\nStep 2: one particle per sentence.\n" + json.dumps({"particles": particles})
    return None


def default_responder(body: dict) -> str:
    """Deterministic answer as a function of (messages, seed)."""
    messages = body.get("messages", [])
    seed = body.get("seed")
    rng = random.Random(_h(messages, seed))
    rf = body.get("response_format") or {}
    if rf.get("type") == "json_schema":
        schema = (rf.get("json_schema") or {}).get("schema") or {}
        return json.dumps(schema_instance(schema, rng))
    if rf.get("type") == "json_object":  # llama-cpp-python style: optional "schema"
        if isinstance(rf.get("schema"), dict):
            return json.dumps(schema_instance(rf["schema"], rng))
        return json.dumps({"answer": rng.randint(1, 5)})
    reasoned = _reasoned_answer(messages, rng)
    if reasoned is not None:
        return reasoned
    schema = _schema_in_prompt(messages)
    if schema is not None:
        return "Sure, here is my answer:\n```json\n" + json.dumps(schema_instance(schema, rng), indent=1) + "\n```"
    last = next((m.get("content", "") for m in reversed(messages) if m.get("role") == "user"), "")
    words = ["alpha", "beta", "gamma", "delta", "omega", "sigma"]
    tail = " ".join(rng.choice(words) for _ in range(3))
    return f"Echo (seed {seed}): {str(last)[:60]} | {tail}"


# ------------------------------------------------------------ logprobs
def _token_logprobs(tokens: list[str], k: int, rng: random.Random) -> list[dict]:
    out = []
    for tok in tokens:
        s = tok.strip()
        if s.isdigit() and len(s) == 1:
            prefix = tok[: len(tok) - 1]
            logits = {d: rng.random() * 2.0 for d in "0123456789"}
            logits[s] += 2.0  # the emitted digit is the likely one
            z = math.log(sum(math.exp(v) for v in logits.values()))
            dist = sorted(((prefix + d, v - z) for d, v in logits.items()), key=lambda x: -x[1])
            lp = logits[s] - z
        else:
            lp = -0.05 - rng.random() * 0.2
            alts = [(" the", -3.0 - rng.random()), (".", -4.0 - rng.random()), (" and", -5.0 - rng.random()),
                    (",", -6.0 - rng.random()), (" a", -7.0 - rng.random())]
            dist = [(tok, lp)] + [a for a in alts if a[0] != tok]
        top = dist[:k]
        if k and all(t != tok for t, _ in top):
            top[-1] = (tok, lp)
        out.append({"token": tok, "logprob": lp, "bytes": list(tok.encode()),
                    "top_logprobs": [{"token": t, "logprob": v, "bytes": list(t.encode())} for t, v in top]})
    return out


# ------------------------------------------------------------ server
@dataclass
class ServerInfo:
    base_url: str
    model: str
    port: int


class ScriptedServer:
    def __init__(self, host: str = "127.0.0.1", port: int = 0, latency_s: float = 0.0, fault_rate: float = 0.0,
                 fault_kinds: tuple[str, ...] | list[str] = TRANSPORT_FAULTS, faults_per_request: int = 1,
                 retry_after_s: float | None = 0.05, hang_s: float = 5.0, log_file: str | None = None,
                 model: str = "scripted-model", responder: Callable[[dict], str] | None = None,
                 max_concurrent: int | None = None, batch_delay_s: float = 0.0, usage_factor: float = 1.0,
                 report_usage: bool = True, logprobs_missing: float = 0.0):
        bad = set(fault_kinds) - set(FAULT_KINDS)
        if bad:
            raise ValueError(f"unknown fault kinds {sorted(bad)}; choose from {FAULT_KINDS}")
        self.host, self.port = host, port
        self.latency_s = latency_s
        self.fault_rate = fault_rate
        self.fault_kinds = tuple(fault_kinds)
        self.faults_per_request = faults_per_request
        self.retry_after_s = retry_after_s
        self.hang_s = hang_s
        self.model = model
        self.responder = responder or default_responder
        self.max_concurrent = max_concurrent  # a rate limit: 429 (+ Retry-After) beyond this many in flight
        self.usage_factor = usage_factor  # reported usage tokens × this (an endpoint counting more than it seems)
        self.report_usage = report_usage  # False: replies without a `usage` object
        self.logprobs_missing = logprobs_missing  # share of choices answered without logprobs (by hash)
        self.rate_limited = 0
        self.log: list[dict] = []
        self.log_file = log_file
        self._log_fh = None
        self._attempts: dict[str, int] = {}
        self._auth_digests: set[str] = set()  # sha256 of Authorization headers seen (never logged)
        self._forced: list[str] = []
        self._lock = threading.Lock()
        self._active = 0
        self.max_active = 0
        self._bg: BackgroundLoop | None = None
        self._runner: web.AppRunner | None = None
        self.info: ServerInfo | None = None
        # Batch API
        self.batch_delay_s = batch_delay_s
        self.batch_gate = threading.Event()
        self.batch_gate.set()
        self.batch_fail_ids: set[str] = set()
        self.batch_expire_after: int | None = None  # a batch answers this many lines, then expires
        self.files: dict[str, tuple[str, bytes]] = {}  # id -> (purpose, content)
        self.batches: dict[str, dict] = {}
        self.batch_polls = 0
        self._last_id = 0

    # ---- control ------------------------------------------------------
    def force(self, *kinds: str) -> None:
        """Fault the next len(kinds) chat requests with these kinds, in order."""
        with self._lock:
            self._forced.extend(kinds)

    def reset_log(self) -> None:
        """Forget the request log and the per-request attempt counters."""
        with self._lock:
            self.log.clear()
            self._attempts.clear()
            self.max_active = 0

    def seen_auth(self, api_key: str) -> bool:
        """Whether a request carried `Authorization: Bearer <api_key>` (only a digest is kept)."""
        return hashlib.sha256(f"Bearer {api_key}".encode()).hexdigest() in self._auth_digests

    def ok_requests(self) -> list[dict]:
        return [r for r in self.log if r["status"] == 200 and r["fault"] is None]

    # ---- app ------------------------------------------------------------
    def _app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/health", self._health)
        app.router.add_post("/v1/files", self._upload)
        app.router.add_get("/v1/files/{id}/content", self._file_content)
        app.router.add_post("/v1/batches", self._create_batch)
        app.router.add_get("/v1/batches/{id}", self._get_batch)
        app.router.add_post("/v1/batches/{id}/cancel", self._cancel_batch)
        return app

    # ---- Batch API --------------------------------------------------------
    def _new_id(self, prefix: str) -> str:
        with self._lock:
            self._last_id += 1
            return f"{prefix}-{self._last_id:06d}"

    async def _upload(self, request: web.Request) -> web.Response:
        form = await request.post()
        upload, purpose = form.get("file"), str(form.get("purpose", ""))
        if upload is None or not hasattr(upload, "file"):
            return web.json_response({"error": {"message": "no file"}}, status=400)
        data = upload.file.read()
        fid = self._new_id("file")
        self.files[fid] = (purpose, data)
        return web.json_response({"id": fid, "object": "file", "bytes": len(data), "created_at": int(time.time()),
                                  "filename": upload.filename, "purpose": purpose, "status": "processed"})

    async def _file_content(self, request: web.Request) -> web.Response:
        f = self.files.get(request.match_info["id"])
        if f is None:
            return web.json_response({"error": {"message": "no such file"}}, status=404)
        return web.Response(body=f[1], content_type="application/octet-stream")

    async def _create_batch(self, request: web.Request) -> web.Response:
        req = await request.json()
        f = self.files.get(req.get("input_file_id", ""))
        if f is None or f[0] != "batch":
            return web.json_response({"error": {"message": "input_file_id: no such batch file"}}, status=400)
        bid = self._new_id("batch")
        lines = [json.loads(x) for x in f[1].decode("utf-8").splitlines() if x.strip()]
        batch = {"id": bid, "object": "batch", "endpoint": req.get("endpoint"), "errors": None,
                 "input_file_id": req["input_file_id"], "completion_window": req.get("completion_window"),
                 "status": "validating", "output_file_id": None, "error_file_id": None,
                 "created_at": int(time.time()), "metadata": req.get("metadata"),
                 "request_counts": {"total": len(lines), "completed": 0, "failed": 0}}
        ids = [x.get("custom_id") for x in lines]
        bad = [i for i, x in enumerate(lines) if x.get("method") != "POST" or x.get("url") != req.get("endpoint")
               or x.get("url") != "/v1/chat/completions"]
        if len(set(ids)) != len(ids) or None in ids or bad:
            batch["status"] = "failed"
            batch["errors"] = {"object": "list", "data": [{"code": "invalid_request", "line": (bad or [None])[0],
                                                           "message": "duplicate or missing custom_id, or bad url"}]}
        self.batches[bid] = batch
        if batch["status"] != "failed":
            asyncio.get_running_loop().create_task(self._run_batch(batch, lines))
        return web.json_response(batch)

    async def _run_batch(self, batch: dict, lines: list[dict]) -> None:
        batch["status"] = "in_progress"
        while not self.batch_gate.is_set() and batch["status"] == "in_progress":
            await asyncio.sleep(0.01)
        await asyncio.sleep(self.batch_delay_s)
        out, err = [], []
        for i, x in enumerate(lines):
            if batch["status"] != "in_progress" or (self.batch_expire_after is not None
                                                     and i >= self.batch_expire_after):
                break
            cid = x["custom_id"]
            if cid in self.batch_fail_ids:
                err.append({"id": f"req-{i}", "custom_id": cid, "error": None,
                            "response": {"status_code": 500, "body": {"error": {"message": "scripted failure"}}}})
            else:
                out.append({"id": f"req-{i}", "custom_id": cid, "error": None,
                            "response": {"status_code": 200, "body": self._completion(x["body"], None)}})
        for name, rows in (("output_file_id", out), ("error_file_id", err)):
            if rows:
                fid = self._new_id("file")
                self.files[fid] = ("batch_output", "".join(json.dumps(r) + "\n" for r in rows).encode())
                batch[name] = fid
        batch["request_counts"].update(completed=len(out), failed=len(err))
        batch["status"] = ("cancelled" if batch["status"] != "in_progress" else "completed"
                           if len(out) + len(err) == len(lines) else "expired")

    async def _get_batch(self, request: web.Request) -> web.Response:
        self.batch_polls += 1
        batch = self.batches.get(request.match_info["id"])
        if batch is None:
            return web.json_response({"error": {"message": "no such batch"}}, status=404)
        return web.json_response(batch)

    async def _cancel_batch(self, request: web.Request) -> web.Response:
        batch = self.batches.get(request.match_info["id"])
        if batch is None:
            return web.json_response({"error": {"message": "no such batch"}}, status=404)
        if batch["status"] in ("validating", "in_progress"):
            batch["status"] = "cancelling"
        return web.json_response(batch)

    async def _health(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": self.model, "object": "model",
                                                               "owned_by": "scripted"}]})

    def _pick_fault(self, h: str, attempt: int) -> str | None:
        with self._lock:
            if self._forced:
                return self._forced.pop(0)
        if (self.fault_rate > 0 and attempt < self.faults_per_request and self.fault_kinds
                and _unit(_h(h, "fault")) < self.fault_rate):
            return self.fault_kinds[int(_h(h, "kind")[:8], 16) % len(self.fault_kinds)]
        return None

    def _record(self, entry: dict) -> None:
        with self._lock:
            self.log.append(entry)
            if self._log_fh is not None:
                self._log_fh.write(json.dumps(entry) + "\n")
                self._log_fh.flush()

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        h = _h(body)
        auth = request.headers.get("Authorization", "")
        with self._lock:
            self._auth_digests.add(hashlib.sha256(auth.encode()).hexdigest())
            attempt = self._attempts.get(h, 0)
            self._attempts[h] = attempt + 1
            self._active += 1
            self.max_active = max(self.max_active, self._active)
        try:
            fault = self._pick_fault(h, attempt)
            if self.max_concurrent is not None and self._active > self.max_concurrent:
                fault = "429"
                self.rate_limited += 1
            status = {"429": 429, "500": 500}.get(fault or "", 200)
            self._record({"t": time.time(), "hash": h, "attempt": attempt, "fault": fault, "status": status,
                          "n": body.get("n", 1), "seed": body.get("seed"), "model": body.get("model"),
                          "max_tokens": body.get("max_tokens"),
                          "messages_hash": _h(body.get("messages"))[:16]})
            if self.latency_s > 0:
                await asyncio.sleep(self.latency_s)
            if fault == "429":
                headers = {"Retry-After": f"{self.retry_after_s:g}"} if self.retry_after_s is not None else {}
                return web.json_response({"error": {"message": "rate limited (scripted)", "type": "rate_limit"}},
                                         status=429, headers=headers)
            if fault == "500":
                return web.json_response({"error": {"message": "internal error (scripted)"}}, status=500)
            if fault == "timeout":
                await asyncio.sleep(self.hang_s)
            if fault == "disconnect":
                if request.transport is not None:
                    request.transport.abort()
                return web.Response(status=500)
            return web.json_response(self._completion(body, fault))
        finally:
            with self._lock:
                self._active -= 1

    def _completion(self, body: dict, fault: str | None) -> dict:
        n = int(body.get("n") or 1)
        seed = body.get("seed")
        max_tokens = body.get("max_tokens")
        want_lp = bool(body.get("logprobs"))
        k = int(body.get("top_logprobs") or 0)
        choices, out_tokens = [], 0
        for j in range(n):
            sub = dict(body, n=1, seed=None if seed is None else seed + j)
            text = self.responder(sub)
            finish = "stop"
            toks = tokenize(text)
            if max_tokens is not None and len(toks) > int(max_tokens):
                toks, finish = toks[: int(max_tokens)], "length"
            if fault == "truncated":
                toks, finish = toks[: max(1, len(toks) // 2)], "length"
            text = "".join(toks)
            if fault == "malformed":
                text = text[: max(1, len(text) // 2)] + " <<garbled output>>"
                toks = tokenize(text)
            out_tokens += len(toks)
            lp = None
            if want_lp and not (self.logprobs_missing and _unit(_h(sub.get("messages"), sub.get("seed"), "nolp"))
                                < self.logprobs_missing):
                lp = {"content": _token_logprobs(toks, k, random.Random(_h(text, sub.get("seed"))))}
            choices.append({"index": j, "message": {"role": "assistant", "content": text},
                            "finish_reason": finish, "logprobs": lp})
        prompt_tokens = sum(len(tokenize(str(m.get("content", "")))) + 3 for m in body.get("messages", []))
        prompt_tokens, out_tokens = round(prompt_tokens * self.usage_factor), round(out_tokens * self.usage_factor)
        reply = {"id": "chatcmpl-" + _h(body)[:12], "object": "chat.completion", "created": int(time.time()),
                 "model": body.get("model") or self.model, "choices": choices}
        if self.report_usage:
            reply["usage"] = {"prompt_tokens": prompt_tokens, "completion_tokens": out_tokens,
                              "total_tokens": prompt_tokens + out_tokens}
        return reply

    # ---- lifecycle ------------------------------------------------------
    async def _start(self) -> None:
        self._runner = web.AppRunner(self._app(), access_log=None, shutdown_timeout=0.2)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        port = self._runner.addresses[0][1]
        self.info = ServerInfo(base_url=f"http://{self.host}:{port}/v1", model=self.model, port=port)

    @property
    def base_url(self) -> str | None:
        return None if self.info is None else self.info.base_url

    def __enter__(self) -> ServerInfo:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> ServerInfo:
        """Serve in a background thread; returns once the port is bound."""
        if self.log_file:
            self._log_fh = open(self.log_file, "a", encoding="utf-8")  # noqa: SIM115 - closed in stop()
        self._bg = BackgroundLoop("scripted-llm-server")
        self._bg.start(self._start, self._runner_cleanup)
        assert self.info is not None
        return self.info

    async def _runner_cleanup(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    @property
    def _thread(self) -> object | None:  # the serving thread while it runs (None once stopped)
        return None if self._bg is None else self._bg._thread

    def stop(self) -> None:
        if self._bg is not None:
            self._bg.stop()
            self._bg = None
        if self._log_fh is not None:
            self._log_fh.close()
            self._log_fh = None


def spawn(latency_s: float = 0.0, *args: str) -> tuple[Any, str]:
    """The server in a process of its own (benchmarks: its CPU is not the client's): (the Popen, its base URL)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = str(Path(__file__).resolve().parents[2])
    p = subprocess.Popen([sys.executable, "-m", "face.testing.scripted", "--latency", str(latency_s), *args],
                         stdout=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=root))
    line = p.stdout.readline()
    if not line.startswith("READY"):
        p.kill()
        raise RuntimeError(f"scripted server did not start: {line!r}")
    return p, line.split()[1]


def read_log(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Scripted OpenAI-compatible test server")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--latency", type=float, default=0.0, help="seconds per request")
    ap.add_argument("--fault-rate", type=float, default=0.0)
    ap.add_argument("--fault-kinds", default=",".join(TRANSPORT_FAULTS))
    ap.add_argument("--faults-per-request", type=int, default=1)
    ap.add_argument("--retry-after", type=float, default=0.05)
    ap.add_argument("--hang", type=float, default=5.0)
    ap.add_argument("--model", default="scripted-model")
    ap.add_argument("--max-concurrent", type=int, default=None, help="429 beyond this many requests in flight")
    ap.add_argument("--log", default=None, help="append a JSON line per request to this file")
    a = ap.parse_args(argv)
    server = ScriptedServer(host=a.host, port=a.port, latency_s=a.latency, fault_rate=a.fault_rate,
                            fault_kinds=tuple(k for k in a.fault_kinds.split(",") if k),
                            faults_per_request=a.faults_per_request, retry_after_s=a.retry_after, hang_s=a.hang,
                            log_file=a.log, model=a.model, max_concurrent=a.max_concurrent)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    with server as info:
        print(f"READY {info.base_url}", flush=True)
        while not stop.wait(0.2):
            pass


if __name__ == "__main__":
    main()
