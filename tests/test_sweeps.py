"""Sweeps in MLflow (issue 22): a multirun is one parent run with a child per job, named by the sweep's settings;
the sweep report is read back from the children (mean +- sd over repetitions, the LLM named); every experiment's
headline metric is its experiment's primary metric; the data a run read is its MLflow dataset input. In process,
with Hydra's job config stood in for (the real sweeps through Hydra are the slow tests in test_optimize_runs.py,
test_experiments.py and test_launcher.py)."""

from __future__ import annotations

import hashlib
import math
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
from omegaconf import OmegaConf

import face.tracking.sweeps as sweeps
from face.experiments.naming import run_name
from face.experiments.sweep_report import SweepRuns, report_markdown, summarize
from face.tracking import Tracker
from face.tracking.sweeps import job_label, job_name, parent_name, swept_keys


def test_swept_keys_are_the_keys_with_several_values():
    assert swept_keys(["experiment=optimize_instructions", "optimizer.alpha=1,2", "optimizer.beta=1",
                       "seed=range(0,3)", "aspects=[relevance,efficiency]", "+extra=choice(a,b)"]) == [
        "optimizer.alpha", "seed", "extra"]


def test_a_job_is_named_by_its_swept_values_first_then_the_experiment():
    overrides = ["experiment=optimize_instructions", "llm=fake", "optimizer.beam=2", "optimizer.beta=1",
                 "optimizer.alpha=1", "tracking.tracking_uri=sqlite:///x.db", "paths.cache_dir=/tmp/c",
                 "hydra.sweep.dir=/tmp/s"]
    assert job_name("optimize_instructions", overrides, ["optimizer.alpha"]) == "alpha=1 · optimize_instructions"
    # in the order swept, fixed settings left to the parent's params; keys abbreviated where the values would not
    # all show in the runs table's default column width (11 characters)
    assert job_name("optimize_instructions", overrides, ["optimizer.alpha", "optimizer.beam"]) == (
        "a=1 b=2 · optimize_instructions")
    assert job_label(overrides, ["optimizer.alpha", "optimizer.beam"]) == "alpha=1 beam=2"  # prompt tags, reports
    assert job_name("t", ["seed=3", "split.seed=4"], ["seed", "split.seed"]) == "se=3 sp=4 · t"
    # swept keys unknown (no callback): every setting that says what is computed; the same last part twice: in full
    assert job_name("t", ["optimizer.seed=1", "optimizer.split.seed=2", "paths.x=/p"], []) == (
        "optimizer.seed=1 optimizer.split.seed=2 · t")


# MLflow 3.17.2's runs table at its default Run Name width (190 px), measured in headless Chromium: a child row shows
# 11 digits, then "…" (98 px for the name); a top-level row (a sweep's parent, a plain run) 17
CHILD_WIDTH, TOP_WIDTH = 11, 17


def test_three_swept_keys_with_two_values_give_eight_children_told_apart_at_the_default_width():
    jobs = [["experiment=optimize_instructions", "llm=scripted", f"optimizer.alpha={a}", f"optimizer.beta={b}",
             f"optimizer.beam={m}", "optimizer.rounds=1"] for a in (2, 4) for b in (2, 4) for m in (2, 4)]
    swept = ["optimizer.alpha", "optimizer.beta", "optimizer.beam"]
    names = [job_name("optimize_instructions", o, swept, str(i)) for i, o in enumerate(jobs)]
    # the values in the swept order (the parent's name says which), written out by hand
    assert names[:3] == ["2·2·2 · optimize_instructions", "2·2·4 · optimize_instructions",
                         "2·4·2 · optimize_instructions"]
    assert len({n[:CHILD_WIDTH] for n in names}) == 8
    # the key order the values follow, at the head of the parent's name
    assert parent_name("optimize_instructions", swept) == "alpha×beta×beam · optimize_instructions sweep"


def test_two_swept_keys_keep_their_abbreviated_keys_and_seven_keys_lead_with_the_job_number():
    two = ["optimizer.alpha=1", "optimizer.beam=2"]
    assert job_name("optimize_instructions", two, ["optimizer.alpha", "optimizer.beam"]) == (
        "a=1 b=2 · optimize_instructions")
    keys = [f"k{i}" for i in range(7)]
    jobs = [[f"k{i}={(j >> i) & 1}" for i in range(7)] for j in range(128)]
    names = [job_name("t", o, keys, str(j)) for j, o in enumerate(jobs)]
    assert names[5] == "#5 1·0·1·0·0·0·0 · t"  # 13 characters of values: the number first
    assert len({n[:CHILD_WIDTH] for n in names}) == 128
    # a swept path shows as its file name
    assert job_name("t", ["dataset.path=/data/x/v2.jsonl", "seed=1"], ["dataset.path", "seed"]) == "v2.jsonl·1 · t"


def test_two_sweeps_parents_differ_at_the_default_width_and_do_not_lead_with_the_experiment():
    a = parent_name("optimize_instructions", ["optimizer.alpha", "optimizer.beam"])
    b = parent_name("optimize_instructions", ["optimizer.alpha", "optimizer.beta", "optimizer.beam"])
    assert a == "alpha×beam · optimize_instructions sweep"
    assert a[:CHILD_WIDTH] != b[:CHILD_WIDTH] and not a.startswith("optimize")


def test_a_plain_run_is_named_by_what_differs_from_the_default_first():
    assert run_name("reproduce_table2", {"method.particle_agg": "median"}) == "particle_agg=median · reproduce_table2"
    assert run_name("reproduce_table2", {}) == "reproduce_table2"
    first, second = (run_name("reproduce_table2", {"method.particle_agg": v}) for v in ("median", "max"))
    assert first[:TOP_WIDTH] != second[:TOP_WIDTH]


def test_a_run_on_its_own_input_is_named_by_the_input_and_its_judge_first():
    settings = {"llm": "openai", "aspects": "[relevance]", "dataset.path": "v1.jsonl"}
    assert run_name("evaluate", settings, "gpt-4o-mini") == "v1 · gpt-4o-mini · aspects=[relevance]"
    assert run_name("evaluate", {"dataset.path": "v2.jsonl"}, None) == "v2"


def _runs(rows):
    return pd.DataFrame([{"run_id": f"r{i}", "tags.mlflow.runName": f"job {i}", "status": st,
                          "params.optimizer.alpha": a, "params.seed": s, "metrics.summary.x": x,
                          "metrics.summary.final_heldout_spearman": h}
                         for i, (st, a, s, x, h) in enumerate(rows)])


def test_the_sweep_summary_is_mean_and_sd_over_the_seeds_of_each_setting_finished_jobs_only():
    runs = _runs([("FINISHED", "1", "0", 0.0, 0.1), ("FINISHED", "1", "1", 0.0, 0.3),
                  ("FINISHED", "2", "0", 0.0, 0.5), ("FINISHED", "2", "1", 0.0, 0.9),
                  ("FAILED", "2", "2", 0.0, -5.0)])
    jobs, spread, metrics = summarize(runs, ["optimizer.alpha", "seed"])
    assert metrics[0] == "summary.final_heldout_spearman"  # the headline first
    assert jobs["optimizer.alpha"].tolist() == [1, 1, 2, 2, 2] and str(jobs["optimizer.alpha"].dtype) == "int64"
    assert spread["optimizer.alpha"].tolist() == [1, 2] and spread["jobs"].tolist() == [2, 2]
    assert spread["summary.final_heldout_spearman mean"].tolist() == pytest.approx([0.2, 0.7])
    # sample sd by hand: sqrt(((0.1-0.2)^2 + (0.3-0.2)^2) / 1), sqrt(((0.5-0.7)^2 + (0.9-0.7)^2) / 1)
    assert spread["summary.final_heldout_spearman sd"].tolist() == pytest.approx([math.sqrt(0.02), math.sqrt(0.08)])


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
        monkeypatch.setattr(sweeps, "hydra_job", lambda job=job, num=num: _hydra_job(sweep, num, job))
        with Tracker(cfg_factory(*job[:2]), "ignored in a sweep", uses_llm=False) as t:
            t.log_metrics({"summary.turn_spearman_mean": value})
    SweepRuns().on_multirun_end(master)

    client = MlflowClient(cfg.tracking.tracking_uri)
    exp = client.get_experiment_by_name(cfg.tracking.experiment_name)
    every = client.search_runs([exp.experiment_id])
    [parent] = [r for r in every if "mlflow.parentRunId" not in r.data.tags]
    children = sorted((r for r in every if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id),
                      key=lambda r: r.data.tags["sweep_job"])
    assert parent.info.run_name == "particle_agg · reproduce_table2 sweep" and parent.info.status == "FINISHED"
    assert [r.info.run_name for r in children] == ["p=mean · reproduce_table2", "p=max · reproduce_table2"]
    assert parent.data.params == {"dataset.limit": "5", "method.particle_agg": "mean,max"}  # swept and fixed
    # the parent's metric is named for what it is, the best job's, and says which job it comes from
    assert parent.data.metrics == {"sweep_best.turn_spearman_mean": 0.75}
    job = parent.data.tags["sweep_best.turn_spearman_mean.job"]
    assert job == children[1].info.run_name == "p=max · reproduce_table2"
    assert exp.tags["mlflow.experiment.primaryMetric.name"] == "summary.turn_spearman_mean"
    summary = pd.read_csv(sweep / "sweep_summary.csv")
    assert dict(zip(summary["method.particle_agg"], summary["summary.turn_spearman_mean mean"])) == {
        "max": 0.75, "mean": 0.25}
    text = (sweep / "sweep_report.md").read_text()
    assert text.startswith(
        "**particle_agg · reproduce_table2 sweep: 2 jobs (2 finished); the FACE authors' released judgements**")
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
        monkeypatch.setattr(sweeps, "hydra_job", lambda job=job, num=num: _hydra_job(tmp_path / "s", num, job))
        with Tracker(cfg):
            pass
    client = MlflowClient(cfg.tracking.tracking_uri)
    every = client.search_runs([client.get_experiment_by_name(cfg.tracking.experiment_name).experiment_id])
    [parent] = [r for r in every if r.data.tags.get("sweep_role") == "parent"]
    assert parent.info.run_name == "seed · reproduce_table2 sweep" and parent.info.status == "FINISHED"
    assert sorted(r.info.run_name for r in every if r is not parent) == ["seed=0 · reproduce_table2",
                                                                        "seed=1 · reproduce_table2"]


@pytest.mark.slow
@pytest.mark.usefixtures("mlflow_store")
def test_the_data_a_run_read_is_its_mlflow_dataset_input_with_a_digest_of_the_files(cfg_factory):
    from mlflow.tracking import MlflowClient

    cfg = cfg_factory()
    rows = [{"conv_id": "a", "system": "s1", "split": "redial", "evaluated_turns": 3},
            {"conv_id": "b", "system": "s2", "split": "opendialkg", "evaluated_turns": 2}]
    with Tracker(cfg, "data") as t:
        t.log_data("CRSArena-Eval", rows, {"x.json": "00ff", "a.json": "11aa"}, "data/raw/a.json")
        run_id = t.run_id
    [inp] = MlflowClient(cfg.tracking.tracking_uri).get_run(run_id).inputs.dataset_inputs
    assert inp.dataset.name == "CRSArena-Eval"
    assert inp.dataset.digest == hashlib.sha256(b'{"a.json": "11aa", "x.json": "00ff"}').hexdigest()[:12]
    assert '"num_rows": 2' in inp.dataset.profile


def test_a_multirun_job_writes_its_tables_under_its_own_job_dir(cfg_factory, monkeypatch):
    from face.experiments.common import out_dir_for
    from face.experiments.settings import RunSettings

    cfg = cfg_factory()
    full, run = SimpleNamespace(is_subset=False), RunSettings.of(cfg)
    assert out_dir_for(cfg, run, full, {}) == Path(cfg.paths.results_dir) / "reproduce_table2"  # a single run
    monkeypatch.setattr(sweeps, "hydra_job", lambda: _hydra_job(Path("/s"), 0, []))
    assert out_dir_for(cfg, run, full, {}) == Path(cfg.paths.output_dir) / "results"  # job 0 of a sweep, defaults


# ---------------------------------------------------------------- a sweep rerun after kill -9 (issue 31)
def _dead_pid() -> int:
    import subprocess

    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


@pytest.mark.slow
@pytest.mark.usefixtures("mlflow_store")
def test_a_rerun_of_a_killed_sweep_counts_each_job_once_and_ends_the_parent_finished(cfg_factory, tmp_path,
                                                                                    monkeypatch):
    """The state kill -9 leaves (the parent and job 1's child RUNNING for a process that is gone, job 0's child
    FINISHED, a temporary file in job 1's directory), then the same sweep run again into the same directory: one
    run per job (the earlier ones deleted, tagged with their replacement), the report counts 2 jobs, the parent
    ends FINISHED and job 1's leftover is gone."""
    from hydra.core.utils import JobReturn, JobStatus
    from mlflow.tracking import MlflowClient

    cfg = cfg_factory()
    sweep = tmp_path / "sweep"
    given = ["dataset.limit=5", "method.particle_agg=mean,max"]
    master = OmegaConf.create({"task_name": cfg.task_name, "tracking": OmegaConf.to_container(cfg.tracking),
                               "hydra": {"overrides": {"task": given}, "sweep": {"dir": str(sweep)}}})
    jobs = [(0, "mean", 0.25), (1, "max", 0.75)]
    client = MlflowClient(cfg.tracking.tracking_uri)
    dead = {"face.pid": str(_dead_pid()), "face.pid_start": "1"}

    def job(num, agg, value, finish=True):
        overrides = ["dataset.limit=5", f"method.particle_agg={agg}"]
        monkeypatch.setattr(sweeps, "hydra_job", lambda: _hydra_job(sweep, num, overrides))
        with Tracker(cfg_factory(*overrides), uses_llm=False) as t:
            if finish:
                t.log_metrics({"summary.turn_spearman_mean": value})
        return t.run_id

    # the first run, killed during job 1
    SweepRuns().on_multirun_start(master)
    first = [job(*jobs[0]), job(*jobs[1], finish=False)]
    parent = client.search_runs([client.get_experiment_by_name(cfg.tracking.experiment_name).experiment_id],
                                filter_string="tags.sweep_role = 'parent'")[0].info.run_id
    for run_id in (parent, first[1]):
        client.update_run(run_id, status="RUNNING")
        for k, v in dead.items():
            client.set_tag(run_id, k, v)
    job_dir = sweep / "1"
    job_dir.mkdir(parents=True)
    (job_dir / ".particle_scores.k1ll3d.tmp.jsonl").write_text("")

    # the rerun
    SweepRuns().on_multirun_start(master)
    assert client.get_run(parent).info.status == "RUNNING"  # reopened, this process's
    second = [job(*j) for j in jobs]
    job_cfg = OmegaConf.create({"hydra": {"mode": "RunMode.MULTIRUN", "runtime": {"output_dir": str(job_dir)}}})
    SweepRuns().on_job_end(job_cfg, JobReturn(status=JobStatus.COMPLETED))
    SweepRuns().on_multirun_end(master)

    exp = client.get_experiment_by_name(cfg.tracking.experiment_name).experiment_id
    children = client.search_runs([exp], filter_string=f"tags.mlflow.parentRunId = '{parent}'")
    assert sorted(r.info.run_id for r in children) == sorted(second)
    assert all(client.get_run(old).info.lifecycle_stage == "deleted" for old in first)
    assert [client.get_run(old).data.tags["face.replaced_by"] for old in first] == second
    assert client.get_run(parent).info.status == "FINISHED"
    assert (sweep / "sweep_report.md").read_text().startswith(
        "**particle_agg · reproduce_table2 sweep: 2 jobs (2 finished); the FACE authors' released judgements**")
    assert not list(job_dir.glob(".*.tmp*"))


@pytest.mark.slow
def test_a_sweep_killed_mid_job_and_run_again_counts_each_job_once(tmp_path, data_dir, mlflow_store):
    """scripts/run.py -m over two live jobs (scripted LLM), killed with SIGKILL while job 1 writes its particle
    scores, then the same command again: two child runs, the parent FINISHED, the report's "2 jobs (2 finished)",
    no temporary file in any job directory. The MLflow store starts as a copy of an empty one (creating it is not
    what this checks)."""
    import os
    import shutil
    import signal
    import subprocess
    import sys
    import time

    from mlflow.tracking import MlflowClient

    root = Path(__file__).resolve().parents[1]
    sweep = tmp_path / "sweep"
    shutil.copyfile(mlflow_store, tmp_path / "ml.db")
    cmd = [sys.executable, "scripts/run.py", "-m", "experiment=crsarena_main", "llm=fake", "dataset.limit=3",
           "aspects=[relevance]", "method.particles.source=released", "method.scoring.n=1,2",
           f"hydra.sweep.dir={sweep}", f"paths.results_dir={tmp_path / 'results'}",
           f"paths.cache_dir={tmp_path / 'cache'}", f"paths.data_dir={data_dir}", "paths.data_mirror=null",
           "dataset.download=false", f"tracking.tracking_uri=sqlite:///{tmp_path / 'ml.db'}"]
    first = subprocess.Popen(cmd, cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)
    deadline = time.monotonic() + 240
    while not list((sweep / "1").glob(".particle_scores.*.tmp.jsonl")) and first.poll() is None:
        assert time.monotonic() < deadline, "job 1 never started writing its particle scores"
        time.sleep(0.02)
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    assert list((sweep / "1").glob(".*.tmp*")), "killed too late: nothing left to clean"
    again = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    client = MlflowClient(f"sqlite:///{tmp_path / 'ml.db'}")
    every = client.search_runs([client.get_experiment_by_name("crsarena_main").experiment_id])
    [parent] = [r for r in every if r.data.tags.get("sweep_role") == "parent"]
    children = [r for r in every if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert sorted(r.data.tags["sweep_job"] for r in children) == ["0", "1"]
    assert parent.info.status == "FINISHED" and all(r.info.status == "FINISHED" for r in children)
    assert "2 jobs (2 finished)" in (sweep / "sweep_report.md").read_text()
    assert not list(sweep.rglob(".*.tmp*"))


# ---------------------------------------------------------------- artifacts follow the store (issue 31)
@pytest.mark.slow
def test_artifacts_of_a_run_tracked_to_a_store_elsewhere_go_beside_that_store(cfg_factory, tmp_path, monkeypatch):
    """``tracking.tracking_uri=sqlite:///<elsewhere>/m.db`` and no artifact_location: the experiment's artifacts
    are in <elsewhere>/mlruns, not in the project's (nor the working directory's) mlruns/."""
    from mlflow.tracking import MlflowClient

    elsewhere, cwd = tmp_path / "elsewhere", tmp_path / "cwd"
    elsewhere.mkdir()
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    cfg = cfg_factory(f"tracking.tracking_uri=sqlite:///{elsewhere / 'm.db'}", "tracking.artifact_location=null",
                      "tracking.experiment_name=elsewhere_artifacts")
    note = tmp_path / "note.txt"
    note.write_text("x")
    with Tracker(cfg) as t:
        t.log_artifacts([note])
    exp = MlflowClient(cfg.tracking.tracking_uri).get_experiment_by_name("elsewhere_artifacts")
    assert exp.artifact_location == (elsewhere / "mlruns").resolve().as_uri()
    assert [p.name for p in (elsewhere / "mlruns").rglob("note.txt")] == ["note.txt"]
    assert not (cwd / "mlruns").exists()
    assert not any(Path(cfg.paths.root_dir, "mlruns").rglob(f"*{t.run_id}*"))


# ---------------------------------------------------------------- what is an MLflow metric (issue 32)
def _correlations(levels=("turn", "dialogue", "system")):
    rows = [{"level": lv, "aspect": a, "split": sp, "coefficient": c, "value": 0.5, "ci_low": 0.4, "ci_high": 0.6}
            for lv in levels for a in ("relevance", "dialogue_overall") for sp in ("all", "redial")
            for c in ("spearman", "pearson", "kendall")]
    return pd.DataFrame(rows)


def test_crsarena_correlation_metrics_are_its_14_pooled_ones_told_apart_in_a_chart_title_width():
    """MLflow's chart view titles each chart by its metric's name, cut after about 26 characters (3.17.2, three
    charts a row): on CRSArena-Eval's committed correlations the run logs 14 names (not 42: one per split), no two
    alike in that part."""
    from helpers import ROOT

    from face.tracking.names import correlation_metrics

    res = pd.read_csv(ROOT / "results" / "reproduce_table2" / "correlations.csv")
    assert set(res["split"]) == {"all", "redial", "opendialkg"}
    names = list(correlation_metrics(res))
    assert len(names) == 14 and all(".all." in n for n in names)
    assert len({n[:26] for n in names}) == 14, sorted(names)


def test_the_headline_sorts_first_among_a_runs_metrics_and_its_names_differ_in_12_characters():
    from face.experiments.optimize_instructions import report_metrics
    from face.tracking.names import correlation_metrics, is_comparison, summary_metrics

    res = _correlations()
    logged = {**correlation_metrics(res), **summary_metrics(res)}
    metrics = sorted(logged)  # as MLflow's chart and compare views order them
    assert metrics[:3] == ["summary.dialogue_spearman_mean", "summary.system_spearman_mean",
                           "summary.turn_spearman_mean"]
    assert len(logged) == 3 + 6  # the pooled Spearman of each (level, aspect); splits, coefficients in the table
    row = {"aspect": "relevance", "level": "turn", "test_final_spearman": 0.3, "test_initial_spearman": 0.1,
           "dev_final_spearman": 0.2, "pulls": 6, "llm_calls": 10, "cost_usd": 0.0}
    opt = {k for k in report_metrics([row]) if is_comparison(k)}
    assert sorted(opt) == ["summary.final_heldout_spearman", "summary.gain_heldout_spearman",
                           "summary.initial_heldout_spearman", "vs_human.turn.relevance.heldout.spearman"]
    for names in (summary_metrics(res), [n for n in opt if n.startswith("summary.")]):
        assert len({n[:12] for n in names}) == len(names), names  # distinct at a runs-table column's width


@pytest.mark.slow
@pytest.mark.usefixtures("mlflow_store")
def test_only_the_headline_and_correlations_are_mlflow_metrics_headline_first_the_rest_in_numbers_json(
        cfg_factory, tmp_path):
    from mlflow.tracking import MlflowClient

    cfg = cfg_factory()
    with Tracker(cfg, "reproduce_table2") as t:
        t.log_metrics({"vs_human.turn.relevance.all.spearman": 0.4, "estimate.score.calls": 100.0,
                       "llm_http_requests": 7})
        t.log_metrics({"summary.turn_spearman_mean": 0.3 + 0.6, "llm_cost_usd": 0.25, "table2.values_total": 126})
    client = MlflowClient(cfg.tracking.tracking_uri)
    run = client.get_run(t.run_id)
    # shown without float noise (0.3 + 0.6 is 0.8999999999999999): rounded to 6 decimals
    assert run.data.metrics == {"summary.turn_spearman_mean": 0.9, "vs_human.turn.relevance.all.spearman": 0.4}
    # logged last, stored first: the compare view's parallel-coordinates plot opens on a run's first metric
    assert list(run.data.metrics) == ["summary.turn_spearman_mean", "vs_human.turn.relevance.all.spearman"]
    got = Path(client.download_artifacts(t.run_id, "numbers.json", str(tmp_path)))
    import json

    assert json.loads(got.read_text()) == {"estimate.score.calls": 100.0, "llm_cost_usd": 0.25,
                                           "llm_http_requests": 7.0, "table2.values_total": 126.0}


@pytest.mark.slow
@pytest.mark.usefixtures("mlflow_store")
def test_plain_reruns_get_a_number_an_explicit_run_name_is_kept(cfg_factory):
    names = []
    for _ in range(3):
        with Tracker(cfg_factory(), "reproduce_table2 limit=3") as t:
            names.append(t.run_name)
    with Tracker(cfg_factory("tracking.run_name=mine")) as t:
        names.append(t.run_name)
    with Tracker(cfg_factory("tracking.run_name=mine")) as t:
        names.append(t.run_name)
    assert names == ["reproduce_table2 limit=3", "reproduce_table2 limit=3 #2", "reproduce_table2 limit=3 #3",
                     "mine", "mine"]


def test_the_sweep_report_is_narrow_enough_for_mlflows_description_panel():
    """Short column names, 3 decimals, mean ± sd in one cell: no line of the 4-job report's tables over 60
    characters (MLflow's description panel wraps nothing inside a table: a wider one is cut at its right edge), and
    fixed-width tables (it draws Markdown tables without space between the columns)."""
    runs = pd.DataFrame([{"run_id": f"r{i}", "tags.mlflow.runName": f"alpha={a} beam={b} · optimize_instructions",
                          "status": "FINISHED", "params.optimizer.alpha": str(a), "params.optimizer.beam": str(b),
                          "metrics.summary.final_heldout_spearman": 0.1234567 * i,
                          "metrics.summary.initial_heldout_spearman": 0.05,
                          "metrics.summary.gain_heldout_spearman": 0.1}
                         for i, (a, b) in enumerate([(1, 1), (1, 2), (2, 1), (2, 2)])])
    swept = ["optimizer.alpha", "optimizer.beam"]
    jobs, spread, metrics = summarize(runs, swept)
    text = report_markdown("alpha×beam · optimize_instructions sweep: 4 jobs (4 finished); LLM scripted-model "
                           "(scripted)", jobs, spread, swept, metrics)
    tables = text.split("```text\n")[1:]
    assert len(tables) == 2 and max(len(line) for t in tables for line in t.split("```")[0].splitlines()) <= 60, text
    assert ("alpha  beam  jobs  final_heldout_spearman (mean ± sd)\n"
            "1      1     1     0.000\n") in text
    assert ("Every job (metrics: summary.…_heldout_spearman):\n\n```text\n"
            "job             status    final  gain   initial\n") in text
    assert "alpha=2 beam=1  finished  0.247  0.100  0.050\n" in text  # the job by its swept values


def test_a_run_on_the_released_judgements_names_them_as_its_judge_and_a_live_run_its_llm(cfg_factory):
    from face.tracking.names import judge_tag, run_params

    released = run_params(cfg_factory("experiment=reproduce_table2", tracking=False), uses_llm=False)
    assert (released["llm.model"], released["llm.backend"]) == ("face-released-judgements", "released")
    assert not any(k.startswith("llm.") for k in released if k not in ("llm.model", "llm.backend"))
    assert judge_tag(released) == {"judge": "the FACE authors' released judgements"}
    live = run_params(cfg_factory("experiment=crsarena_main", "llm=scripted", tracking=False), uses_llm=True)
    assert judge_tag(live) == {"judge": f"{live['llm.model']} (scripted)"} and live["llm.backend"] == "scripted"
    assert judge_tag({"method.name": "bleu"}) == {}  # neither called nor read a judge
