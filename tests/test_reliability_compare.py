"""Reliability (issue 41, items 6-8): `face compare` as careful with files as `face evaluate`. Its --out is claimed as
a run's directory is (never another run's, never a compared run's, never the project's results/), every bad input or
name is one line and exit 2 with nothing written (MLflow's limits checked before anything is), Ctrl-C is one line and
exit 130 with nothing half-written, and a comparison recorded in MLflow keeps its artifacts beside the store named."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))

from reliability import ROOT, refused, run
from test_compare import _run_dir, _scores

# as the rest of the reliability suite: with the slow tests, one at a time (each case watches the project tree)
pytestmark = pytest.mark.slow

KEY = "sk-proj-" + "aB3" * 10


def _runs(t: Path, n: int = 2) -> list[str]:
    rng = np.random.default_rng(21)
    turns = {f"c{i}": [1.0, 2.0] for i in range(10)}
    return [str(_run_dir(t, f"r{i}", _scores(rng, 10, i / 4), turns)) for i in range(n)]


def _victim(t: Path) -> str:
    """Another run's directory: its results and its ownership marker."""
    d = _run_dir(t, "victim", {"c0": 1.0})
    (d / "report.html").write_text("the victim's report")
    (d / ".face-run.json").write_text('{"owner": {"settings": "0123"}}')
    return str(d)


def _odd(t: Path) -> str:
    return str(_run_dir(t, "odd", {f"c{i}": 1e308 if i == 3 else 2.0 for i in range(10)},
                        {f"c{i}": [1.0] for i in range(10)}))


CASES = {  # name: (argv after `face compare` given the case's temp dir, words the one line must say)
    "out_is_another_runs_directory": (lambda t: [*_runs(t), "--out", _victim(t)],
                                      ["--out", "victim holds another run's results", "--overwrite"]),
    "out_is_a_compared_run_even_with_overwrite": (lambda t: [*_runs(t), "--out", str(t / "r1"), "--overwrite"],
                                                  ["--out", "r1 is the input directory itself"]),
    "out_is_the_committed_results_of_an_experiment": (
        lambda t: [*_runs(t), "--out", str(ROOT / "results" / "reproduce_table2")],
        ["--out", "reproduce_table2 holds another run's results"]),
    "out_inside_the_projects_results_directory": (lambda t: [*_runs(t), "--out", str(t / "results" / "mine")],
                                                  ["--out", "inside the project's results directory"]),
    "negative_seed": (lambda t: [*_runs(t), "--seed", "-1"], ["seed must be an integer >= 0, got -1"]),
    "a_300_character_name_with_mlflow": (
        lambda t: [*_runs(t), "--names", "x" * 300 + ",y", "--mlflow", "--tracking-uri", f"sqlite:///{t / 'm.db'}"],
        ["names:", "MLflow takes 250"]),
    "names_mlflow_would_merge": (
        lambda t: [*_runs(t, 3), "--names", "v 1,v_1,v-1", "--mlflow", "--tracking-uri", f"sqlite:///{t / 'm.db'}"],
        ["'v 1' and 'v_1' would be logged to MLflow under the same metric names"]),
    "an_unusable_tracking_store": (
        lambda t: [*_runs(t), "--mlflow", "--tracking-uri", f"sqlite:///{t / 'r0' / 'run_file.json'}"],
        ["--tracking-uri", "is not an SQLite database"]),
    "a_key_shaped_name": (lambda t: [*_runs(t), "--names", f"{KEY},b"], ["names:", "looks like a credential"]),
    "a_score_outside_its_scale": (
        lambda t: [_runs(t)[0], _odd(t)],
        ["odd [conversation c3]: the dialogue_overall score 1e+308 is outside its scale 0–4"]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_face_compare_refuses_in_one_line_with_nothing_written(case, tmp_path, monkeypatch):
    argv, words = CASES[case]
    args = argv(tmp_path)
    args += [] if "--out" in args else ["--out", str(tmp_path / "out")]
    given = sorted(p.name for p in tmp_path.iterdir())
    o = run("face", ["compare", *args, "--n-boot", "200"], tmp_path, monkeypatch)
    assert refused(o, *words) == [], (o.code, o.err[-2000:])
    assert KEY not in o.err + o.out
    assert sorted(p.name for p in tmp_path.iterdir()) == given  # no output directory, no MLflow store
    if case == "out_is_another_runs_directory":
        assert (tmp_path / "victim" / "report.html").read_text() == "the victim's report"


def test_ctrl_c_during_face_compare_is_one_line_exit_130_and_nothing_half_written(tmp_path, monkeypatch):
    import face.comparison.figures as figures

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(figures, "differences", interrupted)  # Ctrl-C while the figures are drawn
    o = run("face", ["compare", *_runs(tmp_path), "--out", str(tmp_path / "out"), "--n-boot", "200"], tmp_path,
            monkeypatch)
    assert o.code == 130 and "Traceback" not in o.err, o.err[-2000:]
    assert len(o.lines) == 1 and o.lines[0].startswith("interrupted:")
    assert not (tmp_path / "out").exists() and o.changed == []


def test_a_comparison_recorded_in_mlflow_keeps_its_artifacts_beside_the_store_named(tmp_path, monkeypatch,
                                                                                     mlflow_store):
    from mlflow.tracking import MlflowClient

    db = tmp_path / "elsewhere" / "store.db"
    db.parent.mkdir()
    shutil.copyfile(mlflow_store, db)
    o = run("face", ["compare", *_runs(tmp_path), "--out", str(tmp_path / "out"), "--n-boot", "200", "--mlflow",
                     "--tracking-uri", f"sqlite:///{db}"], tmp_path, monkeypatch)
    assert o.code == 0 and o.changed == [], o.err[-2000:]
    run_id = o.out.split("MLflow run: ")[1].split()[0]
    artifacts = MlflowClient(f"sqlite:///{db}").get_run(run_id).info.artifact_uri
    assert artifacts.startswith((tmp_path / "elsewhere" / "mlruns").as_uri())
    assert (tmp_path / "elsewhere" / "mlruns").is_dir() and not (tmp_path / "mlruns").exists()
