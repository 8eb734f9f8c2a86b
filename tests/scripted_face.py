"""What the tests of the FACE pipeline's parts against the scripted server share (test_decomposition,
test_scoring, test_scoring_plan): a responder that answers FACE's prompts, the fixtures ``scripted`` (a server with
it) and ``convs`` (two conversations; conftest.py loads this module as a plugin), the client configuration, the
released particles of the conversations, two instructions."""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path

import pytest
from helpers import llm_config

from face.data import CRSARENA_EVAL, RELEASED_PARTICLES
from face.data.schema import Instruction, Particle
from face.datasets.crsarena import load_conversations
from face.datasets.face_released import load_released_particles
from face.llm import LLMConfig
from face.pipeline.particles import from_released
from face.testing.scripted import InProcessServer

P = Particle


def _turn_text(body: dict) -> str:
    user = body["messages"][-1]["content"]
    m = (re.search(r'Assistant turn to split:\n"""(.*?)"""', user, re.S)  # the compact prompt
         or re.search(r"Target assistant turn:\nTurn \d+ - ASST: (.*?)\n", user))  # the reasoning prompt
    return m.group(1) if m else ""


def face_responder(body: dict) -> str:
    """Decomposition: sample seeds 0 and 1 answer garbage, later seeds split the turn into sentences
    (seed 2 adds a spurious particle); scoring: score = seed mod 3 (seed = sample index). Reasoning
    prompts get prose first, with a decoy JSON object in it, and the answer as the last JSON object."""
    name = ((body.get("response_format") or {}).get("json_schema") or {}).get("name")
    user = body["messages"][-1]["content"]
    reasoning = "Think step by step:" in user or "end your reply with the grade" in user
    if "Think step by step:" in user:
        name = "particles"
    elif "end your reply with the grade" in user:
        name = "score"
    seed = body.get("seed") or 0
    if name == "particles":
        if seed < 2:
            return "I cannot do that"
        parts = [s.strip() for s in re.split(r"(?<=[?.!])\s+", _turn_text(body)) if s.strip()] or ["..."]
        ps = [{"dialogue_act": "preference elicitation" if s.endswith("?") else "recommendation",
               "mention": " ".join(s.split()[:12]), "user_feedback": "NO_FEEDBACK_PROVIDED"} for s in parts]
        if seed == 2:
            ps.append({"dialogue_act": "others", "mention": "spurious", "user_feedback": "x"})
        answer = json.dumps({"particles": ps})
    elif name == "score":
        answer = json.dumps({"score": seed % 3})
    else:
        return "?"
    return f'Step 1: not a {{"particles": [], "score": 9}} case.\nStep 2: so:\n{answer}' if reasoning else answer


@pytest.fixture
def scripted():
    srv = InProcessServer(responder=face_responder)
    with srv:
        yield srv


def _client_cfg(server, tmp_path, **kw) -> LLMConfig:
    return llm_config(tmp_path, server=server, seed=0, **kw)


@pytest.fixture(scope="module")
def convs(data_dir):
    """The first two conversations of CRSArena-Eval (read once per module; nothing changes them)."""
    return load_conversations(data_dir / CRSARENA_EVAL)[:2]


@functools.lru_cache(maxsize=1)
def _released_particles(data_dir: Path) -> tuple:
    return tuple(load_released_particles(data_dir / RELEASED_PARTICLES))  # read once


def _released(data_dir, convs):
    ids = {c.conv_id for c in convs}
    return from_released([r for r in _released_particles(data_dir) if r.conv_id in ids])


INSTR = [Instruction("a", "Rate it.", 1), Instruction("b", "Rate it carefully.", 2)]
