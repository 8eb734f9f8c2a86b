"""Budget caps, dry-run, accounting artifacts, and that the API key never leaks."""
import dataclasses
import json
import logging
import math

import pytest
from helpers import chat_requests

from face.llm import BudgetExceeded, SampleCache, make_client
from face.llm.sizes import bound
from face.llm.usage import cost_usd, estimate_input_tokens


def reqs(k, tag="b", **kw):
    return chat_requests(k, tag + " question number {i}", tag=tag, **kw)


def test_max_calls_stops_before_exceeding_and_keeps_cache(server, make_cfg):
    with make_client(make_cfg(max_calls=5, concurrency=2)) as c:
        with pytest.raises(BudgetExceeded) as ei:
            c.run_batch(reqs(10))
        msg = str(ei.value)
        assert "max_calls=5" in msg and "cached" in msg and "5 of 10" in msg and "re-run" in msg
        assert c.usage.summary()["http_requests"] == 5 and c.usage.summary()["budget_stops"] == 5
    assert len(server.log) == 5
    assert len(SampleCache(make_cfg().cache_dir)) == 5
    # re-run with the cap lifted: only the 5 missing calls are sent
    with make_client(make_cfg()) as c:
        out = c.run_batch(reqs(10))
        assert sum(r.cached_samples for r in out) == 5
    assert len(server.log) == 10


def test_max_cost_stops_before_exceeding(server, make_cfg):
    price = 1000.0  # USD per Mtok, so that tiny requests cost something
    cfg = make_cfg(price_input_per_mtok=price, price_output_per_mtok=price, max_tokens=20, concurrency=1,
                   max_cost_usd=0.2)
    with make_client(cfg) as c:
        with pytest.raises(BudgetExceeded) as ei:
            c.run_batch(reqs(50))
        s = c.usage.summary()
        assert "max_cost_usd=0.2" in str(ei.value) and "cached" in str(ei.value)
        # actual spend is within the cap, and the next request's bound would have crossed it
        assert 0 < s["cost_usd"] <= 0.2
        b = bound(reqs(1)[0].messages, 20, 1)
        assert s["cost_usd"] + cost_usd(b.input_tokens, b.output_tokens, price, price) > 0.2
        # cost is computed from the server's reported usage
        assert s["cost_usd"] == pytest.approx(cost_usd(s["input_tokens"], s["output_tokens"], price, price))
        assert 0 < s["http_requests"] < 50
    assert len(server.log) == s["http_requests"]
    assert len(SampleCache(cfg.cache_dir)) == s["http_requests"]


def test_dry_run_sends_nothing_and_estimates(server, make_cfg):
    # one request is cached beforehand: dry-run serves it from the cache and counts only misses
    with make_client(make_cfg(max_tokens=100)) as c:
        real = c.run(reqs(1)[0])
    server.reset_log()
    cfg = make_cfg(dry_run=True, price_input_per_mtok=2.0, price_output_per_mtok=4.0, max_tokens=100,
                   max_calls=1, max_cost_usd=1e-9)  # caps are not enforced in a dry run
    rs = reqs(10, n=3)
    with make_client(cfg) as c:
        out = c.run_batch(rs)
        s = c.usage.summary()
    assert server.log == []
    assert s["dry_run"] and s["http_requests"] == 0 and s["cost_usd"] == 0
    assert s["dry_run_requests"] == 10 * 3 - 1
    tin = sum(estimate_input_tokens(r.messages) for r in rs) * 3 - estimate_input_tokens(rs[0].messages)
    assert s["estimated_input_tokens"] == tin
    assert s["estimated_output_tokens"] == (30 - 1) * 100
    assert s["estimated_cost_usd"] == pytest.approx(tin * 2e-6 + 29 * 100 * 4e-6)
    assert out[0].samples[0].text == real.text and not out[0].samples[0].dry_run
    placeholders = [x for r in out for x in r.samples if x.dry_run]
    assert len(placeholders) == 29 and all(x.text == "" and x.finish_reason == "dry_run" for x in placeholders)
    assert len(SampleCache(cfg.cache_dir)) == 1  # placeholders are never cached


def test_usage_artifact_and_mlflow_metrics(server, make_cfg, tmp_path):
    with make_client(make_cfg(price_input_per_mtok=1.0, price_output_per_mtok=2.0)) as c:
        c.run_batch(reqs(3, tag="decompose"))
        c.run_batch(reqs(2, tag="score", n=2))
        c.run_batch(reqs(1, tag="score", n=2))
        m = c.usage.mlflow_metrics()
        path = c.usage.write_artifact(tmp_path / "usage.json")
    doc = json.loads(path.read_text())
    assert len(doc["requests"]) == 6 and doc["totals"]["requests"] == 6
    assert doc["totals"]["http_requests"] == 3 + 4 and doc["totals"]["cache_hits"] == 2
    assert doc["totals"]["samples"] == 3 + 4 and doc["totals"]["by_tag"]["score"]["samples"] == 4
    assert doc["totals"]["by_tag"]["score"]["requests"] == 3
    assert all(isinstance(v, float) and math.isfinite(v) for v in m.values())
    assert m["llm_requests"] == 6 and doc["totals"]["by_tag"]["score"]["http_requests"] == 4
    assert m["llm_samples"] == 7 and "llm_calls" not in m
    assert not any(k.startswith(("llm_score", "llm_decompose")) for k in m)  # per stage: in the artifact only
    assert m["llm_cost_usd"] == pytest.approx(doc["totals"]["cost_usd"]) and m["llm_cost_usd"] > 0
    assert doc["totals"]["latency_p95_s"] >= doc["totals"]["latency_p50_s"] > 0


def test_api_key_value_never_written(server, make_cfg, tmp_path, monkeypatch, caplog):
    secret = "sk-test-SECRET123"
    monkeypatch.setenv("FACE_TEST_LLM_KEY", secret)
    log_file = tmp_path / "server.jsonl"
    server.log_file = str(log_file)  # JSON lines appended as requests come
    caplog.set_level(logging.DEBUG)
    cfg = make_cfg(api_key_env="FACE_TEST_LLM_KEY", cache_dir=str(tmp_path / "cache"))
    with make_client(cfg) as c:
        server.force("429", "500")
        c.run_batch(reqs(5))
        with pytest.raises(BudgetExceeded):
            c.usage.max_calls = c.usage.http_requests
            c.run_batch(reqs(6))
        art = c.usage.write_artifact(tmp_path / "usage.json")
        summary = json.dumps(c.usage.summary())
    # the key was really used (so the scan below is meaningful)
    assert server.seen_auth(secret)
    settings = json.dumps(dataclasses.asdict(cfg))
    assert "FACE_TEST_LLM_KEY" in settings and secret not in settings
    texts = {"usage artifact": art.read_text(), "summary": summary, "log records": caplog.text,
             "server log": log_file.read_text()}
    for p in (tmp_path / "cache").iterdir():
        texts[p.name] = p.read_bytes().decode("latin-1")
    assert len(texts["server log"]) > 0 and len(texts["llm_cache.sqlite"]) > 0
    for where, text in texts.items():
        assert secret not in text, where
        assert "SECRET123" not in text, where


def test_api_key_env_must_be_a_name():
    from face.llm import LLMConfig

    with pytest.raises(ValueError, match="NAME"):
        LLMConfig(backend="openai", api_key_env="sk-live-abc")


def test_usage_holds_a_bounded_part_of_the_requests_and_exact_totals(tmp_path):
    from face.llm.base import ChatRequest, ChatResult
    from face.llm.sizes import Bound
    from face.llm.usage import KEEP_REQUESTS, LATENCY_SAMPLE, Piece, Usage

    u = Usage()
    n = KEEP_REQUESTS + 2500
    for i in range(n):
        failed = i % 1000 == 999  # 3 failures, one of them beyond the kept records
        req = ChatRequest("q", n=5, tag="score" if i % 2 else "decompose")
        u.add(ChatResult(request=req, samples=[], cached_samples=i % 3, http_requests=1, input_tokens=10,
                         output_tokens=2), error=RuntimeError("boom") if failed else None)
    piece = Piece("t", 1, 1, 0, Bound(0, 0))
    for i in range(LATENCY_SAMPLE * 3):
        u.settle(piece, 0.0, None, 0, latency_s=(i % 100) / 100)
    s = u.summary()
    assert s["requests"] == n and s["by_tag"]["score"]["requests"] == n // 2
    assert s["by_tag"]["decompose"]["requests"] == n // 2
    assert s["cache_hits"] == sum(i % 3 for i in range(n)) and s["failures"] == 3
    assert s["by_tag"]["score"]["input_tokens"] == 10 * (n // 2)
    assert len(u.records) == KEEP_REQUESTS + 2  # the first KEEP_REQUESTS, then only the failed ones
    assert s["latency_max_s"] == 0.99 and abs(s["latency_mean_s"] - 0.495) < 1e-9
    assert len(u.http_latencies.sample) == LATENCY_SAMPLE and abs(s["latency_p50_s"] - 0.495) < 0.02
    doc = json.loads(u.write_artifact(tmp_path / "u.json").read_text())
    assert len(doc["requests"]) == KEEP_REQUESTS + 2 and str(n) in doc["requests_note"]
    assert doc["totals"]["requests"] == n
