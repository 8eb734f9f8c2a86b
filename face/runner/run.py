"""``run(request) -> RunResult``: the one way a run goes, whichever entry point asked for it.

    compose (once) -> check every setting and the credentials -> fetch and check the input -> claim the output
    directories -> [estimate -> confirm] -> run the experiment (as a Hydra job for scripts/run.py) -> the entry
    point's last outputs -> summary (the MLflow run ends FINISHED only here)

Nothing is fetched before the settings are checked, nothing written or sent before the input is checked and the claim
passed; every stop is an exception (``face.runner.exits.guarded`` turns them into exit codes on the command line)."""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import os
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from face.errors import ConfigError
from face.runner.claim import Location, check_locations, claimed, locations
from face.runner.compose import compose, dry, hydra_session, job_dir, select, task_config
from face.runner.exits import CACHE_DIR
from face.runner.request import RunRequest, RunResult
from face.tracking.tracker import finishing

# how each state of the run's own directory is said on the console
_SAID = {"resume": "Resuming the run in {dir} (the same input and settings; finished LLM calls come from the cache).",
         "overwrite": "Overwriting another run's results in {dir} ({how})."}


def run(request: RunRequest) -> RunResult:
    """Compose, check, claim, run: see the module. ``ConfigError`` / ``DataError`` before anything is written or
    sent; ``BudgetExceeded``, ``LLMCallError``, ``LLMRequestRefused``, ``KeyboardInterrupt`` when the run stops."""
    from face.secrets import install_log_redaction

    install_log_redaction()  # console and run.log: every log record is redacted (face.secrets)
    if request.composed is not None:  # a job of a multirun sweep: Hydra composed it and made its directory
        return _run(request, request.composed, None)
    with hydra_session() as hydra:
        return _run(request, compose(hydra, request.overrides, request.hydra_job), hydra)


def _run(request: RunRequest, cfg: DictConfig, hydra: Any) -> RunResult:
    from hydra.core.hydra_config import HydraConfig

    from face.experiments.common import prepare
    from face.experiments.naming import run_owner

    previous = HydraConfig.instance().cfg
    try:
        own_dir = job_dir(cfg) if request.hydra_job else None
        task = task_config(cfg)
        CACHE_DIR.set(str(select(task, "paths.cache_dir") or ""))
        owner = run_owner(task)
        inputs = [Path(p) for p in [select(task, "dataset.path")] if isinstance(p, str) and os.path.isfile(p)]
        check_locations(_locations(task, own_dir, request), owner, inputs, request.overwrite, _how(request))
        plan = prepare(task, experiment_parts(task))
        if not request.estimate_only:  # an estimate sends nothing: it needs no key
            check_credentials(plan)
        plan.load()  # the input: data that is bad or cannot be fetched stops the run before anything of it exists
        locs = _locations(task, own_dir, request, plan.out_dir)
        with claimed(locs, owner, inputs, request.overwrite, _how(request)) as states:
            state = _say(locs, states, request)
            with _held(request) as summaries, finishing():  # its MLflow run ends FINISHED after the last outputs
                experiment, sent = _execute(request, cfg, plan, hydra)
                done = RunResult(task, experiment, sent, {loc.setting: loc.path for loc in locs}, state)
                if request.finish is not None and sent:  # the entry point's last outputs, then the summary block
                    request.finish(done, summaries[0] if summaries else None)
            for summary in summaries:
                print(summary.text(), flush=True)
            return done
    finally:
        if request.hydra_job:
            HydraConfig.instance().cfg = previous


def check(request: RunRequest):
    """The checks ``run`` makes before it claims anything (composed, every setting, the credentials unless
    ``estimate_only``): the run's plan (``face.experiments.common.Plan``: its parts built). Nothing is claimed, run or
    written: for a caller that builds now and runs later (the MLflow scorers)."""
    from face.experiments.common import prepare

    with hydra_session() as hydra:
        task = task_config(compose(hydra, request.overrides, job=False))
        plan = prepare(task, experiment_parts(task))
        if not request.estimate_only:
            check_credentials(plan)
        return plan


def experiment_parts(task: DictConfig):
    """The experiment's own needs and checks (``parts(cfg)`` of its module, where it has one)."""
    from face.experiments.common import Parts

    runner = select(task, "runner")
    if not isinstance(runner, str) or not runner:
        raise ConfigError(f"runner: the experiment's module is not set (got {runner!r}); choose an experiment=NAME")
    try:
        module = importlib.import_module(runner)
    except ImportError as e:
        raise ConfigError(f"runner: cannot import {runner!r}: {e}") from None
    parts = getattr(module, "parts", None)
    try:
        return parts(task) if callable(parts) else Parts()
    except (ValueError, TypeError, KeyError, AttributeError) as e:  # a setting the experiment reads is missing or odd
        if isinstance(e, ConfigError):
            raise
        raise ConfigError(f"{runner}: {str(e).strip() or type(e).__name__}") from None


def check_credentials(plan) -> None:
    """An LLM that needs a key (``llm.api_key_env`` names its variable) finds it in the environment, before anything
    is sent or written; a run that sends nothing (``llm.dry_run``, no LLM) and a keyless server need none."""
    llm = plan.llm
    if llm is None or not plan.uses_llm or llm.dry_run:
        return
    llm.api_key()  # ConfigError naming the variable when it is unset


def _locations(task: DictConfig, own_dir: Path | None, request: RunRequest,
               out_dir: Path | None = None) -> list[Location]:
    """Every output directory the configuration names, resolved (``out_dir``: where the experiment writes its tables,
    once it is known: the results directory of a default run)."""
    report = select(task, "report.out_dir")
    named = [("hydra.run.dir", own_dir), ("paths.output_dir", select(task, "paths.output_dir")),
             ("report.out_dir", report),
             ("report.out_dir" if report else "paths.results_dir", out_dir)]
    return locations([(k, v if v is None or isinstance(v, Path) else str(v)) for k, v in named],
                     Path(str(select(task, "paths.results_dir"))), request.out, request.out_name)


def _overwrite(request: RunRequest) -> str:
    """How the entry point asks to replace another run's results."""
    return "--overwrite" if request.out_name.startswith("--") else "overwrite=True"


def _how(request: RunRequest) -> str:
    if request.hydra_job:  # scripts/run.py has no overwrite
        return "remove it first (or rerun it with its own settings to resume it)"
    return f"pass {_overwrite(request)} to replace them"


def _say(locs: list[Location], states: list[str], request: RunRequest) -> str:
    """Say once that the run resumes (or replaces another's results); the run directory's state."""
    owned = [(loc, state) for loc, state in zip(locs, states) if loc.owned]
    said = next(((loc, state) for loc, state in owned if state in _SAID), None)
    if said is not None:
        print(_SAID[said[1]].format(dir=said[0].path, how=_overwrite(request)), flush=True)
    return owned[0][1] if owned else "new"


def _held(request: RunRequest):
    """The run's summary block kept for an entry point that finishes the run itself (printed after it)."""
    from face import console

    return console.held() if request.finish is not None else contextlib.nullcontext([])


def _execute(request: RunRequest, cfg: DictConfig, plan, hydra: Any) -> tuple[Any, bool]:
    """The estimate (and its confirmation), then the run: (the experiment's result, whether anything was sent)."""
    from face import console
    from face.experiments.common import check_settings
    from face.methods.job import estimate_console, estimated_cost

    shown: contextlib.AbstractContextManager = contextlib.nullcontext()
    if request.estimate_only or request.confirm is not None:
        task = dry(plan.cfg)
        dry_plan = dataclasses.replace(plan, cfg=task, llm=check_settings(task))
        with estimate_console("estimate"), console.silenced():
            estimate = _experiment(task, dry_plan, None)
        cost = estimated_cost(estimate.estimate) if estimate.estimate is not None else 0.0
        if request.confirm is None or not request.confirm(cost):
            return estimate, False
        shown = estimate_console("shown")  # the estimate above is this run's: printed once
    with shown:
        return _experiment(plan.cfg, plan, cfg if request.hydra_job else None, hydra), True


def _experiment(task: DictConfig, plan, job_cfg: DictConfig | None, hydra: Any = None):
    """The experiment's ``run`` on ``task`` (the checks done: ``plan``); as a Hydra job on ``job_cfg`` when given."""
    from face.experiments.common import planned

    module = importlib.import_module(task.runner)
    with planned(plan):
        if job_cfg is None:
            return module.run(task)
        return hydra_job(hydra, job_cfg, module.run)


def hydra_job(hydra, cfg: DictConfig, task_function):
    """``task_function`` as Hydra runs a job (``hydra.core.utils.run_job``, as ``@hydra.main`` does): its directory
    and ``.hydra/`` record, ``run.log``, callbacks, ``hydra.job.env_set``. The job's exception is re-raised."""
    from hydra._internal.callbacks import Callbacks
    from hydra.core.utils import JobStatus, run_job
    from hydra.types import HydraContext

    callbacks = Callbacks(cfg)
    callbacks.on_run_start(config=cfg, config_name="config")
    ret = run_job(hydra_context=HydraContext(config_loader=hydra.config_loader, callbacks=callbacks),
                  task_function=task_function, config=cfg, job_dir_key="hydra.run.dir", job_subdir_key=None,
                  configure_logging=True)
    callbacks.on_run_end(config=cfg, config_name="config", job_return=ret)
    if ret.status == JobStatus.FAILED:  # the job's own exception (JobReturn.return_value would print a line first)
        raise ret._return_value
    return ret._return_value


__all__ = ["check", "check_credentials", "experiment_parts", "hydra_job", "run"]
