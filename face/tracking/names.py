"""What a run logs under which name: its params (the resolved config), its MLflow metrics, its description.

MLflow sorts metric names (the chart view, the compare view's metric table and its parallel-coordinates plot all
open on the first name), so a run's MLflow metrics are only what compares runs, and every name sorts after the
headline: the ``summary.*`` headline (names that differ within their first 12 characters, the width of a runs-table
column) and the correlations, ``vs_human.{level}.{aspect}.{split}.spearman`` with the human labels on the pooled
split (``vs_arena.…`` with another reference). Every other number a run logs (estimates, LLM counters, per-round
values, counts) goes to its ``numbers.json`` artifact.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Iterable, Mapping

from omegaconf import DictConfig, OmegaConf

from face.secrets import redact

HEADLINE_PREFIX = "summary."
CORRELATION_PREFIX = "vs_"  # vs_human., vs_arena.: sorts after "summary."
NUMBERS_ARTIFACT = "numbers.json"

# the first of these an experiment logs is its headline metric (else its first ``summary.*`` metric by name): the
# experiment's primary metric, the sweep report's first column
HEADLINES = ("summary.final_heldout_spearman", "summary.confirmed_by_humans", "summary.ucb_heldout_mean",
             "summary.turn_spearman_mean", "summary.dialogue_spearman_mean", "summary.system_spearman_mean")
PRIMARY_METRIC_TAG = "mlflow.experiment.primaryMetric.name"  # an experiment tag MLflow's UI reads

# the judge of a run on the FACE authors' released judgements (method face_released; no LLM called): its ``llm.*``
# params (the model as the replay judge, llm=replay, serves the same judgements) and its ``judge`` tag
RELEASED_MODEL = "face-released-judgements"
RELEASED_JUDGE = "the FACE authors' released judgements"
JUDGE_TAG = "judge"
# what ``face compare mlflow:<id>`` calls a run (``face evaluate``'s: its input file's stem), where it has one
SHORT_NAME_TAG = "face.short_name"

# settings that say where things go, not what is computed: never MLflow params
_NOT_PARAMS = ("paths.", "tracking.", "hydra.", "report.out_dir")
# settings that only matter when an LLM is called
_LLM_PARAMS = ("llm.", "run_size.")


def flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        out.update(flatten(v, f"{prefix}{k}.") if isinstance(v, Mapping) else {f"{prefix}{k}": v})
    return out


def run_params(cfg: DictConfig, uses_llm: bool = True) -> dict[str, str]:
    """The flattened resolved config as MLflow params, without paths (machine-specific) and, for runs that call
    no LLM, without LLM settings; a file path keeps only its name."""
    resolved = OmegaConf.to_container(cfg, resolve=True)
    out = {}
    for k, v in flatten(resolved).items():  # type: ignore[arg-type]
        if k.startswith(_NOT_PARAMS) or (not uses_llm and k.startswith(_LLM_PARAMS)):
            continue
        if isinstance(v, str) and os.path.isabs(v):
            v = Path(v).name
        out[k] = redact("null" if v is None else str(v))[:6000]  # a key never becomes a param (face.secrets)
    if not uses_llm and OmegaConf.select(cfg, "method.name", default=None) == "face_released":
        out.update({"llm.model": RELEASED_MODEL, "llm.backend": "released"})  # the judge whose scores it reads
    return out


def judge_tag(params: Mapping[str, str]) -> dict[str, str]:
    """The ``judge`` tag of a run with these params: the released judgements, or ``model (backend)``; {} for a run
    that neither called nor read a judge."""
    if params.get("llm.backend") == "released":
        return {JUDGE_TAG: RELEASED_JUDGE}
    return {JUDGE_TAG: f"{params['llm.model']} ({params.get('llm.backend', '?')})"} if "llm.model" in params else {}


def is_comparison(name: str) -> bool:
    """True for a name that compares runs (an MLflow metric); False for a number of the ``numbers.json`` artifact."""
    return name.startswith((HEADLINE_PREFIX, CORRELATION_PREFIX))


def summary_metrics(results, prefix: str = "") -> dict[str, float]:
    """A few numbers for the runs table: mean Spearman over aspects at turn and dialogue level (pooled split)
    and at system level, as ``summary.[prefix]{level}_spearman_mean`` (a prefix names one of several methods)."""
    r = results[(results["coefficient"] == "spearman") & (results["split"] == "all")]
    values = {level: r[r["level"] == level]["value"].dropna() for level in ("turn", "dialogue", "system")}
    return {f"{HEADLINE_PREFIX}{prefix}{level}_spearman_mean": float(v.mean()) for level, v in values.items() if len(v)}


def headline(metrics: Iterable[str]) -> str | None:
    """The headline metric among metric names (see HEADLINES)."""
    names = set(metrics)
    first = [m for m in HEADLINES if m in names] or sorted(m for m in names if m.startswith(HEADLINE_PREFIX))
    return first[0] if first else None


def metric_name(level: str, aspect: str, split: str, coefficient: str, prefix: str = "", against: str = "human"
                ) -> str:
    """``vs_{against}.[prefix]{level}.{aspect}.{split}.{coefficient}``."""
    return f"{CORRELATION_PREFIX}{against}.{prefix}{level}.{aspect}.{split}.{coefficient}"


def correlation_metrics(results, prefix: str = "", against: str = "human") -> dict[str, float]:
    """The Spearman correlation of every (level, aspect) with the human labels (or ``against`` another reference)
    on the pooled split ("all"; every split where there is none) as an MLflow metric: every split, coefficient and
    interval is in the correlations table artifact. Few metrics keep MLflow's charts and compare view usable (14 on
    CRSArena-Eval, not 42), and their names differ within the part a chart's title shows."""
    r = results[results["coefficient"] == "spearman"]
    if (r["split"] == "all").any():
        r = r[r["split"] == "all"]
    return {metric_name(x.level, x.aspect, x.split, x.coefficient, prefix, against): x.value
            for x in r.itertuples(index=False)}


def description(results, label: str, settings: str) -> str:
    """Markdown for the run page: what produced the numbers and the headline correlations (a fixed-width block)."""
    r = results[(results["coefficient"] == "spearman") & (results["split"] == "all")]
    rows = [[x.level, x.aspect, f"{x.value:.3f}", "" if math.isnan(x.ci_low) else f"[{x.ci_low:.3f}, {x.ci_high:.3f}]"]
            for x in r.itertuples(index=False)]
    table = [fixed_width(["level", "aspect", "Spearman (pooled)", "95% CI"], rows)] if rows else []
    return "\n".join([f"**{label}**", "", settings, "", *table])


def fixed_width(header: list[str], rows: list[list[str]]) -> str:
    """A table as a fenced fixed-width block: MLflow's description panel draws Markdown tables without any space
    between their columns."""
    widths = [max(len(x) for x in col) for col in zip(header, *rows)]
    lines = ["  ".join(x.ljust(w) for x, w in zip(r, widths)).rstrip() for r in [header, *rows]]
    return "\n".join(["```text", *lines, "```"])


def shown(value) -> float:
    """A metric as MLflow shows it: 6 decimals (no float noise where shown; numbers.json keeps full precision)."""
    return round(float(value), 6)


def mean_metrics(means) -> dict[str, float]:
    """``summary.<aspect>``: each aspect's mean score at its level, on its scale (``aspect_means``' table of a run
    without human labels)."""
    return {f"{HEADLINE_PREFIX}{r.aspect}": round(float(r.mean), 4) for r in means.itertuples(index=False)
            if not math.isnan(r.mean)}


def means_description(means, label: str, settings: str) -> str:
    """The run page of a run without human labels: what scored (the judge, with its caveat), on what, and each
    aspect's mean score at its level (its ``summary.*`` metric)."""
    rows = [[f"{r.aspect} ({r.scale})", r.level, "–" if math.isnan(r.mean) else f"{r.mean:.3f}", str(r.conversations)]
            for r in means.itertuples(index=False)]
    return "\n".join([f"**{label}**", "", settings, "", "Mean score of each aspect at its level (its summary.* "
                      "metric):", "", fixed_width(["aspect (scale)", "level", "mean", "conversations"], rows)])
