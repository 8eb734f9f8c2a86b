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
    try:
        importlib.import_module(cfg.runner).run(cfg)
    except (DataError, ConfigError) as e:  # bad input or setting: nothing was sent
        if _debug():
            raise
        fail(EXIT_CONFIG, f"error: {e}")
    except BudgetExceeded as e:
        if _debug():
            raise
        fail(EXIT_BUDGET, f"stopped: {e}")
    except LLMCallError as e:
        if _debug():
            raise
        fail(EXIT_LLM, f"stopped: an LLM request failed after its retries: {e}. {resume}")
    except KeyboardInterrupt:
        if _debug():
            raise
        fail(EXIT_INTERRUPTED, f"interrupted: the run was stopped (MLflow run marked KILLED). {resume}")
    except Exception as e:
        if _debug():
            raise
        fail(EXIT_BUG, f"error: unexpected {type(e).__name__}: {e} (FACE_DEBUG=1 shows the traceback). {resume}")
