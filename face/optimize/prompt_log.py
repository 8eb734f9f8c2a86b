"""The optimizer's prompts in the MLflow Prompt Registry (``PromptLog``; a no-op when tracking is off).

- Candidates: every candidate instruction of a job (the initial one, each rewrite) is a version of one prompt
  per sweep and aspect, ``face-opt-<aspect>-sweep-<parent run id[:8]>`` (a run outside a sweep:
  ``face-opt-<aspect>-run-<run id[:8]>``). A version's commit message starts with the job's swept values
  (``alpha=1 beam=2: round 1: rewrite of v1 (initial) by gradient r1:initial:g0 -> r1c1``), its tags are the
  lineage (round, parent version and id, gradient id, candidate id, run id) and ``jobs`` (every job that wrote that
  text); aliases ``@initial`` and the job's best instruction, ``@best`` (``@best-alpha1-beam2`` in a sweep).
- The final ranked set: a version of ``face-opt-<aspect>-set`` (one per distinct set; the instructions as
  ``### <id>`` blocks), its commit message starting with the job's swept values, tagged with the job and its dev-
  and test-fold Spearman; aliased ``@run-<run id[:8]>`` for the job and ``@best`` for the version with the highest
  dev-fold Spearman of all (``method.instructions.ref='face-opt-{aspect}-set@best'``).

A candidate is anything with the attributes of ``face.optimize.checkpoint.Candidate`` (``cid``, ``round``,
``origin``, ``gradient_id``, ``version``, ``text``).
"""

from __future__ import annotations

import re
from typing import Any

from face.tracking.prompts import best_version, prompt_versions, redact_tag, register_prompt, set_template


def prompt_name(aspect: str, suffix: str = "") -> str:
    return f"face-opt-{aspect.replace('_', '-')}{suffix}"


def job_key(run_id: str) -> str:
    """A run's short name in the registry: ``run-`` and the first 8 characters of its MLflow run id."""
    return f"run-{run_id[:8]}"


def alias_of(label: str) -> str:
    """An alias from a job's swept values: ``alpha=1 beam=2`` -> ``alpha1-beam2`` (letters, digits, _ and -)."""
    return re.sub(r"[^\w-]+", "-", label.replace("=", "")).strip("-")[:200]


class PromptLog:
    """The registrations of one optimization job for one aspect. ``name``: the candidates prompt of an earlier
    job, continued by a resumed optimization."""

    def __init__(self, tracker, aspect: str, name: str | None = None):
        self.enabled = bool(tracker is not None and tracker.enabled
                            and tracker.cfg.tracking.get("register_prompts", True))
        self.tracker, self.aspect = tracker, aspect
        self.name = name
        if self.enabled and name is None:
            parent = tracker.sweep_parent_id
            self.name = prompt_name(aspect, f"-sweep-{parent[:8]}" if parent else "-" + job_key(tracker.run_id))
        self.run_id = tracker.run_id if self.enabled else None
        self.label = (tracker.job_label or tracker.run_name or self.run_id or "") if self.enabled else ""
        self.best_alias = f"best-{alias_of(tracker.job_label)}" if self.enabled and tracker.job_label else "best"

    def _register(self, name: str, text: str, what: str, tags: dict[str, Any]):
        uri = str(self.tracker.cfg.tracking.tracking_uri)
        v = register_prompt(name, text, f"{self.label}: {what}", {**tags, "run_id": self.run_id, "jobs": self.label},
                            uri)
        jobs = [j for j in (v.tags or {}).get("jobs", "").split("; ") if j]
        if redact_tag(self.label) not in jobs:  # a text an earlier job of the sweep wrote too
            from mlflow import genai

            genai.set_prompt_version_tag(name, v.version, "jobs", redact_tag("; ".join([*jobs, self.label])))
        return v

    def register(self, cand: Any, parent: Any | None) -> int | None:
        if not self.enabled:
            return None
        from mlflow import genai

        parent_v = "none" if parent is None or parent.version is None else str(parent.version)
        tags = {"aspect": self.aspect, "round": str(cand.round), "candidate_id": cand.cid, "origin": cand.origin,
                "parent_version": parent_v, "parent_id": parent.cid if parent is not None else "none",
                "gradient_id": cand.gradient_id or "none"}
        if parent is None:
            what = f"round {cand.round}: {cand.origin} instruction ({cand.cid})"
        else:
            what = (f"round {cand.round}: rewrite of v{parent_v} ({parent.cid}) by gradient {cand.gradient_id} "
                    f"-> {cand.cid}")
        first = cand.version is None and parent is None
        cand.version = int(self._register(str(self.name), cand.text, what, tags).version)
        if first:
            genai.set_prompt_alias(str(self.name), "initial", cand.version)
            where = ("sweep", self.tracker.sweep_parent_id) if self.tracker.sweep_parent_id else ("run", self.run_id)
            for k, val in {"aspect": self.aspect, where[0]: where[1]}.items():
                genai.set_prompt_tag(str(self.name), k, redact_tag(val))
        return cand.version

    def register_set(self, ranked: list[Any], extra: dict[str, str]) -> str | None:
        """The final ranked set (see the module docstring). Returns ``face-opt-<aspect>-set@<version>``."""
        if not self.enabled:
            return None
        from mlflow import genai

        if ranked and ranked[0].version is not None:
            genai.set_prompt_alias(str(self.name), self.best_alias, int(ranked[0].version))
        set_name = prompt_name(self.aspect, "-set")
        tags = {"aspect": self.aspect, "candidates": self.name,
                "members": ",".join(f"{c.cid}:v{c.version}" for c in ranked), **extra}
        what = (f"optimized set of {len(ranked)} instructions for {self.aspect} (versions of {self.name}); "
                + ", ".join(f"{k} {v}" for k, v in extra.items()))
        v = self._register(set_name, set_template([(c.cid, c.text) for c in ranked]), what, tags)
        genai.set_prompt_alias(set_name, job_key(str(self.run_id)), int(v.version))
        best = best_version(prompt_versions(set_name), "dev_spearman")
        if best is not None:
            genai.set_prompt_alias(set_name, "best", best)
        else:
            print(f"{set_name}: no @best alias yet: no version has a dev-fold Spearman (this job's: "
                  f"{extra.get('dev_spearman', 'none')})", flush=True)
        return f"{set_name}@{v.version}"
