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
