"""Scoring: an answer read as a value on the scale, both estimators against the scripted server and on answers
written by hand (the mean of valid samples, redraws of invalid answers, then the fallback policy; log-probabilities
weighted, at the final score token), what each estimator asks for, and the answer counts in the usage."""

from __future__ import annotations

import math

import pytest
from scripted_face import INSTR, P, _client_cfg, _released

from face.datasets.crsarena import ASPECTS
from face.llm import Completion, TokenLogprob, make_client
from face.pipeline.estimators import score_value
from face.pipeline.scoring import Planned, ScoringSpec, Unit, plan, record_from_samples, score, units_for
from face.testing.scripted import InProcessServer


def test_score_value_accepts_only_values_on_the_scale():
    assert score_value('{"score": 2}', (0, 1, 2)) == 2
    assert score_value("```json\n{\"score\": 1}\n```", (0, 1, 2)) == 1
    assert score_value('{"score": 3}', (0, 1, 2)) is None
    assert score_value('{"score": 1.5}', (0, 1, 2)) is None
    assert score_value('{"score": NaN}', (0, 1, 2)) is None
    assert score_value("no idea", (0, 1, 2)) is None


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
    assert (r.score, r.n_valid, r.n_defaulted) == pytest.approx(expected, nan_ok=True) and r.n_requested == 1
    if policy == "redraw":  # the record names why, as a phrase with the score given, as a key without one
        assert r.fallback == ("no logprobs: scored 0" if fallback == "min" else "no_logprobs")
    r = record_from_samples(p, [Completion("no idea", "stop", logprobs=None)], spec)
    unparsed = (0.0, 0, 1) if fallback == "min" else (math.nan, 0, 0)
    assert (r.score, r.n_valid, r.n_defaulted) == pytest.approx(unparsed, nan_ok=True)
    assert r.fallback == ("no valid answer: scored 0" if fallback == "min" else "no_valid_answer")


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
    from face.pipeline.estimators import LogprobsEstimator, SamplingEstimator

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


@pytest.mark.parametrize("reasoning, max_tokens, tokens", [(True, None, 768), (False, None, 16), (True, 40, 40),
                                                             (False, 40, 40)])
def test_an_answer_may_use_the_authors_768_tokens_with_reasoning_16_without_or_max_tokens(reasoning, max_tokens,
                                                                                          tokens):
    assert ScoringSpec("sampling", 2, reasoning=reasoning, max_tokens=max_tokens).answer_tokens == tokens


def test_an_estimator_named_by_its_dotted_path_is_that_class():
    from face.pipeline.estimators import LogprobsEstimator

    spec = ScoringSpec("face.pipeline.estimators.LogprobsEstimator", 5)
    assert type(spec.scorer) is LogprobsEstimator and spec.samples == 1  # one answer, whatever n (its own rule)


def test_the_default_spec_is_the_authors_5_samples_at_temperature_0_6_redrawn_for_10_rounds():
    spec = ScoringSpec()
    assert (spec.estimator, spec.n, spec.temperature, spec.reasoning, spec.draws.rounds, spec.draws.max_extra,
            spec.fallback, spec.top_logprobs) == ("sampling", 5, 0.6, True, 10, None, "min", 5)


@pytest.mark.parametrize("key, edge, past", [("temperature", 2, 2.01), ("temperature", 0, -0.01), ("max_tokens", 1, 0),
                                             ("top_logprobs", 0, -1), ("top_logprobs", 20, 21),
                                             ("draws.max_extra", 0, -1)])
def test_a_setting_at_its_bound_is_taken_and_one_step_past_it_refused(key, edge, past):
    """Temperature 0-2 (the API's range), max_tokens >= 1, top_logprobs 0-20 (the API's), max_extra >= 0."""
    from face.errors import ConfigError

    def spec(value):
        group, _, name = key.rpartition(".")
        return ScoringSpec(**({group: {name: value}} if group else {name: value}))

    got = spec(edge)
    for part in key.split("."):
        got = getattr(got, part)
    assert got == edge
    with pytest.raises(ConfigError, match=key.rpartition(".")[2]):
        spec(past)


def test_an_unknown_estimator_is_refused_in_one_line_naming_the_built_in_ones():
    from face.errors import ConfigError

    with pytest.raises(ConfigError) as e:
        ScoringSpec("median")
    assert str(e.value) == ("method.scoring.estimator must be one of 'sampling', 'logprobs' or a class as "
                            "module.Class, got 'median'")


@pytest.mark.parametrize("policy", ["parsed", "redraw", "min"])
def test_the_draw_loop_judges_a_logprobs_answer_by_its_expectation_its_parse_and_logprobs_missing(policy):
    """What the one draw loop is told of a logprobs answer (LogprobsEstimator.judge): one with an expectation at
    its score is valid as it is; one that did not parse is invalid; one that parsed without logprobs is provisional
    (redrawn, kept if nothing better comes) under logprobs_missing=parsed, else invalid."""
    from types import SimpleNamespace

    from face.llm.base import Provisional
    from face.pipeline.estimators import LogprobsEstimator

    judge, spec = LogprobsEstimator(), ScoringSpec("logprobs", reasoning=False, logprobs_missing=policy)
    expected = SimpleNamespace(value=1.4)
    assert judge.judge((1, expected), spec) == (1, expected)
    assert judge.judge((None, None), spec) == "not a valid score"
    assert (judge.n_valid([(1, expected)]), judge.n_valid([(1, None)])) == (1, 0)  # one answer, valid or not
    parsed_only = judge.judge((2, None), spec)
    if policy == "parsed":
        assert parsed_only == Provisional((2, None), "no logprobs at the score") and judge.keeps_provisional(spec)
    else:
        assert parsed_only == "no logprobs at the score" and not judge.keeps_provisional(spec)
