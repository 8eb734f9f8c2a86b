"""Multirun sweeps through a Hydra launcher plugin (hydra-submitit-launcher): `hydra/launcher=submitit_local`
starts each job as its own process, exactly as `submitit_slurm` does on a cluster node, so what a cluster
run needs — the config, the paths and the environment reaching a fresh process, one LLM cache and one MLflow
store shared by concurrent jobs — is exercised here. Everything goes to tmp_path."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


# scripts/run.py as `python scripts/run.py` runs it, with submitit's wait for the result file of a job that has
# ended (15 s by default, for slow network file systems) set to 1 s, as submitit's own tests set it
_RUN_WITH_SHORT_RESULTS_WAIT = """
import runpy, sys
import submitit.core.core
submitit.core.core.Job._results_timeout_s = 1
sys.argv[0] = "scripts/run.py"
runpy.run_path("scripts/run.py", run_name="__main__")
"""


def _sweep(tmp_path: Path, data_dir: Path, *overrides: str, tracking: bool = True,
           short_results_wait: bool = False) -> subprocess.CompletedProcess:
    out = [f"hydra.sweep.dir={tmp_path / 'sweep'}", f"paths.results_dir={tmp_path / 'results'}",
           f"paths.cache_dir={tmp_path / 'cache'}", f"paths.data_dir={data_dir}", "paths.data_mirror=null",
           "dataset.download=false"]
    out += ([f"tracking.tracking_uri=sqlite:///{tmp_path / 'ml.db'}",
             f"tracking.artifact_location={tmp_path / 'mlruns'}"] if tracking else ["tracking=none"])
    script = ["-c", _RUN_WITH_SHORT_RESULTS_WAIT] if short_results_wait else ["scripts/run.py"]
    return subprocess.run([sys.executable, *script, "-m", "hydra/launcher=submitit_local", *overrides, *out],
                          cwd=ROOT, env={**os.environ, "FACE_DATA_MIRROR": ""}, capture_output=True, text=True,
                          timeout=300)


def _submitit_jobs(sweep: Path) -> dict[str, str]:
    """submitit job id -> its error log, for every job the launcher started."""
    return {p.parent.name: p.read_text() for p in (sweep / ".submitit").glob("*/*_0_log.err")}


@pytest.mark.slow
def test_submitit_local_sweep_of_live_jobs(tmp_path, data_dir, mlflow_store):
    """Two live FACE jobs (scripted LLM) in two processes: each finishes with its run file, tables and LLM usage,
    both write to one LLM cache and one MLflow store, and each job is its own MLflow run tagged with the sweep.
    The store starts as a copy of an empty one (creating it is not what this checks)."""
    from mlflow.tracking import MlflowClient

    shutil.copyfile(mlflow_store, tmp_path / "ml.db")
    res = _sweep(tmp_path, data_dir, "experiment=crsarena_main", "llm=fake", "dataset.limit=2",
                 "aspects=[dialogue_overall]", "method.particles.source=released", "method.instructions.max=2",
                 "method.scoring.n=1,2")
    assert res.returncode == 0, res.stderr[-3000:]
    sweep = tmp_path / "sweep"
    jobs = _submitit_jobs(sweep)
    assert len(jobs) == 2, f"expected 2 submitit jobs, got {sorted(jobs)}"  # each job its own process
    for num, n in (("0", 1), ("1", 2)):
        job = sweep / num
        assert f"method.scoring.n={n}" in (job / ".hydra" / "overrides.yaml").read_text()
        run_file = json.loads((job / "run_file.json").read_text())
        assert len(run_file) == 2 and all("dialogue_overall" in c["dial_level_pred"] for c in run_file)
        assert (job / "results" / "correlations.csv").exists()
        usage = json.loads((job / "llm_usage.json").read_text())["totals"]
        assert usage["failures"] == 0 and usage["requests"] > 0
    assert not (tmp_path / "results").exists()  # a sweep job is never the default configuration
    assert (tmp_path / "cache" / "llm" / "llm_cache.sqlite").exists()  # one cache (paths.cache_dir) for both jobs

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'ml.db'}")
    every = client.search_runs([client.get_experiment_by_name("crsarena_main").experiment_id])
    [parent] = [r for r in every if r.data.tags.get("sweep_role") == "parent"]  # one per sweep, made before the jobs
    runs = [r for r in every if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]  # each job its child
    assert len(every) == 3 and parent.info.run_name == "n · crsarena_main sweep"
    assert sorted(r.data.params["method.scoring.n"] for r in runs) == ["1", "2"]
    assert all(r.info.status == "FINISHED" for r in every)
    assert {r.data.tags["sweep_job"] for r in runs} == {"0", "1"}
    assert all(r.data.tags["sweep_dir"] == str(sweep) for r in every)
    assert (sweep / "sweep_report.md").exists()


@pytest.mark.slow
def test_submitit_local_sweep_reports_a_failed_job(tmp_path, data_dir):
    """A job that stops with a bad setting in its own process: the other job still finishes, its one-line error
    reaches the sweep's output, and the sweep exits 1 (a failed job), not 2 (a bad override: nothing ran).
    submitit waits for the result file the failed job never writes: 1 s here instead of its 15 s."""
    res = _sweep(tmp_path, data_dir, "experiment=reproduce_table2", "metaeval.n_boot=0", "dataset.limit=0,30",
                 tracking=False, short_results_wait=True)
    assert res.returncode == 1, res.stderr[-3000:]
    assert "dataset.limit must be an integer >= 1 or null, got 0" in res.stderr  # the job's own line
    assert (tmp_path / "sweep" / "1" / "run_file.json").exists()
    assert (tmp_path / "sweep" / "1" / "results" / "correlations.csv").exists()
    assert not (tmp_path / "sweep" / "0" / "run_file.json").exists()


def _terminal_sigint() -> None:
    """Ctrl-C's signal as a terminal's process gets it: a test run started in the background by a shell (``cmd &``,
    as a CI script may be) inherits SIGINT ignored, and a process started with it ignored never sees a Ctrl-C."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.slow
@pytest.mark.serial  # interrupts the sweep once its jobs are sending, found by polling
def test_ctrl_c_while_submitit_local_jobs_run_is_one_line_and_exit_130(tmp_path, data_dir):
    """Ctrl-C in a terminal reaches the sweep and its job processes (one process group): the sweep, waiting for its
    jobs in the launcher, stops with the one interrupted line and exit 130 (each job with its own, in its log). It
    printed the KeyboardInterrupt's traceback through Hydra and submitit's wait (exit -2)."""
    import signal
    import time

    out = [f"hydra.sweep.dir={tmp_path / 'sweep'}", f"paths.results_dir={tmp_path / 'results'}",
           f"paths.cache_dir={tmp_path / 'cache'}", f"paths.data_dir={data_dir}", "paths.data_mirror=null",
           "dataset.download=false", "tracking=none"]
    jobs = ["experiment=crsarena_main", "llm=fake", "llm.server.latency_s=0.2", "dataset.limit=2",
            "aspects=[dialogue_overall]", "method.particles.source=released", "method.scoring.n=1,2"]
    proc = subprocess.Popen([sys.executable, "scripts/run.py", "-m", "hydra/launcher=submitit_local", *jobs, *out],
                            cwd=ROOT, env={**os.environ, "FACE_DATA_MIRROR": ""}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=_terminal_sigint)
    try:
        deadline = time.time() + 180
        started = [tmp_path / "cache" / "llm" / "llm_cache.sqlite", tmp_path / "sweep" / "0", tmp_path / "sweep" / "1"]
        while not all(p.exists() for p in started) and time.time() < deadline:  # both jobs launched, one sending
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            time.sleep(0.2)
        time.sleep(1.0)  # the jobs are sending their requests, the sweep waits for them
        assert proc.poll() is None, "the sweep ended before the Ctrl-C: the jobs are too short to interrupt"
        os.killpg(proc.pid, signal.SIGINT)  # as a terminal's Ctrl-C
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, err[-3000:]
    assert "interrupted: the run was stopped." in err.splitlines(), err[-3000:]
    # submitit's own controller of each job (a process of its local executor, absent on a cluster) is interrupted too
    # and prints its KeyboardInterrupt (two of them may interleave their lines); no traceback comes from the sweep
    # itself, whose frames would start in scripts/run.py
    tracebacks = err.split("Traceback (most recent call last):")[1:]
    assert not any("scripts/run.py" in t for t in tracebacks), err[-3000:]
