"""``face compare`` and MLflow: read a tracked run as a ``Run``; record a comparison as an MLflow run.

A tracked FACE run keeps its files as artifacts (``run/run_file.json``, ``run/particle_scores.jsonl``, …, and the
resolved ``config.yaml``): they are downloaded into a temporary directory laid out like a run directory and read
from there. A comparison run (experiment ``face_compare``) records which runs were compared (params and tags), every
difference as metrics and the report directory as artifacts.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

import mlflow
from mlflow.exceptions import MlflowException
from omegaconf import DictConfig, OmegaConf

from face.errors import ConfigError, DataError
from face.secrets import redact
from face.tracking import check_tracking_store, use_experiment
from face.tracking.names import SHORT_NAME_TAG, fixed_width, shown

if TYPE_CHECKING:
    from face.comparison.engine import Comparison

EXPERIMENT = "face_compare"


def download_run(run_id: str, uri: str, into: Path) -> str:
    """The MLflow run's run files and configuration downloaded into ``into / "run"``, laid out as a run directory;
    returns the run's short name, else its name."""
    client = mlflow.MlflowClient(tracking_uri=uri)
    try:
        info = client.get_run(run_id)
    except MlflowException as e:
        raise DataError(f"mlflow:{run_id}", f"no such MLflow run in {uri} ({str(e).splitlines()[0]})") from None
    names = {a.path for a in client.list_artifacts(run_id)}
    for name, dst in (("run", into), ("config.yaml", into / "run" / ".hydra")):
        if name in names:
            mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path=name, dst_path=str(dst), tracking_uri=uri)
    return info.data.tags.get(SHORT_NAME_TAG) or info.info.run_name or run_id[:8]  # face evaluate's: its input's stem


MAX_KEY = 250  # characters of an MLflow metric name (mlflow.utils.validation.MAX_ENTITY_KEY_LENGTH)


def _metric_key(*parts: str) -> str:
    """An MLflow metric name: letters, digits, ``_ -`` between the dots (a ``/`` would make it a path)."""
    return ".".join(re.sub(r"[^\w\-]", "_", p) for p in parts)


def comparison_metrics(comp: Comparison) -> dict[str, float]:
    """``diff.<aspect>.<candidate>_vs_<baseline>`` with ``.ci_low``, ``.ci_high``, ``.p_holm``, and
    ``mean.<aspect>.<system>``; a ConfigError (before anything is written) for system names that would share metric
    names or make one longer than MLflow takes."""
    names = list(comp.systems["system"])
    same = next(((a, b) for i, a in enumerate(names) for b in names[i + 1:] if _metric_key(a) == _metric_key(b)), None)
    if same:
        raise ConfigError(f"names: {same[0]!r} and {same[1]!r} would be logged to MLflow under the same metric names "
                          f"({_metric_key(same[0])}); rename them (--names / names=)")
    out = {}
    for r in comp.differences.itertuples(index=False):
        key = _metric_key("diff", r.aspect, f"{r.candidate}_vs_{r.baseline}")
        out.update({key: r.diff, f"{key}.ci_low": r.ci_low, f"{key}.ci_high": r.ci_high, f"{key}.p_holm": r.p_holm})
    for r in comp.means.itertuples(index=False):
        out[_metric_key("mean", r.aspect, r.system)] = r.mean
    longest = max(out, key=len)
    if len(longest) > MAX_KEY:
        raise ConfigError(f"names: the MLflow metric name {longest[:60]}... would be {len(longest)} characters, "
                          f"MLflow takes {MAX_KEY}: shorten the system names (--names / names=)")
    return {k: shown(v) for k, v in out.items() if v == v}


def description(comp: Comparison) -> str:
    """The run's description: one fixed-width row per verdict (MLflow draws a Markdown table without space between
    its columns, and wraps a long verdict over lines), the warnings, what scored and how."""
    rows = [[r.aspect, f"{r.candidate} vs {r.baseline}", f"{r.diff:+.3f}", f"[{r.ci_low:+.3f}, {r.ci_high:+.3f}]",
             f"{r.p_holm:.3g}", r.verdict] for r in comp.verdicts().itertuples(index=False)]
    table = fixed_width(["aspect", "systems", "diff", "95% CI", "p (Holm)", "verdict"], rows)
    return f"**{' vs '.join(comp.systems['system'])}**\n\n" + comp.to_markdown(table)


def tracking(tracking_uri: str) -> DictConfig:
    """The store a comparison is recorded in (``tracking.*`` as the other runs name it), checked: a ConfigError
    before anything is written. Its artifacts go beside it (``face.tracking.store``), as every run's do."""
    t = OmegaConf.create({"tracking_uri": tracking_uri, "experiment_name": EXPERIMENT})
    try:
        check_tracking_store(OmegaConf.create({"tracking": t}))
    except ValueError as e:
        raise ConfigError(str(e).replace("tracking.tracking_uri", "--tracking-uri")) from None
    return t


def log_comparison(comp: Comparison, out_dir: Path, tracking_uri: str) -> str:
    """One MLflow run recording the comparison; returns its id."""
    metrics = comparison_metrics(comp)
    use_experiment(tracking(tracking_uri))
    with mlflow.start_run(run_name=redact(f"compare {' vs '.join(comp.systems['system'])}")[:250]) as run:
        for i, r in enumerate(comp.systems.itertuples(index=False)):
            mlflow.log_param(f"run_{i}", redact(f"{r.system}: {r.source}")[:500])
            if str(r.source).startswith("mlflow:"):
                mlflow.set_tag(f"compared_run.{i}", str(r.source)[len("mlflow:"):])
        mlflow.log_params({k: comp.settings[k] for k in ("pairing", "n_boot", "alpha", "seed")})
        mlflow.set_tag("mlflow.note.content", redact(description(comp))[:5000])
        mlflow.log_metrics(metrics)
        mlflow.log_artifacts(str(out_dir), artifact_path="comparison")
        return run.info.run_id
