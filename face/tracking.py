"""MLflow tracking: one run per Hydra job; params, metrics, artifacts, tags and prompt versions.

``Tracker`` is a thin wrapper so experiments never touch MLflow directly and tracking can be
switched off (``tracking=none``) without changing experiment code.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import os
import socket
import subprocess
import warnings
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from omegaconf import DictConfig, OmegaConf

from face.errors import require_writable_dir
from face.secrets import redact

log = logging.getLogger(__name__)


def flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def git_commit(root: str | Path) -> str:
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=5)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=5)
        if sha.returncode != 0:
            return "unknown"
        return sha.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


@contextlib.contextmanager
def _store_lock(uri: str):
    """An exclusive lock beside a local SQLite store while it is set up (MLflow's schema migration is not safe
    against two processes creating the same new database)."""
    if not uri.startswith("sqlite:///"):
        yield
        return
    import fcntl

    lock = Path(uri[len("sqlite:///"):] + ".lock")
    with open(lock, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _proc_start(pid: int) -> str | None:
    """The start time of a process (Linux /proc), to tell a live process from a reused pid."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _alive(pid: int, start: str | None) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    now = _proc_start(pid)
    return start is None or now is None or now == start


def process_tags() -> dict[str, str]:
    """Who runs this MLflow run: host, pid and the process's start time (for the stale-run check)."""
    pid = os.getpid()
    return {"face.host": socket.gethostname(), "face.pid": str(pid), "face.pid_start": _proc_start(pid) or ""}


def mark_stale_runs(mlflow) -> list[str]:
    """Runs of this store left RUNNING by a process of this host that is gone (kill -9, power loss): KILLED."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient()
    host = socket.gethostname()
    killed = []
    try:
        exps = [e.experiment_id for e in client.search_experiments()]
        runs = client.search_runs(exps, filter_string="attributes.status = 'RUNNING'", max_results=1000) if exps else []
    except Exception as e:  # the store is checked before; a search failure must not stop the run
        log.warning("could not look for stale MLflow runs: %s", e)
        return killed
    for r in runs:
        tags = r.data.tags
        pid = tags.get("face.pid")
        if not pid or tags.get("face.host") != host or not pid.isdigit():
            continue
        if not _alive(int(pid), tags.get("face.pid_start") or None):
            client.set_tag(r.info.run_id, "stop_reason", f"process {pid} is gone (killed); marked by a later run")
            client.set_terminated(r.info.run_id, status="KILLED")
            killed.append(r.info.run_id)
    if killed:
        log.warning("marked %d stale RUNNING MLflow run(s) as KILLED: %s", len(killed), ", ".join(killed))
    return killed


def check_tracking_store(cfg: DictConfig) -> None:
    """ValueError (one line naming the setting) if the MLflow store cannot be used. Creates nothing."""
    import sqlite3

    t = cfg.tracking
    uri = str(t.get("tracking_uri") or "")
    if uri.startswith("sqlite:///"):
        db = Path(uri[len("sqlite:///"):])
        if db.exists():
            if not db.is_file():
                raise ValueError(f"tracking.tracking_uri: {db} is not a file")
            if not os.access(db, os.R_OK | os.W_OK):
                raise ValueError(f"tracking.tracking_uri: {db} is not readable and writable (permission denied)")
            try:
                with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30) as conn:
                    conn.execute("SELECT name FROM sqlite_master LIMIT 1").fetchall()
                conn.close()
            except sqlite3.DatabaseError as e:
                raise ValueError(f"tracking.tracking_uri: {db} is not an SQLite database ({e})") from None
        else:
            require_writable_dir(db.parent, "tracking.tracking_uri")
    if t.get("artifact_location"):
        require_writable_dir(Path(t.artifact_location), "tracking.artifact_location")


# settings that say where things go, not what is computed: never MLflow params
_NOT_PARAMS = ("paths.", "tracking.", "hydra.", "report.out_dir")
# settings that only matter when an LLM is called
_LLM_PARAMS = ("llm.", "run_size.")


def run_params(cfg: DictConfig, uses_llm: bool = True) -> dict[str, str]:
    """The flattened resolved config as MLflow params, without paths (machine-specific) and, for runs that call
    no LLM, without LLM settings; a file path keeps only its name."""
    resolved = OmegaConf.to_container(cfg, resolve=True)
    out = {}
    for k, v in flatten(resolved).items():
        if k.startswith(_NOT_PARAMS) or (not uses_llm and k.startswith(_LLM_PARAMS)):
            continue
        if isinstance(v, str) and os.path.isabs(v):
            v = Path(v).name
        out[k] = redact("null" if v is None else str(v))[:6000]  # a key never becomes a param (face.secrets)
    return out


def summary_metrics(results, prefix: str = "") -> dict[str, float]:
    """A few numbers for the runs table: mean Spearman over aspects at turn and dialogue level (pooled split)
    and at system level, as ``summary.[prefix]{level}_spearman_mean`` (a prefix names one of several methods)."""
    out = {}
    r = results[(results["coefficient"] == "spearman") & (results["split"] == "all")]
    for level in ("turn", "dialogue", "system"):
        v = r[r["level"] == level]["value"].dropna()
        if len(v):
            out[f"summary.{prefix}{level}_spearman_mean"] = float(v.mean())
    return out


# the first of these an experiment logs is its headline metric (else its first ``summary.*`` metric by name): the
# experiment's primary metric in MLflow's charts and compare view, the sweep report's first column
HEADLINES = ("summary.heldout_final_spearman", "summary.ucb_heldout_mean", "summary.turn_spearman_mean",
             "summary.dialogue_spearman_mean", "summary.system_spearman_mean")
PRIMARY_METRIC_TAG = "mlflow.experiment.primaryMetric.name"  # an experiment tag MLflow's UI reads


def headline(metrics: Iterable[str]) -> str | None:
    """The headline metric among metric names (see HEADLINES)."""
    metrics = set(metrics)
    for m in HEADLINES:
        if m in metrics:
            return m
    rest = sorted(m for m in metrics if m.startswith("summary."))
    return rest[0] if rest else None


def description(results, label: str, settings: str) -> str:
    """Markdown for the run page: what produced the numbers and the headline correlations."""
    lines = [f"**{label}**", "", settings, ""]
    r = results[(results["coefficient"] == "spearman") & (results["split"] == "all")]
    if len(r):
        lines += ["| level | aspect | Spearman (pooled) | 95% CI |", "|---|---|---|---|"]
        for x in r.itertuples(index=False):
            ci = "" if math.isnan(x.ci_low) else f"[{x.ci_low:.3f}, {x.ci_high:.3f}]"
            lines.append(f"| {x.level} | {x.aspect} | {x.value:.3f} | {ci} |")
    return "\n".join(lines)


def use_experiment(t: DictConfig) -> str:
    """Point MLflow at ``tracking.tracking_uri`` and its experiment ``tracking.experiment_name`` (created when
    missing); returns the experiment id."""
    import mlflow

    mlflow.set_tracking_uri(t.tracking_uri)
    with _store_lock(str(t.tracking_uri)):  # two jobs starting on a new store: one creates the tables
        if mlflow.get_experiment_by_name(t.experiment_name) is None:
            location = Path(t.artifact_location).resolve().as_uri() if t.get("artifact_location") else None
            mlflow.create_experiment(t.experiment_name, artifact_location=location)
        return mlflow.set_experiment(t.experiment_name).experiment_id


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
        if self.enabled:
            import mlflow

            self.mlflow = mlflow
            use_experiment(t)

    def __enter__(self) -> Tracker:
        if self.enabled:
            mark_stale_runs(self.mlflow)
            sweep, parent, name = self._sweep_tags(), None, self.run_name
            if sweep:  # a job of a multirun: a child of the sweep's parent run, named by the sweep's settings
                overrides = list(hydra_job().overrides.task)
                exp = self.mlflow.get_experiment_by_name(self.cfg.tracking.experiment_name)
                parent = sweep_parent(exp.experiment_id, sweep["sweep_dir"], self.cfg.task_name, overrides)
                if not self.cfg.tracking.get("run_name"):
                    name = redact(job_name(self.cfg.task_name, overrides, parent.swept))
                self.run_name = name
            run = self.mlflow.start_run(run_name=name, parent_run_id=parent.run_id if parent else None)
            self.run_id, self.experiment_id = run.info.run_id, run.info.experiment_id
            self.set_tags(process_tags())
            self.mlflow.log_params(run_params(self.cfg, self.uses_llm))
            self.set_tags({"git_commit": git_commit(self.cfg.paths.root_dir), "task_name": self.cfg.task_name})
            if sweep:
                self.set_tags({**sweep, SWEEP_ROLE: "job"})
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self.enabled:
            status = "FINISHED"
            if exc_type is not None:
                status = "KILLED" if issubclass(exc_type, KeyboardInterrupt) else "FAILED"
                self.set_tags({"stop_reason": f"{exc_type.__name__}: {str(exc)[:500]}"})
            self.mlflow.end_run(status=status)

    def _sweep_tags(self) -> dict[str, str]:
        hc = hydra_job()
        if hc is None or str(hc.mode) != "RunMode.MULTIRUN":
            return {}
        return {"sweep_dir": str(hc.sweep.dir), "sweep_job": str(hc.job.num),
                "sweep_overrides": ",".join(hc.overrides.task)}

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        if self.enabled:
            self.mlflow.set_tags({k: redact(v) for k, v in tags.items()})  # incl. the description, stop reasons

    def log_metrics(self, metrics: Mapping[str, float]) -> None:
        if self.enabled:
            clean = {k: float(v) for k, v in metrics.items() if v is not None and not math.isnan(float(v))}
            self.mlflow.log_metrics(clean)
            self._primary_metric(clean)

    def _primary_metric(self, metrics: Mapping[str, float]) -> None:
        """The experiment's headline metric as its primary metric (MLflow's charts and compare view show it first
        instead of the first metric by name), set once: the first headline an experiment's run logs."""
        head = headline(metrics)
        if head is None or getattr(self, "_primary_set", False):
            return
        from mlflow.tracking import MlflowClient

        client = MlflowClient()
        exp = client.get_experiment(self.mlflow.active_run().info.experiment_id)
        current = exp.tags.get(PRIMARY_METRIC_TAG)
        if current is None or (current not in HEADLINES and head in HEADLINES):
            client.set_experiment_tag(exp.experiment_id, PRIMARY_METRIC_TAG, head)
        self._primary_set = True

    def log_artifacts(self, paths: Iterable[str | Path], subdir: str | None = None) -> None:
        """Copy files (or directories) into the run's artifacts; a file over ``tracking.max_artifact_mb`` stays
        where it is and the run gets a tag naming it (a paper-size particle_scores.jsonl is ~0.3 GB a run)."""
        if self.enabled:
            limit = self.cfg.tracking.get("max_artifact_mb")
            for p in paths:
                p = Path(p)
                if p.is_dir():
                    self.mlflow.log_artifacts(str(p), artifact_path=subdir)
                elif p.exists():
                    size = p.stat().st_size
                    if limit is not None and size > limit * 1e6:
                        self.mlflow.set_tag(f"not_logged.{p.name}", redact(f"{size / 1e6:.0f} MB, in {p.parent}"))
                        continue
                    self.mlflow.log_artifact(str(p), artifact_path=subdir)

    def log_dict(self, obj: Any, name: str) -> None:
        if self.enabled:
            self.mlflow.log_dict(obj, name)

    def log_config(self) -> None:
        if self.enabled:
            self.mlflow.log_text(redact(OmegaConf.to_yaml(self.cfg, resolve=True)), "config.yaml")

    def log_checksums(self, checksums: Mapping[str, str]) -> None:
        """The data files' sha256 as one artifact, and one tag: the sha256 of that listing."""
        if self.enabled and checksums:
            import hashlib
            import json

            listing = json.dumps(dict(sorted(checksums.items())), indent=1)
            self.mlflow.log_text(listing, "data_sha256.json")
            self.set_tags({"data_sha256": hashlib.sha256(listing.encode()).hexdigest()})

    def log_dataset(self, name: str, rows: Sequence[Mapping[str, Any]], files: Mapping[str, str],
                    source: str) -> None:
        """The data the run read, as MLflow's dataset input (the runs table's *Dataset* column, shown by default):
        one row per conversation used (id, system, split, evaluated turns), its name, a digest of the data files'
        sha256 (the same files give the same digest) and where it comes from."""
        if not self.enabled:
            return
        import hashlib
        import json

        import pandas as pd

        digest = hashlib.sha256(json.dumps(dict(sorted(files.items()))).encode()).hexdigest()[:12]
        try:
            with warnings.catch_warnings():  # MLflow's hints on integer columns and local sources: not ours to act on
                warnings.simplefilter("ignore")
                ds = self.mlflow.data.from_pandas(pd.DataFrame(list(rows)), source=source, name=name, digest=digest)
                self.mlflow.log_input(ds, context="evaluation")
        except Exception as e:  # an MLflow without the dataset API: the data_sha256 tag still names the data
            log.warning("could not log the dataset to MLflow: %s", e)

    def describe(self, text: str) -> None:
        """The run page's description (Markdown)."""
        self.set_tags({"mlflow.note.content": text})

    def register_instructions(self, aspect: str, instructions: Sequence[Any], source: str,
                              wording: str = "") -> str | None:
        """Register the instruction set an aspect was sent with, link that one version to the run, tag the run.

        The prompt is ``face-<aspect>-<source>``, ``-<wording>`` appended when the texts were reworded (the
        no-particles ablation: ``whole-turn`` / ``whole-dialogue``), so a rewording never becomes a version of
        the original set; a new version only for a text no earlier version of that name holds."""
        if not (self.enabled and self.cfg.tracking.get("register_prompts", True)):
            return None
        name = "-".join(x.replace("_", "-") for x in ("face", aspect, source, wording) if x)
        text = "\n\n".join(f"### {i.instruction_id}\n{i.text}" for i in instructions)
        what = f"{len(instructions)} {source} instructions for {aspect}" + (f", reworded: {wording}" if wording
                                                                             else "")
        version = self.register_prompt(name, text, what, {
            "aspect": aspect, "source": source, "wording": wording or "as written",
            "instruction_ids": ",".join(i.instruction_id for i in instructions)})
        uri = f"prompts:/{name}/{version.version}"
        self.set_tags({f"prompt.{aspect}": uri})
        self.link_prompt(version)
        return uri

    def register_prompt(self, name: str, text: str, message: str, tags: Mapping[str, str]):
        """The version of prompt ``name`` that holds ``text``: an earlier one with the same text (every version is
        compared, by sha256), else a new version (tagged ``sha256``). Looked up through the client, never
        ``mlflow.genai.load_prompt``: inside a run that links whatever it loads to the run."""
        from mlflow import genai
        from mlflow.tracking import MlflowClient

        digest = text_sha256(text)
        with _store_lock(str(self.cfg.tracking.tracking_uri)):  # two jobs registering one text: one version
            same = _version_with_text(name, digest)
            if same is not None:
                return same
            tags = {**{k: redact(str(v)) for k, v in tags.items()}, "sha256": digest}
            # MLflow copies a new version's tags to the prompt's own: only those that hold for every version go
            # with it, the rest are set on the version alone
            version = genai.register_prompt(name=name, template=text, commit_message=redact(message),
                                            tags={k: v for k, v in tags.items() if k in _PROMPT_TAGS})
            for key, value in tags.items():
                if key not in _PROMPT_TAGS:
                    genai.set_prompt_version_tag(name, version.version, key, value)
        return MlflowClient().get_prompt_version(name, version.version)

    def prompt_versions(self, name: str) -> list:
        return prompt_versions(name)

    def link_prompt(self, version) -> None:
        """MLflow's own prompt-run link: the run page lists the prompt versions it sent, and only those."""
        try:
            from mlflow.tracking import MlflowClient

            MlflowClient().link_prompt_version_to_run(self.run_id, version)
        except Exception as e:  # an older store without prompt links: the run's prompt.* tag still names it
            log.warning("could not link prompt %s v%s to the run: %s", version.name, version.version, e)


def text_sha256(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode("utf-8")).hexdigest()


_PAGE = 200  # prompt versions per registry query
_PROMPT_TAGS = ("aspect", "source", "wording")  # tags that hold for every version of a prompt


def prompt_versions(name: str) -> list:
    """Every version of prompt ``name``, newest first (none if there is no such prompt)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient()
    if client.get_prompt(name) is None:
        return []
    out, token = [], None
    while True:
        page = client.search_prompt_versions(name, max_results=_PAGE, page_token=token)
        out += list(page)
        token = page.token
        if not token:
            return out


def _version_with_text(name: str, digest: str):
    """The oldest version of ``name`` whose text has sha256 ``digest`` (a store written before versions were
    compared may hold the same text twice), or None."""
    return next((v for v in reversed(prompt_versions(name)) if isinstance(v.template, str)
                 and text_sha256(v.template) == digest), None)


# ---------------------------------------------------------------- sweeps: one parent run, each job its child
SWEEP_ROLE = "sweep_role"  # tag: "parent" (one per Hydra multirun) or "job"
SWEPT_TAG = "sweep_swept"  # tag of the parent: the swept keys, comma-separated
# override keys that say where things go, not what is computed: never part of a job's name
_NOT_NAMED = ("paths.", "tracking.", "hydra.", "report.", "experiment")


def hydra_job():
    """Hydra's config of the running job, or None outside a Hydra app."""
    try:
        from hydra.core.hydra_config import HydraConfig

        return HydraConfig.get()
    except (ImportError, ValueError):
        return None


def is_multirun() -> bool:
    """True inside a job of a Hydra multirun (``-m``): its outputs stay in its own job directory."""
    hc = hydra_job()
    return hc is not None and str(hc.mode) == "RunMode.MULTIRUN"


def swept_keys(overrides: Sequence[str]) -> list[str]:
    """The keys a multirun sweeps (``key=a,b``, ``range(...)``, ...), in command-line order."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        parsed = OverridesParser.create().parse_overrides(list(overrides))
    except Exception:
        return []
    return [o.get_key_element().lstrip("+~") for o in parsed if o.is_sweep_override()]


def _tails(keys: Sequence[str]) -> list[str]:
    """The last part of each key where that is unambiguous (``optimizer.alpha`` -> ``alpha``)."""
    tails = [k.rsplit(".", 1)[-1] for k in keys]
    return [t if tails.count(t) == 1 else k for t, k in zip(tails, keys)]


def job_name(task: str, overrides: Sequence[str], swept: Sequence[str]) -> str:
    """A sweep job's run name: the experiment, then every setting the command line gave, swept ones first, with
    its value in this job (defaults included): ``optimize_instructions alpha=1 beam=2 beta=1 ...``."""
    pairs = []
    for o in overrides:
        key, _, value = o.partition("=")
        key = key.lstrip("+~")
        if key and not key.startswith(_NOT_NAMED):
            pairs.append((key, value))
    order = {k: i for i, k in enumerate(swept)}
    pairs.sort(key=lambda kv: order.get(kv[0], len(order)))
    names = _tails([k for k, _ in pairs])
    return " ".join([task, *(f"{n}={v}" for n, (_, v) in zip(names, pairs))])[:250]


def sweep_name(task: str, swept: Sequence[str]) -> str:
    """The parent run's name: the experiment and the swept keys."""
    return f"{task} sweep: {' x '.join(_tails(swept)) or 'one job'}"[:250]


@dataclasses.dataclass
class SweepParent:
    run_id: str
    swept: list[str]


def find_sweep_parent(client, experiment_id: str, sweep_dir: str):
    """The parent run of the multirun writing to ``sweep_dir`` (tag ``sweep_dir``), or None."""
    runs = client.search_runs([experiment_id], filter_string=f"tags.{SWEEP_ROLE} = 'parent'", max_results=1000)
    mine = [r for r in runs if r.data.tags.get("sweep_dir") == sweep_dir]
    return min(mine, key=lambda r: r.info.start_time) if mine else None


def sweep_parent(experiment_id: str, sweep_dir: str, task: str, overrides: Sequence[str],
                 swept: Sequence[str] | None = None, description: str | None = None) -> SweepParent:
    """Find or create (under the store lock: jobs of a launcher run in parallel processes) the parent run of a
    sweep in the active experiment. The Hydra callback creates it before the first job, knowing which keys are
    swept; a job that finds none (a sweep over experiments, or no callback) creates one named after its own
    settings."""
    import mlflow
    from mlflow.tracking import MlflowClient

    client = MlflowClient()
    with _store_lock(mlflow.get_tracking_uri()):
        found = find_sweep_parent(client, experiment_id, sweep_dir)
        if found is not None:
            keys = [k for k in found.data.tags.get(SWEPT_TAG, "").split(",") if k]
            return SweepParent(found.info.run_id, keys)
        keys = list(swept) if swept is not None else [o.partition("=")[0].lstrip("+~") for o in overrides
                                                       if not o.lstrip("+~").startswith(_NOT_NAMED)]
        tags = {"sweep_dir": sweep_dir, SWEEP_ROLE: "parent", SWEPT_TAG: ",".join(keys),
                "sweep_overrides": " ".join(overrides), "task_name": task, **process_tags()}
        if description:
            tags["mlflow.note.content"] = description
        run = client.create_run(experiment_id, run_name=redact(sweep_name(task, keys)),
                                tags={k: redact(v) for k, v in tags.items()})
        if swept is None:  # made by a job: no callback ends it, and the job's process is not the sweep's
            client.set_terminated(run.info.run_id, status="FINISHED")
        return SweepParent(run.info.run_id, keys)


def metric_name(level: str, aspect: str, split: str, coefficient: str, suffix: str = "") -> str:
    return f"{level}.{aspect}.{split}.{coefficient}" + (f".{suffix}" if suffix else "")


def correlation_metrics(results, prefix: str = "") -> dict[str, float]:
    """MLflow metrics ``{level}.{aspect}.{split}.{coefficient}``, and ``.ci_low`` / ``.ci_high`` for Spearman
    (every interval is in the correlations table artifact; fewer single-point metrics keep the charts usable)."""
    out = {}
    for r in results.itertuples(index=False):
        base = prefix + metric_name(r.level, r.aspect, r.split, r.coefficient)
        out[base] = r.value
        if r.coefficient == "spearman":
            out[base + ".ci_low"] = r.ci_low
            out[base + ".ci_high"] = r.ci_high
    return out


os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
