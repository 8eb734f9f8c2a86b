"""The scripted server in a process of its own: ``python -m face.testing.scripted`` (``main``), started from a
benchmark (``spawn``); its request log read back (``read_log``)."""
from __future__ import annotations

import json
import subprocess

from .. import service
from ..faults import KINDS
from .server import TRANSPORT_FAULTS, ScriptedServer


def spawn(latency_s: float = 0.0, *args: str) -> tuple[subprocess.Popen, str]:
    """The server in a process of its own (benchmarks: its CPU is not the client's): (the Popen, its base URL)."""
    return service.spawn("face.testing.scripted", "--latency", str(latency_s), *args)


def read_log(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def main(argv: list[str] | None = None) -> None:
    ap = service.arguments("Scripted OpenAI-compatible test server", "scripted-model")
    ap.add_argument("--fault-rate", type=float, default=0.0)
    ap.add_argument("--fault-kinds", default=",".join(TRANSPORT_FAULTS), help=f"of {','.join(KINDS)}")
    ap.add_argument("--faults-per-request", type=int, default=1)
    ap.add_argument("--retry-after", type=float, default=0.05)
    ap.add_argument("--hang", type=float, default=5.0)
    ap.add_argument("--max-concurrent", type=int, default=None, help="429 beyond this many requests in flight")
    ap.add_argument("--log", default=None, help="append a JSON line per request to this file")
    a = ap.parse_args(argv)
    service.serve(ScriptedServer(host=a.host, port=a.port, latency_s=a.latency, fault_rate=a.fault_rate,
                                 fault_kinds=tuple(k for k in a.fault_kinds.split(",") if k),
                                 faults_per_request=a.faults_per_request, retry_after_s=a.retry_after, hang_s=a.hang,
                                 log_file=a.log, model=a.model, max_concurrent=a.max_concurrent),
                  a.until_stdin_closes)
