"""`face compare A B --sequential`: two sets of logs scored by FACE (a scripted judge on loopback) batch by batch
until every aspect's confidence sequence decides; a rerun sends nothing it sent before."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from helpers import write_logs

from face.cli import main
from face.testing.scripted import ScriptedServer, default_responder

N = 24  # conversations per side


def _convs(n: int, tail: str = "") -> list[dict]:
    return [{"id": f"c{i}", "messages": [{"role": "user", "content": f"Any film like number {i}?"},
                                         {"role": "assistant", "content": f"Try Heat {i}.{tail}"}]} for i in range(n)]


def judge(body: dict) -> str:
    """Scores 2 (the scale's top) when the conversation says GOOD, else 0; decomposition as the scripted server."""
    rf = (body.get("response_format") or {}).get("json_schema") or {}
    if rf.get("name") == "score":
        return json.dumps({"score": 2 if "GOOD" in json.dumps(body["messages"]) else 0})
    return default_responder(body)


def _argv(tmp_path, base_url: str, *extra: str) -> list[str]:
    return ["compare", str(tmp_path / "v1.jsonl"), str(tmp_path / "v2.jsonl"), "--sequential", "--llm",
            "openai_compatible", "--set", f"llm.base_url={base_url}", "--set", "llm.model=m", "--yes",
            "--aspects", "relevance", "--batch", "3", "--out", str(tmp_path / "seq"),
            "--set", f"paths.cache_dir={tmp_path / 'cache'}", "--set", "run_size=tiny", *extra]


def _read(tmp_path, name: str) -> list[dict]:
    import pandas as pd

    return pd.read_csv(tmp_path / "seq" / "comparison" / f"{name}.csv").to_dict("records")


@pytest.mark.slow  # several face evaluate runs: ≈ 20 s
def test_a_pair_built_to_differ_stops_early_in_its_direction_and_a_rerun_sends_nothing_again(tmp_path, capsys):
    write_logs(tmp_path / "v1.jsonl", _convs(N))
    write_logs(tmp_path / "v2.jsonl", _convs(N, " GOOD pick."))
    with ScriptedServer(responder=judge) as srv:
        assert main(_argv(tmp_path, srv.base_url, "--max-conversations", "3")) == 0  # stopped after one step
        assert "stopped because --max-conversations ran out" in capsys.readouterr().out
        assert main(_argv(tmp_path, srv.base_url)) == 0  # the same command, no limit: continues
        first = capsys.readouterr().out
        sent = len(srv.ok_requests())
        assert main(_argv(tmp_path, srv.base_url)) == 0  # once more: everything from the cache
        again = capsys.readouterr().out
        hashes = Counter(r["hash"] for r in srv.ok_requests())
    assert len(srv.ok_requests()) == sent  # the third run sent nothing
    assert max(hashes.values()) == 1  # no request was ever sent twice (the first run's were not re-sent)
    decision = _read(tmp_path, "sequential")[0]
    # every paired difference is +2 on [0, 2] (the judge gives v2 the top, v1 the bottom): it decides early
    assert decision["decision"] == "better" and decision["ci_low"] > 0
    assert decision["n_candidate"] < N
    saved = {r["what"]: r for r in _read(tmp_path, "sequential_saved")}
    assert saved["conversations"]["scored"] == 2 * decision["n_candidate"]
    assert saved["conversations"]["available"] == 2 * N
    assert saved["http_requests sent by this run"]["scored"] == 0  # the third run's own count, from llm_usage.json
    assert "stopped because every aspect is decided" in first and "stopped because every aspect is decided" in again
    assert (tmp_path / "seq" / "comparison" / "figures" / "sequential_relevance.png").stat().st_size > 0
    verdict = _read(tmp_path, "verdicts")[0]
    assert verdict["verdict"] == "better" and verdict["diff"] == pytest.approx(2.0, abs=1e-9)


@pytest.mark.slow  # several face evaluate runs: ≈ 5 s
def test_two_identical_sets_run_to_the_end_undecided(tmp_path, capsys):
    write_logs(tmp_path / "v1.jsonl", _convs(6))
    write_logs(tmp_path / "v2.jsonl", _convs(6))
    with ScriptedServer(responder=judge) as srv:
        assert main(_argv(tmp_path, srv.base_url)) == 0
    out = capsys.readouterr().out
    assert "stopped because the conversations ran out" in out
    decision = _read(tmp_path, "sequential")[0]
    assert decision["decision"] == "undecided" and decision["n_baseline"] == decision["n_candidate"] == 6
    # every paired difference is 0: the interval is centred on 0, no width excludes it
    assert decision["needed_per_side"] == float("inf") and "no width decides it" in out
    assert decision["ci_low"] < 0 < decision["ci_high"]


@pytest.mark.parametrize("flags,expected", [
    (["--batch", "0"], "batch must be a positive number of conversations, got 0"),
    (["--max-conversations", "-1"], "max_conversations must be a positive number of conversations, got -1"),
    (["--alpha", "1.5"], "alpha must be a number between 0 and 1, got 1.5"),
    (["--target-diff", "-0.1"], "target_diff must be a positive number or None, got -0.1"),
    (["--confirm-above", "nan"], "--confirm-above must be a number of USD >= 0, got nan"),
    (["--mlflow", "--pairing", "paired"], "--pairing, --mlflow: not an option of face compare with --sequential"),
])
def test_a_bad_sequential_option_is_one_line_before_anything_is_written(tmp_path, capsys, flags, expected):
    write_logs(tmp_path / "v1.jsonl", _convs(2))
    write_logs(tmp_path / "v2.jsonl", _convs(2))
    with pytest.raises(SystemExit) as stop:
        main(_argv(tmp_path, "http://127.0.0.1:9/v1", *flags))
    err = capsys.readouterr().err
    assert stop.value.code == 2 and expected in err and err.count("\n") == 1, err
    assert not (tmp_path / "seq").exists() and not (tmp_path / "cache").exists()


def test_a_sequential_option_without_sequential_is_refused_not_ignored(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        main(["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--batch", "3", "--set", "llm.max_cost_usd=1"])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.count("\n") == 1, err
    assert "--batch, --set: not an option of face compare without --sequential" in err, err


def test_an_out_holding_another_runs_results_is_refused_before_anything_is_sent(tmp_path, capsys):
    write_logs(tmp_path / "v1.jsonl", _convs(2))
    write_logs(tmp_path / "v2.jsonl", _convs(2))
    (tmp_path / "seq").mkdir()
    (tmp_path / "seq" / "run_file.json").write_text("{}", encoding="utf-8")  # another run's, unmarked
    with pytest.raises(SystemExit) as stop:  # no server listens: a request sent would be exit 4, not 2
        main(_argv(tmp_path, "http://127.0.0.1:9/v1"))
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "--out" in err and "holds another run's results" in err, err
    assert "pass --overwrite to replace them" in err and sorted(p.name for p in (tmp_path / "seq").iterdir()) == [
        "run_file.json"]
