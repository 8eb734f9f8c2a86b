"""Experiment ``optimize_instructions``: the optimization loop with the live scorer, per aspect, on the
training folds of the dataset; the final set and the initial instruction are then scored on the held-out
fold, side by side.

Writes (``ctx.out_dir``): ``instructions.json`` (the format ``method.instructions.source=file`` reads),
``trajectory.csv``, ``heldout.csv|md``, ``gradients.jsonl``, ``cost_estimate.csv``, ``figures/trajectory.png``;
the checkpoint is ``<run dir>/checkpoint/<aspect>.json`` (``optimizer.resume=<that dir>`` continues it).
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pandas as pd
from omegaconf import DictConfig, OmegaConf

from face.data.split import split_conversations
from face.experiments.common import ConfigError, experiment
from face.files import atomic_open, atomic_path, atomic_write_text
from face.llm import LLMConfig
from face.llm.usage import estimate_input_tokens
from face.methods.job import LLMJob
from face.optimize import checkpoint
from face.optimize.beam import BeamSearch, StopOptimization, Writer
from face.optimize.checkpoint import Candidate, ResumeMismatch
from face.optimize.config import OptimizerConfig
from face.optimize.estimate import CostInputs, estimate, paper_setting
from face.optimize.items import correlation, indices_of, items_for
from face.optimize.scorers import LiveScorer
from face.pipeline.estimate import Pricing
from face.pipeline.scoring import score_messages, units_for
from face.prompt_registry import SET_ARTIFACT, PromptLog
from face.prompts import generic_instruction, initial_instruction
from face.report.tables import print_table


def optimizer_config(cfg: DictConfig) -> OptimizerConfig:
    if "optimizer" not in cfg:
        raise ConfigError("no optimizer config: add `- /optimizer: paper` to the experiment's defaults")
    try:
        return OptimizerConfig.from_dict(OmegaConf.to_container(cfg.optimizer, resolve=True))
    except (ValueError, TypeError) as e:
        raise ConfigError(str(e)) from None


def start_text(ocfg: OptimizerConfig, aspect: str) -> str:
    return generic_instruction(aspect) if ocfg.start == "initial" else initial_instruction(aspect)


def run_config(ocfg: OptimizerConfig, aspect: str, ctx, lcfg: LLMConfig, method) -> dict:
    """What the optimization of one aspect depends on (compared when resuming)."""
    return {"optimizer": ocfg.fingerprint_fields(), "aspect": aspect,
            "conversations": sorted(c.conv_id for c in ctx.convs),
            "llm": {"model": lcfg.model, "backend": lcfg.backend},
            "scoring": json.loads(json.dumps(asdict(method.scoring))), "particles": method.particles.source}


def cost_inputs(ctx, aspect, items, idx, decomps, method, text: str) -> CostInputs:
    convs = {c.conv_id: c for c in ctx.convs}
    units = units_for(aspect, ctx.convs, decomps, "particle")
    sample = units[:: max(1, len(units) // 40)][:40]
    reasoning = method.scoring.reasoning
    tin = (np.mean([estimate_input_tokens(score_messages(u, convs[u.conv_id], text, ctx.dataset.judged, reasoning))
                    for u in sample]) if sample else 0.0)
    n_units = len(units) if aspect.level == "turn" else len(units)
    ppi = n_units / max(len(items), 1) if aspect.level == "turn" else n_units / max(len(ctx.convs), 1)
    return CostInputs(len(idx["train"]), len(idx["dev"]) + len(idx["test"]), ppi, method.scoring.samples, float(tin),
                      method.cost.score_tokens(method.scoring.reasoning))


def run(cfg: DictConfig) -> dict:
    from face.pipeline.method import Face

    ocfg = optimizer_config(cfg)
    with experiment(cfg) as ctx:
        method = ctx.method
        if not isinstance(method, Face) or method.units.unit != "particle":
            raise ConfigError("optimize_instructions needs method=face with method.unit=particle")
        tracker, run_dir = ctx.tracker, ctx.run_dir
        inputs = ctx.inputs()
        lcfg = inputs.llm
        split = split_conversations(ctx.convs, ocfg.split.folds, ocfg.split.fold, ocfg.split.dev_fraction,
                                    ocfg.split.seed)
        tracker.set_tags({"split.train": len(split.train), "split.dev": len(split.dev), "split.test": len(split.test)})
        proxy = method.proxy(inputs)
        pricing = Pricing.of(lcfg)
        plans, estimates = {}, []
        for a in ctx.aspects:
            items = items_for(a, ctx.convs)
            idx = {side: indices_of(items, getattr(split, side)) for side in ("train", "dev", "test")}
            if len(idx["train"]) < 3:
                raise ConfigError(f"{a.name}: only {len(idx['train'])} labelled training items in {ctx.subset}; "
                                  "use more conversations (dataset.limit) or fewer folds")
            plans[a.name] = (a, items, idx)
            ci = cost_inputs(ctx, a, items, idx, proxy, method, start_text(ocfg, a.name))
            for label, oc in (("this run", ocfg), ("paper setting", paper_setting(ocfg))):
                est = estimate(oc, ci, pricing)
                estimates.append(est.assign(aspect=a.name, setting=label))
        costs = pd.concat(estimates, ignore_index=True)
        summary = (costs[costs["stage"].isin(["per round", "total"])]
                   .groupby(["setting", "stage"], sort=False)[["samples", "input_tokens", "output_tokens", "cost_usd"]]
                   .sum().reset_index())
        job = LLMJob(lcfg, run_dir, f"the optimizer, {len(ctx.aspects)} aspects, {lcfg.model}")
        this_run = summary[(summary["setting"] == "this run") & (summary["stage"] == "total")]["cost_usd"].sum()
        job.gate(summary, " (scoring counts are upper bounds, cached pairs are free; paper setting: α=β=b=4, c=1, "
                 "minibatch 20)", estimated_usd=float(this_run), detail=costs)
        tracker.log_artifacts(job.artifacts, "optimizer")
        tracker.log_metrics({f"estimate.{r.setting.replace(' ', '_')}.{r.stage.replace(' ', '_')}.samples": r.samples
                             for r in summary.itertuples()})
        if job.dry_run:
            print("Dry run: nothing was sent.", flush=True)
            return {"dry_run": True, "costs": costs}

        ckpt_dir = Path(ocfg.resume) if ocfg.resume else run_dir / "checkpoint"
        if ocfg.resume and not ckpt_dir.is_dir():
            raise ConfigError(f"optimizer.resume={ocfg.resume}: no such checkpoint directory")
        tracker.set_tags({"optimizer.checkpoint": str(ckpt_dir), **({"optimizer.resumed_from": ocfg.resume}
                                                                     if ocfg.resume else {})})
        results, trajectories, gradients, sets = [], [], [], {}
        try:
            with job.client() as client:
                decomps = method.units.decompositions(client, ctx.convs, ctx.dataset, proxy, lcfg.supports_json_schema)

                def usage() -> tuple[int, float]:
                    return client.usage.requests, client.usage.spent_usd

                for name, (a, items, idx) in plans.items():
                    config = run_config(ocfg, name, ctx, lcfg, method)
                    scorer = LiveScorer(client, a, ctx.convs, items, decomps, method.scoring,
                                        lcfg.supports_json_schema, ctx.dataset.judged,
                                        example_chars=ocfg.writer.example_chars)
                    state = checkpoint.load(ckpt_dir, name) if ocfg.resume else None
                    prompts = PromptLog(tracker, name, state.prompt_name if state is not None else None)
                    loop = BeamSearch(ocfg, a, scorer, idx["train"], idx["dev"],
                                      Writer(client, a, ocfg, lcfg.supports_json_schema, ctx.dataset.judged),
                                      prompts, str(ckpt_dir), usage, on_round=_step_logger(tracker, name))
                    if state is not None:
                        try:
                            checkpoint.check_same(state, config, ckpt_dir)
                        except ResumeMismatch as e:
                            raise ConfigError(str(e)) from None
                        print(f"{name}: resuming after round {state.round} from {ckpt_dir}", flush=True)
                    else:
                        state = loop.new_state([Candidate("initial", start_text(ocfg, name))], config)
                        checkpoint.save(state, ckpt_dir)
                    state = loop.run(state)
                    final = loop.final_set(state)
                    initial = state.candidates["initial"]
                    test, dev, gold = idx["test"], idx["dev"], loop.gold
                    row = {"aspect": name, "level": a.level, "train_items": len(idx["train"]), "dev_items": len(dev),
                           "test_items": len(test), "candidates": len(state.candidates), "final_size": len(final)}
                    for coef in ("spearman", "pearson"):
                        for label, cands in (("final", final), ("best", final[:1]), ("initial", [initial])):
                            row[f"test_{label}_{coef}"] = correlation(scorer.predict_set(cands, test), gold[test], coef)
                        row[f"dev_final_{coef}"] = correlation(scorer.predict_set(final, dev), gold[dev], coef)
                    row["pulls"] = sum(len(v) for v in state.rewards.values())
                    row["llm_calls"], row["cost_usd"] = state.llm_calls, state.cost_usd
                    results.append(row)
                    trajectories += [{"aspect": name, **t} for t in state.trajectory]
                    gradients += [{"aspect": name, **g} for g in state.gradients]
                    sets[name] = [{"instruction_id": c.cid, "text": c.text, "rank": i + 1,
                                   "mean_reward": state.mean_reward(c.cid), "pulls": len(state.rewards[c.cid]),
                                   "round": c.round, "parent": c.parent, "prompt_version": c.version}
                                  for i, c in enumerate(final)]
                    ref = prompts.register_set(
                        final, {"test_spearman": f"{row['test_final_spearman']:.4f}",
                                "dev_spearman": f"{row['dev_final_spearman']:.4f}"})
                    if ref:
                        tracker.set_tags({f"prompt.{name}": ref})
                job.finish(client)
                tracker.log_metrics(job.metrics)
        except StopOptimization as stop:
            msg = (f"{stop}: checkpoint in {ckpt_dir}; continue with optimizer.resume={ckpt_dir} "
                   "(and the same settings)")
            print(msg, flush=True)
            tracker.set_tags({"stop_reason": msg})
            return {"stopped": True, "checkpoint": ckpt_dir}
        except BaseException:
            print(f"The optimization stopped; its checkpoint (after the last completed round) is in {ckpt_dir}: "
                  f"continue with optimizer.resume={ckpt_dir}", file=sys.stderr, flush=True)
            raise
        return _report(ctx, ocfg, results, trajectories, gradients, sets, cfg)


def _step_logger(tracker, aspect: str):
    def log_round(state, row: dict) -> None:
        if tracker is None or not tracker.enabled:
            return
        metrics = {f"round.{aspect}.{k}": float(v) for k, v in row.items()
                   if k not in ("round", "beam") and v is not None and v == v}
        tracker.mlflow.log_metrics(metrics, step=int(row["round"]))
    return log_round


def _report(ctx, ocfg, results, trajectories, gradients, sets, cfg) -> dict:
    from face.report.tables import to_markdown, write_table

    out_dir, tracker = ctx.out_dir, ctx.tracker
    inst_path = atomic_write_text(out_dir / "instructions.json", json.dumps(sets, indent=1))
    res = pd.DataFrame(results)
    traj = pd.DataFrame(trajectories)
    with atomic_path(out_dir / "trajectory.csv") as tmp:
        traj.to_csv(tmp, index=False)
    grad_path = out_dir / "gradients.jsonl"
    with atomic_open(grad_path) as f:
        for g in gradients:
            f.write(json.dumps(g, default=str) + "\n")
    note = (f"LLM {cfg.llm.model} ({cfg.llm.backend}); {ctx.subset}; optimized on the train fold(s), "
            f"'test' = held-out fold {ocfg.split.fold} of {ocfg.split.folds} (conversation level, stratified by "
            f"system, seed {ocfg.split.seed}); α={ocfg.alpha} β={ocfg.beta} b={ocfg.beam} c={ocfg.ucb_c} "
            f"rounds={ocfg.rounds} pulls/round={ocfg.pulls}")
    shown = res[["aspect", "level", "test_items", "candidates", "test_initial_spearman", "test_final_spearman",
                 "test_best_spearman", "dev_final_spearman", "pulls", "llm_calls"]]
    paths = write_table(res, out_dir, "heldout", f"Held-out correlation, final set vs initial instruction. {note}",
                        digits=4)
    print_table(f"Held-out correlation: final set vs initial instruction. {note}", shown, 3)
    paths += [inst_path, out_dir / "trajectory.csv", grad_path, _figure(traj, out_dir / "figures" / "trajectory.png",
                                                                        note)]
    tracker.log_artifacts([inst_path], str(Path(SET_ARTIFACT).parent))
    tracker.log_artifacts(paths, "results")
    metrics = {}
    for r in results:
        for k, v in r.items():
            if k.startswith(("test_", "dev_")):
                metrics[f"heldout.{r['aspect']}.{k}"] = v
        metrics[f"optimizer.{r['aspect']}.pulls"] = r["pulls"]
        metrics[f"optimizer.{r['aspect']}.llm_calls"] = r["llm_calls"]
    metrics["heldout.mean.test_final_spearman"] = float(np.nanmean(res["test_final_spearman"]))
    metrics["heldout.mean.test_initial_spearman"] = float(np.nanmean(res["test_initial_spearman"]))
    # the headline (runs table, sweep report): held-out Spearman of the final set vs the initial instruction
    metrics["summary.heldout_final_spearman"] = metrics["heldout.mean.test_final_spearman"]
    metrics["summary.heldout_initial_spearman"] = metrics["heldout.mean.test_initial_spearman"]
    metrics["summary.heldout_gain"] = (metrics["heldout.mean.test_final_spearman"]
                                       - metrics["heldout.mean.test_initial_spearman"])
    metrics["optimizer.cost_usd"] = float(res["cost_usd"].sum())
    metrics["optimizer.llm_calls"] = float(res["llm_calls"].sum())
    tracker.log_metrics(metrics)
    tracker.describe(f"**Instruction optimizer**: held-out Spearman of the final set vs the initial instruction "
                     f"(mean over aspects: {metrics['summary.heldout_final_spearman']:.3f} vs "
                     f"{metrics['summary.heldout_initial_spearman']:.3f}).\n\n{note}\n\n"
                     + to_markdown(shown, 3))
    return {"results": res, "trajectory": traj, "instructions": inst_path, "out_dir": out_dir}


def _figure(traj: pd.DataFrame, path: Path, note: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    aspects = list(dict.fromkeys(traj["aspect"])) if len(traj) else []
    fig, axes = plt.subplots(1, max(len(aspects), 1), figsize=(3.2 * max(len(aspects), 1), 3), squeeze=False)
    for ax, a in zip(axes[0], aspects):
        t = traj[traj["aspect"] == a]
        ax.plot(t["round"], t["best_train_reward"], "o-", label="best train reward")
        ax.plot(t["round"], t["mean_train_reward"], "s--", label="mean train reward")
        ax.plot(t["round"], t["dev_correlation_beam"], "^-", label="dev corr. of beam")
        ax.set_title(a, fontsize=9)
        ax.set_xlabel("round")
    axes[0][0].legend(fontsize=7)
    fig.suptitle(note[:160], fontsize=6)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=110)
    plt.close(fig)
    return path
