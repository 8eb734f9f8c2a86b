"""Entry point for every experiment: ``python scripts/run.py experiment=NAME [overrides]`` (Hydra).

A run is one request to the runner (``face.runner.run``): it composes the configuration once, checks every setting
and the credentials, claims the output directories (whatever override names them) and runs the experiment as a Hydra
job (its ``.hydra/`` record, ``run.log``). Hydra's own options (``--help``, ``--cfg``, ``--info``) and multirun
sweeps (``-m``, launchers, the sweep callback) go through Hydra, each job of a sweep through the same runner.

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

from face.runner import EXIT_CONFIG, RunRequest, fail, guarded, run, run_cli, run_guarded  # noqa: E402

_started = False  # Hydra's task function ran (Hydra composed a job's config)


@hydra.main(version_base="1.3", config_path=str(ROOT / "conf"), config_name="config")
def main(cfg: DictConfig) -> None:
    """A job of a multirun sweep (Hydra composed its config, made its directory): through the runner."""
    global _started
    _started = True
    quiet_loggers()
    run_guarded(cfg)


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
    from face.runner.sweep import sweep_problem
    from face.secrets import secret_in_overrides

    argv = sys.argv[1:]
    bad = secret_in_overrides(argv)  # with --cfg too: it would print the key
    if bad:
        fail(EXIT_CONFIG, f"error: {bad}")
    if not any(a.startswith("-") for a in argv):  # one run: the runner composes, checks, claims and runs it
        quiet_loggers()
        with guarded():
            run(RunRequest(tuple([*argv, *unique_run_dirs(argv)]), hydra_job=True))
        return
    multirun = bool({"-m", "--multirun"} & set(argv))
    if multirun and not any(a.startswith("-") and a not in ("-m", "--multirun") for a in argv):
        bad = sweep_problem([a for a in argv if a not in ("-m", "--multirun")])  # before Hydra writes anything
        if bad:
            fail(EXIT_CONFIG, f"error: {bad}")
    sys.argv = [sys.argv[0], *argv, *(unique_run_dirs(argv) if multirun else [])]
    try:
        with guarded():  # Ctrl-C while a launcher waits for its jobs: one line, exit 130
            main()  # Hydra's own: --help, --cfg, --info, a multirun sweep
    except SystemExit as e:
        if e.code == 1 and not _started and not launched_job_failed(e):  # Hydra could not compose the config
            sys.exit(EXIT_CONFIG)
        raise


def launched_job_failed(e: SystemExit) -> bool:
    """Hydra exits 1 after a launcher that runs each job in its own process (hydra/launcher=submitit_local,
    submitit_slurm) reported a job that failed there: that job ran (its error is in the output), so the sweep
    is not a bad override (exit 1, not 2). Hydra calls sys.exit while handling the launcher's exception."""
    cause = e.__context__
    return cause is not None and type(cause).__module__.split(".")[0] == "submitit"


if __name__ == "__main__":
    run_cli(cli)
