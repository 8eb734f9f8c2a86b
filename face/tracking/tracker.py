"""``Tracker``: one MLflow run per Hydra job, so experiments never touch MLflow directly and tracking can be
switched off (``tracking=none``) without changing experiment code.

A run's MLflow metrics are what compares runs (``face.tracking.names``); every other number it logs is in its
``numbers.json`` artifact. A job of a multirun is a child of its sweep's parent run (``face.tracking.sweeps``).
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import logging
import math
import subprocess
import warnings
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

from omegaconf import DictConfig, OmegaConf

from face.secrets import redact
from face.tracking import prompts, sweeps
from face.tracking.names import (
    HEADLINE_PREFIX,
    HEADLINES,
    NUMBERS_ARTIFACT,
    PRIMARY_METRIC_TAG,
    SHORT_NAME_TAG,
    headline,
    is_comparison,
    judge_tag,
    run_params,
    shown,
)
from face.tracking.store import mark_stale_runs, process_tags, store_lock, use_experiment

log = logging.getLogger(__name__)


def git_commit(root: str | Path) -> str:
    """The commit checked out at ``root`` (its full sha, ``-dirty`` when a tracked file differs from it), or
    "unknown"."""
    try:
        out = subprocess.run(["git", "describe", "--always", "--abbrev=40", "--exclude=*", "--dirty"], cwd=root,
                             capture_output=True, text=True, timeout=5)  # (--exclude=*: the sha, never a tag name)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip() if out.returncode == 0 else "unknown"


def rerun_name(client, experiment_id: str, name: str) -> str:
    """``name``, or ``name #k`` when the experiment holds k - 1 runs of that name already (plain reruns; runs a rerun
    replaced count too: a number is never given twice)."""
    from mlflow.entities import ViewType

    if "'" in name or "%" in name:  # not expressible in a filter string: leave it
        return name
    runs = client.search_runs([experiment_id], filter_string=f"attributes.run_name LIKE '{name}%'", max_results=5000,
                              run_view_type=ViewType.ALL)
    names = {r.info.run_name for r in runs}
    if name not in names:
        return name
    return next(f"{name} #{k}" for k in itertools.count(2) if f"{name} #{k}" not in names)


OUTPUT_DIR_TAG = "face.output_dir"  # the run's own directory: a rerun into it that finishes replaces the earlier runs
# the trackers whose job ended well inside ``finishing()``: their MLflow runs end with the block
_FINISHING: ContextVar[list | None] = ContextVar("face_finishing_runs", default=None)


@contextlib.contextmanager
def finishing() -> Iterator[None]:
    """The MLflow runs of the jobs that end well inside the block stay RUNNING until it ends (the entry point's last
    files written, e.g. ``face evaluate``'s report): FINISHED then, KILLED or FAILED if the block stops first."""
    held: list[Tracker] = []
    token = _FINISHING.set(held)
    stop: BaseException | None = None
    try:
        yield
    except BaseException as e:
        stop = e
        raise
    finally:
        _FINISHING.reset(token)
        for tracker in held:
            tracker.end(stop)


def log_last_files(paths: Iterable[str | Path], subdir: str | None = None) -> None:
    """Files the entry point writes once its experiment is done (``face evaluate``'s report and its tables), logged
    to the MLflow runs ``finishing()`` still holds open."""
    for tracker in _FINISHING.get() or []:
        tracker.log_artifacts(paths, subdir)


class Tracker:
    """Logs to MLflow when enabled, does nothing otherwise."""

    def __init__(self, cfg: DictConfig, run_name: str | None = None, uses_llm: bool = True):
        t = cfg.tracking
        self.enabled = bool(t.enabled)
        self.cfg = cfg
        name = t.get("run_name") or run_name
        self.run_name = redact(name) if name else None  # a run name may quote settings
        self.uses_llm = uses_llm
        self.run_id: str | None = None
        self.experiment_id: str | None = None
        self.job_label = ""  # a sweep job's swept values (``alpha=1 beam=2``), else ""
        self.sweep_parent_id: str | None = None
        self.output_dir: str | None = None  # the run's own directory (OUTPUT_DIR_TAG), outside a sweep
        self._numbers: dict[str, float] = {}
        self._compared: dict[str, float] = {}  # logged as MLflow metrics when the run ends
        if self.enabled:
            import mlflow

            self.mlflow = mlflow
            self.experiment_id = use_experiment(t)

    def __enter__(self) -> Tracker:
        if not self.enabled:
            return self
        client = self.mlflow.MlflowClient()
        mark_stale_runs(client)
        exp_id = str(self.experiment_id)
        sweep = sweeps.sweep_tags()
        name = self.run_name
        if sweep:  # a sweep job: its swept values first in its name, unless tracking.run_name is set
            overrides = list(sweeps.hydra_job().overrides.task)
            self.sweep_parent_id, swept = sweeps.sweep_parent(exp_id, sweep["sweep_dir"], self.cfg.task_name, overrides)
            self.job_label = redact(sweeps.job_label(overrides, swept))
            if not self.cfg.tracking.get("run_name"):
                name = redact(sweeps.job_name(self.cfg.task_name, overrides, swept, sweep["sweep_job"]))
            run = self.mlflow.start_run(run_name=name, parent_run_id=self.sweep_parent_id)
            tags = {**sweep, sweeps.SWEEP_ROLE: "job", sweeps.LABEL_TAG: self.job_label}
        else:
            with store_lock(str(self.cfg.tracking.tracking_uri)):  # two reruns starting at once: #2 and #3
                if name and not self.cfg.tracking.get("run_name"):
                    name = rerun_name(client, exp_id, name)
                run = self.mlflow.start_run(run_name=name)
            out = OmegaConf.select(self.cfg, "paths.output_dir", default=None, throw_on_resolution_failure=False)
            self.output_dir = redact(str(Path(out).resolve())) if out else None
            tags = {OUTPUT_DIR_TAG: self.output_dir} if self.output_dir else {}
        self.run_name, self.run_id, self.experiment_id = name, run.info.run_id, run.info.experiment_id
        params = run_params(self.cfg, self.uses_llm)
        # process tags first (before the params): a run left RUNNING is found stale
        self.set_tags({**process_tags(), **judge_tag(params), "git_commit": git_commit(self.cfg.paths.root_dir),
                       "task_name": self.cfg.task_name, **tags})
        self.mlflow.log_params(params)
        self.mlflow.log_text(redact(OmegaConf.to_yaml(self.cfg, resolve=True)), "config.yaml")
        if sweep:
            job = {"mlflow.parentRunId": str(self.sweep_parent_id),
                   **{k: redact(sweep[k]) for k in ("sweep_job", "sweep_overrides")}}
            sweeps.replace_earlier_attempts(client, exp_id, self.run_id, job, f"sweep job {sweep['sweep_job']}")
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        held = _FINISHING.get()
        if self.enabled and exc is None and held is not None:
            held.append(self)  # ended when the entry point's last files are written
        elif self.enabled:
            self.end(exc)

    def end(self, exc: BaseException | None) -> None:
        """End the MLflow run: FINISHED (earlier runs into the same directory replaced), or KILLED (an interrupt) /
        FAILED, said in a note of ``exc`` (the stop's line on the command line says it: ``face.runner.exits``)."""
        self._flush_metrics()
        status = "FINISHED" if exc is None else "KILLED" if isinstance(exc, KeyboardInterrupt) else "FAILED"
        if exc is not None:
            self.set_tags({"stop_reason": f"{type(exc).__name__}: {str(exc)[:500]}"})
        self.mlflow.end_run(status=status)
        if exc is not None:
            exc.add_note(f"MLflow run {self.run_id} marked {status}")
        elif self.output_dir:
            sweeps.replace_earlier_attempts(self.mlflow.MlflowClient(), str(self.experiment_id), str(self.run_id),
                                            {OUTPUT_DIR_TAG: self.output_dir}, f"the rerun into {self.output_dir}")

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        if self.enabled:
            self.mlflow.set_tags({k: redact(v) for k, v in tags.items()})  # incl. the description, stop reasons

    def log_metrics(self, metrics: Mapping[str, float]) -> None:
        """The headline and the correlations as MLflow metrics (written when the run ends, headline first: MLflow's
        compare view opens on the metric a run logged first); every other number into ``numbers.json`` at once."""
        if not self.enabled:
            return
        clean = {k: float(v) for k, v in metrics.items() if v is not None and not math.isnan(float(v))}
        self._compared.update({k: v for k, v in clean.items() if is_comparison(k)})
        numbers = {k: v for k, v in clean.items() if not is_comparison(k)}
        if numbers:
            self._numbers.update(numbers)
            self.mlflow.log_dict(dict(sorted(self._numbers.items())), NUMBERS_ARTIFACT)

    def _flush_metrics(self) -> None:
        """The MLflow metrics, headline first; the experiment's primary metric set once: the first headline an
        experiment's run logs (a later headline of ``HEADLINES`` replaces a name outside it)."""
        if not self._compared:
            return
        head = headline(self._compared)
        order = sorted(self._compared, key=lambda k: (k != head, not k.startswith(HEADLINE_PREFIX), k))
        self.mlflow.log_metrics({k: shown(self._compared[k]) for k in order})
        if head is None:
            return
        client = self.mlflow.MlflowClient()
        exp = client.get_experiment(str(self.experiment_id))
        current = exp.tags.get(PRIMARY_METRIC_TAG)
        if current is None or (current not in HEADLINES and head in HEADLINES):
            client.set_experiment_tag(exp.experiment_id, PRIMARY_METRIC_TAG, head)

    def log_artifacts(self, paths: Iterable[str | Path], subdir: str | None = None) -> None:
        """Copy files (or directories) into the run's artifacts; a file over ``tracking.max_artifact_mb`` stays
        where it is and the run gets a tag naming it (a paper-size particle_scores.jsonl is ~0.3 GB a run)."""
        if not self.enabled:
            return
        limit = self.cfg.tracking.get("max_artifact_mb")
        for p in map(Path, paths):
            if p.is_dir():
                self.mlflow.log_artifacts(str(p), artifact_path=subdir)
            elif p.exists():
                size = p.stat().st_size
                if limit is not None and size > limit * 1e6:
                    self.mlflow.set_tag(f"not_logged.{p.name}", redact(f"{size / 1e6:.0f} MB, in {p.parent}"))
                else:
                    self.mlflow.log_artifact(str(p), artifact_path=subdir)

    def log_data(self, name: str, rows: Sequence[Mapping[str, Any]], checksums: Mapping[str, str],
                 source: str) -> None:
        """The data the run read: the data files' sha256 as one artifact, and one tag, the sha256 of that listing;
        and MLflow's dataset input (the runs table's *Dataset* column, shown by default): one row per conversation
        used (id, system, split, evaluated turns), its name, a digest of the files' sha256 (the same files give the
        same digest) and where it comes from. A run on its own input file (``dataset.path``: ``face evaluate``'s
        conversations) lists it too and tags it with its sha256 (``input_sha256``) and its stem
        (``SHORT_NAME_TAG``: what ``face compare`` calls the run); that sha256 is the digest, the file's name the
        source."""
        if not self.enabled:
            return
        import pandas as pd

        digest = hashlib.sha256(json.dumps(dict(sorted(checksums.items()))).encode()).hexdigest()[:12]
        path = OmegaConf.select(self.cfg, "dataset.path", default=None, throw_on_resolution_failure=False)
        if isinstance(path, str) and (own_file := Path(path)).is_file():
            own, source = hashlib.sha256(own_file.read_bytes()).hexdigest(), own_file.name
            checksums, digest = {**checksums, source: own}, own[:12]
            self.set_tags({"input_sha256": own, SHORT_NAME_TAG: own_file.stem})
        if checksums:
            listing = json.dumps(dict(sorted(checksums.items())), indent=1)
            self.mlflow.log_text(listing, "data_sha256.json")
            self.set_tags({"data_sha256": hashlib.sha256(listing.encode()).hexdigest()})
        try:
            with warnings.catch_warnings():  # MLflow's hints on integer columns and local sources: not ours to act on
                warnings.simplefilter("ignore")
                ds = self.mlflow.data.from_pandas(  # type: ignore[attr-defined]
                    pd.DataFrame(list(rows)), source=source, name=name, digest=digest)
                self.mlflow.log_input(ds, context="evaluation")
        except Exception as e:  # an MLflow without the dataset API: the data_sha256 tag still names the data
            log.warning("could not log the dataset to MLflow: %s", e)

    def register_instructions(self, aspect: str, instructions: Sequence[Any], source: str, wording: str = "") -> None:
        """Register the instruction set an aspect was sent with and link it to the run (``prompts.register_set``)."""
        if not (self.enabled and self.cfg.tracking.get("register_prompts", True)):
            return
        uri, version = prompts.register_instructions(aspect, instructions, source, wording,
                                                     str(self.cfg.tracking.tracking_uri))
        self.set_tags({f"prompt.{aspect}": uri})
        try:  # MLflow's own prompt-run link: the run page lists the prompt versions it sent, and only those
            self.mlflow.MlflowClient().link_prompt_version_to_run(self.run_id, version)
        except Exception as e:  # an older store without prompt links: the run's prompt.* tag still names it
            log.warning("could not link prompt %s v%s to the run: %s", version.name, version.version, e)
