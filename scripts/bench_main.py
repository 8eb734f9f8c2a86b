"""Benchmark: wall time of the main job (reproduce_table2, full data) and of the vectorised bootstrap.

Run after `make setup` with the data available (FACE_DATA_MIRROR or FACE_DATA_DIR):
    .venv/bin/python scripts/bench_main.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from face.metaeval import COEFFICIENTS, bootstrap_ci, cluster_weights, system_correlations  # noqa: E402


def bench_main_job(repeats: int) -> list[float]:
    times = []
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(repeats):
            t = time.perf_counter()
            subprocess.run([sys.executable, "scripts/run.py", f"tracking.tracking_uri=sqlite:///{tmp}/mlflow.db",
                            f"tracking.artifact_location={tmp}/mlruns",
                            f"report.out_dir={tmp}/results", f"hydra.run.dir={tmp}/out"],
                           cwd=ROOT, check=True, capture_output=True)
            times.append(time.perf_counter() - t)
    return times


def bench_bootstrap(n_items: int, n_convs: int, n_boot: int = 1000) -> dict[str, float]:
    rng = np.random.default_rng(0)
    x = rng.integers(0, 3, n_items).astype(float)
    y = x + rng.normal(size=n_items)
    groups = rng.integers(0, n_convs, n_items)
    out = {}
    t = time.perf_counter()
    cluster_weights(groups, n_boot, np.random.default_rng(0))
    out["resampling weights"] = time.perf_counter() - t
    for c in COEFFICIENTS:
        t = time.perf_counter()
        bootstrap_ci(x, y, groups, n_boot, coefficients=[c])
        out[c] = time.perf_counter() - t
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    print(f"machine: {os.cpu_count()} cores; python {sys.version.split()[0]}")
    for label, n, c in [("turn level, ReDial split (1286 turns, 267 conversations)", 1286, 267),
                        ("turn level, pooled (2215 turns, 466 conversations)", 2215, 466),
                        ("dialogue level, ReDial (267 conversations)", 267, 267)]:
        res = bench_bootstrap(n, c)
        print(f"bootstrap, 1000 resamples, {label}: " + ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in res.items()))
    import pandas as pd

    rng = np.random.default_rng(0)
    df = pd.DataFrame({"conv_id": np.arange(467), "system": rng.integers(0, 9, 467).astype(str),
                       "pred": rng.normal(size=467), "human": rng.normal(size=467)})
    t = time.perf_counter()
    system_correlations(df, n_boot=1000)
    print(f"bootstrap, 1000 resamples, system level (9 CRSs, 467 conversations, 3 coefficients): "
          f"{(time.perf_counter() - t) * 1000:.0f} ms")
    times = bench_main_job(args.repeats)
    print(f"main job (python scripts/run.py: reproduce_table2, full data, 1000 bootstrap resamples, MLflow on): "
          f"wall time {min(times):.1f} s best / {np.mean(times):.1f} s mean of {len(times)} runs "
          f"(first run includes MLflow store creation)")


if __name__ == "__main__":
    main()
