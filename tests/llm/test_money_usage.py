"""The money and bookkeeping layers of the LLM stack, in process and without a server: the budget's caps and
reservations (face/llm/usage.py), the layer that splits and sends (face/llm/budget.py), the one draw-until-valid
loop (face/llm/validating.py, with face/llm/base.py's ``Draws``) and what the cache stores and serves
(face/llm/cache.py). Every expected number is worked out by hand from the definitions: a prompt of B UTF-8 bytes is
bounded by B + 16 per message + 16 tokens, a request's output by max_tokens × n, prices are USD per million tokens."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from face.llm.base import ChatRequest, ChatResult, Completion, Draws, Provisional
from face.llm.budget import AccountingLM, BudgetLM, record_of
from face.llm.cache import CachingLM, SampleCache
from face.llm.usage import BudgetExceeded, Piece, RequestRecord, Usage
from face.llm.validating import ValidatingLM

MSGS = (("user", "hi"),)  # bound: 4 + 2 + 16 + 16 = 38 input tokens; estimate: ceil(2/4) + 4 + 3 = 8
PRICE_IN, PRICE_OUT = 1.0, 4.0
WORST = 38 * PRICE_IN / 1e6 + 50 * PRICE_OUT / 1e6  # the bound of 5 samples of max_tokens 10, priced by hand


def approx(x: float):
    """Money to the 9th significant digit (pytest's default 1e-6 would let a price per 1,000,001 tokens pass)."""
    return pytest.approx(x, rel=1e-9, abs=0)


def _piece(n: int = 5) -> Piece:
    return Piece.of("t", MSGS, 10, n, None)


def _usage(**kw) -> Usage:
    return Usage(price_input_per_mtok=PRICE_IN, price_output_per_mtok=PRICE_OUT, **kw)


def _cfg(**kw) -> SimpleNamespace:
    base = dict(n_per_request=2, concurrency=4, dry_run=False, max_tokens=10, temperature=0.0, top_p=1.0,
                supports_json_schema=False, supports_logprobs=True, seed=0)
    return SimpleNamespace(**{**base, **kw})


class Scripted:
    """An inner layer answering sample i with ``texts[i]`` ("ok" by default); it remembers what it was asked."""

    def __init__(self, texts: dict[int, str] | None = None, tokens: tuple[int, int] = (0, 0), dry_run: bool = False):
        self.texts, self.tokens, self.dry_run = texts or {}, tokens, dry_run
        self.asked: list[tuple[int, int]] = []

    async def chat(self, req: ChatRequest) -> ChatResult:
        self.asked.append((req.first_sample, req.n))
        samples = [Completion(self.texts.get(i, "ok"), "stop", sample_index=i, dry_run=self.dry_run)
                   for i in req.indices]
        return ChatResult(request=req, samples=samples, http_requests=1, input_tokens=self.tokens[0],
                          output_tokens=self.tokens[1])


class Answer:
    """An answer type: "ok..." is valid ((text,)), "prov:x" provisional ((x,)), anything else invalid (a str: why)."""

    keeps_provisional = True

    def parse(self, s: Completion):
        if s.text.startswith("ok"):
            return (s.text,)
        if s.text.startswith("prov:"):
            return Provisional((s.text[5:],), "provisional")
        return "not ok"


def _run(coro):
    return asyncio.run(coro)


# ---------------------------------------------------------------- usage: bounds, caps, reservations


def test_piece_bounds_every_sample_of_the_request():
    p = _piece(5)
    assert (p.n, p.max_tokens, p.est_input_tokens) == (5, 10, 8)
    assert (p.bound.input_tokens, p.bound.output_tokens) == (38, 50)
    assert _usage().worst_case(p) == approx(WORST)


def test_max_calls_refuses_exactly_the_request_past_the_cap():
    u = _usage(max_calls=2)
    u.reserve(_piece())
    u.reserve(_piece())
    with pytest.raises(BudgetExceeded, match=r"^LLM budget exceeded: llm.max_calls=2 reached \(tag='t'\)"):
        u.reserve(_piece())
    assert (u.http_requests, u.samples, u.requests_in_flight) == (2, 10, 2)  # samples: 5 per HTTP request


def test_cost_cap_counts_the_reservations_in_flight():
    u = _usage(max_cost_usd=1.5 * WORST)
    assert u.reserve(_piece()) == approx(WORST)
    assert u.reserved_usd == approx(WORST)
    with pytest.raises(BudgetExceeded, match=r"^LLM budget exceeded: llm.max_cost_usd=.* would be exceeded .*"
                                              r"\(tag='t'\)"):
        u.reserve(_piece())  # 0 spent, but WORST in flight: 2 × WORST > 1.5 × WORST


def test_must_wait_when_only_the_requests_in_flight_stand_in_the_way():
    u = _usage(max_cost_usd=WORST)  # exactly one bound fits once nothing is in flight
    u.reserve(_piece())
    assert u.must_wait(_piece())
    u.release(WORST)
    assert not u.must_wait(_piece())  # nothing in flight: reserve decides
    over = _usage(max_cost_usd=WORST * 0.5)
    over.reserve(Piece.of("t", MSGS, 1, 1, None))
    assert not over.must_wait(_piece())  # it would not fit even after they settle: refused, not waited for


def test_dry_run_counts_the_estimate_for_every_sample_and_sends_nothing():
    u = _usage(dry_run=True, max_calls=0)
    assert u.reserve(_piece(5)) == 0.0
    assert (u.dry_run_requests, u.http_requests, u.samples) == (1, 0, 0)
    assert (u.est_input_tokens, u.est_output_tokens) == (8, 50)
    assert u.est_cost_usd == approx(8 * PRICE_IN / 1e6 + 50 * PRICE_OUT / 1e6)


def test_settle_charges_the_reported_tokens_not_the_reservation():
    u = _usage()
    r = u.reserve(_piece())
    assert u.settle(_piece(), r, 30, 40, 0.1) == (30, 40, approx(30e-6 + 160e-6))
    assert u.spent_usd == approx(30e-6 + 160e-6)
    assert (u.input_tokens, u.output_tokens, u.reserved_usd, u.requests_in_flight) == (30, 40, 0.0, 0)
    assert u.unreported_usage == 0


def test_settle_without_a_report_charges_the_estimate_capped_by_the_bound():
    u = _usage()
    r = u.reserve(_piece())
    # input: the estimate 8 (below the bound 38); output: the estimate 70 capped by the bound 50
    assert u.settle(_piece(), r, 0, 0, 0.1, output_estimate=70) == (8, 50, approx(8e-6 + 200e-6))
    assert u.unreported_usage == 1
    r = u.reserve(_piece())
    assert u.settle(_piece(), r, 0, 0, 0.1) == (8, 0, approx(8e-6))  # no answer text given: no output tokens


def test_a_report_of_output_tokens_alone_is_a_report():
    u = _usage()
    r = u.reserve(_piece())
    assert u.settle(_piece(), r, 0, 40, 0.1, output_estimate=3) == (0, 40, approx(160e-6))
    assert u.unreported_usage == 0


@pytest.mark.parametrize("tokens", [(38, 51), (39, 50)], ids=["output", "input"])
def test_a_report_above_the_bound_stops_the_run(tokens):
    u = _usage()
    r = u.reserve(_piece())
    assert u.settle(_piece(), r, 38, 50, 0.1) == (38, 50, approx(WORST))  # at the bound: fine
    r = u.reserve(_piece())
    with pytest.raises(BudgetExceeded, match="endpoint misreport"):
        u.settle(_piece(), r, *tokens, 0.1)
    assert u.misreports == 1
    with pytest.raises(BudgetExceeded, match=r"^LLM budget exceeded: endpoint misreport: .*\(tag='t'\)"):
        u.reserve(_piece())


def test_reservations_given_back_leave_exactly_nothing_reserved():
    u = _usage()
    u.requests_in_flight, u.reserved_usd = 2, 0.1 + 0.2
    u.release(0.1)
    assert u.reserved_usd == approx(0.2) and u.requests_in_flight == 1
    u.release(0.2)
    assert u.reserved_usd == 0.0  # not the float residue 0.1 + 0.2 - 0.1 - 0.2
    u.requests_in_flight, u.reserved_usd = 2, 0.1
    u.release(0.3)
    assert u.reserved_usd == 0.0  # never below nothing


def test_records_add_up_per_tag_and_budget_stops_apart_from_failures():
    u = _usage()
    u.add(RequestRecord(tag="s", n=5, cached_samples=2, samples=3, http_requests=2, input_tokens=10,
                        output_tokens=20, cost_usd=0.5, answer_retries=1, rejected_answers=2, invalid_answers=1))
    u.add(RequestRecord(tag="", n=1, error="budget: BudgetExceeded: stop"))
    u.add(RequestRecord(tag="", n=1, error="RuntimeError: boom"))
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
    u = _usage()
    r = u.reserve(_piece())
    u.settle(_piece(), r, 30, 40, 2.0)
    u.note_scores("s", defaulted=3, logprob_fallbacks=1)
    s = u.summary()
    assert (s["requests"], s["samples"], s["http_requests"], s["input_tokens"], s["output_tokens"]) == (0, 5, 1, 30, 40)
    assert s["cost_usd"] == approx(190e-6)
    assert (s["defaulted_answers"], s["logprob_fallbacks"], s["latency_max_s"]) == (3, 1, 2.0)


# ---------------------------------------------------------------- budget: split, send, dry run, records


def test_budget_splits_a_request_into_http_requests_of_n_per_request():
    for n, pieces in [(5, [(0, 2), (2, 2), (4, 1)]), (3, [(0, 2), (2, 1)]), (2, [(0, 2)])]:
        inner, u = Scripted(tokens=(5, 6)), _usage()
        res = _run(BudgetLM(inner, _cfg(), u).chat(ChatRequest(MSGS, n=n, max_tokens=10)))
        assert sorted(inner.asked) == pieces
        assert (res.http_requests, res.http_samples, u.http_requests, u.samples) == (len(pieces), n, len(pieces), n)
        assert (res.input_tokens, res.output_tokens) == (5 * len(pieces), 6 * len(pieces))
        assert res.cost_usd == approx(len(pieces) * (5e-6 + 24e-6))


def test_budget_dry_run_prices_placeholders_at_the_estimate_of_every_sample():
    inner, u = Scripted(), _usage(dry_run=True)
    res = _run(BudgetLM(inner, _cfg(dry_run=True), u).chat(ChatRequest(MSGS, n=2, max_tokens=10)))
    assert inner.asked == [] and all(s.dry_run for s in res.samples)
    assert (res.input_tokens, res.output_tokens) == (8, 20)  # the estimate; max_tokens × n
    assert res.cost_usd == approx(8 * PRICE_IN / 1e6 + 20 * PRICE_OUT / 1e6)


def test_record_of_counts_samples_drawn_over_http_not_the_request_n():
    res = ChatResult(request=ChatRequest(MSGS, n=5, tag="x"), samples=[], cached_samples=2, http_samples=3,
                     http_requests=2, cost_usd=0.25)
    rec = record_of(res)
    assert (rec.tag, rec.n, rec.samples, rec.cached_samples, rec.http_requests, rec.cost_usd) == (
        "x", 5, 3, 2, 2, 0.25)


def test_accounting_records_a_budget_stop_as_a_stop_not_a_failure():
    class Stops:
        async def chat(self, req):
            raise BudgetExceeded("cap")

    u = _usage()
    with pytest.raises(BudgetExceeded):
        _run(AccountingLM(Stops(), _cfg(), u).chat(ChatRequest(MSGS, n=3, tag="s")))
    s = u.summary()
    assert (s["budget_stops"], s["failures"], s["requests"]) == (1, 0, 1)
    assert u.records[0].error.startswith("budget: ") and 0 <= u.records[0].latency_s < 5


# ---------------------------------------------------------------- the draw-until-valid loop


def _validated(texts, n, draws, inner=None):
    inner = inner or Scripted(texts)
    u = _usage()
    res = _run(ValidatingLM(inner, _cfg(), u).chat(ChatRequest(MSGS, n=n, adapter=Answer(), draws=draws)))
    return res, inner, u


def test_every_invalid_answer_is_redrawn_at_fresh_indices_until_n_are_valid():
    res, inner, _ = _validated({0: "ok0", 1: "bad", 2: "bad", 3: "ok3", 4: "bad", 5: "ok5"}, 3, Draws(rounds=4))
    assert inner.asked == [(0, 3), (3, 2), (5, 1)]  # one fresh index per answer still missing
    assert res.values == [("ok0",), ("ok3",), ("ok5",)]
    assert (res.answer_retries, res.rejected_answers, res.invalid_samples) == (3, 3, 0)


def test_one_invalid_answer_of_n_is_redrawn():
    res, inner, _ = _validated({2: "bad"}, 3, Draws(rounds=2))
    assert inner.asked == [(0, 3), (3, 1)]
    assert res.values == [("ok",)] * 3 and res.invalid_samples == 0


def test_draws_stop_after_exactly_the_policys_rounds():
    texts = dict.fromkeys(range(20), "bad")
    res, inner, u = _validated(texts, 3, Draws(rounds=2))
    assert inner.asked == [(0, 3), (3, 3)]
    assert (res.answer_retries, res.rejected_answers, res.invalid_samples) == (3, 6, 3)
    assert u.invalid_samples == 3 and "no valid answer in 6 draws" in u.invalid_events[0]["reason"]


def test_max_extra_caps_the_redraws_over_the_whole_request():
    res, inner, _ = _validated(dict.fromkeys(range(20), "bad"), 3, Draws(rounds=5, max_extra=2))
    assert inner.asked == [(0, 3), (3, 2)]
    assert res.answer_retries == 2


def test_draws_room_is_one_per_missing_answer_within_max_extra():
    assert Draws(rounds=3).room(4, 10) == 4
    assert Draws(rounds=3, max_extra=5).room(4, 3) == 2
    assert Draws(rounds=3, max_extra=5).room(1, 3) == 1


def test_the_earliest_provisional_draw_stands_in_for_a_missing_answer():
    res, _, _ = _validated({0: "prov:first", 1: "prov:second"}, 1, Draws(rounds=2))
    assert res.values == [("first",)] and res.invalid_samples == 0


def test_a_dry_run_is_drawn_once():
    res, inner, _ = _validated({}, 2, Draws(rounds=4), inner=Scripted(dry_run=True))
    assert inner.asked == [(0, 2)] and res.answer_retries == 0


# ---------------------------------------------------------------- the cache


def _caching(tmp_path, inner, **cfg) -> CachingLM:
    return CachingLM(inner, SampleCache(tmp_path), _cfg(**cfg), "m")


def test_the_read_ahead_keys_are_the_samples_own_keys(tmp_path):
    lm = _caching(tmp_path, Scripted())
    req = ChatRequest(MSGS, n=3, first_sample=4)
    assert lm.keys_for(req) == {i: lm.key_for(req, i) for i in (4, 5, 6)}
    other = _caching(tmp_path, Scripted(), seed=1)
    assert other.key_for(req, 4) != lm.key_for(req, 4)  # the seed is part of the key


def test_dry_run_placeholders_are_never_stored(tmp_path):
    lm = _caching(tmp_path, Scripted(dry_run=True), dry_run=True)
    _run(lm.chat(ChatRequest(MSGS, n=2)))
    lm.store.flush(force=True)
    assert len(lm.store) == 0


def test_an_invalid_draw_is_stored_marked_invalid_and_served_as_invalid(tmp_path):
    first = _caching(tmp_path, Scripted({0: "bad"}))
    _run(first.chat(ChatRequest(MSGS, n=2, adapter=Answer(), draws=Draws(rounds=1))))
    first.store.flush(force=True)
    asked = Scripted()
    again = CachingLM(asked, first.store, _cfg(), "m")
    res = _run(again.chat(ChatRequest(MSGS, n=2)))  # without the answer type: the stored mark alone decides
    assert asked.asked == [] and res.cached_samples == 2
    assert res.samples[0].error == "not ok" and res.samples[1].error is None


def test_the_read_ahead_counts_its_samples_as_cache_hits(tmp_path):
    lm = _caching(tmp_path, Scripted())
    req = ChatRequest(MSGS, n=3)
    _run(lm.chat(req))
    lm.store.flush(force=True)
    keys = lm.keys_for(req)
    [res] = lm.results([req], [keys], lm.store.get_many(keys.values()))
    assert res.cached_samples == 3 and [s.text for s in res.samples] == ["ok"] * 3


def test_a_request_fitting_the_cost_cap_exactly_is_sent_without_waiting():
    u = _usage(max_cost_usd=2 * WORST)
    u.reserve(_piece())
    assert not u.must_wait(_piece())  # WORST in flight + WORST == the cap: it fits now
    assert u.reserve(_piece()) == approx(WORST)


def test_request_records_are_kept_up_to_the_limit_and_every_failed_one(monkeypatch):
    import face.llm.usage as usage_module

    monkeypatch.setattr(usage_module, "KEEP_REQUESTS", 1)
    u = _usage()
    for err in (None, None, "RuntimeError: x"):
        u.add(RequestRecord(tag="s", n=1, error=err))
    assert [r.error for r in u.records] == [None, "RuntimeError: x"] and u.requests == 3


def test_latency_summary_is_mean_quantiles_and_max_of_the_http_requests():
    u = _usage()
    for latency in (1.0, 3.0):
        u.settle(_piece(), u.reserve(_piece()), 1, 1, latency)
    s = u.summary()
    assert u.unreported_usage == 0  # 1 input and 1 output token: reported
    # p95 of [1, 3]: 1 + (3 - 1) × 0.95
    assert (s["latency_mean_s"], s["latency_p50_s"], s["latency_max_s"]) == (2.0, 2.0, 3.0)
    assert s["latency_p95_s"] == approx(2.9)


def test_a_usage_without_requests_has_zero_latencies():
    s = _usage().summary()
    assert (s["latency_mean_s"], s["latency_p50_s"], s["latency_p95_s"], s["latency_max_s"]) == (0.0, 0.0, 0.0, 0.0)


def test_an_unreported_answer_is_charged_at_four_characters_a_token_of_its_text():
    inner, u = Scripted({0: "abcdefgh", 1: "abcd"}), _usage()  # 2 + 1 output tokens; the prompt's estimate: 8
    res = _run(BudgetLM(inner, _cfg(), u).chat(ChatRequest(MSGS, n=2, max_tokens=10)))
    assert (res.input_tokens, res.output_tokens, u.unreported_usage) == (8, 3, 1)
    assert res.cost_usd == approx(8 * PRICE_IN / 1e6 + 3 * PRICE_OUT / 1e6)


def test_a_failed_request_gives_its_reservation_back_and_counts_its_retries():
    from face.llm.base import LLMCallError

    class Fails:
        async def chat(self, req):
            e = LLMCallError("down")
            e.retries = 2
            raise e

    u = _usage(max_cost_usd=1.0)
    with pytest.raises(LLMCallError):
        _run(BudgetLM(Fails(), _cfg(), u).chat(ChatRequest(MSGS, n=2, max_tokens=10)))
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
    u = _usage()
    _run(BudgetLM(Retried(), _cfg(), u).chat(ChatRequest(MSGS, n=4, max_tokens=10)))
    assert len(seen) == 2 and seen[0] is None and 0 <= seen[1] < 5
    assert u.retries == 1


def test_accounting_records_each_answered_request_with_its_latency():
    u = _usage()
    res = _run(AccountingLM(Scripted(), _cfg(), u).chat(ChatRequest(MSGS, n=2, tag="s")))
    assert 0 <= res.latency_s < 5 and 0 <= u.records[0].latency_s < 5
    assert (u.requests, u.records[0].tag, u.records[0].n, u.records[0].error) == (1, "s", 2, None)


def test_a_provisional_draw_is_not_kept_when_a_valid_answer_came():
    res, _, _ = _validated({0: "prov:x", 1: "ok"}, 1, Draws(rounds=2))
    assert res.values == [("ok",)] and res.samples[0].error is not None


def test_the_invalid_answer_note_counts_its_draws():
    _, _, u = _validated({0: "bad"}, 1, Draws(rounds=1))
    assert "no valid answer in 1 draw;" in u.invalid_events[0]["reason"]
    _, _, u = _validated({0: "bad", 1: "bad"}, 1, Draws(rounds=2))
    assert "no valid answer in 2 draws; last: not ok" in u.invalid_events[0]["reason"]


def test_a_request_without_an_answer_type_passes_through_once():
    inner = Scripted({0: "bad"})
    res = _run(ValidatingLM(inner, _cfg(), _usage()).chat(ChatRequest(MSGS, n=2)))
    assert inner.asked == [(0, 2)] and res.texts == ["bad", "ok"]


def test_a_dry_run_is_not_redrawn_even_where_a_cached_draw_was_invalid():
    class Mixed(Scripted):  # sample 0 from the cache, marked invalid; the others dry-run placeholders
        async def chat(self, req):
            res = await super().chat(req)
            res.samples = [Completion("bad", "stop", sample_index=i, cached=True) if i == 0 else
                           Completion("", "dry_run", sample_index=i, dry_run=True) for i in req.indices]
            return res

    res, inner, _ = _validated({}, 2, Draws(rounds=4), inner=Mixed())
    assert inner.asked == [(0, 2)] and len(res.samples) == 2


def test_a_failure_that_is_not_an_llm_call_error_counts_no_retries():
    class Breaks:
        async def chat(self, req):
            raise RuntimeError("bug")

    u = _usage()
    with pytest.raises(RuntimeError):
        _run(BudgetLM(Breaks(), _cfg(), u).chat(ChatRequest(MSGS, n=1, max_tokens=10)))
    assert (u.retries, u.requests_in_flight) == (0, 0)


def test_a_request_the_read_ahead_found_in_part_sends_only_its_missing_samples(tmp_path):
    lm = _caching(tmp_path, Scripted({0: "zero", 1: "one"}))
    _run(lm.chat(ChatRequest(MSGS, n=2)))
    lm.store.flush(force=True)
    asked = Scripted(dry_run=True)  # a dry run claims nothing: only what the read-ahead found is served
    again = CachingLM(asked, lm.store, _cfg(dry_run=True), "m")
    req = ChatRequest(MSGS, n=3)
    keys = again.keys_for(req)
    assert again.results([req], [keys], again.store.get_many(keys.values())) == [None]  # sample 2 is missing
    res = _run(again.chat(req))
    assert asked.asked == [(2, 1)] and res.cached_samples == 2
    assert [(s.text, s.finish_reason) for s in res.samples][:2] == [("zero", "stop"), ("one", "stop")]
    assert res.samples[2].dry_run


def test_a_sample_another_process_is_sending_is_waited_for_not_sent_again(tmp_path):
    inner = Scripted()

    async def main():
        other = SampleCache(tmp_path)  # another owner of the same cache (as another process would be)
        lm = CachingLM(inner, SampleCache(tmp_path), _cfg(), "m")
        req = ChatRequest(MSGS, n=2)
        keys = lm.keys_for(req)
        await other.claim([keys[1]])  # the other one is sending sample 1
        task = asyncio.create_task(lm.chat(req))
        await asyncio.sleep(0.1)
        other.put_many([(keys[1], "m", "", 1, {"text": "theirs", "finish_reason": "stop", "logprobs": None})],
                       release=[keys[1]])
        return await asyncio.wait_for(task, 10)

    res = _run(main())
    assert inner.asked == [(0, 1)]
    assert [s.text for s in res.samples] == ["ok", "theirs"] and res.cached_samples == 1
