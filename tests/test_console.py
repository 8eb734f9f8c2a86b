"""The console as researchers know it from lm-evaluation-harness and Hydra: progress bars on stderr when it is a
terminal (none in captured output, none with FACE_PROGRESS=0 or llm.progress=false), and one summary block at the
end of every run whose numbers are those of llm_usage.json and of the MLflow store."""

from __future__ import annotations

import importlib
import io
import json
import re
import sys
from pathlib import Path

import pytest

from face.cli import main
from face.console import progress_on

TWO = [{"id": f"c{i}", "system": f"crs-{i}", "messages": [
    {"role": "user", "content": f"Any good film number {i}?"},
    {"role": "assistant", "content": "Try Heat (1995). Do you like older films?"},
    {"role": "user", "content": "Yes, thanks!"},
    {"role": "assistant", "content": "Then try Ronin (1998)."}]} for i in range(2)]

HEADER = "run summary"


class FakeTerminal(io.StringIO):
    """stderr as a terminal says it is one."""

    def isatty(self) -> bool:
        return True


def _evaluate(tmp_path: Path, *extra: str) -> int:
    tmp_path.mkdir(parents=True, exist_ok=True)
    logs = tmp_path / "logs.jsonl"
    logs.write_text("\n".join(json.dumps(c) for c in TWO) + "\n", encoding="utf-8")
    return main(["evaluate", str(logs), "--aspects", "relevance", "--llm", "scripted", "--out", str(tmp_path / "out"),
                 "--yes", "--set", f"paths.cache_dir={tmp_path / 'cache'}", "--set", "run_size=tiny", *extra])


def _block(out: str) -> dict[str, str]:
    """The summary block at the very end of stdout, as {label: value}; fails if stdout does not end with it."""
    lines = out.rstrip("\n").splitlines()
    starts = [i for i, line in enumerate(lines) if HEADER in line and line.startswith("=")]
    assert len(starts) == 1, f"expected one summary block, got {len(starts)}:\n{out[-2000:]}"
    block = lines[starts[0] + 1:]
    assert block and all(re.match(r"^[A-Z][A-Za-z ]+: +\S", line) for line in block), block
    return {k: v.strip() for k, v in (line.split(":", 1) for line in block)}


@pytest.mark.parametrize(("env", "stream", "enabled", "drawn"), [
    (None, FakeTerminal(), True, True),  # a terminal: bars
    (None, io.StringIO(), True, False),  # captured / a pipe: none
    ("0", FakeTerminal(), True, False),  # FACE_PROGRESS=0 on a terminal: none
    ("1", io.StringIO(), True, True),  # FACE_PROGRESS=1 into a log file: bars
    (None, FakeTerminal(), False, False),  # llm.progress=false on a terminal: none
])
def test_progress_is_drawn_on_a_terminal_unless_switched_off(monkeypatch, env, stream, enabled, drawn):
    if env is None:
        monkeypatch.delenv("FACE_PROGRESS", raising=False)
    else:
        monkeypatch.setenv("FACE_PROGRESS", env)
    assert progress_on(enabled, stream) is drawn


@pytest.mark.slow
def test_a_scripted_run_draws_bars_on_a_terminal_and_none_with_llm_progress_false(tmp_path, monkeypatch):
    monkeypatch.delenv("FACE_PROGRESS", raising=False)
    terminal = FakeTerminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    assert _evaluate(tmp_path / "tty") == 0
    drawn = terminal.getvalue()
    assert re.search(r"decomposing \d+ turns: 100%\|", drawn), drawn[-1000:]
    assert re.search(r"scoring relevance: 100%\|", drawn), drawn[-1000:]
    monkeypatch.setattr(sys, "stderr", terminal := FakeTerminal())
    assert _evaluate(tmp_path / "llm_progress_off", "--set", "llm.progress=false") == 0
    assert "%|" not in terminal.getvalue()


def test_face_evaluate_ends_with_one_summary_block_with_the_numbers_of_llm_usage_json(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("FACE_PROGRESS", raising=False)
    assert _evaluate(tmp_path) == 0
    out, err = capsys.readouterr()
    assert "scoring relevance" not in err and "%|" not in err and "it/s" not in err, err[-1000:]  # captured: no bars
    block = _block(out)
    run = tmp_path / "out"
    totals = json.loads((run / "llm_usage.json").read_text())["totals"]
    got = re.fullmatch(r"(\d+) \((\d+) HTTP requests, (\d+) samples sent, (\d+) samples from cache\)",
                       block["LLM requests"])
    assert got, block
    assert [int(x) for x in got.groups()] == [totals[k] for k in ("requests", "http_requests", "samples", "cache_hits")]
    assert totals["requests"] > 0 and totals["samples"] >= totals["http_requests"] > 0
    assert block["Cost"] == f"${totals['cost_usd']:.6f}"
    assert block["Results"] == str(run.resolve())
    assert block["MLflow run"].startswith("none")  # face evaluate tracks only with --mlflow
    assert re.fullmatch(r"\d+\.\d s", block["Wall time"]), block
    assert list(block)[-1] == "Report" and block["Report"] == str(run.resolve() / "report.html")
    assert Path(block["Report"]).is_file()


@pytest.mark.slow
def test_a_second_run_counts_its_cache_hits_as_llm_usage_json_does(tmp_path, capsys):
    """The rerun is served from the cache: the block's cache hits are the file's, not zero."""
    assert _evaluate(tmp_path) == 0
    capsys.readouterr()
    assert _evaluate(tmp_path) == 0
    block = _block(capsys.readouterr().out)
    totals = json.loads((tmp_path / "out" / "llm_usage.json").read_text())["totals"]
    assert totals["cache_hits"] > 0 and totals["http_requests"] == 0
    assert block["LLM requests"] == (f"{totals['requests']} (0 HTTP requests, 0 samples sent, "
                                     f"{totals['cache_hits']} samples from cache)")


@pytest.mark.slow  # a whole experiment with an MLflow store (~10 s)
@pytest.mark.usefixtures("mlflow_store")
def test_a_run_without_an_llm_ends_with_its_results_path_and_the_mlflow_run_in_the_store(cfg_factory, capsys):
    from mlflow.tracking import MlflowClient

    cfg = cfg_factory("experiment=reproduce_table2", "dataset.limit=3", "metaeval.n_boot=20")
    importlib.import_module(cfg.runner).run(cfg)
    block = _block(capsys.readouterr().out)
    assert "LLM requests" not in block and "Cost" not in block
    assert block["Results"] == str((Path(cfg.paths.output_dir) / "results").resolve())  # a subset: its run dir
    run_id = block["MLflow run"].split()[0]
    client = MlflowClient(tracking_uri=cfg.tracking.tracking_uri)
    run = client.get_run(run_id)  # raises if the store has no such run
    assert run.info.status == "FINISHED" and run.data.tags["task_name"] == "reproduce_table2"
    assert f"/#/experiments/{run.info.experiment_id}/runs/{run_id})" in block["MLflow run"]
    assert f"mlflow ui --backend-store-uri {cfg.tracking.tracking_uri}" in block["MLflow run"]
    assert re.fullmatch(r"\d+\.\d s", block["Wall time"]), block


def test_batch_bars_inside_a_stage_bar_are_cleared_and_the_stage_bar_stays(monkeypatch):
    """An optimizer round draws hundreds of small scoring batches: inside a stage bar they are transient."""
    from face.console import nested, progress

    monkeypatch.delenv("FACE_PROGRESS", raising=False)
    monkeypatch.setattr(sys, "stderr", terminal := FakeTerminal())
    seen = [nested() for _ in progress(range(3), "optimizer rounds relevance", unit="round")]
    assert seen == [True, True, True] and not nested()
    drawn = terminal.getvalue()
    assert "optimizer rounds relevance: 100%|" in drawn and "3/3" in drawn


def test_bootstrap_cis_show_a_bar_on_a_terminal_only_when_they_resample(monkeypatch):
    import pandas as pd

    from face.data.schema import Conversation, Turn
    from face.datasets.crsarena import ASPECTS
    from face.metaeval import meta_evaluate
    from face.predictions import Predictions

    monkeypatch.delenv("FACE_PROGRESS", raising=False)
    convs, rows = [], []
    for i in range(4):
        turns = [Turn(1, "ASST", "a", {"relevance": i % 3})]
        rows.append(("relevance", f"c{i}", 1, float(i)))
        convs.append(Conversation(f"c{i}", tuple(turns), {}, system=f"s{i}", split="redial"))
    preds = Predictions(pd.DataFrame(rows, columns=["aspect", "conv_id", "turn_ind", "pred"]),
                        pd.DataFrame(columns=["aspect", "conv_id", "pred"]))
    for n_boot, drawn in ((20, True), (0, False)):
        monkeypatch.setattr(sys, "stderr", terminal := FakeTerminal())
        meta_evaluate(preds, convs, [ASPECTS["relevance"]], ["all"], ["turn"], n_boot=n_boot)
        assert (f"bootstrap CIs ({n_boot} resamples)" in terminal.getvalue()) is drawn, terminal.getvalue()
