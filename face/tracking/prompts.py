"""The MLflow Prompt Registry: one version per distinct text of a prompt, and references to a registered set.

A new version of a prompt is registered only for a text no earlier version of that name holds (compared by
sha256; each version carries a ``sha256`` tag). An instruction set an aspect was sent with is the prompt
``face-<aspect>-<source>[-<wording>]`` (``register_instructions``); the optimizer's prompts are
``face.optimize.prompt_log``'s. An instruction set is stored as ``### <id>`` blocks (``set_template``).

References (``method.instructions.source=mlflow method.instructions.ref=…``, ``load_reference``):
- ``NAME@VERSION`` (or ``NAME@ALIAS`` / ``NAME@latest``): a registered prompt; ``{aspect}`` in NAME is
  replaced by the aspect (``face-opt-{aspect}-set@best``);
- ``prompts:/NAME/VERSION``: the same, as an MLflow URI;
- ``runs:/<run id>``: the ``results/instructions.json`` artifact of an optimize_instructions run.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from pathlib import Path
from typing import Any, Mapping, Sequence

from face.data.schema import Instruction
from face.errors import DataError
from face.secrets import redact
from face.tracking.store import store_lock

SET_ARTIFACT = "results/instructions.json"  # an optimize_instructions run's final sets
_BLOCK = re.compile(r"^### (\S+)\s*$", re.MULTILINE)
_PAGE = 200  # prompt versions per registry query
# tags that hold for every version of a prompt: MLflow copies a new version's tags to the prompt's own, so only
# these go with the registration, the others are set on the version alone
PROMPT_TAGS = ("aspect", "source", "wording")


def set_template(instructions: Sequence[tuple[str, str]]) -> str:
    return "\n\n".join(f"### {iid}\n{text.strip()}" for iid, text in instructions)


def parse_set(template: str, default_id: str) -> list[tuple[str, str]]:
    parts = _BLOCK.split(template)
    if len(parts) == 1:
        return [(default_id, template.strip())]
    return [(iid, body.strip()) for iid, body in zip(parts[1::2], parts[2::2])]


def redact_tag(value: Any) -> str:
    return redact(str(value))[:5000]


def text_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


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


def register_prompt(name: str, text: str, message: str, tags: Mapping[str, Any], store_uri: str):
    """The version of prompt ``name`` that holds ``text``: an earlier one with the same text, else a new version
    (tagged ``sha256``). Looked up through the client, never ``mlflow.genai.load_prompt``: inside a run that links
    whatever it loads to the run."""
    import mlflow

    with store_lock(store_uri):  # two jobs registering one text: one version
        digest = text_sha256(text)  # the oldest version with this text (an old store may hold a text twice)
        same = next((v for v in reversed(prompt_versions(name)) if isinstance(v.template, str)
                     and text_sha256(v.template) == digest), None)
        if same is not None:
            return same
        clean = {**{k: redact_tag(v) for k, v in tags.items()}, "sha256": digest}
        version = mlflow.genai.register_prompt(name=name, template=text, commit_message=redact(message),
                                               tags={k: v for k, v in clean.items() if k in PROMPT_TAGS})
        for key, value in clean.items():
            if key not in PROMPT_TAGS:
                mlflow.genai.set_prompt_version_tag(name, version.version, key, value)
    return mlflow.MlflowClient().get_prompt_version(name, version.version)


def register_instructions(aspect: str, instructions: Sequence[Any], source: str, wording: str,
                          store_uri: str) -> tuple[str, Any]:
    """The version of ``face-<aspect>-<source>`` (``-<wording>`` appended when the texts were reworded, the
    no-particles ablation's ``whole-turn`` / ``whole-dialogue``: a rewording is never a version of the original
    set) holding the instruction set an aspect was sent with: (its ``prompts:/`` URI, the version)."""
    name = "-".join(x.replace("_", "-") for x in ("face", aspect, source, wording) if x)
    text = "\n\n".join(f"### {i.instruction_id}\n{i.text}" for i in instructions)
    what = f"{len(instructions)} {source} instructions for {aspect}" + (f", reworded: {wording}" if wording else "")
    version = register_prompt(name, text, what, {
        "aspect": aspect, "source": source, "wording": wording or "as written",
        "instruction_ids": ",".join(i.instruction_id for i in instructions)}, store_uri)
    return f"prompts:/{name}/{version.version}", version


def best_version(versions: Sequence[Any], tag: str) -> int | None:
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


# ---------------------------------------------------------------- references to a registered set
def load_reference(ref: str, aspect: str) -> list[Instruction]:
    """The instructions of ``aspect`` named by ``ref`` (see the module docstring)."""
    ref = ref.strip()
    if ref.startswith("runs:/"):
        return _from_run(ref, aspect)
    import mlflow

    uri = prompt_uri(ref, aspect)
    try:
        pv = mlflow.MlflowClient().load_prompt(uri)  # not mlflow.genai's: inside a run it would link the set to the run
    except Exception as e:
        raise DataError(Path(ref), f"cannot load prompt {uri} (tracking URI {mlflow.get_tracking_uri()}): "
                                   f"{e}") from None
    tag_aspect = (pv.tags or {}).get("aspect")
    if tag_aspect and tag_aspect != aspect:
        raise DataError(Path(ref), f"prompt {uri} holds instructions for {tag_aspect!r}, not for {aspect!r}")
    pairs = parse_set(pv.template, f"{pv.name}@{pv.version}")
    return [Instruction(iid, text, i + 1, f"mlflow:{uri}") for i, (iid, text) in enumerate(pairs)]


def prompt_uri(ref: str, aspect: str) -> str:
    """``prompts:/NAME/VERSION`` or ``prompts:/NAME@ALIAS`` for a ``NAME@VERSION|ALIAS`` reference."""
    if ref.startswith("prompts:/"):
        return ref
    name, _, version = ref.partition("@")
    name = name.replace("{aspect}", aspect.replace("_", "-"))
    if not version:
        raise ValueError(f"method.instructions.ref={ref!r}: write NAME@VERSION, prompts:/NAME/VERSION or "
                         "runs:/RUN_ID")
    return f"prompts:/{name}/{version}" if version.isdigit() else f"prompts:/{name}@{version}"


def _from_run(ref: str, aspect: str) -> list[Instruction]:
    import mlflow

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
