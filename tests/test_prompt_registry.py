"""The MLflow Prompt Registry holds one version per distinct text of each prompt name, a rewording under a name of
its own, and each run links exactly the versions it sent (read back from the store, compared by the texts' sha256
computed here). The optimizer files a sweep's candidates under one prompt per aspect, each version saying which
job wrote it, and its final sets under ``face-opt-<aspect>-set`` with a loadable ``@best``."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from types import SimpleNamespace

import pytest

from face.tracking.prompts import best_version


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _linked(client, run) -> set[tuple[str, int]]:
    return {(x["name"], int(x["version"])) for x in json.loads(client.get_run(run).data.tags["mlflow.linkedPrompts"])}


@pytest.mark.slow
@pytest.mark.usefixtures("mlflow_store")
def test_three_no_particle_runs_and_a_main_run_leave_one_version_per_distinct_text(run_experiment):
    # the registered texts are the instruction sets: one sample per particle and instruction sends the same ones
    from mlflow.tracking import MlflowClient

    common = ["llm=fake", "dataset.limit=3", "aspects=[relevance,dialogue_overall]", "method.scoring.n=1",
              "method.particles.k=1"]
    runs = []
    for task in ("crsarena_main", "ablation_no_particles", "crsarena_main", "ablation_no_particles",
                 "ablation_no_particles"):
        ran = run_experiment(f"experiment={task}", *common, run_dir=task)
        cfg = ran.cfg
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
    from face.experiments.common import non_default_settings, prepare

    cfg = cfg_factory("experiment=reproduce_table2", "llm=scripted", "llm.model=other", "run_size=tiny",
                      "dataset.limit=3", tracking=False)  # composed only: nothing is sent
    settings = non_default_settings(cfg)
    assert settings["llm"] == "scripted" and settings["llm.model"] == "other"
    assert prepare(cfg).label == {"dataset.limit": "3"}  # the released scores' run: the same under any LLM


@pytest.mark.slow
@pytest.mark.usefixtures("mlflow_store")
def test_a_run_without_llm_names_no_llm_setting_in_its_run_name_or_captions(run_experiment):
    from mlflow.tracking import MlflowClient

    ran = run_experiment("experiment=reproduce_table2", "llm=fake", "llm.model=other", "run_size=tiny",
                         "dataset.limit=3", "metaeval.n_boot=0")
    cfg, out = ran.cfg, ran.experiment
    client = MlflowClient(tracking_uri=cfg.tracking.tracking_uri)
    [run] = client.search_runs([client.get_experiment_by_name("reproduce_table2").experiment_id])
    assert run.info.run_name == "limit=3 n_boot=0 · reproduce_table2"
    captions = [p.read_text(encoding="utf-8").split("\n\n")[0] for p in out.out_dir.glob("*.md")]
    assert captions and all("limit=3" in c and "llm" not in c and "run_size" not in c for c in captions), captions


@pytest.mark.slow
def test_a_sweep_files_every_jobs_candidates_under_one_prompt_each_version_naming_its_jobs(optimizer_sweep):
    """The four optimizer jobs of one Hydra multirun (alpha=1,2 x beam=1,2: conftest's OPTIMIZER_SWEEP, the README
    tour's sweep with one round and small minibatches): one candidates prompt for the sweep, whose versions' commit
    messages start with the job's swept values and whose ``jobs`` tags name every job that wrote the text; each
    job's best candidate is aliased by its values; the sets share one name, each aliased by its job's values; the
    candidates' prompt names the keys the sweep swept."""
    from mlflow.tracking import MlflowClient

    assert optimizer_sweep.code == 0, optimizer_sweep.err[-3000:]
    uri = optimizer_sweep.uri
    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name("optimize_instructions").experiment_id
    runs = [r for r in client.search_runs([exp]) if "prompt.relevance" in r.data.tags]
    [parent] = [r for r in client.search_runs([exp]) if r.data.tags.get("sweep_role") == "parent"]
    assert len(runs) == 4
    name = f"face-opt-relevance-sweep-alpha-beam-{parent.info.run_id[:8]}"
    assert {p.name for p in client.search_prompts(max_results=100)} == {"face-opt-relevance-set", name}
    assert client.get_prompt(name).tags["sweep"] == parent.info.run_id
    versions = client.search_prompt_versions(name)
    assert len({v.template for v in versions}) == len(versions)  # one version per distinct text
    labels = [f"alpha={a} beam={b}" for a in (1, 2) for b in (1, 2)]
    assert client.get_prompt_version(name, "initial").tags["jobs"] == "; ".join(labels)  # one start text
    for r in runs:
        alpha, beam = r.data.params["optimizer.alpha"], r.data.params["optimizer.beam"]
        label = f"alpha={alpha} beam={beam}"
        # the run name abbreviates the keys (the full label would not show in the runs table's column)
        assert label in labels and r.info.run_name == f"a={alpha} b={beam} · optimize_instructions"
        mine = [v for v in versions if label in v.tags["jobs"].split("; ")]
        assert len(mine) == 1 + int(r.data.params["optimizer.alpha"])  # the start and alpha rewrites of it
        # the job that wrote a text first leads its commit message; a later job's is in the jobs tag
        assert all(v.commit_message.startswith(v.tags["jobs"].split("; ")[0] + ": ") for v in mine)
        best = client.get_prompt_version(name, f"best-{label.replace('=', '').replace(' ', '-')}")
        assert label in best.tags["jobs"]
        job_set = client.get_prompt_version("face-opt-relevance-set", f"alpha{alpha}-beam{beam}")
        assert r.data.tags["prompt.relevance"] == f"face-opt-relevance-set@{job_set.version}"
        assert label in job_set.tags["jobs"].split("; ")
    versions = [client.get_prompt_version("face-opt-relevance-set", v.version)
                for v in client.search_prompt_versions("face-opt-relevance-set")]
    aliases = {a for v in versions for a in v.aliases}
    assert aliases == {"best", *(f"alpha{a}-beam{b}" for a in (1, 2) for b in (1, 2))}  # none opaque (run-…)


@pytest.mark.slow
def test_the_readme_sweep_leaves_a_best_set_that_agrees_with_the_best_held_out_headline(optimizer_sweep):
    """The README tour's sweep (dataset.limit=8, alpha=1,2 x beam=1,2; one round and small minibatches here to stay
    quick, the same split: conftest's OPTIMIZER_SWEEP): its per-system dev share rounds to nothing, so the dev fold
    is drawn from the optimization conversations and said. ``@best`` loads through MLflow's own ``load_prompt`` and
    is the set of a job with the highest held-out Spearman the runs table shows (not the one-conversation dev
    fold's choice); the prompt's ``best`` tag says so."""
    import mlflow
    from mlflow.tracking import MlflowClient

    assert optimizer_sweep.code == 0, optimizer_sweep.err[-3000:]
    uri = optimizer_sweep.uri
    assert "dev = 1 of them drawn at random" in optimizer_sweep.out
    mlflow.set_tracking_uri(uri)
    best = mlflow.genai.load_prompt("prompts:/face-opt-relevance-set@best")
    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name("optimize_instructions").experiment_id
    jobs = [r for r in client.search_runs([exp]) if "prompt.relevance" in r.data.tags]
    heldout = {r.data.tags["prompt.relevance"]: r.data.metrics["vs_human.turn.relevance.heldout.spearman"]
               for r in jobs}
    top = max(heldout.values())
    assert heldout[f"face-opt-relevance-set@{best.version}"] == pytest.approx(top, abs=5e-5)  # tags hold 4 decimals
    assert len({v.tags["heldout"] for v in client.search_prompt_versions("face-opt-relevance-set")}) == 1
    why = client.get_prompt("face-opt-relevance-set").tags["best"]
    assert why.startswith(f"@best = v{best.version} (") and "held-out Spearman" in why
    assert len([p for p in client.search_prompts(max_results=100) if "relevance" in p.name]) == 2  # set, sweep


@pytest.mark.slow
@pytest.mark.usefixtures("mlflow_store")
def test_a_text_any_earlier_version_holds_is_not_registered_again_across_pages(cfg_factory, monkeypatch):
    """A store written before versions were compared (v1 and v2 the same text) and more versions than one page of
    the registry query: each known text gives its oldest version; only a new text gives a new version."""
    from mlflow import genai
    from mlflow.tracking import MlflowClient

    from face.tracking import Tracker
    from face.tracking.prompts import register_prompt

    monkeypatch.setattr("face.tracking.prompts._PAGE", 2)
    cfg = cfg_factory("experiment=reproduce_table2")
    Tracker(cfg)  # points MLflow at the store
    uri = cfg.tracking.tracking_uri
    texts = ["first", "first", "second", "third", "fourth"]
    for t in texts:
        genai.register_prompt(name="face-x-y", template=t)
    for t, oldest in (("first", 1), ("second", 3), ("fourth", 5)):
        assert int(register_prompt("face-x-y", t, "m", {}, uri).version) == oldest
    new = register_prompt("face-x-y", "fifth", "m", {"aspect": "x"}, uri)
    assert int(new.version) == 6 and new.tags["sha256"] == _sha("fifth") and new.tags["aspect"] == "x"
    assert len(MlflowClient().search_prompt_versions("face-x-y", max_results=50)) == 6


@pytest.mark.slow
@pytest.mark.usefixtures("mlflow_store")
def test_optimizer_sets_are_aliased_per_job_and_best_by_held_out_correlation_on_one_fold(cfg_factory):
    """Four jobs' final sets (no LLM: candidates written by hand): each job's candidates under its own prompt with
    @initial / @best, each set @run-<id>; the set @best the one with the highest held-out Spearman among the sets on
    the latest job's held-out fold (job b's 0.3 beats a's 0.1; c's 0.9 on another fold does not count), and no @best
    at all once a job's held-out fold is too small (d: 4 items), the prompt's ``best`` tag saying why."""
    from mlflow.tracking import MlflowClient

    from face.optimize.checkpoint import Candidate
    from face.optimize.prompt_log import PromptLog
    from face.tracking import Tracker
    from face.tracking.prompts import load_reference

    cfg = cfg_factory("experiment=optimize_instructions", "llm=fake")
    client = MlflowClient(tracking_uri=cfg.tracking.tracking_uri)
    refs, names, best = [], [], []
    for job, test, fold, items in (("a", "0.1000", "f1", 24), ("b", "0.3000", "f1", 24), ("c", "0.9000", "f2", 24),
                                   ("d", "0.9500", "f1", 4)):
        with Tracker(cfg, f"job {job}") as tracker:
            log = PromptLog(tracker, "relevance")
            initial = Candidate("initial", "Rate it.")
            log.register(initial, None)
            kids = [Candidate(f"r1c{i}", f"Rate it, {job} way {i}.", "initial", f"r1:initial:g{i}", 1, "rewrite")
                    for i in (1, 2)]
            for k in kids:
                log.register(k, initial)
            extra = {"dev_spearman": "0.5000", "test_spearman": test, "test_items": str(items), "heldout": fold}
            refs.append(log.register_set([kids[1], initial], extra))
            names.append((log.name, tracker.run_id))
        if job == "b":
            got = load_reference("face-opt-{aspect}-set@best", "relevance")
            assert [(i.instruction_id, i.text) for i in got] == [("r1c2", "Rate it, b way 2."), ("initial", "Rate it.")]
        try:
            best.append(int(client.get_prompt_version("face-opt-relevance-set", "best").version))
        except Exception:  # no such alias
            best.append(None)
    for (name, run_id), ref, job in zip(names, refs, "abcd"):
        assert name == f"face-opt-relevance-run-{run_id[:8]}"
        assert client.get_prompt_version(name, "initial").template == "Rate it."
        cand = client.get_prompt_version(name, "best")
        assert int(cand.version) == 3 and cand.tags["parent_version"] == "1" and cand.tags["round"] == "1"
        assert cand.commit_message == f"job {job}: round 1: rewrite of v1 (initial) by gradient r1:initial:g2 -> r1c2"
        assert client.get_prompt(name).tags["run"] == run_id
        job_set = client.get_prompt_version("face-opt-relevance-set", f"run-{run_id[:8]}")
        assert ref == f"face-opt-relevance-set@{job_set.version}"
    assert [int(r.rsplit("@", 1)[1]) for r in refs] == [1, 2, 3, 4]
    assert best == [1, 2, 3, None]  # a; b beats a; c alone on its fold; d's fold too small: the alias removed
    why = client.get_prompt("face-opt-relevance-set").tags["best"]
    assert why.startswith("no @best: the held-out fold holds 4 items, 10 needed")


def test_the_default_configuration_is_composed_once_per_state_of_the_config_files(tmp_path, monkeypatch):
    """Run names compare a run with its experiment's default configuration: composed once per process, and again
    when a config file changed (what a later run in the same process then compares with is the file as it is)."""
    import shutil

    import hydra
    from helpers import ROOT
    from hydra import initialize_config_dir

    from face.experiments.naming import _default_config

    conf = tmp_path / "conf"
    shutil.copytree(ROOT / "conf", conf)
    calls = []
    compose = hydra.compose
    monkeypatch.setattr(hydra, "compose", lambda **kw: calls.append(kw) or compose(**kw))
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        first = _default_config(["experiment=reproduce_table2"])
        again = _default_config(["experiment=reproduce_table2"])
        assert again is first and len(calls) == 1
        assert _default_config(["experiment=system_level"])["task_name"] == "system_level" and len(calls) == 2
        yaml = conf / "experiment" / "reproduce_table2.yaml"
        yaml.write_text(yaml.read_text() + "\nrun_size: tiny\n")
        edited = _default_config(["experiment=reproduce_table2"])
    assert len(calls) == 3 and edited["run_size"] == "tiny" != first["run_size"]
