"""Fixtures: the scripted LM in this process (``server``: no socket, the same answers, faults and request log as the
HTTP one; tests of HTTP itself start a ``ScriptedServer`` and pass its ``base_url``) and configs for it."""
from __future__ import annotations

import pytest

from face.llm import LLMConfig
from face.testing.scripted import InProcessServer


@pytest.fixture
def server():
    srv = InProcessServer()
    with srv:
        yield srv


@pytest.fixture
def make_cfg(server, tmp_path):
    """An LLMConfig for ``server`` (or for another server: ``server=srv.spec()``; or for an HTTP endpoint:
    ``base_url=...``). A test module about HTTP overrides ``server`` with a ``ScriptedServer`` (test_batch.py)."""
    def make(**kw) -> LLMConfig:
        if not hasattr(server, "spec"):  # the HTTP server
            kw = {"base_url": server.info.base_url, **kw}
        base = {"backend": "scripted", "server": server.spec() if hasattr(server, "spec") else None,
                "model": "scripted-model",
                "cache_dir": str(tmp_path / "cache"), "progress": False, "concurrency": 4, "timeout_s": 5.0,
                "max_retries": 4, "backoff_base_s": 0.01, "backoff_max_s": 0.05,
                "probe": False}  # tests that count requests; test_performance.py probes
        if "base_url" in kw:
            base.update(backend="openai_compatible", server=None)
        base.update(kw)
        return LLMConfig(**base)
    return make
