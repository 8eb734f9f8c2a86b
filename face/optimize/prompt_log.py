"""The optimizer's prompts in the MLflow Prompt Registry (``PromptLog``; a no-op when tracking is off).

- Candidates: every candidate instruction of a job (the initial one, each rewrite) is a version of one prompt
  per sweep and aspect, named by the sweep's swept keys, ``face-opt-<aspect>-sweep-alpha-beam-<parent run id[:8]>``
  (a run outside a sweep: ``face-opt-<aspect>-run-<run id[:8]>``). A version's commit message starts with the
  job's swept values (``alpha=1 beam=2: round 1: rewrite of v1 (initial) by gradient r1:initial:g0 -> r1c1``), its
  tags are the lineage (round, parent version and id, gradient id, candidate id, run id) and ``jobs`` (every job
  that wrote that text); aliases ``@initial`` and the job's best instruction, ``@best`` (``@best-alpha1-beam2``
  in a sweep).
- The final ranked set: a version of ``face-opt-<aspect>-set`` (one per distinct set; the instructions as
  ``### <id>`` blocks), its commit message starting with the job's swept values, tagged with the job, its dev- and
  held-out Spearman, the held-out fold (``heldout``: a digest of its conversations) and its size; aliased by the
  job's swept values (``@alpha2-beam1``; a run outside a sweep: ``@run-<run id[:8]>``) and ``@best``
  (``method.instructions.ref='face-opt-{aspect}-set@best'``): of the sets scored on the same held-out fold as the
  latest one, the one with the highest held-out Spearman -- the measure the runs table's headline
  (``summary.final_heldout_spearman``) reports, so the alias agrees with it -- and none (the alias removed) when
  that fold holds fewer than ``MIN_BEST_ITEMS`` items; the prompt's tag ``best`` says which and why.

A candidate is anything with the attributes of ``face.optimize.checkpoint.Candidate`` (``cid``, ``round``,
``origin``, ``gradient_id``, ``version``, ``text``).
"""

from __future__ import annotations

import re
from typing import Any

from face.tracking.prompts import best_version, prompt_versions, redact_tag, register_prompt, set_template

MIN_BEST_ITEMS = 10  # held-out items a set's Spearman needs before it ranks sets (fewer: no @best)


def prompt_name(aspect: str, suffix: str = "") -> str:
    return f"face-opt-{aspect.replace('_', '-')}{suffix}"


def alias_of(label: str) -> str:
    """An alias from a job's swept values: ``alpha=1 beam=2`` -> ``alpha1-beam2`` (letters, digits, _ and -)."""
    return re.sub(r"[^\w-]+", "-", label.replace("=", "")).strip("-")[:200]


class PromptLog:
    """The registrations of one optimization job for one aspect. ``name``: the candidates prompt of an earlier
    job, continued by a resumed optimization."""

    def __init__(self, tracker, aspect: str, name: str | None = None):
        self.enabled = bool(tracker is not None and tracker.enabled
                            and tracker.cfg.tracking.get("register_prompts", True))
        self.tracker, self.aspect, self.name = tracker, aspect, name
        if not self.enabled:  # nothing registered: the rest is never read
            return
        self.run_id, job = tracker.run_id, tracker.job_label  # job: a sweep job's swept values ("" outside a sweep)
        if name is None:
            parent, keys = tracker.sweep_parent_id, [p.split("=")[0] for p in job.split()]
            self.name = prompt_name(aspect, f"-sweep-{'-'.join([*keys, parent[:8]])}" if parent
                                    else f"-run-{self.run_id[:8]}")  # a run: the first 8 of its id
        self.label = job or tracker.run_name or self.run_id or ""
        self.best_alias = f"best-{alias_of(job)}" if job else "best"
        self.set_alias = alias_of(job) if job else f"run-{str(self.run_id)[:8]}"

    def _register(self, name: str, text: str, what: str, tags: dict[str, Any]):
        v = register_prompt(name, text, f"{self.label}: {what}", {**tags, "run_id": self.run_id, "jobs": self.label},
                            str(self.tracker.cfg.tracking.tracking_uri))
        jobs = [j for j in (v.tags or {}).get("jobs", "").split("; ") if j]
        if redact_tag(self.label) not in jobs:  # a text an earlier job of the sweep wrote too
            from mlflow import genai

            genai.set_prompt_version_tag(name, v.version, "jobs", redact_tag("; ".join([*jobs, self.label])))
        return v

    def register(self, cand: Any, parent: Any | None) -> None:
        """Registers ``cand`` (a rewrite of ``parent``, or a start) and sets its ``version``."""
        if not self.enabled:
            return
        from mlflow import genai

        parent_v = "none" if parent is None or parent.version is None else str(parent.version)
        tags = {"aspect": self.aspect, "round": str(cand.round), "candidate_id": cand.cid, "origin": cand.origin,
                "parent_version": parent_v, "parent_id": parent.cid if parent is not None else "none",
                "gradient_id": cand.gradient_id or "none"}
        what = (f"{cand.origin} instruction ({cand.cid})" if parent is None else
                f"rewrite of v{parent_v} ({parent.cid}) by gradient {cand.gradient_id} -> {cand.cid}")
        first = cand.version is None and parent is None
        cand.version = int(self._register(str(self.name), cand.text, f"round {cand.round}: {what}", tags).version)
        if first:
            genai.set_prompt_alias(str(self.name), "initial", cand.version)
            where = ("sweep", self.tracker.sweep_parent_id) if self.tracker.sweep_parent_id else ("run", self.run_id)
            for k, val in {"aspect": self.aspect, where[0]: where[1]}.items():
                genai.set_prompt_tag(str(self.name), k, redact_tag(val))

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
        genai.set_prompt_alias(set_name, self.set_alias, int(v.version))
        best, why = choose_best(prompt_versions(set_name), extra)
        if best is not None:
            genai.set_prompt_alias(set_name, "best", best)
        else:  # one left from another held-out fold would not agree with this sweep's headline (absent: a no-op)
            genai.delete_prompt_alias(set_name, "best")
        genai.set_prompt_tag(set_name, "best", redact_tag(why))
        print(f"{set_name}: {why}", flush=True)
        return f"{set_name}@{v.version}"


def choose_best(versions: list[Any], this: dict[str, str]) -> tuple[int | None, str]:
    """(the version ``@best`` names, why) among a set prompt's ``versions``, ``this`` the tags of the set just
    registered: the highest held-out Spearman of the sets on its held-out fold, or none when that fold is too small
    (or gives no finite Spearman)."""
    items = int(this.get("test_items", 0))
    if items < MIN_BEST_ITEMS:
        return None, (f"no @best: the held-out fold holds {items} items, {MIN_BEST_ITEMS} needed before a Spearman "
                      "ranks sets (more conversations: dataset.limit)")
    same = [v for v in versions if (v.tags or {}).get("heldout") == this.get("heldout")]
    best = best_version(same, "test_spearman")
    if best is None:
        return None, "no @best: no set on this held-out fold has a finite held-out Spearman"
    tags = next(v.tags for v in same if int(v.version) == best)
    return best, (f"@best = v{best} ({tags.get('jobs', '?')}): the highest held-out Spearman "
                  f"({tags['test_spearman']}) of the {len(same)} set(s) scored on held-out fold {this['heldout']} "
                  f"({items} items), the measure of the runs table's headline summary.final_heldout_spearman; "
                  "chosen on that fold, its value there is optimistic for new conversations")
