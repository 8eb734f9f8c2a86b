"""Experiment ``optimize_instructions``: the optimization loop with the live scorer, per aspect, on the
training folds of the dataset; the final set and the initial instruction are then scored on the held-out
fold, side by side.

Writes (``ctx.out_dir``): ``instructions.json`` (the format ``method.instructions.source=file`` reads),
``trajectory.csv``, ``heldout.csv|md``, ``gradients.jsonl``, ``cost_estimate.csv``, ``figures/trajectory.png``;
the checkpoint is ``<run dir>/checkpoint/<aspect>.json`` (``optimizer.resume=<that dir>`` continues it).
"""

from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import asdict
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd
from omegaconf import DictConfig

from face.data.split import Split, split_conversations
from face.experiments.common import ConfigError, Parts, Plan, experiment, own_settings
from face.experiments.result import ExperimentResult, Table
from face.llm.usage import estimate_input_tokens
from face.methods.job import LLMJob, estimated_cost, estimated_size
from face.optimize import checkpoint
from face.optimize.beam import BeamSearch, StopOptimization
from face.optimize.checkpoint import Candidate, OptState
from face.optimize.config import OptimizerConfig
from face.optimize.estimate import CostInputs, estimate, paper_setting
from face.optimize.items import correlation, indices_of, items_for
from face.optimize.prompt_log import MIN_BEST_ITEMS, PromptLog
from face.optimize.scorers import LiveScorer
from face.optimize.writer import Writer
from face.pipeline.estimate import COUNTS, Pricing
from face.pipeline.method import Face
from face.pipeline.scoring import score_messages, units_for
from face.prompts import generic_instruction, initial_instruction
from face.tracking.names import metric_name


def optimizer_config(cfg: DictConfig) -> OptimizerConfig:
    if "optimizer" not in cfg:
        raise ConfigError("no optimizer config: add `- /optimizer: paper` to the experiment's defaults")
    return own_settings(OptimizerConfig, cfg, "optimizer")  # ConfigError if bad


def start_text(ocfg: OptimizerConfig, aspect: str) -> str:
    return generic_instruction(aspect) if ocfg.start == "initial" else initial_instruction(aspect)


def parts(cfg: DictConfig) -> Parts:
    """Nothing beside the skeleton's parts; the optimizer's settings are checked with the others, before anything is
    written."""
    optimizer_config(cfg)
    return Parts()


def run(run_plan: Plan) -> ExperimentResult:
    ocfg = optimizer_config(run_plan.cfg)
    with experiment(run_plan) as ctx:
        method, inputs = ctx.method, ctx.inputs()  # its LLM: checked by the runner
        if not isinstance(method, Face) or method.units.unit != "particle":
            raise ConfigError("optimize_instructions needs method=face with method.unit=particle")
        split = dev_split(ctx.convs, ocfg)
        ctx.tracker.set_tags({f"split.{side}": len(getattr(split, side)) for side in ("train", "dev", "test")})
        plans = plan_aspects(ctx, split)
        heldout = hashlib.sha256(",".join(sorted(split.test)).encode()).hexdigest()[:12]
        job, costs = _gate(ctx, ocfg, plans, method, inputs)
        if job.dry_run:
            return ctx.result(dry_run=True, extra={"costs": costs})
        ckpt_dir = Path(ocfg.resume) if ocfg.resume else ctx.run_dir / "checkpoint"
        if ocfg.resume and not ckpt_dir.is_dir():
            raise ConfigError(f"optimizer.resume={ocfg.resume}: no such checkpoint directory")
        ctx.tracker.set_tags({"optimizer.checkpoint": str(ckpt_dir),
                              **({"optimizer.resumed_from": ocfg.resume} if ocfg.resume else {})})
        try:
            with job.client() as client:
                decomps = method.units.decompositions(client, ctx.convs, ctx.dataset, method.proxy(inputs),
                                                      job.lcfg.supports_json_schema)
                done = [_optimize(ctx, ocfg, plan, client, decomps, ckpt_dir, heldout) for plan in plans.values()]
                job.finish(client)
        except StopOptimization as stop:
            msg = (f"{stop}: checkpoint in {ckpt_dir}; continue with optimizer.resume={ckpt_dir} "
                   "(and the same settings)")
            print(msg, flush=True)
            ctx.tracker.set_tags({"stop_reason": msg})
            return ctx.result(stopped=True, files={"checkpoint": ckpt_dir})
        except BaseException:
            print(f"The optimization stopped; its checkpoint (after the last completed round) is in {ckpt_dir}: "
                  f"continue with optimizer.resume={ckpt_dir}", file=sys.stderr, flush=True)
            raise
        return _report(ctx, ocfg, done, job.metrics)


def dev_split(convs, ocfg: OptimizerConfig) -> Split:
    """The conversation-level split; when the per-system dev share rounds to no conversation (a few conversations
    over many systems, e.g. ``dataset.limit=8``), a dev fold drawn from the optimization conversations instead
    (``optimizer.split.dev_fraction`` of them, at least one), said on the console (the per-round beam correlation needs
    one)."""
    sp = ocfg.split
    split = split_conversations(convs, sp.folds, sp.fold, sp.dev_fraction, sp.seed)
    if split.dev or sp.dev_fraction <= 0 or len(split.train) < 2:
        return split
    k = max(1, int(round(sp.dev_fraction * len(split.train))))
    order = np.random.default_rng([sp.seed, 2]).permutation(len(split.train))
    dev = tuple(sorted(split.train[i] for i in order[:k]))
    print(f"optimizer.split: a dev share of {sp.dev_fraction} per system gives no dev conversation among these "
          f"{len(split.train)}; dev = {k} of them drawn at random (seed {sp.seed}), train = the other "
          f"{len(split.train) - k}", flush=True)
    return Split(tuple(c for c in split.train if c not in dev), dev, split.test)


def plan_aspects(ctx, split: Split) -> dict[str, tuple]:
    """aspect -> (aspect, items, item indices per side); refused (before anything is sent) when an aspect has too
    few training items, and said when its held-out fold is too small for its set to become ``@best``."""
    plans = {}
    for a in ctx.aspects:
        items = items_for(a, ctx.convs)
        idx = {side: indices_of(items, getattr(split, side)) for side in ("train", "dev", "test")}
        if len(idx["train"]) < 3:
            raise ConfigError(f"{a.name}: only {len(idx['train'])} labelled training items in {ctx.subset}; "
                              "use more conversations (dataset.limit) or fewer folds")
        if len(idx["test"]) < MIN_BEST_ITEMS:
            print(f"{a.name}: {len(idx['test'])} held-out item(s), {MIN_BEST_ITEMS} needed before a Spearman ranks "
                  f"sets: no set of {a.name} will be @best (more conversations: dataset.limit)", flush=True)
        plans[a.name] = (a, items, idx)
    return plans


def _gate(ctx, ocfg: OptimizerConfig, plans: dict, method, inputs) -> tuple[LLMJob, pd.DataFrame]:
    """The cost estimate (this run and the paper's setting) and the spending gate; the estimate is logged."""
    pricing, proxy, estimates = Pricing.of(inputs.llm), method.proxy(inputs), []
    convs, reasoning = {c.conv_id: c for c in ctx.convs}, method.scoring.reasoning
    for a, items, idx in plans.values():
        # the sizes of the aspect's data and prompts: input tokens measured on up to 40 of its scoring prompts
        units = units_for(a, ctx.convs, proxy, "particle")
        sample = [score_messages(u, convs[u.conv_id], start_text(ocfg, a.name), ctx.dataset.judged, reasoning)
                  for u in units[:: max(1, len(units) // 40)][:40]]
        per_item = len(units) / max(len(items) if a.level == "turn" else len(ctx.convs), 1)
        ci = CostInputs(len(idx["train"]), len(idx["dev"]) + len(idx["test"]), per_item, method.scoring.samples,
                        float(np.mean([estimate_input_tokens(m) for m in sample])) if sample else 0.0,
                        method.cost.score_tokens(reasoning))
        for label, oc in (("this run", ocfg), ("paper setting", paper_setting(ocfg))):
            estimates.append(estimate(oc, ci, pricing).assign(aspect=a.name, setting=label))
    costs = pd.concat(estimates, ignore_index=True)
    summary = (costs[costs["stage"].isin(["per round", "total"])]
               .groupby(["setting", "stage"], sort=False)[[*COUNTS, "cost_usd"]].sum().reset_index())
    job = LLMJob(inputs.llm, ctx.run_dir, f"the optimizer, {len(ctx.aspects)} aspects, {inputs.llm.model}",
                 summary=ctx.summary)
    this_run = summary[summary["setting"] == "this run"]
    job.gate(summary, " (scoring counts are upper bounds, cached pairs are free; paper setting: α=β=b=4, c=1, "
             "minibatch 20)", estimated_usd=estimated_cost(this_run), detail=costs, size=estimated_size(this_run))
    ctx.tracker.log_artifacts(job.artifacts, "optimizer")
    ctx.tracker.log_metrics({f"estimate.{r.setting.replace(' ', '_')}.{r.stage.replace(' ', '_')}.samples": r.samples
                             for r in summary.itertuples()})
    return job, costs


def _optimize(ctx, ocfg: OptimizerConfig, plan: tuple, client, decomps, ckpt_dir: Path,
              heldout: str) -> tuple[dict, OptState, list[Candidate]]:
    """One aspect: the beam search from its start (or its checkpoint), then the final set on dev and test (its row of
    the held-out table, the loop's state, the final set). ``heldout``: a digest of the held-out conversations (sets
    are ranked for @best only on the same fold)."""
    a, items, idx = plan
    method, judged, json_schema = ctx.method, ctx.dataset.judged, ctx.llm.supports_json_schema
    empty = float(a.low) if method.empty_turn == "min" else None  # the pipeline's rule for particle-less items
    scorer = LiveScorer(client, a, ctx.convs, items, decomps, method.scoring, json_schema, judged, empty_score=empty,
                        example_chars=ocfg.writer.example_chars)
    idx = {side: np.intersect1d(ix, scorer.covered()) for side, ix in idx.items()}  # an item without one: not scored
    state = checkpoint.load(ckpt_dir, a.name) if ocfg.resume else None
    prompts = PromptLog(ctx.tracker, a.name, state.prompt_name if state is not None else None)
    loop = BeamSearch(ocfg, a, scorer, idx["train"], idx["dev"], Writer(client, a, ocfg, json_schema, judged), prompts,
                      str(ckpt_dir), lambda: (client.usage.requests, client.usage.spent_usd))
    # what the optimization of the aspect depends on (compared when resuming)
    config = {"optimizer": ocfg.fingerprint_fields(), "aspect": a.name,
              "conversations": sorted(c.conv_id for c in ctx.convs),
              "llm": {"model": ctx.llm.model, "backend": ctx.llm.backend},
              "scoring": json.loads(json.dumps(asdict(method.scoring))), "particles": method.particles.source}
    if state is not None:
        checkpoint.check_same(state, config, ckpt_dir)
        print(f"{a.name}: resuming after round {state.round} from {ckpt_dir}", flush=True)
    else:
        state = loop.new_state([Candidate("initial", start_text(ocfg, a.name))], config)
        checkpoint.save(state, ckpt_dir)
    state = loop.run(state)
    final = loop.final_set(state)
    row = _evaluate(a, idx, state, final, scorer, loop.gold)
    ref = prompts.register_set(final, {"test_spearman": f"{row['test_final_spearman']:.4f}",
                                       "dev_spearman": f"{row['dev_final_spearman']:.4f}",
                                       "test_items": str(row["test_items"]), "heldout": heldout})
    if ref:
        ctx.tracker.set_tags({f"prompt.{a.name}": ref})
    return row, state, final


def _evaluate(a, idx: dict, state, final: list, scorer, gold) -> dict:
    """The final set, its best instruction and the initial one on the held-out fold; the final set on dev."""
    test, dev = idx["test"], idx["dev"]
    row = {"aspect": a.name, "level": a.level, "train_items": len(idx["train"]), "dev_items": len(dev),
           "test_items": len(test), "candidates": len(state.candidates), "final_size": len(final)}
    for coef in ("spearman", "pearson"):
        for label, cands in (("final", final), ("best", final[:1]), ("initial", [state.candidates["initial"]])):
            row[f"test_{label}_{coef}"] = correlation(scorer.predict_set(cands, test), gold[test], coef)
        row[f"dev_final_{coef}"] = correlation(scorer.predict_set(final, dev), gold[dev], coef)
    row["pulls"] = sum(len(v) for v in state.rewards.values())
    row["llm_calls"], row["cost_usd"] = state.llm_calls, state.cost_usd
    return row


def _report(ctx, ocfg, done: list[tuple[dict, OptState, list[Candidate]]], job_metrics: dict) -> ExperimentResult:
    """The held-out table, the final sets (``instructions.json``: what ``method.instructions.source=file`` and a
    ``runs:/<run id>`` reference read), the trajectory and the gradients."""
    from face.report.optimizer_figures import trajectory
    from face.report.tables import to_markdown

    rows, llm = [row for row, _, _ in done], ctx.llm
    res, traj = pd.DataFrame(rows), pd.DataFrame([{"aspect": s.aspect, **t} for _, s, _ in done for t in s.trajectory])
    sets = {s.aspect: [{"instruction_id": c.cid, "text": c.text, "rank": i + 1, "mean_reward": s.mean_reward(c.cid),
                        "pulls": len(s.rewards[c.cid]), "round": c.round, "parent": c.parent,
                        "prompt_version": c.version} for i, c in enumerate(final)] for _, s, final in done}
    note = (f"LLM {llm.model} ({llm.backend}); {ctx.subset}; optimized on the train fold(s), "
            f"'test' = held-out fold {ocfg.split.fold} of {ocfg.split.folds} (conversation level, stratified by "
            f"system, seed {ocfg.split.seed}); α={ocfg.alpha} β={ocfg.beta} b={ocfg.beam} c={ocfg.ucb_c} "
            f"rounds={ocfg.rounds} pulls/round={ocfg.pulls}")
    shown = res[["aspect", "level", "test_items", "candidates", "test_initial_spearman", "test_final_spearman",
                 "test_best_spearman", "dev_final_spearman", "pulls", "llm_calls"]]
    metrics = report_metrics(rows)
    return ctx.result(
        results=res, metrics={**job_metrics, **metrics},
        tables={"heldout": Table(res, f"Held-out correlation, final set vs initial instruction. {note}", 4),
                "trajectory": Table(traj)},
        texts={"instructions.json": json.dumps(sets, indent=1),
               "gradients.jsonl": "".join(json.dumps({"aspect": s.aspect, **g}, default=str) + "\n"
                                          for _, s, _ in done for g in s.gradients)},
        figures={"figures/trajectory.png": partial(trajectory, traj, ocfg.reward,
                                                   "Instruction optimizer: reward by round", note)},
        shown=[(f"Held-out correlation: final set vs initial instruction. {note}", shown, 3)],
        description=f"**Instruction optimizer**: held-out Spearman of the final set vs the initial instruction (mean "
                    f"over aspects: {metrics['summary.final_heldout_spearman']:.3f} vs "
                    f"{metrics['summary.initial_heldout_spearman']:.3f}).\n\n{note}\n\n{to_markdown(shown, 3)}")


def report_metrics(rows: list[dict]) -> dict[str, float]:
    """The headline (held-out Spearman of the final set and of the initial instruction, mean over aspects, and
    the gain), each aspect's held-out Spearman of its final set, and (``numbers.json``) every other number."""
    res = pd.DataFrame(rows)
    metrics: dict[str, float] = {}
    for r in rows:
        metrics[metric_name(r["level"], r["aspect"], "heldout", "spearman")] = r["test_final_spearman"]
        metrics.update({f"heldout.{r['aspect']}.{k}": v for k, v in r.items() if k.startswith(("test_", "dev_"))})
        metrics.update({f"optimizer.{r['aspect']}.{k}": r[k] for k in ("pulls", "llm_calls")})
    final, initial = float(np.nanmean(res["test_final_spearman"])), float(np.nanmean(res["test_initial_spearman"]))
    metrics.update({"summary.final_heldout_spearman": final, "summary.initial_heldout_spearman": initial,
                    "summary.gain_heldout_spearman": final - initial,
                    "optimizer.cost_usd": float(res["cost_usd"].sum()),
                    "optimizer.llm_calls": float(res["llm_calls"].sum())})
    return metrics
