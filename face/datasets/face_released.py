"""The FACE authors' released artifacts: per-particle scores, particles, top-16 instructions (their published Table 2
is read by ``face.datasets.crsarena.load_published_table``)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from face.data.io import as_int, check_type, field, read_json, read_jsonl
from face.data.schema import DIALOGUE_ACTS, Instruction, Particle, TurnParticles
from face.datasets.crsarena import ASPECTS
from face.errors import DataError

_NUMBER_TYPES = frozenset({float, int})
SCORE_COLUMNS = ["aspect", "conv_id", "turn_ind", "particle_ind", "instruction_id", "score"]


def load_particle_scores(path: str | Path, aspect: str) -> pd.DataFrame:
    """Released per-particle scores of one aspect as a long table (one row per particle × instruction).

    Columns: ``SCORE_COLUMNS``. Each score is the mean of 5 sampled LLM judgements (authors' setting).
    """
    path = Path(path)
    if aspect not in ASPECTS:
        raise DataError(path, f"unknown aspect {aspect!r}; known: {', '.join(ASPECTS)}")
    rows: list[tuple] = []
    for lineno, obj in read_jsonl(path):
        rec = f"line {lineno}"
        conv_id = field(obj, "conv_id", str, path, rec)
        rec = f"line {lineno}, conversation {conv_id!r}"
        for t_key, turn in field(obj, "turns", dict, path, rec).items():
            t_rec = f"{rec}, turn {t_key}"
            turn_ind = as_int(t_key, path, t_rec)
            for p_key, scores in field(turn, "particles", dict, path, t_rec).items():
                p_rec = f"{t_rec}, particle {p_key}"
                particle_ind = as_int(p_key, path, p_rec)
                check_type(scores, dict, path, p_rec)
                if not _NUMBER_TYPES.issuperset(map(type, scores.values())):  # slow path only to name the culprit
                    for instr, score in scores.items():
                        check_type(score, float, path, f"{p_rec}, instruction {instr!r}")
                rows += [(conv_id, turn_ind, particle_ind, i, s) for i, s in scores.items()]
    if not rows:
        raise DataError(path, "no scores found")
    df = pd.DataFrame(rows, columns=SCORE_COLUMNS[1:]).astype({"score": float, "conv_id": "category",
                                                               "instruction_id": "category"})
    df.insert(0, "aspect", aspect)
    return df


def load_released_particles(path: str | Path) -> list[TurnParticles]:
    """The particles behind the released scores: one record per assistant turn."""
    path = Path(path)
    out = []
    for lineno, obj in read_jsonl(path):
        rec = f"line {lineno}"
        conv_id = field(obj, "conv_id", str, path, rec)
        turn_ind = field(obj, "turn_ind", int, path, rec)
        rec = f"line {lineno}, conversation {conv_id!r}, turn {turn_ind}"
        particles = []
        for i, p in enumerate(field(obj, "particles", list, path, rec)):
            p_rec = f"{rec}, particle {i}"
            act = field(p, "dialogue_act", str, path, p_rec)
            if act not in DIALOGUE_ACTS:
                raise DataError(path, f"unknown dialogue act {act!r} (expected one of {', '.join(DIALOGUE_ACTS)})",
                                p_rec)
            particles.append(Particle(act, field(p, "particle", str, path, p_rec),
                                      field(p, "user_feedback", str, path, p_rec)))
        out.append(TurnParticles(conv_id, turn_ind, field(obj, "assistant_utterance", str, path, rec),
                                 tuple(particles)))
    return out


def load_instructions(path: str | Path, source: str = "released_top16") -> list[Instruction]:
    """Released optimized instructions of one aspect, ordered by rank; ids match the score files (``itr54``)."""
    path = Path(path)
    out = []
    for i, obj in enumerate(check_type(read_json(path), list, path, "top level")):
        rec = f"index {i}"
        iteration = field(obj, "iteration", int, path, rec)
        out.append(Instruction(f"itr{iteration}", field(obj, "text", str, path, rec),
                               field(obj, "rank", int, path, rec), source))
    if len({x.instruction_id for x in out}) != len(out):
        raise DataError(path, "duplicate instruction iteration ids")
    return sorted(out, key=lambda x: x.rank or 0)
