"""Issues 21 and 31: a spending cap that holds by construction (each HTTP request's true bound is reserved before
it is sent: face/llm/sizes.py), an endpoint whose reported usage exceeds a request's bound stopped at its first
misreport, a stop line that states what llm_usage.json records, and the endpoint probe as a request like any other
(retried, counted, capped, never remembered when it failed)."""

from __future__ import annotations

import json
import logging
import math
import re

import pytest
from helpers import chat_requests, llm_config

from face.llm import BudgetExceeded, ChatRequest, LLMCallError, LLMConfig, make_client
from face.llm import probe as endpoint_probe
from face.testing.scripted import InProcessServer

CAP = 3.0
PROMPT_WORDS = 100


pytestmark = pytest.mark.usefixtures("forget_probes")


def cfg(server: InProcessServer, tmp_path, **kw) -> LLMConfig:
    return llm_config(tmp_path, server=server, **{"concurrency": 8, "usage_file": str(tmp_path / "llm_usage.json"),
                                                  **kw})


def reqs(k: int, n: int = 1) -> list[ChatRequest]:
    return chat_requests(k, "question {i}: " + "word " * PROMPT_WORDS, n=n)


def spent_in(line: str) -> float:
    """The spend a stop line states ("... $X spent ...")."""
    return float(re.search(r"\$(\d+\.\d+) spent", line).group(1))


def usage_doc(tmp_path) -> dict:
    return json.loads((tmp_path / "llm_usage.json").read_text())["totals"]


def test_an_endpoint_counting_3x_the_estimated_tokens_stays_within_its_bound_and_the_cap(tmp_path):
    # 107 prompt tokens and 23 answer tokens by the server's own count at 1×, ×3 by its report: ≈ $0.26 a
    # request, still under each request's bound (548 prompt tokens, 80 answer tokens): the cap stops the run
    price = 2000.0 / 3
    srv = InProcessServer(usage_factor=3)
    with srv:
        c = make_client(cfg(srv, tmp_path, max_tokens=80, price_input_per_mtok=price,
                            price_output_per_mtok=price, max_cost_usd=CAP))
        with pytest.raises(BudgetExceeded) as stop, c:
            c.run_batch(reqs(200))
    doc = usage_doc(tmp_path)
    # every request the server answered is paid for at the tokens it reported
    assert doc["http_requests"] == len(srv.log) and 3 <= len(srv.log) < 200 and doc["misreported_requests"] == 0
    assert doc["cost_usd"] == pytest.approx((doc["input_tokens"] + doc["output_tokens"]) * price / 1e6)
    assert CAP / 2 < doc["cost_usd"] <= CAP  # the cap, not a premature stop, ended the run
    line = str(stop.value)
    assert spent_in(line) == round(doc["cost_usd"], 6) and "llm.max_cost_usd=3.0" in line


def jumping(srv: InProcessServer, after: int, factor: float):
    """A responder under which the server's reported usage jumps to ``factor`` × after ``after`` answers."""
    from face.testing.scripted import default_responder

    seen = [0]

    def respond(body: dict) -> str:
        seen[0] += 1
        if seen[0] > after:
            srv.completer.usage_factor = factor
        return default_responder(body)

    return respond


# the jumping-usage cases of issue 31: (reported usage 1× for `after` answers, then `factor` ×), concurrency, price
JUMPS = {"1x_to_1000x_at_concurrency_8": (20, 1000, 8, 500.0),
         "1x_to_1000x_at_concurrency_1": (20, 1000, 1, 500.0),
         "20000x_from_the_first_request": (0, 20000, 8, 500.0),
         "1x_to_50x_on_a_cheap_model": (200, 50, 8, 5.0)}


@pytest.mark.parametrize("case", sorted(JUMPS))
def test_a_report_above_a_requests_bound_stops_the_run_at_once_and_says_so(tmp_path, case):
    after, factor, concurrency, price = JUMPS[case]
    srv = InProcessServer()
    srv.responder = jumping(srv, after, factor)
    with srv:
        c = make_client(cfg(srv, tmp_path, max_tokens=50, concurrency=concurrency,
                            price_input_per_mtok=price, price_output_per_mtok=price, max_cost_usd=CAP))
        with pytest.raises(BudgetExceeded) as stop, c:
            c.run_batch(reqs(400))
    doc = json.loads((tmp_path / "llm_usage.json").read_text())
    totals, line = doc["totals"], str(stop.value)
    # stopped at the first misreport: nothing was sent after it but what was already in flight
    assert 1 <= totals["misreported_requests"] <= concurrency
    assert after < totals["http_requests"] <= after + concurrency
    assert "endpoint misreport" in line and "above its bound of" in line and "max_tokens 50 × n 1" in line
    assert doc["misreport"] in line  # the line and llm_usage.json say the same
    assert spent_in(line) == round(totals["cost_usd"], 6)
    # what the honest requests cost stayed under the cap (the misreported ones are recorded as reported)
    honest = [r for r in doc["requests"] if r["output_tokens"] <= 50 * 1 and r["http_requests"]]
    assert sum(r["cost_usd"] for r in honest) <= CAP


@pytest.mark.parametrize("seeds", [range(20), pytest.param(range(20, 320), marks=pytest.mark.slow)])
def test_the_spend_recorded_never_exceeds_the_cap_while_usage_stays_within_the_bounds(seeds):
    """Property: random usage within each request's bound, random latencies, concurrency 1-64, many seeds: the
    spend recorded never exceeds the cap, and the run ends at the cap or at the end of its requests.

    Where not one sample of any of the 150 requests fits under the cap (167 of the 300 slow seeds),
    every request is refused on its own -- nothing is ever reserved or in flight, so neither order nor overlap can
    change a decision -- and the first concurrency + 1 of them (one waiting for a slot) show it as the 150 would:
    those seeds send that many, and every one must be refused (none admitted, whatever usage it would report)."""
    import asyncio
    import random

    from face.llm.budget import BudgetLM
    from face.llm.sizes import bound, cost_usd
    from face.llm.usage import Usage

    class Endpoint:  # below the budget: answers after a random latency with usage within the bound, half at it
        def __init__(self, rng: random.Random, max_tokens: int):
            self.rng, self.max_tokens = rng, max_tokens

        async def chat(self, req):
            from face.llm import ChatResult, Completion

            await asyncio.sleep(self.rng.random() * 0.002)
            b = bound(req.messages, self.max_tokens, req.n)
            if self.rng.random() < 0.5:  # every token it may use: where the cap is tightest
                tin, tout = b.input_tokens, b.output_tokens
            else:
                tin, tout = self.rng.randint(0, b.input_tokens), self.rng.randint(0, b.output_tokens)
            return ChatResult(req, [Completion("x", "stop", sample_index=i) for i in req.indices],
                              input_tokens=tin, output_tokens=tout)

    for seed in seeds:
        rng = random.Random(seed)
        conc, max_tokens, cap = rng.randint(1, 64), rng.choice([1, 16, 256]), rng.choice([0.0, 1e-4, 0.01, 0.5])
        usage = Usage(price_input_per_mtok=rng.uniform(0.1, 50), price_output_per_mtok=rng.uniform(0.1, 200),
                      max_cost_usd=cap)
        c = LLMConfig(concurrency=conc, n_per_request=rng.choice([1, 3]), max_tokens=max_tokens)
        lm = BudgetLM(Endpoint(rng, max_tokens), c, usage)
        rs = [ChatRequest(messages=[("user", "q" * rng.randint(1, 400))], n=rng.randint(1, 5)) for _ in range(150)]
        fits = any(cost_usd(b.input_tokens, b.output_tokens, usage.price_input_per_mtok, usage.price_output_per_mtok)
                   <= cap for b in (bound(r.messages, max_tokens, 1) for r in rs))
        rs = rs if fits else rs[:conc + 1]

        async def run(lm=lm, rs=rs):
            return await asyncio.gather(*(lm.chat(r) for r in rs), return_exceptions=True)

        out = asyncio.run(run())
        assert usage.spent_usd <= cap, (seed, usage.spent_usd, cap)
        assert usage.misreports == 0 and usage.requests_in_flight == 0 and usage.reserved_usd == 0
        stops = [x for x in out if isinstance(x, BaseException)]
        assert all(isinstance(x, BudgetExceeded) for x in stops), seed
        assert fits or len(stops) == len(rs), seed  # nothing fits: nothing is admitted


def test_a_cap_needs_max_tokens():
    from face.llm.sizes import bound

    with pytest.raises(ValueError, match="needs max_tokens"):
        bound([("user", "hi")], None, 1)
    b = bound([("user", "héllo")], 10, 3)  # é is 2 bytes
    assert (b.input_tokens, b.output_tokens) == (len("user") + 6 + 16 + 16, 30)


def test_without_reported_tokens_the_spend_is_the_estimate(tmp_path):
    srv = InProcessServer(report_usage=False)
    with srv, make_client(cfg(srv, tmp_path, price_input_per_mtok=1e6,
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
    srv = InProcessServer()
    with srv, caplog.at_level(logging.WARNING, "face.llm"):
        c = make_client(cfg(srv, tmp_path, probe=True, n_per_request=8, max_calls=0))
        with c:
            assert c.cfg.n_per_request == 8
            with pytest.raises(BudgetExceeded):
                c.run_batch(reqs(1))
    assert srv.log == []
    assert not (tmp_path / "cache" / endpoint_probe.ENDPOINTS_FILE).exists()
    assert "probe does not fit the LLM budget" in caplog.text


def test_the_probe_counts_toward_max_calls(tmp_path):
    srv = InProcessServer()
    with srv:
        c = make_client(cfg(srv, tmp_path, probe=True, n_per_request=8, max_calls=3))
        with pytest.raises(BudgetExceeded), c:
            c.run_batch(reqs(5, n=2))
    doc = json.loads((tmp_path / "llm_usage.json").read_text())["totals"]
    assert len(srv.log) == 3 and doc["http_requests"] == 3
    assert doc["by_tag"]["probe"]["http_requests"] == 2 and doc["by_tag"]["q"]["http_requests"] == 1


def test_a_429_on_the_probe_is_retried_and_n_is_still_used(tmp_path):
    srv = InProcessServer()
    srv.force("429")  # the very first request: the probe's
    with srv, make_client(cfg(srv, tmp_path, probe=True, n_per_request=8)) as c:
        assert c.cfg.n_per_request == 8
        c.run_batch(reqs(4, n=4))
    doc = json.loads((tmp_path / "llm_usage.json").read_text())["totals"]
    assert [e["status"] for e in srv.log].count(429) == 1 and len(srv.log) == 2 + 1 + 4
    assert doc["retries"] == 1 and doc["by_tag"]["probe"]["http_requests"] == 2
    assert doc["by_tag"]["q"]["http_requests"] == 4  # n honoured: one request per 4 samples
    assert json.loads((tmp_path / "cache" / endpoint_probe.ENDPOINTS_FILE).read_text())


def test_a_probe_that_fails_after_its_retries_stops_and_is_not_remembered(tmp_path):
    srv = InProcessServer()
    srv.force(*["500"] * 20)
    with srv, pytest.raises(LLMCallError) as e:
        make_client(cfg(srv, tmp_path, probe=True, n_per_request=8, max_retries=2)).__enter__()
    assert "endpoint probe" in str(e.value) and "attempts=3" in str(e.value)
    assert not (tmp_path / "cache" / endpoint_probe.ENDPOINTS_FILE).exists()
    assert endpoint_probe.load(None, srv.base_url, "scripted-model") is None
