"""Paper scale, measured: `experiment=replay_table2` (FACE live on all of CRSArena-Eval, every prompt answered by
the replay judge) as a user runs it, timed from the outside.

One replay judge runs in a process of its own for the whole benchmark (`python -m face.testing.replay
--latency L`); every run points at it (`llm.server=null llm.base_url=URL`), so a run's CPU and memory are the
client's alone (`os.wait4` of the run's process). For each data size (`--repeat 1,2,4`: CRSArena-Eval, every
conversation K times, `dataset.repeat=K`):

* cold run (empty LLM cache): wall time, HTTP requests (the run's llm_usage.json), samples (the judge's
  count), client CPU per request (the run's user + system CPU, start-up and meta-evaluation included, divided
  by its HTTP requests), peak RSS, cache size on disk;
* warm rerun (everything cached): wall time (`--warm`, first size only);
* kill -9 at about half (`--kill`, first size only): a run in a fresh cache is killed once the judge has
  answered half of the cold run's requests, then the same command is run again; printed: requests answered
  before the kill, requests of the rerun, re-sent = both − cold run's, and whether the rerun's run file is
  byte-identical to the cold run's.

Beside it, a bare loop of `AsyncOpenAI().chat.completions.create` (its own process, the same judge, the same
concurrency, `--bare N` of the run's own scoring requests, n = 5): its CPU per request is the floor the client's
is compared with.

    .venv/bin/python scripts/bench_scale.py                       # 1x: cold, warm, kill -9, bare loop
    .venv/bin/python scripts/bench_scale.py --repeat 1,2,4 --no-warm --no-kill    # memory vs data size
    .venv/bin/python scripts/bench_scale.py --aspects dialogue_overall --latency 0.05 --concurrency 256
    .venv/bin/python scripts/bench_scale.py --repeat 1,4 --cache DIR --no-warm --no-kill --bare 0   # memory, flat

`--cache DIR` runs every size on that LLM cache (kept, not emptied: a warm cache for ×4 is allowed, e.g. a copy of a
paper-size cache); the runs are then cold only for what DIR lacks. The last lines compare the peak RSS of every
size with the first's (issue 33: flat, within 10 %).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PY = sys.executable


def data_dir() -> Path:
    return Path(os.environ.get("FACE_DATA_DIR", ROOT / "data" / "raw"))


def start_judge(latency: float) -> tuple[subprocess.Popen, str]:
    cmd = [PY, "-m", "face.testing.replay", "--data-dir", str(data_dir()), "--latency", str(latency),
           "--until-stdin-closes"]
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    line = p.stdout.readline()
    if not line.startswith("READY"):
        raise SystemExit(f"the replay judge did not start: {line!r}")
    return p, line.split()[1]


def judge_stats(url: str) -> dict:
    with urllib.request.urlopen(url + "/replay/stats", timeout=30) as r:
        return json.loads(r.read())


def run_cmd(url: str, cache: Path, out: Path, args, repeat: int) -> list[str]:
    cmd = [PY, "scripts/run.py", "experiment=replay_table2", "llm.server=null", f"llm.base_url={url}",
           f"llm.cache_dir={cache}", f"llm.concurrency={args.concurrency}", "llm.progress=false", "tracking=none",
           f"hydra.run.dir={out}", f"report.out_dir={out}/results"]
    if repeat > 1:
        cmd.append(f"dataset.repeat={repeat}")
    if args.aspects:
        cmd.append(f"aspects=[{args.aspects}]")
    if args.limit:
        cmd.append(f"dataset.limit={args.limit}")
    return cmd


def timed(cmd: list[str], log: Path, kill_when=None) -> dict:
    """Run `cmd`; wall, CPU and peak RSS of that process alone (wait4). `kill_when()`: SIGKILL once true."""
    t0 = time.perf_counter()
    with open(log, "w") as f:
        p = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT)
        killed = False
        while True:  # wait4, not Popen.poll: the rusage of this process alone
            pid, status, ru = os.wait4(p.pid, os.WNOHANG if kill_when is not None else 0)
            if pid:
                break
            if not killed and kill_when():
                os.kill(p.pid, signal.SIGKILL)
                killed = True
            time.sleep(0.05)
        p.returncode = 0  # reaped above
    wall = time.perf_counter() - t0
    code = os.waitstatus_to_exitcode(status)
    if code != 0 and not killed:
        raise SystemExit(f"run failed (exit {code}); see {log}")
    return {"wall_s": wall, "cpu_s": ru.ru_utime + ru.ru_stime, "peak_rss_mb": ru.ru_maxrss / 1024,
            "killed": killed}


def dir_mb(p: Path) -> float:
    return sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) / 1e6


def http_requests(out: Path) -> int:
    return int(json.loads((out / "llm_usage.json").read_text())["totals"]["http_requests"])


def bare_loop(url: str, n: int, concurrency: int, aspect: str) -> dict:
    """CPU per request of a bare AsyncOpenAI loop (its own process) on n of the run's own scoring requests."""
    code = f"""
import asyncio, json, sys, time
sys.path.insert(0, {str(ROOT)!r})
from pathlib import Path
from face.datasets.crsarena import ASPECTS, load_conversations
from face.datasets.face_released import load_instructions, load_released_particles
from face.pipeline.particles import from_released
from face.pipeline.scoring import ScoringSpec, plan_iter, units_for
d = Path({str(data_dir())!r})
convs = load_conversations(d / "crsarena_eval/crs_arena_eval.json")
decomps = from_released(load_released_particles(d / "face_released/particles.jsonl"))
a = ASPECTS[{aspect!r}]
ins = load_instructions(d / f"face_released/top16_instructions/{{a.name}}.json")
units = units_for(a, convs, decomps)
bodies = []
for p in plan_iter(units, ins, {{c.conv_id: c for c in convs}}, ScoringSpec(), False):
    bodies.append([{{"role": r, "content": c}} for r, c in p.request.messages])
    if len(bodies) >= {n}:
        break
import openai
async def main():
    client = openai.AsyncOpenAI(base_url={url!r}, api_key="none", max_retries=0)
    sem = asyncio.Semaphore({concurrency})
    async def one(m):
        async with sem:
            r = await client.chat.completions.create(model="face-released-judgements", messages=m, n=5,
                                                     temperature=0.6, max_tokens=768, seed=0)
            return len(r.choices)
    t0, c0 = time.perf_counter(), time.process_time()
    got = await asyncio.gather(*(one(m) for m in bodies))
    print(json.dumps({{"requests": len(got), "wall_s": time.perf_counter() - t0,
                       "cpu_s": time.process_time() - c0}}))
asyncio.run(main())
"""
    out = subprocess.run([PY, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    r = json.loads(out.stdout.strip().splitlines()[-1])
    r["cpu_ms_per_request"] = 1000 * r["cpu_s"] / r["requests"]
    return r


def kill_and_resume(url: str, args: argparse.Namespace, k: int, work: Path, out: Path, n_req: int) -> dict:
    """kill -9 a cold run halfway through its requests, rerun it on the same cache: what was re-sent, and is the
    run file byte-identical to the uninterrupted run's."""
    kcache = work / f"kill_cache_{k}"
    start = judge_stats(url)["requests"]
    half = start + n_req // 2
    first = timed(run_cmd(url, kcache, work / f"killed_{k}", args, k), work / f"killed_{k}.log",
                  kill_when=lambda half=half: judge_stats(url)["requests"] >= half)
    answered = judge_stats(url)["requests"] - start
    mid = judge_stats(url)["requests"]
    timed(run_cmd(url, kcache, work / f"resumed_{k}", args, k), work / f"resumed_{k}.log")
    rerun = judge_stats(url)["requests"] - mid
    same = (work / f"resumed_{k}" / "run_file.json").read_bytes() == (out / "run_file.json").read_bytes()
    print(f"kill -9 ×{k}: answered before the kill {answered}, rerun {rerun}, re-sent "
          f"{answered + rerun - n_req} (concurrency {args.concurrency}); run file byte-identical: {same}",
          flush=True)
    return dict(kill_answered_before=answered, kill_rerun_requests=rerun, kill_resent=answered + rerun - n_req,
                kill_run_file_identical=same, kill_killed=first["killed"])


def print_rows(rows: list[dict]) -> None:
    """One table row per data size, then the peak RSS of each size over the first's."""
    print("\n| data | wall | HTTP requests | samples | client CPU / request | peak RSS | cache on disk | warm rerun |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        warm = f"{r['warm_wall_s']:.1f} s" if "warm_wall_s" in r else "–"
        cpu = "– (nothing sent)" if r["cpu_ms_per_request"] is None else f"{r['cpu_ms_per_request']:.3f} ms"
        print(f"| ×{r['repeat']} | {r['wall_s']:.1f} s | {r['http_requests']:,} | {r['samples']:,} | {cpu} | "
              f"{r['peak_rss_mb']:.0f} MB | {r['cache_mb']:.0f} MB | {warm} |")
    for r in rows[1:]:
        print(f"peak RSS ×{r['repeat']} / ×{rows[0]['repeat']}: {r['peak_rss_mb']:.0f} MB / "
              f"{rows[0]['peak_rss_mb']:.0f} MB = {r['peak_rss_mb'] / rows[0]['peak_rss_mb']:.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", default="1", help="data sizes: comma-separated K of dataset.repeat=K (default 1)")
    ap.add_argument("--aspects", default="", help="comma-separated aspects (default: all seven)")
    ap.add_argument("--limit", type=int, default=0, help="only the first N conversations (a quick check)")
    ap.add_argument("--latency", type=float, default=0.0, help="the judge's seconds per answer")
    ap.add_argument("--concurrency", type=int, default=64, help="llm.concurrency of the runs and the bare loop")
    ap.add_argument("--bare", type=int, default=20000, help="requests of the bare AsyncOpenAI loop (0: none)")
    ap.add_argument("--no-warm", dest="warm", action="store_false")
    ap.add_argument("--no-kill", dest="kill", action="store_false")
    ap.add_argument("--keep", action="store_true", help="keep the work directory (printed)")
    ap.add_argument("--cache", default="", help="the LLM cache of every run (kept; default: a fresh one per size)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench_scale_"))
    judge, url = start_judge(args.latency)
    rows = []
    try:
        for i, k in enumerate(int(x) for x in args.repeat.split(",")):
            cache, out = Path(args.cache) if args.cache else work / f"cache_{k}", work / f"run_{k}"
            before = judge_stats(url)["samples"]
            r = timed(run_cmd(url, cache, out, args, k), work / f"run_{k}.log")
            n_req = http_requests(out)
            r.update(repeat=k, http_requests=n_req, samples=judge_stats(url)["samples"] - before,
                     cpu_ms_per_request=1000 * r["cpu_s"] / n_req if n_req else None, cache_mb=dir_mb(cache))
            print(f"{'given cache' if args.cache else 'cold'} ×{k}: {json.dumps(r)}", flush=True)
            if i == 0 and args.warm:
                w = timed(run_cmd(url, cache, work / f"warm_{k}", args, k), work / f"warm_{k}.log")
                r["warm_wall_s"], r["warm_peak_rss_mb"] = w["wall_s"], w["peak_rss_mb"]
                r["warm_http_requests"] = http_requests(work / f"warm_{k}")
                print(f"warm ×{k}: {json.dumps(w)}", flush=True)
            if i == 0 and args.kill:
                r.update(kill_and_resume(url, args, k, work, out, n_req))
            rows.append(r)
            if not args.cache:
                shutil.rmtree(cache, ignore_errors=True)
            shutil.rmtree(work / f"kill_cache_{k}", ignore_errors=True)
        bare = bare_loop(url, args.bare, args.concurrency, (args.aspects or "dialogue_overall").split(",")[-1]) \
            if args.bare else None
    finally:
        server = judge_stats(url)
        judge.stdin.close()
        judge.terminate()
        _, _, jru = os.wait4(judge.pid, 0)
    print_rows(rows)
    if bare and rows[0]["cpu_ms_per_request"] is not None:
        ratio = rows[0]["cpu_ms_per_request"] / bare["cpu_ms_per_request"]
        print(f"\nbare AsyncOpenAI loop, {bare['requests']:,} of the run's scoring requests (n = 5) at concurrency "
              f"{args.concurrency}: {bare['cpu_ms_per_request']:.3f} ms CPU / request ({bare['wall_s']:.1f} s wall); "
              f"the client's ×{rows[0]['repeat']} run: {ratio:.2f}× that")
    print(f"replay judge (its own process): {server['requests']:,} requests, {server['refused']} refused, "
          f"{(jru.ru_utime + jru.ru_stime) / max(server['requests'], 1) * 1000:.3f} ms CPU / request; "
          f"latency {args.latency} s")
    (work / "bench_scale.json").write_text(json.dumps({"rows": rows, "bare": bare, "judge": {
        k: v for k, v in server.items() if k != "ambiguous"}}, indent=1))
    print(f"figures: {work / 'bench_scale.json'}")
    if not args.keep:
        for p in work.iterdir():
            if p.is_dir():
                shutil.rmtree(p, ignore_errors=True)


if __name__ == "__main__":
    main()
