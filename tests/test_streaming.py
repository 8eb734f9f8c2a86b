"""Scoring in bounded memory (issue 19): records come out in the order planned while the plan is read lazily, an
identical request is sent once, a warm rerun sends nothing, and the score records are written as they come."""

from __future__ import annotations

import json
import math

from helpers import llm_config

from face.aspects import Aspect
from face.data.schema import Conversation, Instruction, Particle, Turn
from face.llm import LLMConfig, make_client
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
    df = sink.frame()
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
