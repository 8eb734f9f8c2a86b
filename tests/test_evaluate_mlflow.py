"""``face evaluate --mlflow``: a run as complete as an experiment's (issue 44, item 1) — its own experiment, a name
led by its input and judge, ``summary.*`` metrics, the report and its tables, a description naming the judge, the
input file's own sha256 as its dataset digest; ``face compare mlflow:<id>`` names it by its input and sees its
instruction sets."""

from __future__ import annotations

import hashlib
import json
import shutil

import pytest
from helpers import evaluate_argv, write_logs


def _logs(path, offset: int):
    return write_logs(path, [{"id": f"c{i}", "system": "crs-a", "messages": [
        {"role": "user", "content": f"I loved movie number {i + offset}. More like it?"},
        {"role": "assistant", "content": f"Try film {i + 100 + offset}, a slow thriller. Want something newer?"},
        {"role": "user", "content": "Sure, newer please."},
        {"role": "assistant", "content": f"Then film {i + 200} from 2021."}]} for i in range(2)])


@pytest.fixture(scope="module")
def tracked(tmp_path_factory, data_dir, mlflow_store):
    """Two `face evaluate --mlflow` runs on different files (v2 into an experiment named with --experiment): their
    MLflow runs by input stem, the store's URI and a client of it."""
    from mlflow.tracking import MlflowClient

    from face.cli import main

    tmp_path = tmp_path_factory.mktemp("tracked")
    shutil.copyfile(mlflow_store, tmp_path / "m.db")
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    runs = {}
    for v, offset, extra in (("v1", 0, []), ("v2", 7, ["--experiment", "my evals"])):
        argv = evaluate_argv(_logs(tmp_path / f"{v}.jsonl", offset), tmp_path / f"out_{v}", "--mlflow", *extra,
                             "--set", f"tracking.tracking_uri={uri}", "--set",
                             f"tracking.artifact_location={tmp_path / 'mlruns'}", "--set", f"paths.data_dir={data_dir}",
                             aspects="relevance,dialogue_overall", cache_dir=tmp_path / "cache")
        assert main(argv) == 0
    client = MlflowClient(tracking_uri=uri)
    for name in ("face_evaluate", "my evals"):
        [run] = client.search_runs([client.get_experiment_by_name(name).experiment_id])
        runs[run.data.tags["face.short_name"]] = run
    return runs, uri, client, tmp_path


@pytest.mark.slow  # two scripted `face evaluate --mlflow` runs: ≈ 14 s
def test_a_face_evaluate_run_holds_its_metrics_report_judge_and_own_data_digest(tracked):
    from face.runfile import read_run_file

    runs, _, client, tmp_path = tracked
    assert set(runs) == {"v1", "v2"}  # v1 in face_evaluate, v2 in the experiment --experiment named
    for v, run in runs.items():
        assert run.info.run_name.startswith(f"{v} · scripted-model"), run.info.run_name
        preds = read_run_file(tmp_path / f"out_{v}" / "run_file.json")
        turn = preds.turn[preds.turn["aspect"] == "relevance"]["pred"].mean()  # a turn-level aspect: its turns
        dial = preds.dialogue[preds.dialogue["aspect"] == "dialogue_overall"]["pred"].mean()
        assert run.data.metrics == {"summary.relevance": pytest.approx(turn, abs=1e-4),
                                    "summary.dialogue_overall": pytest.approx(dial, abs=1e-4)}
        note = run.data.tags["mlflow.note.content"]
        assert "scripted-model (scripted)" in note and "SCRIPTED TEST SERVER" in note, note
        assert "relevance (0–2)" in note and f"{turn:.3f}" in note and "```text" in note
        sha = hashlib.sha256((tmp_path / f"{v}.jsonl").read_bytes()).hexdigest()
        assert run.data.tags["input_sha256"] == sha
        [ds] = run.inputs.dataset_inputs
        assert (ds.dataset.digest, json.loads(ds.dataset.source)["uri"]) == (sha[:12], f"{v}.jsonl")
        paths = {f.path for f in client.list_artifacts(run.info.run_id)}
        assert {"report.html", "report_tables", "run"} <= paths, paths
        tables = {f.path for f in client.list_artifacts(run.info.run_id, "report_tables")}
        run_files = {f.path for f in client.list_artifacts(run.info.run_id, "run")}
        assert "report_tables/by_act.csv" in tables and "run/run_settings.json" in run_files
    assert runs["v1"].data.tags["data_sha256"] != runs["v2"].data.tags["data_sha256"]


@pytest.mark.slow  # the same two runs (shared with the test above), then face compare: ≈ 5 s more
def test_face_compare_names_tracked_evaluate_runs_by_their_input_and_sees_their_instructions(tracked, tmp_path,
                                                                                              capsys):
    import pandas as pd

    from face.cli import main

    runs, uri, _, _ = tracked
    capsys.readouterr()
    assert main(["compare", f"mlflow:{runs['v1'].info.run_id}", f"mlflow:{runs['v2'].info.run_id}", "--tracking-uri",
                 uri, "--out", str(tmp_path / "cmp"), "--n-boot", "200"]) == 0
    printed = capsys.readouterr().out
    assert list(pd.read_csv(tmp_path / "cmp" / "systems.csv")["system"]) == ["v1", "v2"]
    assert "SCRIPTED TEST SERVER" in printed and "does not record" not in printed, printed


def test_experiment_is_refused_without_mlflow(tmp_path, capsys):
    from face.cli import main

    with pytest.raises(SystemExit) as e:
        main(evaluate_argv(_logs(tmp_path / "v.jsonl", 0), tmp_path / "out", "--experiment", "x"))
    assert e.value.code == 2 and "--experiment 'x'" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_runs_correlations_are_described_in_a_fixed_width_block():
    """MLflow's description panel draws a Markdown table without space between its columns ("-0.017-0.047")."""
    import pandas as pd

    from face.tracking import description

    results = pd.DataFrame([("turn", "relevance", "all", "spearman", 0.52, 0.41, 0.6),
                            ("dialogue", "dialogue_overall", "all", "spearman", -0.017, float("nan"), float("nan"))],
                           columns=["level", "aspect", "split", "coefficient", "value", "ci_low", "ci_high"])
    text = description(results, "FACE", "CRSArena-Eval")
    assert text.splitlines()[4:] == ["```text",
                                     "level     aspect            Spearman (pooled)  95% CI",
                                     "turn      relevance         0.520              [0.410, 0.600]",
                                     "dialogue  dialogue_overall  -0.017",
                                     "```"]
