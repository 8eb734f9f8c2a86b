"""Fast by default (issue 10): the endpoint probe, adaptive concurrency against a rate-limited server,
several base URLs, and unchanged results / cache keys whatever the speed settings."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
from helpers import chat_requests, llm_config
from omegaconf import OmegaConf

from face.llm import ChatRequest, LLMConfig, make_client
from face.llm import probe as endpoint_probe
from face.llm.limiter import Limiter
from face.testing.scripted import ScriptedServer


class IgnoresN(ScriptedServer):
    """An endpoint that answers one choice whatever n asks (as llama.cpp's server does)."""

    def _completion(self, body, fault):
        return super()._completion(dict(body, n=1), fault)


pytestmark = pytest.mark.usefixtures("forget_probes")


def cfg_for(url, cache_dir, **kw) -> LLMConfig:
    """An HTTP endpoint's config with LLMConfig's own concurrency and probe (these tests measure them)."""
    return llm_config(base_url=url, **{"cache_dir": str(cache_dir), "timeout_s": 10, "max_retries": 8,
                                       "backoff_max_s": 0.2, "concurrency": 8, "probe": True, **kw})


def reqs(k: int, n: int = 5) -> list[ChatRequest]:
    return chat_requests(k, "rate this {i}", n=n, tag="perf")


def test_probe_uses_n_where_honoured_and_remembers_the_answer(tmp_path):
    srv = ScriptedServer()
    with srv as info:
        with make_client(cfg_for(info.base_url, tmp_path / "c", n_per_request=128)) as c:
            assert c.cfg.n_per_request == 128
            res = c.run_batch(reqs(6))
        assert c.usage.http_requests == 6 + 2  # one request per 5 samples, + the two probe requests (counted)
        assert c.usage.by_tag["probe"]["http_requests"] == 2 and c.usage.by_tag["perf"]["http_requests"] == 6
        assert len(srv.log) == 6 + 2
        doc = json.loads((tmp_path / "c" / endpoint_probe.ENDPOINTS_FILE).read_text())
        (caps,) = doc.values()
        assert caps["n"] is True and caps["logprobs"] is True and caps["json_schema"] is True
        endpoint_probe.forget()  # a new process: the answer comes from endpoints.json, nothing is probed
        srv.reset_log()
        with make_client(cfg_for(info.base_url, tmp_path / "c", n_per_request=128)) as c:
            assert c.run_batch(reqs(6)) and c.usage.cache_hits == 30
        assert srv.log == []
    assert all(len(r.samples) == 5 for r in res)


def test_endpoint_ignoring_n_is_split_transparently_with_the_same_results(tmp_path):
    with ScriptedServer() as a, IgnoresN() as b:
        with make_client(cfg_for(a.base_url, tmp_path / "a", n_per_request=128)) as c:
            honoured = c.run_batch(reqs(4))
            assert c.usage.http_requests == 4 + 2  # + the probe's two
        with make_client(cfg_for(b.base_url, tmp_path / "b", n_per_request=128)) as c:
            assert c.cfg.n_per_request == 1  # the probe saw one choice for n=3
            split = c.run_batch(reqs(4))
            assert c.usage.by_tag["perf"]["http_requests"] == 20
    assert [r.texts for r in honoured] == [r.texts for r in split]


def test_probe_false_trusts_the_config(tmp_path):
    srv = ScriptedServer()
    with srv as info, make_client(cfg_for(info.base_url, tmp_path, n_per_request=128, probe=False)) as c:
        c.run_batch(reqs(3))
    assert len(srv.log) == 3


def test_cache_filled_with_the_old_defaults_still_hits(tmp_path):
    """Results unchanged: n split 1 per request at 8 in flight (the old defaults) fills the cache the new
    defaults (n per request, adaptive limit, aiohttp) are served from, sending nothing."""
    with ScriptedServer() as info:
        old = cfg_for(info.base_url, tmp_path, n_per_request=1, concurrency=8, http_client="httpx")
        with make_client(old) as c:
            before = c.run_batch(reqs(10))
        new = cfg_for(info.base_url, tmp_path, n_per_request=128, concurrency=256, adaptive_concurrency=True,
                      concurrency_start=64)
        with make_client(new) as c:
            after = c.run_batch(reqs(10))
            assert c.usage.by_tag["perf"]["http_requests"] == 0 and c.usage.cache_hits == 50  # (+ the probe)
    assert [r.texts for r in before] == [r.texts for r in after]


@pytest.mark.slow  # seconds of processes, servers or rendering: the fast suite stays within 45 s
def test_adaptive_concurrency_backs_off_on_429_and_honours_retry_after(tmp_path):
    srv = ScriptedServer(latency_s=0.05, max_concurrent=8, retry_after_s=0.05)
    with srv as info:
        cfg = cfg_for(info.base_url, tmp_path, n_per_request=128, probe=False, concurrency=128,
                      adaptive_concurrency=True, concurrency_start=32, max_retries=20)
        with make_client(cfg) as c:
            res = c.run_batch(reqs(100, n=1))
            s = c.usage.summary()
    assert all(len(r.samples) == 1 for r in res)
    assert srv.rate_limited > 0 and s["throttled_requests"] > 0 and s["concurrency_decreases"] >= 1
    assert s["concurrency_limit"] < 32  # backed off from the start value towards the server's 8
    assert s["retries"] == s["throttled_requests"]


@pytest.mark.slow  # process-, server- or rendering-bound (≈ 1 s): the fast suite stays within 45 s
def test_adaptive_concurrency_grows_while_latency_is_flat(tmp_path):
    with ScriptedServer(latency_s=0.05) as info:
        cfg = cfg_for(info.base_url, tmp_path, n_per_request=128, probe=False, concurrency=128,
                      adaptive_concurrency=True, concurrency_start=4)
        with make_client(cfg) as c:
            c.run_batch(reqs(200, n=1))
            s = c.usage.summary()
    # grew well past its start of 4 (how far depends on the machine's load: latency noise cuts it back)
    assert s["concurrency_limit_reached"] >= 16 and s["max_in_flight"] >= 16


def test_limiter_is_a_semaphore_when_not_adaptive():
    import asyncio

    lim = Limiter(3)
    peak = 0

    async def one():
        nonlocal peak
        await lim.acquire()
        peak = max(peak, lim.in_flight)
        await asyncio.sleep(0.01)
        lim.release(0.01)

    async def main():
        await asyncio.gather(*(one() for _ in range(20)))

    asyncio.run(main())
    assert peak == 3 and lim.in_flight == 0 and lim.summary()["concurrency_limit"] == 3


def test_requests_spread_over_a_list_of_base_urls(tmp_path):
    s1, s2 = ScriptedServer(latency_s=0.02), ScriptedServer(latency_s=0.02)
    with s1 as a, s2 as b:
        with make_client(cfg_for([a.base_url, b.base_url], tmp_path / "two", n_per_request=128,
                                 concurrency=16)) as c:
            two = c.run_batch(reqs(40))
        n1, n2 = len(s1.ok_requests()), len(s2.ok_requests())
        assert n1 + n2 == 40 + 2 and min(n1, n2) >= 10  # + the probe (of the first URL)
        with make_client(cfg_for(a.base_url, tmp_path / "one", n_per_request=128, concurrency=16)) as c:
            one = c.run_batch(reqs(40))
    assert [r.texts for r in two] == [r.texts for r in one]


def test_a_replica_down_is_retried_on_another(tmp_path):
    s1 = ScriptedServer()
    with s1 as a:
        dead = "http://127.0.0.1:9/v1"  # nothing listens on the discard port
        with make_client(cfg_for([a.base_url, dead], tmp_path, n_per_request=1, concurrency=4,
                                 timeout_s=2)) as c:
            res = c.run_batch(reqs(10, n=1))
    assert all(r.error is None for r in res) and len(s1.ok_requests()) == 10


def test_base_url_list_from_hydra_config():
    cfg = OmegaConf.create({"backend": "openai_compatible", "model": "m",
                            "base_url": ["http://gpu1:8000/v1", "http://gpu2:8000/v1"]})
    c = LLMConfig.from_dict(cfg)
    assert c.base_urls == ["http://gpu1:8000/v1", "http://gpu2:8000/v1"]
    assert LLMConfig(base_url="http://a/v1,http://b/v1").base_urls == ["http://a/v1", "http://b/v1"]
    with pytest.raises(ValueError):
        LLMConfig(base_url=[])


def _run_cli(body: str) -> subprocess.CompletedProcess[str]:
    """`body` defines entry(); the child runs face.runner.run_cli(entry), stdout a pipe (block-buffered)."""
    code = "import atexit, sys, threading, time\nfrom face.runner import run_cli\n" + textwrap.dedent(body) + \
        "\nrun_cli(entry)\nprint('not reached')\n"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)


@pytest.mark.slow  # process-, server- or rendering-bound (≈ 1 s): the fast suite stays within 45 s
def test_fast_exit_keeps_the_exit_code_buffered_output_atexit_handlers_and_threads():
    p = _run_cli("""
        atexit.register(lambda: print("atexit handler ran"))
        def late():
            time.sleep(0.3)
            print("non-daemon thread finished")
        def entry():
            threading.Thread(target=late).start()
            print("buffered line", end="")  # no newline, no flush: lost if the exit skipped the flush
            return 3
    """)
    assert p.returncode == 3
    # Python's order: threads joined, then atexit handlers, then the streams flushed
    assert p.stdout == "buffered line" + "non-daemon thread finished\n" + "atexit handler ran\n"


@pytest.mark.parametrize("raised, code, stderr", [("sys.exit(4)", 4, ""), ("sys.exit()", 0, ""),
                                                  ("sys.exit('bad setting')", 1, "bad setting\n")])
def test_fast_exit_turns_system_exit_into_the_same_status_as_python(raised, code, stderr):
    p = _run_cli(f"def entry():\n    {raised}\n")
    assert (p.returncode, p.stderr, p.stdout) == (code, stderr, "")


def test_fast_exit_lets_an_unexpected_exception_end_the_process_as_usual():
    p = _run_cli("def entry():\n    raise RuntimeError('boom')\n")
    assert p.returncode == 1 and "RuntimeError: boom" in p.stderr and "not reached" not in p.stdout


def test_a_cli_process_runs_far_fewer_garbage_collections_than_pythons_default():
    p = _run_cli("""
        import gc
        runs = []
        gc.callbacks.append(lambda phase, info: runs.append(1) if phase == "start" else None)
        def entry():
            keep = [{"i": i} for i in range(200_000)]  # 200k containers: ~285 collections at Python's 700
            print(len(runs))
    """)
    assert p.returncode == 0 and int(p.stdout) < 20
