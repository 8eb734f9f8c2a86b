"""Issues 21, 31 and 41: a spending cap that holds by construction (each HTTP request's true bound is reserved before
it is sent: face/llm/sizes.py), whatever the endpoint reports; an endpoint misreport (usage above a request's bound,
not a count of tokens, answers longer than max_tokens allows) stopping a capped run at once and said once without a
cap, a stop line that states what llm_usage.json records, and the endpoint probe as a request like any other
(retried, counted, capped, never remembered when it failed)."""

from __future__ import annotations

import json
import logging
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
            srv.usage_factor = factor
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


# how an endpoint misbehaves once it does (issue 41), from the true tokens of its answer: the usage it reports
# (None: none), and whether it ignores max_tokens (its answers 5 × longer than the bound, 5 bytes a token)
MISBEHAVIOURS = {
    "negative_usage": (lambda tin, tout: {"prompt_tokens": -1_000_000, "completion_tokens": tout}, False),
    "nan_usage": (lambda tin, tout: {"prompt_tokens": tin, "completion_tokens": float("nan")}, False),
    "infinite_usage": (lambda tin, tout: {"prompt_tokens": float("inf"), "completion_tokens": tout}, False),
    "string_usage": (lambda tin, tout: {"prompt_tokens": str(tin), "completion_tokens": str(tout)}, False),
    "missing_usage": (lambda tin, tout: None, False),
    "ignores_max_tokens": (lambda tin, tout: None, True),
}


def honest(tin: int, tout: int) -> dict:
    return {"prompt_tokens": tin, "completion_tokens": tout}


class Endpoint:
    """Answers after a random latency with usage within the bound, half at it; from its ``after``-th request on it
    misbehaves as ``misbehaviour`` (one of ``MISBEHAVIOURS``) says. It knows what it truly used: ``used`` (input
    tokens, output tokens, misbehaved) a reply, and how many requests reached it after the budget saw a misreport."""

    def __init__(self, rng, max_tokens: int, usage, misbehaviour: tuple | None = None, after: int = 0):
        self.rng, self.max_tokens, self.usage = rng, max_tokens, usage
        self.misbehaviour, self.after = misbehaviour, after
        self.used: list[tuple[int, int, bool]] = []
        self.after_a_misreport = 0

    async def chat(self, req):
        import asyncio

        from face.llm.sizes import bound
        from face.llm.transport import completion_result

        bad = self.misbehaviour is not None and len(self.used) + self.after_a_misreport >= self.after
        self.after_a_misreport += self.usage.misreport is not None
        await asyncio.sleep(self.rng.random() * 0.002)
        b = bound(req.messages, self.max_tokens, req.n)
        if self.rng.random() < 0.5:  # every token it may use: where the cap is tightest
            tin, tout = b.input_tokens, b.output_tokens
        else:
            tin, tout = self.rng.randint(0, b.input_tokens), self.rng.randint(0, b.output_tokens)
        report, overlong = self.misbehaviour if bad else (honest, False)
        text = "word " * (5 * self.max_tokens) if overlong else "x"
        tout = 5 * b.output_tokens if overlong else tout
        self.used.append((tin, tout, bad))
        data = {"choices": [{"message": {"content": text}, "finish_reason": "stop"}] * req.n,
                "usage": report(tin, tout)}
        return completion_result(req, data)  # the reply as the transport reads it


@pytest.mark.parametrize("kind, seeds", [
    ("honest", range(20)), pytest.param("honest", range(20, 320), marks=pytest.mark.slow),
    *((k, range(10)) for k in MISBEHAVIOURS),
    *(pytest.param(k, range(10, 200), marks=pytest.mark.slow) for k in MISBEHAVIOURS)])
def test_the_spend_never_exceeds_the_cap_whatever_the_endpoint_reports(kind, seeds):
    """Property: random usage within each request's bound, random latencies, concurrency 1-64, many seeds: the
    spend recorded never exceeds the cap, and the run ends at the cap or at the end of its requests.

    Where not one sample of any of the 150 requests fits under the cap (167 of the 300 slow seeds),
    every request is refused on its own -- nothing is ever reserved or in flight, so neither order nor overlap can
    change a decision -- and the first concurrency + 1 of them (one waiting for a slot) show it as the 150 would:
    those seeds send that many, and every one must be refused (none admitted, whatever usage it would report).

    Issue 41: an endpoint that from a random request on reports usage that is not a count of tokens (negative, NaN,
    infinite, a string) or none, or ignores max_tokens (answers longer than it allows, no usage). What it truly
    spent stays within the cap -- but for the requests already in flight when it first misbehaved, where it ignores
    max_tokens -- and a misreport stops the run at once (BudgetExceeded, exit 3): nothing is sent after it."""
    import asyncio
    import random

    from face.llm.budget import BudgetLM
    from face.llm.sizes import bound, cost_usd
    from face.llm.usage import Usage

    misbehaved = 0
    for seed in seeds:
        rng = random.Random(seed)
        conc, max_tokens, cap = rng.randint(1, 64), rng.choice([1, 16, 256]), rng.choice([0.0, 1e-4, 0.01, 0.5])
        usage = Usage(price_input_per_mtok=rng.uniform(0.1, 50), price_output_per_mtok=rng.uniform(0.1, 200),
                      max_cost_usd=cap)
        c = LLMConfig(concurrency=conc, n_per_request=rng.choice([1, 3]), max_tokens=max_tokens)
        after = random.Random(f"{kind}{seed}").randint(0, 3)  # honest answers before it misbehaves
        endpoint = Endpoint(rng, max_tokens, usage, MISBEHAVIOURS.get(kind), after)
        lm = BudgetLM(endpoint, c, usage)
        rs = [ChatRequest(messages=[("user", "q" * rng.randint(1, 400))], n=rng.randint(1, 5)) for _ in range(150)]
        fits = any(cost_usd(b.input_tokens, b.output_tokens, usage.price_input_per_mtok, usage.price_output_per_mtok)
                   <= cap for b in (bound(r.messages, max_tokens, 1) for r in rs))
        rs = rs if fits else rs[:conc + 1]

        async def run(lm=lm, rs=rs):
            return await asyncio.gather(*(lm.chat(r) for r in rs), return_exceptions=True)

        out = asyncio.run(run())
        assert usage.spent_usd <= cap, (seed, usage.spent_usd, cap)
        assert usage.requests_in_flight == 0 and usage.reserved_usd == 0
        stops = [x for x in out if isinstance(x, BaseException)]
        assert all(isinstance(x, BudgetExceeded) for x in stops), (seed, stops[:1])
        assert fits or len(stops) == len(rs), seed  # nothing fits: nothing is admitted
        # what the endpoint truly used: within the cap (1e-12: the same costs summed in another order), but for
        # what it used beyond a bound it ignored -- on the requests in flight when it first did, no more
        truly = [cost_usd(i, o, usage.price_input_per_mtok, usage.price_output_per_mtok) for i, o, _ in endpoint.used]
        beyond = [t for t, (_, _, bad) in zip(truly, endpoint.used) if bad and kind == "ignores_max_tokens"]
        assert sum(truly) - sum(beyond) <= cap * (1 + 1e-12), seed
        assert len(beyond) <= conc, seed
        bad = sum(b for _, _, b in endpoint.used)
        misbehaved += bad > 0
        misreported = bad > 0 and kind != "missing_usage"
        assert (usage.misreports > 0) == misreported, seed
        assert endpoint.after_a_misreport == 0, seed  # a misreport stops the run at once
        assert stops or not misreported, seed  # the misreported request itself stops (its own line, or the cap's)
    assert misbehaved >= (len(seeds) // 8 if kind != "honest" else 0)  # it misbehaved in 3 of the 10 fast seeds


# without a cap: the misbehaviours that are misreports, and a report above the request's bound
NO_CAP = {**{k: v for k, v in MISBEHAVIOURS.items() if k != "missing_usage"},
          "above_the_bound": (lambda tin, tout: {"prompt_tokens": tin + 1000, "completion_tokens": tout}, False)}


@pytest.mark.parametrize("caps", [{}, {"max_calls": 100}], ids=["no_cap", "max_calls_only"])
@pytest.mark.parametrize("kind", sorted(NO_CAP))
def test_without_a_cost_cap_a_misreport_is_said_once_and_the_run_goes_on(kind, caps, caplog):
    """Issue 41: without llm.max_cost_usd there is no spend to protect: every misreport is recorded, the first said
    once (a warning), and every request is answered. A report above the bound is charged as reported; one that is
    not a count of tokens, or none, at the bound: "user" + "hi" + 16 + 16 = 38 input tokens, max_tokens 16 output."""
    import asyncio
    import random

    from face.llm.budget import BudgetLM
    from face.llm.usage import Usage

    usage = Usage(price_input_per_mtok=1.0, price_output_per_mtok=2.0, **caps)
    endpoint = Endpoint(random.Random(0), 16, usage, NO_CAP[kind])
    lm = BudgetLM(endpoint, LLMConfig(concurrency=4, max_tokens=16), usage)

    async def run():
        return await asyncio.gather(*(lm.chat(ChatRequest([("user", "hi")])) for _ in range(20)))

    with caplog.at_level(logging.WARNING, "face.llm"):
        asyncio.run(run())
    assert len(endpoint.used) == 20 and usage.misreports == 20 and usage.http_requests == 20
    (line,) = [r.getMessage() for r in caplog.records]
    assert line.startswith("endpoint misreport: ") and "without llm.max_cost_usd the run goes on" in line
    tin, tout = (sum(i + 1000 for i, _, _ in endpoint.used), sum(o for _, o, _ in endpoint.used)) \
        if kind == "above_the_bound" else (20 * 38, 20 * 16)
    assert (usage.input_tokens, usage.output_tokens) == (tin, tout)
    assert usage.spent_usd == pytest.approx(tin * 1e-6 + tout * 2e-6, rel=1e-9)


def test_without_a_cost_cap_an_endpoint_reporting_above_the_bounds_is_warned_of_once_and_the_run_finishes(
        tmp_path, caplog):
    """Issue 41, item 3: a run without llm.max_cost_usd against an endpoint reporting 200 × its tokens (the probe's
    two replies first: 3 × 1 and 8 tokens asked) is not stopped: one warning, every request recorded as reported."""
    srv = InProcessServer(usage_factor=200)
    with srv, caplog.at_level(logging.WARNING, "face.llm"), make_client(
            cfg(srv, tmp_path, probe=True, n_per_request=8, max_tokens=50)) as c:
        c.run_batch(reqs(5, n=2))
    doc = usage_doc(tmp_path)
    assert doc["http_requests"] == len(srv.log) == 2 + 5 and doc["misreported_requests"] == 7
    assert doc["by_tag"]["q"]["requests"] == 5 and doc["budget_stops"] == 0
    (line,) = [r.getMessage() for r in caplog.records if "misreport" in r.getMessage()]
    assert re.search(r"above its bound .*\(max_tokens (1 × n 3|8 × n 1)\)", line)  # whichever probe reply came first
    assert "without llm.max_cost_usd the run goes on" in line
    assert json.loads((tmp_path / "cache" / endpoint_probe.ENDPOINTS_FILE).read_text())  # the probe is remembered


def test_without_a_cost_cap_a_probe_misreport_then_max_calls_trusts_the_config(tmp_path, caplog):
    """llm.max_calls=1: the probe's first reply misreports (a warning), its second request is refused: the probe does
    not fit the budget, so the config is trusted -- the misreport stops nothing without a cost cap."""
    srv = InProcessServer(usage_factor=200)
    with srv, caplog.at_level(logging.WARNING, "face.llm"), make_client(
            cfg(srv, tmp_path, probe=True, n_per_request=8, max_calls=1)) as c:
        assert c.cfg.n_per_request == 8
    assert len(srv.log) == 1 and "probe does not fit the LLM budget" in caplog.text


def test_the_bound_is_the_prompts_bytes_and_max_tokens_times_n():
    from face.llm.sizes import bound

    b = bound([("user", "héllo")], 10, 3)  # é is 2 bytes
    assert (b.input_tokens, b.output_tokens) == (len("user") + 6 + 16 + 16, 30)


def test_without_reported_tokens_a_request_is_charged_its_bound(tmp_path):
    """Issue 41: not the ~4-characters estimate (an endpoint reporting nothing could spend past a cap on it)."""
    srv = InProcessServer(report_usage=False)
    with srv, make_client(cfg(srv, tmp_path, price_input_per_mtok=1e6, price_output_per_mtok=1e6,
                              max_tokens=40)) as c:
        c.run_batch(reqs(1))
    doc = json.loads((tmp_path / "llm_usage.json").read_text())["totals"]
    # by hand: "user" (4 bytes) + the content's bytes + 16 for the message + 16 for the request; max_tokens × n 1
    content = "question 0: " + "word " * PROMPT_WORDS
    tin, tout = 4 + len(content) + 16 + 16, 40
    assert (doc["input_tokens"], doc["output_tokens"]) == (tin, tout)
    assert doc["cost_usd"] == pytest.approx(tin + tout) and doc["unreported_usage_requests"] == 1
    assert doc["misreported_requests"] == 0


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
