"""Methods turn conversations into predictions. Each method is selected by ``cfg.method.name``."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import pandas as pd
from omegaconf import DictConfig

from face.aggregate import Predictions
from face.data.schema import Conversation


@dataclass
class MethodOutput:
    predictions: Predictions
    particle_scores: pd.DataFrame | None = None  # long table, SCORE_COLUMNS (+ method-specific columns)
    label: str = ""  # what produced the numbers: LLM, samples, data — printed on every table and figure
    artifacts: list[Path] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)
    dry_run: bool = False  # nothing was sent; predictions are empty


METHODS = ("face_released", "face")


def _check(cfg: DictConfig) -> str:
    if cfg.method.name not in METHODS:
        raise ValueError(f"unknown method {cfg.method.name!r}; choose one of {', '.join(METHODS)}")
    return cfg.method.name


def required_files(cfg: DictConfig, aspects: Sequence[str]) -> list[str]:
    """Data files (manifest names) the configured method reads, so they can be fetched up front."""
    if _check(cfg) == "face_released":
        from face.methods.released import required_files as files
    else:
        from face.methods.live import required_files as files
    return files(cfg, aspects)


def predict(cfg: DictConfig, convs: Sequence[Conversation], aspects: Sequence[str], tracker=None) -> MethodOutput:
    if _check(cfg) == "face_released":
        from face.methods.released import predict as run
    else:
        from face.methods.live import predict as run  # the live LLM pipeline (face and its ablations)
    return run(cfg, convs, aspects, tracker)
