"""Decompose each assistant turn into conversation particles (dialogue act, mention, user feedback).

For every assistant turn the LLM is asked for ``k`` samples. With ``reasoning`` (the default, the
authors' prompt) it first reasons in four steps (explain the context, count the particles, discuss the
user's feedback on each, output JSON) and the last JSON object of the reply is the answer. Without
reasoning it answers JSON only, schema-constrained where the endpoint supports it. Either way an empty
list is a valid answer, as in the authors' validator (a turn with no particle: 15 released turns have
none), and a particle's user feedback is kept as answered (missing: ``NO_FEEDBACK_PROVIDED``).
Invalid samples are replaced by new draws until ``k`` are valid (``method.particles.draws``: at most ``rounds``
rounds, the authors: 100; ``max_extra`` caps the extra draws per turn), by the LLM layer's one draw-until-valid
loop (face/llm/validating.py): samples 0..k-1, then the next fresh indices for the missing ones.
Plurality vote: keep the valid samples with the most common particle count, then pick the one
whose (act, mention, feedback) tuples occur most often across all valid samples (ties: earliest).
If no sample is valid, the whole turn becomes one particle, flagged ``fallback="no_valid_sample"``.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, replace
from typing import Annotated, Any, Collection, Sequence

from pydantic import AfterValidator, Field

from face.data.schema import DIALOGUE_ACTS, NO_FEEDBACK, USER, Conversation, Particle, Turn, TurnParticles
from face.llm import ChatRequest
from face.llm.adapters import last_json_object, particles_adapter
from face.llm.base import Draws
from face.llm.sizes import Samples
from face.prompts import render
from face.settings import Number, nested, settings

MAX_MENTION_WORDS = 12

PARTICLE_SOURCES = ("llm", "released")


def registered(names: Collection[str]) -> AfterValidator:
    """A setting that names a built-in part (one of ``names``) or a class of your own as module.Class."""

    def check(v: str) -> str:
        if v not in names and "." not in v:
            raise ValueError(f"must be one of {', '.join(map(repr, names))} or a class as module.Class, got {v!r}")
        return v

    return AfterValidator(check)


@settings("method.particles", conf="method/face.yaml:particles")
class ParticlesSpec:
    """How particles are obtained: decomposed by the LLM (k samples, plurality vote) or the released ones."""

    # llm (our decomposition) | released (the authors' particles, CRSArena only) | module.Class (pipeline/parts.py)
    source: Annotated[str, registered(PARTICLE_SOURCES)]
    k: Samples  # decomposition samples per turn (plurality vote)
    reasoning: bool  # four reasoning steps before the JSON list (the authors) | JSON only (ours)
    draws: Annotated[Draws, nested(Draws)]
    temperature: Number | None = Field(ge=0, le=2)  # the authors: 0.6
    max_tokens: int = Field(ge=1)  # the authors: 2048 (reasoning); 400 is plenty without it


@dataclass(frozen=True)
class Decomposition:
    conv_id: str
    turn_ind: int
    particles: tuple[Particle, ...]
    source: str  # "llm" | "released" | "whole_turn"
    n_valid: int = 0  # valid samples
    n_samples: int = 0  # samples drawn (valid + invalid)
    votes: int = 0  # valid samples with the chosen particle count
    fallback: str | None = None


def next_user_turn(conv: Conversation, turn: Turn) -> str:
    return next((t.utterance for t in conv.turns if t.turn_ind > turn.turn_ind and t.role == USER), "")


def one_line(text: str) -> str:
    """Whitespace-normalised text (the authors' clean-up; also keeps a turn on its own line)."""
    return " ".join(text.split())


def numbered(turns: Sequence[Turn]) -> str:
    """``Turn N - ROLE: text``, one line per turn."""
    return "\n".join(f"Turn {t.turn_ind} - {t.role}: {one_line(t.utterance)}" for t in turns) or "(no earlier turns)"


def history_text(turns: Sequence[Turn]) -> str:
    lines = (f"{'User' if t.role == USER else 'Assistant'}: {t.utterance.strip()}" for t in turns)
    return "\n".join(lines) or "(no earlier turns)"


def decompose_messages(conv: Conversation, turn: Turn, assistant: str = "movie-recommendation assistant",
                       reasoning: bool = False) -> tuple[tuple[str, str], ...]:
    """The decomposition prompt; ``assistant`` names the kind of assistant (the dataset's wording)."""
    earlier = [t for t in conv.turns if t.turn_ind < turn.turn_ind]
    if reasoning:
        nxt = next_user_turn(conv, turn)
        return render("decompose_reasoning.txt", assistant=assistant, history=numbered(earlier), turn=numbered([turn]),
                      next_user=one_line(nxt) if nxt else "(the conversation ended here)")
    return render("decompose.txt", assistant=assistant, history=history_text(earlier), turn=turn.utterance.strip(),
                  next_user=next_user_turn(conv, turn) or "(the conversation ended here)")


def plurality_vote(samples: Sequence[tuple[Particle, ...]]) -> tuple[tuple[Particle, ...], int]:
    """The chosen sample and the number of samples that share its particle count (a ValueError for none)."""
    counts = Counter(len(s) for s in samples)
    best_len = max(counts, key=counts.__getitem__)  # the earliest among tied counts (a Counter keeps first-seen order)
    key = lambda p: (p.dialogue_act, one_line(p.mention.lower()), one_line(p.user_feedback.lower()))  # noqa: E731
    freq = Counter(key(p) for s in samples for p in s)
    candidates = [s for s in samples if len(s) == best_len]
    best = max(candidates, key=lambda s: sum(freq[key(p)] for p in s))  # max keeps the earliest on ties
    return best, counts[best_len]


def whole_turn(conv: Conversation, turn: Turn) -> Particle:
    """The whole assistant turn as one particle (fallback, and the unit of the no-particles ablation)."""
    return Particle("others", turn.utterance.strip(), next_user_turn(conv, turn) or NO_FEEDBACK)


def from_released(rows: Sequence[TurnParticles]) -> dict[tuple[str, int], Decomposition]:
    return {(r.conv_id, r.turn_ind): Decomposition(r.conv_id, r.turn_ind, r.particles, "released")
            for r in rows}


class ParticlesAnswer:
    """The answer type of a decomposition request: its format (a JSON schema where the endpoint takes one and the
    prompt asks for the list alone) and its reading (``parse``), within the spec's draws."""

    def __init__(self, reasoning: bool):
        self.reasoning = reasoning
        self.json = particles_adapter(DIALOGUE_ACTS, MAX_MENTION_WORDS)

    def parse(self, answer: Any) -> tuple[Particle, ...] | str:
        """Particles of one completion (or text), or the reason it is invalid (``face.llm.adapters``). With
        ``reasoning`` the answer is the last JSON object of the reply and may list no particle."""
        if self.reasoning:
            if getattr(answer, "finish_reason", "") == "length":
                return "truncated (finish_reason=length)"
            found = last_json_object(getattr(answer, "text", answer))
            if found is None:
                return "no JSON object in the reply"
            answer = json.dumps(found[0])
        got = self.json.parse(answer)
        if isinstance(got, str):
            return got
        # feedback as answered (an empty string stays empty, as in the authors' particles); missing: NO_FEEDBACK
        return tuple(Particle(p.dialogue_act, p.mention, NO_FEEDBACK if p.user_feedback is None else p.user_feedback)
                     for p in got.particles)

    def request(self, req: Any, json_schema: bool, draws: Draws) -> Any:
        if json_schema and not self.reasoning:  # a schema would rule the reasoning out
            req = self.json.request(req, native=True)
        return replace(req, adapter=self, draws=draws)


def decompose(client: Any, convs: Sequence[Conversation], spec: ParticlesSpec, json_schema: bool,
              assistant: str = "movie-recommendation assistant") -> dict[tuple[str, int], Decomposition]:
    """LLM decomposition of every evaluated assistant turn of ``convs`` (see module doc)."""
    turns = [(c, t) for c in convs for t in c.evaluated_turns()]
    answer = ParticlesAnswer(spec.reasoning)

    def request(turn: tuple[Conversation, Turn]) -> Any:  # rendered when the batch driver takes the turn
        c, t = turn
        return answer.request(ChatRequest(messages=decompose_messages(c, t, assistant, spec.reasoning), n=spec.k,
                                          temperature=spec.temperature, max_tokens=spec.max_tokens, tag="decompose"),
                              json_schema, spec.draws)

    out: dict[tuple[str, int], Decomposition] = {}

    def vote(turn: tuple[Conversation, Turn], res: Any) -> None:  # each turn voted as it comes, its draws let go
        out[(turn[0].conv_id, turn[1].turn_ind)] = voted(turn[0], turn[1], res)

    client.run_stream(turns, request, vote, desc=f"decomposing {len(turns)} turns", total=len(turns))
    return out


def voted(conv: Conversation, turn: Turn, res: Any) -> Decomposition:
    """The decomposition of one turn from every draw of its request: the plurality vote of its valid answers, or
    the whole turn as one particle when none is valid."""
    valid = [s.value for s in res.answers]
    if valid:
        chosen, votes = plurality_vote(valid)
        return Decomposition(conv.conv_id, turn.turn_ind, chosen, "llm", len(valid), len(res.samples), votes)
    return Decomposition(conv.conv_id, turn.turn_ind, (whole_turn(conv, turn),), "whole_turn", 0, len(res.samples), 0,
                         "no_valid_sample")
