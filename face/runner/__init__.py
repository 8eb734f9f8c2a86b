"""The one way a run goes: ``scripts/run.py``, ``face evaluate`` and ``face.evaluate`` / ``face.estimate`` each turn
their arguments into a ``RunRequest`` and call ``run(request) -> RunResult``, which composes the configuration once,
checks every setting and the credentials, claims the output directories (whatever override names them), runs the
experiment and returns its typed result (``face.experiments.result.ExperimentResult``).

    request.py   RunRequest, RunResult
    compose.py   the configuration, composed once (a misspelled config name lists the valid ones)
    claim.py     the output directories: checked, locked, marked (OUTPUTS: what a run writes into its directory)
    run.py       run(): compose -> check -> claim -> [estimate -> confirm] -> run -> finish; check(): the checks only
    exits.py     every stop as one line and an exit code (0 done, 2 bad setting or input, 3 budget, 4 LLM failure,
                 130 interrupted, 1 unexpected); run_cli for the command lines
    sweep.py     scripts/run.py -m: a credential in any config a sweep would compose, refused before it starts
"""

from __future__ import annotations

from omegaconf import DictConfig

from face.runner.claim import OUTPUTS
from face.runner.exits import (
    EXIT_BUDGET,
    EXIT_BUG,
    EXIT_CONFIG,
    EXIT_INTERRUPTED,
    EXIT_LLM,
    fail,
    guarded,
    run_cli,
    stop_line,
)
from face.runner.request import RunRequest, RunResult
from face.runner.run import check, run


def run_guarded(cfg: DictConfig) -> RunResult:
    """``run`` on a configuration Hydra composed (a job of a multirun sweep), every stop an exit code."""
    with guarded():
        return run(RunRequest(composed=cfg))


__all__ = ["EXIT_BUDGET", "EXIT_BUG", "EXIT_CONFIG", "EXIT_INTERRUPTED", "EXIT_LLM", "OUTPUTS", "RunRequest",
           "RunResult", "check", "fail", "guarded", "run", "run_cli", "run_guarded", "stop_line"]
