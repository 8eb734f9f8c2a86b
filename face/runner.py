"""Run an experiment and turn every stop into one line and an exit code (``scripts/run.py``, ``face``).

Exit codes: 0 done; 2 a bad setting or input file (one line naming it; nothing sent, no results written);
3 stopped by an LLM budget cap; 4 an LLM request failed after its retries; 130 interrupted (Ctrl-C or
SIGTERM); 1 an unexpected error. ``FACE_DEBUG=1`` shows the traceback as well.
"""

from __future__ import annotations

import importlib
import os
import sys

from omegaconf import DictConfig

from face.data.errors import DataError

EXIT_CONFIG, EXIT_BUDGET, EXIT_LLM, EXIT_INTERRUPTED, EXIT_BUG = 2, 3, 4, 130, 1


def _debug() -> bool:
    return os.environ.get("FACE_DEBUG", "") not in ("", "0", "false")


def fail(code: int, line: str) -> None:
    print(line, file=sys.stderr, flush=True)
    sys.exit(code)


def run_guarded(cfg: DictConfig) -> None:
    """Run the experiment; turn every stop into one line and an exit code (traceback with FACE_DEBUG=1)."""
    from face.experiments.common import ConfigError
    from face.llm import BudgetExceeded, LLMCallError

    resume = f"Finished LLM calls are cached in {cfg.paths.get('cache_dir')}: rerun the same command to resume."
    stops = (  # first match wins: (what stopped the run, exit code, the line printed)
        ((DataError, ConfigError), EXIT_CONFIG, "error: {e}"),  # bad input or setting: nothing was sent
        ((BudgetExceeded,), EXIT_BUDGET, "stopped: {e}"),
        ((LLMCallError,), EXIT_LLM, "stopped: an LLM request failed after its retries: {e}. " + resume),
        ((KeyboardInterrupt,), EXIT_INTERRUPTED,
         "interrupted: the run was stopped (MLflow run marked KILLED). " + resume),
        ((Exception,), EXIT_BUG, "error: unexpected {kind}: {e} (FACE_DEBUG=1 shows the traceback). " + resume),
    )
    try:
        importlib.import_module(cfg.runner).run(cfg)
    except (Exception, KeyboardInterrupt) as e:
        if _debug():
            raise
        code, line = next((code, line) for kinds, code, line in stops if isinstance(e, kinds))
        fail(code, line.replace("{kind}", type(e).__name__).replace("{e}", str(e)))
