"""The FACE pipeline, live: decompose turns into particles, score them with an LLM, aggregate.

Method variants are configuration, not code: ``method.unit=whole`` is the no-particles ablation,
``method.instructions.source=initial`` the no-optimization one, ``method.scoring.estimator=logprobs`` the
G-Eval-style estimator, ``method.particles.source=released`` scores the authors' particles. ``Face`` composes its
parts (``face/pipeline/parts.py``): an instruction source, a unit source, the scoring spec (``method.scoring``,
injected whole), the aggregators. Every settings class here is typed (face/settings.py): a bad value is refused
with one line naming its dotted key, before anything runs.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Annotated, ClassVar, Literal, Sequence

import pandas as pd
from pydantic import Field

from face.aspects import Aspect
from face.data.schema import Conversation, Instruction
from face.files import atomic_open, atomic_write_text
from face.llm.config import LLMConfig
from face.methods import Inputs, MethodOutput
from face.methods.job import LLMJob
from face.pipeline.aggregate import Aggregator, aggregate
from face.pipeline.estimate import Pricing, cost_table, particles_per_turn, scale_stage, scoring_cost, totals
from face.pipeline.particles import Decomposition, ParticlesSpec, registered
from face.pipeline.parts import INSTRUCTION_SOURCES, PARTICLE_SOURCES, RELEASED_PARTICLES_PER_TURN, WholeUnits, build
from face.pipeline.records import AspectScores, ScoreSink, ScoreTally, per_conversation
from face.pipeline.scoring import ScoringSpec, plan_iter, score_stream, turns_for, units_for
from face.predictions import Predictions
from face.secrets import redact
from face.settings import nested, settings


@settings("method.instructions", conf="method/face.yaml:instructions")
class InstructionsSpec:
    # released: the authors' top-16 per aspect | initial: the paper's generic initial instruction ("FACE w/o
    # train") | initial_aspect: our aspect-specific initial instructions | file: a JSON file (e.g. an optimizer's)
    # | mlflow: an optimized set in MLflow | module.Class: a class of your own (face/pipeline/parts.py)
    source: Annotated[str, registered(INSTRUCTION_SOURCES)]
    file: str | None  # JSON {aspect: [{instruction_id, text}]} for source=file
    max: int | None = Field(ge=1)  # use the first N (by rank); None = all
    ref: str | None  # source=mlflow: NAME@VERSION ({aspect} allowed in NAME), prompts:/NAME/V or runs:/RUN_ID


@settings("method.cost", conf="method/face.yaml:cost")
class CostSpec:
    """Typical answer sizes for the estimate printed before a live run."""

    score_output_tokens: int = Field(ge=0)  # {"score": k} alone
    # assumed length of a reasoned scoring reply (max_tokens bounds it)
    score_reasoning_tokens: int = Field(ge=0)
    decompose_output_tokens: int = Field(ge=0)  # the JSON list alone
    decompose_reasoning_tokens: int = Field(ge=0)  # assumed length of a reasoned decomposition reply

    def score_tokens(self, reasoning: bool) -> int:
        return self.score_reasoning_tokens if reasoning else self.score_output_tokens

    def decompose_tokens(self, reasoning: bool) -> int:
        return self.decompose_reasoning_tokens if reasoning else self.decompose_output_tokens


RUN_SETTINGS = "run_settings.json"  # which LLM and settings produced a run's scores (read by `face report`)


def write_run_settings(path: Path, label: str, llm: LLMConfig, method: Face,
                       instructions: dict[str, list[Instruction]], aspects: Sequence[Aspect] = ()) -> Path:
    """The LLM, its sampling settings and every instruction's text, beside the scores: a report rebuilt later
    (``face report``) names the LLM and shows what each instruction id asked. Redacted (face.secrets)."""
    sc = method.scoring
    record = {"label": label,
              "llm": {"model": llm.model, "backend": llm.backend, "estimator": sc.estimator, "n": sc.n,
                      "temperature": sc.temperature, "reasoning": sc.reasoning, "unit": method.unit},
              "instructions": {a: {i.instruction_id: i.text for i in ins} for a, ins in instructions.items()},
              "aspects": [{"name": a.name, "level": a.level, "scale": list(a.scale), "definition": a.definition}
                          for a in aspects]}
    return atomic_write_text(path, redact(json.dumps(record, indent=1, ensure_ascii=False)) + "\n")


@settings("method", conf="method/face.yaml")
class Face:
    """FACE live. Config: ``conf/method/face.yaml``; every key is a field here."""

    uses_llm: ClassVar[bool] = True  # the LLM settings, cache and server are checked before anything runs
    name: str
    unit: Literal["particle", "whole"]  # whole: score whole turns / dialogues (ablation_no_particles)
    particles: Annotated[ParticlesSpec, nested(ParticlesSpec)]
    instructions: Annotated[InstructionsSpec, nested(InstructionsSpec)]
    scoring: Annotated[ScoringSpec, nested(ScoringSpec)]
    # a turn without particles: drop (the authors: no prediction for it; a conversation without any particle gets
    # no dialogue prediction either) | min (it scores the scale's lowest)
    empty_turn: Literal["drop", "min"]
    unlabelled_turns: Literal["skip", "score"]  # skip (the authors) | score: turns without their label
    instruction_agg: Aggregator
    particle_agg: Aggregator
    cost: Annotated[CostSpec, nested(CostSpec)]

    def __post_init__(self) -> None:
        # the parts, built from the settings above (face/pipeline/parts.py)
        ins = self.instructions
        self.source = build(INSTRUCTION_SOURCES, ins.source, "instruction source", {"file": ins.file, "ref": ins.ref})
        self.units = WholeUnits() if self.unit == "whole" else build(
            PARTICLE_SOURCES, self.particles.source, "method.particles.source", {"spec": self.particles})

    def required_files(self, dataset, aspects: Sequence[Aspect]) -> list[str]:
        return self.units.files(dataset) + self.source.files(dataset, aspects)

    def instruction_set(self, data_dir: Path, aspect: Aspect) -> list[Instruction]:
        """The instructions an aspect is scored under, as the unit source words them (``unit=whole``: of turns or
        dialogues instead of particles): the first ``method.instructions.max`` of ``source_aspect``'s."""
        ins = self.source.load(data_dir, self.source_aspect(aspect.name))[: self.instructions.max]
        return [self.units.reword(i, aspect) for i in ins]

    def source_aspect(self, target: str) -> str:
        """The aspect whose instructions score ``target`` (itself; FaceTransfer maps it)."""
        return target

    def describe(self, llm: LLMConfig, instructions: dict[str, list[Instruction]]) -> str:
        n_instr, sc = sorted({len(v) for v in instructions.values()}), self.scoring
        parts = [f"FACE live — LLM: {llm.model} ({llm.backend})", self.units.describe(),
                 f"instructions: {self.source.name} × {'/'.join(map(str, n_instr))}", sc.scorer.describe(sc),
                 ("reasoning before the score" if sc.reasoning else "score only, no reasoning")
                 + f"; invalid answers: {sc.draws.rounds} rounds of draws, then {sc.fallback}"]
        if sc.scorer.reads_logprobs and sc.logprobs_missing != "parsed":
            parts.append(f"answers without logprobs: {sc.logprobs_missing}")
        if llm.backend == "local":
            parts.append("TINY LOCAL MODEL: pipeline check only, no judging signal")
        elif llm.backend == "scripted":
            parts.append("SCRIPTED TEST SERVER: canned answers, not judgements")
        return "; ".join(parts)

    def estimate(self, inputs: Inputs, instructions: dict[str, list[Instruction]],
                 decomps: dict[tuple[str, int], Decomposition] | None) -> pd.DataFrame:
        """Cost of this run before sending anything. Before the decomposition ``decomps`` is the proxy: the scoring
        stages assume a particle rate and say which (``particles_per_turn``); after it, the actual particles."""
        convs, ds = inputs.convs, inputs.dataset
        pricing = Pricing.of(inputs.needs_llm("method=face"))
        by_id = {c.conv_id: c for c in convs}
        n_turns = sum(len(c.evaluated_turns()) for c in convs)
        stages = self.units.cost_stages(convs, ds, pricing, self.cost.decompose_tokens(self.particles.reasoning))
        decomps = decomps or {}
        proxy = [d for d in decomps.values() if d.source in ("proxy", "released")]
        whole_turn_proxy = any(d.source == "proxy" for d in proxy)
        for a in inputs.aspects:
            units = units_for(a, convs, decomps, self.units.unit, self.unlabelled_turns)
            stage = scoring_cost(a.name, units, instructions[a.name], by_id, n_turns, self.scoring,
                                 self.cost.score_tokens(self.scoring.reasoning), pricing, ds.judged)
            if whole_turn_proxy:  # one unit per turn stands in for the particles that will exist
                stage = scale_stage(stage, RELEASED_PARTICLES_PER_TURN, RELEASED_PARTICLES_PER_TURN)
            elif self.units.decomposes and proxy:
                stage.particles_per_turn = particles_per_turn(decomps)
            stages.append(stage)
        return cost_table(stages)

    def proxy(self, inputs: Inputs) -> dict[tuple[str, int], Decomposition]:
        """The particles known before anything is sent (the estimate's particle counts)."""
        return self.units.proxy(inputs.dataset, inputs.data_dir, inputs.convs)

    def predict(self, inputs: Inputs) -> MethodOutput:
        run_dir, convs = inputs.run_dir, inputs.convs
        instructions = {a.name: self.instruction_set(inputs.data_dir, a) for a in inputs.aspects}
        lcfg = inputs.needs_llm("method=face")
        job = LLMJob(lcfg, run_dir, self.describe(lcfg, instructions), summary=inputs.summary)
        proxy = self.proxy(inputs)
        costs = self.estimate(inputs, instructions, proxy)
        job.gate(costs, self.units.proxy_note(inputs.dataset, proxy))
        inputs.register_instructions(self.source.name, lambda a: instructions[a.name], self.units.wording)
        if job.dry_run:
            return job.dry_run_output()
        write_run_settings(run_dir / RUN_SETTINGS, job.label, lcfg, self, instructions, inputs.aspects)
        by_id = {c.conv_id: c for c in convs}
        with job.client() as client:
            decomps = self.units.decompositions(client, convs, inputs.dataset, proxy, lcfg.supports_json_schema)
            rate = costs["particles_per_turn"].dropna()
            if self.units.decomposes and decomps is not None and len(rate):  # the scoring counts at the actual rate
                after = self.estimate(inputs, instructions, decomps)
                job.restate(totals(costs, "score:"), totals(after, "score:"), float(rate.iloc[0]),
                            particles_per_turn(decomps))
            parts, tally = [], ScoreTally()
            scores_file = run_dir / "particle_scores.jsonl"
            with ScoreSink(scores_file, decomps) as sink:
                for a in inputs.aspects:  # aggregated conversation by conversation as the scores arrive
                    units = units_for(a, convs, decomps or {}, self.units.unit, self.unlabelled_turns)
                    n_instr = len(instructions[a.name])
                    scores = AspectScores(sink, tally, per_conversation(units, n_instr), functools.partial(
                        aggregate, levels=inputs.levels, instruction_agg=self.instruction_agg,
                        particle_agg=self.particle_agg))
                    planned = plan_iter(units, instructions[a.name], by_id, self.scoring,
                                        lcfg.supports_json_schema, inputs.dataset.judged)
                    score_stream(client, planned, self.scoring, scores.add, desc=f"scoring {a.name}",
                                 total=len(units) * n_instr)
                    del units, planned
                    parts.append(scores.result())
            job.finish(client)
        preds = Predictions(pd.concat([p.turn for p in parts], ignore_index=True),
                            pd.concat([p.dialogue for p in parts], ignore_index=True))
        if decomps is not None and self.empty_turn == "min":
            preds, n_filled = fill_empty(preds, inputs.aspects, convs, self.unlabelled_turns)
            job.metrics["predictions.empty_filled_with_min"] = n_filled
        artifacts = [*job.artifacts, scores_file]
        if decomps is not None:
            artifacts.append(write_particles(decomps, convs, run_dir / "particles.jsonl"))
            job.metrics["particles.per_turn"] = particles_per_turn(decomps)
            job.metrics["particles.fallback_turns"] = sum(d.fallback is not None for d in decomps.values())
        job.metrics.update(tally.metrics(self.scoring.scorer.reads_logprobs))
        # the per-particle scores are in particle_scores.jsonl (not held in memory: a paper-size run has 0.7 M)
        return MethodOutput(preds, None, job.label, artifacts, job.metrics)


def fill_empty(preds: Predictions, aspects: Sequence[Aspect], convs: Sequence[Conversation],
               unlabelled: str = "skip") -> tuple[Predictions, int]:
    """``method.empty_turn=min``: every scored turn / conversation without a prediction (no particles) gets the
    scale's lowest score (the authors instead leave such turns and conversations without a prediction)."""
    turn, dial = preds.turn, preds.dialogue
    have_t = set(zip(turn["aspect"], turn["conv_id"], turn["turn_ind"]))
    have_d = set(zip(dial["aspect"], dial["conv_id"]))
    add_t = [(a.name, c.conv_id, t.turn_ind, float(a.low)) for a in aspects if a.level == "turn"
             for c in convs for t in turns_for(a, c, unlabelled) if (a.name, c.conv_id, t.turn_ind) not in have_t]
    add_d = [(a.name, c.conv_id, float(a.low)) for a in aspects if a.level == "dialogue"
             for c in convs if (a.name, c.conv_id) not in have_d]
    if add_t:
        turn = pd.concat([turn, pd.DataFrame(add_t, columns=turn.columns)], ignore_index=True)
    if add_d:
        dial = pd.concat([dial, pd.DataFrame(add_d, columns=dial.columns)], ignore_index=True)
    return Predictions(turn, dial), len(add_t) + len(add_d)


def write_particles(decomps: dict[tuple[str, int], Decomposition], convs: Sequence[Conversation], path: Path) -> Path:
    """Particles in the authors' JSON Lines format (+ our provenance fields): every decomposed evaluated turn's (a unit
    source of your own may leave out the turns no aspect scores)."""
    with atomic_open(path) as f:
        for c in convs:
            for t in c.evaluated_turns():
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
