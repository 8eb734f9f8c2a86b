"""Fixtures: a scripted OpenAI-compatible server in a background thread and configs for it."""
from __future__ import annotations

import pytest

from face.llm import LLMConfig
from face.testing.scripted import ScriptedServer


@pytest.fixture
def server():
    srv = ScriptedServer()
    with srv:
        yield srv


@pytest.fixture
def make_cfg(server, tmp_path):
    def make(**kw) -> LLMConfig:
        base = {"backend": "openai_compatible", "base_url": server.info.base_url, "model": "scripted-model",
                    "cache_dir": str(tmp_path / "cache"), "progress": False, "concurrency": 4, "timeout_s": 5.0,
                    "max_retries": 4, "backoff_base_s": 0.01, "backoff_max_s": 0.05,
                "probe": False}  # tests that count requests; test_performance.py probes
        base.update(kw)
        return LLMConfig(**base)
    return make

