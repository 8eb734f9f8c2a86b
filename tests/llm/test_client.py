import asyncio
import json
import time

import pytest
from helpers import chat_requests

from face.llm import LM, ChatRequest, LLMCallError, LLMConfig, make_client
from face.testing.scripted import InProcessServer


def user(text: str) -> list[dict]:
    return [{"role": "system", "content": "You are a test."}, {"role": "user", "content": text}]


def reqs(k, **kw):
    return chat_requests(k, tag="t", system="You are a test.", **kw)


def test_messages_normalised_and_hashable():
    a = ChatRequest(messages=[{"role": "user", "content": "hi"}])
    b = ChatRequest(messages=(("user", "hi"),))
    c = ChatRequest(messages="hi")
    assert a == b == c and hash(a) == hash(b)
    assert a.messages == (("user", "hi"),)
    rf = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}}
    assert hash(ChatRequest(messages="hi", response_format=rf)) == \
        hash(ChatRequest(messages="hi", response_format=dict(rf)))
    assert ChatRequest(messages="hi", response_format=rf) != a


def test_batch_order_and_cache_hit(server, make_cfg):
    rs = reqs(20)
    with make_client(make_cfg()) as c:
        out = c.run_batch(rs)
        assert [r.request for r in out] == rs
        assert all(f"question {i}" in r.text for i, r in enumerate(out))
        assert len(server.log) == 20
        again = c.run_batch(rs)  # run_batch is callable repeatedly
        assert len(server.log) == 20
        assert [r.texts for r in again] == [r.texts for r in out]
        assert all(s.cached for r in again for s in r.samples)
        assert not any(s.cached for r in out for s in r.samples)
        s = c.usage.summary()
        assert s["requests"] == 40 and s["http_requests"] == 20 and s["cache_hits"] == 20
    # a new client (new process in real life) reads the same cache file
    with make_client(make_cfg()) as c:
        assert c.run_batch(rs[:3])[0].samples[0].cached
    assert len(server.log) == 20


def test_cache_key_depends_on_sampling_params_not_tag(server, make_cfg):
    with make_client(make_cfg()) as c:
        c.run(ChatRequest(messages=user("q"), tag="a"))
        c.run(ChatRequest(messages=user("q"), tag="b"))
        assert len(server.log) == 1
        c.run(ChatRequest(messages=user("q"), temperature=0.1))
        c.run(ChatRequest(messages=user("q"), max_tokens=7))
        c.run(ChatRequest(messages=user("q "), max_tokens=7))
        assert len(server.log) == 4
    server.model = "other-model"  # a configured server names the model (the client's llm.model is its default)
    with make_client(make_cfg()) as c:
        c.run(ChatRequest(messages=user("q")))
    assert len(server.log) == 5 and server.log[-1]["model"] == "other-model"


def test_n_reuse_only_requests_missing_samples(server, make_cfg):
    with make_client(make_cfg()) as c:
        r5 = c.run(ChatRequest(messages=user("q"), n=5))
        assert len(server.log) == 5
        assert sorted(e["seed"] for e in server.log) == [0, 1, 2, 3, 4]
        r10 = c.run(ChatRequest(messages=user("q"), n=10))
        assert len(server.log) == 10
        assert sorted(e["seed"] for e in server.log[5:]) == [5, 6, 7, 8, 9]
        assert r10.texts[:5] == r5.texts
        assert [s.cached for s in r10.samples] == [True] * 5 + [False] * 5
        assert [s.sample_index for s in r10.samples] == list(range(10))
        assert r10.cached_samples == 5 and r10.http_requests == 5
        assert len(set(r10.texts)) > 1  # different seeds -> different samples


def test_n_split_by_n_per_request(server, make_cfg, tmp_path):
    with make_client(make_cfg(n_per_request=1)) as c:
        one = c.run(ChatRequest(messages=user("q"), n=5))
    assert [e["n"] for e in server.log] == [1] * 5
    server.reset_log()
    with make_client(make_cfg(n_per_request=2, cache_dir=str(tmp_path / "c2"))) as c:
        two = c.run(ChatRequest(messages=user("q"), n=5))
    assert sorted(e["n"] for e in server.log) == [1, 2, 2]
    assert sorted(e["seed"] for e in server.log) == [0, 2, 4]
    assert two.texts == one.texts
    server.reset_log()
    with make_client(make_cfg(n_per_request=128, cache_dir=str(tmp_path / "c3"))) as c:
        c.run(ChatRequest(messages=user("q"), n=5))
    assert [e["n"] for e in server.log] == [5]


def test_seed_none_sends_no_seed(server, make_cfg):
    with make_client(make_cfg(seed=None)) as c:
        c.run(ChatRequest(messages=user("q"), n=2))
    assert [e["seed"] for e in server.log] == [None, None]


def test_concurrency_limit_respected(make_cfg):
    srv = InProcessServer(latency_s=0.05)
    with srv:
        cfg = make_cfg(server=srv.spec(), concurrency=3)
        with make_client(cfg) as c:
            t0 = time.perf_counter()
            c.run_batch(reqs(24))
            dt = time.perf_counter() - t0
            assert c.usage.concurrency()["max_in_flight"] == 3  # (llm_usage.json)
        assert srv.max_active == 3
        assert dt >= 24 / 3 * 0.05 * 0.9


def test_async_chat_in_user_loop(server, make_cfg):
    with make_client(make_cfg()) as c:
        async def main():
            return await asyncio.gather(*(c.chat(r) for r in reqs(5)))
        out = asyncio.run(main())
        assert len(out) == 5 and len(server.log) == 5
        with pytest.raises(RuntimeError, match="running event loop"):
            async def bad():
                c.run_batch(reqs(1))
            asyncio.run(bad())
        assert c.run_batch(reqs(5))[4].samples[0].cached  # sync after async still works


@pytest.mark.parametrize("kind", ["429", "500", "timeout", "disconnect"])
def test_retry_each_transport_fault(server, make_cfg, kind):
    server.hang_s = 1.0
    with make_client(make_cfg(timeout_s=0.3)) as c:
        server.force(kind)
        r = c.run(ChatRequest(messages=user("q")))
        assert r.retries == 1
        assert c.usage.summary()["retries"] == 1
    assert [e["fault"] for e in server.log] == [kind, None]
    assert "question" not in r.text and "q" in r.text


def test_retry_after_header_honoured(server, make_cfg):
    server.retry_after_s = 0.4
    with make_client(make_cfg(backoff_base_s=0.001, backoff_max_s=0.01)) as c:
        server.force("429")
        t0 = time.perf_counter()
        c.run(ChatRequest(messages=user("a")))
        assert time.perf_counter() - t0 >= 0.4
        server.force("500")  # no Retry-After: tiny backoff
        t0 = time.perf_counter()
        c.run(ChatRequest(messages=user("b")))
        assert time.perf_counter() - t0 < 0.3


def test_retries_exhausted_raise_and_count_failure(server, make_cfg):
    with make_client(make_cfg(max_retries=2)) as c:
        server.force("500", "500", "500")
        with pytest.raises(LLMCallError, match="failed"):
            c.run(ChatRequest(messages=user("q")))
        s = c.usage.summary()
        assert s["failures"] == 1 and s["retries"] == 2
        # on_error="return": other requests still complete
        server.force("500", "500", "500")
        out = c.run_batch([ChatRequest(messages=user("x"))], on_error="return")
        assert out[0].error is not None and out[0].samples == [] and "failed" in out[0].error
    assert len(server.log) == 6


def test_logprobs_roundtrip_through_cache(server, make_cfg):
    with make_client(make_cfg()) as c:
        a = c.run(ChatRequest(messages=user("q"), logprobs=True, top_logprobs=3))
        b = c.run(ChatRequest(messages=user("q"), logprobs=True, top_logprobs=3))
    assert b.samples[0].cached and a.samples[0].logprobs == b.samples[0].logprobs
    lp = a.samples[0].logprobs
    assert "".join(t.token for t in lp) == a.text
    assert all(len(t.top) == 3 for t in lp)


def test_logprobs_unsupported_is_explicit(server, make_cfg):
    with make_client(make_cfg(supports_logprobs=False)) as c, pytest.raises(ValueError, match="logprobs"):
        c.run(ChatRequest(messages=user("q"), logprobs=True))


def test_scripted_backend_starts_its_own_server(tmp_path):
    cfg = LLMConfig(backend="scripted", cache_dir=str(tmp_path), progress=False,
                    server={"_target_": "face.testing.scripted.ScriptedServer", "latency_s": 0.0})
    with make_client(cfg) as c:
        r = c.run(ChatRequest(messages="hello"))
        assert c.base_url.startswith("http://127.0.0.1:")
        assert "hello" in r.text


def test_json_object_schema_wire_format(server, make_cfg, tmp_path):
    schema = {"type": "object", "properties": {"score": {"type": "integer", "minimum": 1, "maximum": 3}},
              "required": ["score"]}
    rf = {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}}
    seen = []
    orig = server.responder

    def spy(body):
        seen.append(body.get("response_format"))
        return orig(body)

    server.responder = spy
    with make_client(make_cfg(json_schema_format="json_object_schema")) as c:
        a = c.run(ChatRequest(messages="rate", response_format=rf))
    with make_client(make_cfg(cache_dir=str(tmp_path / "other"))) as c:
        b = c.run(ChatRequest(messages="rate", response_format=rf))
    assert seen == [{"type": "json_object", "schema": schema}, rf]
    assert 1 <= json.loads(a.text)["score"] <= 3
    assert a.text == b.text  # same instance whichever wire format


def test_progress_bar_shows_hits_failures_cost(server, make_cfg, capsys, monkeypatch):
    monkeypatch.setenv("FACE_PROGRESS", "1")  # captured stderr is no terminal: draw the bar all the same
    with make_client(make_cfg(progress=True, price_input_per_mtok=1.0)) as c:
        c.run_batch(reqs(3), desc="scoring relevance")
        c.run_batch(reqs(3), desc="scoring relevance")
    err = capsys.readouterr().err
    assert "scoring relevance" in err and "hits=3" in err and "fail=0" in err and "cost=$" in err
    with make_client(make_cfg(progress=False)) as c:
        c.run_batch(reqs(3), desc="silent batch")
    assert "silent batch" not in capsys.readouterr().err


def test_retries_counted_under_faults_injected_by_the_configured_server(tmp_path):
    server = {"_target_": "face.testing.scripted.InProcessServer", "fault_rate": 0.5, "fault_kinds": ["429", "500"],
              "retry_after_s": 0.0}
    cfg = LLMConfig(backend="scripted", cache_dir=str(tmp_path), progress=False, max_retries=3,
                    backoff_base_s=0.001, backoff_max_s=0.01, server=server)
    with make_client(cfg) as c:
        out = c.run_batch(reqs(40))
        s = c.usage.summary()
        log = list(c.server.log)
    faulted = [e for e in log if e["fault"]]
    assert 8 <= len(faulted) <= 32 and {e["fault"] for e in faulted} == {"429", "500"}
    assert s["retries"] == len(faulted) == sum(r.retries for r in out)
    assert s["http_requests"] == 40 and s["failures"] == 0 and len(log) == 40 + len(faulted)
    by_request = {e["hash"]: e for e in faulted}
    assert len(by_request) == len(faulted)  # each faulted request failed once, then succeeded


def test_a_backend_is_a_config_not_a_branch(tmp_path):
    """Any label, any server class: the client takes base_url and model from the started server."""
    server = {"_target_": "face.testing.scripted.ScriptedServer", "model": "served-model"}
    cfg = LLMConfig(backend="my-new-backend", model="ignored", base_url="http://ignored/v1", cache_dir=str(tmp_path),
                    progress=False, server=server)
    with make_client(cfg) as c:
        c.run(ChatRequest(messages="hi"))
        assert isinstance(c, LM) and c.model == "served-model" and c.base_url == c.server.base_url != cfg.base_url
        assert [e["model"] for e in c.server.log] == ["served-model"]
        srv = c.server
    assert c.server is None and srv.thread is None  # stopped with the client
