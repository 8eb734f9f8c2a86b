"""The live FACE pipeline on the scripted server: decomposition + vote, both estimators, call order,
aggregation, per-particle file, run file, cost estimate, and every live experiment on 2 conversations."""

from __future__ import annotations

import functools
import json
import math
import re
from pathlib import Path

import pytest
from helpers import llm_config

from face.data import CRSARENA_EVAL, RELEASED_PARTICLES
from face.data.schema import Instruction, Particle
from face.datasets.crsarena import ASPECTS, load_conversations, select
from face.datasets.face_released import load_released_particles
from face.llm import Completion, LLMConfig, TokenLogprob, make_client
from face.pipeline.particles import ParticlesSpec, decompose, from_released, parse_particles, plurality_vote
from face.pipeline.scoring import (
    Planned,
    ScoringSpec,
    Unit,
    plan,
    record_from_samples,
    score,
    score_value,
    units_for,
)
from face.runfile import read_run_file
from face.testing.scripted import InProcessServer, ScriptedServer

P = Particle


# ------------------------------------------------------------------ pure parts

def test_plurality_vote_prefers_most_common_count_then_most_frequent_tuples():
    a = (P("recommendation", "Alien (1979)", "x"),)
    b = (P("recommendation", "Heat (1995)", "x"),)
    two = (P("greeting", "Hi", "y"), P("recommendation", "Alien (1979)", "x"))
    chosen, votes = plurality_vote([two, b, a, a])
    assert chosen == a and votes == 3  # 3 samples have one particle; "Alien" occurs most often
    chosen, votes = plurality_vote([two, two, a])
    assert chosen == two and votes == 2
    chosen, _ = plurality_vote([b, a])  # exact tie: the earliest sample
    assert chosen == b
    with pytest.raises(ValueError):
        plurality_vote([])


def _answer(*particles) -> str:
    return json.dumps({"particles": [dict(zip(("dialogue_act", "mention", "user_feedback"), p)) for p in particles]})


def test_parse_particles_rejects_bad_acts_and_long_mentions():
    # feedback as answered: an empty string stays empty (the authors' particles have one); missing: NO_FEEDBACK
    assert parse_particles(_answer(("greeting", "Hello there", ""))) == (P("greeting", "Hello there", ""),)
    missing = json.dumps({"particles": [{"dialogue_act": "greeting", "mention": "Hello there"}]})
    assert parse_particles(missing) == (P("greeting", "Hello there", "NO_FEEDBACK_PROVIDED"),)
    assert "dialogue_act" in parse_particles(_answer(("joke", "x", "y")))
    assert "1-12 words" in parse_particles(_answer(("others", " ".join(["w"] * 13), "y")))
    assert "particles" in parse_particles(json.dumps({"items": []}))
    truncated = Completion(_answer(("greeting", "Hello there", "")), "length")
    assert "truncated" in parse_particles(truncated)


def test_score_value_accepts_only_values_on_the_scale():
    assert score_value('{"score": 2}', (0, 1, 2)) == 2
    assert score_value("```json\n{\"score\": 1}\n```", (0, 1, 2)) == 1
    assert score_value('{"score": 3}', (0, 1, 2)) is None
    assert score_value('{"score": 1.5}', (0, 1, 2)) is None
    assert score_value('{"score": NaN}', (0, 1, 2)) is None
    assert score_value("no idea", (0, 1, 2)) is None


# ------------------------------------------------------------------ against the scripted server

def _turn_text(body: dict) -> str:
    user = body["messages"][-1]["content"]
    m = (re.search(r'Assistant turn to split:\n"""(.*?)"""', user, re.S)  # the compact prompt
         or re.search(r"Target assistant turn:\nTurn \d+ - ASST: (.*?)\n", user))  # the reasoning prompt
    return m.group(1) if m else ""


def face_responder(body: dict) -> str:
    """Decomposition: sample seeds 0 and 1 answer garbage, later seeds split the turn into sentences
    (seed 2 adds a spurious particle); scoring: score = seed mod 3 (seed = sample index). Reasoning
    prompts get prose first, with a decoy JSON object in it, and the answer as the last JSON object."""
    name = ((body.get("response_format") or {}).get("json_schema") or {}).get("name")
    user = body["messages"][-1]["content"]
    reasoning = "Think step by step:" in user or "end your reply with the grade" in user
    if "Think step by step:" in user:
        name = "particles"
    elif "end your reply with the grade" in user:
        name = "score"
    seed = body.get("seed") or 0
    if name == "particles":
        if seed < 2:
            return "I cannot do that"
        parts = [s.strip() for s in re.split(r"(?<=[?.!])\s+", _turn_text(body)) if s.strip()] or ["..."]
        ps = [{"dialogue_act": "preference elicitation" if s.endswith("?") else "recommendation",
               "mention": " ".join(s.split()[:12]), "user_feedback": "NO_FEEDBACK_PROVIDED"} for s in parts]
        if seed == 2:
            ps.append({"dialogue_act": "others", "mention": "spurious", "user_feedback": "x"})
        answer = json.dumps({"particles": ps})
    elif name == "score":
        answer = json.dumps({"score": seed % 3})
    else:
        return "?"
    return f'Step 1: not a {{"particles": [], "score": 9}} case.\nStep 2: so:\n{answer}' if reasoning else answer


@pytest.fixture
def scripted():
    srv = InProcessServer(responder=face_responder)
    with srv:
        yield srv


def _client_cfg(server, tmp_path, **kw) -> LLMConfig:
    return llm_config(tmp_path, server=server, seed=0, **kw)


@pytest.fixture(scope="module")
def convs(data_dir):
    """The first two conversations of CRSArena-Eval (read once per module; nothing changes them)."""
    return select(load_conversations(data_dir / CRSARENA_EVAL), limit=2)


@pytest.mark.parametrize("reasoning", [True, False])
def test_decompose_retries_invalid_samples_and_votes(scripted, tmp_path, convs, reasoning):
    with make_client(_client_cfg(scripted, tmp_path)) as client:
        spec = ParticlesSpec(k=3, draws={"max_extra": 2}, reasoning=reasoning)
        out = decompose(client, convs, spec, json_schema=True)
    assert len(out) == sum(len(c.assistant_turns()) for c in convs)
    for d in out.values():
        # samples 0,1 invalid -> 2 extra samples drawn (indices 3, 4); valid: 2, 3, 4
        assert d.n_samples == 5 and d.n_valid == 3 and d.source == "llm"
        assert d.votes == 2  # samples 3 and 4 agree on the count; sample 2 has a spurious particle
        assert all(p.mention != "spurious" for p in d.particles)


def test_decompose_draws_until_k_valid_samples_by_default(scripted, tmp_path, convs):
    with make_client(_client_cfg(scripted, tmp_path)) as client:
        out = decompose(client, convs, ParticlesSpec(k=4), json_schema=True)
    assert {(d.n_samples, d.n_valid) for d in out.values()} == {(6, 4)}  # 2 invalid draws replaced


def test_reasoned_decomposition_may_have_no_particle(tmp_path, convs):
    reply = 'Step 2: there is nothing to extract. {"particles": [{"dialogue_act": "x"}]} is wrong.\n{"particles": []}'
    srv = InProcessServer(responder=lambda body: reply)
    with srv, make_client(_client_cfg(srv, tmp_path)) as client:
        out = decompose(client, convs[:1], ParticlesSpec(k=2), json_schema=True)
    assert all(d.particles == () and d.source == "llm" and d.n_valid == 2 for d in out.values())


def test_decompose_falls_back_to_whole_turn_when_no_sample_is_valid(scripted, tmp_path, convs):
    with make_client(_client_cfg(scripted, tmp_path)) as client:
        out = decompose(client, convs, ParticlesSpec(k=2, draws={"max_extra": 0}), json_schema=True)
    d = next(iter(out.values()))
    assert d.source == "whole_turn" and d.fallback == "no_valid_sample" and len(d.particles) == 1


@functools.lru_cache(maxsize=1)
def _released_particles(data_dir: Path) -> tuple:
    return tuple(load_released_particles(data_dir / RELEASED_PARTICLES))  # read once


def _released(data_dir, convs):
    ids = {c.conv_id for c in convs}
    return from_released([r for r in _released_particles(data_dir) if r.conv_id in ids])


INSTR = [Instruction("a", "Rate it.", 1), Instruction("b", "Rate it carefully.", 2)]


@pytest.mark.parametrize("reasoning", [True, False])
def test_sampling_estimator_is_the_mean_of_valid_samples(scripted, tmp_path, convs, data_dir, reasoning):
    every = units_for(ASPECTS["relevance"], convs, _released(data_dir, convs))
    units = every[:4] + every[-4:]  # particles of both conversations
    assert len({u.conv_id for u in units}) == 2
    spec = ScoringSpec("sampling", n=5, reasoning=reasoning)
    planned = plan(units, INSTR, {c.conv_id: c for c in convs}, spec, json_schema=True)
    with make_client(_client_cfg(scripted, tmp_path)) as client:
        recs = score(client, planned, spec)
    assert len(recs) == len(units) * 2
    for r in recs:  # seeds 0..4 answer 0, 1, 2, 0, 1 (the decoy {"score": 9} before the answer is ignored)
        assert r.samples == [0, 1, 2, 0, 1] and r.score == pytest.approx(0.8) and r.n_valid == 5


@pytest.mark.parametrize("fallback,expected_score", [("drop", math.nan), ("min", 0.0)])
def test_invalid_answers_are_redrawn_then_the_policy_applies(tmp_path, convs, data_dir, fallback, expected_score):
    srv = InProcessServer(responder=lambda body: "not a score")
    with srv:
        units = units_for(ASPECTS["relevance"], convs, _released(data_dir, convs))[:2]
        spec = ScoringSpec("sampling", 3, draws={"rounds": 4}, fallback=fallback)
        planned = plan(units, INSTR[:1], {c.conv_id: c for c in convs}, spec, True)
        with make_client(_client_cfg(srv, tmp_path)) as client:
            recs = score(client, planned, spec)
            usage = client.usage.summary()
    for r in recs:
        assert r.n_valid == 0 and len(r.samples) == 3 * 4 and r.n_retried == 9  # 3 samples × 4 draws each
        assert r.score == pytest.approx(expected_score, nan_ok=True)
        assert r.n_defaulted == (3 if fallback == "min" else 0)
    # one request per unit; its rounds draw 3, then the 3 still missing, ...: 12 samples, each an HTTP request
    assert (usage["requests"], usage["samples"], usage["http_requests"]) == (2, 2 * 12, 2 * 12)
    assert (usage["rejected_answers"], usage["answer_retries"], usage["invalid_answers"]) == (24, 18, 6)


def test_some_invalid_samples_are_replaced_by_valid_redraws(tmp_path, convs, data_dir):
    # seed 0 and 2 answer garbage, every other seed answers 2: n=3 needs indices 1, 3, 4
    srv = InProcessServer(responder=lambda b: "?" if b.get("seed") in (0, 2) else '{"score": 2}')
    with srv:
        units = units_for(ASPECTS["relevance"], convs, _released(data_dir, convs))[:1]
        spec = ScoringSpec("sampling", 3, reasoning=False)
        planned = plan(units, INSTR[:1], {c.conv_id: c for c in convs}, spec, True)
        with make_client(_client_cfg(srv, tmp_path, n_per_request=1)) as client:
            [r] = score(client, planned, spec)
    assert r.samples == [None, 2, None, 2, 2] and r.score == 2.0 and r.n_retried == 2 and r.n_defaulted == 0


@pytest.mark.parametrize("fallback,expected", [("min", 2 / 3), ("drop", 2.0)])
def test_samples_still_invalid_after_the_redraws_follow_the_policy_beside_valid_ones(tmp_path, convs, data_dir,
                                                                                   fallback, expected):
    """Only seed 0 answers (2): of n = 3 one is valid after 2 draws; min counts the other two as 0, drop leaves
    them out."""
    srv = InProcessServer(responder=lambda b: '{"score": 2}' if b.get("seed") == 0 else "?")
    with srv:
        units = units_for(ASPECTS["relevance"], convs, _released(data_dir, convs))[:1]
        spec = ScoringSpec("sampling", 3, reasoning=False, draws={"rounds": 2}, fallback=fallback)
        planned = plan(units, INSTR[:1], {c.conv_id: c for c in convs}, spec, True)
        with make_client(_client_cfg(srv, tmp_path, n_per_request=1)) as client:
            [r] = score(client, planned, spec)
    assert r.samples == [2, None, None, None, None] and r.n_valid == 1
    assert r.score == pytest.approx(expected)
    assert r.n_defaulted == (2 if fallback == "min" else 0)
    assert r.fallback == ("2 invalid sample(s) scored 0" if fallback == "min" else "2 invalid sample(s) dropped")


@pytest.mark.parametrize("fallback", ["min", "drop"])
def test_a_complete_sampled_record_says_nothing_went_wrong_and_a_dry_run_nothing_was_valid(fallback):
    unit = Unit(ASPECTS["relevance"], "c", 1, 0, P("recommendation", "Heat", ""))
    p = Planned(unit, INSTR[0], None)
    spec = ScoringSpec("sampling", 2, reasoning=False, fallback=fallback)
    r = record_from_samples(p, [Completion('{"score": 1}', "stop"), Completion('{"score": 2}', "stop")], spec)
    assert (r.score, r.n_valid, r.n_retried, r.n_defaulted, r.fallback) == (1.5, 2, 0, 0, None)
    r = record_from_samples(p, [Completion("", "stop", dry_run=True)] * 2, spec)
    assert (r.n_valid, r.fallback) == (0, "dry_run") and math.isnan(r.score)


@pytest.mark.parametrize("fallback", ["min", "drop"])
def test_logprobs_estimator_without_logprobs_uses_the_parsed_answer_else_the_policy(fallback):
    unit = Unit(ASPECTS["relevance"], "c", 1, 0, P("recommendation", "Heat", ""))
    p = Planned(unit, INSTR[0], None)
    spec = ScoringSpec("logprobs", reasoning=False, fallback=fallback)
    r = record_from_samples(p, [Completion('{"score": 1}', "stop", logprobs=None)], spec)
    assert (r.score, r.n_requested, r.n_valid, r.n_defaulted, r.fallback) == (1.0, 1, 1, 0,
                                                                              "parsed_value_without_logprobs")
    r = record_from_samples(p, [Completion("no idea", "stop", logprobs=None)], spec)
    assert (r.n_requested, r.n_valid, r.n_defaulted) == (1, 0, 1 if fallback == "min" else 0)
    assert r.score == (0.0 if fallback == "min" else pytest.approx(math.nan, nan_ok=True))


@pytest.mark.parametrize("fallback", ["min", "drop"])
@pytest.mark.parametrize("policy", ["parsed", "redraw", "min"])
def test_logprobs_missing_decides_a_parsed_answer_only_and_invalid_fallback_an_unparsed_one(policy, fallback):
    """method.scoring.logprobs_missing is about an answer that parsed but carries no logprobs: parsed keeps its
    integer, min scores the scale's lowest, redraw treats it as invalid (the fallback decides). An answer that
    did not parse is invalid under every policy: method.scoring.fallback decides (min -> 0, drop -> no score)."""
    unit = Unit(ASPECTS["relevance"], "c", 1, 0, P("recommendation", "Heat", ""))
    p = Planned(unit, INSTR[0], None)
    spec = ScoringSpec("logprobs", reasoning=False, fallback=fallback, logprobs_missing=policy)
    r = record_from_samples(p, [Completion('{"score": 2}', "stop", logprobs=None)], spec)
    expected = {"parsed": (2.0, 1, 0), "min": (0.0, 0, 1),
                "redraw": (0.0, 0, 1) if fallback == "min" else (math.nan, 0, 0)}[policy]
    assert (r.score, r.n_valid, r.n_defaulted) == pytest.approx(expected, nan_ok=True)
    r = record_from_samples(p, [Completion("no idea", "stop", logprobs=None)], spec)
    unparsed = (0.0, 0, 1) if fallback == "min" else (math.nan, 0, 0)
    assert (r.score, r.n_valid, r.n_defaulted) == pytest.approx(unparsed, nan_ok=True)
    assert r.fallback.startswith("no valid answer") or r.fallback == "no_valid_answer"


@pytest.mark.parametrize("estimator,wanted", [("sampling", 2), ("logprobs", 1)])
def test_redraws_are_the_draws_beyond_the_answers_the_estimator_wants(estimator, wanted):
    """n_retried: every draw after the first ``wanted`` (sampling: n = 2 here; logprobs: 1 answer, whatever n)."""
    unit = Unit(ASPECTS["relevance"], "c", 1, 0, P("recommendation", "Heat", ""))
    spec = ScoringSpec(estimator, 2, reasoning=False)
    for draws, retried in ((1, 0), (wanted, 0), (wanted + 3, 3)):
        r = record_from_samples(Planned(unit, INSTR[0], None), [Completion("?", "stop")] * draws, spec)
        assert r.n_retried == retried


def test_answer_counts_go_to_the_usage_of_the_records_tag():
    """count_answers: a record's samples scored as the lowest, an answer scored without its logprobs, under the
    request's tag; a dry run counts nothing, a client without usage is left alone."""
    from face.llm.usage import Usage
    from face.pipeline.scoring import ScoreRecord, count_answers

    def rec(fallback, defaulted):
        return ScoreRecord("relevance", "c", 1, 0, "a", 0.0, "sampling", 5, 5 - defaulted, fallback=fallback,
                           n_defaulted=defaulted)

    usage = Usage()
    client = type("Client", (), {"usage": usage})()
    for r in (rec("2 invalid sample(s) scored 0", 2), rec("no logprobs: scored 0", 1),
              rec("parsed_value_without_logprobs", 0), rec(None, 0), rec("dry_run", 3)):
        count_answers(client, "score:relevance", r)
    count_answers(type("Client", (), {"usage": None})(), "score:relevance", rec("no logprobs: scored 0", 1))
    count_answers(type("Client", (), {"usage": object()})(), "score:relevance", rec("no logprobs: scored 0", 1))
    t = usage.summary()["by_tag"]["score:relevance"]
    assert (t["defaulted_answers"], t["logprob_fallbacks"]) == (2 + 1, 2)


def test_each_estimator_asks_for_what_it_reads():
    from face.pipeline.scoring import LogprobsEstimator, SamplingEstimator

    spec = ScoringSpec("sampling", 5, temperature=0.6, top_logprobs=4, reasoning=False)
    s = SamplingEstimator().request((("user", "rate"),), spec, "t")
    assert (s.n, s.temperature, s.logprobs) == (5, 0.6, False)
    g = LogprobsEstimator().request((("user", "rate"),), spec, "t")
    assert (g.n, g.temperature, g.logprobs, g.top_logprobs) == (1, 0.0, True, 4)


def test_logprobs_estimator_is_probability_weighted_and_records_mass(tmp_path, convs, data_dir):
    srv = InProcessServer()
    with srv:  # default responder: schema-valid answer with logprobs
        units = units_for(ASPECTS["relevance"], convs, _released(data_dir, convs))[:4]
        spec = ScoringSpec("logprobs", top_logprobs=5, reasoning=False)
        planned = plan(units, INSTR, {c.conv_id: c for c in convs}, spec, True)
        with make_client(_client_cfg(srv, tmp_path)) as client:
            recs = score(client, planned, spec)
    for r in recs:
        assert r.fallback is None and 0 < r.valid_mass <= 1
        assert (r.n_requested, r.n_valid, r.n_retried, r.n_defaulted) == (1, 1, 0, 0)  # one greedy answer, used
        assert r.score == pytest.approx(sum(float(v) * p for v, p in r.distribution.items()))
        assert 0 <= r.score <= 2
    assert len({round(r.score, 6) for r in recs}) > 1  # a real expectation, not the sampled integer


def test_logprobs_after_reasoning_are_read_at_the_final_score_token():
    """Reasoning text with a decoy {"score": 1}, then the answer {"score": 2}: the distribution at the final
    score token (2: 0.6, 1: 0.3, 0: 0.1) gives 0.6·2 + 0.3·1 = 1.5, not the decoy's."""
    tokens = ['Step', ' 1', ':', ' not', ' {"', 'score', '":', ' 1', '}', '.', '\n', '{"', 'score', '":', ' 2', '}']
    lps = [TokenLogprob(t, math.log(0.9), [(t, math.log(0.9))]) for t in tokens]
    lps[7] = TokenLogprob(" 1", math.log(0.99), [(" 1", math.log(0.99))])
    lps[-2] = TokenLogprob(" 2", math.log(0.6), [(" 2", math.log(0.6)), (" 1", math.log(0.3)), (" 0", math.log(0.1))])
    completion = Completion("".join(tokens), "stop", lps)
    unit = Unit(ASPECTS["relevance"], "c", 1, 0, P("recommendation", "Heat", "ok"))
    r = record_from_samples(Planned(unit, INSTR[0], None), [completion], ScoringSpec("logprobs"))
    assert r.score == pytest.approx(1.5) and r.valid_mass == pytest.approx(1.0) and r.samples == [2]
    cut = Completion(completion.text, "length", lps)  # a reply cut off by max_tokens is not an answer
    r = record_from_samples(Planned(unit, INSTR[0], None), [cut], ScoringSpec("logprobs"))
    assert r.n_valid == 0 and r.score == 0.0 and r.n_defaulted == 1  # the authors' rule: the lowest score


def _contiguous(keys: list) -> bool:
    """Each distinct key occupies one run of consecutive positions."""
    seen, prev = set(), object()
    for k in keys:
        if k != prev and k in seen:
            return False
        seen.add(k)
        prev = k
    return True


def test_prefix_order_groups_requests_sharing_a_prompt_prefix(convs, data_dir):
    decomps = _released(data_dir, convs)
    by_id = {c.conv_id: c for c in convs}
    units = units_for(ASPECTS["relevance"], convs, decomps)
    prefix = plan(units, INSTR, by_id, ScoringSpec("sampling", 1, order="prefix"), True)
    naive = plan(units, INSTR, by_id, ScoringSpec("sampling", 1, order="naive"), True)
    assert len(prefix) == len(naive) == 2 * len(units)
    assert _contiguous([(p.unit.conv_id, p.unit.turn_ind) for p in prefix])  # a turn's context is shared
    # within a turn: one instruction after the other, particles vary fastest
    assert _contiguous([(p.unit.conv_id, p.unit.turn_ind, p.instruction.instruction_id) for p in prefix])
    # naive: the plain loop, every unit under each instruction in turn
    assert [p.instruction.instruction_id for p in naive][:4] == ["a", "b", "a", "b"]
    assert [(p.unit.turn_ind, p.unit.particle_ind) for p in naive][::2] == [(u.turn_ind, u.particle_ind) for u in units]
    units_d = units_for(ASPECTS["dialogue_overall"], convs, decomps)
    prefix_d = plan(units_d, INSTR, by_id, ScoringSpec("sampling", 1, order="prefix"), True)
    assert _contiguous([p.unit.conv_id for p in prefix_d])  # dialogue level: the whole dialogue is the prefix
    assert _contiguous([(p.unit.conv_id, p.instruction.instruction_id) for p in prefix_d])


def test_server_receives_requests_in_planned_order(tmp_path, convs, data_dir):
    from face.testing.scripted import _h

    srv = InProcessServer(responder=face_responder)
    with srv:
        planned = plan(units_for(ASPECTS["relevance"], convs, _released(data_dir, convs)), INSTR,
                       {c.conv_id: c for c in convs}, ScoringSpec("sampling", 1, order="prefix"), True)
        with make_client(_client_cfg(srv, tmp_path, concurrency=1)) as client:
            score(client, planned, ScoringSpec("sampling", 1, order="prefix"))
        sent = [r["messages_hash"] for r in srv.ok_requests()]
    want = [_h([{"role": r, "content": c} for r, c in p.request.messages])[:16] for p in planned]
    assert sent == want


def test_cost_estimate_matches_paper_call_counts(data_dir):
    """16 instructions × 5 samples × ~2.8 particles ≈ 226 scoring samples per aspect per turn; logprobs: a fifth."""
    from face.pipeline.estimate import Pricing, scoring_cost

    convs = load_conversations(data_dir / CRSARENA_EVAL)
    decomps = _released(data_dir, convs)
    by_id = {c.conv_id: c for c in convs}
    instr = [Instruction(f"i{k}", "x" * 400, k) for k in range(16)]
    units = units_for(ASPECTS["relevance"], convs, decomps)
    n_turns = sum(len(c.assistant_turns()) for c in convs)
    price = Pricing(n_per_request=1, price_input_per_mtok=0.15, price_output_per_mtok=0.6)
    samp = scoring_cost("relevance", units, instr, by_id, n_turns, ScoringSpec("sampling", 5), 8, price)
    lp = scoring_cost("relevance", units, instr, by_id, n_turns, ScoringSpec("logprobs", 5), 8, price)
    assert 215 <= samp.samples_per_turn <= 230
    assert lp.samples_per_turn == pytest.approx(samp.samples_per_turn / 5)
    assert samp.cost_usd > lp.cost_usd > 0


# ------------------------------------------------------------------ experiments on 2 conversations

SMALL_LIVE = ["llm=fake", "dataset.limit=2", "metaeval.n_boot=20", "method.instructions.max=2",
              "method.scoring.n=2",
              "method.particles.k=3", "aspects=[relevance,dialogue_overall]"]



def _detail(cfg) -> list[dict]:
    lines = (Path(cfg.paths.output_dir) / "particle_scores.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


@pytest.mark.slow
@pytest.mark.usefixtures("mlflow_store")
def test_crsarena_main_end_to_end_writes_run_file_and_per_particle_file(run_experiment):
    from mlflow.tracking import MlflowClient

    ran = run_experiment("experiment=crsarena_main", *SMALL_LIVE)
    cfg, out = ran.cfg, ran.experiment
    run_dir = Path(cfg.paths.output_dir)
    preds = read_run_file(run_dir / "run_file.json")
    assert set(preds.turn["aspect"]) == {"relevance"} and set(preds.dialogue["aspect"]) == {"dialogue_overall"}
    detail = [json.loads(line) for line in (run_dir / "particle_scores.jsonl").read_text().splitlines()]
    particles = [json.loads(line) for line in (run_dir / "particles.jsonl").read_text().splitlines()]
    n_particles = sum(len(p["particles"]) for p in particles)
    assert len(detail) == 2 * 2 * n_particles  # 2 aspects × 2 instructions × every particle
    d0 = detail[0]
    assert {"score", "samples", "n_valid", "fallback", "particle", "instruction_id"} <= set(d0)
    assert len(d0["samples"]) == 2 and d0["particle"]["mention"]
    # trace a turn score back to its particles: mean over particles × instructions
    t = preds.turn.iloc[0]
    mine = [d["score"] for d in detail if d["aspect"] == "relevance" and d["conv_id"] == t.conv_id
            and d["turn_ind"] == t.turn_ind and d["score"] is not None]
    assert t.pred == pytest.approx(sum(mine) / len(mine))
    client = MlflowClient(tracking_uri=cfg.tracking.tracking_uri)
    [run] = client.search_runs([client.get_experiment_by_name("crsarena_main").experiment_id])
    numbers = json.loads(Path(client.download_artifacts(run.info.run_id, "numbers.json")).read_text())
    assert numbers["llm_http_requests"] > 0 and "particles.per_turn" in numbers  # counters: not MLflow metrics
    assert run.data.tags["prompt.relevance"].startswith("prompts:/face-relevance-released/")
    assert "scripted-model" in (out.out_dir / "vs_published.md").read_text()


def test_ablation_no_particles_scores_whole_turns(run_experiment):
    # the pooled split only: no per-split figure to draw (what is checked here is what was scored)
    ran = run_experiment("experiment=ablation_no_particles", *SMALL_LIVE, "metaeval.splits=[all]", tracking=False)
    cfg = ran.cfg
    detail = _detail(cfg)
    # the first 2 conversations have 11 assistant turns: 2 instructions × (11 turns + 2 dialogues) = 26 units
    assert len(detail) == 2 * (11 + 2)
    assert {d["particle_ind"] for d in detail} == {-1}
    assert {d["turn_ind"] for d in detail if d["aspect"] == "dialogue_overall"} == {-1}
    assert not (Path(cfg.paths.output_dir) / "particles.jsonl").exists()


def test_ablation_no_optimization_uses_the_initial_instruction(run_experiment):
    ran = run_experiment("experiment=ablation_no_optimization", *SMALL_LIVE, tracking=False)
    cfg, out = ran.cfg, ran.experiment
    detail = _detail(cfg)
    assert {d["instruction_id"] for d in detail} == {"initial"}
    assert "FACE w/o train" in (out.out_dir / "vs_published.md").read_text()


@pytest.mark.slow
def test_ablation_scoring_compares_estimators_and_cost(run_experiment, data_dir):
    from scipy import stats

    ran = run_experiment("experiment=ablation_scoring", *SMALL_LIVE, tracking=False)
    out = ran.experiment
    usage = out.tables["usage"].set_index("variant")
    assert list(usage.index) == ["sampling_n1", "sampling_n5", "sampling_n20", "logprobs"]
    assert set(out.results["variant"]) == set(usage.index)
    # n=5 reuses the cached n=1 sample; n=20 reuses the 5
    assert usage.loc["sampling_n5", "llm_cache_hits"] > 0
    # every variant's turn-level correlations over the 11 turns are numbers, and each estimator's are its own
    turn = out.results[(out.results["level"] == "turn") & (out.results["split"] == "all")]
    by_variant = turn.set_index(["variant", "coefficient"])["value"]
    assert turn["value"].notna().all() and len(turn) == 4 * 3 and (turn["n"] == 11).all()
    assert by_variant["sampling_n1"].tolist() != by_variant["sampling_n20"].tolist()
    # the last variant's (logprobs) particle scores, aggregated by hand, give its Pearson against the labels
    detail = [d for d in _detail(ran.cfg) if d["aspect"] == "relevance"]
    assert {d["estimator"] for d in detail} == {"logprobs"}
    turns: dict[tuple[str, int], list[float]] = {}
    for d in detail:
        if d["score"] is not None:
            turns.setdefault((d["conv_id"], d["turn_ind"]), []).append(d["score"])
    convs = {c.conv_id: c for c in select(load_conversations(data_dir / CRSARENA_EVAL), limit=2)}
    human = {k: next(t.labels["relevance"] for t in convs[k[0]].turns if t.turn_ind == k[1]) for k in turns}
    keys = sorted(turns)
    r = stats.pearsonr([sum(turns[k]) / len(turns[k]) for k in keys], [human[k] for k in keys])[0]
    assert by_variant["logprobs", "pearson"] == pytest.approx(r, abs=1e-9)


@pytest.mark.slow
def test_ablation_particles_source(run_experiment):
    ran = run_experiment("experiment=ablation_particles_source", *SMALL_LIVE, tracking=False)
    out = ran.experiment
    assert set(out.results["variant"]) == {"ours", "released"}


def test_dry_run_sends_nothing_and_prints_the_estimate(run_experiment, capsys):
    ran = run_experiment("experiment=crsarena_main", "llm=fake", "llm.dry_run=true", "dataset.limit=2",
                         tracking=False)
    out = ran.experiment
    assert out.dry_run
    printed = capsys.readouterr().out
    assert "Cost estimate before sending anything" in printed and "score:relevance" in printed


def test_a_batch_api_dry_run_prices_at_half_the_list_price(run_experiment, capsys):
    import pandas as pd

    costs = {}
    for batch in ("false", "true"):
        ran = run_experiment("experiment=crsarena_main", "llm=openai", "llm.dry_run=true", f"llm.batch={batch}",
                             "dataset.limit=2", "aspects=[dialogue_overall]", "method.particles.source=released",
                             tracking=False, run_dir=f"batch_{batch}")
        cfg, out = ran.cfg, ran.experiment
        assert out.dry_run
        costs[batch] = pd.read_csv(Path(cfg.paths.output_dir) / "cost_estimate.csv")
    assert (costs["true"]["http_requests"] == costs["false"]["http_requests"]).all()
    assert costs["true"]["cost_usd"].iloc[-1] == pytest.approx(costs["false"]["cost_usd"].iloc[-1] / 2)
    assert costs["true"]["cost_usd"].iloc[-1] > 0
    assert "OpenAI Batch API price: 0.5 × list price" in capsys.readouterr().out


@pytest.mark.slow
def test_a_live_run_through_the_batch_api_writes_the_same_run_file_as_over_http(run_experiment, tmp_path):
    with ScriptedServer() as info:
        files = {}
        for batch in ("true", "false"):
            run_experiment("experiment=crsarena_main", "llm=openai_compatible", f"llm.base_url={info.base_url}",
                           f"llm.model={info.model}", f"llm.batch={batch}", "llm.batch_poll_s=0.05",
                           "dataset.limit=2", "aspects=[dialogue_overall]", "run_size=tiny",
                           f"paths.cache_dir={tmp_path / batch}-cache", tracking=False, run_dir=batch)
            files[batch] = (tmp_path / batch / "run_file.json").read_bytes()
        assert len(list((tmp_path / "true-cache" / "llm" / "batches").glob("batch-*.output.jsonl"))) == 2
    assert files["true"] == files["false"]  # decomposition and scoring, each one batch job


def test_own_conversations_without_labels_get_predictions_only(run_experiment, tmp_path):
    convs = [{"conv_id": "mycrs_run1_a", "dialogue": [
        {"turn_ind": 0, "role": "USER", "utterance": "Any good heist movies?"},
        {"turn_ind": 1, "role": "ASST", "utterance": "Try Heat (1995). Do you like older films?"},
        {"turn_ind": 2, "role": "USER", "utterance": "Yes, Heat sounds great, thanks!"}]}]
    path = tmp_path / "mine.json"
    path.write_text(json.dumps(convs))
    ran = run_experiment("experiment=crsarena_main", "llm=fake", f"dataset.file={path}",
                         "method.instructions.max=1",
                         "method.scoring.n=1", "method.particles.k=1", "aspects=[relevance,dialogue_overall]",
                         tracking=False)
    out = ran.experiment
    preds = read_run_file(out.files["run_file"])
    assert list(preds.turn["conv_id"]) == ["mycrs_run1_a"] and len(preds.dialogue) == 1


@pytest.mark.slow
def test_the_estimate_states_its_particle_rate_and_at_the_actual_rate_equals_what_is_sent(run_experiment, capsys):
    """Issue 29: before the decomposition the estimate assumes the released particles' rate and says so; after it,
    the run restates the scoring counts at the actual rate, and with no redraw and no cache hit what it sends is
    exactly that (the same arithmetic: face/llm/sizes.py)."""
    import pandas as pd

    ran = run_experiment("experiment=crsarena_main", *SMALL_LIVE, tracking=False)
    cfg = ran.cfg
    out = capsys.readouterr().out
    run_dir = Path(cfg.paths.output_dir)
    est = pd.read_csv(run_dir / "cost_estimate.csv").set_index("stage")
    assumed = est.loc["score:relevance", "particles_per_turn"]
    assert assumed > 0 and est.loc["decompose", "samples"] == est.loc["decompose", "units"] * 3  # k = 3
    rate = re.search(r"particles: ([\d.]+) per turn \(the estimate assumed ([\d.]+)\)", out)
    assert rate and float(rate.group(2)) == pytest.approx(assumed, abs=1e-3)
    particles = [json.loads(x) for x in (run_dir / "particles.jsonl").read_text().splitlines()]
    assert float(rate.group(1)) == pytest.approx(sum(len(p["particles"]) for p in particles) / len(particles), abs=1e-3)
    usage = json.loads((run_dir / "llm_usage.json").read_text())["totals"]
    assert usage["answer_retries"] == 0 and usage["cache_hits"] == 0
    sent = re.search(r"LLM sent: ([\d,]+) HTTP requests, ([\d,]+) samples .*; at the actual particle rate: "
                     r"([\d,]+) \(\+0\.0%\), ([\d,]+) \(\+0\.0%\)", out)
    assert sent, out[-2000:]
    http, samples, est_http, est_samples = (int(x.replace(",", "")) for x in sent.groups())
    assert (http, samples) == (est_http, est_samples) == (usage["http_requests"], usage["samples"])
