"""What an experiment's ``run(cfg)`` returns: one typed result, the same fields for every experiment and the parts
an experiment has (its method's output, the correlations, the comparison with the published numbers, its own
tables and files). The runner (``face.runner``) hands it to the entry point; ``face.Result`` is built from it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

    from face.aspects import Aspect
    from face.data.schema import Conversation
    from face.methods import MethodOutput



@dataclass
class ExperimentResult:
    """An experiment's outcome. ``dry_run``: the estimate only (nothing sent, no predictions); ``stopped``: stopped on
    purpose before its end (``optimizer.stop_after_round``: a checkpoint, no results)."""

    task: str  # the experiment (cfg.task_name)
    out_dir: Path  # its tables and figures
    run_dir: Path  # its run files (paths.output_dir)
    conversations: list[Conversation] = field(default_factory=list, repr=False)  # the ones evaluated (the selection)
    aspects: list[Aspect] = field(default_factory=list, repr=False)  # the ones evaluated
    methods: dict[str, Any] = field(default_factory=dict, repr=False)  # the methods that ran (built once), by name
    dry_run: bool = False
    stopped: bool = False
    output: MethodOutput | None = None  # the method's output, where one method ran (predictions, label, scores)
    results: pd.DataFrame | None = None  # correlations with the human labels (face.metaeval's table)
    comparison: pd.DataFrame | None = None  # ours beside the published values
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)  # the experiment's own tables, by name
    files: dict[str, Path] = field(default_factory=dict)  # files it names: run_file, report, instructions, checkpoint
    labels: dict[str, str] = field(default_factory=dict)  # what produced each method's numbers, by method
    estimates: list[pd.DataFrame] = field(default_factory=list)  # each LLM job's cost estimate, made before sending
    usage: list[dict[str, Any]] = field(default_factory=list)  # each LLM job's usage totals (llm_usage.json's)
    extra: dict[str, Any] = field(default_factory=dict)  # anything else of the experiment's (diagnostics, timings)

    @property
    def estimate(self) -> pd.DataFrame | None:
        """The cost estimate of the run's (last) LLM job; None for a run without one."""
        return self.estimates[-1] if self.estimates else None

    def usage_totals(self) -> dict[str, float] | None:
        """The usage totals of the run's LLM jobs: one job's as they are; several jobs' counts, tokens and cost added up
        (latencies and concurrency are per job: in each ``llm_usage*.json``); None for a run without one."""
        if len(self.usage) <= 1:
            return dict(self.usage[0]) if self.usage else None
        keys = dict.fromkeys(k for u in self.usage for k, v in u.items()
                             if isinstance(v, (int, float)) and not isinstance(v, bool)
                             and not k.startswith(("latency", "concurrency")))
        return {k: sum(u.get(k, 0) or 0 for u in self.usage) for k in keys}


__all__ = ["ExperimentResult"]
