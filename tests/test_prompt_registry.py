"""The MLflow Prompt Registry holds one version per distinct text of each prompt name, a rewording under a name of
its own, and each run links exactly the versions it sent (read back from the store, compared by the texts' sha256
computed here)."""

from __future__ import annotations

import hashlib
import importlib
import json
from collections import Counter
from types import SimpleNamespace

import pytest

from face.prompt_registry import best_version


def _run(cfg):
    return importlib.import_module(cfg.runner).run(cfg)


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _linked(client, run) -> set[tuple[str, int]]:
    return {(x["name"], int(x["version"])) for x in json.loads(client.get_run(run).data.tags["mlflow.linkedPrompts"])}


@pytest.mark.slow
@pytest.mark.usefixtures("mlflow_store")
def test_three_no_particle_runs_and_a_main_run_leave_one_version_per_distinct_text(cfg_factory):
    # the registered texts are the instruction sets: one sample per particle and instruction sends the same ones
    from mlflow.tracking import MlflowClient

    common = ["llm=scripted", "dataset.limit=3", "aspects=[relevance,dialogue_overall]", "method.scoring.n=1",
              "method.particles.k=1"]
    runs = []
    for task in ("crsarena_main", "ablation_no_particles", "crsarena_main", "ablation_no_particles",
                 "ablation_no_particles"):
        cfg = cfg_factory(f"experiment={task}", *common)
        _run(cfg)
        client = MlflowClient(tracking_uri=cfg.tracking.tracking_uri)
        [latest] = client.search_runs([client.get_experiment_by_name(task).experiment_id],
                                      order_by=["attributes.start_time DESC"], max_results=1)
        runs.append((task, latest.info.run_id))
    names = {p.name for p in client.search_prompts(max_results=100)}
    assert names == {"face-relevance-released", "face-dialogue-overall-released",
                     "face-relevance-released-whole-turn", "face-dialogue-overall-released-whole-dialogue"}
    for name in names:
        versions = client.search_prompt_versions(name)
        assert len(versions) == 1, (name, [v.version for v in versions])  # every run sent the same text
        assert Counter(_sha(v.template) for v in versions).most_common(1)[0][1] == 1
        assert versions[0].tags["sha256"] == _sha(versions[0].template)
        shared = client.get_prompt(name).tags  # the prompt's own tags: what holds for every version
        assert "sha256" not in shared and shared["wording"] == ("as written" if name.endswith("released") else
                                                                name.split("released-")[1])
    reworded = client.get_prompt_version("face-relevance-released-whole-turn", 1).template
    assert "an assistant turn" in reworded and "a assistant" not in reworded and "nugget" not in reworded.lower()
    assert "a dialogue" in client.get_prompt_version("face-dialogue-overall-released-whole-dialogue", 1).template
    original = client.get_prompt_version("face-relevance-released", 1).template
    assert "a nugget" in original
    for task, run in runs:
        suffix = {"crsarena_main": ("", ""), "ablation_no_particles": ("-whole-turn", "-whole-dialogue")}[task]
        assert _linked(client, run) == {(f"face-relevance-released{suffix[0]}", 1),
                                        (f"face-dialogue-overall-released{suffix[1]}", 1)}, task


def test_best_set_is_the_highest_finite_dev_correlation_oldest_of_equals():
    def v(version, **tags):
        return SimpleNamespace(version=str(version), tags=tags)

    versions = [v(5, dev_spearman="0.2000"), v(4, dev_spearman="nan"), v(3, dev_spearman="0.3000"),
                v(2), v(1, dev_spearman="0.3000"), v(6, dev_spearman="n/a")]
    assert best_version(versions, "dev_spearman") == 1
    assert best_version([v(1, dev_spearman="nan"), v(2)], "dev_spearman") is None


def test_llm_settings_are_dropped_from_the_label_of_a_run_without_llm(cfg_factory):
    from face.experiments.common import non_default_settings, without_llm_settings

    cfg = cfg_factory("experiment=reproduce_table2", "llm=scripted", "llm.model=other", "run_size=tiny",
                      "dataset.limit=3", tracking=False)
    settings = non_default_settings(cfg)
    assert settings["llm"] == "scripted" and settings["llm.model"] == "other"
    assert without_llm_settings(settings) == {"dataset.limit": "3"}


@pytest.mark.slow
@pytest.mark.usefixtures("mlflow_store")
def test_a_run_without_llm_names_no_llm_setting_in_its_run_name_or_captions(cfg_factory):
    from mlflow.tracking import MlflowClient

    cfg = cfg_factory("experiment=reproduce_table2", "llm=scripted", "llm.model=other", "run_size=tiny",
                      "dataset.limit=3", "metaeval.n_boot=0")
    out = _run(cfg)
    client = MlflowClient(tracking_uri=cfg.tracking.tracking_uri)
    [run] = client.search_runs([client.get_experiment_by_name("reproduce_table2").experiment_id])
    assert run.info.run_name == "reproduce_table2 limit=3 n_boot=0"
    captions = [p.read_text(encoding="utf-8").split("\n\n")[0] for p in out["out_dir"].glob("*.md")]
    assert captions and all("limit=3" in c and "llm" not in c and "run_size" not in c for c in captions), captions


@pytest.mark.slow
def test_each_sweep_job_files_its_candidates_under_its_own_prompt_naming_the_job(tmp_path, mirror, mlflow_store):
    """Two optimizer jobs of one Hydra multirun (alpha=1,2): two candidate prompts, one per job's run, each saying
    which sweep job and overrides it holds; the same initial text is v1 of each; the sets share one name."""
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    from mlflow.tracking import MlflowClient

    root = Path(__file__).resolve().parents[1]
    shutil.copyfile(mlflow_store, tmp_path / "m.db")  # an empty store: what the sweep registers in it is checked
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    res = subprocess.run([sys.executable, "scripts/run.py", "-m", "experiment=optimize_instructions",
                          "aspects=[relevance]", "dataset.limit=8", "run_size=tiny", "optimizer.pulls=6",
                          "optimizer.pull_minibatch=6", "optimizer.expand_minibatch=6", "optimizer.top_k=2",
                          "llm=scripted", "optimizer.rounds=1", "optimizer.alpha=1,2", "optimizer.beta=1",
                          "optimizer.beam=1", f"tracking.tracking_uri={uri}",
                          f"tracking.artifact_location={tmp_path / 'mlruns'}", f"paths.cache_dir={tmp_path / 'cache'}",
                          f"paths.data_dir={tmp_path / 'data'}", f"paths.data_mirror={mirror}",
                          f"hydra.sweep.dir={tmp_path / 'sweep'}"],
                         cwd=root, capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    client = MlflowClient(tracking_uri=uri)
    runs = [r for r in client.search_runs([client.get_experiment_by_name("optimize_instructions").experiment_id])
            if "prompt.relevance" in r.data.tags]
    assert len(runs) == 2
    names = {p.name for p in client.search_prompts(max_results=100)}
    assert names == {"face-opt-relevance-set", *(f"face-opt-relevance-run-{r.info.run_id[:8]}" for r in runs)}
    initial = set()
    for r in runs:
        name = f"face-opt-relevance-run-{r.info.run_id[:8]}"
        tags = client.get_prompt(name).tags
        alpha = r.data.params["optimizer.alpha"]
        assert tags["run_id"] == r.info.run_id and tags["sweep_job"] == r.data.tags["sweep_job"]
        assert f"optimizer.alpha={alpha}" in tags["sweep_overrides"] and f"sweep job {tags['sweep_job']}" in tags["job"]
        versions = client.search_prompt_versions(name)
        assert len(versions) == 1 + int(alpha)  # the initial instruction and alpha rewrites of it (beta = beam = 1)
        assert len({v.template for v in versions}) == len(versions)
        v1 = client.get_prompt_version(name, "initial")
        assert v1.version == 1 and v1.tags["round"] == "0"
        initial.add(v1.template)
        job_set = client.get_prompt_version("face-opt-relevance-set", f"run-{r.info.run_id[:8]}")
        assert r.data.tags["prompt.relevance"] == f"face-opt-relevance-set@{job_set.version}"
    assert len(initial) == 1  # one start text, registered once per job, not twice under one name


@pytest.mark.slow
@pytest.mark.usefixtures("mlflow_store")
def test_a_text_any_earlier_version_holds_is_not_registered_again_across_pages(cfg_factory, monkeypatch):
    """A store written before versions were compared (v1 and v2 the same text) and more versions than one page of
    the registry query: each known text gives its oldest version; only a new text gives a new version."""
    from mlflow import genai
    from mlflow.tracking import MlflowClient

    from face.tracking import Tracker

    monkeypatch.setattr("face.tracking._PAGE", 2)
    tracker = Tracker(cfg_factory("experiment=reproduce_table2"))
    texts = ["first", "first", "second", "third", "fourth"]
    for t in texts:
        genai.register_prompt(name="face-x-y", template=t)
    for t, oldest in (("first", 1), ("second", 3), ("fourth", 5)):
        assert int(tracker.register_prompt("face-x-y", t, "m", {}).version) == oldest
    new = tracker.register_prompt("face-x-y", "fifth", "m", {"aspect": "x"})
    assert int(new.version) == 6 and new.tags["sha256"] == _sha("fifth") and new.tags["aspect"] == "x"
    assert len(MlflowClient().search_prompt_versions("face-x-y", max_results=50)) == 6


@pytest.mark.slow
@pytest.mark.usefixtures("mlflow_store")
def test_optimizer_sets_are_aliased_per_job_and_best_by_dev_correlation(cfg_factory):
    """Two jobs' final sets (no LLM: candidates written by hand): each job's candidates under its own prompt with
    @initial / @best, each set @run-<id>, and the set @best the one with the higher dev Spearman."""
    from mlflow.tracking import MlflowClient

    from face.optimize.checkpoint import Candidate
    from face.prompt_registry import PromptLog, load_reference
    from face.tracking import Tracker

    cfg = cfg_factory("experiment=optimize_instructions", "llm=scripted")
    refs, names = [], []
    for job, dev in (("a", "0.2500"), ("b", "0.5000")):
        with Tracker(cfg, f"job {job}") as tracker:
            log = PromptLog(tracker, "relevance")
            initial = Candidate("initial", "Rate it.")
            log.register(initial, None)
            kids = [Candidate(f"r1c{i}", f"Rate it, {job} way {i}.", "initial", f"r1:initial:g{i}", 1, "rewrite")
                    for i in (1, 2)]
            for k in kids:
                log.register(k, initial)
            refs.append(log.register_set([kids[1], initial], {"dev_spearman": dev, "test_spearman": "0.1000"}))
            names.append((log.name, tracker.run_id))
    client = MlflowClient(tracking_uri=cfg.tracking.tracking_uri)
    for (name, run_id), ref in zip(names, refs):
        assert name == f"face-opt-relevance-run-{run_id[:8]}"
        assert client.get_prompt_version(name, "initial").template == "Rate it."
        best = client.get_prompt_version(name, "best")
        assert int(best.version) == 3 and best.tags["parent_version"] == "1" and best.tags["round"] == "1"
        assert "round 1: rewrite of v1 (initial) by gradient r1:initial:g2" in best.commit_message
        assert client.get_prompt(name).tags["final_versions"] == "v3,v1"
        job_set = client.get_prompt_version("face-opt-relevance-set", f"run-{run_id[:8]}")
        assert ref == f"face-opt-relevance-set@{job_set.version}"
    assert [int(r.rsplit("@", 1)[1]) for r in refs] == [1, 2]
    assert int(client.get_prompt_version("face-opt-relevance-set", "best").version) == 2  # dev 0.5 > 0.25
    got = load_reference("face-opt-{aspect}-set@best", "relevance")
    assert [(i.instruction_id, i.text) for i in got] == [("r1c2", "Rate it, b way 2."), ("initial", "Rate it.")]
