"""The optimizer run as an experiment on the scripted server: prompt versions and lineage read back from MLflow,
kill after a round and resume, references to an optimized set, the dry run's paper setting, optimize_selection, and
the sweep through Hydra (one MLflow parent run, a named child per job, the sweep report)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from face.optimize import checkpoint
from face.tracking.prompts import set_template

# ------------------------------------------------------------------ live loop on the scripted server

TINY = ["experiment=optimize_instructions", "aspects=[relevance]", "dataset.limit=8", "run_size=tiny",
        "optimizer.pulls=12", "optimizer.pull_minibatch=6", "optimizer.expand_minibatch=6", "optimizer.top_k=4"]


@pytest.fixture
def scripted():
    from face.testing.scripted import ScriptedServer

    with ScriptedServer() as info:
        yield info


def _server_overrides(server, cache):
    return ["llm=fake", "llm.server=null", f"llm.base_url={server.base_url}", f"paths.cache_dir={cache}"]



@pytest.mark.slow
@pytest.mark.usefixtures("mlflow_store")
def test_two_rounds_register_every_instruction_with_lineage(run_experiment, tmp_path):
    from mlflow.tracking import MlflowClient

    ran = run_experiment(*TINY, "llm=fake", "optimizer.rounds=2", "optimizer.alpha=2", "optimizer.beta=1",
                         "optimizer.beam=2")
    cfg, out = ran.cfg, ran.experiment
    assert len(out.tables["trajectory"].frame) == 2
    sets = json.loads(out.files["instructions"].read_text())
    assert 1 <= len(sets["relevance"]) <= 4 and all({"instruction_id", "text"} <= set(x) for x in sets["relevance"])
    client = MlflowClient(tracking_uri=cfg.tracking.tracking_uri)
    [run] = client.search_runs([client.get_experiment_by_name("optimize_instructions").experiment_id])
    assert run.info.status == "FINISHED"
    # the job's candidates under a name of their own: face-opt-<aspect>-run-<first 8 characters of the run id>
    name = f"face-opt-relevance-run-{run.info.run_id[:8]}"
    names = {p.name for p in client.search_prompts(max_results=100)}
    assert names == {name, "face-opt-relevance-set"}
    versions = {int(v.version): v for v in client.search_prompt_versions(name)}
    assert sorted(versions) == list(range(1, 1 + 2 + 4 + 1))  # initial; round 1: 1 parent × 2 × 1; round 2: 2 × 2
    assert len({v.template for v in versions.values()}) == len(versions)  # one version per distinct text
    by_cid = {v.tags["candidate_id"]: v for v in versions.values()}
    assert by_cid["initial"].tags["parent_version"] == "none" and int(by_cid["initial"].version) == 1
    assert int(client.get_prompt_version(name, "initial").version) == 1
    for v in versions.values():
        assert v.tags["aspect"] == "relevance" and v.tags["run_id"] == run.info.run_id
        assert v.commit_message.startswith(f"{run.info.run_name}: round {v.tags['round']}: ")  # the job first
        if v.tags["candidate_id"] != "initial":
            parent = versions[int(v.tags["parent_version"])]
            assert parent.tags["candidate_id"] == v.tags["parent_id"]
            assert int(parent.tags["round"]) < int(v.tags["round"])
            assert f"rewrite of v{parent.version} ({parent.tags['candidate_id']})" in v.commit_message
            assert v.tags["gradient_id"].startswith(f"r{v.tags['round']}:{v.tags['parent_id']}:g")
            assert v.template.startswith("Task: ") and "Step 1: " in v.template
    # the final set: @best is its first instruction, the set's version lists its members in rank order
    final = sets["relevance"]
    best = client.get_prompt_version(name, "best")
    assert best.template == final[0]["text"] and int(best.version) == final[0]["prompt_version"]
    assert client.get_prompt(name).tags["run"] == run.info.run_id
    assert not {"round", "candidate_id", "sha256"} & set(client.get_prompt(name).tags)  # per version only
    job_set = client.get_prompt_version("face-opt-relevance-set", f"run-{run.info.run_id[:8]}")
    assert run.data.tags["prompt.relevance"] == f"face-opt-relevance-set@{job_set.version}"
    assert job_set.template == set_template([(x["instruction_id"], x["text"]) for x in final])
    assert job_set.tags["members"] == ",".join(f"{x['instruction_id']}:v{x['prompt_version']}" for x in final)
    assert run.data.tags["prompt.relevance"].startswith("face-opt-relevance-set@")
    arts = [f.path for f in client.list_artifacts(run.info.run_id, "results")]
    assert "results/instructions.json" in arts
    # MLflow metrics: the headline and the aspect's held-out Spearman; every other number in numbers.json
    assert set(run.data.metrics) == {"summary.final_heldout_spearman", "summary.initial_heldout_spearman",
                                     "summary.gain_heldout_spearman", "vs_human.turn.relevance.heldout.spearman"}
    numbers = json.loads(Path(client.download_artifacts(run.info.run_id, "numbers.json", str(tmp_path))).read_text())
    assert round(numbers["heldout.relevance.test_final_spearman"], 6) == run.data.metrics[
        "vs_human.turn.relevance.heldout.spearman"] and numbers["optimizer.llm_calls"] > 0  # 6 decimals in MLflow
    assert "estimate.this_run.total.samples" in numbers and numbers["estimate.http_requests"] > 0

    # use the result: by file, by registry name@version, by run id
    from face.datasets.crsarena import ASPECTS
    from face.pipeline.method import Face

    ref = run.data.tags["prompt.relevance"]
    for spec in ({"source": "file", "file": str(out.files["instructions"])}, {"source": "mlflow", "ref": ref},
                 {"source": "mlflow", "ref": "face-opt-{aspect}-set@latest"},
                 {"source": "mlflow", "ref": f"runs:/{run.info.run_id}"}):
        got = Face(instructions=spec).instruction_set(tmp_path, ASPECTS["relevance"])
        assert [i.text for i in got] == [x["text"] for x in sets["relevance"]], spec
    with pytest.raises(ValueError, match="needs"):
        Face(instructions={"source": "mlflow"})


@pytest.mark.slow
def test_kill_after_round_one_and_resume_sends_nothing_twice(run_experiment, scripted, tmp_path):
    common = [*TINY, "optimizer.rounds=2", "optimizer.alpha=2", "optimizer.beta=1", "optimizer.beam=2",
              "tracking=none"]
    from face.testing.scripted import ScriptedServer

    def run(server, cache: str, *extra: str, run_dir: str):
        return run_experiment(*common, *_server_overrides(server, tmp_path / cache), *extra, tracking=False,
                              run_dir=run_dir).experiment

    with ScriptedServer() as ref_info:  # the uninterrupted run, on its own server and cache
        ref = run(ref_info, "cache_ref", run_dir="ref")
    srv = scripted
    first = run(srv, "cache", "optimizer.stop_after_round=1", run_dir="first")
    assert first.stopped
    ckpt = first.files["checkpoint"]
    assert checkpoint.load(ckpt, "relevance").round == 1
    server = _server_of(srv)
    sent_before = {r["hash"] for r in server.ok_requests()}
    n_before = len(server.log)
    with pytest.raises(Exception, match="another configuration"):
        run(srv, "cache", f"optimizer.resume={ckpt}", "optimizer.alpha=1", run_dir="other")
    resumed = run(srv, "cache", f"optimizer.resume={ckpt}", run_dir="resumed")
    new = server.log[n_before:]
    assert new, "round 2 needs new requests"
    assert not ({r["hash"] for r in new} & sent_before), "a request answered before was sent again"
    assert json.loads(resumed.files["instructions"].read_text()) == json.loads(ref.files["instructions"].read_text())
    pd.testing.assert_frame_equal(resumed.results.drop(columns=["llm_calls", "cost_usd"]),
                                  ref.results.drop(columns=["llm_calls", "cost_usd"]))


_SERVERS: dict = {}


def _server_of(info):
    return _SERVERS[info.base_url]


@pytest.fixture(autouse=True)
def _track_servers(monkeypatch):
    from face.testing import scripted as mod

    orig = mod.ScriptedServer.start

    def start(self):
        info = orig(self)
        _SERVERS[info.base_url] = self
        return info

    monkeypatch.setattr(mod.ScriptedServer, "start", start)
    yield
    _SERVERS.clear()


def test_dry_run_prints_the_paper_setting_and_sends_nothing(run_experiment, capsys):
    ran = run_experiment(*TINY, "llm=fake", "llm.dry_run=true", tracking=False)
    out = ran.experiment
    assert out.dry_run
    text = capsys.readouterr().out
    assert "paper setting" in text and "per round" in text and "total" in text
    costs = out.extra["costs"]
    paper = costs[(costs["setting"] == "paper setting")].set_index("stage")
    assert paper.loc["gradients / round", "samples"] == 16 and paper.loc["rewrites / round", "samples"] == 64


@pytest.mark.slow
def test_optimize_selection_small(run_experiment):
    ran = run_experiment("experiment=optimize_selection", "aspects=[relevance,efficiency]", "selection.repeats=2",
                         "selection.budgets=[8,32]", "selection.ucb_cs=[1.0]", "optimizer.pulls=32", tracking=False,)
    out = ran.experiment
    head = out.tables["headline"].frame.set_index("aspect")
    assert set(head.index) == {"relevance", "efficiency"}
    assert (head["best"] >= head["ucb"] - 1e-9).all() and (head["best"] >= head["full"] - 1e-9).all()
    assert (head["ucb_pulls"] == 32).all()
    runs = out.tables["selection_runs"].frame
    assert (runs["regret"] >= -1e-9).all()
    assert {"ucb", "uniform", "random", "full"} <= set(runs["policy"])
    assert Path(out.out_dir, "headline.csv").exists() and Path(out.out_dir, "figures",
                                                                  "heldout_vs_budget.png").exists()


# ------------------------------------------------------------------ sweeps (slow: 4 jobs through Hydra)

@pytest.mark.slow
def test_multirun_is_one_parent_run_with_a_named_child_per_job_and_the_sweep_report(optimizer_sweep):
    """The sweep of issue 22 (alpha=1,2 beta=1 beam=1,2: conftest's OPTIMIZER_SWEEP, through ``scripts/run.py -m``
    from the repository): one MLflow parent run named after the swept keys, 4 FINISHED children named by alpha,
    beta and beam, each with the headline summary metric; the report (read back from MLflow) in the sweep directory
    and on the parent; nothing written into the repository."""
    import pandas as pd
    from mlflow.tracking import MlflowClient

    assert optimizer_sweep.code == 0, optimizer_sweep.err[-3000:]
    uri = optimizer_sweep.uri
    client = MlflowClient(tracking_uri=uri)
    runs = client.search_runs([client.get_experiment_by_name("optimize_instructions").experiment_id])
    [parent] = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert len(runs) == 5 and len(children) == 4
    assert parent.info.run_name == "alpha×beam · optimize_instructions sweep"
    assert parent.info.status == "FINISHED" and all(r.info.status == "FINISHED" for r in children)
    names = sorted(r.info.run_name for r in children)
    for (a, b), name in zip([(1, 1), (1, 2), (2, 1), (2, 2)], names):
        assert name == f"a={a} b={b} · optimize_instructions"  # what differs first, within the default width
    for r in children:
        assert {"summary.final_heldout_spearman", "summary.initial_heldout_spearman"} <= set(r.data.metrics)
        assert r.data.params["optimizer.alpha"] in ("1", "2")  # integers as integers, not 1.0
        assert [d.dataset.name for d in r.inputs.dataset_inputs] == ["CRSArena-Eval"]
    assert not any(k.startswith("llm_score") for k in children[0].data.metrics)  # per stage: in the artifact
    # the report: from the children, in the sweep directory and on the parent
    sweep = optimizer_sweep.sweep
    jobs = pd.read_csv(sweep / "sweep_jobs.csv")
    by_name = {r.info.run_name: r.data.metrics["summary.final_heldout_spearman"] for r in children}
    assert dict(zip(jobs["run"], jobs["summary.final_heldout_spearman"])) == pytest.approx(by_name)
    # the parent's metric: the best job's, named sweep_best.* (sorting after the jobs' summary.*: the chart view
    # opens on those), with that job's name (of tied jobs, one of them)
    top = max(by_name.values())
    assert parent.data.metrics["sweep_best.final_heldout_spearman"] == pytest.approx(top, abs=1e-6)
    assert by_name[parent.data.tags["sweep_best.final_heldout_spearman.job"]] == pytest.approx(top, abs=1e-6)
    assert not any(k.startswith("summary.") for k in parent.data.metrics)
    every = sorted({*parent.data.metrics, *(k for r in children for k in r.data.metrics)})
    assert every[0] == "summary.final_heldout_spearman"  # MLflow's chart view and Compare open on the first name
    assert {k: parent.data.params[k] for k in ("optimizer.alpha", "optimizer.beam", "optimizer.beta", "llm")} == {
        "optimizer.alpha": "1,2", "optimizer.beam": "1,2", "optimizer.beta": "1", "llm": "fake"}
    report = (sweep / "sweep_report.md").read_text()
    assert "scripted-model (scripted)" in report
    # where the researcher reads the sweep: which set @best names, and that it is the held-out headline's choice
    assert "- `face-opt-relevance-set`: @best = v" in report and "summary.final_heldout_spearman" in report
    assert "Prompt Registry" in parent.data.tags["mlflow.note.content"]
    logged = {f.path for f in client.list_artifacts(parent.info.run_id, "sweep_report")}
    assert {"sweep_report/sweep_report.md", "sweep_report/sweep_jobs.csv", "sweep_report/sweep_report.png"} <= logged
    assert client.get_experiment_by_name("optimize_instructions").tags[
        "mlflow.experiment.primaryMetric.name"] == "summary.final_heldout_spearman"
    assert all((sweep / n / "results" / "heldout.csv").exists() for n in "0123")  # each job its own tables
    assert optimizer_sweep.git_after == optimizer_sweep.git_before  # no job wrote results/ (job 0 once did)
