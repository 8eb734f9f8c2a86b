"""`face evaluate` on chat-format logs and `face report` (scripted server), bad logs, and the diagnostics
of the released judgements."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import evaluate, write_logs
from reliability import refused, run

from face.cli import main

CHAT = [
    {"id": "c1", "system": "crs-a", "messages": [
        {"role": "system", "content": "You recommend films."},
        {"role": "user", "content": "Any good heist movies?"},
        {"role": "assistant", "content": "Try Heat (1995). Do you like older films?"},
        {"role": "user", "content": "Yes, Heat sounds great, thanks!"}]},
    {"id": "c2", "system": "crs-b", "messages": [
        {"role": "user", "content": "Something funny please"},
        {"role": "assistant", "content": "Have you seen Airplane! (1980)? It is a classic comedy."},
        {"role": "user", "content": "Seen it. Newer?"},
        {"role": "assistant", "content": "Then try Game Night (2018)."}]},
]


def _jsonl(tmp_path: Path, convs, name="logs.jsonl") -> Path:
    return write_logs(tmp_path / name, convs)


def _evaluate(tmp_path, logs, *extra):
    return evaluate(tmp_path, logs, *extra, aspects="relevance,dialogue_overall")


def test_evaluate_chat_logs_writes_the_run_file_and_a_report_with_every_conversation_and_particle(
        evaluated_chat_logs, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(evaluated_chat_logs, out)  # the report is rebuilt below
    run = json.loads((out / "run_file.json").read_text())
    assert [r["conv_id"] for r in run] == ["c1", "c2"]
    assert [t["turn_ind"] for t in run[1]["turns"]] == [1, 3]  # the system message is not a turn
    assert set(run[0]["turns"][0]["turn_level_pred"]) == {"relevance"}
    html = (out / "report.html").read_text()
    particles = [json.loads(line) for line in (out / "particles.jsonl").read_text().splitlines()]
    assert len(particles) == 3  # three assistant turns
    for c in ("c1", "c2"):
        assert f'id="{c}"' in html
    for r in particles:
        for p in r["particles"]:
            assert p["particle"].replace("'", "&#39;") in html
    # face report rebuilds the same report without any LLM call
    first = (out / "report.html").read_text()
    (out / "report.html").unlink()
    assert main(["report", str(out)]) == 0
    assert (out / "report.html").read_text() == first


def test_dry_run_prints_the_estimate_and_sends_nothing(tmp_path, capsys):
    assert _evaluate(tmp_path, _jsonl(tmp_path, CHAT), "--dry-run") == 0
    assert "Cost estimate before sending anything" in capsys.readouterr().out
    assert not (tmp_path / "out" / "run_file.json").exists()


@pytest.mark.parametrize("flags,expected", [
    (["--confirm-above", "nan"], "--confirm-above must be a number of USD >= 0, got nan"),
    (["--confirm-above", "-1"], "--confirm-above must be a number of USD >= 0"),
    (["--limit", "0"], "--limit must be a positive number of conversations, got 0"),
])
def test_a_threshold_that_never_asks_or_a_limit_of_nothing_is_refused_before_anything(tmp_path, capsys, flags,
                                                                                       expected):
    with pytest.raises(SystemExit) as stop:
        _evaluate(tmp_path, _jsonl(tmp_path, CHAT), *flags)
    assert stop.value.code == 2 and expected in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_an_estimate_above_the_threshold_needs_yes_when_nobody_can_answer(tmp_path, monkeypatch, capsys):
    logs = _jsonl(tmp_path, CHAT)
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))  # no terminal: nobody can answer
    with pytest.raises(SystemExit) as stop:
        main(["evaluate", str(logs), "--llm", "fake", "--out", str(tmp_path / "out"), "--confirm-above", "0",
              "--set", "llm.price_input_per_mtok=1", "--set", f"paths.cache_dir={tmp_path / 'cache'}",
              "--aspects", "relevance"])
    assert stop.value.code == 2 and "rerun with --yes to send" in capsys.readouterr().err
    assert not (tmp_path / "out" / "run_file.json").exists()


@pytest.mark.parametrize("content,expected", [
    ([{"id": "x", "messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"},
                               {"role": "assistant", "content": "c"}]}],
     "[conversation 1 (x), message 2]: two consecutive user messages"),
    ([{"id": "y", "messages": [{"role": "user", "content": "only a question"}]}],
     "[conversation 1 (y)]: no assistant message"),
    ([{"id": "z", "messages": [{"role": "bot", "content": "hi"}]}], "message 1]: unknown role 'bot'"),
    ([{"id": "w", "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "  "}]}],
     "message 2]: empty message"),
    ([{"id": "v"}], "missing key 'messages'"),
    ("", "is empty"),
    (b"\xff\xfe\x00bad", "not UTF-8 text"),
    ("{not json", "neither JSON nor JSON Lines"),
])
def test_bad_logs_give_one_line_naming_file_conversation_and_message(tmp_path, monkeypatch, content, expected):
    p = tmp_path / "bad.json"
    if isinstance(content, bytes):
        p.write_bytes(content)
    else:
        p.write_text(content if isinstance(content, str) else json.dumps(content), encoding="utf-8")
    o = run("face", ["evaluate", str(p), "--llm", "fake", "--out", str(tmp_path / "out"), "--yes"], tmp_path,
            monkeypatch)
    assert refused(o, "bad.json", expected) == [], o.err
    assert not (tmp_path / "out").exists()


def test_bad_logs_are_refused_by_the_face_command_itself(tmp_path):
    """The same, through the installed command's own process (``python -m face.cli``): exit 2, one line."""
    p = tmp_path / "bad.json"
    p.write_text("{not json", encoding="utf-8")
    res = subprocess.run([sys.executable, "-m", "face.cli", "evaluate", str(p), "--llm", "fake", "--out",
                          str(tmp_path / "out"), "--yes"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 2
    assert res.stderr.count("\n") == 1 and "bad.json" in res.stderr and "neither JSON" in res.stderr, res.stderr
    assert not (tmp_path / "out").exists()


def _browser() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


@pytest.mark.slow  # process-, server- or rendering-bound (≈ 1 s): the fast suite stays within 45 s
def test_the_report_renders_in_headless_chromium_with_every_conversation_and_particle(evaluated_chat_logs, tmp_path):
    browser = _browser()
    if browser is None:
        pytest.skip("no Chromium installed (Debian: apt-get install chromium)")
    out = evaluated_chat_logs
    res = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                          "--disable-background-networking", "--disable-component-update", "--disable-sync",
                          f"--user-data-dir={tmp_path / 'profile'}", "--enable-logging=stderr", "--v=0",
                          "--dump-dom", (out / "report.html").as_uri()], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    dom = res.stdout
    assert "CONSOLE" not in res.stderr and "Uncaught" not in res.stderr  # no console errors
    for c in ("c1", "c2"):
        assert f'id="{c}"' in dom
    for line in (out / "particles.jsonl").read_text().splitlines():
        for p in json.loads(line)["particles"]:
            assert p["particle"] in dom.replace("&amp;", "&").replace("&#39;", "'")
    assert "Scored by:</b> FACE live — LLM: scripted-model (scripted)" in dom  # the LLM named at the top
