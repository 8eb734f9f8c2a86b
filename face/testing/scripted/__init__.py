"""A scripted, deterministic OpenAI-compatible HTTP server (test double).

* ``answers`` — what it answers: every choice's text is ``responder(body)`` where ``body`` is the request JSON with
  ``n=1`` and ``seed = request seed + choice index``, so one request with n=3 and seed s gives the same texts as
  three n=1 requests with seeds s, s+1, s+2. The default responder returns a deterministic valid instance of a
  json_schema response_format (or of a schema embedded in the prompt, wrapped in prose and a code fence), this
  project's step-by-step answers to its scoring and decomposition prompts, otherwise echo-ish text. Simple tokens
  and their logprobs / top_logprobs (numeric tokens get a deterministic distribution over the digits);
  ``ScriptedServer._completion`` builds the reply around the answers: ``max_tokens``, usage.
  ``usage_factor`` multiplies the reported ``usage`` tokens (an endpoint whose tokenizer counts more than the client's
  estimate), ``report_usage=False`` leaves ``usage`` out; ``logprobs_missing`` is the share of choices (by hash of
  messages and seed) answered without logprobs although they were asked for.
* ``server`` — ``ScriptedServer``: ``POST /v1/chat/completions``, ``GET /v1/models``, ``GET /health``; latency
  (asyncio.sleep); faults from ``face.testing.faults`` (the fault proxy's, one implementation), chosen from the
  request hash and its attempt count (a request is faulted on its first ``faults_per_request`` arrivals at most),
  so a retry of the same request can succeed, or forced with ``server.force("429", ...)``; a rate limit
  (``max_concurrent``: a request arriving while that many are in flight gets a 429 with Retry-After); a request
  log (in memory, optionally JSON lines appended to a file; the Authorization header is never logged). Every
  error answer is JSON: ``{"error": {"message", "type", "code", "param"}}``.
* ``batches`` — the Batch API (``server.batch``): files, batches answered as the same chat requests would be.
* ``InProcessServer`` (in ``server`` too): the same answers, faults and log without a socket (the client's HTTP
  transport of this process answers; the fast tests use it wherever HTTP itself is not what they test).
* ``python -m face.testing.scripted --port P --log FILE [--latency 0.1 --fault-rate 0.2]`` (``server.main``), ``spawn``.

In-process:  with ScriptedServer(latency_s=0.1) as srv: srv.base_url
As the configured server of a client: llm.server = {_target_: face.testing.scripted.ScriptedServer, ...}
"""
from __future__ import annotations

from .answers import _h, default_responder, schema_instance
from .server import InProcessServer, ScriptedServer, read_log, spawn

__all__ = ["InProcessServer", "ScriptedServer", "_h", "default_responder", "read_log", "schema_instance", "spawn"]
