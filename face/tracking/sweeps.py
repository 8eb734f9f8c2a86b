"""Sweeps in MLflow: a Hydra multirun is one parent run (named by its swept keys first,
``alpha×beta×beam · optimize_instructions sweep``, the command line's settings as its params), each job a child
run named by its swept values first (``alpha=1 beam=2 · optimize_instructions``; ``2·1·2 · optimize_instructions``
when the keys would not fit: the values in the parent's key order).

A rerun of a sweep into the same sweep directory (after kill -9, or to redo it) reopens the parent and replaces
each job's earlier child run, so every job is counted once and the parent ends FINISHED when all its jobs have.
"""

from __future__ import annotations

import logging
from typing import Sequence

from face.secrets import redact
from face.tracking.store import process_tags, run_is_gone, store_lock

log = logging.getLogger(__name__)

SWEEP_ROLE = "sweep_role"  # tag: "parent" (one per Hydra multirun) or "job"
SWEPT_TAG = "sweep_swept"  # tag of the parent: the swept keys, comma-separated
LABEL_TAG = "sweep_label"  # tag of a job: its swept values, keys in full (``alpha=1 beam=2``)
REPLACED_TAG = "face.replaced_by"  # tag of a run replaced by a rerun (a sweep job's, or one into the same directory)
SEP = " · "  # between what differs and the experiment, in run names
# characters of a child run's name MLflow's runs table shows at its default column width (MLflow 3.17.2, headless
# Chromium: a child row's name has 98 px of the 190 px Run Name column, 11 digits then "…"; a top-level row 146 px, 17)
NAME_WIDTH = 11
VALUE_SEP = "·"  # between a job's values when its name holds the values only
# override keys that say where things go, not what is computed: never part of a job's name or the parent's params
_NOT_NAMED = ("paths.", "tracking.", "hydra.", "report.", "experiment")


def hydra_job():
    """Hydra's config of the running job, or None outside a Hydra app."""
    from hydra.core.hydra_config import HydraConfig

    return HydraConfig.get() if HydraConfig.initialized() else None


def is_multirun() -> bool:
    """True inside a job of a Hydra multirun (``-m``): its outputs stay in its own job directory."""
    return bool(sweep_tags())


def sweep_tags() -> dict[str, str]:
    """The running job's place in its multirun (sweep directory, job number, overrides), or {} outside one."""
    hc = hydra_job()
    if hc is None or str(hc.mode) != "RunMode.MULTIRUN":
        return {}
    return {"sweep_dir": str(hc.sweep.dir), "sweep_job": str(hc.job.num),
            "sweep_overrides": ",".join(hc.overrides.task)}


def swept_keys(overrides: Sequence[str]) -> list[str]:
    """The keys a multirun sweeps (``key=a,b``, ``range(...)``, ...), in command-line order."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        parsed = OverridesParser.create().parse_overrides(list(overrides))
    except Exception:
        return []
    return [o.get_key_element().lstrip("+~") for o in parsed if o.is_sweep_override()]


def named_settings(overrides: Sequence[str]) -> list[tuple[str, str]]:
    """(key, value) of every override that says what is computed (not where things go), in command-line order."""
    pairs = [(key.lstrip("+~"), value) for key, _, value in (o.partition("=") for o in overrides)]
    return [(key, value) for key, value in pairs if key and not key.startswith(_NOT_NAMED)]


def tails(keys: Sequence[str]) -> list[str]:
    """The last part of each key where that is unambiguous (``optimizer.alpha`` -> ``alpha``)."""
    last = [k.rsplit(".", 1)[-1] for k in keys]
    return [t if last.count(t) == 1 else k for t, k in zip(last, keys)]


def abbreviations(names: Sequence[str]) -> list[str]:
    """Each name's shortest prefix that no other name starts with the same way (``alpha``, ``beam`` -> ``a``,
    ``b``; ``seed``, ``split`` -> ``se``, ``sp``)."""
    out = []
    for i, name in enumerate(names):
        others = [o for j, o in enumerate(names) if j != i]
        n = next((n for n in range(1, len(name)) if all(o[:n] != name[:n] for o in others)), len(name))
        out.append(name[:n])
    return out


def job_label(overrides: Sequence[str], swept: Sequence[str], short: bool = False) -> str:
    """What tells a sweep job from its siblings: its swept settings with their values in this job
    (``alpha=1 beam=2``; ``short``: the keys abbreviated, ``a=1 b=2``); every setting of its command line when
    the swept keys are not known."""
    pairs = _swept_pairs(overrides, swept)
    names = tails([k for k, _ in pairs])
    if short:
        names = abbreviations(names)
    return " ".join(f"{n}={v}" for n, (_, v) in zip(names, pairs))


def _swept_pairs(overrides: Sequence[str], swept: Sequence[str]) -> list[tuple[str, str]]:
    pairs = named_settings(overrides)
    if not swept:
        return pairs
    return sorted(((k, v) for k, v in pairs if k in swept), key=lambda kv: list(swept).index(kv[0]))


def job_name(task: str, overrides: Sequence[str], swept: Sequence[str], job: str = "") -> str:
    """A sweep job's run name, what differs first, in the first form whose label fits the runs table's default
    column width (NAME_WIDTH): ``alpha=1 · optimize_instructions``; the keys abbreviated, ``a=1 b=2 · …``; the
    values only, in the order of the parent's name (``alpha×beta×beam``), ``2·1·2 · …``; else the job's number
    first, ``#5 2·1·2·1·2·1·2 · …`` (the child's tag ``sweep_label`` and the parent's params spell the keys out)."""
    label = job_label(overrides, swept)
    if swept and len(label) > NAME_WIDTH:
        label = job_label(overrides, swept, short=True)
    if swept and len(label) > NAME_WIDTH:
        label = VALUE_SEP.join(v.rstrip("/").rsplit("/", 1)[-1] if v.startswith("/") else v  # a path: its name
                               for _, v in _swept_pairs(overrides, swept))
    if swept and len(label) > NAME_WIDTH and job:
        label = f"#{job} {label}"
    return (f"{label}{SEP}{task}" if label else task)[:250]


def parent_name(task: str, keys: Sequence[str]) -> str:
    """A sweep parent's run name: its swept keys first, in the order its children's values follow
    (``alpha×beam · optimize_instructions sweep``); the experiment is the page it is on."""
    return f"{'×'.join(tails(keys)) or 'one job'}{SEP}{task} sweep"[:250]


def find_sweep_parent(client, experiment_id: str, sweep_dir: str):
    """The parent run of the multirun writing to ``sweep_dir`` (tag ``sweep_dir``), or None."""
    runs = client.search_runs([experiment_id], filter_string=f"tags.{SWEEP_ROLE} = 'parent'", max_results=1000)
    mine = [r for r in runs if r.data.tags.get("sweep_dir") == sweep_dir]
    return min(mine, key=lambda r: r.info.start_time) if mine else None


def sweep_parent(experiment_id: str, sweep_dir: str, task: str, overrides: Sequence[str],
                 swept: Sequence[str] | None = None, description: str | None = None) -> tuple[str, list[str]]:
    """Find or create (under the store lock: jobs of a launcher run in parallel processes) the parent run of a
    sweep: (its run id, its swept keys). The Hydra callback (``swept`` given) creates it before the first job, or
    reopens the parent of an earlier run of the same sweep directory; a job that finds none (a sweep over
    experiments, or no callback) creates one named after its own settings, ended at once (no callback ends it)."""
    import mlflow
    from mlflow.entities import Param
    from mlflow.tracking import MlflowClient

    client = MlflowClient()
    with store_lock(mlflow.get_tracking_uri()):
        found = find_sweep_parent(client, experiment_id, sweep_dir)
        if found is not None:
            live = found.info.status == "RUNNING" and not run_is_gone(found.data.tags)
            if swept is not None and not live:  # a rerun of the sweep: its parent runs again, owned by this process
                client.update_run(found.info.run_id, status="RUNNING")
                for k, v in {**process_tags(), "stop_reason": ""}.items():
                    client.set_tag(found.info.run_id, k, v)
            return found.info.run_id, [k for k in found.data.tags.get(SWEPT_TAG, "").split(",") if k]
        keys = list(swept) if swept is not None else [k for k, _ in named_settings(overrides)]
        tags = {"sweep_dir": sweep_dir, SWEEP_ROLE: "parent", SWEPT_TAG: ",".join(keys),
                "sweep_overrides": " ".join(overrides), "task_name": task, **process_tags()}
        if description:
            tags["mlflow.note.content"] = description
        run = client.create_run(experiment_id, run_name=redact(parent_name(task, keys)),
                                tags={k: redact(v) for k, v in tags.items()})
        # its params: each setting of the sweep's command line, a swept one with all its values (``1,2``)
        params = [Param(k, v) for k, v in {k: redact(v)[:6000] for k, v in named_settings(overrides)}.items()]
        for i in range(0, len(params), 100):  # MLflow's batch limit
            client.log_batch(run.info.run_id, params=params[i:i + 100])
        if swept is None:
            client.set_terminated(run.info.run_id, status="FINISHED")
        return run.info.run_id, keys


def replace_earlier_attempts(client, experiment_id: str, run_id: str, same: dict[str, str], what: str) -> None:
    """Delete (MLflow's soft delete, tagged ``face.replaced_by``) the earlier runs of the experiment whose tags are
    ``same`` (a sweep job: its parent, number and overrides; a run: its output directory), unless one still runs: the
    rerun ``run_id`` counts instead."""
    quoted = [f"tags.`{k}` = '{v}'" for k, v in same.items() if "'" not in v and "\\" not in v]
    earlier = client.search_runs([experiment_id], max_results=1000, filter_string=" and ".join(quoted))
    replaced = [r.info.run_id for r in earlier if r.info.run_id != run_id
                and all(r.data.tags.get(k) == v for k, v in same.items())
                and (r.info.status != "RUNNING" or run_is_gone(r.data.tags))]
    for old in replaced:
        client.set_tag(old, REPLACED_TAG, run_id)
        client.delete_run(old)
    if replaced:
        log.warning("%s: replaced its earlier MLflow run(s) %s", what, ", ".join(replaced))
