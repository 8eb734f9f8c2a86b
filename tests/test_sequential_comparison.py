"""experiment=sequential_comparison (the sequential face compare measured on CRSArena-Eval's released judgements)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import face.runner


@pytest.mark.slow
def test_sequential_comparison_small(cfg_factory):
    # 3 systems (3 pairs × 7 aspects), 20 orders, 20 halvings: the tables' shapes and what must hold on any data
    cfg = cfg_factory("experiment=sequential_comparison", "dataset.systems=[kbrd_redial,chatgpt_redial,barcor_redial]",
                      "sequential.orders=20", "sequential.calibration_splits=20", "sequential.fixed_boot=2000",
                      "report.out_dir=${paths.output_dir}/res", tracking=False)
    out = face.runner.run(cfg).experiment
    cells = out.tables["cells"].frame
    labels = ["eb", "betting", "asymptotic", "asymptotic, paired by order"]
    assert list(dict.fromkeys(cells["method"])) == labels and len(cells) == 4 * 3 * 7
    assert ((cells["share_mean"] > 0) & (cells["share_mean"] <= 1)).all()
    assert (cells[["better", "worse", "no_diff", "undecided"]].sum(axis=1).round(9) == 1).all()
    # a direction declared against the fixed-n verdict on all conversations would be an error of either
    assert (cells["agree_fixed"].dropna() >= 0.9).all()
    summary = out.tables["summary"].frame
    assert set(summary[summary["aspect"] == "all aspects"]["method"]) == set(labels)
    cal = out.tables["calibration"].frame
    family = cal[cal["aspect"] == "any aspect (family)"]
    assert (family["sequences"] == 3 * 20).all() and (family["error"] <= 0.2).all()
    res = Path(cfg.paths.output_dir) / "res"
    for name in ("summary", "cells", "calibration"):
        assert (res / f"{name}.md").exists() and (res / f"{name}.csv").exists()
    assert (res / "figures" / "saving_per_aspect.png").exists()
    # MLflow takes metric names of alphanumerics, _ - . space : / only (the run failed on "asymptotic, paired by order")
    assert out.metrics and all(re.fullmatch(r"[\w\-. :/]+", k) for k in out.metrics), sorted(out.metrics)
