"""Scoring in bounded memory (issue 19): records come out in the order planned while the plan is read lazily, an
identical request is sent once, a warm rerun sends nothing, and the score records are written as they come."""

from __future__ import annotations

import asyncio
import json
import math
from types import SimpleNamespace

import pytest
from helpers import llm_config

from face.aspects import Aspect
from face.console import Progress
from face.data.schema import Conversation, Instruction, Particle, Turn
from face.llm import LLMConfig, make_client
from face.llm.base import ChatRequest, ChatResult, LLMCallError, LLMRequestRefused
from face.llm.stream import drive
from face.llm.usage import BudgetExceeded
from face.pipeline.records import ScoreSink
from face.pipeline.scoring import ScoreRecord, ScoringSpec, plan_iter, score_stream, units_for
from face.testing.scripted import InProcessServer

ASPECT = Aspect("relevance", "turn", (0, 1, 2), "Is it relevant?")
INSTRUCTIONS = [Instruction(f"i{k}", f"Instruction {k}: rate the nugget.") for k in range(3)]


def _conv(i: int, n_particles: int) -> tuple[Conversation, dict]:
    turns = (Turn(0, "USER", f"Hi, conversation {i}"), Turn(1, "ASST", f"Try film {i}.", {"relevance": 1}),
             Turn(2, "USER", "Thanks"))
    conv = Conversation(f"c{i}", turns)
    from face.pipeline.particles import Decomposition

    parts = tuple(Particle("recommendation", f"film {i}" if k < 2 else f"film {i}-{k}", "Thanks")
                  for k in range(n_particles))  # particles 0 and 1 read the same: one prompt
    return conv, {(conv.conv_id, 1): Decomposition(conv.conv_id, 1, parts, "released")}


def _responder(body: dict) -> str:
    return json.dumps({"score": (body.get("seed") or 0) % 3})


def _cfg(server: InProcessServer, tmp_path, concurrency: int = 4) -> LLMConfig:
    return llm_config(server=server, cache_dir=str(tmp_path / "c"), concurrency=concurrency, seed=0, n_per_request=8)


def _plan(n_convs: int):
    convs, decomps = zip(*(_conv(i, 4) for i in range(n_convs)))
    decomp = {k: v for d in decomps for k, v in d.items()}
    units = units_for(ASPECT, list(convs), decomp)
    return units, {c.conv_id: c for c in convs}


def test_records_come_in_plan_order_and_identical_requests_are_sent_once(tmp_path):
    units, by_id = _plan(5)
    spec = ScoringSpec("sampling", 5, reasoning=False)
    planned = list(plan_iter(units, INSTRUCTIONS, by_id, spec, json_schema=False))
    srv = InProcessServer(responder=_responder)
    with srv, make_client(_cfg(srv, tmp_path)) as client:
        got: list[ScoreRecord] = []
        score_stream(client, iter(planned), spec, got.append)
    assert [(r.conv_id, r.particle_ind, r.instruction_id) for r in got] == \
        [(p.unit.conv_id, p.unit.particle_ind, p.instruction.instruction_id) for p in planned]
    # samples of seeds 0..4 score 0,1,2,0,1: mean 0.8 for every request
    assert all(math.isclose(r.score, 0.8) for r in got) and all(r.n_valid == 5 for r in got)
    distinct = len({p.request for p in planned})
    assert distinct == 5 * 3 * 3  # per conversation and instruction, particles 0 and 1 are one prompt
    assert client.usage.http_requests == distinct  # one HTTP request per distinct prompt (n = 5 in one)


def test_the_plan_is_read_lazily_whatever_its_length(tmp_path, monkeypatch):
    import face.llm.client

    monkeypatch.setattr(face.llm.client, "READ_AHEAD", 16)  # the cache read in chunks of 16 (256 by default)
    units, by_id = _plan(15)
    spec = ScoringSpec("sampling", 5, reasoning=False)
    pulled, seen = [0], []

    def planned():
        for p in plan_iter(units, INSTRUCTIONS, by_id, spec, json_schema=False):
            pulled[0] += 1
            yield p

    def emit(r: ScoreRecord) -> None:
        seen.append(pulled[0] - len(seen))  # planned but not yet emitted when this one comes out

    srv = InProcessServer(responder=_responder, latency_s=0.002)
    with srv, make_client(_cfg(srv, tmp_path, concurrency=4)) as client:
        score_stream(client, planned(), spec, emit)
        window = max(64, 4 * client.cfg.concurrency)
    assert len(seen) == len(units) * 3 == 180
    assert max(seen) <= window + 2 * 16 < 180  # what is in flight, plus the cache's read-ahead (two chunks of 16)


def test_a_warm_rerun_sends_nothing_and_gives_the_same_records(tmp_path):
    units, by_id = _plan(3)
    spec = ScoringSpec("sampling", 5, reasoning=False)
    runs = []
    srv = InProcessServer(responder=_responder)
    with srv:
        for _ in range(2):
            with make_client(_cfg(srv, tmp_path)) as client:
                got: list[ScoreRecord] = []
                score_stream(client, plan_iter(units, INSTRUCTIONS, by_id, spec, json_schema=False), spec, got.append)
                runs.append(([vars(r) for r in got], client.usage.http_requests, client.usage.cache_hits))
    assert runs[0][0] == runs[1][0] and runs[1][1] == 0 and runs[1][2] == 5 * len(units) * 3


def test_score_sink_writes_each_record_and_keeps_compact_columns(tmp_path):
    conv, decomps = _conv(0, 3)
    recs = [ScoreRecord("relevance", "c0", 1, k, f"i{k % 2}", score, "sampling", 5, 5, samples=[1, 1, 1, 1, 2])
            for k, score in enumerate([1.2, math.nan, 0.4])]
    recs[1].fallback = "no_valid_sample"
    with ScoreSink(tmp_path / "s.jsonl", decomps) as sink:
        for r in recs:
            sink.add(r)
    lines = [json.loads(x) for x in (tmp_path / "s.jsonl").read_text().splitlines()]
    assert [x["score"] for x in lines] == [1.2, None, 0.4]  # valid JSON: no NaN
    assert lines[2]["particle"] == {"dialogue_act": "recommendation", "mention": "film 0-2", "user_feedback": "Thanks"}
    df = sink.take()
    assert list(df["conv_id"]) == ["c0"] * 3 and list(df["instruction_id"]) == ["i0", "i1", "i0"]
    assert list(df["particle_ind"]) == [0, 1, 2] and df["score"].isna().tolist() == [False, True, False]
    assert df["fallback"].isna().tolist() == [True, False, True] and df["fallback"][1] == "no_valid_sample"


def test_identical_requests_share_their_draws_and_their_answer_counts_go_in_once(tmp_path):
    """Seeds 0 and 1 answer nothing valid, later seeds a score: each distinct prompt draws 5, then 2 more; the two
    identical particles of a turn share that request, its draws and its counts (its 2 invalid draws, 2 redraws)."""
    units, by_id = _plan(2)
    spec = ScoringSpec("sampling", 5, reasoning=False, draws={"rounds": 2})

    def responder(body: dict) -> str:
        return "?" if (body.get("seed") or 0) in (0, 1) else json.dumps({"score": 2})

    srv = InProcessServer(responder=responder)
    with srv, make_client(_cfg(srv, tmp_path)) as client:
        got: list[ScoreRecord] = []
        score_stream(client, plan_iter(units, INSTRUCTIONS, by_id, spec, json_schema=False), spec, got.append)
        usage = client.usage.summary()
    distinct = 2 * 3 * 3  # conversations × instructions × distinct particles
    assert len(got) == 2 * 3 * 4 and all(r.n_valid == 5 and r.n_retried == 2 and r.score == 2.0 for r in got)
    assert usage["requests"] == distinct and usage["samples"] == distinct * 7
    assert (usage["rejected_answers"], usage["answer_retries"], usage["invalid_answers"]) == (2 * distinct,
                                                                                               2 * distinct, 0)


def test_identical_requests_count_their_samples_scored_as_the_lowest_once(tmp_path):
    """Seeds 0 and 1 answer nothing valid and there is no redraw: each distinct prompt's record scores 2 of its 5
    samples as 0 (score 6/5); the two identical particles of a turn share that request and its 2 defaulted
    samples, counted once in the usage."""
    units, by_id = _plan(2)
    spec = ScoringSpec("sampling", 5, reasoning=False, draws={"rounds": 1})

    def responder(body: dict) -> str:
        return "?" if (body.get("seed") or 0) in (0, 1) else json.dumps({"score": 2})

    srv = InProcessServer(responder=responder)
    with srv, make_client(_cfg(srv, tmp_path)) as client:
        got: list[ScoreRecord] = []
        score_stream(client, plan_iter(units, INSTRUCTIONS, by_id, spec, json_schema=False), spec, got.append)
        usage = client.usage.summary()
    distinct = 2 * 3 * 3
    assert len(got) == 2 * 3 * 4 and all(r.n_defaulted == 2 and math.isclose(r.score, 1.2) for r in got)
    assert usage["defaulted_answers"] == 2 * distinct and usage["invalid_answers"] == 2 * distinct

# ---------------------------------------------------------------- the batch driver alone (face/llm/stream.py)


class _Client:
    """What the batch driver needs of a client: question ``i`` answered at once, unless ``outcome[i]`` is an
    exception (raised after ``delay`` s), "hang" (never answered) or "hit" (found by the cache's read-ahead)."""

    def __init__(self, outcome: dict | None = None, concurrency: int = 1, delay: float = 0.0):
        self.cfg = SimpleNamespace(concurrency=concurrency, progress=False)
        self.usage = SimpleNamespace(dry_run=False, spent_usd=0.12345678, est_cost_usd=9.0)
        self.outcome, self.delay = outcome or {}, delay
        self.sent: list[int] = []
        self.cancelled: list[int] = []

    def cached_stream(self, items, request):
        for x in items:
            req = request(x)
            yield x, req, (ChatResult(req, [], cached_samples=3) if self.outcome.get(x) == "hit" else None)

    async def chat(self, req: ChatRequest) -> ChatResult:
        i = int(req.messages[0][1][1:])
        self.sent.append(i)
        what = self.outcome.get(i)
        if isinstance(what, BaseException):
            await asyncio.sleep(self.delay)
            raise what
        if what == "hang":
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                self.cancelled.append(i)
                raise
        return ChatResult(req, [], cached_samples=1 if i % 2 else 0)


def _question(i: int) -> ChatRequest:
    return ChatRequest(messages=(("user", f"q{i % 1000}"),))  # question 1000 + i is question i again


def _drive(client: _Client, items, total: int | None = None, on_error: str = "raise", upto: int | None = None,
           seen=None) -> list:
    async def go():
        out = []
        batch = drive(client, items, _question, desc="judge", total=total, on_error=on_error)
        async for item, res in batch:
            out.append((item, res))
            if seen is not None:
                seen(item)
            if upto is not None and len(out) == upto:
                await batch.aclose()  # what a consumer's `async with aclosing(...)` does
                await asyncio.sleep(0.01)
                client.cancelled_at_close = list(client.cancelled)
                break
        return out

    return asyncio.run(go())


class _Bar(Progress):
    """The progress the driver reports (the project's reporter, kept): its total, then its info() after each step."""

    made: list[_Bar] = []

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.updates: list[dict] = []
        _Bar.made.append(self)

    def update(self, n: int = 1) -> None:
        super().update(n)
        self.updates.append(self.info())


@pytest.mark.parametrize("concurrency,pulled_at", [(1, [64] * 32 + [96] * 32 + [100] * 36),
                                                   (20, [80] * 40 + [100] * 60)])
def test_the_driver_plans_max_64_or_4x_concurrency_items_ahead_and_tops_up_at_half(concurrency, pulled_at):
    pulled = [0]

    def items():
        for i in range(100):
            pulled[0] += 1
            yield i

    seen: list[int] = []
    out = _drive(_Client(concurrency=concurrency), items(), seen=lambda _: seen.append(pulled[0]))
    assert [x for x, _ in out] == list(range(100)) and seen == pulled_at


def test_a_cached_item_is_not_sent_and_an_identical_request_shares_one_send_only_while_in_flight():
    # 0 and 1000 are one question, sent together; 0 done, its twin 2000 comes 100 items later: sent again (the
    # cache would answer it); item 5 was found by the read-ahead
    items = [0, 1000, *range(1, 100), 2000]
    client = _Client({5: "hit"})
    out = _drive(client, items)
    assert [x for x, _ in out] == items and out[0][1] is out[1][1]
    assert sorted(client.sent) == sorted([0, *(i for i in range(1, 100) if i != 5), 0])
    assert out[6][1].cached_samples == 3  # item 5: the read-ahead's result


def test_progress_counts_each_request_once_with_its_cache_hits_and_failures(monkeypatch):
    import face.llm.stream

    monkeypatch.setattr(face.llm.stream, "Progress", _Bar)
    _Bar.made.clear()
    _drive(_Client({1: LLMCallError("down"), 2: "hit"}), range(4), total=4, on_error="return")
    _drive(_Client(), range(2))
    assert [(b.total, b.n, [(u["hits"], u["fail"]) for u in b.updates]) for b in _Bar.made] == [
        (4, 4, [("0", "0"), ("0", "1"), ("3", "1"), ("4", "1")]), (0, 2, [("0", "0"), ("1", "0")])]


def test_a_failure_stops_the_batch_once_the_requests_in_flight_settled_and_counts_what_completed():
    # 0 done; 1 fails; in flight then: 2 and 4 complete, 3 fails -> 2 of 5 failed, 3 of 5 completed
    for total, of in ((5, "5"), (None, "?")):
        client = _Client({1: LLMCallError("one is down", retries=4), 3: LLMCallError("three is down")}, delay=0.01)
        with pytest.raises(LLMCallError) as e:
            _drive(client, range(5), total=total)
        assert str(e.value) == f"2 of {of} requests of 'judge' failed (3 of {of} requests completed); first: " \
                               "one is down"
        assert e.value.retries == 4 and sorted(client.sent) == [0, 1, 2, 3, 4]


def test_a_budget_stop_among_the_failures_is_the_one_raised_with_its_stage_and_counts():
    client = _Client({1: LLMCallError("one is down"), 3: BudgetExceeded("budget: $3 spent.")}, delay=0.01)
    with pytest.raises(BudgetExceeded) as e:
        _drive(client, range(5), total=5)
    assert str(e.value) == "budget: $3 spent. Stage 'judge': 3 of 5 requests completed."


def test_a_bug_in_a_request_in_flight_is_raised_as_it_is():
    client = _Client({1: LLMCallError("one is down"), 3: KeyError("a bug")}, delay=0.01)
    with pytest.raises(KeyError, match="a bug"):
        _drive(client, range(5), total=5)


@pytest.mark.parametrize("on_error", ["raise", "return"])
def test_a_refused_request_stops_the_batch_at_once_even_when_failures_are_returned(on_error):
    refused = LLMRequestRefused("the endpoint refused it: bad schema", status=400)
    client = _Client({1: refused, 2: "hang"})
    with pytest.raises(LLMRequestRefused) as e:
        _drive(client, range(4), on_error=on_error)
    assert e.value is refused and client.cancelled == [2]  # not waited for: cancelled


def test_failures_are_returned_as_results_under_on_error_return_and_the_batch_goes_on():
    out = _drive(_Client({1: LLMCallError("one is down")}), range(4), total=4, on_error="return")
    assert [(x, r.error) for x, r in out] == [(0, None), (1, "LLMCallError: one is down"), (2, None), (3, None)]
    with pytest.raises(ValueError, match="on_error must be 'raise' or 'return', got 'ignore'"):
        _drive(_Client(), range(4), on_error="ignore")


def test_a_consumer_that_stops_early_cancels_the_requests_still_in_flight():
    client = _Client({3: "hang", 4: "hang"})
    assert [x for x, _ in _drive(client, range(5), upto=2)] == [0, 1]
    assert sorted(client.cancelled_at_close) == [3, 4]  # at once, not when the event loop ends


def test_a_batchs_progress_counts_requests_cache_hits_and_failures_and_shows_the_cost_so_far(monkeypatch):
    """The driver's progress on the project's reporter: one step per request, the cache hits and failures summed,
    the cost spent so far (the estimate in a dry run) to 4 decimals."""
    import face.llm.stream

    monkeypatch.setattr(face.llm.stream, "Progress", _Bar)
    _Bar.made.clear()
    client = _Client({0: "hit", 1: LLMCallError("down")})
    _drive(client, range(4), total=7, on_error="return")
    [r] = _Bar.made
    assert (r.total, r.desc, r.unit, r.n) == (7, "judge", "requests", 4)
    assert r.info() == {"hits": "4", "fail": "1", "cost": "$0.1235"}
    client.usage.dry_run = True
    assert r.info()["cost"] == "$9.0000 (dry-run estimate)"
