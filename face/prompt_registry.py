"""The MLflow Prompt Registry for the optimizer, and references to an optimized set.

It sits at the tracking layer: the optimizer writes through it, FACE's instruction source reads through it.
A candidate is anything with the attributes of ``face.optimize.checkpoint.Candidate`` (``cid``, ``round``,
``origin``, ``gradient_id``, ``version``, ``text``).

Every candidate instruction of one optimization job (the initial one, each rewrite) is a version of the prompt
``face-opt-<aspect>-run-<run id[:8]>`` (``PromptLog``), tagged with aspect, round, parent version, gradient id,
candidate id and run id, aliased ``@initial`` and ``@best``; the final ranked set is a version of
``face-opt-<aspect>-set`` (the instructions as ``### <id>`` blocks), aliased ``@run-<run id[:8]>`` and, for the set
with the best dev-fold correlation, ``@best``. A text already held by a version of the name is not registered
again (``Tracker.register_prompt``).

References (``method.instructions.source=mlflow method.instructions.ref=…``):
- ``NAME@VERSION`` (or ``NAME@ALIAS`` / ``NAME@latest``): a registered prompt; ``{aspect}`` in NAME is
  replaced by the aspect (``face-opt-{aspect}-set@latest``);
- ``prompts:/NAME/VERSION``: the same, as an MLflow URI;
- ``runs:/<run id>``: the ``optimized/instructions.json`` artifact of an optimize_instructions run.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from face.data.schema import Instruction
from face.errors import DataError
from face.secrets import redact

SET_ARTIFACT = "optimized/instructions.json"
_BLOCK = re.compile(r"^### (\S+)\s*$", re.MULTILINE)


def prompt_name(aspect: str, suffix: str = "") -> str:
    return f"face-opt-{aspect.replace('_', '-')}{suffix}"


def job_key(run_id: str) -> str:
    """The optimization job's short name in the registry: ``run-`` and the first 8 characters of its MLflow run id
    (unique in a store; every sweep job is its own run)."""
    return f"run-{run_id[:8]}"


def set_template(instructions: list[tuple[str, str]]) -> str:
    return "\n\n".join(f"### {iid}\n{text.strip()}" for iid, text in instructions)


def parse_set(template: str, default_id: str) -> list[tuple[str, str]]:
    parts = _BLOCK.split(template)
    if len(parts) == 1:
        return [(default_id, template.strip())]
    return [(iid, body.strip()) for iid, body in zip(parts[1::2], parts[2::2])]


class PromptLog:
    """The optimizer's registrations (when tracking is on; a no-op otherwise).

    One prompt per optimization job and aspect, ``face-opt-<aspect>-run-<run id[:8]>``: its versions are that
    job's candidates in the order they were written (v1 the initial instruction), each version's commit message
    naming its round and the version it rewrites, its tags the lineage; the prompt's own tags say which job
    (run, sweep job and overrides). ``name``: an earlier job's prompt, continued by a resumed optimization.
    """

    def __init__(self, tracker, aspect: str, name: str | None = None):
        self.enabled = bool(tracker is not None and tracker.enabled
                            and tracker.cfg.tracking.get("register_prompts", True))
        self.tracker, self.aspect = tracker, aspect
        self.name = name or (prompt_name(aspect, "-" + job_key(tracker.run_id or "none")) if self.enabled else None)
        self._job: dict[str, str] | None = None

    def job(self) -> dict[str, str]:
        """Which job this is, from its MLflow run (name, sweep job and overrides when in a Hydra multirun)."""
        if self._job is None:
            from mlflow.tracking import MlflowClient

            run_id = self.tracker.run_id or "none"
            tags = MlflowClient().get_run(run_id).data.tags if self.tracker.run_id else {}
            self._job = {"run_id": run_id, "run_name": tags.get("mlflow.runName", ""),
                         **{k: tags[k] for k in ("sweep_job", "sweep_overrides") if tags.get(k)}}
        return self._job

    def _describe_job(self) -> str:
        j = self.job()
        # the run name carries the job's settings; its overrides (tmp paths, the store's URI) stay in the tags
        sweep = f"sweep job {j['sweep_job']}, " if "sweep_job" in j else ""
        return f"{sweep}run {j['run_name'] or j['run_id']}"

    def register(self, cand: Any, parent: Any | None) -> int | None:
        if not self.enabled:
            return None
        from mlflow import genai

        first = cand.version is None and parent is None
        parent_v = "none" if parent is None or parent.version is None else str(parent.version)
        tags = {"aspect": self.aspect, "round": str(cand.round), "candidate_id": cand.cid, "origin": cand.origin,
                "parent_version": parent_v, "parent_id": parent.cid if parent is not None else "none",
                "gradient_id": cand.gradient_id or "none", "run_id": self.job()["run_id"]}
        if parent is None:
            what = f"round {cand.round}: {cand.origin} instruction ({cand.cid})"
        else:
            what = (f"round {cand.round}: rewrite of v{parent_v} ({parent.cid}) by gradient {cand.gradient_id} "
                    f"-> {cand.cid}")
        v = self.tracker.register_prompt(self.name, cand.text, f"{what}; {self._describe_job()}", tags)
        cand.version = int(v.version)
        if first:
            genai.set_prompt_alias(self.name, "initial", cand.version)
            for k, val in {"aspect": self.aspect, "job": self._describe_job(), **self.job()}.items():
                genai.set_prompt_tag(self.name, k, redact_tag(val))
        return cand.version

    def register_set(self, ranked: list[Any], extra: dict[str, str]) -> str | None:
        """The final ranked set: ``@best`` on the job's prompt is its best instruction, the prompt's tag
        ``final_versions`` the set in rank order; the set itself is a version of ``face-opt-<aspect>-set``
        (one per distinct set), aliased ``run-<run id[:8]>`` for this job and ``best`` for the set with the
        highest dev-fold correlation registered so far. Returns ``face-opt-<aspect>-set@<version>``."""
        if not self.enabled:
            return None
        from mlflow import genai

        if ranked and ranked[0].version is not None:
            genai.set_prompt_alias(self.name, "best", int(ranked[0].version))
            genai.set_prompt_tag(self.name, "final_versions", ",".join(f"v{c.version}" for c in ranked))
        set_name = prompt_name(self.aspect, "-set")
        tags = {"aspect": self.aspect, "run_id": self.job()["run_id"], "candidates": self.name,
                "members": ",".join(f"{c.cid}:v{c.version}" for c in ranked), **extra}
        v = self.tracker.register_prompt(
            set_name, set_template([(c.cid, c.text) for c in ranked]),
            f"optimized set of {len(ranked)} instructions for {self.aspect} (versions of {self.name}); "
            f"{self._describe_job()}", tags)
        genai.set_prompt_alias(set_name, job_key(self.job()["run_id"]), int(v.version))
        best = best_version(self.tracker.prompt_versions(set_name), "dev_spearman")
        if best is not None:
            genai.set_prompt_alias(set_name, "best", best)
        return f"{set_name}@{v.version}"


def redact_tag(value: str) -> str:
    return redact(str(value))[:5000]


def best_version(versions: list[Any], tag: str) -> int | None:
    """The version with the highest numeric ``tag`` (the oldest of equals); None if none has a finite one."""
    scored = []
    for v in versions:
        try:
            x = float((v.tags or {}).get(tag, "nan"))
        except ValueError:
            continue
        if math.isfinite(x):
            scored.append((-x, int(v.version)))
    return min(scored)[1] if scored else None


def load_reference(ref: str, aspect: str) -> list[Instruction]:
    """The instructions of ``aspect`` named by ``ref`` (see the module docstring)."""
    import mlflow

    ref = ref.strip()
    if ref.startswith("runs:/"):
        run_id = ref[len("runs:/"):].strip("/").split("/")[0]
        try:
            local = mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path=SET_ARTIFACT)
        except Exception as e:
            raise DataError(Path(ref), f"no {SET_ARTIFACT} in MLflow run {run_id} "
                                       f"(tracking URI {mlflow.get_tracking_uri()}): {e}") from None
        raw = json.loads(Path(local).read_text(encoding="utf-8"))
        items = raw.get(aspect) or []
        if not items:
            raise DataError(Path(ref), f"run {run_id} has no optimized instructions for aspect {aspect!r}")
        return [Instruction(str(x["instruction_id"]), str(x["text"]), i + 1, f"mlflow:{ref}")
                for i, x in enumerate(items)]
    from mlflow.tracking import MlflowClient

    if ref.startswith("prompts:/"):
        uri = ref
    else:
        name, _, version = ref.partition("@")
        name = name.replace("{aspect}", aspect.replace("_", "-"))
        if not version:
            raise ValueError(f"method.instructions.ref={ref!r}: write NAME@VERSION, prompts:/NAME/VERSION or "
                             "runs:/RUN_ID")
        uri = f"prompts:/{name}/{version}" if version.isdigit() else f"prompts:/{name}@{version}"
    try:
        pv = MlflowClient().load_prompt(uri)  # not mlflow.genai's: inside a run it would link the set to the run
    except Exception as e:
        raise DataError(Path(ref), f"cannot load prompt {uri} (tracking URI {mlflow.get_tracking_uri()}): "
                                   f"{e}") from None
    tag_aspect = (pv.tags or {}).get("aspect")
    if tag_aspect and tag_aspect != aspect:
        raise DataError(Path(ref), f"prompt {uri} holds instructions for {tag_aspect!r}, not for {aspect!r}")
    pairs = parse_set(pv.template, f"{pv.name}@{pv.version}")
    return [Instruction(iid, text, i + 1, f"mlflow:{uri}") for i, (iid, text) in enumerate(pairs)]
