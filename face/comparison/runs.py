"""What ``face compare`` reads: a finished run, whatever wrote it, as one ``Run``.

Sources: a ``face evaluate`` output directory (``run_file.json``, ``run_settings.json``, ``conversations.json``,
``particle_scores.jsonl``, ``report.html``), an experiment run directory (``run_file.json`` and Hydra's
``.hydra/config.yaml``), a run file in the FACE authors' format, a ``face.Result`` (``face.evaluate``'s), or an
MLflow run id (its ``run/`` artifacts, downloaded; ``face.comparison.mlflow_io``). What scored the run (judge LLM,
estimator, instruction sets, aspect scales) comes from its run settings: a run file alone has none ("not recorded").
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any, Sequence

import pandas as pd
from omegaconf import OmegaConf

from face.aspects import Aspect
from face.data import CRSARENA_EVAL
from face.data.fetch import ensure_data
from face.datasets.crsarena import load_conversations
from face.errors import ConfigError, DataError
from face.predictions import Predictions
from face.report.diagnostic_report import read_run_settings
from face.runfile import read_run_file
from face.tracking.names import RELEASED_JUDGE

NOT_RECORDED = "not recorded"
_HEX_ID = re.compile(r"(?:mlflow:|runs:/)?([0-9a-f]{32})/?")


@dataclass
class Run:
    """One run's scores and what produced them. ``systems``: conversation id → system (empty: not known);
    ``judge`` / ``estimator`` / ``instructions`` (aspect → digest of its instruction set): None when the run does
    not record them; ``particles``: one row per aspect × particle (``score`` its mean over instructions,
    ``dialogue_act``, ``mention``) or None; ``report``: the run's diagnostics report (drill-down links)."""

    name: str
    source: str
    predictions: Predictions
    label: str = NOT_RECORDED
    judge: str | None = None
    estimator: str | None = None
    instructions: dict[str, str] | None = None
    aspects: dict[str, Aspect] = field(default_factory=dict)
    systems: dict[str, str] = field(default_factory=dict)
    particles: pd.DataFrame | None = None
    report: Path | None = None

    def conv_ids(self) -> list[str]:
        """Every conversation with a prediction, in first-seen order."""
        ids = [*self.predictions.dialogue["conv_id"], *self.predictions.turn["conv_id"]]
        return list(dict.fromkeys(str(i) for i in ids))

    def scores(self, aspects: Sequence[str]) -> pd.DataFrame:
        """aspect, conv_id (a string), pred: the turn and dialogue scores of ``aspects`` (unscored rows left out)."""
        p = self.predictions
        rows = pd.concat([p.turn[["aspect", "conv_id", "pred"]], p.dialogue[["aspect", "conv_id", "pred"]]])
        rows = rows[rows["aspect"].isin(aspects)].dropna(subset=["pred"])
        return rows.assign(conv_id=rows["conv_id"].astype(str))

    def aspect_names(self) -> list[str]:
        return list(dict.fromkeys([*self.predictions.turn["aspect"], *self.predictions.dialogue["aspect"]]))

    def subset(self, name: str, conv_ids: set[str]) -> Run:
        """The run restricted to some conversations (one system of a multi-system run)."""
        p = self.predictions
        preds = Predictions(p.turn[p.turn["conv_id"].isin(conv_ids)], p.dialogue[p.dialogue["conv_id"].isin(conv_ids)])
        parts = None if self.particles is None else self.particles[self.particles["conv_id"].isin(conv_ids)]
        return replace(self, name=name, predictions=preds, particles=parts,
                       systems={c: s for c, s in self.systems.items() if c in conv_ids})

    def by_system(self) -> list[Run]:
        """One run per system (``conversations.json`` or the dataset says which conversation is whose)."""
        if not self.systems:
            raise DataError(self.source, "no system per conversation recorded (conversations.json): cannot split "
                                         "the run by system")
        ids = set(self.conv_ids())
        names = sorted({s for c, s in self.systems.items() if c in ids})
        return [self.subset(s, {c for c, v in self.systems.items() if v == s and c in ids}) for s in names]


def project_root() -> Path:
    """The project's root (``FACE_PROJECT_ROOT``, else the checkout's, else -- installed from a wheel -- the working
    directory): its results directory, data, MLflow store."""
    checkout = Path(__file__).resolve().parents[2]
    return Path(os.environ.get("FACE_PROJECT_ROOT", checkout if (checkout / "conf").is_dir() else ".")).resolve()


def default_tracking_uri() -> str:
    """The project's MLflow store, as every other command uses it (``conf/tracking/mlflow.yaml``)."""
    return f"sqlite:///{project_root() / 'mlflow.db'}"


def digest(instructions: dict[str, str]) -> str:
    """An instruction set's fingerprint: sha256 of its ids and texts (12 hex digits)."""
    text = json.dumps(sorted(instructions.items()), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


def particle_means(scores: pd.DataFrame) -> pd.DataFrame:
    """Per-particle × instruction scores (with ``dialogue_act``, ``mention``) → one row per aspect × particle, its
    score the mean over instructions (rows without a particle or a score are left out)."""
    cols = ["aspect", "conv_id", "turn_ind", "particle_ind", "dialogue_act", "mention"]
    s = scores[(scores["particle_ind"] >= 0) & scores["score"].notna()]
    if s.empty or "dialogue_act" not in s:
        return pd.DataFrame(columns=[*cols, "score"])
    s = s.assign(conv_id=s["conv_id"].astype(str), dialogue_act=s["dialogue_act"].fillna(""),
                 mention=s["mention"].fillna(""))
    return s.groupby(cols, sort=False)["score"].mean().reset_index()


def _from_settings(run: Run, settings: dict) -> Run:
    """``run_settings.json`` (face.report.diagnostic_report.read_run_settings's record) onto the run."""
    llm = settings.get("llm") or {}
    run.label = settings.get("label") or run.label
    if llm.get("model"):
        run.judge = f"{llm['model']} ({llm.get('backend', '?')})"
    if llm.get("estimator"):
        run.estimator = str(llm["estimator"])
    if settings.get("instructions"):
        run.instructions = {a: digest(d) for a, d in settings["instructions"].items()}
    run.aspects.update(settings.get("aspects") or {})
    return run


def _from_hydra(run: Run, get: Any) -> Run:
    """An experiment run directory without run settings: what its Hydra config (``get(key)``: a value, None where it
    has none or cannot resolve it) says about the method."""
    if get("method.name") == "face_released":
        from face.pipeline.released import LABEL

        run.label, run.judge, run.estimator = LABEL, RELEASED_JUDGE, "released (5 samples per particle × instruction)"
        chosen = get("method.instructions")
        ids = ",".join(sorted(map(str, chosen))) if chosen else "all"
        run.instructions = {a: f"released:{ids}" for a in run.aspect_names()}
    else:
        model, backend = get("llm.model"), get("llm.backend")
        run.judge = f"{model} ({backend})" if model else None
        run.estimator = get("method.scoring.estimator") or get("method.estimator")  # (the key before issue 29)
        run.label = f"{get('method.name') or 'method ?'} — LLM: {run.judge or NOT_RECORDED}"
    return run


def _systems_from_dataset(get: Any) -> dict[str, str]:
    """conversation → system for an experiment run on CRSArena-Eval (its data directory, fetched if needed)."""
    if not str(get("dataset._target_")).endswith("CRSArenaEval") or get("dataset.file"):
        return {}
    data_dir = Path(os.environ.get("FACE_DATA_DIR", project_root() / "data" / "raw"))
    ensure_data(data_dir, [CRSARENA_EVAL], os.environ.get("FACE_DATA_MIRROR"))
    return {c.conv_id: c.system for c in load_conversations(data_dir / CRSARENA_EVAL)}


def from_dir(path: Path, name: str | None = None) -> Run:
    """A ``face evaluate`` output directory or an experiment run directory."""
    if not (path / "run_file.json").exists():
        raise DataError(path, "no run_file.json: not a `face evaluate` output or experiment run directory")
    run = Run(name or path.name, str(path), read_run_file(path / "run_file.json"))
    cfg = path / ".hydra" / "config.yaml"  # an experiment's: a value of it read, None where it cannot be resolved
    hydra = partial(OmegaConf.select, OmegaConf.load(cfg), throw_on_resolution_failure=False) if cfg.exists() else None
    if (path / "run_settings.json").exists():
        run = _from_settings(run, read_run_settings(path / "run_settings.json"))
    elif hydra is not None:
        run = _from_hydra(run, hydra)
    if (path / "conversations.json").exists():
        run.systems = {c.conv_id: c.system for c in load_conversations(path / "conversations.json",
                                                                        require_labels=False)}
    elif hydra is not None:
        run.systems = _systems_from_dataset(hydra)
    if (path / "particle_scores.jsonl").exists():
        from face.pipeline.records import read_score_file

        run.particles = particle_means(read_score_file(path / "particle_scores.jsonl", detail=True))
    run.report = path / "report.html" if (path / "report.html").exists() else None
    return run


def from_result(result: Any, name: str) -> Run:
    """A ``face.Result`` (face.evaluate's): its predictions, conversations, particles and run settings."""
    run = _from_settings(Run(name, f"face.Result ({name})", result.predictions),
                         {**result.settings, "label": result.label})
    run.aspects.update({a.name: a for a in result.aspects})
    run.systems = {str(c.conv_id): c.system for c in result.conversations}
    run.particles = particle_means(result.particles) if len(result.particles) else None
    report = Path(result.out_dir or ".") / "report.html"
    run.report = report if result.out_dir and report.exists() else None
    return run


def load(source: Any, name: str | None = None, tracking_uri: str | None = None) -> Run:
    """A run from any of the sources above (``name``: what the tables call it; default: the directory's or file's
    name, or the MLflow run's name)."""
    if hasattr(source, "predictions"):
        return from_result(source, name or "run")
    if not isinstance(source, (str, os.PathLike)):
        raise ConfigError(f"runs: a run must be a path, an MLflow run id or a face.Result, got {source!r}")
    text = os.fspath(source)
    path = Path(text)
    if path.is_dir():
        return from_dir(path, name)
    if path.is_file():
        return Run(name or path.stem, str(path), read_run_file(path))
    hex_id = _HEX_ID.fullmatch(text.strip())  # mlflow:<id>, runs:/<id> or a bare 32-hex-digit id
    if hex_id and not path.exists():
        from face.comparison.mlflow_io import download_run

        run_id = hex_id.group(1)
        with tempfile.TemporaryDirectory(prefix="face-compare-") as tmp:
            run_name = download_run(run_id, tracking_uri or default_tracking_uri(), Path(tmp))
            try:
                run = from_dir(Path(tmp) / "run", name or run_name)
            except DataError as e:
                raise DataError(f"mlflow:{run_id}", f"not a FACE run with a run file ({e.problem})") from None
        run.source, run.report = f"mlflow:{run_id}", None
        return run
    raise DataError(text, "not found: name a `face evaluate` output directory, an experiment run directory, a run "
                          "file or an MLflow run id")
