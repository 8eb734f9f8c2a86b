"""Method ``face_released``: the authors' per-particle scores, aggregated by our code (no LLM)."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import pandas as pd
from omegaconf import DictConfig

from face.aggregate import aggregate
from face.data import released_instructions_file, released_scores_file
from face.data.released import load_instructions, load_particle_scores
from face.data.schema import Conversation
from face.methods import MethodOutput

LABEL = ("FACE (ours, released scores): the authors' per-particle scores — their LLM, 5 samples per "
         "particle × instruction, 16 instructions — aggregated and meta-evaluated by this project")


def load_scores(data_dir: str | Path, aspects: Sequence[str], conv_ids: set[str] | None = None) -> pd.DataFrame:
    frames = [load_particle_scores(Path(data_dir) / released_scores_file(a), a) for a in aspects]
    scores = pd.concat(frames, ignore_index=True)
    if conv_ids is not None:
        scores = scores[scores["conv_id"].isin(conv_ids)]
    return scores


def required_files(cfg: DictConfig, aspects: Sequence[str]) -> list[str]:
    return [f(a) for a in aspects for f in (released_scores_file, released_instructions_file)]


def predict(cfg: DictConfig, convs: Sequence[Conversation], aspects: Sequence[str], tracker=None) -> MethodOutput:
    m = cfg.method
    scores = load_scores(cfg.paths.data_dir, aspects, {c.conv_id for c in convs})
    instructions = list(m.instructions) if m.get("instructions") else None
    preds = aggregate(scores, m.instruction_agg, m.particle_agg, instructions)
    if tracker is not None:
        for a in aspects:
            tracker.register_instructions(a, load_instructions(Path(cfg.paths.data_dir) / released_instructions_file(a)),
                                          "released_top16")
    return MethodOutput(preds, scores, LABEL)
