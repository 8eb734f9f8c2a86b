"""Prompt content: what a scoring / decomposition prompt shows, and that CRSArena-Eval's prompts are
byte-identical to the ones the LLM cache was filled with before the seams refactor."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from face.data import CRSARENA_EVAL, RELEASED_PARTICLES
from face.data.crsarena import ASPECTS, load_conversations, select
from face.data.released import load_released_particles
from face.data.schema import Conversation, Particle, Turn
from face.datasets.usr import USR
from face.particles import decompose_messages, from_released
from face.scoring import Unit, score_messages, units_for

FIXTURE = Path(__file__).parent / "fixtures" / "crsarena_prompt_hashes_v1.json"


def _h(messages) -> str:
    return hashlib.sha256(json.dumps([list(m) for m in messages]).encode()).hexdigest()


def test_crsarena_prompts_are_those_of_the_pre_refactor_code(data_dir):
    """Hashes made by the code before datasets owned the aspects (commit 0e194f7), so old caches still hit."""
    want = json.loads(FIXTURE.read_text())
    convs = select(load_conversations(data_dir / CRSARENA_EVAL), limit=3)
    ids = {c.conv_id for c in convs}
    decomps = from_released([r for r in load_released_particles(data_dir / RELEASED_PARTICLES) if r.conv_id in ids])
    by_id = {c.conv_id: c for c in convs}
    for name, aspect in ASPECTS.items():
        for unit in ("particle", "whole"):
            got = [_h(score_messages(u, by_id[u.conv_id], "Rate the nugget."))
                   for u in units_for(aspect, convs, decomps, unit)]
            assert got == want[f"score:{name}:{unit}"], (name, unit)
    assert [_h(decompose_messages(c, t)) for c in convs for t in c.assistant_turns()] == want["decompose"]


CONV = Conversation("kbrd_redial_x", (
    Turn(0, "USER", "Hi, any sci-fi films?"),
    Turn(1, "ASST", "Sure, do you like old ones?", {"relevance": 2}),
    Turn(2, "USER", "Yes, classics please."),
    Turn(3, "ASST", "Try Alien (1979).", {"relevance": 2}),
    Turn(4, "USER", "Seen it, something else?"),
    Turn(5, "ASST", "Then Solaris (1972).", {"relevance": 1}),
    Turn(6, "USER", "Great, thanks!"),
), {"dialogue_overall": 3}, system="kbrd_redial", split="redial")


def test_turn_prompt_shows_two_previous_turns_the_turn_the_next_user_turn_and_the_scale():
    p = Particle("recommendation", "Solaris (1972)", "Great, thanks!")
    [(_, system), (_, user)] = score_messages(Unit(ASPECTS["relevance"], CONV.conv_id, 5, 0, p), CONV, "Rate it.")
    assert "conversational recommender systems" in system
    assert "Try Alien (1979)." in user and "Seen it, something else?" in user  # the two turns before
    assert "Hi, any sci-fi films?" not in user and "Yes, classics please." not in user  # not earlier ones
    assert '"""Then Solaris (1972)."""' in user and '"""Great, thanks!"""' in user  # the turn, the user's reaction
    assert "an integer from 0 (worst) to 2 (best)" in user and "mention: Solaris (1972)" in user


def test_dialogue_prompt_shows_the_whole_dialogue_and_the_particle():
    p = Particle("recommendation", "Alien (1979)", "Seen it, something else?")
    [(_, _), (_, user)] = score_messages(Unit(ASPECTS["dialogue_overall"], CONV.conv_id, 3, 0, p), CONV, "Rate it.")
    for t in CONV.turns:
        assert t.utterance in user
    assert "from 0 (worst) to 4 (best)" in user and "mention: Alien (1979)" in user


def test_last_turn_prompt_says_the_conversation_ended():
    conv = Conversation("c", CONV.turns[:6], system="s")
    [(_, _), (_, user)] = score_messages(Unit(ASPECTS["relevance"], "c", 5, -1, None), conv, "Rate it.")
    assert "(the conversation ended here)" in user and "rate the assistant turn as a whole" in user


def test_usr_prompts_take_their_domain_and_scale_from_the_dataset(data_dir):
    ds = USR("usr_topical_chat", "topical_chat", limit=1)
    [conv] = ds.select(ds.load_all(data_dir))
    [turn] = conv.evaluated_turns()
    (_, system), (_, user) = score_messages(Unit(ds.aspect("overall"), conv.conv_id, turn.turn_ind, -1, None), conv,
                                            "Rate it.", ds.judged)
    assert "open-domain dialogue systems" in system and "recommend" not in system
    assert "from 1 (worst) to 5 (best)" in user
    (_, dsys), _ = decompose_messages(conv, turn, ds.assistant)
    assert "chit-chat assistant" in dsys and "movie" not in dsys


@pytest.mark.parametrize("turn_ind,expected", [(1, "Yes, classics please."), (5, "Great, thanks!")])
def test_decomposition_prompt_shows_the_users_reaction(turn_ind, expected):
    _, (_, user) = decompose_messages(CONV, CONV.turn(turn_ind))
    assert f'"""{expected}"""' in user
