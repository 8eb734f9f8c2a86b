"""Typed records for everything the project reads: conversations, particles, instructions, votes."""

from __future__ import annotations

from dataclasses import dataclass, field

USER, ASSISTANT = "USER", "ASST"
DIALOGUE_ACTS = ("greeting", "preference elicitation", "recommendation", "goodbye", "others")
NO_FEEDBACK = "NO_FEEDBACK_PROVIDED"


@dataclass(frozen=True)
class Turn:
    turn_ind: int
    role: str  # USER or ASST
    utterance: str
    labels: dict[str, float] = field(default_factory=dict)  # turn-level human labels (assistant turns)


@dataclass(frozen=True)
class Conversation:
    """A conversation as a dataset delivers it. The dataset says which system produced it, which split it
    belongs to and which assistant turns are evaluated (``None``: all of them)."""

    conv_id: str
    turns: tuple[Turn, ...]
    labels: dict[str, float] = field(default_factory=dict)  # dialogue-level human labels
    system: str = ""  # the system under evaluation (a CRS like ``kbrd_redial``, a USR response generator)
    split: str = "all"  # the dataset's split (CRSArena-Eval: ``redial`` / ``opendialkg``)
    evaluated: tuple[int, ...] | None = None  # turn_ind of the evaluated assistant turns; None = all
    meta: dict = field(default_factory=dict, compare=False)  # dataset extras (e.g. USR's fact and reference)

    def assistant_turns(self) -> list[Turn]:
        return [t for t in self.turns if t.role == ASSISTANT]

    def evaluated_turns(self) -> list[Turn]:
        """The assistant turns that get scored (and, with labels, meta-evaluated)."""
        turns = self.assistant_turns()
        return turns if self.evaluated is None else [t for t in turns if t.turn_ind in self.evaluated]

    def turn(self, turn_ind: int) -> Turn:
        for t in self.turns:
            if t.turn_ind == turn_ind:
                return t
        raise KeyError(f"{self.conv_id}: no turn {turn_ind}")


@dataclass(frozen=True)
class Particle:
    """One atomic unit of an assistant turn: what it does, what it mentions, how the user reacted."""

    dialogue_act: str
    mention: str
    user_feedback: str = NO_FEEDBACK


@dataclass(frozen=True)
class TurnParticles:
    conv_id: str
    turn_ind: int
    assistant_utterance: str
    particles: tuple[Particle, ...]


@dataclass(frozen=True)
class Instruction:
    """An evaluation instruction (the released ones say "nugget" for particle)."""

    instruction_id: str  # e.g. "itr54"
    text: str
    rank: int | None = None
    source: str = ""  # e.g. "released_top16", "initial", "optimizer"


@dataclass(frozen=True)
class ArenaVote:
    session_id: str
    user_id: str
    crs1: str
    crs2: str
    winner: str | None  # the winning CRS, or None for a tie
    source: str  # "open" | "closed"
