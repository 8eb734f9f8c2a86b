"""Fault injection at scale, SIGKILL-and-resume, and two processes sharing one cache."""
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from face.llm import ChatRequest, SampleCache, make_client
from face.testing.scripted import ScriptedServer, _h, read_log

HERE = Path(__file__).parent
ROOT = HERE.parent.parent


class SubprocessServer:
    """`python -m face.testing.scripted` in a subprocess (its own GIL), request log in a file."""

    def __init__(self, log: Path, *args: str):
        self.log_path = log
        self.proc = subprocess.Popen([sys.executable, "-m", "face.testing.scripted", "--log", str(log), *args],
                                     env=dict(os.environ, PYTHONPATH=str(ROOT)), stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        assert line.startswith("READY"), line
        self.base_url = line.split()[1]

    def log(self) -> list[dict]:
        return read_log(str(self.log_path))

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


@pytest.mark.slow
def test_faults_on_20_percent_give_identical_results(make_cfg, tmp_path):
    rs = [ChatRequest(messages=[{"role": "user", "content": f"fault test {i}"}], n=1 + (i % 5 == 0), tag="f")
          for i in range(250)]
    n_http = sum(r.n for r in rs)  # n_per_request=1
    clean_srv = SubprocessServer(tmp_path / "clean.jsonl")
    faulty_srv = SubprocessServer(tmp_path / "faulty.jsonl", "--fault-rate", "0.2", "--retry-after", "0.01",
                                  "--hang", "3.0", "--fault-kinds", "429,500,timeout,disconnect")
    try:
        with make_client(make_cfg(base_url=clean_srv.base_url, cache_dir=str(tmp_path / "clean"),
                                  concurrency=16)) as c:
            clean = c.run_batch(rs)
            assert c.usage.summary()["retries"] == 0
        cfg = make_cfg(base_url=faulty_srv.base_url, cache_dir=str(tmp_path / "faulty"), concurrency=16,
                       timeout_s=1.5)  # well above a loaded machine's latency, well below the hang
        with make_client(cfg) as c:
            faulty = c.run_batch(rs)
            s = c.usage.summary()
        clean_log, log = clean_srv.log(), faulty_srv.log()
    finally:
        clean_srv.stop()
        faulty_srv.stop()
    assert len(clean_log) == n_http and not any(e["fault"] for e in clean_log)
    faults = [e for e in log if e["fault"]]
    assert 0.12 * n_http < len(faults) < 0.28 * n_http
    assert {e["fault"] for e in faults} == {"429", "500", "timeout", "disconnect"}
    assert len(log) == n_http + len(faults)
    assert s["retries"] == len(faults)  # every fault was retried exactly once, and counted
    assert s["failures"] == 0 and s["http_requests"] == n_http
    assert [r.texts for r in faulty] == [r.texts for r in clean]


@pytest.mark.slow
@pytest.mark.serial  # kills the worker halfway through, read by polling: not beside another test
def test_sigkill_halfway_then_rerun_sends_only_missing(tmp_path):
    n, conc = 200, 4
    cache_dir = str(tmp_path / "cache")
    sys.path.insert(0, str(HERE))
    try:
        import batch_worker
    finally:
        sys.path.remove(str(HERE))
    srv = ScriptedServer(latency_s=0.02)
    with srv as info:
        # reference results from a separate cache
        with make_client(batch_worker.config(info.base_url, str(tmp_path / "ref"), 16)) as c:
            reference = [r.texts for r in c.run_batch(batch_worker.requests(n))]
        srv.reset_log()
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        proc = subprocess.Popen([sys.executable, str(HERE / "batch_worker.py"), info.base_url, cache_dir,
                                 str(n), str(conc)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline = time.time() + 30
        while len(srv.log) < n // 2 and time.time() < deadline and proc.poll() is None:
            time.sleep(0.005)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        assert proc.returncode == -signal.SIGKILL
        first_run = len(srv.log)
        assert n // 2 <= first_run < n
        with make_client(batch_worker.config(info.base_url, cache_dir, conc)) as c:
            rs = batch_worker.requests(n)
            assert c.cache is not None
            cached = c.cache.store.get_many([c.cache.keys_for(r)[0] for r in rs])
            # everything the server finished, minus at most the requests in flight, was kept
            assert first_run - conc - 1 <= len(cached) <= first_run
            missing = [r for r in rs if c.cache.keys_for(r)[0] not in cached]
            srv.reset_log()
            out = c.run_batch(rs)
        sent = [e["messages_hash"] for e in srv.log]
        expected = [_h(r.message_dicts())[:16] for r in missing]
        assert len(sent) == len(missing) == n - len(cached)
        assert sorted(sent) == sorted(expected)
        assert [r.texts for r in out] == reference


_WRITER = textwrap.dedent("""
    import sys
    from face.llm.cache import SampleCache
    cache = SampleCache(sys.argv[1])
    who, k = sys.argv[2], int(sys.argv[3])
    for i in range(k):
        key = f"shared-{i}" if i % 2 == 0 else f"{who}-{i}"
        cache.put_many([(key, "m", "t", i, {"text": f"{who} {i}", "finish_reason": "stop"})])
        assert cache.get_many([key])
    print("ok", len(cache))
""")


@pytest.mark.slow  # process-, server- or rendering-bound (≈ 1 s): the fast suite stays within 45 s
def test_two_processes_write_same_cache(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    k = 400
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, str(tmp_path), who, str(k)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for who in ("a", "b")]
    outs = [p.communicate(timeout=60) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
        assert out.startswith("ok")
    cache = SampleCache(tmp_path)
    assert len(cache) == k // 2 + 2 * (k // 2)  # shared even keys once, odd keys per writer
    got = cache.get_many(["a-1", "b-1", "shared-0"])
    assert got["a-1"]["text"] == "a 1" and got["b-1"]["text"] == "b 1"
    assert got["shared-0"]["text"] in ("a 0", "b 0")
    cache.close()


@pytest.mark.slow  # the fast suite keeps two processes writing one cache (test_two_processes_write_same_cache)
def test_two_clients_in_two_processes_share_cache(tmp_path):
    srv = ScriptedServer(latency_s=0.01)
    with srv as info:
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        procs = [subprocess.Popen([sys.executable, str(HERE / "batch_worker.py"), info.base_url, str(tmp_path),
                                   "60", "4"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for _ in range(2)]
        for p in procs:
            out, err = p.communicate(timeout=60)
            assert p.returncode == 0 and "DONE" in out, err
    cache = SampleCache(tmp_path)
    assert len(cache) == 60
    cache.close()
