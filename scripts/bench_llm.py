"""Benchmark the LLM access layer against the scripted server (run in a subprocess).

    .venv/bin/python scripts/bench_llm.py [--calls 1000] [--latency 0.1]

Prints calls/s and client overhead per call against a zero-latency server,
wall times for N calls at the simulated latency with concurrency 1 (extrapolated
from a shorter run), 8 and 64, and the same batch again from a warm cache.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from face.llm import ChatRequest, LLMConfig, make_client  # noqa: E402
from face.testing.scripted import spawn  # noqa: E402


def requests(k: int, prefix: str) -> list[ChatRequest]:
    return [ChatRequest(messages=[{"role": "system", "content": "You are a benchmark."},
                                  {"role": "user", "content": f"{prefix} question {i}"}], tag="bench")
            for i in range(k)]


def config(url: str, cache_dir: str, concurrency: int) -> LLMConfig:
    return LLMConfig(backend="openai_compatible", base_url=url, model="bench-model", cache_dir=cache_dir,
                     concurrency=concurrency, progress=False, timeout_s=30)


def timed_batch(url: str, cache_dir: str, concurrency: int, reqs: list[ChatRequest]) -> tuple[float, dict]:
    """(wall seconds, usage summary + client CPU seconds) for one batch after a warm-up."""
    with make_client(config(url, cache_dir, concurrency)) as c:
        c.run_batch(requests(10, f"warmup-{concurrency}-{len(reqs)}"))  # connection set-up, imports
        t0, c0 = time.perf_counter(), time.process_time()
        c.run_batch(reqs)
        dt, cpu = time.perf_counter() - t0, time.process_time() - c0
        return dt, dict(c.usage.summary(), cpu_s=cpu)


def cpu_timed(coro_fn, *args) -> tuple[float, float]:
    """(wall s/call, client CPU s/call) of an async benchmark returning wall s/call."""
    c0 = time.process_time()
    wall = asyncio.run(coro_fn(*args))
    return wall, (time.process_time() - c0) / args[-1]


async def raw_aiohttp(url: str, k: int) -> float:
    """Sequential bare HTTP calls (aiohttp) to the same server: the floor for one round trip."""
    import aiohttp

    async with aiohttp.ClientSession() as s:
        async def one(i: int) -> None:
            body = {"model": "bench-model", "messages": [{"role": "user", "content": f"raw {i}"}], "n": 1,
                    "temperature": 0.6, "max_tokens": 256, "seed": 0}
            async with s.post(url + "/chat/completions", json=body) as r:
                await r.json()
        for i in range(20):
            await one(i)
        t0 = time.perf_counter()
        for i in range(k):
            await one(i)
        return (time.perf_counter() - t0) / k


async def bare_sdk(url: str, k: int) -> float:
    """Sequential calls through the openai SDK alone (no cache/accounting/retries)."""
    import openai

    api = openai.AsyncOpenAI(base_url=url, api_key="not-needed", max_retries=0)
    for i in range(k + 20):
        if i == 20:
            t0 = time.perf_counter()
        await api.chat.completions.create(model="bench-model", messages=[{"role": "user", "content": f"sdk {i}"}],
                                          temperature=0.6, max_tokens=256, seed=0)
    dt = (time.perf_counter() - t0) / k
    await api.close()
    return dt


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=1000)
    ap.add_argument("--latency", type=float, default=0.1)
    ap.add_argument("--overhead-calls", type=int, default=500)
    ap.add_argument("--serial-calls", type=int, default=100, help="calls actually run at concurrency 1")
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench_llm_"))
    print(f"machine: {os.cpu_count()} cores, python {sys.version.split()[0]}; scripted server in a subprocess")

    proc, url = spawn(0.0)
    try:
        k = a.overhead_calls
        raw, raw_cpu = cpu_timed(raw_aiohttp, url, k)
        sdk, sdk_cpu = cpu_timed(bare_sdk, url, k)
        print(f"\n[zero-latency server, {k} sequential calls each; wall time includes the server's work,"
              f" CPU time is the client process only; includes ~20 warm-up calls]")
        print(f"  bare aiohttp loop (floor)             : {raw * 1e3:6.2f} ms/call wall, "
              f"{raw_cpu * 1e3:5.2f} ms/call CPU")
        print(f"  bare openai SDK create (httpx)        : {sdk * 1e3:6.2f} ms/call wall, "
              f"{sdk_cpu * 1e3:5.2f} ms/call CPU")
        results = {}
        for conc in (1, 8):
            dt, s = timed_batch(url, str(tmp / f"zero{conc}"), conc, requests(k, f"zero{conc}"))
            results[conc] = (dt / k, s["cpu_s"] / k)
            print(f"  face.llm run_batch, concurrency {conc}   : {dt / k * 1e3:6.2f} ms/call wall, "
                  f"{s['cpu_s'] / k * 1e3:5.2f} ms/call CPU  ({k / dt:.0f} calls/s)")
        dt, s = timed_batch(url, str(tmp / "zero1"), 1, requests(k, "zero1"))
        print(f"  face.llm, same batch from warm cache  : {dt / k * 1e3:6.2f} ms/call wall, "
              f"{s['cpu_s'] / k * 1e3:5.2f} ms/call CPU  (cache, hashing, accounting only)")
        per, cpu = results[1]
        print(f"  => client overhead per call (concurrency 1): {1e3 * (cpu - raw_cpu):.2f} ms CPU more than a bare "
              f"aiohttp loop ({1e3 * cpu:.2f} ms CPU in total, mostly the openai SDK + httpx); "
              f"wall: {1e3 * (per - raw):.2f} ms more per round trip on this machine")
    finally:
        proc.terminate()
        proc.wait()

    proc, url = spawn(a.latency)
    try:
        n = a.calls
        print(f"\n[{a.latency * 1e3:.0f} ms simulated latency, {n} calls]")
        m = a.serial_calls
        dt, _ = timed_batch(url, str(tmp / "lat1"), 1, requests(m, "lat1"))
        print(f"  concurrency 1 : {dt * n / m:7.2f} s  (extrapolated from {m} calls in {dt:.2f} s)")
        for conc in (8, 64):
            dt, s = timed_batch(url, str(tmp / f"lat{conc}"), conc, requests(n, f"lat{conc}"))
            print(f"  concurrency {conc:<2}: {dt:7.2f} s  ({n / dt:.1f} calls/s, {s['http_requests']} HTTP requests)")
        dt, s = timed_batch(url, str(tmp / "lat64"), 64, requests(n, "lat64"))
        print(f"  warm cache    : {dt:7.2f} s  ({s['cache_hits'] - 10} cache hits, "
              f"{s['http_requests']} HTTP requests; {dt / n * 1e6:.0f} us/call)")
    finally:
        proc.terminate()
        proc.wait()


if __name__ == "__main__":
    main()
