"""The request arithmetic (face/llm/sizes.py) and the cost estimate (face/pipeline/estimate.py) against counts worked
out by hand: every expected number below is written from the definitions (samples, HTTP requests of at most
n_per_request samples, ~4 characters a token, USD per million tokens), never computed by the code under test.
The prompts are stubbed with fixed messages so that their token counts are known."""

from __future__ import annotations

from types import SimpleNamespace

import pandas as pd
from helpers import approx

from face.data.schema import Instruction
from face.llm import sizes
from face.llm.config import LLMConfig
from face.llm.sizes import Size
from face.pipeline import estimate
from face.pipeline.estimate import Pricing, StageCost
from face.pipeline.scoring import ScoringSpec

# ---------------------------------------------------------------- sizes


def test_http_requests_round_up_to_whole_requests():
    assert sizes.http_requests(5, 2) == 3  # 2 + 2 + 1
    assert sizes.http_requests(4, 2) == 2
    assert sizes.http_requests(5, 1) == 5
    assert sizes.http_requests(5, 0) == 5  # n_per_request below 1 counts as 1


def test_tokens_are_estimated_at_four_characters_rounded_up():
    assert sizes.estimate_tokens(8) == 2
    assert sizes.estimate_tokens(9) == 3
    # (ceil(4/4) + 4) + (ceil(8/4) + 4) + 3 = 5 + 6 + 3
    assert sizes.estimate_input_tokens([("system", "abcd"), ("user", "abcdefgh")]) == 14


def test_input_bound_counts_utf8_bytes_overheads_and_the_response_format():
    # "user" 4 bytes + "é" 2 bytes + 16 per message, + 16 per request
    assert sizes.input_bound([("user", "é")]) == 4 + 2 + 16 + 16
    # the schema's JSON '{"a": 1}' is 8 bytes
    assert sizes.input_bound([("user", "é")], {"a": 1}) == 4 + 2 + 16 + 16 + 8


def test_bound_reserves_max_tokens_for_every_sample_of_the_request():
    b = sizes.bound([("user", "hi")], 10, 5)
    assert (b.input_tokens, b.output_tokens) == (4 + 2 + 16 + 16, 50)
    assert "max_tokens 10 × n 5" in b.explain(10, 5)
    assert sizes.bound([("user", "hi")], 10, 5, {"a": 1}).input_tokens == 4 + 2 + 16 + 16 + 8  # the format's bytes


def test_planned_counts_prompts_per_http_request_and_answers_per_sample():
    # 3 requests of 5 samples, 2 per HTTP request: 3 HTTP requests each; the prompt (100 tokens summed over the
    # requests) is sent with every HTTP request, each answer (7 tokens) drawn once per sample
    assert sizes.planned(5, 2, 100, 7, requests=3) == Size(3, 15, 9, 300, 105)
    # one request; its prompt: (ceil(4/4)+4) + (ceil(8/4)+4) + 3 = 14 tokens, sent 3 times
    assert sizes.planned_request([("system", "abcd"), ("user", "abcdefgh")], 5, 2, 7) == Size(1, 5, 3, 42, 35)


def test_sizes_add_and_scale_with_rounding():
    assert Size(1, 2, 3, 4, 5) + Size(10, 20, 30, 40, 50) == Size(11, 22, 33, 44, 55)
    assert Size(3, 15, 9, 301, 105).scaled(0.5) == Size(2, 8, 4, 150, 52)  # round(1.5)=2, 7.5->8, 4.5->4, 52.5->52
    assert Size(10, 10, 10, 10, 10).scaled(0.29) == Size(3, 3, 3, 3, 3)  # 2.9 rounds to 3, not 2


def test_cost_is_priced_per_million_tokens_input_and_output_apart():
    assert sizes.cost_usd(1_000_000, 2_000_000, 3.0, 5.0) == approx(3.0 + 10.0)
    assert sizes.cost_usd(500_000, 100_000, 2.0, 10.0) == approx(1.0 + 1.0)


# ---------------------------------------------------------------- estimate


def test_pricing_of_a_config_keeps_input_and_output_prices_and_n_per_request():
    p = Pricing.of(LLMConfig(price_input_per_mtok=1.0, price_output_per_mtok=4.0, n_per_request=3))
    assert p == Pricing(3, 1.0, 4.0)
    assert Pricing.of(LLMConfig(price_input_per_mtok=2.0)).price_output_per_mtok == 0.0
    assert p.cost(1_000_000, 500_000) == approx(1.0 + 2.0)


CALLS: list[tuple] = []
CONV = object()  # the conversation a unit belongs to


def _stub_prompts(monkeypatch):
    CALLS.clear()

    def score(*a, **k):  # 40 characters: ceil(40/4) + 4 + 3 = 17 tokens a scoring prompt
        CALLS.append(("score", a, k))
        return [("user", "x" * 40)]

    def decompose(*a, **k):  # (ceil(20/4)+4) + (ceil(7/4)+4) + 3 = 9 + 6 + 3 = 18 tokens a decomposition prompt
        CALLS.append(("decompose", a, k))
        return [("system", "y" * 20), ("user", "z" * 7)]

    monkeypatch.setattr(estimate, "score_messages", score)
    monkeypatch.setattr(estimate, "decompose_messages", decompose)


def test_a_pricing_without_settings_is_one_sample_per_http_request_and_free():
    assert (Pricing().n_per_request, Pricing().price_input_per_mtok, Pricing().price_output_per_mtok) == (1, 0, 0)
    assert Pricing().cost(1e6, 1e6) == 0.0


def _scoring_stage(monkeypatch) -> StageCost:
    _stub_prompts(monkeypatch)
    units = [SimpleNamespace(conv_id="c1")] * 3
    instr = [Instruction("i1", "a" * 8), Instruction("i2", "b" * 12)]  # 2 and 3 tokens
    return estimate.scoring_cost("relevance", units, instr, {"c1": CONV}, 4, ScoringSpec("sampling", 5), 8,
                                 Pricing(2, 1.0, 4.0))


def test_scoring_cost_counts_every_sample_of_every_unit_instruction_pair(monkeypatch):
    s = _scoring_stage(monkeypatch)
    # 3 units × 2 instructions = 6 requests of 5 samples = 30 samples; 3 HTTP requests each (2 per request) = 18;
    # one HTTP request of each: 3 × 17 tokens × 2 instructions + 5 instruction tokens × 3 units = 117, sent 3 times;
    # 30 answers × 8 tokens
    assert (s.stage, s.assistant_turns, s.units) == ("score:relevance", 4, 3)
    assert (s.requests, s.samples, s.http_requests, s.input_tokens, s.output_tokens) == (6, 30, 18, 351, 240)
    assert s.cost_usd == approx(351 * 1.0 / 1e6 + 240 * 4.0 / 1e6)
    assert s.samples_per_turn == 7.5
    assert s.size == Size(6, 30, 18, 351, 240)
    assert [c[:2] for c in CALLS] == [("score", (u, CONV, "", "conversational recommender systems", True))
                                      for u in [SimpleNamespace(conv_id="c1")] * 3]


def test_scoring_cost_plans_one_sample_per_pair_for_the_logprobs_estimator_whatever_n(monkeypatch):
    """Issue 41: the logprobs estimator asks for one greedy answer per unit × instruction (its ``n`` is not used)."""
    _stub_prompts(monkeypatch)
    units = [SimpleNamespace(conv_id="c1")] * 3
    instr = [Instruction("i1", "a" * 8), Instruction("i2", "b" * 12)]
    s = estimate.scoring_cost("relevance", units, instr, {"c1": CONV}, 4, ScoringSpec("logprobs", 5), 8,
                              Pricing(2, 1.0, 4.0))
    # 6 requests of 1 sample, one HTTP request each; their prompts 3 × 17 × 2 + 5 × 3 = 117 tokens, sent once;
    # 6 answers × 8 tokens -- not 5 samples a request (30 samples, 18 HTTP requests, 351 and 240 tokens)
    assert (s.requests, s.samples, s.http_requests, s.input_tokens, s.output_tokens) == (6, 6, 6, 117, 48)
    assert s.cost_usd == approx(117 * 1.0 / 1e6 + 48 * 4.0 / 1e6)


def test_decomposition_cost_counts_k_samples_per_evaluated_turn(monkeypatch):
    _stub_prompts(monkeypatch)
    convs = [SimpleNamespace(evaluated_turns=lambda: ["t1", "t2"]), SimpleNamespace(evaluated_turns=lambda: ["t3"])]
    s = estimate.decomposition_cost(convs, 3, 50, Pricing(2, 1.0, 4.0))
    assert [c[1] for c in CALLS] == [(convs[0], "t1", "movie-recommendation assistant", False),
                                     (convs[0], "t2", "movie-recommendation assistant", False),
                                     (convs[1], "t3", "movie-recommendation assistant", False)]
    # per turn: 3 samples in 2 HTTP requests, 18 prompt tokens each, 3 × 50 answer tokens
    assert (s.stage, s.assistant_turns, s.units) == ("decompose", 3, 3)
    assert (s.requests, s.samples, s.http_requests, s.input_tokens, s.output_tokens) == (3, 9, 6, 108, 450)
    assert s.cost_usd == approx(108e-6 + 450 * 4e-6)


def _stage(name, turns, samples, rate=None, cost=0.5) -> StageCost:
    return StageCost(name, turns, 2, 1, samples, 1, 10, 20, cost, rate)


def test_cost_table_total_takes_the_largest_turn_count_and_one_shared_rate():
    df = estimate.cost_table([_stage("score:a", 8, 40, 2.5), _stage("decompose", 4, 4)])
    total = df.iloc[-1]
    assert total["stage"] == "total"
    assert total["assistant_turns"] == 8  # the largest stage's, not the last one's (4)
    assert total["samples"] == 44 and total["units"] == 4 and total["cost_usd"] == approx(1.0)
    assert total["samples_per_turn"] == approx(44 / 8)
    assert total["particles_per_turn"] == 2.5
    assert list(df["samples_per_turn"][:2]) == [5.0, 1.0]


def test_cost_table_total_states_no_rate_when_the_stages_assumed_different_ones():
    df = estimate.cost_table([_stage("score:a", 8, 40, 2.5), _stage("score:b", 8, 40, 3.0)])
    assert df.iloc[-1]["particles_per_turn"] is None or pd.isna(df.iloc[-1]["particles_per_turn"])


def test_particles_per_turn_is_the_mean_over_decomposed_turns():
    decomps = {("c", 1): SimpleNamespace(particles=[1, 2, 3]), ("c", 3): SimpleNamespace(particles=[1])}
    assert estimate.particles_per_turn(decomps) == 2.0
    assert estimate.particles_per_turn({("c", 1): SimpleNamespace(particles=[1, 2, 3])}) == 3.0
    assert estimate.particles_per_turn({}) == 0.0


def test_samples_per_turn_of_a_stage_without_turns_is_its_samples():
    assert _stage("score:a", 0, 6).samples_per_turn == 6.0
    assert _stage("score:a", 1, 6).samples_per_turn == 6.0
    df = estimate.cost_table([_stage("score:a", 0, 6)])
    assert df.iloc[-1]["samples_per_turn"] == 6.0


def test_scale_stage_scales_units_counts_and_cost_and_states_the_rate():
    s = estimate.scale_stage(StageCost("score:x", 4, 10, 10, 50, 50, 1000, 400, 0.01), 2.81, 2.81)
    # round(28.1), round(140.5) = 140 (to even), 2810, 1124, 0.01 × 2.81
    assert (s.stage, s.assistant_turns, s.units) == ("score:x", 4, 28)
    assert (s.requests, s.samples, s.http_requests, s.input_tokens, s.output_tokens) == (28, 140, 140, 2810, 1124)
    assert s.cost_usd == approx(0.0281)
    assert s.particles_per_turn == 2.81


def test_totals_sums_the_named_stages_without_the_total_row():
    df = estimate.cost_table([_stage("score:a", 8, 40), _stage("decompose", 4, 4), _stage("score:b", 8, 6)])
    assert estimate.totals(df, "score") == Size(2, 46, 2, 20, 40)
    assert estimate.totals(df) == Size(3, 50, 3, 30, 60)


def test_totals_count_zero_for_a_column_the_table_lacks():
    df = pd.DataFrame({"stage": ["score:a", "total"], "samples": [7, 7]})
    assert estimate.totals(df) == Size(samples=7)
