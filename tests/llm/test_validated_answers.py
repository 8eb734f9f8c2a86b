"""Point 1 of issue 9: answers are validated before they are cached; invalid ones are re-drawn and counted.
Point 2: every transient fault (incl. HTTP 200 with a cut or HTML body, resets, timeouts) is retried."""
import json
import sqlite3
from dataclasses import replace

import pytest

from face.llm import ChatRequest, Draws, SampleCache, make_client
from face.llm.adapters import score_adapter
from face.llm.cache import CACHE_FILE, CachingLM
from face.testing.faults import ANSWER_KINDS, TRANSPORT_KINDS, FaultProxy
from face.testing.scripted import InProcessServer, ScriptedServer

SCORES = score_adapter([1, 2, 3])


def scored(msg: str, n: int = 1, tag: str = "score", rounds: int = 4) -> ChatRequest:
    return SCORES.request(ChatRequest(messages=msg, n=n, tag=tag, draws=Draws(rounds=rounds, max_extra=None)),
                          native=True, validate=True)


def values(res) -> list:
    return [s.value for s in res.answers]


def payloads(cache_dir) -> list[dict]:
    with sqlite3.connect(f"{cache_dir}/{CACHE_FILE}") as db:
        return [json.loads(p) for (p,) in db.execute("SELECT payload FROM samples ORDER BY sample_index")]


def test_adapter_is_not_part_of_the_cache_key_or_equality(make_cfg):
    cfg = make_cfg()
    plain = SCORES.request(ChatRequest(messages="rate this", n=3), native=True)
    lm = CachingLM(None, None, cfg, cfg.model)
    assert scored("rate this", 3).adapter is SCORES and plain.adapter is None
    assert lm.keys_for(scored("rate this", 3)) == lm.keys_for(plain)
    assert scored("rate this", 3) == replace(plain, tag="score") and hash(scored("x")) == hash(scored("x"))


@pytest.mark.parametrize("fault", ["truncated", "malformed"])
def test_invalid_answer_is_redrawn_stored_marked_and_counted(server, make_cfg, tmp_path, fault):
    with make_client(make_cfg(concurrency=1)) as c:  # one at a time: the forced fault is sample 0's
        server.force(fault)
        [res] = c.run_batch([scored("rate this", n=2)])
        s = c.usage.summary()
    # sample 0 was invalid: re-drawn as the next fresh index, 2; sample 1 valid on the first draw
    assert [e["seed"] for e in server.log] == [0, 1, 2]
    assert [x.sample_index for x in res.samples] == [0, 1, 2] and not res.samples[0].valid
    assert [x.sample_index for x in res.answers] == [1, 2]
    assert all(x.value.score in (1, 2, 3) for x in res.answers)
    assert res.answer_retries == 1 and res.rejected_answers == 1 and res.invalid_samples == 0
    assert s["answer_retries"] == 1 and s["rejected_answers"] == 1 and s["invalid_answers"] == 0
    # the invalid draw is in the cache, but marked invalid; the valid ones are not marked
    marks = [p.get("invalid") for p in payloads(tmp_path / "cache")]
    assert marks[0] and ("truncated" in marks[0] or "invalid JSON" in marks[0]) and marks[1:] == [None, None]
    # rerun: everything from the cache, same values, nothing sent
    server.reset_log()
    with make_client(make_cfg()) as c:
        [again] = c.run_batch([scored("rate this", n=2)])
    assert server.log == [] and values(again) == values(res) and again.answers[1].sample_index == 2


def test_a_sample_that_never_validates_is_marked_invalid_not_defaulted(make_cfg, tmp_path):
    srv = InProcessServer(responder=lambda body: "Probably a two.")
    with srv, make_client(make_cfg(server=srv.spec())) as c:
        [res] = c.run_batch([scored("rate", rounds=3)])
        metrics = c.usage.mlflow_metrics()
        path = c.usage.write_artifact(tmp_path / "llm_usage.json")
    assert res.answers == [] and res.invalid_samples == 1 and len(res.samples) == len(srv.log) == 3
    assert all(not x.valid and x.value is None and x.error.startswith("invalid JSON") for x in res.samples)
    assert metrics["llm_invalid_answers"] == 1 and metrics["llm_answer_retries"] == 2
    assert metrics["llm_rejected_answers"] == 3
    doc = json.loads(path.read_text())
    assert doc["totals"]["invalid_answers"] == 1 and doc["invalid_answers"][0]["tag"] == "score"
    assert doc["invalid_answers"][0]["reason"].startswith("no valid answer in 3 draws; last: invalid JSON")
    assert all(p.get("invalid") for p in payloads(tmp_path / "cache"))  # nothing stored as valid


def test_marked_invalid_is_reported_even_without_an_adapter(server, make_cfg):
    with make_client(make_cfg()) as c:
        server.force("truncated")
        [first] = c.run_batch([scored("rate this", rounds=1)])
        [plain] = c.run_batch([replace(scored("rate this"), adapter=None)])
    assert first.samples[0].error and plain.samples[0].cached and plain.samples[0].error == "truncated " \
        "(finish_reason=length)"


def test_answers_cached_as_valid_before_validation_are_caught_on_read(server, make_cfg, tmp_path):
    cfg = make_cfg()
    req = scored("rate this")
    lm = CachingLM(None, None, cfg, cfg.model)
    store = SampleCache(cfg.cache_dir)  # an old cache: a cut answer stored as a valid sample
    store.put_many([(lm.keys_for(req)[0], cfg.model, "score", 0, {"text": '{"sco', "finish_reason": "length"})])
    store.close()
    with make_client(cfg) as c:
        [res] = c.run_batch([req])
    assert res.answers[0].sample_index == 1 and [e["seed"] for e in server.log] == [1]


def test_without_cache_invalid_answers_are_still_redrawn(server, make_cfg):
    with make_client(make_cfg(cache=False)) as c:
        server.force("malformed")
        [res] = c.run_batch([scored("rate this")])
    assert res.answers[0].sample_index == 1 and res.answer_retries == 1


@pytest.mark.slow  # process-, server- or rendering-bound (≈ 1 s): the fast suite stays within 45 s
def test_answer_faults_through_the_proxy_are_never_used(make_cfg, tmp_path):
    """20 % truncated / garbled answers: every returned sample is valid, rejected draws are counted, samples
    that were not faulted are identical to a clean run, and a rerun is served from the cache."""
    reqs = [scored(f"rate answer {i}", n=2, rounds=10) for i in range(120)]  # (one sample meets 6 faults in a row)
    srv = ScriptedServer()
    with srv as info:
        with make_client(make_cfg(base_url=info.base_url, cache_dir=str(tmp_path / "clean"))) as c:
            clean = c.run_batch(reqs)
        with FaultProxy(info.base_url, rate=0.2, kinds=ANSWER_KINDS) as proxy:
            cfg = make_cfg(base_url=proxy.base_url, cache_dir=str(tmp_path / "faulty"))
            with make_client(cfg) as c:
                faulty = c.run_batch(reqs)
                s = c.usage.summary()
            n_faults = len(proxy.faults())
            with make_client(cfg) as c:
                again = c.run_batch(reqs)
                s2 = c.usage.summary()
    assert 0.1 * 240 < n_faults < 0.3 * 240 and set(proxy.faults()) == set(ANSWER_KINDS)
    assert all(len(r.answers) == 2 for r in faulty)
    assert s["rejected_answers"] == s["answer_retries"] == n_faults and s["invalid_answers"] == 0
    same = [(values(a), values(b)) for a, b in zip(clean, faulty) if len(b.samples) == 2]
    assert len(same) > 60 and all(a == b for a, b in same)
    assert s2["http_requests"] == 0 and [values(r) for r in again] == [values(r) for r in faulty]


@pytest.mark.slow  # seconds of processes, servers or rendering: the fast suite stays within 45 s
def test_every_transport_fault_is_retried_and_results_are_identical(make_cfg, tmp_path):
    """429, 500, HTML 502, timeout, reset, HTTP 200 with a cut JSON body, HTTP 200 with an HTML page."""
    reqs = [ChatRequest(messages=f"fault test {i}", tag="f") for i in range(150)]
    srv = ScriptedServer()
    with srv as info:
        with make_client(make_cfg(base_url=info.base_url, cache_dir=str(tmp_path / "clean"))) as c:
            clean = c.run_batch(reqs)
        cfg = dict(cache_dir=str(tmp_path / "faulty"), timeout_s=0.4, concurrency=8)
        with FaultProxy(info.base_url, rate=0.2, kinds=TRANSPORT_KINDS, hang_s=1.0) as proxy, \
                make_client(make_cfg(base_url=proxy.base_url, **cfg)) as c:
            faulty = c.run_batch(reqs)
            s = c.usage.summary()
    log = list(proxy.log)
    faulted = {e["hash"] for e in log if e["fault"]}
    assert set(proxy.faults()) == set(TRANSPORT_KINDS) and len(faulted) == len(proxy.faults())
    # every arrival after a request's first is a retry the client counted: on a loaded machine a request the proxy
    # did not fault may also time out (0.4 s) and be retried (a retry the proxy never read is counted all the same)
    assert len(faulted) <= len(log) - len(reqs) <= s["retries"]
    assert all(sum(e["hash"] == h for e in log) >= 2 for h in faulted)  # each faulted request came again
    assert s["failures"] == 0 and s["http_requests"] == len(reqs)
    assert [r.texts for r in faulty] == [r.texts for r in clean]


def test_a_batch_settles_before_a_spent_request_stops_it(make_cfg, tmp_path):
    """A request whose retry budget is spent fails the batch only after every other request finished
    (and was cached)."""
    from face.llm import LLMCallError

    srv = ScriptedServer()
    with srv as info, FaultProxy(info.base_url, rate=0.0) as proxy:
        proxy.injector.pick = lambda h, attempt, _p=proxy: "500" if _p.log and len(_p.log) <= 3 else None
        cfg = make_cfg(base_url=proxy.base_url, max_retries=2, concurrency=1)
        reqs = [ChatRequest(messages=f"m {i}") for i in range(6)]
        with make_client(cfg) as c, pytest.raises(LLMCallError, match="1 of 6 requests"):
            c.run_batch(reqs)
        with make_client(cfg) as c:
            c.run_batch(reqs)
            assert c.usage.summary()["http_requests"] == 1  # only the failed one is sent again
