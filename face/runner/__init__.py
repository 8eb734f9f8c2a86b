"""The one way a run goes: ``scripts/run.py`` (Hydra composes the configuration: ``@hydra.main``), ``face evaluate``
and ``face.evaluate`` / ``face.estimate`` (``compose.composed``: Hydra's compose API) each hand the composed
configuration to ``run(cfg, request) -> RunResult``, which checks every setting and the credentials, claims the
output directories (whatever override names them), runs the experiment and returns its typed result
(``face.experiments.result.ExperimentResult``).

    compose.py   the configuration of a run that is no Hydra job (a misspelled config name lists the valid ones)
    run.py       RunRequest -> run() -> RunResult: check -> claim the output directories (face.files: checked, locked,
                 marked; OUTPUTS: what a run writes into its directory) -> [estimate -> confirm] -> run -> finish;
                 check(): the checks only
    checks.py    scripts/run.py's Hydra callback: a run, or a sweep, checked before Hydra writes anything
    exits.py     every stop as one line and an exit code (0 done, 2 bad setting or input, 3 budget, 4 LLM failure,
                 130 interrupted, 1 unexpected); run_cli for the command lines
"""

from __future__ import annotations

from face.files import OUTPUTS
from face.runner.exits import EXIT_BUDGET, EXIT_CONFIG, fail, guarded, run_cli, stop_line
from face.runner.run import RunRequest, RunResult, check, run

__all__ = ["EXIT_BUDGET", "EXIT_CONFIG", "OUTPUTS", "RunRequest", "RunResult", "check", "fail", "guarded", "run",
           "run_cli", "stop_line"]
