"""Fixtures: the scripted LM in this process (``server``: no socket, the same answers, faults and request log as the
HTTP one; tests of HTTP itself start a ``ScriptedServer`` and pass its ``base_url``) and configs for it."""
from __future__ import annotations

import pytest
from helpers import llm_config

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
            kw = {"base_url": server.base_url, **kw}
        if "base_url" not in kw:
            kw = {"server": server, **kw}
        return llm_config(tmp_path, **kw)
    return make
