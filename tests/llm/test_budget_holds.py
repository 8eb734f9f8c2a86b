"""Issue 21: a budget that holds when the endpoint counts more tokens than the estimate, a stop line that states what
llm_usage.json records, and the endpoint probe as a request like any other (retried, counted, capped, never
remembered when it failed)."""

from __future__ import annotations

import json
import logging
import math
import re

import pytest

from face.llm import BudgetExceeded, ChatRequest, LLMCallError, LLMConfig, make_client
from face.llm import probe as endpoint_probe
from face.testing.scripted import ScriptedServer

CAP = 3.0
PROMPT_WORDS = 100


@pytest.fixture(autouse=True)
def _forget_probes():
    endpoint_probe.forget()
    yield
    endpoint_probe.forget()


def cfg(base_url: str, tmp_path, **kw) -> LLMConfig:
    base = {"base_url": base_url, "model": "scripted-model", "cache_dir": str(tmp_path / "cache"), "progress": False,
            "concurrency": 8, "timeout_s": 5.0, "max_retries": 4, "backoff_base_s": 0.01, "backoff_max_s": 0.05,
            "probe": False, "usage_file": str(tmp_path / "llm_usage.json")}
    return LLMConfig(**{**base, **kw})


def reqs(k: int, n: int = 1) -> list[ChatRequest]:
    return [ChatRequest(messages=[("user", f"question {i}: " + "word " * PROMPT_WORDS)], n=n, tag="q")
            for i in range(k)]


def spent_in(line: str) -> float:
    """The spend a stop line states ("... $X spent ...")."""
    return float(re.search(r"\$(\d+\.\d+) spent", line).group(1))


@pytest.mark.parametrize("factor", [4, 200])
def test_an_endpoint_counting_more_tokens_than_estimated_cannot_push_the_spend_past_the_cap(tmp_path, factor):
    # ≈ 105 prompt tokens and ≈ 15 answer tokens by the server's own count at 1×, so a request costs ≈ $0.24
    # at any factor: the $3 cap is reached after about a dozen requests
    price = 2000.0 / factor
    srv = ScriptedServer(usage_factor=factor)
    with srv as info:
        c = make_client(cfg(info.base_url, tmp_path, max_tokens=50, price_input_per_mtok=price,
                            price_output_per_mtok=price, max_cost_usd=CAP))
        with pytest.raises(BudgetExceeded) as stop, c:
            c.run_batch(reqs(200))
    doc = json.loads((tmp_path / "llm_usage.json").read_text())["totals"]
    # every request the server answered is paid for at the tokens it reported
    assert doc["http_requests"] == len(srv.log) and 3 <= len(srv.log) < 200
    assert doc["cost_usd"] == pytest.approx((doc["input_tokens"] + doc["output_tokens"]) * price / 1e6)
    assert doc["cost_usd"] <= CAP
    assert doc["cost_usd"] > CAP / 2  # it did spend: the cap, not a premature stop, ended the run
    line = str(stop.value)
    assert spent_in(line) == round(doc["cost_usd"], 6) and "llm.max_cost_usd=3.0" in line


def test_without_reported_tokens_the_spend_is_the_estimate(tmp_path):
    srv = ScriptedServer(report_usage=False)
    with srv as info, make_client(cfg(info.base_url, tmp_path, price_input_per_mtok=1e6,
                                      price_output_per_mtok=1e6)) as c:
        (res,) = c.run_batch(reqs(1))
    doc = json.loads((tmp_path / "llm_usage.json").read_text())["totals"]
    # by hand: ~4 characters a token, + 4 per message, + 3 per request; the answer likewise (no +)
    content = "question 0: " + "word " * PROMPT_WORDS
    tin = math.ceil(len(content) / 4) + 4 + 3
    tout = math.ceil(len(res.samples[0].text) / 4)
    assert (doc["input_tokens"], doc["output_tokens"]) == (tin, tout)
    assert doc["cost_usd"] == pytest.approx(tin + tout) and doc["unreported_usage_requests"] == 1


def test_with_max_calls_0_the_probe_sends_nothing_and_the_config_is_trusted(tmp_path, caplog):
    srv = ScriptedServer()
    with srv as info, caplog.at_level(logging.WARNING, "face.llm"):
        c = make_client(cfg(info.base_url, tmp_path, probe=True, n_per_request=8, max_calls=0))
        with c:
            assert c.cfg.n_per_request == 8
            with pytest.raises(BudgetExceeded):
                c.run_batch(reqs(1))
    assert srv.log == []
    assert not (tmp_path / "cache" / endpoint_probe.ENDPOINTS_FILE).exists()
    assert "probe does not fit the LLM budget" in caplog.text


def test_the_probe_counts_toward_max_calls(tmp_path):
    srv = ScriptedServer()
    with srv as info:
        c = make_client(cfg(info.base_url, tmp_path, probe=True, n_per_request=8, max_calls=3))
        with pytest.raises(BudgetExceeded), c:
            c.run_batch(reqs(5, n=2))
    doc = json.loads((tmp_path / "llm_usage.json").read_text())["totals"]
    assert len(srv.log) == 3 and doc["http_requests"] == 3
    assert doc["by_tag"]["probe"]["http_requests"] == 2 and doc["by_tag"]["q"]["http_requests"] == 1


def test_a_429_on_the_probe_is_retried_and_n_is_still_used(tmp_path):
    srv = ScriptedServer()
    srv.force("429")  # the very first request: the probe's
    with srv as info, make_client(cfg(info.base_url, tmp_path, probe=True, n_per_request=8)) as c:
        assert c.cfg.n_per_request == 8
        c.run_batch(reqs(4, n=4))
    doc = json.loads((tmp_path / "llm_usage.json").read_text())["totals"]
    assert [e["status"] for e in srv.log].count(429) == 1 and len(srv.log) == 2 + 1 + 4
    assert doc["retries"] == 1 and doc["by_tag"]["probe"]["http_requests"] == 2
    assert doc["by_tag"]["q"]["http_requests"] == 4  # n honoured: one request per 4 samples
    assert json.loads((tmp_path / "cache" / endpoint_probe.ENDPOINTS_FILE).read_text())


def test_a_probe_that_fails_after_its_retries_stops_and_is_not_remembered(tmp_path):
    srv = ScriptedServer()
    srv.force(*["500"] * 20)
    with srv as info, pytest.raises(LLMCallError) as e:
        make_client(cfg(info.base_url, tmp_path, probe=True, n_per_request=8, max_retries=2)).__enter__()
    assert "endpoint probe" in str(e.value) and "attempts=3" in str(e.value)
    assert not (tmp_path / "cache" / endpoint_probe.ENDPOINTS_FILE).exists()
    assert endpoint_probe.load(None, info.base_url, "scripted-model") is None
