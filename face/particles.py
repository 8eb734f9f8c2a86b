"""Decompose each assistant turn into conversation particles (dialogue act, mention, user feedback).

For every assistant turn the LLM is asked for ``k`` samples (JSON, schema-constrained where the
endpoint supports it). Invalid samples are replaced by further samples (up to ``max_extra``).
Plurality vote: keep the valid samples with the most common particle count, then pick the one
whose (act, mention, feedback) tuples occur most often across all valid samples (ties: earliest).
If no sample is valid, the whole turn becomes one particle, flagged ``fallback="whole_turn"``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Sequence

from face.data.schema import DIALOGUE_ACTS, NO_FEEDBACK, USER, Conversation, Particle, Turn, TurnParticles
from face.prompts import render

MAX_MENTION_WORDS = 12

PARTICLE_SOURCES = ("llm", "released")


@dataclass
class ParticlesSpec:
    """How particles are obtained: decomposed by the LLM (k samples, plurality vote) or the released ones."""

    source: str = "llm"  # llm (our decomposition) | released (the authors' particles, CRSArena-Eval only)
    k: int = 20  # decomposition samples per turn (plurality vote)
    max_extra: int = 5  # extra samples drawn to replace invalid ones, per turn
    temperature: float | None = 0.7
    max_tokens: int = 400

    def __post_init__(self) -> None:
        if self.source not in PARTICLE_SOURCES:
            raise ValueError(f"unknown particle source {self.source!r}; choose from {PARTICLE_SOURCES}")
        if self.k < 1:
            raise ValueError(f"method.particles.k must be >= 1, got {self.k}")


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
    after = [t for t in conv.turns if t.turn_ind > turn.turn_ind and t.role == USER]
    return after[0].utterance if after else ""


def history_text(turns: Sequence[Turn]) -> str:
    if not turns:
        return "(no earlier turns)"
    return "\n".join(f"{'User' if t.role == USER else 'Assistant'}: {t.utterance.strip()}" for t in turns)


def decompose_messages(conv: Conversation, turn: Turn, assistant: str = "movie-recommendation assistant"
                       ) -> tuple[tuple[str, str], ...]:
    """The decomposition prompt; ``assistant`` names the kind of assistant (the dataset's wording)."""
    earlier = [t for t in conv.turns if t.turn_ind < turn.turn_ind]
    return render("decompose.txt", assistant=assistant, history=history_text(earlier), turn=turn.utterance.strip(),
                  next_user=next_user_turn(conv, turn) or "(the conversation ended here)")


def _norm(s: str) -> str:
    return " ".join(s.lower().split())


def parse_particles(answer, adapter=None) -> tuple[Particle, ...] | str:
    """Particles of one completion (or text), or the reason it is invalid (``face.llm.adapters``)."""
    from face.llm.adapters import particles_adapter

    got = (adapter or particles_adapter(DIALOGUE_ACTS, MAX_MENTION_WORDS)).parse(answer)
    if isinstance(got, str):
        return got
    return tuple(Particle(p.dialogue_act, p.mention, p.user_feedback or NO_FEEDBACK) for p in got.particles)


def plurality_vote(samples: Sequence[tuple[Particle, ...]]) -> tuple[tuple[Particle, ...], int]:
    """The chosen sample and the number of samples that share its particle count."""
    if not samples:
        raise ValueError("no valid samples to vote on")
    counts = Counter(len(s) for s in samples)
    top = max(counts.values())
    best_len = next(len(s) for s in samples if counts[len(s)] == top)  # earliest among tied counts
    key = lambda p: (p.dialogue_act, _norm(p.mention), _norm(p.user_feedback))  # noqa: E731
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


def decompose(client, convs: Sequence[Conversation], spec: ParticlesSpec, json_schema: bool,
              assistant: str = "movie-recommendation assistant") -> dict[tuple[str, int], Decomposition]:
    """LLM decomposition of every evaluated assistant turn of ``convs`` (see module doc)."""
    k, max_extra = spec.k, spec.max_extra
    from face.llm import ChatRequest
    from face.llm.adapters import particles_adapter

    turns = [(c, t) for c in convs for t in c.evaluated_turns()]
    adapter = particles_adapter(DIALOGUE_ACTS, MAX_MENTION_WORDS)
    valid: dict[int, list[tuple[Particle, ...]]] = {i: [] for i in range(len(turns))}
    drawn = {i: 0 for i in range(len(turns))}
    want = {i: k for i in range(len(turns))}  # total samples to request per turn (cache keeps earlier ones)
    pending = list(range(len(turns)))
    while pending:
        reqs = [ChatRequest(messages=decompose_messages(*turns[i], assistant), n=want[i], temperature=spec.temperature,
                            max_tokens=spec.max_tokens, tag="decompose") for i in pending]
        if json_schema:  # without schema support the prompt's own answer format line is the request
            reqs = [adapter.request(r, native=True) for r in reqs]
        results = client.run_batch(reqs, desc=f"decomposing {len(pending)} turns")
        nxt = []
        for i, res in zip(pending, results):
            new = res.samples[drawn[i]:]
            drawn[i] = len(res.samples)
            for s in new:
                if getattr(s, "dry_run", False):
                    continue
                parsed = parse_particles(s, adapter)
                if not isinstance(parsed, str):
                    valid[i].append(parsed)
            missing = k - len(valid[i])
            if missing > 0 and drawn[i] - k < max_extra and not any(getattr(s, "dry_run", False) for s in new):
                want[i] = drawn[i] + min(missing, max_extra - (drawn[i] - k))
                nxt.append(i)
        pending = nxt
    out = {}
    for i, (conv, turn) in enumerate(turns):
        if valid[i]:
            chosen, votes = plurality_vote(valid[i])
            out[(conv.conv_id, turn.turn_ind)] = Decomposition(conv.conv_id, turn.turn_ind, chosen, "llm",
                                                               len(valid[i]), drawn[i], votes)
        else:
            out[(conv.conv_id, turn.turn_ind)] = Decomposition(conv.conv_id, turn.turn_ind,
                                                               (whole_turn(conv, turn),), "whole_turn", 0,
                                                               drawn[i], 0, "no_valid_sample")
    return out
