"""`face compare A B --sequential --llm scripted --yes` stopped and started again: killed with SIGKILL inside a step,
or stopped by the cost cap inside a step, the same command continues from the LLM cache, sends only what was not
scored and ends where an uninterrupted run ends. Requests are counted at the scripted server (its request log,
``llm.server.log_file``, appended across processes); and what an undecided aspect would probably need."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest
from helpers import write_logs

from face.api.sequential import _needs, _needs_line
from face.cli import main
from face.sequential import conversations_needed

ROOT = Path(__file__).resolve().parents[1]
CONCURRENCY = 4  # requests in flight at most: what a kill may lose (sent, not yet answered and cached)


def _convs(n: int, tail: str) -> list[dict]:
    return [{"id": f"c{i}", "messages": [{"role": "user", "content": f"Any film like number {i}?"},
                                         {"role": "assistant", "content": f"Try Heat {i}.{tail}"}]} for i in range(n)]


def _sets(tmp_path: Path, n: int) -> None:
    write_logs(tmp_path / "v1.jsonl", _convs(n, ""))
    write_logs(tmp_path / "v2.jsonl", _convs(n, " A classic."))


def _argv(tmp_path: Path, name: str, data_dir: Path, *extra: str) -> list[str]:
    """The README's command, its output, cache and request log under ``tmp_path`` (``name``: one run's)."""
    return ["compare", str(tmp_path / "v1.jsonl"), str(tmp_path / "v2.jsonl"), "--sequential", "--llm", "scripted",
            "--yes", "--aspects", "relevance", "--batch", "2", "--out", str(tmp_path / name / "out"),
            "--set", f"paths.cache_dir={tmp_path / name / 'cache'}", "--set", f"paths.data_dir={data_dir}",
            "--set", "run_size=tiny", "--set", f"llm.concurrency={CONCURRENCY}",
            "--set", f"+llm.server.log_file={tmp_path / name / 'requests.jsonl'}", *extra]


def _requests(tmp_path: Path, name: str) -> list[str]:
    """The hashes of the requests the scripted server of run ``name`` received, in order."""
    path = tmp_path / name / "requests.jsonl"
    if not path.exists():
        return []
    return [json.loads(line)["hash"] for line in path.read_text().splitlines() if line.endswith("}")]


def _table(tmp_path: Path, name: str, table: str) -> pd.DataFrame:
    return pd.read_csv(tmp_path / name / "out" / "comparison" / f"{table}.csv")


def _sent(tmp_path: Path, name: str) -> dict:
    saved = _table(tmp_path, name, "sequential_saved").set_index("what")["scored"]
    return {k: saved[f"{k} sent by this run"] for k in ("http_requests", "cost_usd")}


@pytest.mark.slow  # three runs of the command: ≈ 40 s
@pytest.mark.serial  # kills a run found by polling
def test_kill_9_inside_a_step_then_the_same_command_sends_only_the_unscored_remainder(tmp_path, data_dir):
    _sets(tmp_path, 6)  # 3 steps of 2 + 2; the scripted judge's scores decide nothing: all 3 are run
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    slow = ["--set", "llm.server.latency_s=0.05"]  # step 2 takes long enough to be killed inside
    cmd = [sys.executable, "-m", "face.cli", *_argv(tmp_path, "resumed", data_dir, *slow)]
    first = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert first.stdout is not None
    line = first.stdout.readline()  # printed once step 1's conversations are scored (their answers cached)
    while line and not line.startswith("step 1:"):
        line = first.stdout.readline()
    assert line.startswith("step 1:"), "the run ended before its first step"
    after_step_1 = len(_requests(tmp_path, "resumed"))
    deadline = time.monotonic() + 120
    while len(_requests(tmp_path, "resumed")) < after_step_1 + 6 and first.poll() is None:  # inside step 2
        assert time.monotonic() < deadline, "step 2 sent nothing"
        time.sleep(0.01)
    os.kill(first.pid, signal.SIGKILL)
    rest = first.communicate()[0]
    assert first.returncode == -signal.SIGKILL and "step 2:" not in rest, "killed too late: step 2 had finished"
    before = _requests(tmp_path, "resumed")

    again = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    second = _requests(tmp_path, "resumed")[len(before):]
    whole = subprocess.run([sys.executable, "-m", "face.cli", *_argv(tmp_path, "whole", data_dir)], cwd=tmp_path,
                           env=env, capture_output=True, text=True, timeout=600)
    assert whole.returncode == 0, whole.stderr[-3000:]
    uninterrupted = _requests(tmp_path, "whole")

    resent = set(second) & set(before)
    assert len(resent) <= CONCURRENCY  # only what was in flight at the kill (sent, never answered)
    assert set(before) | set(second) == set(uninterrupted)  # between them, the uninterrupted run's requests
    assert len(second) == len(uninterrupted) - len(before) + len(resent)  # the rerun: the remainder only
    assert len(before) > len(resent) and len(second) < len(uninterrupted)  # the kill left work done and to do
    assert _sent(tmp_path, "resumed")["http_requests"] == len(second)  # its own record agrees with the server
    for table in ("sequential", "sequential_steps", "verdicts"):  # the same verdict, step by step
        pd.testing.assert_frame_equal(_table(tmp_path, "resumed", table), _table(tmp_path, "whole", table))
    assert "stopped because the conversations ran out" in again.stdout
    assert _table(tmp_path, "whole", "sequential_steps")["step"].max() == 3


@pytest.mark.slow  # two runs of the command: ≈ 20 s
def test_the_cost_cap_running_out_inside_a_step_leaves_the_steps_finished_and_a_rerun_continues(
        tmp_path, data_dir, capsys):
    _sets(tmp_path, 6)
    priced = ["--set", "llm.price_input_per_mtok=1000"]  # $0.001 a token: the scripted server's requests cost
    assert main(_argv(tmp_path, "run", data_dir, *priced, "--set", "llm.max_cost_usd=15")) == 0
    out = capsys.readouterr().out
    first = _requests(tmp_path, "run")
    assert "stopped because the cost cap (llm.max_cost_usd = 15) ran out inside step 2" in out
    steps, decision = _table(tmp_path, "run", "sequential_steps"), _table(tmp_path, "run", "sequential").iloc[0]
    assert list(steps["step"]) == [1] and decision["n_baseline"] == decision["n_candidate"] == 2
    assert decision["decision"] == "undecided" and "Undecided: what more would probably take" in out
    assert f"  relevance: [{decision['ci_low']:+.3f}, {decision['ci_high']:+.3f}] after 2 per side" in out
    # the report is of the step finished: each side's run holds step 1's two conversations, the same ids
    ids = [sorted(c["conv_id"] for c in json.loads((tmp_path / "run" / "out" / side / "conversations.json")
                                                   .read_text())) for side in ("v1", "v2")]
    assert ids[0] == ids[1] and len(ids[0]) == 2
    assert _table(tmp_path, "run", "verdicts")["n_shared"].tolist() == [2]
    sent = _sent(tmp_path, "run")
    assert sent["http_requests"] == len(first)  # step 2's requests before the stop are counted too
    assert 0 < sent["cost_usd"] <= 15  # the cap is the whole comparison's, not each step's

    assert main(_argv(tmp_path, "run", data_dir, *priced, "--set", "llm.max_cost_usd=1000")) == 0
    assert "stopped because the conversations ran out" in capsys.readouterr().out
    every = Counter(_requests(tmp_path, "run"))
    assert len(every) > len(first) and max(every.values()) == 1  # it continued; nothing scored was sent again
    steps_again = _table(tmp_path, "run", "sequential_steps")
    assert list(steps_again["step"]) == [1, 2, 3]
    pd.testing.assert_frame_equal(steps_again.iloc[:1], steps, check_dtype=False)  # step 1 as before, from the cache


def test_conversations_needed_by_hand():
    # [-0.3, 0.7] after 10 per side: centre 0.2, half-width 0.5; it decides once 0.5·r(m)/r(10) < 0.2, r(m) =
    # √(log(1 + m) / m): log(1 + m)/m < 0.16·log(11)/10 = 0.0383664; m = 126: log(127)/126 = 0.0384457 (no),
    # m = 127: log(128)/127 = 0.0382053 (yes)
    assert conversations_needed(-0.3, 0.7, 10) == 127
    # with target 0.3: the largest deciding half-width is max(0.2, 0.3 − 0.2) = 0.2, the same 127
    assert conversations_needed(-0.3, 0.7, 10, target=0.3) == 127
    # centre 0.05, target 0.5: g = 0.45 > 0.05; 0.5·r(m)/r(10) < 0.45 ⇔ log(1 + m)/m < 0.81·0.2397895 = 0.1942295:
    # m = 12: log(13)/12 = 0.2137 (no); m = 14: log(15)/14 = 0.1934 (yes); m = 13: log(14)/13 = 0.2030 (no)
    assert conversations_needed(-0.45, 0.55, 10, target=0.5) == 14
    assert conversations_needed(-0.5, 0.5, 10) == math.inf  # centred on 0, no target: no width excludes 0
    assert conversations_needed(-0.3, 0.7, 10, most=100) == math.inf


def test_what_an_undecided_aspect_would_need_in_conversations_and_dollars():
    decisions = pd.DataFrame({"aspect": ["relevance", "efficiency", "fluency"], "n_baseline": [10, 10, 10],
                              "n_candidate": [10, 10, 10], "ci_low": [-0.3, 0.1, -0.5], "ci_high": [0.7, 0.3, 0.5],
                              "decision": ["undecided", "better", "undecided"]})
    got = _needs(decisions, None, 200, 0.5)
    assert got["needed_per_side"].iloc[0] == 127 and got["more_usd"].iloc[0] == 2 * 117 * 0.5  # both sides' 117 more
    assert math.isnan(got["needed_per_side"].iloc[1]) and math.isnan(got["more_usd"].iloc[1])  # decided
    assert math.isinf(got["needed_per_side"].iloc[2]) and math.isnan(got["more_usd"].iloc[2])
    row = next(got.itertuples())
    assert _needs_line(row, 200) == ("[-0.300, +0.700] after 10 per side: ≈ 127 conversations per side, 234 more "
                                     "in all, ≈ $117.00 at this run's price")
    few = _needs(decisions, None, 100, 0.5)
    assert math.isnan(few["more_usd"].iloc[0])
    assert _needs_line(next(few.itertuples()), 100).endswith("≈ 127 conversations per side, not reachable with the "
                                                             "100 available")
    assert _needs_line(list(got.itertuples())[2], 200) == ("[-0.500, +0.500] after 10 per side: centred on 0, no "
                                                           "width decides it (without a target difference); not "
                                                           "reachable")
