"""Sweeps in MLflow: a Hydra multirun is one parent run with one child run per job (as MLflow's own
hyperparameter-tuning examples do), and its report is read back from MLflow (``search_runs`` of the parent's
children): a table of every job's headline ``summary.*`` metrics, their mean +- sd over repetitions (jobs that
differ only in a swept ``seed``), a plot against each swept setting, the LLM named in the title.

``SweepRuns`` (a Hydra callback, ``conf/config.yaml``) creates the parent before the first job and writes the
report into the sweep directory (and onto the parent run) after the last one. By hand, for any sweep:

    python scripts/sweep_report.py --tracking-uri sqlite:///mlflow.db [--experiment NAME] [--sweep latest|SWEEP_DIR]
"""

from __future__ import annotations

import argparse
import logging
import math
import sys
from pathlib import Path

import pandas as pd

from face.files import atomic_path, atomic_write_text
from face.tracking import headline

log = logging.getLogger(__name__)

# a few cost columns shown beside the summary metrics when the jobs logged them
EXTRA = {"metrics.optimizer.llm_calls": "llm_calls", "metrics.optimizer.cost_usd": "cost_usd"}


# ---------------------------------------------------------------- reading a sweep back
def find_parent(tracking_uri: str, experiment: str, sweep: str = "latest"):
    """The parent run of a sweep (``sweep`` = its sweep directory, or ``latest``). ValueError when there is none."""
    from mlflow.tracking import MlflowClient

    from face.tracking import SWEEP_ROLE

    client = MlflowClient(tracking_uri=tracking_uri)
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        raise ValueError(f"no MLflow experiment {experiment!r} in {tracking_uri}")
    parents = client.search_runs([exp.experiment_id], filter_string=f"tags.{SWEEP_ROLE} = 'parent'",
                                 order_by=["attributes.start_time DESC"], max_results=1000)
    if sweep != "latest":
        parents = [r for r in parents if r.data.tags.get("sweep_dir") == str(sweep)]
    if not parents:
        raise ValueError(f"no sweep{'' if sweep == 'latest' else f' {sweep!r}'} in MLflow experiment {experiment!r}")
    return client, exp, parents[0]


def child_runs(tracking_uri: str, experiment_id: str, parent_id: str) -> pd.DataFrame:
    import mlflow

    mlflow.set_tracking_uri(tracking_uri)
    return mlflow.search_runs(experiment_ids=[experiment_id], output_format="pandas", max_results=10_000,
                              filter_string=f"tags.mlflow.parentRunId = '{parent_id}'")


def _number(values: pd.Series) -> pd.Series:
    """Numbers where every value is one (ints stay ints), else the strings."""
    num = pd.to_numeric(values, errors="coerce")
    if num.isna().any():
        return values
    return num.astype(int) if (num == num.round()).all() else num


def summarize(runs: pd.DataFrame, swept: list[str]) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """(one row per job, mean +- sd per setting over repetitions, the summary metric names)."""
    keys = [k for k in swept if f"params.{k}" in runs]
    metrics = sorted(c[len("metrics."):] for c in runs if c.startswith("metrics.summary."))
    head = headline(metrics)
    metrics = ([head] if head else []) + [m for m in metrics if m != head]
    jobs = pd.DataFrame({"run": runs.get("tags.mlflow.runName", runs["run_id"]), "status": runs["status"]})
    for k in keys:
        jobs[k] = _number(runs[f"params.{k}"])
    for m in metrics:
        jobs[m] = runs[f"metrics.{m}"].to_numpy()
    for col, name in EXTRA.items():
        if col in runs:
            v = runs[col]
            jobs[name] = (v.astype("Int64") if v.notna().all() and (v == v.round()).all() else v).to_numpy()
    jobs = jobs.sort_values(keys or ["run"], kind="stable").reset_index(drop=True)
    group = [k for k in keys if k.rsplit(".", 1)[-1] != "seed"]  # a swept seed: repetitions of one setting
    done = jobs[jobs["status"] == "FINISHED"]
    if group and len(done):
        agg = done.groupby(group, sort=True)
        spread = agg.size().rename("jobs").reset_index()
        for m in metrics:
            spread[f"{m} mean"] = agg[m].mean().to_numpy()
            spread[f"{m} sd"] = agg[m].std(ddof=1).to_numpy()
    else:
        spread = pd.DataFrame({"jobs": [len(done)]})
        for m in metrics:
            spread[f"{m} mean"] = [done[m].mean()]
            spread[f"{m} sd"] = [done[m].std(ddof=1)]
    return jobs, spread, metrics


def llm_named(runs: pd.DataFrame) -> str:
    """``LLM <model> (<backend>)`` of the jobs, or that they called none."""
    if "params.llm.model" not in runs or runs["params.llm.model"].isna().all():
        return "no LLM"
    pairs = sorted({f"{m} ({b})" for m, b in zip(runs["params.llm.model"].fillna("?"),
                                                  runs.get("params.llm.backend", pd.Series("?", index=runs.index))
                                                  .fillna("?"))})
    return "LLM " + ", ".join(pairs)


def plot(jobs: pd.DataFrame, swept: list[str], metric: str, path: Path, title: str) -> Path:
    """The headline metric against each swept setting: mean +- sd over the jobs with that value."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = [k for k in swept if k in jobs and k.rsplit(".", 1)[-1] != "seed"] or [None]
    done = jobs[jobs["status"] == "FINISHED"]
    fig, axes = plt.subplots(1, len(keys), figsize=(3.4 * len(keys), 3.2), squeeze=False)
    for ax, k in zip(axes[0], keys):
        if k is None:
            ax.bar([0], [done[metric].mean()], yerr=[done[metric].std(ddof=1) if len(done) > 1 else 0])
            ax.set_xticks([0], ["all jobs"])
        else:
            g = done.groupby(k, sort=True)[metric].agg(["mean", "std", "size"]).reset_index()
            numeric = pd.api.types.is_numeric_dtype(g[k])
            x = g[k] if numeric else range(len(g))
            ax.errorbar(x, g["mean"], yerr=g["std"].fillna(0), fmt="o-", capsize=3)
            ax.set_xticks(list(x), [str(v) for v in g[k]])  # integer settings get integer ticks
            ax.set_xlabel(k.rsplit(".", 1)[-1])
        ax.axhline(0, color="grey", lw=0.5)
        ax.set_ylabel(f"{metric}\n(mean ± sd over jobs)", fontsize=7)
    fig.suptitle(title[:160], fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=110)
    plt.close(fig)
    return path


def _markdown(df: pd.DataFrame) -> str:
    from face.report.tables import to_markdown

    return to_markdown(df, 3)


def write_report(tracking_uri: str, experiment: str, parent, out: Path | None = None) -> dict:
    """The sweep's report from its children in MLflow, into ``out`` (default: the sweep directory); logged on the
    parent run with its headline metric (best over the finished jobs) and the report as its description."""
    from mlflow.tracking import MlflowClient

    from face.secrets import redact
    from face.tracking import SWEPT_TAG

    client = MlflowClient(tracking_uri=tracking_uri)
    tags = parent.data.tags
    swept = [k for k in tags.get(SWEPT_TAG, "").split(",") if k]
    runs = child_runs(tracking_uri, parent.info.experiment_id, parent.info.run_id)
    if runs.empty:
        raise ValueError(f"the sweep {parent.info.run_name!r} has no job runs")
    jobs, spread, metrics = summarize(runs, swept)
    out = Path(out or tags["sweep_dir"])
    title = (f"{parent.info.run_name}: {len(jobs)} jobs ({(jobs['status'] == 'FINISHED').sum()} finished); "
             f"{llm_named(runs)}")
    with atomic_path(out / "sweep_jobs.csv") as tmp:
        jobs.to_csv(tmp, index=False)
    with atomic_path(out / "sweep_summary.csv") as tmp:
        spread.to_csv(tmp, index=False)
    text = (f"**{title}**\n\nMean ± sd over the finished jobs of each setting (sd: 2 or more jobs).\n\n"
            f"{_markdown(spread)}\n\nEvery job:\n\n{_markdown(jobs)}\n")
    paths = [out / "sweep_jobs.csv", out / "sweep_summary.csv", atomic_write_text(out / "sweep_report.md", text)]
    if metrics:
        paths.append(plot(jobs, swept, metrics[0], out / "sweep_report.png", title))
    for p in paths:
        client.log_artifact(parent.info.run_id, str(p), "sweep_report")
    done = jobs[jobs["status"] == "FINISHED"]
    best = {m: float(done[m].max()) for m in metrics if len(done) and not math.isnan(done[m].max())}
    for m, v in best.items():  # the parent's row in the runs table: the best job
        client.log_metric(parent.info.run_id, m, v)
    client.set_tag(parent.info.run_id, "mlflow.note.content", redact(text[:60_000]))
    if metrics:
        client.set_tag(parent.info.run_id, "headline_metric", metrics[0])
    print(f"\n== {title}\n{_markdown(spread)}\nSweep report: {out / 'sweep_report.md'}\n", flush=True)
    return {"table": jobs, "spread": spread, "swept": swept, "metrics": metrics, "paths": paths}


def report(tracking_uri: str, out: Path | None = None, experiment: str = "optimize_instructions",
           sweep: str = "latest") -> dict:
    _, _, parent = find_parent(tracking_uri, experiment, sweep)
    return write_report(tracking_uri, experiment, parent, out)


# ---------------------------------------------------------------- the Hydra callback
try:
    from hydra.experimental.callback import Callback
except ImportError:  # pragma: no cover - Hydra is a dependency
    Callback = object


class SweepRuns(Callback):
    """One MLflow parent run per multirun: created before the first job (jobs find it by the ``sweep_dir`` tag,
    in this process or in a launcher's), reported on and ended after the last. Tracking problems only warn: the
    jobs check the store themselves and refuse a bad one."""

    def on_multirun_start(self, config, **kwargs) -> None:
        try:
            self._start(config)
        except Exception as e:
            log.warning("could not create the sweep's MLflow parent run: %s", e)

    def on_multirun_end(self, config, **kwargs) -> None:
        try:
            self._end(config)
        except Exception as e:
            log.warning("could not write the sweep report: %s", e)

    @staticmethod
    def _start(config) -> None:
        from face.tracking import check_tracking_store, sweep_parent, swept_keys, use_experiment

        if not config.tracking.get("enabled"):
            return
        overrides = list(config.hydra.overrides.task)
        swept = swept_keys(overrides)
        if "experiment" in swept:  # jobs in different MLflow experiments: each makes its own parent
            return
        check_tracking_store(config)
        exp_id = use_experiment(config.tracking)
        sweep_parent(exp_id, str(config.hydra.sweep.dir), str(config.task_name), overrides, swept,
                     description=f"A sweep over {', '.join(swept) or 'nothing'}: one child run per job.")

    @staticmethod
    def _end(config) -> None:
        import mlflow
        from mlflow.tracking import MlflowClient

        from face.tracking import SWEEP_ROLE, find_sweep_parent, use_experiment

        if not config.tracking.get("enabled") or "experiment" in _swept(config):
            return
        exp_id = use_experiment(config.tracking)
        client = MlflowClient()
        parent = find_sweep_parent(client, exp_id, str(config.hydra.sweep.dir))
        if parent is None or parent.data.tags.get(SWEEP_ROLE) != "parent":
            return
        try:
            write_report(mlflow.get_tracking_uri(), str(config.tracking.experiment_name), parent)
        finally:
            runs = child_runs(mlflow.get_tracking_uri(), exp_id, parent.info.run_id)
            ok = not runs.empty and (runs["status"] == "FINISHED").all()
            client.set_terminated(parent.info.run_id, status="FINISHED" if ok else "FAILED")


def _swept(config) -> list[str]:
    from face.tracking import swept_keys

    return swept_keys(list(config.hydra.overrides.task))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tracking-uri", default="sqlite:///mlflow.db")
    ap.add_argument("--experiment", default="optimize_instructions")
    ap.add_argument("--sweep", default="latest", help="the sweep directory (tag sweep_dir) of the sweep, or latest")
    ap.add_argument("--out", default=None, type=Path, help="where to write it (default: the sweep directory)")
    a = ap.parse_args(argv)
    try:
        report(a.tracking_uri, a.out, a.experiment, a.sweep)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0
