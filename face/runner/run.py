"""``run(cfg, request) -> RunResult``: the one way a run goes, whichever entry point composed its configuration.

    check every setting, the credentials and the input -> claim the output directories -> [estimate -> confirm]
    -> run the experiment -> the entry point's last outputs -> summary (the MLflow run ends FINISHED only here)

Nothing is fetched before the settings are checked, nothing written or sent before the input is checked and the claim
passed; every stop is an exception (``face.runner.exits.guarded`` turns them into exit codes on the command line)."""

from __future__ import annotations

import dataclasses
import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig, OmegaConf

from face.errors import ConfigError
from face.experiments.naming import run_owner
from face.files import Location, check_locations, claimed
from face.runner.compose import select
from face.runner.exits import RESUME
from face.secrets import install_log_redaction, secret_setting
from face.tracking.tracker import finishing

if TYPE_CHECKING:
    import pandas as pd

    from face.console import RunSummary
    from face.experiments.result import ExperimentResult

@dataclass(frozen=True)
class RunRequest:
    """How ``scripts/run.py``, ``face evaluate`` and ``face.evaluate`` / ``face.estimate`` ask for a run of a composed
    configuration (``run(cfg, request)``)."""

    job_dir: Path | None = None  # the Hydra job's directory (scripts/run.py), claimed as ``hydra.run.dir``
    out: Path | None = None  # the entry point's output directory (out= / --out): named ``out_name`` in a refusal
    out_name: str = "out"
    overwrite: bool = False  # replace another run's results in the run's output directories
    estimate_only: bool = False  # send nothing: the cost estimate only (llm.dry_run, no tracking)
    # asked with the estimated USD once the estimate is printed, before anything is sent: False stops the run there
    confirm: Callable[[float], bool] | None = None
    # the entry point's own last outputs (face evaluate: conversations.json, the report), written while the output
    # directories are still the run's, once it sent its requests; it may add lines to the summary block, printed
    # after it
    finish: Callable[[RunResult, RunSummary | None], None] | None = None


@dataclass
class RunResult:
    """What the runner did: the configuration it composed, the experiment's result (``experiment``: the run's, or the
    estimate's when nothing was sent) and whether it sent anything."""

    cfg: DictConfig
    experiment: ExperimentResult | None
    sent: bool  # False: the estimate only (estimate_only, or the confirmation said no)

    @property
    def estimate(self) -> pd.DataFrame | None:
        """The cost estimate printed before anything was sent (None: the run has no LLM job)."""
        return self.experiment.estimate if self.experiment is not None else None


# how each state of the run's own directory is said on the console
_SAID = {"resume": "Resuming the run in {dir} (the same input and settings; finished LLM calls come from the cache).",
         "overwrite": "Overwriting another run's results in {dir} ({how})."}


_PLAIN = RunRequest()  # a run of the configuration as it is (the tests', the MLflow scorers')


def run(cfg: DictConfig, request: RunRequest = _PLAIN) -> RunResult:
    """Check, claim, run: see the module. ``cfg``: the task's configuration, as Hydra composed it (``scripts/run.py``)
    or ``face.runner.compose.composed`` did (``face.api``). ``ConfigError`` / ``DataError`` before anything is
    written or sent; ``BudgetExceeded``, ``LLMCallError``, ``LLMRequestRefused``, ``KeyboardInterrupt`` when the run
    stops (noted with where its finished LLM calls are cached)."""
    install_log_redaction()  # console and run.log: every log record is redacted (face.secrets)
    try:
        plan = check(cfg, request)
        locs = _locations(cfg, request, plan.out_dir)
        with claimed(locs, *_claim(cfg, request)) as states:
            _say(locs, states, request)
            plan.summary.held = request.finish is not None  # printed after the entry point's last outputs
            with finishing():  # its MLflow run ends FINISHED after the last outputs
                experiment, sent = _execute(request, plan)
                done = RunResult(cfg, experiment, sent)
                if request.finish is not None and sent:  # the entry point's last outputs, then the summary block
                    request.finish(done, plan.summary)
            if plan.summary.held and plan.summary.wall_s is not None:
                print(plan.summary.text(), flush=True)
            return done
    except BaseException as e:
        cache = select(cfg, "paths.cache_dir")
        if cache:  # the resume hint of the stop line (face.runner.exits)
            e.add_note(RESUME.format(cache=cache))
        raise


def check(cfg: DictConfig, request: RunRequest = _PLAIN, load: bool = True):
    """The checks ``run`` makes before it claims anything: no credential in a setting, the output directories
    claimable, every setting, the credentials (unless ``estimate_only``) and, with ``load``, the input (fetched and
    loaded). The run's plan (``face.experiments.common.Plan``: its parts built); nothing claimed or written.
    ``scripts/run.py`` checks before Hydra writes its job's directory; ``face.api.check_settings`` without ``load``."""
    from face.experiments.common import prepare

    refuse_credentials(cfg)
    if load:
        check_locations(_locations(cfg, request), *_claim(cfg, request))
    plan = prepare(cfg, experiment_parts(cfg))
    if plan.llm is not None and plan.uses_llm and not plan.llm.dry_run and not request.estimate_only:
        plan.llm.api_key()  # ConfigError naming the variable when it is unset (a keyless server needs none)
    if load:
        plan.load()  # the input: data that is bad or cannot be fetched stops the run before anything of it exists
    return plan


def refuse_credentials(cfg: DictConfig) -> None:
    """The one credential check of a run (and of each job of a sweep: ``face.runner.checks``): ConfigError naming a
    setting that holds a credential, from an override, a config file (conf/llm/NAME.yaml) or a nested value
    (llm.headers); never the value."""
    bad = secret_setting(cfg)
    if bad:
        raise ConfigError(bad)


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


def _claim(cfg: DictConfig, request: RunRequest) -> tuple[dict, list[Path], bool, str]:
    """Whose the run's directories are, the input they must not overwrite, whether another run's results there are
    replaced, and how the entry point asks for that."""
    inputs = [Path(p) for p in [select(cfg, "dataset.path")] if isinstance(p, str) and os.path.isfile(p)]
    how = (f"pass {_overwrite(request)} to replace them" if request.job_dir is None
           else "remove it first (or rerun it with its own settings to resume it)")  # scripts/run.py: no overwrite
    return run_owner(cfg), inputs, request.overwrite, how


def _locations(cfg: DictConfig, request: RunRequest, out_dir: Path | None = None) -> list[Location]:
    """The run's distinct output directories, whatever override spelled them (``key=``, ``+key=``, an interpolation),
    in order: the Hydra job's, ``paths.output_dir``, ``report.out_dir`` and ``out_dir`` (where the experiment writes
    its tables, once it is known: the results directory of a default run). A directory inside an earlier one is that
    one's (the run's ``results/`` inside its run directory); one equal to the entry point's ``out`` is named as the
    entry point names it; one inside the results directory is the committed results' (locked, not marked)."""
    report = select(cfg, "report.out_dir")
    named = [("hydra.run.dir", request.job_dir), ("paths.output_dir", select(cfg, "paths.output_dir")),
             ("report.out_dir", report), ("report.out_dir" if report else "paths.results_dir", out_dir)]
    results = Path(os.path.realpath(str(select(cfg, "paths.results_dir"))))
    mine = Path(os.path.realpath(os.path.abspath(request.out))) if request.out is not None else None
    found: list[tuple[Location, Path]] = []
    for setting, path in named:
        if path is None:
            continue
        if not str(path).strip():
            raise ConfigError(f"{setting}: the path is empty")
        real = Path(os.path.realpath(os.path.abspath(str(path))))
        if not any(real == r or r in real.parents for _, r in found):
            found.append((Location(request.out_name if real == mine else setting, Path(os.path.abspath(str(path))),
                                   owned=not (real == results or results in real.parents)), real))
    return [loc for loc, _ in found]


def _overwrite(request: RunRequest) -> str:
    """How the entry point asks to replace another run's results."""
    return "--overwrite" if request.out_name.startswith("--") else "overwrite=True"


def _say(locs: list[Location], states: list[str], request: RunRequest) -> None:
    """Say once that the run resumes (or replaces another's results)."""
    said = next(((loc, state) for loc, state in zip(locs, states) if loc.owned and state in _SAID), None)
    if said is not None:
        print(_SAID[said[1]].format(dir=said[0].path, how=_overwrite(request)), flush=True)


def _execute(request: RunRequest, plan) -> tuple[Any, bool]:
    """The estimate (and its confirmation), then the run: (the experiment's result, whether anything was sent)."""
    from face.console import RunSummary
    from face.llm import LLMConfig
    from face.methods.job import estimated_cost

    if request.estimate_only or request.confirm is not None:
        # the estimate: the same run, sending nothing and tracking nothing; its summary never printed, its dry run
        # without a banner
        task = OmegaConf.merge(plan.cfg, {"llm": {"dry_run": True}, "tracking": {"enabled": False}})
        assert isinstance(task, DictConfig)
        dry = dataclasses.replace(plan, cfg=task, llm=LLMConfig.from_dict(task.llm),
                                  summary=RunSummary(held=True, estimate="dry"))
        estimate = importlib.import_module(task.runner).run(dry)
        cost = estimated_cost(estimate.estimate) if estimate.estimate is not None else 0.0
        if request.confirm is None or not request.confirm(cost):
            return estimate, False
        plan.summary.estimate = "shown"  # the estimate above is this run's: printed once
    return importlib.import_module(plan.cfg.runner).run(plan), True
