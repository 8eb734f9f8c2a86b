"""Sweep report: read the runs of an ``optimize_instructions`` sweep back from MLflow (``mlflow.search_runs``)
and write a table and plots of held-out correlation and cost against each swept parameter.

    python scripts/sweep_report.py --tracking-uri sqlite:///mlflow.db [--sweep latest|SWEEP_DIR] [--out DIR]

A sweep = the runs that share the ``sweep_dir`` tag (one Hydra multirun); ``latest`` takes the most recent.
Swept parameters are the ``optimizer.*`` params that differ between its runs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from face.files import atomic_path, atomic_write_text

HELDOUT = "metrics.heldout.mean.test_final_spearman"
INITIAL = "metrics.heldout.mean.test_initial_spearman"
COST = "metrics.optimizer.cost_usd"
CALLS = "metrics.optimizer.llm_calls"
PARAMS = ("alpha", "beta", "beam", "ucb_c", "rounds", "pulls", "pull_minibatch", "expand_minibatch", "top_k")


def sweep_runs(tracking_uri: str, experiment: str = "optimize_instructions", sweep: str = "latest") -> pd.DataFrame:
    import mlflow

    mlflow.set_tracking_uri(tracking_uri)
    runs = mlflow.search_runs(experiment_names=[experiment], filter_string="tags.sweep_dir != ''",
                              output_format="pandas", max_results=10_000)
    if runs.empty or "tags.sweep_dir" not in runs:
        raise ValueError(f"no sweep runs in MLflow experiment {experiment!r} of {tracking_uri}")
    runs = runs[runs["tags.sweep_dir"].notna()]
    if sweep == "latest":
        sweep = runs.sort_values("start_time")["tags.sweep_dir"].iloc[-1]
    runs = runs[runs["tags.sweep_dir"] == sweep]
    if runs.empty:
        raise ValueError(f"no runs with tag sweep_dir={sweep!r} in experiment {experiment!r}")
    return runs.assign(sweep=sweep)


def summarize(runs: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    cols = {f"params.optimizer.{p}": p for p in PARAMS if f"params.optimizer.{p}" in runs}
    table = runs[["run_id", "status", *cols]].rename(columns=cols)
    for p in cols.values():
        table[p] = pd.to_numeric(table[p], errors="coerce")
    for col, name in ((HELDOUT, "heldout_final"), (INITIAL, "heldout_initial"), (COST, "cost_usd"),
                      (CALLS, "llm_calls")):
        table[name] = runs[col].to_numpy() if col in runs else float("nan")
    swept = [p for p in cols.values() if table[p].nunique(dropna=True) > 1]
    return table.sort_values(swept or ["run_id"]).reset_index(drop=True), swept


def plot(table: pd.DataFrame, swept: list[str], path: Path, title: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    n = max(len(swept), 1)
    fig, axes = plt.subplots(2, n, figsize=(3.2 * n, 5), squeeze=False)
    for j, p in enumerate(swept):
        g = table.groupby(p)[["heldout_final", "heldout_initial", "cost_usd", "llm_calls"]].mean().reset_index()
        axes[0][j].plot(g[p], g["heldout_final"], "o-", label="final set")
        axes[0][j].plot(g[p], g["heldout_initial"], "s--", label="initial")
        axes[0][j].set_xlabel(p)
        axes[0][j].set_ylabel("held-out Spearman (mean over aspects)", fontsize=7)
        axes[1][j].plot(g[p], g["llm_calls"], "o-", color="C2")
        axes[1][j].set_xlabel(p)
        axes[1][j].set_ylabel("LLM calls (cost: see table)", fontsize=7)
    axes[0][0].legend(fontsize=7)
    fig.suptitle(title[:150], fontsize=7)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=110)
    plt.close(fig)
    return path


def report(tracking_uri: str, out: Path, experiment: str = "optimize_instructions", sweep: str = "latest") -> dict:
    from face.report.tables import to_markdown

    runs = sweep_runs(tracking_uri, experiment, sweep)
    table, swept = summarize(runs)
    out.mkdir(parents=True, exist_ok=True)
    sweep_name = Path(str(runs["sweep"].iloc[0])).name  # the sweep directory's name: no absolute path in a title
    title = f"Sweep {sweep_name} ({len(table)} runs; swept: {', '.join(swept) or 'nothing'})"
    with atomic_path(out / "sweep.csv") as tmp:
        table.to_csv(tmp, index=False)
    atomic_write_text(out / "sweep.md", f"{title}\n\n{to_markdown(table, 4)}\n")
    fig = plot(table, swept, out / "sweep.png", title)
    print(f"\n== {title}\n{to_markdown(table, 4)}\n", flush=True)
    return {"table": table, "swept": swept, "paths": [out / "sweep.csv", out / "sweep.md", fig]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tracking-uri", default="sqlite:///mlflow.db")
    ap.add_argument("--experiment", default="optimize_instructions")
    ap.add_argument("--sweep", default="latest", help="the sweep_dir tag of the sweep, or latest")
    ap.add_argument("--out", default="results/sweep_report", type=Path)
    a = ap.parse_args(argv)
    try:
        report(a.tracking_uri, a.out, a.experiment, a.sweep)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0
