import json
import math

import pytest

from face.llm import ChatRequest, TokenLogprob, make_client
from face.llm.logprobs import (
    expected_from_top_logprobs,
    expected_score,
    find_answer_position,
    token_value,
)


def lp(p):
    return math.log(p)


def test_expectation_renormalises_over_valid_tokens():
    top = [("2", lp(0.5)), (" 3", lp(0.2)), ("1", lp(0.1)), ("hello", lp(0.1)), ("7", lp(0.05))]
    es = expected_from_top_logprobs(top, valid=[1, 2, 3])
    assert es.valid_mass == pytest.approx(0.8)
    assert es.distribution == pytest.approx({1: 0.125, 2: 0.625, 3: 0.25})
    assert es.value == pytest.approx(1 * 0.125 + 2 * 0.625 + 3 * 0.25)


def test_expectation_merges_spellings_of_one_value():
    top = [("2", lp(0.3)), (" 2", lp(0.3)), ("1", lp(0.2)), ("2.0", lp(0.1))]
    es = expected_from_top_logprobs(top, valid=[1, 2])
    assert es.distribution == pytest.approx({1: 0.2 / 0.9, 2: 0.7 / 0.9})
    assert es.valid_mass == pytest.approx(0.9)


def test_expectation_without_valid_tokens():
    es = expected_from_top_logprobs([("a", lp(0.9)), ("9", lp(0.1))], valid=[1, 2, 3])
    assert es.value is None and es.valid_mass == 0 and es.distribution == {}


def test_token_value():
    assert token_value(" 3", [1, 2, 3]) == 3
    assert token_value("3\n", [1, 2, 3]) == 3
    assert token_value("4", [1, 2, 3]) is None
    assert token_value("nan", [1]) is None and token_value("", [1]) is None


def toks(*texts):
    return [TokenLogprob(t, -0.1, []) for t in texts]


def test_find_answer_position_after_key():
    t = toks("{", '"', "reason", '":', ' "', "3", " items", '",', ' "', "score", '":', " ", "2", "}")
    assert find_answer_position(t, valid=[1, 2, 3]) == 12
    assert find_answer_position(t, valid=[1, 2, 3], key="missing") is None
    # a non-numeric value after the key is not silently skipped
    assert find_answer_position(toks("{", '"score"', ":", " high", " 2"), valid=[1, 2, 3]) is None
    assert find_answer_position(toks('{"score":', ' "', "3", '"}'), valid=[1, 2, 3]) == 2


def test_expected_score_end_to_end_on_scripted_server(server, make_cfg):
    schema = {"type": "object", "properties": {"score": {"type": "integer", "minimum": 1, "maximum": 5}},
              "required": ["score"]}
    rf = {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}}
    with make_client(make_cfg()) as c:
        out = c.run_batch([ChatRequest(messages=f"rate {i}", response_format=rf, logprobs=True, top_logprobs=5)
                           for i in range(10)])
    for r in out:
        comp = r.samples[0]
        es = expected_score(comp, valid=[1, 2, 3, 4, 5])
        assert es is not None and 1 <= es.value <= 5 and 0 < es.valid_mass <= 1
        assert sum(es.distribution.values()) == pytest.approx(1)
        # the scripted server makes the emitted digit the most likely one
        assert max(es.distribution, key=es.distribution.get) == json.loads(comp.text)["score"]
