"""Benchmark of live scoring.

1. Scripted server with 200 ms latency: one CRSArena conversation, one aspect (relevance), its
   released particles, 16 instructions × 5 samples — wall time, HTTP requests, LLM calls; then the
   same with logprobs (one call per particle × instruction).
2. Embedded local LLM (llama.cpp, SmolLM2-135M): a dialogue-level aspect scored in prefix-aware
   order vs instruction-major ("naive") order — wall time (--skip-local to leave it out).

    .venv/bin/python scripts/bench_live.py [--concurrency 8] [--skip-local]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from face.data import CRSARENA_EVAL, RELEASED_PARTICLES, ensure_data, released_instructions_file  # noqa: E402
from face.data.crsarena import ASPECTS, load_conversations  # noqa: E402
from face.data.released import load_instructions, load_released_particles  # noqa: E402
from face.llm import LLMConfig, make_client  # noqa: E402
from face.llm.scripted import ScriptedServer  # noqa: E402
from face.particles import from_released  # noqa: E402
from face.scoring import ScoringSpec, plan, score, units_for  # noqa: E402


def data_dir() -> Path:
    d = Path(os.environ.get("FACE_DATA_DIR", ROOT / "data" / "raw"))
    mirror = os.environ.get("FACE_DATA_MIRROR") or (ROOT.parent / "shared" / "data")
    aspects = ["relevance", "dialogue_overall"]
    ensure_data(d, [CRSARENA_EVAL, RELEASED_PARTICLES, *[released_instructions_file(a) for a in aspects]],
                mirror=mirror if Path(mirror).exists() else None)
    return d


def setup(d: Path, aspect: str, conv_index: int = 0):
    convs = load_conversations(d / CRSARENA_EVAL)[conv_index:conv_index + 1]
    rows = [r for r in load_released_particles(d / RELEASED_PARTICLES) if r.conv_id == convs[0].conv_id]
    units = units_for(ASPECTS[aspect], convs, from_released(rows))
    instructions = load_instructions(d / released_instructions_file(aspect))
    return convs, units, instructions


def timed(cfg: LLMConfig, planned, estimator: str) -> tuple[float, dict]:
    with make_client(cfg) as client:
        t = time.perf_counter()
        score(client, planned, estimator)
        wall = time.perf_counter() - t
        return wall, client.usage.summary()


def bench_scripted(d: Path, concurrency: int) -> None:
    convs, units, instructions = setup(d, "relevance")
    by_id = {c.conv_id: c for c in convs}
    print(f"[scripted server, 200 ms latency] conversation {convs[0].conv_id}: {len(convs[0].assistant_turns())} "
          f"assistant turns, {len(units)} released particles; relevance; {len(instructions)} instructions; "
          f"concurrency {concurrency}")
    with ScriptedServer(latency_s=0.2) as info:
        for label, estimator, n, n_per_request in [("sampling n=5, n split into 1 per request", "sampling", 5, 1),
                                                    ("sampling n=5, n=5 in one request", "sampling", 5, 5),
                                                    ("logprobs (one call each)", "logprobs", 1, 1)]:
            with tempfile.TemporaryDirectory() as tmp:
                cfg = LLMConfig(backend="openai_compatible", base_url=info.base_url, model="scripted-model",
                                cache_dir=tmp, progress=False, concurrency=concurrency, n_per_request=n_per_request)
                planned = plan(units, instructions, by_id, ScoringSpec(estimator, n), True)
                wall, u = timed(cfg, planned, estimator)
                print(f"  {label:42s}: wall {wall:6.2f} s, HTTP requests {u['http_requests']:5d}, LLM calls "
                      f"(samples) {len(planned) * n:5d}, scores {len(planned)}")


def bench_local_order(d: Path, n_instructions: int) -> None:
    convs, units, instructions = setup(d, "dialogue_overall")
    instructions = instructions[:n_instructions]
    by_id = {c.conv_id: c for c in convs}
    print(f"[embedded local LLM] dialogue_overall, conversation {convs[0].conv_id}: {len(units)} particles × "
          f"{len(instructions)} instructions, 1 sample each, concurrency 1")
    from omegaconf import OmegaConf

    base = OmegaConf.to_container(OmegaConf.load(ROOT / "conf" / "llm" / "local.yaml"))
    for order in ("naive", "prefix"):
        with tempfile.TemporaryDirectory() as tmp:
            cfg = LLMConfig.from_dict({**base, "cache_dir": tmp, "concurrency": 1, "progress": False})
            planned = plan(units, instructions, by_id, ScoringSpec("sampling", 1, order=order), True)
            wall, u = timed(cfg, planned, "sampling")
            print(f"  order={order:6s}: wall {wall:6.1f} s for {u['http_requests']} requests "
                  f"({wall / max(u['http_requests'], 1):.2f} s/request)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--local-instructions", type=int, default=4)
    ap.add_argument("--skip-local", action="store_true")
    args = ap.parse_args()
    d = data_dir()
    bench_scripted(d, args.concurrency)
    if not args.skip_local:
        bench_local_order(d, args.local_instructions)


if __name__ == "__main__":
    main()
