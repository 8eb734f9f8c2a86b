"""The MLflow store: checked before a run, pointed at, locked while set up, and cleared of runs whose process is gone.

Artifacts follow the store: an experiment created here keeps its artifacts at ``tracking.artifact_location`` when
that is set, else in ``mlruns/`` beside a ``sqlite:///`` store's database file — never in the directory the
command was started from (MLflow's own default for a SQLite store).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import sqlite3
from pathlib import Path
from typing import Iterator

from omegaconf import DictConfig

from face.errors import require_writable_dir
from face.files import process_alive, process_start

log = logging.getLogger(__name__)

SQLITE = "sqlite:///"


def sqlite_file(uri: str) -> Path | None:
    """The database file of a ``sqlite:///`` tracking URI, else None."""
    return Path(uri[len(SQLITE):]) if uri.startswith(SQLITE) else None


def artifact_root(t: DictConfig) -> Path | None:
    """Where a new experiment of the store keeps its artifacts: ``tracking.artifact_location``, else ``mlruns/``
    beside the SQLite file, else None (a server store decides)."""
    if t.get("artifact_location"):
        return Path(t.artifact_location)
    db = sqlite_file(str(t.get("tracking_uri") or ""))
    return db.parent / "mlruns" if db is not None else None


@contextlib.contextmanager
def store_lock(uri: str) -> Iterator[None]:
    """An exclusive lock beside a local SQLite store while it is set up (MLflow's schema migration is not safe
    against two processes creating the same new database)."""
    db = sqlite_file(uri)
    if db is None:
        yield
        return
    import fcntl

    with open(str(db) + ".lock", "a") as f:  # closing it releases the lock
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def check_tracking_store(cfg: DictConfig) -> None:
    """ValueError (one line naming the setting) if the MLflow store cannot be used. Creates nothing."""
    t = cfg.tracking
    db = sqlite_file(str(t.get("tracking_uri") or ""))
    if db is not None and not db.exists():
        require_writable_dir(db.parent, "tracking.tracking_uri")
    elif db is not None:
        if not db.is_file():
            raise ValueError(f"tracking.tracking_uri: {db} is not a file")
        if not os.access(db, os.R_OK | os.W_OK):
            raise ValueError(f"tracking.tracking_uri: {db} is not readable and writable (permission denied)")
        try:
            with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)) as conn:
                conn.execute("SELECT name FROM sqlite_master LIMIT 1").fetchall()
        except sqlite3.DatabaseError as e:
            raise ValueError(f"tracking.tracking_uri: {db} is not an SQLite database ({e})") from None
    root = artifact_root(t)
    if root is not None:
        require_writable_dir(root, "tracking.artifact_location" if t.get("artifact_location")
                             else "tracking.tracking_uri (its artifacts: mlruns/ beside the database)")


# MLflow 3's UI opens an experiment by its kind: without this tag on the GenAI traces overview (empty for FACE's
# runs), with it on the runs table
KIND_TAG, KIND = "mlflow.experimentKind", "custom_model_development"


def use_experiment(t: DictConfig) -> str:
    """Point MLflow at ``tracking.tracking_uri`` and its experiment ``tracking.experiment_name`` (created when
    missing, its artifacts at ``artifact_root``; of the kind that opens on its runs, unless it has a kind already);
    returns the experiment id."""
    import mlflow

    mlflow.set_tracking_uri(t.tracking_uri)
    with store_lock(str(t.tracking_uri)):  # two jobs starting on a new store: one creates the tables
        exp = mlflow.get_experiment_by_name(t.experiment_name)
        if exp is None:
            root = artifact_root(t)
            mlflow.create_experiment(t.experiment_name, artifact_location=root.resolve().as_uri() if root else None,
                                     tags={KIND_TAG: KIND})
        elif KIND_TAG not in exp.tags:
            mlflow.MlflowClient().set_experiment_tag(exp.experiment_id, KIND_TAG, KIND)
        return mlflow.set_experiment(t.experiment_name).experiment_id


# ---------------------------------------------------------------- runs whose process is gone
def process_tags() -> dict[str, str]:
    """Who runs this MLflow run: host, pid and the process's start time (for the stale-run check)."""
    pid = os.getpid()
    return {"face.host": socket.gethostname(), "face.pid": str(pid), "face.pid_start": process_start(pid) or ""}


def run_is_gone(tags: dict[str, str]) -> bool:
    """True when the process a run's tags name (``process_tags``) ran on this host and is gone."""
    pid = tags.get("face.pid")
    if not pid or not pid.isdigit() or tags.get("face.host") != socket.gethostname():
        return False
    return not process_alive(int(pid), tags.get("face.pid_start") or None)


def mark_stale_runs(client) -> None:
    """Runs of the store of ``client`` (an MlflowClient) left RUNNING by a process of this host that is gone (kill -9,
    power loss): KILLED."""
    try:
        exps = [e.experiment_id for e in client.search_experiments()]
        runs = client.search_runs(exps, filter_string="attributes.status = 'RUNNING'", max_results=1000) if exps else []
    except Exception as e:  # the store is checked before; a search failure must not stop the run
        log.warning("could not look for stale MLflow runs: %s", e)
        return
    killed = [r for r in runs if run_is_gone(r.data.tags)]
    for r in killed:
        pid = r.data.tags["face.pid"]
        client.set_tag(r.info.run_id, "stop_reason", f"process {pid} is gone (killed); marked by a later run")
        client.set_terminated(r.info.run_id, status="KILLED")
    if killed:
        log.warning("marked %d stale RUNNING MLflow run(s) as KILLED: %s", len(killed),
                    ", ".join(r.info.run_id for r in killed))
