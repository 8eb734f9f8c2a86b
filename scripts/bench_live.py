"""Benchmark of live scoring against one OpenAI-compatible endpoint with 200 ms latency (issue 10).

The endpoint is the scripted server (`python -m face.testing.scripted --latency 0.2`, its own process).
The job is the paper's: CRSArena conversations, dialogue_overall, the released particles, 16 released
instructions × 5 samples, the reasoning prompt. Rows, all on the same requests:

* bare aiohttp loop -- the same HTTP bodies as our best row, sent by a bare aiohttp loop (the floor);
* the authors' access pattern -- a thread pool of 8, one blocking request (openai SDK) per sample, as the
  authors' face.py does (written by us to mimic it: it stands in for their code);
* ours before issue 10 -- n split into one request per sample, 8 in flight, the SDK's httpx transport;
* ours, default -- `llm=openai_compatible` exactly as configured in conf/llm/ (probes n, adaptive limit);
* ours at concurrency 64 -- fixed limit of 64, n per request (the client's own cost per request);
* ours, warm cache -- the default again, everything from the cache.

For each: wall time, samples/s, HTTP requests per sample, speed-up over the authors' pattern, the client's
overhead per request (our wall minus the bare aiohttp loop's wall on the same requests at the same
concurrency, divided by the requests) and our process's CPU per request. `--e2e` also times the
acceptance command (`scripts/run.py experiment=crsarena_main llm=openai_compatible ...`) cold and warm.
`--vs-wire` times only the acceptance command against two floors, all as whole processes (Python's start
included), alternating in one run: a bare aiohttp loop (scripts/bare_loop.py) sending the same scoring requests with
as many in flight as our client may reach (256), and the same loop through the openai SDK (`--sdk`: what any client
pays that sends every call through the openai client); medians of `--e2e-repeat` runs each, and the ratios (issue
33: ours / bare loop, goal ≤ 2.0).

    .venv/bin/python scripts/bench_live.py [--convs 1] [--e2e] [--e2e-convs 10] [--e2e-repeat 1] [--skip-before]
    .venv/bin/python scripts/bench_live.py --vs-wire --e2e-repeat 5   # ours vs the wire, whole processes
    .venv/bin/python scripts/bench_live.py --local   # prefix-aware ordering on the embedded LLM
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, cast

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from face.data import CRSARENA_EVAL, RELEASED_PARTICLES, ensure_data, released_instructions_file  # noqa: E402
from face.datasets.crsarena import ASPECTS, load_conversations  # noqa: E402
from face.datasets.face_released import load_instructions, load_released_particles  # noqa: E402
from face.llm import LLMConfig, make_client  # noqa: E402
from face.llm import probe as endpoint_probe  # noqa: E402
from face.llm.base import runs  # noqa: E402
from face.llm.transport import OpenAITransport  # noqa: E402
from face.pipeline.particles import from_released  # noqa: E402
from face.pipeline.scoring import ScoringSpec, plan, score, units_for  # noqa: E402
from face.testing.scripted import spawn  # noqa: E402

ASPECT = "dialogue_overall"


def spec(n: int, **settings: Any) -> ScoringSpec:
    """``method.scoring``: sampling, ``n`` samples, the rest as given or the defaults (its constructor is built by
    ``face.settings.settings`` at run time, which a type checker does not see)."""
    return ScoringSpec(**{"estimator": "sampling", "n": n, **settings})


SPEC = spec(5)  # the paper's: 5 samples, T = 0.6, reasoning before the JSON answer


def data_dir() -> Path:
    d = Path(os.environ.get("FACE_DATA_DIR", ROOT / "data" / "raw"))
    mirror = os.environ.get("FACE_DATA_MIRROR") or (ROOT.parent / "shared" / "data")
    aspects = ["relevance", "dialogue_overall"]
    ensure_data(d, [CRSARENA_EVAL, RELEASED_PARTICLES, *[released_instructions_file(a) for a in aspects]],
                mirror=mirror if Path(mirror).exists() else None)
    return d


def workload(d: Path, n_convs: int, aspect: str = ASPECT):
    convs = load_conversations(d / CRSARENA_EVAL)[:n_convs]
    ids = {c.conv_id for c in convs}
    rows = [r for r in load_released_particles(d / RELEASED_PARTICLES) if r.conv_id in ids]
    units = units_for(ASPECTS[aspect], convs, from_released(rows))
    instructions = load_instructions(d / released_instructions_file(aspect))
    return convs, units, instructions


def configured(name: str, **over) -> LLMConfig:
    """conf/llm/base.yaml + conf/llm/<name>.yaml, as `llm=<name>` composes them, plus overrides."""
    from omegaconf import OmegaConf

    base = OmegaConf.load(ROOT / "conf" / "llm" / "base.yaml")
    own = OmegaConf.load(ROOT / "conf" / "llm" / f"{name}.yaml")
    d = cast(dict, OmegaConf.to_container(OmegaConf.merge(base, own), resolve=False))
    d.pop("defaults", None)  # conf/llm/<name>.yaml's list of the files it extends
    d.update(progress=False, **over)
    return LLMConfig.from_dict(d)


def http_bodies(cfg: LLMConfig, url: str, planned) -> list[dict]:
    """The HTTP bodies our client sends for `planned` under `cfg` (n split into n_per_request pieces)."""
    t = OpenAITransport(cfg, url, cfg.model)
    return [t.body(replace(p.request, n=len(r), first_sample=r[0]))
            for p in planned for r in runs(p.request.indices, cfg.n_per_request)]


async def bare_aiohttp(url: str, bodies: list[dict], concurrency: int) -> float:
    """Wall seconds for a bare aiohttp loop to send `bodies` with `concurrency` in flight."""
    import aiohttp

    sem = asyncio.Semaphore(concurrency)
    conn = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=conn) as s:
        async def one(body: dict) -> None:
            async with sem, s.post(url + "/chat/completions", json=body) as r:
                await r.read()

        await asyncio.gather(*(one(b) for b in bodies[:8]))  # connections up
        t0 = time.perf_counter()
        await asyncio.gather(*(one(b) for b in bodies))
        return time.perf_counter() - t0


def authors_pattern(url: str, planned, threads: int = 8, limit: int | None = None) -> tuple[float, int]:
    """(wall, samples): a pool of `threads` threads, one blocking request per sample (the authors' face.py)."""
    import openai

    api = openai.OpenAI(base_url=url, api_key="not-needed", max_retries=0)
    jobs = [(p.request, i) for p in planned for i in p.request.indices][:limit]

    def one(job) -> str:
        req, i = job
        r = api.chat.completions.create(model="scripted-model", messages=req.message_dicts(), n=1,
                                        temperature=req.temperature, max_tokens=req.max_tokens, seed=i)
        return r.choices[0].message.content or ""

    with ThreadPoolExecutor(threads) as ex:
        list(ex.map(one, jobs[:threads]))  # connections up
        t0 = time.perf_counter()
        list(ex.map(one, jobs))
        return time.perf_counter() - t0, len(jobs)


def probe_time(cfg: LLMConfig) -> float:
    """Seconds the client's start takes to probe the endpoint (once per base URL and model; remembered)."""
    endpoint_probe.forget()
    t0 = time.perf_counter()
    with make_client(cfg):
        return time.perf_counter() - t0


def ours(cfg: LLMConfig, planned) -> dict:
    """One scoring stage as the live method runs it: client start + score() (the endpoint already probed)."""
    t0, c0 = time.perf_counter(), time.process_time()
    with make_client(cfg) as client:
        records = score(client, planned, SPEC)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        u = client.usage.summary()
        n_per_request = client.cfg.n_per_request
    return {"wall": wall, "cpu": cpu, "usage": u, "n_per_request": n_per_request,
            "scores": [r.score for r in records]}


def e2e(url: str, n_convs: int, cache_dir: str, cpu: list[float] | None = None) -> tuple[float, dict]:
    """The acceptance command, nothing tuned: (wall seconds, llm_usage.json totals)."""
    run_dir = tempfile.mkdtemp(prefix="bench_live_run_")
    cmd = [sys.executable, str(ROOT / "scripts" / "run.py"), "experiment=crsarena_main", "llm=openai_compatible",
           f"llm.base_url={url}", f"dataset.limit={n_convs}", f"aspects=[{ASPECT}]",
           "method.particles.source=released", "tracking=none", f"llm.cache_dir={cache_dir}", "llm.progress=false",
           f"hydra.run.dir={run_dir}", f"report.out_dir={run_dir}/results"]
    wall = timed_process(cmd, cpu)
    return wall, json.loads((Path(run_dir) / "llm_usage.json").read_text())["totals"]


def bench_scripted(d: Path, args) -> None:
    convs, units, instructions = workload(d, args.convs)
    by_id = {c.conv_id: c for c in convs}
    planned = plan(units, instructions, by_id, SPEC, json_schema=False)
    samples = len(planned) * SPEC.n
    print(f"machine: {os.cpu_count()} cores, python {sys.version.split()[0]}; endpoint: scripted server, "
          f"{args.latency * 1e3:.0f} ms latency, own process")
    print(f"job: {len(convs)} CRSArena conversation(s), {ASPECT}, {len(units)} released particles × "
          f"{len(instructions)} instructions × {SPEC.n} samples = {samples} samples\n")
    proc, url = spawn(args.latency)
    rows: list[tuple[str, float, float, float | None, str, str]] = []
    try:
        mimic_wall, mimic_n = authors_pattern(url, planned, limit=args.mimic_samples)
        mimic_rate = mimic_n / mimic_wall
        rows.append(("authors' access pattern (8 threads, 1 request/sample)", mimic_rate, 1.0, None, "", ""))
        tmp = Path(tempfile.mkdtemp(prefix="bench_live_"))
        cases = []
        if not args.skip_before:
            cases.append(("ours before (n split, 8 in flight, httpx)",
                          configured("openai_compatible", base_url=url, n_per_request=1, concurrency=8,
                                     adaptive_concurrency=False, http_client="httpx", cache_dir=str(tmp / "before"))))
        cases += [("ours, default (llm=openai_compatible)", configured("openai_compatible", base_url=url,
                                                                       cache_dir=str(tmp / "default"))),
                  ("ours, concurrency 64 fixed, n per request",
                   configured("openai_compatible", base_url=url, concurrency=64, adaptive_concurrency=False,
                              cache_dir=str(tmp / "c64"))),
                  ("ours, default, warm cache", configured("openai_compatible", base_url=url,
                                                             cache_dir=str(tmp / "default")))]
        probe_s = probe_time(configured("openai_compatible", base_url=url, cache_dir=str(tmp / "probe")))
        reference = None
        for label, cfg in cases:
            r = ours(cfg, planned)
            if reference is None:
                reference = r["scores"]
            assert r["scores"] == reference, "scores differ between configurations"
            u = r["usage"]
            req = u["http_requests"]
            bare_conc = cfg.concurrency
            over = ""
            if req:
                bodies = http_bodies(cfg.replace(n_per_request=r["n_per_request"]), url, planned)
                bare = asyncio.run(bare_aiohttp(url, bodies, bare_conc))
                over = (f"{(r['wall'] - bare) / req * 1e3:.2f} ms (bare loop {bare:.2f} s at {bare_conc}); "
                        f"CPU {r['cpu'] / req * 1e3:.2f} ms/request")
            extra = (f"limit reached {u.get('concurrency_limit_reached')}, peak in flight {u.get('max_in_flight')}"
                     if cfg.adaptive_concurrency and req else "")
            rows.append((label, samples / r["wall"], req / samples, r["wall"], over, extra))
    finally:
        proc.terminate()
        proc.wait()
    print("| configuration | samples/s | × authors | requests/sample | wall s | our overhead per request | note |")
    print("|---|---|---|---|---|---|---|")
    for label, rate, rps, wall, over, extra in rows:
        print(f"| {label} | {rate:.0f} | {rate / mimic_rate:.1f}× | {rps:.2f} | "
              f"{'' if wall is None else f'{wall:.2f}'} | {over or ''} | {extra} |")
    print(f"\n(authors' pattern: {mimic_n} samples in {mimic_wall:.2f} s; ours: client start + scoring, same scores "
          f"in every row; probing the endpoint took {probe_s:.2f} s once, before the rows: its answer is remembered "
          "per base URL and model)")
    if args.e2e:
        bench_e2e(d, args, len(instructions), mimic_rate)


def bench_e2e(d: Path, args, n_instructions: int, mimic_rate: float) -> None:
    """The acceptance command as a user runs it (`--e2e`): cold (median of `--e2e-repeat`), warm, one conversation."""
    proc, url = spawn(args.latency)
    try:
        _, units10, _ = workload(d, args.e2e_convs)
        n10 = len(units10) * n_instructions * SPEC.n
        colds = []
        for _ in range(args.e2e_repeat):  # each cold run on a fresh cache
            cache = tempfile.mkdtemp(prefix="bench_live_e2e_")
            c, t = e2e(url, args.e2e_convs, cache)
            colds.append(c)
        cold = statistics.median(colds)
        warm, _ = e2e(url, args.e2e_convs, cache)
        one_cache = tempfile.mkdtemp(prefix="bench_live_e2e1_")
        one_cold, _ = e2e(url, 1, one_cache)
        one_warm, _ = e2e(url, 1, one_cache)
    finally:
        proc.terminate()
        proc.wait()
    print(f"\n[acceptance command: scripts/run.py experiment=crsarena_main llm=openai_compatible "
          f"llm.base_url=URL dataset.limit={args.e2e_convs} 'aspects=[{ASPECT}]' "
          "method.particles.source=released tracking=none]")
    spread = "" if len(colds) == 1 else (
        f" (median of {len(colds)} cold runs, {min(colds):.2f}–{max(colds):.2f} s = "
        f"{n10 / max(colds) / mimic_rate:.1f}–{n10 / min(colds) / mimic_rate:.1f}×)")
    print(f"  cold: {cold:.2f} s for {n10} samples ({t['http_requests']} HTTP requests) = {n10 / cold:.0f} "
          f"samples/s end to end = {n10 / cold / mimic_rate:.1f}× the authors' pattern{spread}; limit reached "
          f"{t.get('concurrency_limit_reached')}")
    print(f"  warm rerun (all from the cache): {warm:.2f} s; scoring stage ≈ cold − warm = {cold - warm:.2f} s = "
          f"{n10 / max(cold - warm, 1e-9):.0f} samples/s = {n10 / max(cold - warm, 1e-9) / mimic_rate:.1f}×")
    print(f"  one conversation: cold {one_cold:.2f} s, warm {one_warm:.2f} s (the job outside the LLM calls, "
          "process start included)")


def timed_process(cmd: list[str], cpu: list[float] | None = None) -> float:
    """Wall seconds of a whole process (Python's start included), its output discarded; its user + system CPU
    seconds appended to ``cpu`` when given."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode:
        raise subprocess.CalledProcessError(p.returncode, cmd)
    if cpu is not None:
        cpu.append(usage.ru_utime + usage.ru_stime)
    return wall


def wire_bodies(d: Path, n_convs: int, url: str) -> tuple[list[dict], int]:
    """The scoring stage's HTTP bodies as the acceptance command sends them (n per request as the endpoint's probe
    says, the JSON-schema response format), and the concurrency cap of `llm=openai_compatible`."""
    convs, units, instructions = workload(d, n_convs)
    cfg = configured("openai_compatible", base_url=url, cache_dir=tempfile.mkdtemp(prefix="bench_live_wire_"))
    with make_client(cfg) as client:  # the probe: n honoured or not
        cfg = cfg.replace(n_per_request=client.cfg.n_per_request)
    planned = plan(units, instructions, {c.conv_id: c for c in convs}, SPEC, json_schema=cfg.supports_json_schema)
    unique = {json.dumps(b, sort_keys=True): b for b in http_bodies(cfg, url, planned)}  # ours sends a repeat once
    return list(unique.values()), cfg.concurrency


def bench_vs_wire(d: Path, args) -> None:
    """`--vs-wire`: the acceptance command (cold, a fresh cache each run) against two bare loops sending the same
    scoring requests at the same concurrency (scripts/bare_loop.py): aiohttp alone (the wire's floor) and the same
    through the openai SDK (the floor of any client that sends every call through the openai client, as face
    does). All three timed as whole processes, alternating in one benchmark run; medians of `--e2e-repeat` runs
    each and the ratios."""
    proc, url = spawn(args.latency)
    try:
        bodies, concurrency = wire_bodies(d, args.e2e_convs, url)
        bodies_file = Path(tempfile.mkdtemp(prefix="bench_live_wire_")) / "bodies.json"
        bodies_file.write_text(json.dumps(bodies))
        bare_cmd = [sys.executable, str(ROOT / "scripts" / "bare_loop.py"), url, str(bodies_file), str(concurrency)]
        sdk_cmd = [*bare_cmd, "--sdk"]
        timed_process(bare_cmd)  # the server's connections and the OS's file cache warmed, not timed
        timed_process(sdk_cmd)
        runs: dict[str, tuple[list[float], list[float]]] = {k: ([], []) for k in ("ours", "sdk", "bare")}
        for i in range(args.e2e_repeat):
            runs["ours"][0].append(e2e(url, args.e2e_convs, tempfile.mkdtemp(prefix="bench_live_e2e_"),
                                       runs["ours"][1])[0])
            runs["sdk"][0].append(timed_process(sdk_cmd, runs["sdk"][1]))
            runs["bare"][0].append(timed_process(bare_cmd, runs["bare"][1]))
            print(f"  run {i + 1}: " + ", ".join(f"{k} {w[-1]:.2f} s (CPU {c[-1]:.2f} s)" for k, (w, c) in runs.items())
                  + f"; ours / bare {runs['ours'][0][-1] / runs['bare'][0][-1]:.2f}", flush=True)
    finally:
        proc.terminate()
        proc.wait()
    med = {k: statistics.median(w) for k, (w, _) in runs.items()}
    print(f"\n[ours: scripts/run.py experiment=crsarena_main llm=openai_compatible llm.base_url=URL "
          f"dataset.limit={args.e2e_convs} 'aspects=[{ASPECT}]' method.particles.source=released tracking=none; "
          f"sdk loop: scripts/bare_loop.py --sdk, bare loop: scripts/bare_loop.py, the same {len(bodies)} scoring "
          f"requests, {concurrency} in flight; {args.latency * 1e3:.0f} ms endpoint, {os.cpu_count()} cores]")
    names = {"ours": "ours     ", "sdk": "sdk loop ", "bare": "bare loop"}
    for k, (w, c) in runs.items():
        print(f"{names[k]} median {med[k]:.2f} s ({min(w):.2f}–{max(w):.2f}, {len(w)} runs); "
              f"CPU median {statistics.median(c):.2f} s")
    ours, bare = runs["ours"][0], runs["bare"][0]
    print(f"ratio     {med['ours'] / med['bare']:.2f} (ours / bare loop, medians; per run "
          f"{min(o / b for o, b in zip(ours, bare)):.2f}–{max(o / b for o, b in zip(ours, bare)):.2f}; goal ≤ 2.0)")
    print(f"          {med['sdk'] / med['bare']:.2f} (sdk loop / bare loop: the openai client's own share), "
          f"{med['ours'] / med['sdk']:.2f} (ours / sdk loop)")


def bench_local_order(d: Path, n_instructions: int) -> None:
    convs, units, instructions = workload(d, 1)
    instructions = instructions[:n_instructions]
    by_id = {c.conv_id: c for c in convs}
    print(f"[embedded local LLM] {ASPECT}, conversation {convs[0].conv_id}: {len(units)} particles × "
          f"{len(instructions)} instructions, 1 sample each, concurrency 1")
    from omegaconf import OmegaConf

    base = cast(dict, OmegaConf.to_container(OmegaConf.load(ROOT / "conf" / "llm" / "local.yaml")))
    for order in ("naive", "prefix"):
        with tempfile.TemporaryDirectory() as tmp:
            cfg = LLMConfig.from_dict({**asdict(configured("base", model="x")), **base, "cache_dir": tmp,
                                       "concurrency": 1, "progress": False})
            planned = plan(units, instructions, by_id, spec(1, order=order), True)
            with make_client(cfg) as client:
                t = time.perf_counter()
                score(client, planned, spec(1, order=order))
                wall = time.perf_counter() - t
                u = client.usage.summary()
            print(f"  order={order:6s}: wall {wall:6.1f} s for {u['http_requests']} requests "
                  f"({wall / max(u['http_requests'], 1):.2f} s/request)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--convs", type=int, default=1, help="conversations in the side-by-side rows")
    ap.add_argument("--latency", type=float, default=0.2)
    ap.add_argument("--mimic-samples", type=int, default=None, help="time the authors' pattern on this many samples")
    ap.add_argument("--skip-before", action="store_true", help="leave out the pre-issue-10 configuration")
    ap.add_argument("--e2e", action="store_true", help="also time the acceptance command (cold and warm)")
    ap.add_argument("--e2e-convs", type=int, default=10)
    ap.add_argument("--e2e-repeat", type=int, default=1, help="cold runs of the acceptance command (median printed)")
    ap.add_argument("--vs-wire", action="store_true", help="only the acceptance command against the bare loop "
                    "and the same loop through the openai SDK, whole processes, --e2e-repeat runs each (medians, "
                    "ratios)")
    ap.add_argument("--local", action="store_true", help="only the prefix-order benchmark on the embedded LLM")
    ap.add_argument("--local-instructions", type=int, default=4)
    args = ap.parse_args()
    d = data_dir()
    if args.local:
        bench_local_order(d, args.local_instructions)
    elif args.vs_wire:
        bench_vs_wire(d, args)
    else:
        bench_scripted(d, args)


if __name__ == "__main__":
    main()
