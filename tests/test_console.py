"""The console as researchers know it from lm-evaluation-harness and Hydra: progress bars on stderr when it is a
terminal (none in captured output, none with FACE_PROGRESS=0 or llm.progress=false), and one summary block at the
end of every run whose numbers are those of llm_usage.json and of the MLflow store."""

from __future__ import annotations

import io
import json
import re
import sys
from pathlib import Path

import pytest
from helpers import evaluate

import face.runner
from face.console import progress_mode

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
    return evaluate(tmp_path, TWO, *extra)


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
    assert (progress_mode(enabled, stream) == "bar") is drawn


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


def test_face_evaluate_ends_with_one_summary_block_with_the_numbers_of_llm_usage_json(evaluated_chat_logs_console):
    run, out, err = evaluated_chat_logs_console  # `face evaluate` on two chat logs, its output captured
    assert "scoring relevance" not in err and "%|" not in err and "it/s" not in err, err[-1000:]  # captured: no bars
    assert "dry run" not in out.lower() and "nothing sent so far" in out  # the estimate of a run that then sends
    block = _block(out)
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
    face.runner.run(cfg)
    block = _block(capsys.readouterr().out)
    assert "LLM requests" not in block and "Cost" not in block
    assert block["Results"] == str((Path(cfg.paths.output_dir) / "results").resolve())  # a subset: its run dir
    run_id = block["MLflow run"].split()[0]
    client = MlflowClient(tracking_uri=cfg.tracking.tracking_uri)
    run = client.get_run(run_id)  # raises if the store has no such run
    assert run.info.status == "FINISHED" and run.data.tags["task_name"] == "reproduce_table2"
    link = f"/#/experiments/{run.info.experiment_id}/runs/{run_id}?workflowType=machine_learning)"
    assert link in block["MLflow run"]
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


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def log_lines(monkeypatch):
    """Progress into a log (stderr not a terminal), on a fake clock; yields (clock, written lines)."""
    from face import console

    monkeypatch.delenv("FACE_PROGRESS", raising=False)
    clock, sink = FakeClock(), io.StringIO()
    monkeypatch.setattr(console.LOG, "clock", clock)
    monkeypatch.setattr(console.LOG, "stream", sink)
    monkeypatch.setattr(console.LOG, "last", None)
    monkeypatch.setattr(console.LOG, "live", [])
    monkeypatch.setattr(console.LOG, "heartbeat", False)  # no thread: lines only where the test steps the clock
    monkeypatch.setattr(sys, "stderr", io.StringIO())  # a pipe: not a terminal
    yield clock, lambda: sink.getvalue().splitlines()


def test_a_long_stage_in_a_log_writes_one_line_every_30_s_with_done_total_rate_eta_and_cost(log_lines):
    from face.console import Progress

    clock, lines = log_lines
    cost = {"usd": 0.0}
    p = Progress(100, "scoring relevance", unit="requests", info=lambda: {"cost": f"${cost['usd']:.4f}"})
    for _ in range(100):  # 100 requests, 1 s each: 3 lines in 100 s (at 30, 60, 90 s) and one when done
        clock.t += 1.0
        cost["usd"] += 0.001
        p.update()
    p.close()
    got = lines()
    assert len(got) == 4, got
    assert re.search(r"progress: scoring relevance: 30/100 requests \(30 %\), 1/s, ETA 1m 10s, cost \$0\.0300$",
                     got[0]), got[0]
    assert "60/100" in got[1] and "ETA 40.0 s" in got[1] and "90/100" in got[2]
    assert re.search(r"scoring relevance: 100/100 requests \(100 %\), 1/s, done in 1m 40s, cost \$0\.1000$", got[3])


def test_a_short_stage_in_a_log_writes_nothing_and_progress_off_writes_nothing(log_lines, monkeypatch):
    from face.console import Progress, progress

    clock, lines = log_lines
    for _ in progress(range(5), "bootstrap CIs", unit="aspect"):
        clock.t += 5.0  # 25 s in all: under the interval
    assert lines() == []
    monkeypatch.setenv("FACE_PROGRESS", "0")
    p = Progress(10, "scoring", unit="requests")
    for _ in range(10):
        clock.t += 60.0
        p.update()
    p.close()
    assert lines() == []


def test_nested_stages_in_a_log_share_one_line_outer_first(log_lines):
    """An optimizer round of many short scoring batches: each line names the round and the batch, so a log shows
    progress even when no batch lasts 30 s."""
    from face.console import Progress, progress

    clock, lines = log_lines
    for _ in progress(range(2), "optimizer rounds relevance", unit="round"):
        for _ in range(4):  # four batches of 10 s each
            p = Progress(10, "scoring relevance", unit="requests")
            for _ in range(10):
                clock.t += 1.0
                p.update()
            p.close()
    got = lines()
    assert len(got) == 3, got  # at 30 s and 60 s, and the rounds' last line
    assert re.search(r"optimizer rounds relevance: 0/2 round \(0 %\).* › scoring relevance: 10/10 requests", got[0])
    assert re.search(r"optimizer rounds relevance: 1/2 round .* › scoring relevance: 10/10 requests", got[1])
    assert re.search(r"optimizer rounds relevance: 2/2 round \(100 %\), .*done in 1m 20s$", got[2])


def test_face_progress_log_writes_lines_on_a_terminal_and_1_draws_a_bar_into_a_log(monkeypatch):
    from face.console import progress_mode

    monkeypatch.setenv("FACE_PROGRESS", "log")
    assert progress_mode(True, FakeTerminal()) == "log"
    monkeypatch.setenv("FACE_PROGRESS", "1")
    assert progress_mode(True, io.StringIO()) == "bar"
    monkeypatch.delenv("FACE_PROGRESS")
    assert progress_mode(True, io.StringIO()) == "log" and progress_mode(True, FakeTerminal()) == "bar"
    assert progress_mode(False, FakeTerminal()) is None


def test_a_warning_logged_while_a_bar_is_drawn_is_written_above_it_not_onto_its_line(monkeypatch):
    import logging

    from face.console import Progress

    monkeypatch.delenv("FACE_PROGRESS", raising=False)
    monkeypatch.setattr(sys, "stderr", terminal := FakeTerminal())
    root = logging.getLogger()
    handler = logging.StreamHandler(sys.stderr)  # as Hydra's console handler, on the bar's stream
    root.addHandler(handler)
    try:
        p = Progress(4, "bootstrap CIs", unit="aspect")
        p.update()
        logging.getLogger("face.metaeval").warning("no interval for one aspect")
        p.update(3)
        p.close()
    finally:
        root.removeHandler(handler)
    assert root.handlers.count(handler) == 0 and not any("Tqdm" in type(h).__name__ for h in root.handlers)
    drawn = terminal.getvalue()
    warning = drawn.index("no interval for one aspect")
    # the bar's line is cleared ("\r" + blanks + "\r") before the warning, which ends its own line
    assert drawn[warning - 1] == "\r" and drawn[warning:].startswith("no interval for one aspect\n"), repr(drawn)


def test_a_stage_waiting_on_one_slow_step_still_writes_a_line_every_30_s(log_lines):
    """One request of several minutes (the embedded model on a busy machine): the heartbeat writes the line."""
    from face import console

    clock, lines = log_lines
    p = console.Progress(11, "decomposing 11 turns", unit="requests")
    p.update()
    for _ in range(12):  # 120 s without a step; the heartbeat looks every 10 s
        clock.t += 10.0
        console.LOG.tick()
    p.close()
    got = lines()
    assert len(got) == 5, got  # at 30, 60, 90, 120 s, and done
    assert all("decomposing 11 turns: 1/11 requests (9 %)" in line for line in got), got
    assert got[-1].endswith("done in 2m 00s")


def test_the_heartbeat_thread_writes_while_no_step_ends_and_stops_with_the_last_stage(monkeypatch):
    import threading

    from face import console

    monkeypatch.delenv("FACE_PROGRESS", raising=False)
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    monkeypatch.setattr(console.LOG, "stream", sink := io.StringIO())
    monkeypatch.setattr(console.LOG, "interval", 0.05)
    monkeypatch.setattr(console.LOG, "beat_s", 0.01)
    p = console.Progress(3, "scoring relevance", unit="requests")
    deadline = threading.Event()
    deadline.wait(0.3)  # no step at all for 0.3 s
    p.close()
    assert "scoring relevance: 0/3 requests (0 %)" in sink.getvalue()
    deadline.wait(0.1)  # the thread sees its stop event within beat_s
    assert not any(t.name == "face-progress" and t.is_alive() for t in threading.enumerate())


def test_the_default_aspects_named_in_full_are_not_listed_as_a_non_default_setting(cfg_factory):
    """`face evaluate` without --aspects names all seven: that is the default, not a setting of the run."""
    from face.experiments.common import prepare

    seven = ("aspects=[relevance,interestingness,understanding,task_completion,interest_arousal,efficiency,"
             "dialogue_overall]")
    assert "aspects" not in prepare(cfg_factory("experiment=reproduce_table2", seven, tracking=False)).label
    two = prepare(cfg_factory("experiment=reproduce_table2", "aspects=[relevance,dialogue_overall]",
                              tracking=False)).label
    assert two["aspects"] == "['relevance', 'dialogue_overall']"


def test_a_whole_run_in_a_log_leads_every_line_and_says_so_between_its_stages(log_lines):
    """replay_table2 aggregates and meta-evaluates for minutes after its last LLM stage: the run's own line shows
    it is alive there too."""
    from face import console

    clock, lines = log_lines
    with console.alive("replay_table2"):
        p = console.Progress(40, "scoring relevance", unit="requests")
        for _ in range(40):
            clock.t += 1.0
            p.update()
        p.close()
        for _ in range(7):  # 70 s of aggregation: no stage
            clock.t += 10.0
            console.LOG.tick()
    got = lines()
    assert [line.split(" progress: ")[1] for line in got] == [
        "replay_table2: running for 30.0 s › scoring relevance: 30/40 requests (75 %), 1/s, ETA 10.0 s",
        "scoring relevance: 40/40 requests (100 %), 1/s, done in 40.0 s",
        "replay_table2: running for 1m 00s", "replay_table2: running for 1m 30s",
        "replay_table2: done in 1m 50s"]


def test_a_fast_stage_reads_its_rate_in_plain_digits(log_lines):
    from face.console import Progress

    clock, lines = log_lines
    p = Progress(300000, "scoring efficiency", unit="requests")
    clock.t += 30.0
    p.update(245100)  # 8,170 requests a second, not 8.17e+03
    p.close()
    assert "scoring efficiency: 245100/300000 requests (82 %), 8,170/s, ETA 6.7 s" in lines()[0]


def test_an_interrupted_run_and_its_stage_end_their_log_saying_stopped_after_never_done(log_lines):
    """Ctrl-C 50 s into a run, in its stage's fifth step: the last lines say how long each ran, not that it is done
    (an interrupted replay_table2's log used to end with "replay_table2: done in 3m 07s")."""
    from face import console

    clock, lines = log_lines
    with pytest.raises(KeyboardInterrupt), console.alive("replay_table2"):
        for i in console.progress(range(10), "bootstrap CIs", unit="aspect"):
            clock.t += 10.0
            if i == 4:
                raise KeyboardInterrupt
    assert [line.split(" progress: ")[1] for line in lines()] == [
        "replay_table2: running for 30.0 s › bootstrap CIs: 3/10 aspect (30 %), 0.1/s, ETA 1m 10s",
        "bootstrap CIs: 4/10 aspect (40 %), 0.08/s, stopped after 50.0 s",  # 4 steps done in 50 s
        "replay_table2: stopped after 50.0 s"]


def test_a_whole_run_in_a_log_has_its_eta_once_its_jobs_plan_their_llm_requests(log_lines):
    """The estimates plan 100 LLM requests (40 decomposing, 60 scoring; 1 s each here): 30 done at 30 s leaves 70 s
    for the run while its stage has 10 s left; 60 done at 60 s leaves 40 s."""
    from face import console

    clock, lines = log_lines
    with console.alive("evaluate"):
        console.plan(40)  # each LLM job's estimate (LLMJob.gate)
        console.plan(60)
        decomposing = console.Progress(40, "decomposing", unit="requests")
        for _ in range(40):
            clock.t += 1.0
            decomposing.update()
        decomposing.close()
        scoring = console.Progress(60, "scoring relevance", unit="requests")
        for _ in range(20):
            clock.t += 1.0
            scoring.update()
        scoring.close()
    assert [line.split(" progress: ")[1] for line in lines()] == [
        "evaluate: running for 30.0 s, 30/100 LLM requests, ETA 1m 10s › decomposing: 30/40 requests (75 %), 1/s, "
        "ETA 10.0 s",
        "decomposing: 40/40 requests (100 %), 1/s, done in 40.0 s",
        "evaluate: running for 1m 00s, 60/100 LLM requests, ETA 40.0 s › scoring relevance: 20/60 requests (33 %), "
        "1/s, ETA 40.0 s",
        "evaluate: done in 1m 00s"]
