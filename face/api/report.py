"""The diagnostics report of a finished run directory: ``face report DIR``, and the last step of a run kept in
``out`` / ``--out`` (so that ``face report`` rebuilds exactly the report the run wrote)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from face.data.schema import Particle

REPORT_INPUTS = ("conversations.json", "particle_scores.jsonl", "run_file.json")  # particles.jsonl: optional


def build_report(run_dir: Path) -> Path:
    """report.html + tables from a finished run directory (no LLM). Every input is read through the checking
    readers: a missing, empty, truncated or hand-broken file is one DataError naming it (and its line)."""
    from face.datasets.crsarena import load_conversations
    from face.datasets.face_released import load_released_particles
    from face.errors import DataError
    from face.pipeline.records import read_score_file
    from face.report import diagnostic_report as diagnostics
    from face.runfile import read_run_file

    if not run_dir.is_dir():
        raise DataError(run_dir, "not a directory (the --out directory of a finished `face evaluate`)")
    for name in REPORT_INPUTS:
        if not (run_dir / name).exists():
            raise DataError(run_dir / name, "missing: not the directory of a finished `face evaluate` run")
    convs = load_conversations(run_dir / "conversations.json", require_labels=False, allow_empty_utterances=False)
    scores = read_score_file(run_dir / "particle_scores.jsonl")
    particles: dict[tuple[str, int], Sequence[Particle]] = {}
    if (run_dir / "particles.jsonl").exists():
        particles = {(t.conv_id, t.turn_ind): t.particles
                     for t in load_released_particles(run_dir / "particles.jsonl")}
    preds = read_run_file(run_dir / "run_file.json")
    settings = diagnostics.read_run_settings(run_dir / "run_settings.json")
    return diagnostics.write_report(run_dir / "report.html", run_dir / "report_tables", run_dir.name, convs,
                                    scores, particles, preds, settings)
