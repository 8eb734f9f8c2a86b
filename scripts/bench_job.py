"""How long a one-conversation live job spends outside the LLM calls (issue 10: the goal is < 2 s).

The job is the acceptance command on one conversation,

    python scripts/run.py experiment=crsarena_main llm=openai_compatible llm.base_url=URL dataset.limit=1 \
        'aspects=[dialogue_overall]' method.particles.source=released tracking=none

run as a subprocess (Python's start, imports, Hydra, the evaluation, tables and figures all included)
against the scripted OpenAI-compatible server in its own process. The first run fills a fresh LLM cache
(cold); the timed runs are served from it (warm), so the LLM time is close to zero. The child is started
through a small bootstrap that times every call into the LLM client (`LLMClient.start`, `run_async` — which
every `run_batch` goes through — and `close`: cache, probe, transport and HTTP) without importing anything
early; it writes the total to a file at exit. Printed per run: job wall (the parent's clock around the
subprocess), LLM time (the client calls), outside LLM (the difference).

    .venv/bin/python scripts/bench_job.py [--repeat 5] [--latency 0.2] [--convs 1] [--profile FILE]

`--profile FILE` also writes a cProfile of one warm run (view with `python -m pstats FILE`);
`--importtime` prints the slowest imports (python -X importtime) of one warm run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from face.testing.scripted import spawn  # noqa: E402  (the benchmark's own process; the job is a child)

# Runs in the child before scripts/run.py: wraps the client's methods once face.llm.client is imported
# (by the job itself, when it gets there), so the import order and times are the job's own.
BOOTSTRAP = r"""
import atexit, importlib.abc, importlib.util, json, os, runpy, sys, time
out = os.environ["FACE_BENCH_LLM_TIME_FILE"]
spent = {"llm_s": 0.0, "calls": 0}

def timed(fn):
    def wrapper(*a, **k):
        t0 = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            spent["llm_s"] += time.perf_counter() - t0
            spent["calls"] += 1
    return wrapper

class Hook(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "face.llm.client":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        loader = spec.loader
        class Loader(importlib.abc.Loader):
            def create_module(self, s):
                return loader.create_module(s)
            def exec_module(self, module):
                loader.exec_module(module)
                for m in ("start", "run_async", "close"):
                    setattr(module.LLMClient, m, timed(getattr(module.LLMClient, m)))
        spec.loader = Loader()
        return spec

sys.meta_path.insert(0, Hook())
atexit.register(lambda: open(out, "w").write(json.dumps(spent)))
script = sys.argv[1]
sys.argv = sys.argv[1:]
runpy.run_path(script, run_name="__main__")
"""


def job_args(url: str, convs: int, cache_dir: str, run_dir: str) -> list[str]:
    return [str(ROOT / "scripts" / "run.py"), "experiment=crsarena_main", "llm=openai_compatible",
            f"llm.base_url={url}", f"dataset.limit={convs}", "aspects=[dialogue_overall]",
            "method.particles.source=released", "tracking=none", f"llm.cache_dir={cache_dir}", "llm.progress=false",
            f"hydra.run.dir={run_dir}"]


def run_job(url: str, convs: int, cache_dir: str, python_flags: tuple[str, ...] = ()) -> dict:
    """One job as a subprocess: job wall, LLM time, outside LLM (seconds), the HTTP requests it sent."""
    run_dir = tempfile.mkdtemp(prefix="bench_job_run_")
    llm_file = Path(run_dir) / "llm_time.json"
    env = dict(os.environ, FACE_BENCH_LLM_TIME_FILE=str(llm_file))
    bootstrap = Path(run_dir) / "bench_bootstrap.py"
    bootstrap.write_text(BOOTSTRAP)
    cmd = [sys.executable, *python_flags, str(bootstrap), *job_args(url, convs, cache_dir, run_dir)]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise RuntimeError(f"job failed ({p.returncode}):\n{p.stderr[-3000:]}")
    llm = json.loads(llm_file.read_text())
    usage = json.loads((Path(run_dir) / "llm_usage.json").read_text())["totals"]
    return {"wall": wall, "llm": llm["llm_s"], "outside": wall - llm["llm_s"], "client_calls": llm["calls"],
            "http_requests": usage["http_requests"], "cache_hits": usage["cache_hits"], "run_dir": run_dir,
            "stderr": p.stderr}


def _print_runs(cold: dict, warm: list[dict]) -> None:
    """The table of the cold and warm runs, then the medians of the warm ones."""
    print("| run | job wall s | LLM time s | outside LLM s | HTTP requests | cached samples |")
    print("|---|---|---|---|---|---|")
    for label, r in [("cold (fills the cache)", cold), *((f"warm {i + 1}", r) for i, r in enumerate(warm))]:
        print(f"| {label} | {r['wall']:.2f} | {r['llm']:.2f} | {r['outside']:.2f} | {r['http_requests']} | "
              f"{r['cache_hits']} |")
    if warm:
        med = {k: statistics.median(r[k] for r in warm) for k in ("wall", "llm", "outside")}
        print(f"\nwarm, median of {len(warm)}: job wall {med['wall']:.2f} s, LLM time {med['llm']:.2f} s, "
              f"outside LLM {med['outside']:.2f} s")
        print(f"cold: job wall {cold['wall']:.2f} s, LLM time {cold['llm']:.2f} s, outside LLM {cold['outside']:.2f} s")


def _print_imports(stderr: str) -> None:
    """The slowest imports of one run from its ``-X importtime`` output."""
    rows = []
    for line in stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            _, cumulative, name = line[len("import time:"):].split("|")
            if cumulative.strip().isdigit():
                rows.append((int(cumulative), name[1:].rstrip()))
    total = sum(us for us, name in rows if not name.startswith(" "))
    print(f"\nimports: {total / 1e6:.2f} s in all (top-level, cumulative); slowest (cumulative):")
    for us, name in sorted(rows, reverse=True)[:25]:
        print(f"  {us / 1e6:6.3f} s  {name.strip()}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5, help="warm runs to time")
    ap.add_argument("--latency", type=float, default=0.2, help="scripted server latency per request (s)")
    ap.add_argument("--convs", type=int, default=1, help="conversations (dataset.limit)")
    ap.add_argument("--profile", metavar="FILE", help="also write a cProfile of one warm run to FILE")
    ap.add_argument("--importtime", action="store_true", help="print the slowest imports of one warm run")
    args = ap.parse_args()

    print(f"machine: {os.cpu_count()} cores, python {sys.version.split()[0]}; endpoint: scripted server, "
          f"{args.latency * 1e3:.0f} ms latency, own process")
    print(f"job: scripts/run.py experiment=crsarena_main llm=openai_compatible llm.base_url=URL "
          f"dataset.limit={args.convs} 'aspects=[dialogue_overall]' method.particles.source=released tracking=none\n")
    proc, url = spawn(args.latency)
    cache = tempfile.mkdtemp(prefix="bench_job_cache_")
    try:
        cold = run_job(url, args.convs, cache)
        warm = [run_job(url, args.convs, cache) for _ in range(args.repeat)]
        if args.profile:
            run_job(url, args.convs, cache, ("-m", "cProfile", "-o", str(Path(args.profile).resolve())))
        if args.importtime:
            imports = run_job(url, args.convs, cache, ("-X", "importtime"))
    finally:
        proc.terminate()
        proc.wait()
    _print_runs(cold, warm)
    if args.profile:
        print(f"\ncProfile of one warm run: {args.profile} (python -m pstats {args.profile})")
    if args.importtime:
        _print_imports(imports["stderr"])


if __name__ == "__main__":
    main()
