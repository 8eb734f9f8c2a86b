"""What an entry point asks the runner for (``RunRequest``) and what it gets back (``RunResult``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd
    from omegaconf import DictConfig

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
    """What the runner did: the configuration it composed, the directories it claimed, and the experiment's result
    (``experiment``: the run's, or the estimate's when nothing was sent)."""

    cfg: DictConfig
    experiment: ExperimentResult | None
    sent: bool  # False: the estimate only (estimate_only, or the confirmation said no)
    locations: dict[str, Path] = field(default_factory=dict)  # every output directory claimed, by its setting
    state: str = "new"  # the run directory's: "new", "resume" (the same run again) or "overwrite"

    @property
    def estimate(self) -> pd.DataFrame | None:
        """The cost estimate printed before anything was sent (None: the run has no LLM job)."""
        return self.experiment.estimate if self.experiment is not None else None

    def __repr__(self) -> str:
        where = ", ".join(f"{k}={v}" for k, v in self.locations.items())
        return f"RunResult({self.cfg.get('task_name')}, sent={self.sent}, state={self.state}, {where})"


__all__ = ["RunRequest", "RunResult"]
