"""Every stop of a command-line run as one line and an exit code (``scripts/run.py``, ``face``).

Exit codes: 0 done; 2 a bad setting or input file (one line naming it; nothing sent, no results written);
3 stopped by an LLM budget cap; 4 an LLM request failed after its retries; 130 interrupted (Ctrl-C or
SIGTERM); 1 an unexpected error. ``FACE_DEBUG=1`` shows the traceback as well.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from typing import NoReturn

from face.errors import ConfigError, DataError
from face.secrets import redact

EXIT_CONFIG, EXIT_BUDGET, EXIT_LLM, EXIT_INTERRUPTED, EXIT_BUG = 2, 3, 4, 130, 1

# the resume hint a stopped run notes on its exception (face.runner.run), said by its stop line
RESUME = "Finished LLM calls are cached in {cache}: rerun the same command to resume."


def fail(code: int, line: str) -> NoReturn:
    """Print the one line (redacted: an error message may quote a key, e.g. a server's "incorrect API key
    sk-...") and exit with ``code``."""
    print(redact(line), file=sys.stderr, flush=True)
    sys.exit(code)


def stop_line(e: BaseException) -> tuple[int, str]:
    """The exit code and the one line of a run stopped by ``e`` (first match wins). A configuration Hydra could not
    compose is a bad setting (a misspelled config name lists the valid ones)."""
    from hydra.errors import HydraException, MissingConfigException

    from face.llm import BudgetExceeded, LLMCallError, LLMRequestRefused
    from face.runner.compose import first_line, missing_config

    notes = getattr(e, "__notes__", [])
    resume = next((n for n in notes if n.startswith(RESUME.split("{")[0])), "")
    stops = (  # (what stopped the run, exit code, the line printed)
        ((DataError, ConfigError), EXIT_CONFIG, "error: {e}"),  # bad input or setting: nothing was sent
        ((MissingConfigException,), EXIT_CONFIG, "error: {missing}"),
        ((HydraException,), EXIT_CONFIG, "error: bad setting: {first}"),
        ((BudgetExceeded,), EXIT_BUDGET, "stopped: {e}"),
        ((LLMRequestRefused,), EXIT_LLM, "stopped: {e}. Nothing of that request was cached or scored."),
        ((LLMCallError,), EXIT_LLM, "stopped: an LLM request failed after its retries: {e}. {resume}"),
        ((KeyboardInterrupt,), EXIT_INTERRUPTED, "interrupted: the run was stopped{mlflow}. {resume}"),
        ((BaseException,), EXIT_BUG, "error: unexpected {kind}: {e} (FACE_DEBUG=1 shows the traceback). {resume}"),
    )
    code, line = next((code, line) for kinds, code, line in stops if isinstance(e, kinds))
    marked = [n for n in notes if n.startswith("MLflow run ")]  # what the tracker did
    missing = missing_config(e) if isinstance(e, MissingConfigException) else ""
    return code, line.format(e=e, resume=resume, missing=missing, kind=type(e).__name__, first=first_line(e),
                             mlflow=f" ({'; '.join(marked)})" if marked else "").rstrip()


@contextlib.contextmanager
def guarded() -> Iterator[None]:
    """A command's body: every stop becomes its one line and exit code (the traceback too with FACE_DEBUG=1)."""
    try:
        yield
    except (Exception, KeyboardInterrupt) as e:  # not SystemExit: an exit code is already decided
        if os.environ.get("FACE_DEBUG", "") not in ("", "0", "false"):
            raise
        fail(*stop_line(e))


# The cyclic garbage collector's thresholds for a command-line run (Python's defaults: 700, 10, 10).
GC_THRESHOLDS = (50_000, 20, 20)


def run_cli(entry: Callable[[], int | None]) -> NoReturn:
    """Run a command-line entry point as a whole process: SIGTERM stops it as Ctrl-C does (exit 130, its MLflow run
    marked KILLED), fewer garbage collections, then exit with its code as Python would, minus the interpreter's
    teardown. For ``__main__`` blocks only, never library code or tests.

    * ``GC_THRESHOLDS``: with Python's defaults the cyclic collector runs after every 700 net allocations,
      thousands of times while pandas, scipy, matplotlib and openai are imported and while the scoring stage
      builds its per-request objects; a 10-conversation live job (``scripts/bench_live.py --e2e``) took
      ≈ 6.2 s with them and ≈ 5.3 s with these, for ≈ 6 MB more peak memory (273 → 279 MB).
    * The exit: freeing every imported module takes another ≈ 0.5 s. Python's own exit order is kept -- wait
      for the non-daemon threads (and let ``concurrent.futures`` stop its workers), run the ``atexit`` handlers
      (logging and MLflow flush there), flush the standard streams -- then ``os._exit`` skips the teardown.
      An exception other than SystemExit propagates as usual (traceback, normal exit)."""
    import atexit
    import gc
    import signal
    import threading

    signal.signal(signal.SIGTERM, signal.default_int_handler)
    gc.set_threshold(*GC_THRESHOLDS)

    code: object
    try:
        code = entry()
    except SystemExit as e:
        code = e.code
    if code is not None and not isinstance(code, int):  # sys.exit("message"): Python prints it, exits 1
        print(code, file=sys.stderr)
        code = 1
    threading._shutdown()  # type: ignore[attr-defined]  # CPython's own "wait for threads" step at exit
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe: nothing more can be said
            stream.flush()
    os._exit(code if isinstance(code, int) else 0)
