"""Entry point for every experiment: ``python scripts/run.py experiment=NAME [overrides]`` (Hydra).

Hydra composes the configuration (``@hydra.main``: a single run and each job of a multirun sweep alike, its
``.hydra/`` record and ``run.log``); its callback ``face.runner.checks.Checks`` checks the run (or the sweep) before
Hydra writes anything; each job goes to the runner (``face.runner.run``), which checks its settings, claims its
output directories and runs the experiment. Hydra's own options (``--help``, ``--cfg``, ``--info``), launchers and
the sweep callback work as in any Hydra application.

Exit codes: 0 done; 2 a bad setting or input file, or a missing API key (one line naming it; nothing sent, no
results written); 3 stopped by an LLM budget cap; 4 an LLM request failed after its retries; 130 interrupted (Ctrl-C
or SIGTERM); 1 an unexpected error. Every stop prints one line saying what happened and how to resume;
``FACE_DEBUG=1`` shows the traceback as well. A multirun sweep through a launcher that runs each job in its own
process (``hydra/launcher=submitit_local`` / ``submitit_slurm``) exits 1 when a job failed; that job's own line
is in the output and in ``<sweep dir>/.submitit/<job id>/``.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("FACE_PROJECT_ROOT", str(ROOT))
sys.path.insert(0, str(ROOT))

import hydra  # noqa: E402
from omegaconf import DictConfig  # noqa: E402

from face.runner import EXIT_CONFIG, RunRequest, fail, guarded, run, run_cli  # noqa: E402


@hydra.main(version_base="1.3", config_path=str(ROOT / "conf"), config_name="config")
def main(cfg: DictConfig) -> None:
    """A job: its configuration and directory are Hydra's; the runner checks, claims and runs it."""
    from hydra.core.hydra_config import HydraConfig

    quiet_loggers()
    with guarded():
        run(cfg, RunRequest(job_dir=Path(HydraConfig.get().runtime.output_dir)))


def quiet_loggers() -> None:
    for noisy in ("httpx", "httpx2", "httpcore", "openai", "alembic"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def unique_run_dirs(argv: list[str]) -> list[str]:
    """Each job its own output directory: the configured time stamp plus this process's id (two jobs started
    in the same second never share one). Explicit hydra.run.dir / hydra.sweep.dir overrides win."""
    extra = []
    keys = {a.partition("=")[0].lstrip("+~") for a in argv}
    suffix = f"{os.getpid()}"
    if "hydra.run.dir" not in keys:
        extra.append(f"hydra.run.dir=${{paths.root_dir}}/outputs/${{task_name}}/${{now:%Y-%m-%d_%H-%M-%S}}_{suffix}")
    if "hydra.sweep.dir" not in keys:
        extra.append(f"hydra.sweep.dir=${{paths.root_dir}}/multirun/${{task_name}}/${{now:%Y-%m-%d_%H-%M-%S}}_{suffix}")
    return extra


def cli() -> None:
    from face.secrets import secret_in_overrides

    argv = sys.argv[1:]
    bad = secret_in_overrides(argv)  # with --cfg too: it would print the key
    if bad:
        fail(EXIT_CONFIG, f"error: {bad}")
    quiet_loggers()
    os.environ["HYDRA_FULL_ERROR"] = "1"  # Hydra's errors (a bad override) reach guarded(): one line, exit 2
    multirun = [a for a in argv if a in ("-m", "--multirun")]  # first: Hydra's parser takes no option after overrides
    sys.argv = [sys.argv[0], *multirun, *(a for a in argv if a not in multirun), *unique_run_dirs(argv)]
    with guarded():  # Ctrl-C while a launcher waits for its jobs: one line, exit 130
        main()


if __name__ == "__main__":
    run_cli(cli)
