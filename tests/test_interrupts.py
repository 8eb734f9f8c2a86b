"""Issue 31 item 4: Ctrl-C during ``face.evaluate`` -- in the main thread, and in a Jupyter-style cell (a running
event loop: the run goes to a worker thread) -- ends with the one documented KeyboardInterrupt and nothing else on
stderr (no "Exception ignored in CachingLM._fetch ... RuntimeError: Event loop is closed", no destroyed pending task);
the LLM cache stays a consistent SQLite database and a rerun resumes from it.

Each run is a subprocess: what this is about is printed by the interpreter while the interrupted run is torn down."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = textwrap.dedent('''
    import asyncio, os, signal, sqlite3, sys, threading, time
    import face

    logs, out, cache, data, mode, after, latency, concurrency = sys.argv[1:9]
    signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal: a background job (`cmd &`, some CI
    # runners) starts with SIGINT ignored, and Python then installs no KeyboardInterrupt for it
    settings = {"method.scoring.n": 2, "method.instructions.max": 2, "llm.server.latency_s": float(latency),
                "llm.concurrency": int(concurrency), "paths": {"cache_dir": cache, "data_dir": data}}

    def interrupt_once_samples_arrive(n):  # Ctrl-C in the middle of the LLM work, not before or after it
        db = os.path.join(cache, "llm", "llm_cache.sqlite")
        while True:
            time.sleep(0.05)
            try:
                with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
                    if conn.execute("SELECT COUNT(*) FROM samples").fetchone()[0] >= n:
                        break
            except sqlite3.Error:
                continue
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)  # as a terminal's Ctrl-C, or Jupyter's

    def run():
        return face.evaluate(logs, aspects=["relevance", "dialogue_overall"], llm="scripted", out=out,
                             run_size="tiny", mlflow=False, overwrite=True, **settings)

    if int(after) > 0:
        threading.Thread(target=interrupt_once_samples_arrive, args=(int(after),), daemon=True).start()
    try:
        if mode == "cell":  # a notebook cell: a running event loop blocked by a synchronous call (ipykernel's loop
            async def cell():  # keeps Python's SIGINT handler, unlike asyncio.run's)
                return run()
            asyncio.new_event_loop().run_until_complete(cell())
        else:
            run()
        print("FINISHED")
    except KeyboardInterrupt:
        print("INTERRUPTED")
''')


def _chat_logs(path: Path, n: int = 12) -> Path:
    convs = [{"id": f"c{i}", "system": "crs-a", "messages": [
        {"role": "user", "content": f"I loved movie number {i}. More like it?"},
        {"role": "assistant", "content": f"Try film {i + 100}, a slow thriller. Want something newer?"},
        {"role": "user", "content": "Sure, newer please."},
        {"role": "assistant", "content": f"Then film {i + 200} from 2021."}]} for i in range(n)]
    path.write_text("\n".join(json.dumps(c) for c in convs) + "\n", encoding="utf-8")
    return path


def _run(tmp: Path, data_dir: Path, mode: str, after: int, latency_s: float, concurrency: int
         ) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "FACE_PROGRESS": "0"}
    return subprocess.run([sys.executable, "-c", SCRIPT, str(tmp / "logs.jsonl"), str(tmp / "out"),
                           str(tmp / "cache"), str(data_dir), mode, str(after), str(latency_s), str(concurrency)],
                          capture_output=True, text=True, env=env, timeout=600, cwd=tmp)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["main", "cell"])
def test_ctrl_c_during_evaluate_ends_with_one_keyboard_interrupt_and_a_rerun_resumes(tmp_path, data_dir, mode):
    _chat_logs(tmp_path / "logs.jsonl", 3)  # ≈ 380 requests, ≈ 19 s at this latency: the interrupt comes after 30
    stopped = _run(tmp_path, data_dir, mode, after=30, latency_s=0.2, concurrency=4)  # requests in flight
    assert stopped.stdout.strip().splitlines()[-1:] == ["INTERRUPTED"], stopped.stdout[-2000:] + stopped.stderr[-3000:]
    for noise in ("Exception ignored", "Event loop is closed", "Task was destroyed", "Traceback"):
        assert noise not in stopped.stderr, stopped.stderr[-3000:]
    db = tmp_path / "cache" / "llm" / "llm_cache.sqlite"
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        cached = conn.execute("SELECT COUNT(*) FROM samples").fetchone()[0]
    assert cached > 0  # it had sent something before the interrupt
    # the rerun only has to finish: no latency (a sample's cache key does not depend on the server's latency or the
    # client's concurrency, so what the first run cached is still found, as the cache_hits check below proves)
    again = _run(tmp_path, data_dir, mode, after=0, latency_s=0.0, concurrency=16)
    assert again.stdout.strip().splitlines()[-1:] == ["FINISHED"], again.stderr[-3000:]
    usage = json.loads((tmp_path / "out" / "llm_usage.json").read_text())["totals"]
    assert usage["cache_hits"] >= cached and usage["failures"] == 0  # resumed: what was cached was not sent again
    assert usage["samples"] > 0  # and the interrupted run had really stopped (a worker left running would finish)


def _batch_interrupted_in_a_writer_task(server_spec: dict, cache_dir: Path) -> tuple[bool, bool]:
    """A batch whose 7th request starts a writer task, as aiohttp does, and the interrupt lands in that writer.
    Returns (the batch raised KeyboardInterrupt, the writer ended); every object of the run is freed on return."""
    import asyncio

    from face.llm import ChatRequest, LLMClient, LLMConfig

    async def write_bytes() -> None:  # the signal lands here
        await asyncio.sleep(0)
        raise KeyboardInterrupt

    cfg = LLMConfig(backend="scripted", server=server_spec, model="scripted-model", cache_dir=str(cache_dir),
                    progress=False, concurrency=4, probe=False)
    reqs = [ChatRequest(messages=[{"role": "user", "content": f"question {i}"}]) for i in range(12)]
    client = LLMClient(cfg).start()
    send, writers = client.chat, []

    async def chat(req: ChatRequest):
        if req is reqs[6]:
            writers.append(asyncio.get_running_loop().create_task(write_bytes()))  # kept, as aiohttp keeps it
            await asyncio.sleep(10)  # reading the answer
        return await send(req)

    client.chat = chat  # type: ignore[method-assign]
    stopped = False
    try:
        client.run_batch(reqs)
    except KeyboardInterrupt:  # not kept (pytest.raises would keep its traceback, and the task with it)
        stopped = True
    finally:
        client.close()
    return stopped, len(writers) == 1 and writers[0].done()


def test_ctrl_c_inside_a_task_nobody_awaits_leaves_no_task_exception_never_retrieved(tmp_path, caplog):
    """Ctrl-C raises KeyboardInterrupt in whatever Python code the main thread runs. aiohttp (the SDK's HTTP client)
    writes each request's body in a task of its own that nobody awaits (``ClientRequest.write_bytes``): a SIGINT
    landing in that write ends the task with the KeyboardInterrupt, and unless the client takes it as it stops, Python
    prints "Task exception was never retrieved" and a traceback when the task is freed (seen in the Ctrl-C test
    above under load, 5 runs of 11). Here the request's task starts such a writer and the interrupt lands in it."""
    import gc
    import logging

    from face.testing.scripted import InProcessServer

    caplog.set_level(logging.ERROR, logger="asyncio")
    srv = InProcessServer()
    with srv:
        assert _batch_interrupted_in_a_writer_task(srv.spec(), tmp_path / "cache") == (True, True)
        gc.collect()
    assert [r.getMessage() for r in caplog.records if "never retrieved" in r.getMessage()] == []


def test_ctrl_c_during_face_report_is_one_line_and_exit_130_and_claims_no_mlflow_run(tmp_path, monkeypatch, capsys):
    """`face report` has no MLflow run: its interrupt line must not say one was marked. It used to end with Python's
    traceback of the KeyboardInterrupt (exit -2)."""
    import face.api.result
    from face.cli import main

    def interrupted(run_dir):
        raise KeyboardInterrupt

    monkeypatch.setattr(face.api.result, "build_report", interrupted)
    try:
        with pytest.raises(SystemExit) as e:
            main(["report", str(tmp_path)])
    except KeyboardInterrupt:
        pytest.fail("the interrupt reached the command line's caller: Python prints its traceback")
    err = capsys.readouterr().err
    assert e.value.code == 130 and err.splitlines() == ["interrupted: the run was stopped."], err


def test_the_resume_hint_of_a_stop_names_its_own_run_s_cache_and_no_earlier_run_s(tmp_path, data_dir):
    """A run that stops carries where its finished LLM calls are cached (the stop line's resume hint); a later stop in
    the same process (`face report`'s Ctrl-C, another run's) is not told an earlier run's cache: the runner set a
    process-wide variable and never reset it."""
    from helpers import run_overrides, run_paths

    from face.errors import ConfigError
    from face.runner import stop_line

    with pytest.raises(ConfigError) as refused:
        run_overrides([*run_paths(tmp_path, data_dir, False), "experiment=crsarena_main", "llm=fake",
                       "dataset.limit=0"])
    assert stop_line(KeyboardInterrupt()) == (130, "interrupted: the run was stopped.")
    assert f"Finished LLM calls are cached in {tmp_path / 'cache'}" in " ".join(getattr(refused.value, "__notes__", []))


@pytest.mark.slow  # three small `face evaluate --mlflow` runs in this process: ≈ 20 s
def test_mlflow_runs_of_one_out_tell_the_truth_and_a_finished_rerun_is_the_one_left(tmp_path, data_dir, monkeypatch,
                                                                                   capsys, mlflow_store):
    """A run interrupted in its last step (the report, after every LLM call and the run file) is KILLED in the store,
    and its line says so with the run's id; a run is FINISHED only once everything is written. The rerun that
    finishes replaces the earlier runs of the same --out (deleted, tagged face.replaced_by), so one --out has one
    run, and it removes the temporary file a killed run left there. The command's runs are in experiment
    ``face_evaluate``."""
    import importlib
    import shutil

    from helpers import evaluate_argv
    from mlflow.entities import ViewType
    from mlflow.tracking import MlflowClient

    from face.cli import main

    shutil.copyfile(mlflow_store, tmp_path / "m.db")
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    logs, out = _chat_logs(tmp_path / "logs.jsonl", 2), tmp_path / "out"
    argv = evaluate_argv(logs, out, "--mlflow", "--set", f"tracking.tracking_uri={uri}", "--set",
                         f"tracking.artifact_location={tmp_path / 'mlruns'}", "--set", f"paths.data_dir={data_dir}",
                         cache_dir=tmp_path / "cache")
    client = MlflowClient(tracking_uri=uri)

    def runs(view=ViewType.ACTIVE_ONLY) -> dict[str, str]:
        exp = client.get_experiment_by_name("face_evaluate")
        return {r.info.run_id: r.info.status for r in client.search_runs([exp.experiment_id], run_view_type=view)}

    api = importlib.import_module("face.api.evaluate")  # the module (face.api.evaluate is also the function)
    assert main(argv) == 0
    [first] = runs()
    report = api.build_report

    def killed_at_the_report(target):
        raise KeyboardInterrupt

    monkeypatch.setattr(api, "build_report", killed_at_the_report)
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        main(argv)
    [stopped] = set(runs()) - {first}
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert e.value.code == 130 and runs()[stopped] == "KILLED", runs()
    assert line.startswith(f"interrupted: the run was stopped (MLflow run {stopped} marked KILLED). "), line
    monkeypatch.setattr(api, "build_report", report)
    (out / ".particle_scores.k1113d00.tmp.jsonl").write_text("what a kill -9 left half written")
    assert main(argv) == 0
    [(last, status)] = runs().items()
    assert status == "FINISHED" and last not in (first, stopped)
    exp_id = client.get_experiment_by_name("face_evaluate").experiment_id
    every = {r.info.run_id: r for r in client.search_runs([exp_id], run_view_type=ViewType.ALL)}
    assert {every[old].data.tags["face.replaced_by"] for old in (first, stopped)} == {last}
    assert every[last].info.run_name.startswith("logs · scripted-model · ") and (out / "report.html").exists()
    assert list(out.glob(".*.tmp*")) == []
