"""What an experiment's ``run(cfg)`` returns, and the one writer that reports it.

An experiment computes; it returns one typed result with what it computed — its method's output, the correlations,
its tables with their captions, the figures to draw, its metrics — and ``write`` turns that into the run file, the
Markdown / CSV / LaTeX tables, the figures, the console's tables and the MLflow logs (``Context.result`` calls it).
The runner (``face.runner``) hands the result to the entry point; ``face.Result`` is built from it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    import pandas as pd

    from face.aspects import Aspect
    from face.data.schema import Conversation
    from face.methods import MethodOutput
    from face.tracking import Tracker


@dataclass
class Table:
    """One table of the experiment's report: ``<name>.md`` (caption and table, ``digits`` decimals), ``.csv`` and
    ``.tex`` (``face.report.tables.write_table``); without a caption, ``<name>.csv`` alone with every digit
    (``float_format``: pandas' own when None). ``in_run_dir``: beside the run files, not among the results."""

    frame: pd.DataFrame
    caption: str | None = None
    digits: int = 3
    float_format: str | None = None
    in_run_dir: bool = False


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
    outputs: dict[str, MethodOutput] = field(default_factory=dict)  # several methods' outputs, by name
    results: pd.DataFrame | None = None  # correlations with the human labels (face.metaeval's table)
    comparison: pd.DataFrame | None = None  # ours beside the published values
    correlations: dict[str, pd.DataFrame] = field(default_factory=dict)  # logged as MLflow metrics, by name prefix
    tables: dict[str, Table] = field(default_factory=dict)  # the report's tables, by file name
    figures: dict[str, Callable[[Path], Path]] = field(default_factory=dict, repr=False)  # path in out_dir -> draw
    texts: dict[str, str] = field(default_factory=dict, repr=False)  # other files of out_dir, by name: their text
    shown: list[Any] = field(default_factory=list, repr=False)  # printed: a line, or (title, frame[, digits])
    metrics: dict[str, float] = field(default_factory=dict)
    description: str | None = None  # the MLflow run's description (default: the headline correlations)
    files: dict[str, Path] = field(default_factory=dict)  # files it names: run_file, report, instructions, checkpoint
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


def write(result: ExperimentResult, tracker: Tracker, subset: str, banner: bool = True) -> ExperimentResult:
    """The one reporting stage: each method's output logged (its metrics and artifacts; its run file unless the run
    was dry), the report's files written (``write_files``), the correlations (``<prefix> -> table``: the Spearman
    values and the ``summary.*`` means; the table of prefix "" describes the run unless ``description`` does) and the
    metrics logged. ``banner``: say that a dry run sent nothing."""
    from face.runfile import write_run_file
    from face.tracking import correlation_metrics, description, summary_metrics

    runs = {"": result.output} if result.output is not None else {}
    for name, out in {**runs, **result.outputs}.items():
        tracker.log_metrics({f"{name}.{k}" if name else k: v for k, v in out.metrics.items()})
        tracker.log_artifacts(out.artifacts, f"run/{name}" if name else "run")
        if not out.dry_run:
            path = write_run_file(out.predictions, result.run_dir / f"run_file{'_' + name if name else ''}.json")
            tracker.log_artifacts([path], "run")
            result.files[path.stem] = path
    if result.dry_run and banner:
        labels = " | ".join(out.label for out in {**runs, **result.outputs}.values())
        print(f"Dry run: nothing was sent. {labels}".strip(), flush=True)
    tracker.log_artifacts(write_files(result), "results")
    for prefix, corr in result.correlations.items():
        tracker.log_metrics({**correlation_metrics(corr, prefix), **summary_metrics(corr, prefix)})
    if result.description is None and "" in result.correlations:
        result.description = description(result.correlations[""], result.output.label if result.output else "", subset)
    if result.description is not None:
        tracker.set_tags({"mlflow.note.content": result.description})  # the run page's description (Markdown)
    tracker.log_metrics(result.metrics)
    return result


def write_files(result: ExperimentResult) -> list[Path]:
    """The tables, texts and figures written into ``out_dir`` (a table ``in_run_dir`` beside the run files), each file
    but a table's named in ``result.files`` by its stem; then the shown tables and lines printed. Returns the paths."""
    from face.files import atomic_path, atomic_write_text
    from face.report.tables import print_table, write_table

    paths: list[Path] = []
    for name, t in result.tables.items():
        where = result.run_dir if t.in_run_dir else result.out_dir
        if t.caption is not None:
            paths += write_table(t.frame, where, name, t.caption, t.digits)
            continue
        with atomic_path(where / f"{name}.csv") as tmp:
            t.frame.to_csv(tmp, index=False, float_format=t.float_format)
        paths.append(where / f"{name}.csv")
    named = [atomic_write_text(result.out_dir / name, text) for name, text in result.texts.items()]
    named += [draw(result.out_dir / name) for name, draw in result.figures.items()]
    result.files.update({p.stem: p for p in named})
    for shown in result.shown:
        if isinstance(shown, tuple):
            print_table(*shown)
        else:
            print(shown, flush=True)
    return paths + named
