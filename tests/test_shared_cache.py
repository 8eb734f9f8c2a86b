"""No request paid twice across processes (issue 33): processes that share an LLM cache claim the samples they
send (face/llm/claims.py). Two owners of one cache file in one process stand in for two processes in the fast
tests; the slow ones run real processes (`face evaluate`, a `submitit_local` sweep) against the scripted server in
a process of its own and read its request log."""

from __future__ import annotations

import asyncio
import collections
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import evaluate_argv

from face.llm import ChatRequest, LLMConfig, make_client
from face.llm import claims as claims_mod
from face.llm.store import SampleCache
from face.testing.scripted import _h, read_log, spawn

ROOT = Path(__file__).resolve().parents[1]


def _cfg(url: str, cache: Path, **over) -> LLMConfig:
    return LLMConfig(backend="openai_compatible", base_url=url, model="scripted-model", cache_dir=str(cache),
                     progress=False, concurrency=8, seed=0, n_per_request=8, probe=False, **over)


def _reqs(k: int, n: int = 3) -> list[ChatRequest]:
    return [ChatRequest(messages=(("user", f"question {i}"),), n=n, tag="t") for i in range(k)]


def test_a_claimed_key_is_waited_for_and_read_when_its_owner_answers(tmp_path):
    a, b = SampleCache(tmp_path), SampleCache(tmp_path)

    async def go():
        mine = await a.claim(["k1", "k2"])
        theirs = await b.claim(["k1", "k2", "k3"])
        assert mine.mine == {"k1", "k2"} and theirs.theirs == {"k1", "k2"} and theirs.mine == {"k3"}
        waiting = asyncio.ensure_future(b.claims.wait({"k1", "k2"}))
        await asyncio.sleep(0.1)
        assert not waiting.done()  # the owner is alive and has not answered
        a.put_many([("k1", "m", "t", 0, {"text": "one", "finish_reason": "stop"})], release=["k1", "k2"])
        found, free = await asyncio.wait_for(waiting, 5)
        return found, free, await b.claim(["k2"])

    found, free, again = asyncio.run(go())
    assert json.loads(found["k1"])["text"] == "one"  # answered: read, not sent
    assert free == {"k2"} and again.mine == {"k2"}  # given back unanswered: claimed anew by the waiter
    assert b.claims.waited == 2 and b.claims.taken_over == 0  # (llm_usage.json's claims_waited_samples)
    a.close(), b.close()


def test_a_gone_owners_claims_are_taken_over_and_deleted(tmp_path, monkeypatch):
    a, b = SampleCache(tmp_path), SampleCache(tmp_path)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # a pid that no longer runs
    monkeypatch.setattr(a.claims, "pid", dead.pid)

    async def go():
        await a.claim(["k1"])
        assert (await b.claim(["k1"])).theirs == {"k1"}
        return await asyncio.wait_for(b.claims.wait({"k1"}), 5), await b.claim(["k1"])

    (found, free), again = asyncio.run(go())
    assert found == {} and free == {"k1"} and b.claims.taken_over == 1
    assert again.mine == {"k1"}  # the dead owner's claim is gone, not only reported free (else: waited for again)


NO_SUCH_PID = 2 ** 22 + 1  # above Linux's largest pid_max: no process of this host has it


def test_a_claim_expires_30_s_after_its_last_beat_and_a_remote_owner_is_judged_by_its_beat_alone():
    now = time.time()
    host = claims_mod.socket.gethostname()
    assert claims_mod.alive(os.getpid(), host, now, now)
    assert claims_mod.alive(os.getpid(), host, now - 29.5, now)  # a slow owner: beats every 2 s, stale after 30 s
    assert not claims_mod.alive(os.getpid(), host, now - 30.5, now)  # no heartbeat for 30 s
    assert not claims_mod.alive(NO_SUCH_PID, host, now, now)  # a process of this host that no longer runs
    # another host: its pid means nothing here (here it cannot exist), the heartbeat alone decides
    assert claims_mod.alive(NO_SUCH_PID, "another-host", now, now)
    assert not claims_mod.alive(NO_SUCH_PID, "another-host", now - 30.5, now)


def _foreign_claim(cache: Path, key: str, pid: int, host: str, beat: float) -> None:
    """A claim written by another process (it never beats)."""
    import sqlite3

    with sqlite3.connect(cache / "llm_cache.sqlite") as conn:
        conn.execute("INSERT INTO claims (key, owner, pid, host, beat) VALUES (?, ?, ?, ?, ?)",
                     (key, f"{host}:{pid}:x", pid, host, beat))


class _Clock:
    """The waiter's clock: each reading 7 s after the one before (the claims' beats stand still meanwhile)."""

    def __init__(self, start: float):
        self.readings = [start - 7]

    def time(self) -> float:
        self.readings.append(self.readings[-1] + 7)
        return self.readings[-1]


def test_a_claim_whose_beat_lies_in_the_future_is_taken_over_once_the_waiter_saw_it_unchanged_for_30_s(
        tmp_path, monkeypatch):
    """Issue 41: a live pid of this host (reused) or another host's, with a beat an hour ahead, blocked a run for
    ever (its age never grew). The waiter's own clock bounds it: the same beat seen for 30 s is no heartbeat."""
    now = time.time()
    b = SampleCache(tmp_path)
    _foreign_claim(tmp_path, "k1", os.getpid(), claims_mod.socket.gethostname(), now + 3600)  # alive here
    _foreign_claim(tmp_path, "k2", NO_SUCH_PID, "another-host", now + 3600)
    clock = _Clock(now)
    monkeypatch.setattr(claims_mod, "time", clock)
    monkeypatch.setattr(claims_mod, "POLL_S", 0.01)

    async def go():
        assert (await b.claim(["k1", "k2"])).theirs == {"k1", "k2"}
        first = len(clock.readings)
        got = await asyncio.wait_for(b.claims.wait({"k1", "k2"}), 5)
        waited = clock.readings[-1] - clock.readings[first]  # from the first look to the one that took them over
        return got, waited, await b.claim(["k1", "k2"])

    (found, free), waited, again = asyncio.run(go())
    assert found == {} and free == {"k1", "k2"} and b.claims.taken_over == 2
    assert 30 < waited <= 37  # not before 30 s of the waiter's clock, at the first look after
    assert again.mine == {"k1", "k2"}
    b.close()


def test_an_owner_that_keeps_beating_keeps_its_claims_however_long_it_is_waited_for(tmp_path, monkeypatch):
    """The waiter's clock runs 7 s a reading, far past 30 s; the owner beats at each of its commits (every 0.01 s
    here, 2 s by default), so its claim is never stale; once it answers, it stops committing."""
    monkeypatch.setattr(claims_mod, "BEAT_S", 0.01)
    monkeypatch.setattr(claims_mod, "POLL_S", 0.01)
    clock = _Clock(time.time())
    monkeypatch.setattr(claims_mod, "time", clock)
    a, b = SampleCache(tmp_path), SampleCache(tmp_path)

    async def go():
        await a.claim(["k1"])
        start = clock.readings[-1]
        waiting = asyncio.ensure_future(b.claims.wait({"k1"}))
        await asyncio.sleep(0.3)  # nothing else happens: the heartbeat alone commits
        assert not waiting.done() and clock.readings[-1] - start > 60
        a.put_many([("k1", "m", "t", 0, {"text": "one", "finish_reason": "stop"})], release=["k1"])
        found, free = await asyncio.wait_for(waiting, 5)
        commits = a.commits
        await asyncio.sleep(0.05)
        return found, free, commits

    found, free, commits = asyncio.run(go())
    assert json.loads(found["k1"])["text"] == "one" and free == set() and b.claims.taken_over == 0
    assert a.commits == commits  # no claim held: no more beats
    a.close(), b.close()


def test_the_heartbeat_is_one_update_per_beat_s_not_one_per_transaction(tmp_path):
    a = SampleCache(tmp_path)

    def beat(key: str) -> float:
        return a._conn.execute("SELECT beat FROM claims WHERE key = ?", (key,)).fetchone()[0]

    async def go():
        await a.claim(["k1"])
        first = beat("k1")
        await a.claim(["k2"])  # another transaction well within 2 s: k1's beat is fresh, left alone
        return first, beat("k1"), beat("k2")

    first, again, k2 = asyncio.run(go())
    assert again == first < k2
    a.close()


def test_a_cache_closed_with_claims_held_gives_them_back(tmp_path):
    a, b = SampleCache(tmp_path), SampleCache(tmp_path)

    async def go():
        await a.claim(["k1"])  # a run stopped half-way: nothing answered
        a.close()
        return await b.claim(["k1"])

    assert asyncio.run(go()).mine == {"k1"}
    b.close()


def test_a_claim_whose_transaction_fails_for_good_raises_in_the_request_that_asked(tmp_path):
    import sqlite3

    a = SampleCache(tmp_path)

    async def go():
        a._conn.close()  # every statement now fails (not "database is locked": no retry)
        asking = a.claim(["k1"])
        with pytest.raises(sqlite3.ProgrammingError):
            a.flush()
        with pytest.raises(sqlite3.ProgrammingError):
            await asyncio.wait_for(asking, 1)  # told, not left waiting

    asyncio.run(go())


def test_one_process_sends_each_sample_once_and_keeps_no_claim(tmp_path):
    from face.testing.scripted import ScriptedServer

    server = ScriptedServer()
    with server as info:
        with make_client(_cfg(info.base_url, tmp_path / "c")) as client:
            client.run_batch(_reqs(6))
            client.run_batch(_reqs(6, n=5))  # the same questions: only samples 3 and 4 are new
            held = client.cache.store._conn.execute("SELECT COUNT(*) FROM claims").fetchone()[0]
        sent = [(e["messages_hash"], e["seed"] + j) for e in server.log for j in range(e["n"])]
    assert held == 0  # every claim given back with its answer
    assert len(sent) == len(set(sent)) == 6 * 5  # samples 0-2 once, then only 3-4 of the same questions


def _chat_logs(path: Path, k: int) -> Path:
    lines = []
    for i in range(k):
        lines.append(json.dumps({"id": f"c{i}", "system": f"crs-{i % 2}", "messages": [
            {"role": "user", "content": f"Any good heist movie number {i}?"},
            {"role": "assistant", "content": f"Try Heat ({1990 + i}). Do you like older films?"},
            {"role": "user", "content": "Yes, thanks!"},
            {"role": "assistant", "content": f"Then also Ronin ({1998 + i})."}]}))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _evaluate(logs: Path, out: Path, url: str, cache: Path, concurrency: int = 8) -> list[str]:
    return [sys.executable, "-m", "face.cli", *evaluate_argv(
        logs, out, "--set", f"llm.base_url={url}", "--set", "llm.model=scripted-model",
        "--set", f"llm.concurrency={concurrency}", "--set", "llm.adaptive_concurrency=false",
        "--set", "llm.progress=false", aspects="relevance,dialogue_overall", llm="openai_compatible", cache_dir=cache)]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "FACE_PROGRESS": "0"}


PROBE = _h([{"role": "user", "content": "Answer with one word: ok"}])[:16]  # face/llm/probe.py's question


def _sent_samples(log: list[dict]) -> collections.Counter:
    """(prompt, sample seed) of every sample the server answered with 200, the endpoint probe's left out."""
    return collections.Counter((e["messages_hash"], e["seed"] + j) for e in log
                               if e["status"] == 200 and e["messages_hash"] != PROBE for j in range(e["n"] or 1))


def _sampled(totals: dict) -> int:
    """Samples a run sent, its probe's left out."""
    return totals["samples"] - totals["by_tag"].get("probe", {}).get("samples", 0)


@pytest.mark.slow
def test_two_face_evaluate_processes_on_one_cache_send_each_request_once(tmp_path):
    log = tmp_path / "server.jsonl"
    server, url = spawn(0.2, "--log", str(log))
    try:
        logs = _chat_logs(tmp_path / "logs.jsonl", 6)
        procs = [subprocess.Popen(_evaluate(logs, tmp_path / f"out{k}", url, tmp_path / "cache"), cwd=tmp_path,
                                  env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                 for k in (1, 2)]
        outs = [p.communicate(timeout=240)[0] for p in procs]
    finally:
        server.terminate()
        server.wait()
    assert [p.returncode for p in procs] == [0, 0], outs[0][-2000:] + outs[1][-2000:]
    entries = read_log(str(log))
    hashes = collections.Counter(e["hash"] for e in entries)
    assert max(hashes.values()) == 1, [h for h, n in hashes.items() if n > 1]  # the probe too: one process probes
    totals = [json.loads((tmp_path / f"out{k}" / "llm_usage.json").read_text())["totals"] for k in (1, 2)]
    assert sum(t["claims_waited_samples"] for t in totals) > 0  # they did run side by side and share the work
    sent = _sent_samples(entries)
    assert max(sent.values()) == 1 and sum(_sampled(t) for t in totals) == sum(sent.values())  # none paid twice
    runs = [(tmp_path / f"out{k}" / "run_file.json").read_text() for k in (1, 2)]
    assert runs[0] == runs[1]


def _lines(log: Path) -> int:
    return log.read_text().count("\n") if log.exists() else 0


def _until(log: Path, lines: int, timeout: float = 120) -> None:
    deadline = time.time() + timeout
    while _lines(log) < lines and time.time() < deadline:
        time.sleep(0.05)


@pytest.mark.slow
def test_kill_9_of_one_process_leaves_the_other_to_finish_and_the_rerun_completes(tmp_path):
    """The first process runs ahead (the second starts once it is sending, and waits for the samples it is
    sending), then is killed: the second takes its claims over, finishes, and the first's rerun completes."""
    log = tmp_path / "server.jsonl"
    server, url = spawn(0.2, "--log", str(log))
    try:
        logs = _chat_logs(tmp_path / "logs.jsonl", 6)  # ≈ 180 requests: the kill comes after 60
        cmds = [_evaluate(logs, tmp_path / f"out{k}", url, tmp_path / "cache", concurrency=4) for k in (1, 2)]
        first = subprocess.Popen(cmds[0], cwd=tmp_path, env=_env(), stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)
        _until(log, 10)
        other = subprocess.Popen(cmds[1], cwd=tmp_path, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 text=True)
        _until(log, 60)
        assert first.poll() is None, "the first process ended before it could be killed mid-run"
        os.kill(first.pid, signal.SIGKILL)  # its claims stay behind, its process is gone
        first.wait()
        out = other.communicate(timeout=240)[0]
        assert other.returncode == 0, out[-3000:]
        rerun = subprocess.run(cmds[0], cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=240)
        assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
    finally:
        server.terminate()
        server.wait()
    runs = [(tmp_path / f"out{k}" / "run_file.json").read_text() for k in (1, 2)]
    assert runs[0] == runs[1]
    taken = [json.loads((tmp_path / f"out{k}" / "llm_usage.json").read_text())["totals"]["claims_taken_over"]
             for k in (1, 2)]
    assert sum(taken) > 0  # the killed process's claims were taken over, not waited for forever
    entries = read_log(str(log))
    twice = sum(n - 1 for n in _sent_samples(entries).values())
    assert twice <= 4 * max(e["n"] or 1 for e in entries)  # at most what the killed process had in flight


@pytest.mark.slow
def test_a_submitit_local_sweep_sends_the_samples_its_jobs_share_once(tmp_path, data_dir):
    """Two jobs of one sweep in two processes, n = 2 and n = 3 samples per unit × instruction: the first two
    samples of every prompt are the same cache keys in both jobs, and they are sent once between them."""
    log = tmp_path / "server.jsonl"
    server, url = spawn(0.2, "--log", str(log))
    try:
        res = subprocess.run(
            [sys.executable, "scripts/run.py", "-m", "hydra/launcher=submitit_local", "experiment=crsarena_main",
             "llm=openai_compatible", f"llm.base_url={url}", "llm.model=scripted-model", "llm.concurrency=4",
             "llm.adaptive_concurrency=false", "llm.progress=false", "dataset.limit=2", "aspects=[dialogue_overall]",
             "method.particles.source=released", "method.instructions.max=4", "method.scoring.n=2,3",
             "tracking=none", f"hydra.sweep.dir={tmp_path / 'sweep'}", f"paths.results_dir={tmp_path / 'results'}",
             f"paths.cache_dir={tmp_path / 'cache'}", f"paths.data_dir={data_dir}", "paths.data_mirror=null",
             "dataset.download=false"],
            cwd=ROOT, env={**_env(), "FACE_DATA_MIRROR": ""}, capture_output=True, text=True, timeout=300)
    finally:
        server.terminate()
        server.wait()
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    sent = _sent_samples(read_log(str(log)))
    assert max(sent.values()) == 1, [k for k, n in sent.items() if n > 1][:5]
    usage = [json.loads(p.read_text())["totals"] for p in (tmp_path / "sweep").glob("*/llm_usage.json")]
    assert len(usage) == 2
    assert sum(_sampled(u) for u in usage) == sum(sent.values())
    assert sum(u["claims_waited_samples"] for u in usage) > 0  # the jobs ran side by side and shared
