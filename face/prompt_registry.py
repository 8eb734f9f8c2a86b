"""The MLflow Prompt Registry for the optimizer, and references to an optimized set.

It sits at the tracking layer: the optimizer writes through it, FACE's instruction source reads through it.
A candidate is anything with the attributes of ``face.optimize.checkpoint.Candidate`` (``cid``, ``round``,
``origin``, ``gradient_id``, ``version``, ``text``).

Every candidate instruction (the initial one, each rewrite) is a version of the prompt
``face-opt-<aspect>``, tagged with aspect, round, parent version, gradient id, candidate id and run id;
the final ranked set is a version of ``face-opt-<aspect>-set`` (the instructions as ``### <id>`` blocks).

References (``method.instructions.source=mlflow method.instructions.ref=…``):
- ``NAME@VERSION`` (or ``NAME@ALIAS`` / ``NAME@latest``): a registered prompt; ``{aspect}`` in NAME is
  replaced by the aspect (``face-opt-{aspect}-set@latest``);
- ``prompts:/NAME/VERSION``: the same, as an MLflow URI;
- ``runs:/<run id>``: the ``optimized/instructions.json`` artifact of an optimize_instructions run.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from face.data.schema import Instruction
from face.errors import DataError

SET_ARTIFACT = "optimized/instructions.json"
_BLOCK = re.compile(r"^### (\S+)\s*$", re.MULTILINE)


def prompt_name(aspect: str, suffix: str = "") -> str:
    return f"face-opt-{aspect.replace('_', '-')}{suffix}"


def set_template(instructions: list[tuple[str, str]]) -> str:
    return "\n\n".join(f"### {iid}\n{text.strip()}" for iid, text in instructions)


def parse_set(template: str, default_id: str) -> list[tuple[str, str]]:
    parts = _BLOCK.split(template)
    if len(parts) == 1:
        return [(default_id, template.strip())]
    return [(iid, body.strip()) for iid, body in zip(parts[1::2], parts[2::2])]


class PromptLog:
    """Registers candidates (when tracking is on); a no-op otherwise."""

    def __init__(self, tracker, aspect: str):
        self.enabled = bool(tracker is not None and tracker.enabled
                            and tracker.cfg.tracking.get("register_prompts", True))
        self.tracker, self.aspect = tracker, aspect

    def register(self, cand: Any, parent: Any | None) -> int | None:
        if not self.enabled:
            return None
        from mlflow import genai

        tags = {"aspect": self.aspect, "round": str(cand.round), "candidate_id": cand.cid, "origin": cand.origin,
                "parent_version": "none" if parent is None or parent.version is None else str(parent.version),
                "parent_id": parent.cid if parent is not None else "none",
                "gradient_id": cand.gradient_id or "none", "run_id": self.tracker.run_id or "none"}
        what = "initial instruction" if parent is None else f"rewrite of version {tags['parent_version']}"
        v = genai.register_prompt(name=prompt_name(self.aspect), template=cand.text,
                                  commit_message=f"{what} (round {cand.round}, {cand.cid})", tags=tags)
        cand.version = int(v.version)
        return cand.version

    def register_set(self, ranked: list[Any], extra: dict[str, str]) -> str | None:
        if not self.enabled:
            return None
        from mlflow import genai

        tags = {"aspect": self.aspect, "run_id": self.tracker.run_id or "none",
                "members": ",".join(f"{c.cid}:v{c.version}" for c in ranked), **extra}
        v = genai.register_prompt(name=prompt_name(self.aspect, "-set"),
                                  template=set_template([(c.cid, c.text) for c in ranked]),
                                  commit_message=f"optimized set of {len(ranked)} instructions for {self.aspect}",
                                  tags=tags)
        return f"{prompt_name(self.aspect, '-set')}@{v.version}"


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
    from mlflow import genai

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
        pv = genai.load_prompt(uri)
    except Exception as e:
        raise DataError(Path(ref), f"cannot load prompt {uri} (tracking URI {mlflow.get_tracking_uri()}): "
                                   f"{e}") from None
    tag_aspect = (pv.tags or {}).get("aspect")
    if tag_aspect and tag_aspect != aspect:
        raise DataError(Path(ref), f"prompt {uri} holds instructions for {tag_aspect!r}, not for {aspect!r}")
    pairs = parse_set(pv.template, f"{pv.name}@{pv.version}")
    return [Instruction(iid, text, i + 1, f"mlflow:{uri}") for i, (iid, text) in enumerate(pairs)]
