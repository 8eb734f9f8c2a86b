"""Sweeps in MLflow: a Hydra multirun is one parent run with one child run per job (as MLflow's own
hyperparameter-tuning examples do), and its report is read back from MLflow (``search_runs`` of the parent's
children): a table of every job's headline ``summary.*`` metrics, their mean +- sd over repetitions (jobs that
differ only in a swept ``seed``), a plot against each swept setting, the LLM named in the title.

``SweepRuns`` (a Hydra callback, ``conf/config.yaml``) creates the parent before the first job (or reopens it when
the same sweep directory is run again), removes a finished job's leftover temporary files (a killed earlier run's),
and writes the report into the sweep directory (and onto the parent run) after the last job. By hand, for any sweep:

    python scripts/sweep_report.py --tracking-uri sqlite:///mlflow.db [--experiment NAME] [--sweep latest|SWEEP_DIR]
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from hydra.experimental.callback import Callback

from face.files import atomic_path, atomic_write_text
from face.report.look import drawn
from face.secrets import redact
from face.tracking.names import HEADLINE_PREFIX, RELEASED_JUDGE, fixed_width, headline, shown
from face.tracking.store import check_tracking_store, use_experiment
from face.tracking.sweeps import LABEL_TAG, SEP, SWEEP_ROLE, SWEPT_TAG, find_sweep_parent, swept_keys, tails

log = logging.getLogger(__name__)


# ---------------------------------------------------------------- reading a sweep back
def child_runs(tracking_uri: str, experiment_id: str, parent_id: str) -> pd.DataFrame:
    """The parent's children (a job's earlier runs, replaced by a rerun, are deleted and not among them)."""
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
    """(one row per job, mean +- sd per setting over repetitions, the summary metric names, headline first)."""
    keys = [k for k in swept if f"params.{k}" in runs]
    metrics = sorted(c[len("metrics."):] for c in runs if c.startswith(f"metrics.{HEADLINE_PREFIX}"))
    head = headline(metrics)
    metrics = ([head] if head else []) + [m for m in metrics if m != head]
    names = runs.get("tags.mlflow.runName", runs["run_id"])
    jobs = pd.DataFrame({"run": names, "job": runs.get(f"tags.{LABEL_TAG}", names).fillna(names),
                         "status": runs["status"], **{k: _number(runs[f"params.{k}"]) for k in keys},
                         **{m: runs[f"metrics.{m}"].to_numpy() for m in metrics}})
    jobs = jobs.sort_values(keys or ["run"], kind="stable").reset_index(drop=True)
    group = [k for k in keys if k.rsplit(".", 1)[-1] != "seed"]  # a swept seed: repetitions of one setting
    done = jobs[jobs["status"] == "FINISHED"]
    stats = {f"{m} {name}": (m, how) for m in metrics for name, how in (("mean", "mean"), ("sd", "std"))}  # sd: n-1
    if group and len(done):
        spread = done.groupby(group, sort=True).agg(jobs=("status", "size"), **stats).reset_index()
    else:  # one row: every finished job
        spread = pd.DataFrame({"jobs": [len(done)], **{k: [done[m].agg(how)] for k, (m, how) in stats.items()}})
    return jobs, spread, metrics


def llm_named(runs: pd.DataFrame) -> str:
    """``LLM <model> (<backend>)`` of the jobs (the released judgements by name), or that they called none."""
    if "params.llm.model" not in runs or runs["params.llm.model"].isna().all():
        return "no LLM"
    backends = runs.get("params.llm.backend", pd.Series("?", index=runs.index)).fillna("?")
    models = runs["params.llm.model"].fillna("?")
    named = {RELEASED_JUDGE if b == "released" else f"LLM {m} ({b})" for m, b in zip(models, backends)}
    return ", ".join(sorted(named))


@drawn(None)
def plot(jobs: pd.DataFrame, swept: list[str], metric: str, path: Path, title: str) -> Path:
    """The headline metric against each swept setting: mean +- sd over the jobs with that value, on matplotlib's
    defaults whatever the process drew before."""
    from face.report.figures import plt

    keys: list[str | None] = [k for k in swept if k in jobs and k.rsplit(".", 1)[-1] != "seed"] or [None]
    done = jobs[jobs["status"] == "FINISHED"]
    fig, axes = plt.subplots(1, len(keys), figsize=(3.4 * len(keys), 3.2), squeeze=False)
    for ax, k in zip(axes[0], keys):
        if k is None:
            ax.bar([0], [done[metric].mean()], yerr=[done[metric].std(ddof=1) if len(done) > 1 else 0])
            ax.set_xticks([0], ["all jobs"])
        else:
            g = done.groupby(k, sort=True)[metric].agg(["mean", "std", "size"]).reset_index()
            x = g[k] if pd.api.types.is_numeric_dtype(g[k]) else range(len(g))
            ax.errorbar(x, g["mean"], yerr=g["std"].fillna(0), fmt="o-", capsize=3)
            ax.set_xticks(list(x), [str(v) for v in g[k]])  # integer settings get integer ticks
            ax.set_xlabel(k.rsplit(".", 1)[-1])
        ax.axhline(0, color="grey", lw=0.5)
        ax.set_ylabel(f"{metric}\n(mean ± sd over jobs)", fontsize=7)
    fig.suptitle(title[:160], fontsize=7)
    fig.tight_layout()
    with atomic_path(path) as tmp:  # its directory made if needed
        fig.savefig(tmp, dpi=110)
    plt.close(fig)
    return path


# ---------------------------------------------------------------- the report, narrow enough for MLflow's page
def _cell(v) -> str:
    if isinstance(v, (float, np.floating)):
        return "" if math.isnan(v) else f"{v:.3f}"
    return "" if v is None else str(v)


def _short_names(metrics: list[str]) -> tuple[list[str], str]:
    """The metrics without ``summary.`` and without the ending they all share (``_heldout_spearman``), and a note
    naming that ending."""
    short = [m[len(HEADLINE_PREFIX):] for m in metrics]
    end = os.path.commonprefix([m[::-1] for m in short])[::-1] if len(short) > 1 else ""
    end = end[end.find("_"):] if "_" in end else ""
    if not end or end in short:
        return short, ""
    return [m[: -len(end)] for m in short], f" (metrics: summary.…{end})"


def report_markdown(title: str, jobs: pd.DataFrame, spread: pd.DataFrame, swept: list[str],
                    metrics: list[str]) -> str:
    """The report as Markdown: short column names (a swept key's last part, a metric without ``summary.``, a job
    by its swept values), 3 decimals, mean ± sd in one cell, fixed-width tables that fit MLflow's description."""
    keys = [k for k in swept if k in spread]
    short, common = _short_names(metrics)
    columns = [spread[k].map(_cell) for k in keys] + [spread["jobs"].astype(int).astype(str)]
    if metrics:
        sd = spread[f"{metrics[0]} sd"].map(lambda v: "" if math.isnan(v) else f" ± {v:.3f}")
        columns.append(spread[f"{metrics[0]} mean"].map(_cell) + sd)
    means = [list(row) for row in zip(*columns)]
    every = [[str(jobs["job"].iloc[i]).split(SEP)[0], str(jobs["status"].iloc[i]).lower(),
              *(_cell(jobs[m].iloc[i]) for m in metrics)] for i in range(len(jobs))]
    head = [f"{metrics[0][len(HEADLINE_PREFIX):]} (mean ± sd)"] if metrics else []
    return (f"**{title}**\n\nMean ± sd over the finished jobs of each setting (sd: 2 or more jobs):\n\n"
            f"{fixed_width([*tails(keys), 'jobs', *head], means)}\n\nEvery job{common}:\n\n"
            f"{fixed_width(['job', 'status', *short], every)}\n")


def best_sets(client, runs: pd.DataFrame) -> str:
    """What each aspect's ``@best`` set alias names and why (the set prompt's ``best`` tag), for the report."""
    lines = []
    for col in sorted(c for c in runs if c.startswith("tags.prompt.")):
        name = str(runs[col].dropna().iloc[0]).split("@")[0] if runs[col].notna().any() else ""
        prompt = client.get_prompt(name) if name.startswith("face-opt-") else None
        if prompt is not None and "best" in (prompt.tags or {}):
            lines.append(f"- `{name}`: {prompt.tags['best']}")
    return "\nPrompt Registry:\n\n" + "\n".join(lines) + "\n" if lines else ""


def write_report(tracking_uri: str, parent, out: Path | None = None) -> None:
    """The sweep's report from its children in MLflow, into ``out`` (default: the sweep directory); logged on the
    parent run with its headline metric (best over the finished jobs) and the report as its description."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri)
    swept = [k for k in parent.data.tags.get(SWEPT_TAG, "").split(",") if k]
    runs = child_runs(tracking_uri, parent.info.experiment_id, parent.info.run_id)
    if runs.empty:
        raise ValueError(f"the sweep {parent.info.run_name!r} has no job runs")
    jobs, spread, metrics = summarize(runs, swept)
    out = Path(out or parent.data.tags["sweep_dir"])
    done = jobs[jobs["status"] == "FINISHED"]
    title = f"{parent.info.run_name}: {len(jobs)} jobs ({len(done)} finished); {llm_named(runs)}"
    text = report_markdown(title, jobs, spread, swept, metrics) + best_sets(client, runs)
    paths = [atomic_write_text(out / "sweep_jobs.csv", jobs.to_csv(index=False)),
             atomic_write_text(out / "sweep_summary.csv", spread.to_csv(index=False)),
             atomic_write_text(out / "sweep_report.md", text)]
    if metrics:
        paths.append(plot(jobs, swept, metrics[0], out / "sweep_report.png", title))
        client.set_tag(parent.info.run_id, "headline_metric", metrics[0])
    for p in paths:
        client.log_artifact(parent.info.run_id, str(p), "sweep_report")
    for m in metrics:  # the parent's row: sweep_best.<metric> (sorts after summary.*), its job in a tag
        if len(done) and not math.isnan(done[m].max()):
            best, short = done.loc[done[m].idxmax()], m.removeprefix("summary.")
            client.log_metric(parent.info.run_id, f"sweep_best.{short}", shown(best[m]))
            client.set_tag(parent.info.run_id, f"sweep_best.{short}.job", str(best["run"]))
    client.set_tag(parent.info.run_id, "mlflow.note.content", redact(text[:60_000]))
    print(f"\n== {title}\n{text.split(chr(10) * 2, 2)[2].split('Every job:')[0]}Sweep report: "
          f"{out / 'sweep_report.md'}\n", flush=True)


# ---------------------------------------------------------------- the Hydra callback

class SweepRuns(Callback):
    """One MLflow parent run per multirun: created before the first job (jobs find it by the ``sweep_dir`` tag,
    in this process or in a launcher's), reported on and ended after the last. Tracking problems only warn: the
    jobs check the store themselves and refuse a bad one."""

    def on_multirun_start(self, config, **kwargs) -> None:
        from face.tracking.sweeps import sweep_parent

        try:
            overrides = list(config.hydra.overrides.task)
            swept = swept_keys(overrides)
            # jobs in different MLflow experiments: each makes its own parent
            if not config.tracking.get("enabled") or "experiment" in swept:
                return
            check_tracking_store(config)
            sweep_parent(use_experiment(config.tracking), str(config.hydra.sweep.dir), str(config.task_name),
                         overrides, swept, f"A sweep over {', '.join(swept) or 'nothing'}: one child run per job.")
        except Exception as e:
            log.warning("could not create the sweep's MLflow parent run: %s", e)

    def on_job_end(self, config, job_return, **kwargs) -> None:
        from hydra.core.utils import JobStatus

        hc = config.get("hydra") or {}
        mode, out = str(hc.get("mode", "")), hc.get("runtime", {}).get("output_dir")
        if job_return.status == JobStatus.COMPLETED and mode == "RunMode.MULTIRUN" and out:
            # the temporary files (``.<name>.<random>.tmp<suffix>``, face.files.atomic_path) a killed earlier run of
            # the job left: the finished job wrote every file it writes
            for p in Path(out).rglob(".*.tmp*"):
                if p.is_file() and not p.is_symlink():
                    p.unlink(missing_ok=True)
                    log.info("removed %s, left by a killed earlier run of this job", p)

    def on_multirun_end(self, config, **kwargs) -> None:
        import mlflow
        from mlflow.tracking import MlflowClient

        try:
            if not config.tracking.get("enabled") or "experiment" in swept_keys(list(config.hydra.overrides.task)):
                return
            exp_id, client = use_experiment(config.tracking), MlflowClient()
            parent = find_sweep_parent(client, exp_id, str(config.hydra.sweep.dir))
            if parent is None:
                return
            try:
                write_report(mlflow.get_tracking_uri(), parent)
            finally:
                runs = child_runs(mlflow.get_tracking_uri(), exp_id, parent.info.run_id)
                ok = not runs.empty and (runs["status"] == "FINISHED").all()
                client.set_terminated(parent.info.run_id, status="FINISHED" if ok else "FAILED")
        except Exception as e:
            log.warning("could not write the sweep report: %s", e)


def main(argv: list[str] | None = None) -> int:
    """The report of a sweep of MLflow experiment ``--experiment`` (``--sweep``: its sweep directory, or the latest);
    an error (exit 2) when there is none."""
    from mlflow.tracking import MlflowClient

    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--tracking-uri", default="sqlite:///mlflow.db")
    ap.add_argument("--experiment", default="optimize_instructions")
    ap.add_argument("--sweep", default="latest", help="the sweep directory (tag sweep_dir) of the sweep, or latest")
    ap.add_argument("--out", default=None, type=Path, help="where to write it (default: the sweep directory)")
    a = ap.parse_args(argv)
    try:
        client = MlflowClient(tracking_uri=a.tracking_uri)
        exp = client.get_experiment_by_name(a.experiment)
        if exp is None:
            raise ValueError(f"no MLflow experiment {a.experiment!r} in {a.tracking_uri}")
        runs = client.search_runs([exp.experiment_id], filter_string=f"tags.{SWEEP_ROLE} = 'parent'",
                                  order_by=["attributes.start_time DESC"], max_results=1000)
        parents = [r for r in runs if a.sweep == "latest" or r.data.tags.get("sweep_dir") == a.sweep]
        if not parents:
            raise ValueError(f"no sweep{'' if a.sweep == 'latest' else f' {a.sweep!r}'} in MLflow experiment "
                             f"{a.experiment!r}")
        write_report(a.tracking_uri, parents[0], a.out)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0
