"""The floor of `scripts/bench_live.py --vs-wire`: scripts/bare_loop.py, a whole process that sends a file of HTTP
bodies with a bounded number in flight. The ratio the benchmark prints is only as good as this floor: it must send
every body, each once, no more than the given concurrency at a time, and import nothing of face or openai; its
`--sdk` form does the same through the openai client."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from face.testing.scripted import ScriptedServer

ROOT = Path(__file__).resolve().parents[1]
BARE = ROOT / "scripts" / "bare_loop.py"


def _bodies(k: int) -> list[dict]:
    return [{"model": "scripted-model", "messages": [{"role": "user", "content": f"question {i}"}], "n": 1 + i % 3,
             "seed": i, "max_tokens": 8} for i in range(k)]


@pytest.mark.slow  # process-, server- or rendering-bound (≈ 1 s): the fast suite stays within 45 s
@pytest.mark.parametrize("through", [[], ["--sdk"]], ids=["aiohttp", "openai-sdk"])
def test_bare_loop_sends_each_body_once_within_its_concurrency(tmp_path, through):
    bodies = _bodies(40)
    path = tmp_path / "bodies.json"
    path.write_text(json.dumps(bodies))
    srv = ScriptedServer(latency_s=0.05, max_concurrent=8)  # a 9th request in flight would be answered 429
    with srv as info:
        r = subprocess.run([sys.executable, str(BARE), info.base_url, str(path), "8", *through], capture_output=True,
                           text=True, timeout=60, cwd=ROOT)
    assert r.returncode == 0, r.stderr  # a 429 has no "choices": the loop would have failed
    assert r.stdout.strip() == f"40 requests, {sum(b['n'] for b in bodies)} choices"
    assert sorted(e["seed"] for e in srv.log) == list(range(40))
    assert srv.rate_limited == 0 and 1 < srv.max_active <= 8


def test_bare_loop_imports_neither_face_nor_openai():
    code = (f"import runpy, sys; runpy.run_path({str(BARE)!r}, run_name='bare'); "  # its imports, main() not run
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('face', 'openai', 'httpx2')))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd="/")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"
