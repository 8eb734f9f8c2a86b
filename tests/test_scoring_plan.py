"""The scoring plan: requests that share a prompt prefix grouped together, sent to the server in the planned order,
and the cost estimate's counts against the paper's (16 instructions x 5 samples x ~2.8 particles)."""

from __future__ import annotations

import pytest
from scripted_face import INSTR, _client_cfg, _released, face_responder

from face.data import CRSARENA_EVAL
from face.data.schema import Instruction
from face.datasets.crsarena import ASPECTS, load_conversations
from face.llm import make_client
from face.pipeline.scoring import ScoringSpec, plan, score, units_for
from face.testing.scripted import InProcessServer


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


def test_a_turn_a_unit_source_left_out_is_named_when_its_particles_are_planned(convs, data_dir):
    decomps = _released(data_dir, convs)
    c = convs[0]
    t = c.evaluated_turns()[0]
    del decomps[(c.conv_id, t.turn_ind)]
    with pytest.raises(KeyError, match=f"no particles for conversation '{c.conv_id}', turn {t.turn_ind}"):
        units_for(ASPECTS["dialogue_overall"], convs, decomps)
    # whole turns need no particles: the same decompositions plan every turn
    whole = units_for(ASPECTS["relevance"], convs, decomps, unit="whole")
    assert (c.conv_id, t.turn_ind) in {(u.conv_id, u.turn_ind) for u in whole}


def test_the_particles_file_lists_every_decomposed_turn_and_skips_the_ones_left_out(convs, data_dir, tmp_path):
    import json

    from face.pipeline.method import write_particles

    decomps = _released(data_dir, convs[:2])
    c = convs[0]
    left_out = (c.conv_id, c.evaluated_turns()[0].turn_ind)
    del decomps[left_out]
    rows = [json.loads(line) for line in write_particles(decomps, convs[:2], tmp_path / "p.jsonl").read_text()
            .splitlines()]
    assert [(r["conv_id"], r["turn_ind"]) for r in rows] == [
        (x.conv_id, t.turn_ind) for x in convs[:2] for t in x.evaluated_turns() if (x.conv_id, t.turn_ind) != left_out]
