"""Sweeps in MLflow (issue 22): a multirun is one parent run with a child per job, named by the sweep's settings;
the sweep report is read back from the children (mean +- sd over repetitions, the LLM named); every experiment's
headline metric is its experiment's primary metric; the data a run read is its MLflow dataset input. In process,
with Hydra's job config stood in for (the real sweeps through Hydra are the slow tests in test_optimize.py,
test_experiments.py and test_launcher.py)."""

from __future__ import annotations

import hashlib
import math
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
from omegaconf import OmegaConf

import face.tracking as tracking
from face.experiments.sweep_report import SweepRuns, summarize
from face.tracking import Tracker, job_name, swept_keys


def test_swept_keys_are_the_keys_with_several_values():
    assert swept_keys(["experiment=optimize_instructions", "optimizer.alpha=1,2", "optimizer.beta=1",
                       "seed=range(0,3)", "aspects=[relevance,efficiency]", "+extra=choice(a,b)"]) == [
        "optimizer.alpha", "seed", "extra"]


def test_a_job_is_named_by_every_setting_of_its_command_line_swept_first():
    overrides = ["experiment=optimize_instructions", "llm=scripted", "optimizer.alpha=1", "optimizer.beta=1",
                 "optimizer.beam=2", "tracking.tracking_uri=sqlite:///x.db", "paths.cache_dir=/tmp/c",
                 "hydra.sweep.dir=/tmp/s"]
    assert job_name("optimize_instructions", overrides, ["optimizer.alpha", "optimizer.beam"]) == (
        "optimize_instructions alpha=1 beam=2 llm=scripted beta=1")
    # the same last part twice: the full keys
    assert job_name("t", ["optimizer.seed=1", "optimizer.split.seed=2"], []) == (
        "t optimizer.seed=1 optimizer.split.seed=2")


def _runs(rows):
    return pd.DataFrame([{"run_id": f"r{i}", "tags.mlflow.runName": f"job {i}", "status": st,
                          "params.optimizer.alpha": a, "params.seed": s, "metrics.summary.x": x,
                          "metrics.summary.heldout_final_spearman": h}
                         for i, (st, a, s, x, h) in enumerate(rows)])


def test_the_sweep_summary_is_mean_and_sd_over_the_seeds_of_each_setting_finished_jobs_only():
    runs = _runs([("FINISHED", "1", "0", 0.0, 0.1), ("FINISHED", "1", "1", 0.0, 0.3),
                  ("FINISHED", "2", "0", 0.0, 0.5), ("FINISHED", "2", "1", 0.0, 0.9),
                  ("FAILED", "2", "2", 0.0, -5.0)])
    jobs, spread, metrics = summarize(runs, ["optimizer.alpha", "seed"])
    assert metrics[0] == "summary.heldout_final_spearman"  # the headline first
    assert jobs["optimizer.alpha"].tolist() == [1, 1, 2, 2, 2] and str(jobs["optimizer.alpha"].dtype) == "int64"
    assert spread["optimizer.alpha"].tolist() == [1, 2] and spread["jobs"].tolist() == [2, 2]
    assert spread["summary.heldout_final_spearman mean"].tolist() == pytest.approx([0.2, 0.7])
    # sample sd by hand: sqrt(((0.1-0.2)^2 + (0.3-0.2)^2) / 1), sqrt(((0.5-0.7)^2 + (0.9-0.7)^2) / 1)
    assert spread["summary.heldout_final_spearman sd"].tolist() == pytest.approx([math.sqrt(0.02), math.sqrt(0.08)])


def _hydra_job(sweep_dir: Path, num: int, overrides: list[str]):
    return SimpleNamespace(mode="RunMode.MULTIRUN", sweep=SimpleNamespace(dir=str(sweep_dir)),
                           job=SimpleNamespace(num=num), overrides=SimpleNamespace(task=overrides))


@pytest.mark.slow
@pytest.mark.usefixtures("mlflow_store")
def test_a_sweep_is_one_parent_run_with_each_job_its_named_child_and_the_report_on_the_parent(
        cfg_factory, tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    cfg = cfg_factory()
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    given = ["dataset.limit=5", "method.particle_agg=mean,max", f"tracking.tracking_uri={cfg.tracking.tracking_uri}"]
    master = OmegaConf.create({"task_name": cfg.task_name, "tracking": OmegaConf.to_container(cfg.tracking),
                               "hydra": {"overrides": {"task": given}, "sweep": {"dir": str(sweep)}}})
    SweepRuns().on_multirun_start(master)
    for num, agg, value in ((0, "mean", 0.25), (1, "max", 0.75)):
        job = ["dataset.limit=5", f"method.particle_agg={agg}", given[2]]
        monkeypatch.setattr(tracking, "hydra_job", lambda job=job, num=num: _hydra_job(sweep, num, job))
        with Tracker(cfg_factory(*job[:2]), "ignored in a sweep", uses_llm=False) as t:
            t.log_metrics({"summary.turn_spearman_mean": value})
    SweepRuns().on_multirun_end(master)

    client = MlflowClient(cfg.tracking.tracking_uri)
    exp = client.get_experiment_by_name(cfg.tracking.experiment_name)
    every = client.search_runs([exp.experiment_id])
    [parent] = [r for r in every if "mlflow.parentRunId" not in r.data.tags]
    children = sorted((r for r in every if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id),
                      key=lambda r: r.data.tags["sweep_job"])
    assert parent.info.run_name == "reproduce_table2 sweep: particle_agg" and parent.info.status == "FINISHED"
    assert [r.info.run_name for r in children] == ["reproduce_table2 particle_agg=mean limit=5",
                                                   "reproduce_table2 particle_agg=max limit=5"]
    assert parent.data.metrics["summary.turn_spearman_mean"] == 0.75  # the best job
    assert exp.tags["mlflow.experiment.primaryMetric.name"] == "summary.turn_spearman_mean"
    summary = pd.read_csv(sweep / "sweep_summary.csv")
    assert dict(zip(summary["method.particle_agg"], summary["summary.turn_spearman_mean mean"])) == {
        "max": 0.75, "mean": 0.25}
    text = (sweep / "sweep_report.md").read_text()
    assert text.startswith("**reproduce_table2 sweep: particle_agg: 2 jobs (2 finished); no LLM**")
    assert str(tmp_path) not in text.splitlines()[0]  # no absolute path in the title
    assert {f.path for f in client.list_artifacts(parent.info.run_id, "sweep_report")} == {
        "sweep_report/sweep_jobs.csv", "sweep_report/sweep_summary.csv", "sweep_report/sweep_report.md",
        "sweep_report/sweep_report.png"}


@pytest.mark.slow
@pytest.mark.usefixtures("mlflow_store")
def test_a_job_without_the_callback_makes_the_parent_itself_once(cfg_factory, tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    cfg = cfg_factory()
    for num in (0, 1):
        job = [f"seed={num}"]
        monkeypatch.setattr(tracking, "hydra_job", lambda job=job, num=num: _hydra_job(tmp_path / "s", num, job))
        with Tracker(cfg):
            pass
    client = MlflowClient(cfg.tracking.tracking_uri)
    every = client.search_runs([client.get_experiment_by_name(cfg.tracking.experiment_name).experiment_id])
    [parent] = [r for r in every if r.data.tags.get("sweep_role") == "parent"]
    assert parent.info.run_name == "reproduce_table2 sweep: seed" and parent.info.status == "FINISHED"
    assert sorted(r.info.run_name for r in every if r is not parent) == ["reproduce_table2 seed=0",
                                                                        "reproduce_table2 seed=1"]


@pytest.mark.slow
@pytest.mark.usefixtures("mlflow_store")
def test_the_data_a_run_read_is_its_mlflow_dataset_input_with_a_digest_of_the_files(cfg_factory):
    from mlflow.tracking import MlflowClient

    cfg = cfg_factory()
    rows = [{"conv_id": "a", "system": "s1", "split": "redial", "evaluated_turns": 3},
            {"conv_id": "b", "system": "s2", "split": "opendialkg", "evaluated_turns": 2}]
    with Tracker(cfg, "data") as t:
        t.log_dataset("CRSArena-Eval", rows, {"x.json": "00ff", "a.json": "11aa"}, "data/raw/a.json")
        run_id = t.run_id
    [inp] = MlflowClient(cfg.tracking.tracking_uri).get_run(run_id).inputs.dataset_inputs
    assert inp.dataset.name == "CRSArena-Eval"
    assert inp.dataset.digest == hashlib.sha256(b'{"a.json": "11aa", "x.json": "00ff"}').hexdigest()[:12]
    assert '"num_rows": 2' in inp.dataset.profile


def test_a_multirun_job_writes_its_tables_under_its_own_job_dir(cfg_factory, monkeypatch):
    from face.experiments.common import out_dir_for

    cfg = cfg_factory()
    full = SimpleNamespace(is_subset=False)
    assert out_dir_for(cfg, full, {}) == Path(cfg.paths.results_dir) / "reproduce_table2"  # a single run
    monkeypatch.setattr(tracking, "hydra_job", lambda: _hydra_job(Path("/s"), 0, []))
    assert out_dir_for(cfg, full, {}) == Path(cfg.paths.output_dir) / "results"  # job 0 of a sweep, defaults
