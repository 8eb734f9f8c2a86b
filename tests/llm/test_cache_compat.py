"""Caches filled before the LLM-seam refactor must still hit (fixtures made by the old client)."""
import json
import shutil
from pathlib import Path

import pytest

from face.llm import ChatRequest, LLMConfig, SampleCache, make_client
from face.llm.adapters import score_adapter
from face.llm.cache import CachingLM, request_key

FIXTURES = Path(__file__).parent / "fixtures"
KEYS = json.loads((FIXTURES / "cache_keys_v1.json").read_text())
SERVED = {c["name"]: c for c in json.loads((FIXTURES / "cache_v1_texts.json").read_text())}


def case_request(case: dict) -> ChatRequest:
    return ChatRequest(messages=[tuple(m) for m in KEYS["messages"]], **case["request"])


@pytest.mark.parametrize("case", KEYS["cases"], ids=lambda c: c["name"])
def test_key_function_reproduces_the_recorded_keys(case, tmp_path):
    cfg = LLMConfig(base_url="http://unused/v1", cache_dir=str(tmp_path), **case["config"])
    lm = CachingLM(inner=None, store=None, cfg=cfg, model=cfg.model)
    req = case_request(case)
    assert [request_key(cfg, cfg.model, req, i) for i in req.indices] == case["keys"]
    assert list(lm.keys_for(req).values()) == case["keys"]  # the read-ahead's keys too (seed 7, None: cases)


def test_score_adapter_request_has_the_recorded_key(tmp_path):
    case = next(c for c in KEYS["cases"] if c["name"] == "json_schema")
    cfg = LLMConfig(base_url="http://unused/v1", cache_dir=str(tmp_path), **case["config"])
    plain = ChatRequest(messages=[tuple(m) for m in KEYS["messages"]])
    req = score_adapter([1, 2, 3]).request(plain, native=True)
    assert request_key(cfg, cfg.model, req, 0) == case["keys"][0]


def test_cache_filled_before_the_refactor_still_hits(server, make_cfg, tmp_path):
    cache_dir = tmp_path / "old_cache"
    shutil.copytree(FIXTURES / "cache_v1", cache_dir)
    cases = [c for c in KEYS["cases"] if c["name"] in SERVED]
    assert len(cases) == 2 and len(SampleCache(cache_dir)) == 3
    with make_client(make_cfg(cache_dir=str(cache_dir))) as c:
        out = c.run_batch([case_request(case) for case in cases])
        s = c.usage.summary()
    assert server.log == [] and s["http_requests"] == 0 and s["cache_hits"] == 3
    for case, res in zip(cases, out):
        assert all(x.cached for x in res.samples)
        assert res.texts == SERVED[case["name"]]["texts"]
        assert [None if x.logprobs is None else [[t.token, t.logprob, [list(p) for p in t.top]] for t in x.logprobs]
                for x in res.samples] == SERVED[case["name"]]["logprobs"]
