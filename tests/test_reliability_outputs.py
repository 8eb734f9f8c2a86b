"""Reliability (issue 21): the outputs a run owns. Every --out / hydra.run.dir that cannot work is one line and exit 2
with nothing written; a directory holding another run's results, or in use by a running one, is refused; a run
never writes over its own input; paths are taken literally (``,`` ``'`` ``${...}``); every file is written whole or
not at all."""

from __future__ import annotations

import fcntl
import json
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from helpers import evaluate_argv, write_logs
from reliability import _without_dac_caps, refused, run, run_unprivileged

# the reliability suite (issue 21): in-process, but ~150 cases; run with the slow tests, one at a time, so that
# no other test writes into the project tree while a case checks that nothing outside its temp dir changed
pytestmark = pytest.mark.slow

CHAT = [{"id": "c1", "system": "crs-a", "messages": [
            {"role": "user", "content": "Any good heist movies?"},
            {"role": "assistant", "content": "Try Heat (1995). Do you like older films?"},
            {"role": "user", "content": "Yes, thanks!"}]},
        {"id": "c2", "system": "crs-b", "messages": [
            {"role": "user", "content": "Something funny please"},
            {"role": "assistant", "content": "Have you seen Airplane! (1980)?"}]}]
TOY_CONF = Path(__file__).parent / "toy_conf"


@pytest.fixture(autouse=True)
def _absolute_mirror(monkeypatch, mirror):
    """The runs start in their temp dir: the data mirror by its absolute path."""
    monkeypatch.setenv("FACE_DATA_MIRROR", str(mirror))


def _logs(path: Path, convs=CHAT) -> Path:
    return write_logs(path, convs)


def _evaluate(logs: Path, out, *extra: str) -> list[str]:
    return evaluate_argv(logs, out, "--limit", "1", *extra)


def _marker(d: Path, owner: dict) -> None:
    d.mkdir(parents=True, exist_ok=True)
    (d / ".face-run.json").write_text(json.dumps({"owner": owner}))


class _Held:
    """A lock held on a directory as a concurrent run would hold it (a descriptor of its own)."""

    def __init__(self, d: Path):
        d.mkdir(parents=True, exist_ok=True)
        self.fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
        fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)

    def release(self) -> None:
        os.close(self.fd)


def _run_py(*overrides: str) -> list[str]:
    """A small, cheap run (should a refusal ever fail to happen, it stays a test-sized run on the fake server)."""
    return ["experiment=crsarena_main", "tracking=none", "llm=fake", "run_size=tiny", "dataset.limit=1",
            "metaeval.n_boot=0", *overrides]


# name -> (entry, argv builder (tmp -> argv, and an optional object to release), words the line must say)
CASES = {
    "out_is_a_file": ("face", lambda t: _evaluate(_logs(t / "in.jsonl"), _file(t / "f.txt")), ["--out", "is a file"]),
    "out_under_a_file": ("face", lambda t: _evaluate(_logs(t / "in.jsonl"), _file(t / "f.txt") / "sub"),
                         ["--out", "is a file"]),
    "out_under_proc": ("face", lambda t: _evaluate(_logs(t / "in.jsonl"), "/proc/face-out"),
                       ["--out", "/proc/face-out", "pseudo-filesystem"]),
    "out_under_sys": ("face", lambda t: _evaluate(_logs(t / "in.jsonl"), "/sys/face-out/x"),
                      ["--out", "/sys/face-out/x", "pseudo-filesystem"]),
    "out_equal_to_the_input": ("face", lambda t: _evaluate(_logs(t / "in.jsonl"), t / "in.jsonl"),
                               ["--out", "the input file itself"]),
    "out_contains_the_input_as_run_file": ("face", lambda t: _evaluate(_logs(t / "d" / "run_file.json"), t / "d"),
                                           ["--out", "run_file.json", "overwrite"]),
    "out_contains_the_input_as_conversations": (
        "face", lambda t: _evaluate(_logs(t / "d" / "conversations.json"), t / "d"),
        ["--out", "conversations.json", "overwrite"]),
    "out_contains_the_input_as_particles": ("face", lambda t: _evaluate(_logs(t / "d" / "particles.jsonl"), t / "d"),
                                            ["--out", "particles.jsonl", "overwrite"]),
    "default_out_contains_the_input": (
        "face", lambda t: _evaluate(_logs(t / "face-runs" / "run_file" / "run_file.json"), None),
        ["--out", "run_file.json", "overwrite"]),
    "out_held_by_another_run": ("face", lambda t: _evaluate(_logs(t / "in.jsonl"),
                                                            _marked(t / "old", {"settings": "0" * 64})),
                                ["--out", "another run's results", "--overwrite"]),
    "out_holds_results_without_a_marker": ("face", lambda t: _evaluate(_logs(t / "in.jsonl"),
                                                                       _file(t / "old" / "run_file.json").parent),
                                           ["--out", "another run's results", "--overwrite"]),
    "out_locked_by_a_concurrent_run": ("face", lambda t: (_evaluate(_logs(t / "in.jsonl"), t / "busy"),
                                                          _Held(t / "busy")), ["--out", "in use by another run"]),
    "out_empty": ("face", lambda t: _evaluate(_logs(t / "in.jsonl"), ""), ["--out", "empty"]),
    "out_name_too_long": ("face", lambda t: _evaluate(_logs(t / "in.jsonl"), t / ("x" * 300)),
                          ["--out", "too long"]),
    "run_dir_is_a_file": ("run.py", lambda t: _run_py(f"hydra.run.dir={_file(t / 'f.txt')}"),
                          ["hydra.run.dir", "is a file"]),
    "run_dir_under_a_file": ("run.py", lambda t: _run_py(f"hydra.run.dir={_file(t / 'f.txt') / 'sub'}"),
                             ["hydra.run.dir", "is a file"]),
    "run_dir_under_proc": ("run.py", lambda t: _run_py("hydra.run.dir=/proc/face-run"),
                           ["hydra.run.dir", "pseudo-filesystem"]),
    "run_dir_under_sys": ("run.py", lambda t: _run_py("hydra.run.dir=/sys/face-run"),
                          ["hydra.run.dir", "pseudo-filesystem"]),
    "run_dir_empty": ("run.py", lambda t: _run_py("hydra.run.dir="), ["hydra.run.dir", "empty"]),
    "run_dir_name_too_long": ("run.py", lambda t: _run_py(f"hydra.run.dir={t / ('y' * 300)}"),
                              ["hydra.run.dir", "too long"]),
    "run_dir_equal_to_the_input": ("run.py", lambda t: _run_py(
        "dataset=chat_logs", f"dataset.path={_logs(t / 'in.jsonl')}", f"hydra.run.dir={t / 'in.jsonl'}"),
        ["hydra.run.dir", "the input file itself"]),
    "run_dir_contains_the_input": ("run.py", lambda t: _run_py(
        "dataset=chat_logs", f"dataset.path={_logs(t / 'r' / 'run_file.json')}", f"hydra.run.dir={t / 'r'}"),
        ["hydra.run.dir", "run_file.json", "overwrite"]),
    "run_dir_holds_another_runs_outputs": ("run.py", lambda t: _run_py(f"hydra.run.dir={_old_run(t / 'old')}"),
        ["hydra.run.dir", "another run's results"]),
    "run_dir_locked_by_a_concurrent_run": ("run.py", lambda t: (_run_py(f"hydra.run.dir={t / 'busy'}"),
                                                                _Held(t / "busy")),
                                           ["hydra.run.dir", "in use by another run"]),
    # another run's directory named by any other spelling of an output location (issue 29): refused, V unchanged
    **{f"run_py_{k}_into_another_run": ("run.py", lambda t, k=k: _run_py(f"{k}={_marked(t / 'v', {'settings': '0'})}"),
                                        [k.lstrip("+"), "another run's results"])
       for k in ("paths.output_dir", "++paths.output_dir", "report.out_dir", "++report.out_dir", "hydra.run.dir",
                 "++hydra.run.dir")},
    "run_py_interpolated_output_dir_into_another_run": (
        "run.py", lambda t: _run_py(f"+victim={_marked(t / 'v', {'settings': '0'})}", "paths.output_dir=${victim}"),
        ["paths.output_dir", "another run's results"]),
    **{f"face_set_{k}_into_another_run": ("face", lambda t, k=k: _evaluate(
        _logs(t / "in.jsonl"), t / "mine", "--set", f"{k}={_marked(t / 'v', {'settings': '0'})}"), [k, "--out"])
       for k in ("paths.output_dir", "++paths.output_dir", "report.out_dir", "++report.out_dir", "hydra.run.dir",
                 "+hydra.job.env_set.X")},
    "results_dir_locked_by_a_concurrent_run": (
        "run.py", lambda t: (["experiment=toy_eval", f"hydra.searchpath=[file://{TOY_CONF}]", "tracking=none",
                              "metaeval.n_boot=0", f"hydra.run.dir={t / 'run'}"], _Held(t / "results" / "toy_eval")),
        ["paths.results_dir", "in use by another run"]),
}


def _file(p: Path) -> Path:
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text("not a directory\n")
    return p


def _old_run(d: Path) -> Path:
    """A run directory of an earlier run (no marker: from before markers, or another tool's)."""
    _file(d / ".hydra" / "config.yaml")
    (d / "run_file.json").write_text("[]")
    return d


def _marked(d: Path, owner: dict) -> Path:
    _marker(d, owner)
    (d / "run_file.json").write_text("[]")
    return d


@pytest.mark.parametrize("name", list(CASES))
def test_an_output_directory_that_cannot_be_this_runs_is_refused_with_one_line(name, tmp_path, monkeypatch,
                                                                              data_dir):
    entry, build, words = CASES[name]
    built = build(tmp_path)
    argv, held = built if isinstance(built, tuple) else (built, None)
    if entry == "run.py":
        argv = [*argv, f"paths.data_dir={data_dir}"]
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    try:
        o = run(entry, argv, tmp_path, monkeypatch)
    finally:
        if held is not None:
            held.release()
    assert refused(o, *words) == [], (o.err[-1500:], o.out[-500:])
    after = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()
             if not (name.startswith("results_dir") and tmp_path / "run" in p.parents)}  # Hydra's own .hydra/
    assert after == before  # nothing written, nothing replaced, not even in the temp dir


def test_an_out_under_a_read_only_directory_is_refused(tmp_path):
    """Run as CI runs it, as root, too: the command runs without the capabilities that let root write past a
    directory's mode (run_unprivileged), so the 0o500 directory binds it as it binds any user."""
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        o = run_unprivileged(_evaluate(_logs(tmp_path / "in.jsonl"), ro / "out"), tmp_path)
    finally:
        ro.chmod(0o700)
    assert refused(o, "--out", "not writable") == [], o.err
    assert list(ro.iterdir()) == []


def test_the_unprivileged_run_is_bound_by_file_modes(tmp_path):
    """The check above can fail: a process started by run_unprivileged cannot write into a 0o500 directory, while
    the same command writes into it once it is writable."""
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        o = run_unprivileged(["--help"], tmp_path)
        probe = __import__("subprocess").run(
            [sys.executable, "-c", f"open({str(ro / 'x')!r}, 'w')"], capture_output=True, text=True,
            preexec_fn=_without_dac_caps if os.geteuid() == 0 else None)
    finally:
        ro.chmod(0o700)
    assert o.code == 0 and probe.returncode != 0 and "Permission denied" in probe.stderr
    assert not (ro / "x").exists()


def test_an_out_under_an_immutable_directory_is_refused(tmp_path, monkeypatch):
    import shutil
    import subprocess

    frozen = tmp_path / "frozen"
    frozen.mkdir()
    if not shutil.which("chattr") or subprocess.run(["chattr", "+i", str(frozen)], capture_output=True).returncode:
        pytest.skip("chattr +i is not available here (needs root and a file system that supports it)")
    try:
        o = run("face", _evaluate(_logs(tmp_path / "in.jsonl"), frozen / "out"), tmp_path, monkeypatch)
    finally:
        subprocess.run(["chattr", "-i", str(frozen)], check=True)
    assert refused(o, "--out", "not writable") == []
    assert list(frozen.iterdir()) == []


# ---------------------------------------------------------------- paths are taken literally
def test_an_interpolation_in_out_is_a_literal_directory_name_never_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("FACE_TEST_SECRET", "sk-not-a-real-key-123")
    out = tmp_path / "${oc.env:FACE_TEST_SECRET}"
    o = run("face", [*_evaluate(_logs(tmp_path / "in.jsonl"), out), "--dry-run"], tmp_path, monkeypatch)
    assert o.code == 0, o.err[-1500:]
    assert (out / "cost_estimate.csv").exists()
    assert not any("sk-not-a-real-key" in str(p) for p in tmp_path.rglob("*"))


@pytest.mark.parametrize("value", ["/x/a,b", "/x/it's", "/x/${oc.env:HOME}", "/x/a b/ünï", "/x/back\\slash",
                                   "/x/end\\", "/x/\\${x}", "/x/'${a}'\\"])
def test_a_setting_composes_to_exactly_the_string_given(value):
    from face.runner.compose import composed

    with composed(["experiment=crsarena_main"], {"report.out_dir": value}) as cfg:
        assert cfg.report.out_dir == value


def test_an_input_and_an_out_with_comma_quote_and_interpolation_run_end_to_end(tmp_path, monkeypatch):
    odd = tmp_path / "a,b's ${x}"
    logs = _logs(odd / "in,put's ${y}.jsonl")
    out = odd / "out,'${z}"
    o = run("face", _evaluate(logs, out), tmp_path, monkeypatch)
    assert o.code == 0, o.err[-1500:]
    run_file = json.loads((out / "run_file.json").read_text())
    assert [r["conv_id"] for r in run_file] == ["c1"]  # --limit 1
    assert (out / "report.html").exists() and (out / "particle_scores.jsonl").exists()
    assert not list(out.glob(".*tmp*"))  # no temporary file left behind


# ---------------------------------------------------------------- resume, overwrite
def test_a_rerun_with_the_same_input_resumes_and_another_input_needs_overwrite(tmp_path, monkeypatch):
    logs, out = _logs(tmp_path / "in.jsonl"), tmp_path / "out"
    first = run("face", _evaluate(logs, out), tmp_path, monkeypatch)
    assert first.code == 0, first.err[-1500:]
    assert "Resuming" not in first.out
    again = run("face", _evaluate(logs, out), tmp_path, monkeypatch)
    assert again.code == 0, again.err[-1500:]
    assert "Resuming the run in" in again.out
    assert json.loads((out / "run_file.json").read_text())[0]["conv_id"] == "c1"
    other = _logs(tmp_path / "other.jsonl", [dict(CHAT[1], id="z9")])
    refusal = run("face", _evaluate(other, out), tmp_path, monkeypatch)
    assert refused(refusal, "another run's results", "--overwrite") == []
    assert json.loads((out / "run_file.json").read_text())[0]["conv_id"] == "c1"  # untouched
    replaced = run("face", [*_evaluate(other, out), "--overwrite"], tmp_path, monkeypatch)
    assert replaced.code == 0, replaced.err[-1500:]
    assert "Overwriting another run's results" in replaced.out
    assert [r["conv_id"] for r in json.loads((out / "run_file.json").read_text())] == ["z9"]
    assert json.loads((out / "conversations.json").read_text())[0]["conv_id"] == "z9"
    # other settings on the same input are another run as well
    settings = run("face", [*_evaluate(other, out), "--aspects", "dialogue_overall"], tmp_path, monkeypatch)
    assert refused(settings, "another run's results") == []


def test_the_lock_is_released_when_the_run_ends(tmp_path, monkeypatch):
    out = tmp_path / "out"
    o = run("face", [*_evaluate(_logs(tmp_path / "in.jsonl"), out), "--dry-run"], tmp_path, monkeypatch)
    assert o.code == 0, o.err[-1500:]
    held = _Held(out)  # would raise BlockingIOError if the run still held it
    held.release()


def test_run_py_resumes_its_own_explicit_run_dir_and_refuses_other_settings_there(tmp_path, monkeypatch, data_dir):
    run_dir = tmp_path / "run"
    argv = ["experiment=toy_eval", f"hydra.searchpath=[file://{TOY_CONF}]", "metaeval.n_boot=0", "tracking=none",
            f"paths.data_dir={data_dir}", f"hydra.run.dir={run_dir}"]
    first = run("run.py", argv, tmp_path, monkeypatch)
    assert first.code in (0, None), first.err[-1500:]
    assert (run_dir / ".face-run.json").exists() and (run_dir / ".hydra").is_dir()
    again = run("run.py", argv, tmp_path, monkeypatch)
    assert again.code in (0, None), again.err[-1500:]
    assert "Resuming the run in" in again.out
    other = run("run.py", [*argv[:2], "metaeval.n_boot=3", *argv[3:]], tmp_path, monkeypatch)
    assert refused(other, "hydra.run.dir", "another run's results") == []


def test_a_refused_run_writes_nothing_and_a_run_dir_with_only_hydra_s_record_takes_the_corrected_command(
        tmp_path, monkeypatch, data_dir):
    """The runner checks every setting before Hydra writes its .hydra/ record: a refused run leaves no directory. A
    directory holding only such a record (and a log) is no other run's results: the next command takes it."""
    run_dir = tmp_path / "run"
    argv = ["experiment=toy_eval", f"hydra.searchpath=[file://{TOY_CONF}]", "tracking=none",
            f"paths.data_dir={data_dir}", f"hydra.run.dir={run_dir}"]
    bad = run("run.py", [*argv, "metaeval.n_boot=-1"], tmp_path, monkeypatch)
    assert refused(bad, "metaeval.n_boot") == []
    assert not run_dir.exists()
    _file(run_dir / ".hydra" / "config.yaml")
    _file(run_dir / "run.log")
    good = run("run.py", [*argv, "metaeval.n_boot=0"], tmp_path, monkeypatch)
    assert good.code in (0, None), good.err[-1500:]
    assert (run_dir / "run_file.json").exists() and (run_dir / ".face-run.json").exists()


# ---------------------------------------------------------------- a file is whole or absent
def test_a_write_that_fails_half_way_leaves_the_old_bytes_and_no_temporary_file(tmp_path):
    from face.files import atomic_open, atomic_write_text

    path = tmp_path / "table.csv"
    path.write_bytes(b"old,bytes\n1,2\n")
    with pytest.raises(RuntimeError), atomic_open(path) as f:
        f.write("new,half")
        f.flush()
        raise RuntimeError("disk full, say")
    assert path.read_bytes() == b"old,bytes\n1,2\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["table.csv"]
    atomic_write_text(path, "new\n")
    assert path.read_bytes() == b"new\n"
    assert oct(path.stat().st_mode & 0o777) == oct(0o666 & ~_umask())  # as open() would make it, not mkstemp's 0600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["table.csv"]


def test_the_next_run_into_a_directory_removes_the_temporary_file_a_killed_run_left_there(tmp_path):
    """kill -9 while particle_scores.jsonl is being written leaves its temporary name (no ``finally`` runs); the next
    run to take the directory (its lock: no one else writes there) removes it, and only it. A killed run's
    ``.particle_scores.*.tmp.jsonl`` used to survive a successful rerun."""
    import signal
    import subprocess

    out = tmp_path / "out"
    out.mkdir()
    killed = ("import os, signal, sys\nfrom face.files import atomic_path\n"
              "with atomic_path(sys.argv[1]) as tmp:\n    tmp.write_text('half a file')\n"
              "    os.kill(os.getpid(), signal.SIGKILL)\n")
    r = subprocess.run([sys.executable, "-c", killed, str(out / "particle_scores.jsonl")], capture_output=True,
                       env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    assert r.returncode == -signal.SIGKILL, r.stderr
    [left] = out.glob(".particle_scores.*.tmp.jsonl")
    assert left.read_text() == "half a file"
    for name in (".face-run.json", ".notes.tmp.txt", "particle_scores.tmp.jsonl"):  # a run's, or the user's: kept
        (out / name).write_text("x")
    from face.files import dir_lock

    with dir_lock(out, "--out"):
        assert sorted(p.name for p in out.iterdir()) == [".face-run.json", ".notes.tmp.txt",
                                                         "particle_scores.tmp.jsonl"]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_a_figure_written_through_a_temporary_name_is_a_png(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from face.files import atomic_path

    fig = plt.figure()
    with atomic_path(tmp_path / "f.png") as tmp:
        fig.savefig(tmp)
    plt.close(fig)
    assert (tmp_path / "f.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in tmp_path.iterdir()] == ["f.png"]


def test_a_scoring_stream_stopped_half_way_leaves_the_previous_complete_file(tmp_path):
    from face.pipeline.records import ScoreSink
    from face.pipeline.scoring import ScoreRecord

    path = tmp_path / "particle_scores.jsonl"
    path.write_text('{"previous": "run"}\n')
    rec = ScoreRecord(aspect="relevance", conv_id="c1", turn_ind=1, particle_ind=-1, instruction_id="i0", score=3.0,
                      estimator="sampling", n_requested=1, n_valid=1)
    with pytest.raises(KeyboardInterrupt), ScoreSink(path) as sink:
        sink.add(rec)
        raise KeyboardInterrupt
    assert path.read_text() == '{"previous": "run"}\n'
    assert [p.name for p in tmp_path.iterdir()] == ["particle_scores.jsonl"]
    with ScoreSink(path) as sink:
        sink.add(rec)
    lines = path.read_text().splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["conv_id"] == "c1"
    assert [p.name for p in tmp_path.iterdir()] == ["particle_scores.jsonl"]


def test_a_process_is_alive_until_it_exits_and_a_zombie_or_a_reused_pid_counts_as_gone():
    import subprocess
    import time

    from face.files import process_alive, process_start

    me = os.getpid()
    assert process_alive(me) and process_alive(me, process_start(me))
    assert not process_alive(me, "0")  # a start time that is not this process's: the pid was reused
    child = subprocess.Popen(["sleep", "30"])
    assert process_alive(child.pid)
    child.kill()
    deadline = time.monotonic() + 5
    while process_alive(child.pid) and time.monotonic() < deadline:  # killed, not yet reaped: a zombie
        time.sleep(0.01)
    assert not process_alive(child.pid)
    child.wait()  # reaped: no such process
    assert not process_alive(child.pid)
