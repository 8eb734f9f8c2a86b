import json

import pytest

from face.llm import ChatRequest, make_client
from face.llm.scripted import ScriptedServer, default_responder, schema_instance
from face.llm.structured import chat_json, extract_json, run_json_batch, validate

SCHEMA = {
    "type": "object",
    "properties": {
        "score": {"type": "integer", "minimum": 1, "maximum": 3},
        "reason": {"type": "string", "minLength": 1, "maxLength": 80},
        "particles": {"type": "array", "minItems": 1, "maxItems": 4,
                      "items": {"type": "object", "properties": {"text": {"type": "string"},
                                                                 "aspect": {"enum": ["a", "b"]}},
                                "required": ["text", "aspect"], "additionalProperties": False}},
    },
    "required": ["score", "reason"],
    "additionalProperties": False,
}


@pytest.mark.parametrize("text,expected", [
    ('{"score": 2}', {"score": 2}),
    ('  [1, 2]\n', [1, 2]),
    ('Sure!\n```json\n{"score": 3, "reason": "ok"}\n```\nHope this helps.', {"score": 3, "reason": "ok"}),
    ('```\n{"a": "b}"}\n```', {"a": "b}"}),
    ('The answer is {"score": 1, "reason": "has } brace"} as requested.', {"score": 1, "reason": "has } brace"}),
    ('Rating: {oops} then {"score": 2}', {"score": 2}),
])
def test_extract_json_tolerant(text, expected):
    assert extract_json(text) == expected


@pytest.mark.parametrize("text", ["no json here", '{"score": ', ""])
def test_extract_json_raises(text):
    with pytest.raises(ValueError):
        extract_json(text)


def test_validate_accepts_valid_and_reports_each_violation():
    ok = {"score": 2, "reason": "fine", "particles": [{"text": "x", "aspect": "a"}]}
    assert validate(ok, SCHEMA) == []
    cases = {
        "expected integer": {"score": "2", "reason": "x"},
        "expected integer, got bool": {"score": True, "reason": "x"},
        "< minimum": {"score": 0, "reason": "x"},
        "> maximum": {"score": 4, "reason": "x"},
        "missing required 'reason'": {"score": 2},
        "unexpected property 'extra'": {"score": 2, "reason": "x", "extra": 1},
        "shorter than": {"score": 2, "reason": ""},
        "longer than": {"score": 2, "reason": "x" * 81},
        "fewer than 1 items": {"score": 2, "reason": "x", "particles": []},
        "more than 4 items": {"score": 2, "reason": "x", "particles": [{"text": "t", "aspect": "a"}] * 5},
        "not in ['a', 'b']": {"score": 2, "reason": "x", "particles": [{"text": "t", "aspect": "c"}]},
        "$.particles[0]: unexpected property 'z'": {"score": 2, "reason": "x",
                                                    "particles": [{"text": "t", "aspect": "a", "z": 1}]},
        "expected object": [1],
    }
    for needle, obj in cases.items():
        errs = validate(obj, SCHEMA)
        assert errs and any(needle.split(", got")[0] in e for e in errs), (needle, errs)
    assert validate(2.5, {"type": "number"}) == [] and validate(2.5, {"type": "integer"})
    assert validate(None, {"type": ["string", "null"]}) == []


def test_scripted_schema_instances_are_valid():
    import random
    for seed in range(50):
        assert validate(schema_instance(SCHEMA, random.Random(seed)), SCHEMA) == []


def test_chat_json_native_schema(server, make_cfg):
    with make_client(make_cfg()) as c:
        res = c.run_async(chat_json(c, ChatRequest(messages="rate this", tag="score"), SCHEMA))
    assert res.ok and res.attempts == 1 and validate(res.value, SCHEMA) == []
    assert server.log[0]["n"] == 1
    assert res.value == json.loads(res.raw_texts[0])


@pytest.mark.parametrize("fault", ["malformed", "truncated"])
def test_chat_json_retries_invalid_with_a_new_sample(server, make_cfg, fault):
    with make_client(make_cfg()) as c:
        server.force(fault)
        res = c.run_async(chat_json(c, ChatRequest(messages="rate this", tag="score"), SCHEMA))
        assert res.ok and res.attempts == 2 and res.sample_index == 1
        assert len(res.errors) == 1 and ("invalid JSON" in res.errors[0] or "truncated" in res.errors[0])
        assert [e["seed"] for e in server.log] == [0, 1]  # the retry is a different sample, not a cache hit
        # rerun: both samples come from the cache, same outcome, nothing sent
        again = c.run_async(chat_json(c, ChatRequest(messages="rate this", tag="score"), SCHEMA))
        assert again.value == res.value and len(server.log) == 2
        assert c.usage.summary()["fallbacks"] == 0


def test_chat_json_final_failure_is_recorded_not_defaulted(make_cfg):
    srv = ScriptedServer(responder=lambda body: "I cannot answer in JSON, sorry.")
    with srv as info:
        with make_client(make_cfg(base_url=info.base_url)) as c:
            res = c.run_async(chat_json(c, ChatRequest(messages="rate", tag="score"), SCHEMA, max_attempts=3))
            s = c.usage.summary()
    assert res.value is None and not res.ok and res.attempts == 3
    assert "no valid JSON after 3 attempts" in res.fallback and "invalid JSON" in res.fallback
    assert len(res.raw_texts) == 3 and len(srv.log) == 3
    assert s["fallbacks"] == 1 and s["by_tag"]["score"]["fallbacks"] == 1


def test_chat_json_check_rejects_and_retries(server, make_cfg):
    seen = []

    def check(v):
        seen.append(v["score"])
        return None if len(seen) >= 2 else "want a second opinion"

    with make_client(make_cfg()) as c:
        res = c.run_async(chat_json(c, ChatRequest(messages="rate"), SCHEMA, check=check))
    assert res.ok and res.attempts == 2 and res.errors == ["check: want a second opinion"]


def test_chat_json_prompt_only_when_no_native_schema(server, make_cfg):
    with make_client(make_cfg(supports_json_schema=False)) as c:
        res = c.run_async(chat_json(c, ChatRequest(messages="rate this"), SCHEMA))
    assert res.ok and validate(res.value, SCHEMA) == []
    assert "```json" in res.raw_texts[0]  # came wrapped in prose: tolerant extraction did the work


def test_json_batch_many_samples(server, make_cfg):
    rs = [ChatRequest(messages=f"item {i}", n=4, tag="score") for i in range(5)]
    with make_client(make_cfg()) as c:
        server.force("malformed")
        out = run_json_batch(c, rs, SCHEMA, desc="json batch")
        assert c.usage.summary()["fallbacks"] == 0
    assert [len(x) for x in out] == [4] * 5
    assert all(j.ok and validate(j.value, SCHEMA) == [] for x in out for j in x)
    assert sum(j.attempts for x in out for j in x) == 21
    assert len(server.log) == 21


def test_default_responder_is_deterministic_in_messages_and_seed():
    body = {"messages": [{"role": "user", "content": "x"}], "seed": 3}
    assert default_responder(body) == default_responder(dict(body))
    assert default_responder(body) != default_responder(dict(body, seed=4))
