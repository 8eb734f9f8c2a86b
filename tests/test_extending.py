"""Extension points: a dataset and a method defined outside the package, registered by a test-local config
directory (hydra.searchpath on the command line), run through an unchanged experiment, give the correlations scipy
gives."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from helpers import run_paths, with_overrides
from hydra import compose, initialize_config_dir
from scipy import stats
from toy_extension import toy_conversations

import face.runner

TOY_CONF = Path(__file__).parent / "toy_conf"
ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_toy_dataset_and_method_run_through_the_cli_from_a_config_dir_of_their_own(tmp_path, data_dir):
    """As docs/extending.md tells a user: the code on PYTHONPATH, the configs in a directory of their own named by
    hydra.searchpath on the command line, conf/ untouched."""
    run_dir = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent)}
    res = subprocess.run([sys.executable, str(ROOT / "scripts" / "run.py"), f"hydra.searchpath=[file://{TOY_CONF}]",
                          "experiment=toy_eval", "metaeval.n_boot=0", "tracking=none", f"paths.data_dir={data_dir}",
                          f"paths.output_dir={run_dir}", f"hydra.run.dir={run_dir}",
                          f"paths.results_dir={tmp_path / 'results'}", f"paths.cache_dir={tmp_path / 'cache'}"],
                         env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    out = pd.read_csv(tmp_path / "results" / "toy_eval" / "correlations.csv")
    res = out.set_index(["level", "aspect", "split", "coefficient"])["value"]
    convs = toy_conversations()
    turns = [(-len(t.utterance.split()), t.labels["brevity"]) for c in convs for t in c.assistant_turns()]
    assert res["turn", "brevity", "all", "spearman"] == pytest.approx(stats.spearmanr(*zip(*turns))[0], abs=1e-4)
    dial_a = [(sum(-len(t.utterance.split()) for t in c.assistant_turns()) / 2, c.labels["overall"])
              for c in convs if c.split == "a"]
    assert res["dialogue", "overall", "a", "pearson"] == pytest.approx(stats.pearsonr(*zip(*dial_a))[0], abs=1e-4)
    assert set(out["split"]) == {"a", "b", "all"}  # the dataset's own splits, then pooled
    assert (run_dir / "run_file.json").exists()


@pytest.mark.slow
def test_own_instruction_source_and_scorer_run_live_face_through_the_cli(tmp_path, data_dir):
    """Live FACE with an instruction source and a scorer of the user's own (tests/toy_extension.py), named in a
    method config that lives only in the user's directory: every score is under the toy instruction, and is the
    median (not the mean) of its three sampled values."""
    run_dir = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent)}
    res = subprocess.run([sys.executable, str(ROOT / "scripts" / "run.py"), f"hydra.searchpath=[file://{TOY_CONF}]",
                          "experiment=crsarena_main", "method=face_toy_parts", "llm=fake", "run_size=tiny",
                          "method.particles.source=released", "dataset.limit=3", "aspects=[relevance]",
                          "metaeval.n_boot=0", "tracking=none", f"paths.data_dir={data_dir}",
                          f"paths.output_dir={run_dir}", f"hydra.run.dir={run_dir}",
                          f"paths.results_dir={tmp_path / 'results'}", f"paths.cache_dir={tmp_path / 'cache'}"],
                         env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    records = [json.loads(line) for line in (run_dir / "particle_scores.jsonl").read_text().splitlines()]
    assert records and {r["instruction_id"] for r in records} == {"one_line"}
    assert all(len(r["samples"]) == 3 for r in records)
    assert [r["score"] for r in records] == [statistics.median(r["samples"]) for r in records]
    assert any(statistics.median(r["samples"]) != statistics.mean(r["samples"]) for r in records)  # can tell


@pytest.mark.slow
@pytest.mark.usefixtures("mlflow_store")
def test_an_experiment_that_only_computes_gets_its_run_file_tables_figure_and_mlflow_logs(run_experiment):
    """docs/extending.md's experiment (tests/toy_experiment.py) returns what it computed and writes nothing itself:
    the one writer writes its run file, its table three ways, its figure, and logs its correlations and metric."""
    from mlflow.tracking import MlflowClient

    ran = run_experiment(f"hydra.searchpath=[file://{TOY_CONF}]", "experiment=toy_by_system", "metaeval.n_boot=0")
    out, cfg = ran.experiment, ran.cfg
    convs = toy_conversations()
    by_system = pd.read_csv(out.out_dir / "by_system.csv").set_index("system")
    for s in ("sys0", "sys1", "sys2"):  # every assistant turn of the system: minus its words, its brevity label
        turns = [t for c in convs if c.system == s for t in c.assistant_turns()]
        assert by_system.loc[s, "pred"] == pytest.approx(statistics.mean(-len(t.utterance.split()) for t in turns))
        assert by_system.loc[s, "human"] == pytest.approx(statistics.mean(t.labels["brevity"] for t in turns))
    assert (out.out_dir / "by_system.md").read_text().startswith("Mean prediction and mean label per system.")
    assert (out.out_dir / "by_system.tex").exists() and (out.out_dir / "figures" / "by_system.png").exists()
    assert (out.run_dir / "run_file.json").exists()
    client = MlflowClient(cfg.tracking.tracking_uri)
    [run] = client.search_runs([client.get_experiment_by_name(cfg.task_name).experiment_id])
    turns = [(-len(t.utterance.split()), t.labels["brevity"]) for c in convs for t in c.assistant_turns()]
    assert run.data.metrics["vs_human.turn.brevity.all.spearman"] == pytest.approx(stats.spearmanr(*zip(*turns))[0])
    assert run.data.tags["mlflow.note.content"].startswith("**word count (toy method)**")
    arts = {f.path for d in ("results", "run") for f in client.list_artifacts(run.info.run_id, d)}
    assert {"results/by_system.md", "results/by_system.png", "run/run_file.json"} <= arts
    numbers = json.loads(Path(client.download_artifacts(run.info.run_id, "numbers.json", str(out.run_dir.parent)))
                         .read_text())
    assert numbers["systems"] == 3


def test_unknown_aspect_of_a_dataset_is_rejected_before_anything_runs(cfg_factory):
    cfg = cfg_factory(f"hydra.searchpath=[file://{TOY_CONF}]", "experiment=toy_eval", "aspects=[relevance]",
                      tracking=False)
    with pytest.raises(ValueError, match="has no aspect 'relevance'; its aspects, closest first: "):
        face.runner.run(cfg)
    assert not Path(cfg.paths.output_dir).exists()


@pytest.fixture(scope="module")
def crsarena_fake(tmp_path_factory, data_dir):
    """``experiment=crsarena_main llm=fake``, composed once for the module; each test gives it its own output paths
    and its one bad setting (helpers.with_overrides: Hydra's own last step of a composition)."""
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return compose(config_name="config", overrides=[*run_paths(tmp_path_factory.mktemp("base"), data_dir),
                                                        "experiment=crsarena_main", "llm=fake"])


@pytest.mark.parametrize("override,message", [
    ("method.scoring.estimator=mode", "method.scoring.estimator must be one of 'sampling', 'logprobs' or a class"),
    ("method.unit=sentence", "method.unit must be one of 'particle', 'whole', got 'sentence'"),
    ("method.scoring.order=random", "method.scoring.order must be one of 'prefix', 'naive', got 'random'"),
    ("method.particle_agg=mode", "method.particle_agg must be one of"),
    ("method.particles.source=gold", "method.particles.source must be one of 'llm', 'released' or a class"),
    ("method.instructions.source=file", "needs method.instructions.file"),
    ("dataset.limit=0", "dataset.limit must be an integer >= 1 or null, got 0"),
    ("dataset.splits=[test]", "unknown split"),
    ("metaeval.splits=[test]", "not splits of CRSArena-Eval"),
])
def test_bad_choices_fail_before_anything_is_fetched_written_or_sent(crsarena_fake, tmp_path, data_dir, override,
                                                                     message):
    cfg = with_overrides(crsarena_fake, *run_paths(tmp_path, data_dir), override)
    with pytest.raises(ValueError, match=message):
        face.runner.run(cfg)
    assert not Path(cfg.paths.output_dir).exists()
    assert not Path(cfg.tracking.tracking_uri.removeprefix("sqlite:///")).exists()  # no MLflow run either


def test_method_released_refuses_a_dataset_it_has_no_scores_for(cfg_factory):
    cfg = cfg_factory("experiment=reproduce_table2", "dataset=usr_topical_chat", tracking=False)
    with pytest.raises(ValueError, match="released scores, which exist only for CRSArena-Eval"):
        face.runner.run(cfg)


@pytest.mark.slow
def test_own_conversations_with_the_default_experiment_fail_in_one_line_and_create_no_mlflow_run(tmp_path, mirror):
    import os
    import subprocess
    import sys

    logs = tmp_path / "mine.json"
    logs.write_text('[{"conv_id": "a", "dialogue": [{"turn_ind": 0, "role": "USER", "utterance": "hi"}, '
                    '{"turn_ind": 1, "role": "ASST", "utterance": "hello"}]}]')
    db = tmp_path / "ml.db"
    res = subprocess.run([sys.executable, "scripts/run.py", f"dataset.file={logs}", f"tracking.tracking_uri=sqlite:///{db}",
                          f"hydra.run.dir={tmp_path / 'out'}"], cwd=Path(__file__).resolve().parents[1],
                         env={**os.environ, "FACE_DATA_MIRROR": str(mirror)}, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 2 and res.stderr.strip().count("\n") == 0, res.stderr
    assert "face evaluate" in res.stderr and "experiment=crsarena_main" in res.stderr
    assert not db.exists()  # no MLflow store, so no run


def test_the_cost_estimate_of_undecomposed_conversations_counts_the_particles_to_come(data_dir):
    """One whole turn stands in for the released data's 6274 / 2235 particles per turn: with 16 instructions ×
    5 samples that is ≈ 224.6 scoring samples per turn, the paper's ≈ 226."""
    from face.data.schema import Conversation, Turn
    from face.datasets.chatlogs import ChatLogs
    from face.llm import LLMConfig
    from face.methods import Inputs
    from face.pipeline.method import Face

    conv = Conversation("c", (Turn(0, "USER", "hi"), Turn(1, "ASST", "Try Heat."), Turn(2, "USER", "ok")), system="s")
    ds = ChatLogs(path="x.json")
    face = Face()
    inputs = Inputs(ds, [conv], [ds.aspects["relevance"]], data_dir, data_dir, LLMConfig(n_per_request=1))
    instructions = {"relevance": face.instruction_set(data_dir, ds.aspects["relevance"])}
    costs = face.estimate(inputs, instructions, face.proxy(inputs)).set_index("stage")
    assert costs.loc["score:relevance", "samples"] == round(16 * 5 * 6274 / 2235)
    assert costs.loc["score:relevance", "particles_per_turn"] == pytest.approx(6274 / 2235)  # the rate assumed, said


def test_help_lists_every_experiment_with_one_line(capsys):
    """scripts/run.py --help (its own cli(), Hydra's help, in this process: a subprocess only adds the imports)."""
    from hydra.core.global_hydra import GlobalHydra
    from reliability import _call, _script_module

    root = Path(__file__).resolve().parents[1]
    try:
        assert _call(_script_module().cli, "scripts/run.py", ["--help"]) in (0, None)
    finally:
        GlobalHydra.instance().clear()
    out = capsys.readouterr().out
    listed = {line.split()[0] for line in out.split("Experiments")[1].split("LLM backends")[0].splitlines()[1:]
              if line.strip()}
    assert listed == {p.stem for p in (root / "conf" / "experiment").glob("*.yaml")}
