"""The in-process scripted server (``InProcessServer``, ``llm=fake``) answers as the HTTP one (``ScriptedServer``,
``llm=scripted``) does: the fast tests use it wherever HTTP itself is not what they test, so it must be the same LM
behind the same client -- the same answers, logprobs and usage, the same request log, and every transport fault
reaching the client as the same exception (retried the same way)."""
from __future__ import annotations

import pytest

from face.llm import ChatRequest, LLMCallError, LLMConfig, make_client
from face.testing.faults import TRANSPORT_KINDS
from face.testing.scripted import InProcessServer, ScriptedServer

SERVERS = {"http": "face.testing.scripted.ScriptedServer", "in-process": "face.testing.scripted.InProcessServer"}
SCHEMA = {"type": "json_schema", "json_schema": {"name": "s", "schema": {
    "type": "object", "properties": {"score": {"type": "integer", "minimum": 1, "maximum": 3}}}}}


def _cfg(target: str, **kw) -> LLMConfig:
    server = {"_target_": target, **kw.pop("server", {})}
    return LLMConfig(**{"backend": "scripted", "model": "scripted-model", "cache": False, "progress": False,
                        "concurrency": 4, "timeout_s": 5.0, "max_retries": 3, "backoff_base_s": 0.001,
                        "backoff_max_s": 0.01, "probe": False, "server": server, **kw})


def _requests() -> list[ChatRequest]:
    return [ChatRequest(messages=f"rate answer {i}", n=3, tag="t", logprobs=True, top_logprobs=2)
            for i in range(6)] + [ChatRequest(messages="json please", n=2, tag="j", response_format=SCHEMA)]


def _run(target: str, reqs: list[ChatRequest], **kw):
    with make_client(_cfg(target, **kw)) as c:
        res = c.run_batch(reqs)
        log = [{k: v for k, v in e.items() if k != "t"} for e in c.server.log]
        return res, log, c.usage.summary()


def test_answers_logprobs_usage_and_the_request_log_are_those_of_the_http_server():
    reqs = _requests()
    (http, http_log, hs), (mine, my_log, ms) = (_run(t, reqs) for t in SERVERS.values())
    assert [r.texts for r in mine] == [r.texts for r in http] and len(mine) == 7
    assert [[s.logprobs for s in r.samples] for r in mine] == [[s.logprobs for s in r.samples] for r in http]
    assert any(s.logprobs for r in mine for s in r.samples)
    assert [(r.input_tokens, r.output_tokens) for r in mine] == [(r.input_tokens, r.output_tokens) for r in http]
    assert sorted(my_log, key=str) == sorted(http_log, key=str) and len(my_log) == hs["http_requests"] == 20
    assert {k: ms[k] for k in ("requests", "samples", "http_requests", "input_tokens", "output_tokens")} == \
        {k: hs[k] for k in ("requests", "samples", "http_requests", "input_tokens", "output_tokens")}


@pytest.mark.parametrize("kind", [*TRANSPORT_KINDS, "disconnect"])
def test_a_transport_fault_is_the_same_exception_to_the_client_and_retried_alike(kind):
    """Forced on the first request: with no retries the client fails with the same error on both servers; with
    retries the request succeeds after exactly one."""
    seen = {}
    for name, target in SERVERS.items():
        cfg = _cfg(target, max_retries=0, timeout_s=0.3, server={"hang_s": 1.0})
        with make_client(cfg) as c:
            c.server.force(kind)
            with pytest.raises(LLMCallError) as err:
                c.run_batch([ChatRequest(messages="hi", tag="f")])
            seen[name] = type(err.value.__cause__).__name__
        with make_client(_cfg(target, timeout_s=0.3, server={"hang_s": 1.0})) as c:
            c.server.force(kind)
            [res] = c.run_batch([ChatRequest(messages="hi", tag="f")])
            assert res.retries == 1 and res.texts and c.usage.summary()["retries"] == 1
    assert seen["in-process"] == seen["http"], seen


def test_the_server_classes_share_their_answers_and_fault_draws():
    """One implementation: the in-process server is the HTTP server's answering without its socket."""
    assert issubclass(InProcessServer, ScriptedServer)
    assert InProcessServer.handle.__qualname__.startswith("InProcessServer")
    assert "_completion" not in vars(InProcessServer) and "_reply" not in vars(InProcessServer)


def test_the_endpoint_probe_goes_through_the_same_wire(tmp_path):
    with make_client(_cfg(SERVERS["in-process"], probe=True, n_per_request=3, cache=True,
                          cache_dir=str(tmp_path))) as c:
        [res] = c.run_batch([ChatRequest(messages="hi", n=3, tag="t")])
        tags = [e for e in c.usage.summary()["by_tag"]]
        assert c.cfg.n_per_request == 3 and len(res.texts) == 3  # n is honoured: probed, not assumed
    assert "probe" in tags and res.http_requests == 1
