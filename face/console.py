"""What a run says on the console besides its tables: whether progress bars are drawn, and the one summary block
every run ends with (where the results went, the MLflow run, wall time, LLM requests and cost), as
lm-evaluation-harness and Hydra end theirs.

Progress bars (tqdm, on stderr) are drawn when stderr is a terminal; ``FACE_PROGRESS=0`` switches them off,
``FACE_PROGRESS=1`` draws them also when stderr is not a terminal (a log file); ``llm.progress=false`` switches
off the LLM stages' bars only. Output captured by tests is not a terminal: no bars there.

The summary's LLM numbers are the totals of the run's ``llm_usage*.json`` files: each LLM job notes its usage
here (``note_usage``) when it writes that file, inside the ``collect()`` of the run.
"""

from __future__ import annotations

import os
import sys
import time
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from face.secrets import redact

MLFLOW_UI = "http://127.0.0.1:5000"  # `make mlflow-ui`


def progress_on(enabled: bool = True, stream=None) -> bool:
    """Whether to draw a progress bar: ``enabled`` (e.g. ``llm.progress``), not ``FACE_PROGRESS=0``, and stderr
    a terminal (or ``FACE_PROGRESS=1``). Decided when a bar is made, so a test that fakes a terminal gets one."""
    if not enabled:
        return False
    env = os.environ.get("FACE_PROGRESS", "").strip().lower()
    if env in ("0", "false", "no", "off"):
        return False
    if env in ("1", "true", "yes", "on"):
        return True
    stream = sys.stderr if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except ValueError:  # a closed stream
        return False


_outer = 0  # stage bars being iterated (``progress``): the LLM batch bars drawn meanwhile do not stay


def progress(iterable, desc: str, total: int | None = None, unit: str = "it", leave: bool = True):
    """``iterable`` with a tqdm bar on stderr when ``progress_on()``; the iterable itself otherwise. While it is
    iterated, the bars of the batches inside are transient (``nested()``): an optimizer round of hundreds of small
    scoring batches leaves one line, not hundreds. ``leave=False``: cleared when done (a stage met many times)."""
    if not progress_on():
        return iterable
    from tqdm import tqdm

    return _outer_bar(tqdm(iterable, desc=desc, total=total, unit=unit, mininterval=0.5, dynamic_ncols=True,
                           file=sys.stderr, leave=leave))


def _outer_bar(bar):
    global _outer
    _outer += 1
    try:
        yield from bar
    finally:
        _outer -= 1
        bar.close()


def nested() -> bool:
    """Whether a stage bar (``progress``) is being drawn: a batch bar inside it is cleared when done."""
    return _outer > 0


@dataclass
class RunSummary:
    """What the summary block shows; ``usage``: one ``llm_usage.json`` ``totals`` per LLM job of the run."""

    results: Path | None = None
    run_dir: Path | None = None
    run_id: str | None = None
    experiment_id: str | None = None
    tracking: bool = False
    ui: str = "make mlflow-ui"  # how to open the MLflow UI on the run's store
    started: float = field(default_factory=time.monotonic)
    wall_s: float | None = None
    usage: list[dict] = field(default_factory=list)
    extra: list[tuple[str, str]] = field(default_factory=list)  # (label, value) lines at the end (face evaluate)

    def stop(self) -> None:
        self.wall_s = time.monotonic() - self.started

    def llm_totals(self) -> dict[str, float] | None:
        """Requests, samples, HTTP requests, cache hits and cost summed over the run's LLM jobs (llm_usage.json's
        names); None for a run with none."""
        if not self.usage:
            return None
        keys = ("requests", "samples", "http_requests", "cache_hits", "cost_usd")
        return {k: sum(u.get(k, 0) for u in self.usage) for k in keys}

    def text(self) -> str:
        lines = []
        if self.results is not None:
            lines.append(("Results", str(self.results)))
        if self.run_dir is not None and self.run_dir != self.results:
            lines.append(("Run dir", str(self.run_dir)))
        if self.run_id:
            hint = (f" ({self.ui}, then {MLFLOW_UI}/#/experiments/{self.experiment_id}/runs/{self.run_id})"
                    if self.experiment_id else "")
            lines.append(("MLflow run", self.run_id + hint))
        else:
            lines.append(("MLflow run", "none (tracking off)" if not self.tracking else "none"))
        if self.wall_s is not None:
            lines.append(("Wall time", _duration(self.wall_s)))
        llm = self.llm_totals()
        if llm is not None:
            lines.append(("LLM requests", f"{int(llm['requests'])} ({int(llm['http_requests'])} HTTP requests, "
                                          f"{int(llm['samples'])} samples sent, {int(llm['cache_hits'])} samples "
                                          "from cache)"))
            lines.append(("Cost", f"${llm['cost_usd']:.6f}"))
        lines += self.extra
        width = max(len(k) for k, _ in lines) + 1
        body = "\n".join(f"{k + ':':<{width}} {v}" for k, v in lines)
        return redact(f"{'=' * 24} run summary {'=' * 24}\n{body}")


def _duration(s: float) -> str:
    if s < 60:
        return f"{s:.1f} s"
    m, s = divmod(int(round(s)), 60)
    h, m = divmod(m, 60)
    return f"{h}h {m:02d}m {s:02d}s" if h else f"{m}m {s:02d}s"


_CURRENT: ContextVar[RunSummary | None] = ContextVar("face_run_summary", default=None)
_HELD: ContextVar[list | None] = ContextVar("face_summary_held", default=None)


@contextmanager
def collect(summary: RunSummary) -> Iterator[RunSummary]:
    """The run's summary, filled by the LLM jobs that finish inside (``note_usage``)."""
    token = _CURRENT.set(summary)
    try:
        yield summary
    finally:
        _CURRENT.reset(token)


def note_usage(totals: dict) -> None:
    """An LLM job's totals (``llm_usage.json``'s ``totals``), for the summary of the run it belongs to."""
    current = _CURRENT.get()
    if current is not None:
        current.usage.append(dict(totals))


def finish(summary: RunSummary) -> None:
    """The run ended well: print its summary block, or hand it to the caller that holds it (``held()``)."""
    summary.stop()
    held = _HELD.get()
    if held is not None:
        held.append(summary)
        return
    print(summary.text(), flush=True)


@contextmanager
def held() -> Iterator[list[RunSummary]]:
    """Summaries of the runs inside are not printed but collected, for a caller that adds its own lines and prints
    the block last (``face evaluate``: its report)."""
    got: list[RunSummary] = []
    token = _HELD.set(got)
    try:
        yield got
    finally:
        _HELD.reset(token)


@contextmanager
def silenced() -> Iterator[None]:
    """No summary for the runs inside (``face evaluate``'s estimate step: a dry run, not the run)."""
    with held():
        yield
