"""Shared steps of the experiments: data preparation, evaluation, run files, reporting, logging."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import pandas as pd
from omegaconf import DictConfig

from face.aspects import canonical_aspect
from face.data import CRSARENA_EVAL, PUBLISHED_TABLE, ensure_data
from face.data.crsarena import load_conversations, select
from face.data.fetch import data_checksums
from face.data.released import load_published_table
from face.data.schema import Conversation
from face.metaeval import meta_evaluate
from face.runfile import write_run_file
from face.tracking import Tracker

log = logging.getLogger(__name__)


@dataclass
class Context:
    convs: list[Conversation]
    aspects: list[str]
    data_dir: Path
    out_dir: Path  # tables and figures
    run_dir: Path  # run files, per-particle files (Hydra output dir)
    subset: str  # human-readable description of the data used
    has_labels: bool = True  # False for user conversations without human labels: predict only


def is_subset(cfg: DictConfig) -> bool:
    d = cfg.dataset
    return any(d.get(k) for k in ("limit", "systems", "splits", "file"))


def prepare(cfg: DictConfig, files: Sequence[str] = (), tracker: Tracker | None = None) -> Context:
    """Fetch/verify the data, load CRSArena-Eval, select the configured subset, resolve output dirs."""
    data_dir = Path(cfg.paths.data_dir)
    needed = [CRSARENA_EVAL, PUBLISHED_TABLE, *files]
    ensure_data(data_dir, needed, cfg.paths.get("data_mirror"), cfg.dataset.get("download", True))
    if tracker is not None:
        tracker.set_tags({f"data_sha256.{k}": v for k, v in data_checksums(needed).items()})
    d = cfg.dataset
    if d.get("file"):  # the user's own conversations, CRSArena-Eval format; human labels optional
        source = Path(d.file).name
        all_convs = load_conversations(Path(d.file), require_labels=False)
    else:
        source = "CRSArena-Eval"
        all_convs = load_conversations(data_dir / CRSARENA_EVAL)
    convs = select(all_convs, list(d.systems) if d.get("systems") else None,
                   list(d.splits) if d.get("splits") else None, d.get("limit"))
    if not convs:
        raise ValueError(f"the dataset selection (limit={d.get('limit')}, systems={d.get('systems')}, "
                         f"splits={d.get('splits')}) matches no conversation")
    aspects = [canonical_aspect(a) for a in cfg.aspects]
    run_dir = Path(cfg.paths.output_dir)
    if cfg.report.get("out_dir"):
        out_dir = Path(cfg.report.out_dir)
    elif is_subset(cfg):
        out_dir = run_dir / "results"  # never overwrite the committed full-data results with a subset
    else:
        out_dir = Path(cfg.paths.results_dir) / cfg.task_name
    n_turns = sum(len(c.assistant_turns()) for c in convs)
    subset = (f"{source}, {len(convs)} of {len(all_convs)} conversations, {n_turns} assistant turns"
              + (" (subset)" if is_subset(cfg) else ""))
    has_labels = any(c.labels or any(t.labels for t in c.turns) for c in convs)
    log.info("%s; results -> %s", subset, out_dir)
    return Context(convs, aspects, data_dir, out_dir, run_dir, subset, has_labels)


def released_scores(cfg: DictConfig, tracker: Tracker) -> tuple[Context, pd.DataFrame]:
    """Context and the released per-particle scores, for the experiments that re-aggregate them."""
    from face.methods.released import load_scores, required_files

    ctx = prepare(cfg, required_files(cfg, cfg.aspects), tracker)
    return ctx, load_scores(ctx.data_dir, ctx.aspects, {c.conv_id for c in ctx.convs})


def require_released(cfg: DictConfig, why: str) -> None:
    if cfg.method.name != "face_released":
        raise ValueError(f"{cfg.task_name} {why}: use method=face_released")


def published_table(ctx: Context) -> pd.DataFrame:
    return load_published_table(ctx.data_dir / PUBLISHED_TABLE)


def evaluate(cfg: DictConfig, preds, ctx: Context, levels=("turn", "dialogue", "system")) -> pd.DataFrame:
    m = cfg.metaeval
    return meta_evaluate(preds, ctx.convs, ctx.aspects, list(m.splits), levels, m.n_boot, cfg.seed, m.confidence)


def save_run(preds, ctx: Context, tracker: Tracker, name: str = "run_file.json") -> Path:
    path = write_run_file(preds, ctx.run_dir / name)
    tracker.log_artifacts([path], "run")
    return path
