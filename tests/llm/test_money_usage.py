"""The budget's caps and reservations (face/llm/usage.py) and the layer that splits and sends (face/llm/budget.py),
in process and without a server. Every expected number is worked out by hand from the definitions: a prompt of B
UTF-8 bytes is bounded by B + 16 per message + 16 tokens, a request's output by max_tokens × n, prices are USD per
million tokens (tests/llm/money_lm.py)."""

from __future__ import annotations

import asyncio

import pytest
from money_lm import MSGS, PRICE_IN, PRICE_OUT, WORST, Scripted, approx, cfg, piece, reported, run, usage

from face.llm.base import ChatRequest, ChatResult, Completion
from face.llm.budget import AccountingLM, BudgetLM
from face.llm.sizes import reported_tokens
from face.llm.usage import BudgetExceeded, Piece

# ---------------------------------------------------------------- usage: bounds, caps, reservations


def test_piece_bounds_every_sample_of_the_request():
    p = piece(5)
    assert (p.n, p.max_tokens, p.est_input_tokens) == (5, 10, 8)
    assert (p.bound.input_tokens, p.bound.output_tokens) == (38, 50)
    assert usage().worst_case(p) == approx(WORST)


def test_max_calls_refuses_exactly_the_request_past_the_cap():
    u = usage(max_calls=2)
    u.reserve(piece())
    u.reserve(piece())
    with pytest.raises(BudgetExceeded, match=r"^LLM budget exceeded: llm.max_calls=2 reached \(tag='t'\)"):
        u.reserve(piece())
    assert (u.http_requests, u.samples, u.requests_in_flight) == (2, 10, 2)  # samples: 5 per HTTP request


def test_cost_cap_counts_the_reservations_in_flight():
    u = usage(max_cost_usd=1.5 * WORST)
    assert u.reserve(piece()) == approx(WORST)
    assert u.reserved_usd == approx(WORST)
    with pytest.raises(BudgetExceeded, match=r"^LLM budget exceeded: llm.max_cost_usd=.* would be exceeded .*"
                                              r"\(tag='t'\)"):
        u.reserve(piece())  # 0 spent, but WORST in flight: 2 × WORST > 1.5 × WORST


def test_must_wait_when_only_the_requests_in_flight_stand_in_the_way():
    u = usage(max_cost_usd=WORST)  # exactly one bound fits once nothing is in flight
    u.reserve(piece())
    assert u.must_wait(piece())
    u.release(WORST)
    assert not u.must_wait(piece())  # nothing in flight: reserve decides
    over = usage(max_cost_usd=WORST * 0.5)
    over.reserve(Piece.of("t", MSGS, 1, 1, None))
    assert not over.must_wait(piece())  # it would not fit even after they settle: refused, not waited for


def test_dry_run_counts_the_estimate_for_every_sample_and_sends_nothing():
    u = usage(dry_run=True, max_calls=0)
    assert u.reserve(piece(5)) == 0.0
    assert (u.dry_run_requests, u.http_requests, u.samples) == (1, 0, 0)
    assert (u.est_input_tokens, u.est_output_tokens) == (8, 50)
    assert u.est_cost_usd == approx(8 * PRICE_IN / 1e6 + 50 * PRICE_OUT / 1e6)


def test_settle_charges_the_reported_tokens_not_the_reservation():
    u = usage()
    r = u.reserve(piece())
    assert u.settle(piece(), r, reported(30, 40), 2, 0.1) == (30, 40, approx(30e-6 + 160e-6))
    assert u.spent_usd == approx(30e-6 + 160e-6)
    assert (u.input_tokens, u.output_tokens, u.reserved_usd, u.requests_in_flight) == (30, 40, 0.0, 0)
    assert u.unreported_usage == 0


@pytest.mark.parametrize("report", [None, {}, reported(0, 0), {"prompt_tokens": None, "completion_tokens": None}],
                         ids=["no_usage", "empty", "zeros", "nulls"])
def test_settle_without_a_report_charges_the_bound(report):
    u = usage(max_cost_usd=1.0)
    r = u.reserve(piece())
    # the bound: 38 input tokens, max_tokens 10 × n 5 output tokens -- not the ~4-characters estimate (8 and 1)
    assert u.settle(piece(), r, report, 2, 0.1) == (38, 50, approx(WORST))
    assert (u.unreported_usage, u.misreports) == (1, 0)


def test_a_count_left_out_is_charged_at_its_side_of_the_bound():
    u = usage()
    assert u.settle(piece(), u.reserve(piece()), {"prompt_tokens": 30}, 2, 0.1) == (30, 50, approx(30e-6 + 200e-6))
    assert u.settle(piece(), u.reserve(piece()), {"completion_tokens": 7}, 2, 0.1) == (38, 7, approx(38e-6 + 28e-6))
    assert u.unreported_usage == 2


@pytest.mark.parametrize("tokens", [(0, 40), (0, 1), (1, 0)])
def test_a_report_of_one_side_alone_is_a_report(tokens):
    u = usage()
    r = u.reserve(piece())
    cost = tokens[0] * PRICE_IN / 1e6 + tokens[1] * PRICE_OUT / 1e6
    assert u.settle(piece(), r, reported(*tokens), 3, 0.1) == (*tokens, approx(cost))
    assert u.unreported_usage == 0


@pytest.mark.parametrize("usage_reported, tokens", [
    (reported(30, 40), (30, 40)), (reported(30.0, 40.0), (30, 40)), (reported(0, 5), (0, 5)),
    (None, (None, None)), (reported(0, 0), (None, None)), ({"completion_tokens": 3}, (None, 3)),
    (reported(-1_000_000, 5), "prompt_tokens=-1000000"), (reported(5, float("nan")), "completion_tokens=nan"),
    (reported(float("inf"), 5), "prompt_tokens=inf"), (reported("12", 5), "prompt_tokens='12'"),
    (reported(5, 2.5), "completion_tokens=2.5"), (reported(True, 5), "prompt_tokens=True"),
    (reported(5, [3]), "completion_tokens=[3]"), ("lots", "prompt_tokens='lots'")])
def test_usage_is_read_as_finite_non_negative_integers_or_a_misreport(usage_reported, tokens):
    assert reported_tokens(usage_reported) == tokens


def test_a_misreported_value_is_quoted_in_at_most_60_characters():
    # a reply may carry any JSON there: the message quotes 'prompt_tokens=' and the value's repr, cut at 60
    assert reported_tokens(reported("x" * 1000, 5)) == "prompt_tokens='" + "x" * 45


BAD_USAGE = {"negative": reported(-1_000_000, 5), "nan": reported(5, float("nan")), "inf": reported(float("inf"), 5),
             "string": reported("12", "3"), "fraction": reported(5, 2.5), "bool": reported(True, 5)}


@pytest.mark.parametrize("case", sorted(BAD_USAGE))
def test_usage_that_is_not_a_count_stops_a_capped_run_and_is_charged_the_bound(case):
    u = usage(max_cost_usd=1.0)
    r = u.reserve(piece())
    with pytest.raises(BudgetExceeded, match=r"endpoint misreport: a request was answered with usage .* not a count"):
        u.settle(piece(), r, BAD_USAGE[case], 2, 0.1)
    # neither taken as spend (a negative one gave money back) nor a crash (NaN): its bound
    assert (u.input_tokens, u.output_tokens, u.spent_usd, u.misreports) == (38, 50, approx(WORST), 1)
    with pytest.raises(BudgetExceeded, match="endpoint misreport"):
        u.reserve(piece())  # nothing more is sent


@pytest.mark.parametrize("tokens", [(38, 51), (39, 50)], ids=["output", "input"])
def test_a_report_above_the_bound_stops_a_capped_run_charged_as_reported(tokens):
    u = usage(max_cost_usd=1.0)
    r = u.reserve(piece())
    assert u.settle(piece(), r, reported(38, 50), 2, 0.1) == (38, 50, approx(WORST))  # at the bound: fine
    r = u.reserve(piece())
    with pytest.raises(BudgetExceeded, match=r"endpoint misreport: .* above its bound .*\(recorded as reported\)"):
        u.settle(piece(), r, reported(*tokens), 2, 0.1)
    # what was reported, not the bound (38 and 50): the docs say "recorded as reported"
    assert (u.input_tokens, u.output_tokens) == (38 + tokens[0], 50 + tokens[1])
    assert u.spent_usd == approx(WORST + tokens[0] * PRICE_IN / 1e6 + tokens[1] * PRICE_OUT / 1e6)
    assert u.misreports == 1
    with pytest.raises(BudgetExceeded, match=r"^LLM budget exceeded: endpoint misreport: .*\(tag='t'\)"):
        u.reserve(piece())


def test_a_misreport_states_the_bound_it_broke_as_max_tokens_times_n():
    u = usage(max_cost_usd=1.0)
    r = u.reserve(piece())  # max_tokens 10, n 5: 50 output tokens at most
    with pytest.raises(BudgetExceeded, match=r"its bound of 38 input tokens .* and 50 output tokens "
                                             r"\(max_tokens 10 × n 5\)"):
        u.settle(piece(), r, reported(38, 51), 2, 0.1)


def test_answers_longer_than_the_output_bound_can_hold_are_a_misreport():
    # the output bound: 50 tokens; 16 bytes a token of it: 800 bytes ("é" is 2 bytes)
    u = usage(max_cost_usd=1.0)
    assert u.settle(piece(), u.reserve(piece()), None, 800, 0.1) == (38, 50, approx(WORST))
    assert u.settle(piece(), u.reserve(piece()), reported(3, 4), 800, 0.1) == (3, 4, approx(3e-6 + 16e-6))
    with pytest.raises(BudgetExceeded, match=r"801 bytes of answers, more than 16 bytes a token .* ignores max_tokens"):
        u.settle(piece(), u.reserve(piece()), reported(3, 4), 801, 0.1)
    inner = Scripted({0: "é" * 400, 1: "x"}, tokens=(3, 4))  # 801 bytes, for 2 × 10 = 20 tokens: 320 bytes at most
    with pytest.raises(BudgetExceeded, match="801 bytes of answers"):
        run(BudgetLM(inner, cfg(n_per_request=2), usage(max_cost_usd=1.0)).chat(ChatRequest(MSGS, n=2, max_tokens=10)))


@pytest.mark.parametrize("caps", [{}, {"max_calls": 100}], ids=["no_cap", "max_calls_only"])
def test_without_a_cost_cap_a_misreport_is_a_warning_said_once_and_recorded(caps, caplog, tmp_path):
    import json

    u = usage(**caps)
    with caplog.at_level("WARNING", "face.llm"):
        for bad in (reported(-5, 1), reported(5, float("nan")), reported(99, 99)):
            assert u.settle(piece(), u.reserve(piece()), bad, 2, 0.1)  # no stop
        u.reserve(piece())  # nor later: there is no spend cap to protect
    (line,) = [r.getMessage() for r in caplog.records]
    assert "endpoint misreport" in line and "prompt_tokens=-5" in line and "without llm.max_cost_usd" in line
    doc = json.loads(u.write_artifact(tmp_path / "llm_usage.json").read_text())
    assert doc["totals"]["misreported_requests"] == 3 and "prompt_tokens=-5" in doc["misreport"]


def test_reservations_given_back_leave_exactly_nothing_reserved():
    u = usage()
    u.requests_in_flight, u.reserved_usd = 2, 0.1 + 0.2
    u.release(0.1)
    assert u.reserved_usd == approx(0.2) and u.requests_in_flight == 1
    u.release(0.2)
    assert u.reserved_usd == 0.0  # not the float residue 0.1 + 0.2 - 0.1 - 0.2
    u.requests_in_flight, u.reserved_usd = 2, 0.1
    u.release(0.3)
    assert u.reserved_usd == 0.0  # never below nothing


def test_records_add_up_per_tag_and_budget_stops_apart_from_failures():
    class Answer:  # an answer type: 4 valid of the 5 asked for, 1 still missing
        def parse(self, s):
            return s.text

    u = usage()
    valid = [Completion("ok", "stop", sample_index=i) for i in range(4)]
    u.add(ChatResult(request=ChatRequest(MSGS, n=5, tag="s", adapter=Answer()), samples=valid, cached_samples=2,
                     http_samples=3, http_requests=2, input_tokens=10, output_tokens=20, cost_usd=0.5,
                     answer_retries=1, rejected_answers=2))
    u.add(ChatResult(request=ChatRequest(MSGS, tag=""), samples=[]), error=BudgetExceeded("stop"))
    u.add(ChatResult(request=ChatRequest(MSGS, tag=""), samples=[]), error=RuntimeError("boom"))
    assert [r["error"] for r in u.records] == [None, "budget: BudgetExceeded: stop", "RuntimeError: boom"]
    assert u.cache_hits == 2 and u.requests == 3
    t = u.by_tag["s"]
    assert (t["requests"], t["samples"], t["http_requests"], t["cache_hits"], t["input_tokens"], t["output_tokens"],
            t["cost_usd"], t["answer_retries"], t["rejected_answers"], t["invalid_answers"], t["failures"]) == (
        1, 3, 2, 2, 10, 20, 0.5, 1, 2, 1, 0)
    assert u.by_tag["(none)"]["failures"] == 2
    s = u.summary()
    assert (s["failures"], s["budget_stops"], s["answer_retries"], s["rejected_answers"], s["invalid_answers"]) == (
        1, 1, 1, 2, 1)


def test_summary_reports_the_running_totals():
    u = usage()
    r = u.reserve(piece())
    u.settle(piece(), r, reported(30, 40), 0, 2.0)
    u.note_scores("s", defaulted=3, logprob_fallbacks=1)
    s = u.summary()
    assert (s["requests"], s["samples"], s["http_requests"], s["input_tokens"], s["output_tokens"]) == (0, 5, 1, 30, 40)
    assert s["cost_usd"] == approx(190e-6)
    assert (s["defaulted_answers"], s["logprob_fallbacks"], s["latency_max_s"]) == (3, 1, 2.0)


# ---------------------------------------------------------------- budget: split, send, dry run, records


def test_budget_splits_a_request_into_http_requests_of_n_per_request():
    for n, pieces in [(5, [(0, 2), (2, 2), (4, 1)]), (3, [(0, 2), (2, 1)]), (2, [(0, 2)])]:
        inner, u = Scripted(tokens=(5, 6)), usage()
        res = run(BudgetLM(inner, cfg(), u).chat(ChatRequest(MSGS, n=n, max_tokens=10)))
        assert sorted(inner.asked) == pieces
        assert (res.http_requests, res.http_samples, u.http_requests, u.samples) == (len(pieces), n, len(pieces), n)
        assert (res.input_tokens, res.output_tokens) == (5 * len(pieces), 6 * len(pieces))
        assert res.cost_usd == approx(len(pieces) * (5e-6 + 24e-6))


def test_budget_dry_run_prices_placeholders_at_the_estimate_of_every_sample():
    inner, u = Scripted(), usage(dry_run=True)
    res = run(BudgetLM(inner, cfg(dry_run=True), u).chat(ChatRequest(MSGS, n=2, max_tokens=10)))
    assert inner.asked == [] and all(s.dry_run for s in res.samples)
    assert (res.input_tokens, res.output_tokens) == (8, 20)  # the estimate; max_tokens × n
    assert res.cost_usd == approx(8 * PRICE_IN / 1e6 + 20 * PRICE_OUT / 1e6)


def test_a_record_counts_samples_drawn_over_http_not_the_request_n():
    res = ChatResult(request=ChatRequest(MSGS, n=5, tag="x"), samples=[], cached_samples=2, http_samples=3,
                     http_requests=2, cost_usd=0.25)
    u = usage()
    u.add(res)
    rec = u.records[0]
    assert (rec["tag"], rec["n"], rec["samples"], rec["cached_samples"], rec["http_requests"], rec["cost_usd"]) == (
        "x", 5, 3, 2, 2, 0.25)


def test_accounting_records_a_budget_stop_as_a_stop_not_a_failure():
    class Stops:
        async def chat(self, req):
            raise BudgetExceeded("cap")

    u = usage()
    with pytest.raises(BudgetExceeded):
        run(AccountingLM(Stops(), u).chat(ChatRequest(MSGS, n=3, tag="s")))
    s = u.summary()
    assert (s["budget_stops"], s["failures"], s["requests"]) == (1, 0, 1)
    assert u.records[0]["error"].startswith("budget: ") and 0 <= u.records[0]["latency_s"] < 5


def test_a_request_fitting_the_cost_cap_exactly_is_sent_without_waiting():
    u = usage(max_cost_usd=2 * WORST)
    u.reserve(piece())
    assert not u.must_wait(piece())  # WORST in flight + WORST == the cap: it fits now
    assert u.reserve(piece()) == approx(WORST)


def test_a_piece_that_fits_the_cost_cap_only_once_the_one_in_flight_settles_waits_for_it():
    events = []

    class Slow(Scripted):
        async def chat(self, req):
            events.append(("sent", req.first_sample))
            await asyncio.sleep(0.01)
            events.append(("answered", req.first_sample))
            return await super().chat(req)

    one = 38 * PRICE_IN / 1e6 + 10 * PRICE_OUT / 1e6  # the bound of one sample of max_tokens 10
    u = usage(max_cost_usd=1.5 * one)  # one bound fits beside the spend, not beside another bound in flight
    res = run(BudgetLM(Slow(tokens=(3, 4)), cfg(n_per_request=1), u).chat(ChatRequest(MSGS, n=2, max_tokens=10)))
    assert events == [("sent", 0), ("answered", 0), ("sent", 1), ("answered", 1)]
    assert res.http_requests == 2 and u.spent_usd == approx(2 * (3e-6 + 16e-6)) and u.reserved_usd == 0.0


def test_request_records_are_kept_up_to_the_limit_and_every_failed_one(monkeypatch):
    import face.llm.usage as usage_module

    monkeypatch.setattr(usage_module, "KEEP_REQUESTS", 1)
    u = usage()
    for err in (None, None, RuntimeError("x")):
        u.add(ChatResult(request=ChatRequest(MSGS, tag="s"), samples=[]), error=err)
    assert [r["error"] for r in u.records] == [None, "RuntimeError: x"] and u.requests == 3


def test_latency_summary_is_mean_quantiles_and_max_of_the_http_requests():
    u = usage()
    for latency in (1.0, 3.0):
        u.settle(piece(), u.reserve(piece()), reported(1, 1), 0, latency)
    s = u.summary()
    assert u.unreported_usage == 0  # 1 input and 1 output token: reported
    # p95 of [1, 3]: 1 + (3 - 1) × 0.95
    assert (s["latency_mean_s"], s["latency_p50_s"], s["latency_max_s"]) == (2.0, 2.0, 3.0)
    assert s["latency_p95_s"] == approx(2.9)


def test_a_usage_without_requests_has_zero_latencies():
    s = usage().summary()
    assert (s["latency_mean_s"], s["latency_p50_s"], s["latency_p95_s"], s["latency_max_s"]) == (0.0, 0.0, 0.0, 0.0)


def test_an_unreported_answer_is_charged_its_bound_whatever_its_text():
    inner, u = Scripted({0: "abcdefgh", 1: "abcd"}), usage()  # ~3 output tokens by the ~4-characters estimate
    res = run(BudgetLM(inner, cfg(), u).chat(ChatRequest(MSGS, n=2, max_tokens=10)))
    assert (res.input_tokens, res.output_tokens, u.unreported_usage) == (38, 20, 1)  # 38 bytes + overheads; 10 × 2
    assert res.cost_usd == approx(38 * PRICE_IN / 1e6 + 20 * PRICE_OUT / 1e6)


def test_a_failed_request_gives_its_reservation_back_and_counts_its_retries():
    from face.llm.base import LLMCallError

    class Fails:
        async def chat(self, req):
            e = LLMCallError("down")
            e.retries = 2
            raise e

    u = usage(max_cost_usd=1.0)
    with pytest.raises(LLMCallError):
        run(BudgetLM(Fails(), cfg(), u).chat(ChatRequest(MSGS, n=2, max_tokens=10)))
    assert (u.retries, u.requests_in_flight, u.reserved_usd, u.spent_usd) == (2, 0, 0.0, 0.0)


def test_only_a_request_answered_without_retries_reports_its_latency(monkeypatch):
    import face.llm.budget as budget_module

    seen = []

    class Spy(budget_module.Limiter):
        def release(self, latency=None):
            seen.append(latency)
            super().release(latency)

    class Retried(Scripted):
        async def chat(self, req):
            res = await super().chat(req)
            res.retries = 1 if req.first_sample == 0 else 0
            return res

    monkeypatch.setattr(budget_module, "Limiter", Spy)
    u = usage()
    run(BudgetLM(Retried(), cfg(), u).chat(ChatRequest(MSGS, n=4, max_tokens=10)))
    assert len(seen) == 2 and seen[0] is None and 0 <= seen[1] < 5
    assert u.retries == 1


def test_accounting_records_each_answered_request_with_its_latency():
    u = usage()
    res = run(AccountingLM(Scripted(), u).chat(ChatRequest(MSGS, n=2, tag="s")))
    assert 0 <= res.latency_s < 5 and 0 <= u.records[0]["latency_s"] < 5
    assert (u.requests, u.records[0]["tag"], u.records[0]["n"], u.records[0]["error"]) == (1, "s", 2, None)


def test_a_failure_that_is_not_an_llm_call_error_counts_no_retries():
    class Breaks:
        async def chat(self, req):
            raise RuntimeError("bug")

    u = usage()
    with pytest.raises(RuntimeError):
        run(BudgetLM(Breaks(), cfg(), u).chat(ChatRequest(MSGS, n=1, max_tokens=10)))
    assert (u.retries, u.requests_in_flight) == (0, 0)
