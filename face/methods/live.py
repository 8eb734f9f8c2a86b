"""The FACE pipeline, live: decompose turns into particles, score them with an LLM, aggregate.

Method variants are configuration, not code: ``method.unit=whole`` is the no-particles ablation,
``method.instructions.source=initial`` the no-optimization one, ``method.estimator=logprobs`` the
G-Eval-style estimator, ``method.particles.source=released`` scores the authors' particles.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Sequence

import pandas as pd
from omegaconf import DictConfig, OmegaConf

from face.aggregate import Predictions, aggregate
from face.cost import cost_table, decomposition_cost, particles_per_turn, scoring_cost
from face.data import RELEASED_PARTICLES, released_instructions_file
from face.data.errors import DataError
from face.data.io import check_type, field, read_json
from face.data.released import SCORE_COLUMNS, load_instructions, load_released_particles
from face.data.schema import Conversation, Instruction
from face.methods import MethodOutput
from face.particles import Decomposition, decompose, from_released
from face.prompts import initial_instruction
from face.report.tables import print_table
from face.scoring import plan, records_frame, score, units_for

log = logging.getLogger(__name__)
INSTRUCTION_SOURCES = ("released", "initial", "file")


def required_files(cfg: DictConfig, aspects: Sequence[str]) -> list[str]:
    files = [RELEASED_PARTICLES]  # the authors' particles, or the particle-count proxy of the cost estimate
    if cfg.method.instructions.source == "released":
        files += [released_instructions_file(a) for a in aspects]
    return files


def instruction_set(cfg: DictConfig, aspect: str) -> list[Instruction]:
    """The instructions an aspect is scored under (released top-16, our initial one, or a file)."""
    spec = cfg.method.instructions
    if spec.source == "released":
        out = load_instructions(Path(cfg.paths.data_dir) / released_instructions_file(aspect))
    elif spec.source == "initial":
        out = [Instruction("initial", initial_instruction(aspect), 1, "initial")]
    elif spec.source == "file":
        path = Path(spec.file or "")
        raw = check_type(read_json(path), dict, path, "top level")
        items = check_type(raw.get(aspect, []), list, path, aspect)
        out = [Instruction(field(x, "instruction_id", str, path, f"{aspect}[{i}]"),
                           field(x, "text", str, path, f"{aspect}[{i}]"), i + 1, "file") for i, x in enumerate(items)]
        if not out:
            raise DataError(path, f"no instructions for aspect {aspect!r}")
    else:
        raise ValueError(f"unknown instruction source {spec.source!r}; choose from {INSTRUCTION_SOURCES}")
    return out[: spec.max] if spec.get("max") else out


def llm_config(cfg: DictConfig):
    from face.llm import LLMConfig

    return LLMConfig.from_dict(OmegaConf.to_container(cfg.llm, resolve=True))


def describe(cfg: DictConfig, instructions: dict[str, list[Instruction]]) -> str:
    m, lc = cfg.method, cfg.llm
    n_instr = sorted({len(v) for v in instructions.values()})
    parts = [f"FACE live — LLM: {lc.model} ({lc.backend})"]
    if m.unit == "whole":
        parts.append("unit: whole turn / dialogue (no particles)")
    else:
        parts.append(f"particles: {m.particles.source}" + (f" (k={m.particles.k} samples, plurality vote)"
                                                             if m.particles.source == "llm" else ""))
    parts.append(f"instructions: {m.instructions.source} × {'/'.join(map(str, n_instr))}")
    parts.append(f"estimator: {m.estimator}" + (f" (n={m.n}, T={m.temperature})" if m.estimator == "sampling"
                                                 else f" (top {m.top_logprobs} logprobs)"))
    if lc.backend == "local":
        parts.append("TINY LOCAL MODEL: pipeline check only, no judging signal")
    return "; ".join(parts)


def estimate(cfg: DictConfig, convs: Sequence[Conversation], aspects: Sequence[str],
             instructions: dict[str, list[Instruction]], proxy: dict[tuple[str, int], Decomposition]) -> pd.DataFrame:
    """Cost of this run before sending anything (particle counts from ``proxy`` when not yet decomposed)."""
    m, lc = cfg.method, cfg.llm
    by_id = {c.conv_id: c for c in convs}
    n_turns = sum(len(c.assistant_turns()) for c in convs)
    stages = []
    if m.unit == "particle" and m.particles.source == "llm":
        stages.append(decomposition_cost(convs, m.particles.k, lc.n_per_request, cfg.cost.decompose_output_tokens,
                                         lc.price_input_per_mtok, lc.price_output_per_mtok))
    for a in aspects:
        units = units_for(a, convs, proxy, m.unit)
        stages.append(scoring_cost(a, units, instructions[a], by_id, n_turns, m.estimator, m.n, lc.n_per_request,
                                   cfg.cost.score_output_tokens, lc.price_input_per_mtok, lc.price_output_per_mtok))
    return cost_table(stages)


def _released_decomps(cfg: DictConfig, convs: Sequence[Conversation]) -> dict[tuple[str, int], Decomposition]:
    ids = {c.conv_id for c in convs}
    rows = [r for r in load_released_particles(Path(cfg.paths.data_dir) / RELEASED_PARTICLES) if r.conv_id in ids]
    decomps = from_released(rows)
    missing = [(c.conv_id, t.turn_ind) for c in convs for t in c.assistant_turns() if (c.conv_id, t.turn_ind)
               not in decomps]
    if missing:
        log.warning("%d assistant turns have no released particles (e.g. %s); they get none", len(missing), missing[0])
        for key in missing:
            decomps[key] = Decomposition(key[0], key[1], (), "released", fallback="no_released_particles")
    return decomps


def write_particles(decomps: dict[tuple[str, int], Decomposition], convs: Sequence[Conversation], path: Path) -> Path:
    """Particles in the authors' JSON Lines format (+ our provenance fields)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for c in convs:
            for t in c.assistant_turns():
                d = decomps.get((c.conv_id, t.turn_ind))
                if d is None:
                    continue
                f.write(json.dumps({
                    "conv_id": c.conv_id, "turn_ind": t.turn_ind, "assistant_utterance": t.utterance,
                    "particles": [{"particle_ind": i, "dialogue_act": p.dialogue_act, "particle": p.mention,
                                   "user_feedback": p.user_feedback} for i, p in enumerate(d.particles)],
                    "source": d.source, "n_valid_samples": d.n_valid, "n_samples": d.n_samples, "votes": d.votes,
                    "fallback": d.fallback}) + "\n")
    return path


def write_detail(detail: pd.DataFrame, decomps: dict[tuple[str, int], Decomposition] | None, path: Path) -> Path:
    """Per-particle file: every score with its samples, probability mass, fallback and the particle itself."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for r in detail.to_dict("records"):
            p = None
            if decomps is not None and r["particle_ind"] >= 0:
                p = decomps[(r["conv_id"], r["turn_ind"])].particles[r["particle_ind"]]
            r["particle"] = None if p is None else {"dialogue_act": p.dialogue_act, "mention": p.mention,
                                                    "user_feedback": p.user_feedback}
            r["score"] = None if pd.isna(r["score"]) else r["score"]
            f.write(json.dumps(r, default=str) + "\n")
    return path


def predict(cfg: DictConfig, convs: Sequence[Conversation], aspects: Sequence[str], tracker=None) -> MethodOutput:
    from face.llm import make_client

    m = cfg.method
    run_dir = Path(cfg.paths.output_dir)
    instructions = {a: instruction_set(cfg, a) for a in aspects}
    label = describe(cfg, instructions)
    released = _released_decomps(cfg, convs)
    costs = estimate(cfg, convs, aspects, instructions, released)
    costs_path = run_dir / "cost_estimate.csv"
    costs_path.parent.mkdir(parents=True, exist_ok=True)
    costs.to_csv(costs_path, index=False)
    proxy_note = ("" if m.unit == "whole" or m.particles.source == "released" else
                  f" (particle counts: the released particles' {particles_per_turn(released):.2f} per turn)")
    print_table(f"Cost estimate before sending anything{proxy_note} — {label}", costs, 2)
    if tracker is not None:
        for a, ins in instructions.items():
            tracker.register_instructions(a, ins, m.instructions.source)
    lcfg = llm_config(cfg)
    if lcfg.dry_run:
        return MethodOutput(Predictions.empty(), label=label + " — DRY RUN, nothing sent", artifacts=[costs_path],
                            metrics={f"estimate.{r.stage}.calls": r.calls for r in costs.itertuples()}, dry_run=True)
    by_id = {c.conv_id: c for c in convs}
    with make_client(lcfg) as client:
        decomps = None
        if m.unit == "particle":
            if m.particles.source == "released":
                decomps = released
            elif m.particles.source == "llm":
                decomps = decompose(client, convs, m.particles.k, m.particles.max_extra, lcfg.supports_json_schema,
                                    m.particles.temperature, m.particles.max_tokens)
            else:
                raise ValueError(f"unknown particle source {m.particles.source!r}; choose llm or released")
        records = []
        for a in aspects:
            units = units_for(a, convs, decomps or {}, m.unit)
            planned = plan(units, instructions[a], by_id, m.estimator, m.n, lcfg.supports_json_schema, m.temperature,
                           m.max_tokens, m.top_logprobs, m.order)
            records += score(client, planned, m.estimator, desc=f"scoring {a}")
        usage_path = client.usage.write_artifact(run_dir / "llm_usage.json")
        metrics = client.usage.mlflow_metrics()
    detail = records_frame(records)
    scores = detail.dropna(subset=["score"])[SCORE_COLUMNS]
    preds = aggregate(scores, m.instruction_agg, m.particle_agg)
    artifacts = [costs_path, usage_path, write_detail(detail, decomps, run_dir / "particle_scores.jsonl")]
    if decomps is not None:
        artifacts.append(write_particles(decomps, convs, run_dir / "particles.jsonl"))
        metrics["particles.per_turn"] = particles_per_turn(decomps)
        metrics["particles.fallback_turns"] = sum(d.fallback is not None for d in decomps.values())
    metrics["scores.total"] = len(detail)
    metrics["scores.without_valid_answer"] = int(detail["score"].isna().sum())
    metrics["scores.fallbacks"] = int(detail["fallback"].notna().sum())
    if m.estimator == "logprobs":
        mass = detail["valid_mass"].dropna()
        metrics["scores.mean_valid_mass"] = float(mass.mean()) if len(mass) else 0.0
    return MethodOutput(preds, detail, label, artifacts, metrics)
