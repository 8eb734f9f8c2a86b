"""Particles: the plurality vote, an answer parsed into particles, and the decomposition against the scripted
server (invalid samples redrawn, k valid samples by default, a reasoned answer with no particle, the whole turn when
no sample is valid)."""

from __future__ import annotations

import json

import pytest
from scripted_face import P, _client_cfg

from face.llm import Completion, make_client
from face.pipeline.particles import ParticlesAnswer, ParticlesSpec, decompose, plurality_vote
from face.testing.scripted import InProcessServer


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
    parse_particles = ParticlesAnswer(reasoning=False).parse
    # feedback as answered: an empty string stays empty (the authors' particles have one); missing: NO_FEEDBACK
    assert parse_particles(_answer(("greeting", "Hello there", ""))) == (P("greeting", "Hello there", ""),)
    missing = json.dumps({"particles": [{"dialogue_act": "greeting", "mention": "Hello there"}]})
    assert parse_particles(missing) == (P("greeting", "Hello there", "NO_FEEDBACK_PROVIDED"),)
    assert "dialogue_act" in parse_particles(_answer(("joke", "x", "y")))
    assert "1-12 words" in parse_particles(_answer(("others", " ".join(["w"] * 13), "y")))
    assert "particles" in parse_particles(json.dumps({"items": []}))
    truncated = Completion(_answer(("greeting", "Hello there", "")), "length")
    assert "truncated" in parse_particles(truncated)


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
