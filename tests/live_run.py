"""Run a live experiment in-process, for the tests that compare one run with another (fault injection, budgets)."""

from __future__ import annotations

import json
from pathlib import Path

import face.runner


def run_live(cfg_factory, out: Path, overrides: list[str], tracking: bool = False) -> tuple[list, dict]:
    """Run a live experiment in-process with its outputs and cache in ``out``: (its run file, the usage totals of
    its llm_usage.json)."""
    cfg = cfg_factory(*overrides, f"paths.output_dir={out}", f"paths.cache_dir={out / 'cache'}", tracking=tracking)
    face.runner.run(cfg)
    return json.loads((out / "run_file.json").read_text()), json.loads((out / "llm_usage.json").read_text())["totals"]
