"""What gets scored and the prompt that asks for its score: units (a particle, or a whole turn / dialogue) and the
scoring prompts (face/pipeline/scoring.py plans one request per unit × instruction from them).

Two prompts (``ScoringSpec.reasoning``):
- ``True`` (default, the paper's): numbered turns with roles; for turn-level aspects the two previous
  turns, the current assistant turn, the particle and the user's response; for dialogue-level aspects
  the whole dialogue and the particle with the number of the turn it came from; the aspect's
  particle-based definition and the description of every score level (the dataset's annotation
  scheme); the instruction; an invitation to think step by step. The answer is the last JSON object
  of the reply.
- ``False`` (cheaper, ours): a compact prompt answered by a schema-constrained ``{"score": k}`` only.

Both prompts put what the requests of one turn share first (context, aspect, grades), then the
instruction, then the particle, and requests are ordered the same way, so llama.cpp / vLLM / SGLang reuse
the cached prefix. In the reasoning prompt, conversation text is whitespace-normalised onto one line per
turn, so a turn cannot open a new block of the prompt.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from face.aspects import Aspect
from face.data.schema import Conversation, Particle
from face.pipeline.particles import Decomposition, history_text, next_user_turn, numbered, one_line
from face.prompts import render


@dataclass(frozen=True)
class Unit:
    """What gets scored: a particle (particle_ind >= 0) or a whole turn / dialogue (particle_ind == -1)."""

    aspect: Aspect
    conv_id: str
    turn_ind: int  # -1: the whole dialogue
    particle_ind: int
    particle: Particle | None



def units_for(aspect: Aspect, convs: Sequence[Conversation], decomps: dict[tuple[str, int], Decomposition],
              unit: str = "particle", unlabelled: str = "skip") -> list[Unit]:
    """What gets scored for ``aspect``: every particle of the evaluated turns, or whole turns / dialogues.

    ``unlabelled="skip"`` (the authors): in a conversation whose turns carry human labels, a turn-level aspect
    is not scored on the turns without a label for it (the released relevance judgements leave out the 5
    such turns of CRSArena-Eval); conversations without turn labels (your own logs) are scored in full."""
    if unit == "whole" and aspect.level == "dialogue":
        return [Unit(aspect, c.conv_id, -1, -1, None) for c in convs]
    if unit == "whole":
        return [Unit(aspect, c.conv_id, t.turn_ind, -1, None) for c in convs for t in turns_for(aspect, c, unlabelled)]
    return [Unit(aspect, c.conv_id, t.turn_ind, i, p) for c in convs for t in turns_for(aspect, c, unlabelled)
            for i, p in enumerate(_decomposition(decomps, c.conv_id, t.turn_ind).particles)]


def _decomposition(decomps: dict[tuple[str, int], Decomposition], conv_id: str, turn_ind: int) -> Decomposition:
    """A scored turn's particles; a unit source of your own that left the turn out is named with it."""
    d = decomps.get((conv_id, turn_ind))
    if d is None:
        raise KeyError(f"no particles for conversation {conv_id!r}, turn {turn_ind}")
    return d


def turns_for(aspect: Aspect, conv: Conversation, unlabelled: str = "skip") -> list:
    """The assistant turns of ``conv`` scored for ``aspect`` (see ``units_for``)."""
    turns = conv.evaluated_turns()
    if unlabelled == "skip" and aspect.level == "turn" and any(t.labels for t in conv.turns):
        turns = [t for t in turns if aspect.name in t.labels]
    return turns


# ---------------------------------------------------------------- prompts

def particle_text(p: Particle | None, whole: str) -> str:
    if p is None:
        return f"(no particle: rate the {whole} as a whole)"
    return f"- dialogue act: {p.dialogue_act}\n- mention: {p.mention}\n- user feedback: {p.user_feedback}"


def score_messages(unit: Unit, conv: Conversation, instruction: str, judged: str = "conversational recommender systems",
                   reasoning: bool = False) -> tuple[tuple[str, str], ...]:
    """The scoring prompt; ``judged`` names the kind of system (the dataset's wording)."""
    spec = unit.aspect
    common = dict(aspect=spec.name.replace("_", " "), low=spec.low, high=spec.high, instruction=instruction.strip(),
                  judged=judged)
    if reasoning:
        return _reasoning_messages(unit, conv, common)
    common["definition"] = spec.definition
    if spec.level == "turn":
        turn = conv.turn(unit.turn_ind)
        before = [t for t in conv.turns if t.turn_ind < unit.turn_ind][-2:]
        return render("score_turn.txt", history=history_text(before), turn=turn.utterance.strip(),
                      next_user=next_user_turn(conv, turn) or "(the conversation ended here)",
                      particle=particle_text(unit.particle, "assistant turn"), **common)
    heading = "Particle to rate:"
    if unit.particle is not None:  # which turn it came from (the dialogue is shown without turn numbers)
        k = [t.turn_ind for t in conv.assistant_turns()].index(unit.turn_ind) + 1
        heading = f"Particle to rate (from the assistant's {ordinal(k)} turn):"
    return render("score_dialogue.txt", dialogue=_transcript(conv, history_text), particle_heading=heading,
                  particle=particle_text(unit.particle, "dialogue"), **common)


def ordinal(k: int) -> str:
    """1st, 2nd, 3rd, 4th, ..., 11th, 12th, 13th, 21st, ..."""
    suffix = "th" if 10 <= k % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(k % 10, "th")
    return f"{k}{suffix}"


def _reasoning_messages(unit: Unit, conv: Conversation, common: dict) -> tuple[tuple[str, str], ...]:
    spec = unit.aspect
    whole = unit.particle is None
    common.update(definition=spec.definition if whole else spec.of_particle,
                  grades=spec.grade_lines() or f"- an integer from {spec.low} (worst) to {spec.high} (best)")
    if spec.level == "turn":
        history, turn, nxt = _per_conv(conv, ("turn context", unit.turn_ind),
                                       lambda: _turn_context(conv, unit.turn_ind))
        target = ("Target: the whole current assistant turn." if whole else
                  f"Target particle (from the current assistant turn):\n{particle_text(unit.particle, '')}")
        return render("score_turn_reasoning.txt", history=history, turn=turn, next_user=nxt, target=target, **common)
    target = ("Target: the whole dialogue." if whole else
              f"Target particle (from assistant turn {unit.turn_ind}):\n{particle_text(unit.particle, '')}")
    return render("score_dialogue_reasoning.txt", dialogue=_transcript(conv, numbered), target=target, **common)


def _turn_context(conv: Conversation, turn_ind: int) -> tuple[str, str, str]:
    """(the two turns before, the turn, the user's response) as the reasoning prompt shows them."""
    turn = conv.turn(turn_ind)
    before = [t for t in conv.turns if t.turn_ind < turn_ind][-2:]
    nxt = next_user_turn(conv, turn)
    return numbered(before), numbered([turn]), one_line(nxt) if nxt else "N/A"


_PER_CONV: dict[tuple, tuple[Conversation, object]] = {}


def _per_conv(conv: Conversation, key: tuple, make: Callable[[], object]):
    """``make()``, remembered for the last conversations: the requests of a conversation follow each other and
    show the same text (the dialogue, a turn's context) with every particle and instruction."""
    k = (id(conv), *key)
    got = _PER_CONV.get(k)
    if got is None or got[0] is not conv:
        if len(_PER_CONV) > 256:
            _PER_CONV.clear()
        got = _PER_CONV[k] = (conv, make())
    return got[1]


def _transcript(conv: Conversation, how) -> str:
    """``how(conv.turns)`` (the whole dialogue), remembered per conversation."""
    return _per_conv(conv, ("transcript", id(how)), lambda: how(conv.turns))

