"""What a run says on the console besides its tables: whether progress bars are drawn, and the one summary block
every run ends with (where the results went, the MLflow run, wall time, LLM requests and cost), as
lm-evaluation-harness and Hydra end theirs.

Progress (``Progress``, the one reporter; ``progress`` for an iterable): on a terminal a tqdm bar on stderr; when
stderr is not a terminal (``nohup``, ``| tee``, a CI or SLURM log) one line every 30 s with stage, done/total, rate,
ETA and the cost so far, so that a log shows that a run is alive and when it will end. ``FACE_PROGRESS=0`` switches
progress off, ``FACE_PROGRESS=1`` draws bars also into a log file, ``FACE_PROGRESS=log`` writes lines also on a
terminal; ``llm.progress=false`` switches off the LLM stages' progress only. While a bar is drawn, logging warnings
are written above it (``tqdm.write``), not over it.

The summary's LLM numbers are the totals of the run's ``llm_usage*.json`` files: each LLM job adds its usage to the
run's ``RunSummary`` (passed to it: ``face.methods.Inputs.summary``) when it writes that file.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from face.secrets import redact

MLFLOW_UI = "http://127.0.0.1:5000"  # `make mlflow-ui`


def progress_mode(enabled: bool = True, stream=None) -> str | None:
    """How a long stage reports progress: ``"bar"`` (a tqdm bar: stderr a terminal, or ``FACE_PROGRESS=1``),
    ``"log"`` (a line every ``LOG.interval`` = 30 s: stderr a file or a pipe, or ``FACE_PROGRESS=log``), or None
    (``enabled`` false, e.g. ``llm.progress=false``, or ``FACE_PROGRESS=0``). Decided when a stage starts."""
    env = os.environ.get("FACE_PROGRESS", "").strip().lower()
    if not enabled or env in ("0", "false", "no", "off"):
        return None
    if env in ("1", "true", "yes", "on"):
        return "bar"
    if env == "log":
        return "log"
    isatty = getattr(stream or sys.stderr, "isatty", None)  # (sys.stderr read now: pytest swaps it)
    try:
        return "bar" if isatty and isatty() else "log"
    except ValueError:  # a closed stream
        return None


def progress(iterable, desc: str, total: int | None = None, unit: str = "it", leave: bool = True):
    """``iterable`` (a sized one: a list, a range) reported by a ``Progress`` (a bar, or lines in a log; nothing
    when progress is off). While it is iterated, the bars of the batches inside are transient (``nested()``): an
    optimizer round of hundreds of small scoring batches leaves one line, not hundreds. ``leave=False``: cleared when
    done (a stage met many times)."""
    global _outer
    with Progress(len(iterable) if total is None else total, desc, unit=unit, leave=leave) as reporter:
        reported = reporter.mode is not None
        _outer += reported
        try:
            for x in iterable:
                yield x
                reporter.update()
        finally:
            _outer -= reported


_outer = 0  # stage reporters (``progress``) being iterated: the LLM batch bars drawn meanwhile do not stay


def nested() -> bool:
    """Whether a stage (``progress``) is being reported: a batch bar inside it is cleared when done."""
    return _outer > 0


class _LogLines:
    """Progress in a log: one line every ``interval`` seconds for all stages being reported (the outer stage first:
    ``optimizer rounds relevance: 2/5 … › scoring relevance: 40/120 …``), and a last line for each stage that was in
    a line and lasted an interval or more. A line is due on a step of a stage, and — ``heartbeat`` — also while no
    step ends (one slow request): a daemon thread looks every ``beat_s`` seconds. ``clock``, ``stream`` and
    ``heartbeat`` are swapped by the tests."""

    def __init__(self, interval: float = 30.0, beat_s: float = 5.0):
        self.interval, self.beat_s = interval, beat_s
        self.clock = time.monotonic
        self.stream = None  # sys.stderr when None (read at writing time: pytest swaps it)
        self.heartbeat = True
        self.live: list[Progress] = []
        self.last: float | None = None  # when the last line was written, or the first stage started
        self._lock = threading.Lock()
        self._stop: threading.Event | None = None

    def start(self, p: Progress) -> None:
        with self._lock:
            if not self.live:
                self.last = p.started
                if self.heartbeat:
                    self._stop = threading.Event()
                    threading.Thread(target=self._beat, args=(self._stop,), name="face-progress",
                                     daemon=True).start()
            self.live.append(p)

    def _beat(self, stop: threading.Event) -> None:
        while not stop.wait(self.beat_s):
            self.tick()

    def tick(self) -> None:
        with self._lock:
            now = self.clock()
            if not self.live or self.last is None or now - self.last < self.interval:
                return
            self.last = now
            for p in self.live:
                p.logged = True
            self.write(" › ".join(p.status(now) for p in self.live))

    def stop(self, p: Progress) -> None:
        with self._lock:
            self.live.remove(p)
            if not self.live and self._stop is not None:
                self._stop.set()
                self._stop = None
            now = self.clock()
            if p.logged and now - p.started >= self.interval:  # a short batch seen in an outer stage's line: none
                self.write(p.status(now, done=True))

    def write(self, text: str) -> None:
        print(f"{time.strftime('%H:%M:%S')} progress: {redact(text)}", file=self.stream or sys.stderr, flush=True)


LOG = _LogLines()
_BARS: list = []  # the bars being drawn: meanwhile logging goes through tqdm.write (above a bar, not over it)
_REDIRECT = ExitStack()  # holds logging_redirect_tqdm while a bar is drawn


class Progress:
    """The one progress reporter of the project: ``total`` steps of a stage called ``desc``. On a terminal a tqdm
    bar (logging warnings written above it, not over it); in a log a line every ``LOG.interval`` seconds with
    done/total, rate, ETA and ``info()`` (e.g. cost so far); nothing when ``progress_mode`` says off. ``leave``:
    whether the bar stays when done (default: not inside a stage, see ``nested``)."""

    def __init__(self, total: int | None, desc: str, unit: str = "it", enabled: bool = True,
                 leave: bool | None = None, info=None):
        self.total, self.desc, self.unit, self.info = total, desc, unit, info
        self.n = 0
        self.planned = 0  # a whole run (``alive``): the LLM requests its jobs' estimates plan (``plan``)
        self.logged = False
        self.stopped = False  # ended by an exception: its last line says "stopped after", not "done in"
        self.bar = None
        self.mode = progress_mode(enabled) if total != 0 else None
        self.started = LOG.clock()
        if self.mode == "bar":
            from tqdm import tqdm
            from tqdm.contrib.logging import logging_redirect_tqdm

            if not _BARS:
                _REDIRECT.enter_context(logging_redirect_tqdm())
            _BARS.append(self)
            self.bar = tqdm(total=total, desc=desc, unit=unit, mininterval=0.5, dynamic_ncols=True, file=sys.stderr,
                            leave=(not nested()) if leave is None else leave)
        elif self.mode == "log":
            LOG.start(self)

    def update(self, n: int = 1) -> None:
        self.n += n
        if _RUN and self.unit == "requests":  # an LLM stage of the run: the run's progress too
            _RUN[-1].n += n
        if self.bar is not None:
            self.bar.update(n)
            done = self.bar.n == self.bar.total
            if self.info is not None and (done or self.n % 20 == 0):
                self.bar.set_postfix(self.info(), refresh=done)
        elif self.mode == "log":
            LOG.tick()

    def status(self, now: float, done: bool = False) -> str:
        """``desc: 40/120 requests (33 %), 2.1/s, ETA 38 s, <info>`` (``done``: the stage's last line)."""
        elapsed = max(now - self.started, 1e-9)
        ended = f"stopped after {_duration(elapsed)}" if self.stopped else f"done in {_duration(elapsed)}"
        if self.total is None and not self.unit:  # a whole run (``alive``): its time, and its ETA once planned
            if done:
                return f"{self.desc}: {ended}"
            left = elapsed * (self.planned - self.n) / self.n if 0 < self.n < self.planned else None
            eta = f", {self.n:,}/{self.planned:,} LLM requests, ETA {_duration(left)}" if left is not None else ""
            return f"{self.desc}: running for {_duration(elapsed)}{eta}"
        rate = self.n / elapsed
        of = f"/{self.total} {self.unit} ({100 * self.n / self.total:.0f} %)" if self.total else f" {self.unit}"
        text = f"{self.desc}: {self.n}{of}, {rate:,.0f}/s" if rate >= 10 else f"{self.desc}: {self.n}{of}, {rate:.3g}/s"
        if done:
            text += f", {ended}"
        elif self.total and rate > 0:
            text += f", ETA {_duration((self.total - self.n) / rate)}"
        if self.info is not None:
            text += ", " + ", ".join(f"{k} {v}" for k, v in self.info().items())
        return text

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, kind, *_) -> None:  # ended by an exception (interrupted, or a loop left early): not done
        self.stopped = kind is not None
        self.close()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
            _BARS.remove(self)
            if not _BARS:
                _REDIRECT.close()
        elif self.mode == "log":
            LOG.stop(self)
            self.mode = None


@contextmanager
def alive(desc: str) -> Iterator[None]:
    """A whole run in a log (stderr not a terminal): its name and running time lead every progress line, written
    every 30 s also between its stages (loading, aggregating, meta-evaluating: no stage reports there), with the
    whole run's ETA once its LLM requests are planned (``plan``); a last line says when it ended, or that it stopped.
    Nothing on a terminal (its stages draw bars) or with ``FACE_PROGRESS=0``."""
    if progress_mode() != "log":
        yield
        return
    with Progress(None, desc, unit="") as run:
        _RUN.append(run)
        try:
            yield
        finally:
            _RUN.remove(run)


_RUN: list[Progress] = []  # the whole runs being reported (``alive``), the innermost last


def plan(requests: float) -> None:
    """LLM requests the run will send, as an LLM job's estimate counts them (``LLMJob.gate``; a restated estimate
    adds the difference): with them the run's line in a log has the whole run's ETA, from its rate so far."""
    if _RUN:
        _RUN[-1].planned += int(round(requests))


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
    estimates: list = field(default_factory=list)  # each LLM job's cost estimate table (the run's typed result)
    held: bool = False  # printed by the runner after the entry point's last outputs (face evaluate's report)
    # face evaluate's estimate step: "dry" (the dry run printing the estimate, without a dry-run banner), "shown"
    # (the run after it: the estimate is not printed again)
    estimate: str = ""

    def text(self) -> str:
        lines = []
        if self.results is not None:
            lines.append(("Results", str(self.results)))
        if self.run_dir is not None and self.run_dir != self.results:
            lines.append(("Run dir", str(self.run_dir)))
        if self.run_id:
            # workflowType: MLflow 3's UI shows a fresh browser its GenAI view, where FACE's runs are not listed
            hint = (f" ({self.ui}, then {MLFLOW_UI}/#/experiments/{self.experiment_id}/runs/{self.run_id}"
                    "?workflowType=machine_learning)" if self.experiment_id else "")
            lines.append(("MLflow run", self.run_id + hint))
        else:
            lines.append(("MLflow run", "none (tracking off)" if not self.tracking else "none"))
        if self.wall_s is not None:
            lines.append(("Wall time", _duration(self.wall_s)))
        if self.usage:  # summed over the run's LLM jobs (llm_usage.json's names)
            keys = ("requests", "samples", "http_requests", "cache_hits", "cost_usd")
            llm = {k: sum(u.get(k, 0) for u in self.usage) for k in keys}
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


def finish(summary: RunSummary) -> None:
    """The run ended well: print its summary block, unless the entry point prints it after its own last outputs
    (``held``)."""
    summary.wall_s = time.monotonic() - summary.started
    if not summary.held:
        print(summary.text(), flush=True)
