"""Experiment ``optimize_selection`` (replay, no LLM): how well does the UCB bandit find the instructions
with the best held-out correlation?

The authors' released judgements are the oracle: a candidate is one of an aspect's 16 released
instructions, a pull is the correlation of its predictions with the gold labels on a fresh random
minibatch of training items. Per aspect and held-out fold (conversation-level, stratified by CRS), per
repetition (a new seed), the set of the top b by mean reward is scored on the held-out fold:

- ``ucb``: UCB1 with exploration constant c, for every pull budget and c of the grid;
- ``uniform``: the same budget spread round-robin over the candidates;
- ``random``: b instructions drawn at random (no pulls);
- ``full``: every candidate evaluated on every training item (the top b by full-train correlation);
- ``best``: the best possible set of b, chosen on the held-out fold itself (an oracle; regret = best − set).

Writes ``results/optimize_selection/`` (full data): ``headline`` (the default budget and c), ``grid``
(every budget × c), ``instructions`` (train / held-out correlation of every instruction), figures.
"""

from __future__ import annotations

import itertools
import time
from functools import partial
from typing import Annotated, Any

import numpy as np
import pandas as pd
from omegaconf import DictConfig
from pydantic import Field

from face.coefficients import rows_correlation
from face.data.split import split_conversations
from face.errors import ConfigError
from face.experiments.common import Parts, Plan, experiment, own_settings
from face.experiments.optimize_instructions import optimizer_config
from face.experiments.result import ExperimentResult, Table
from face.optimize.bandit import Bandit, random_choice
from face.optimize.config import OptimizerConfig
from face.optimize.items import correlation, indices_of, items_for, reward
from face.optimize.scorers import ReplayScorer
from face.pipeline.released import load_scores
from face.predictions import round_preds
from face.report.tables import order_aspects
from face.settings import Number, settings


@settings("selection", conf="experiment/optimize_selection.yaml:selection")
class SelectionSettings:
    """The experiment's own settings (conf/experiment/optimize_selection.yaml)."""

    budgets: Annotated[list[Annotated[int, Field(ge=1)]], Field(min_length=1)]  # pulls, each on a fresh minibatch
    ucb_cs: Annotated[list[Annotated[Number, Field(ge=0)]], Field(min_length=1)]
    repeats: int = Field(ge=1)  # seeds per fold
    all_folds: bool  # every fold of optimizer.split.folds held out in turn (false: optimizer.split.fold)


def with_own(values: list, own: Any) -> list:
    """A grid of ``values`` with the optimizer's own value among them (sorted where it was added)."""
    return values if own in values else sorted({*values, own})


def row_correlations(preds: np.ndarray, gold: np.ndarray, kind: str) -> np.ndarray:
    """The correlation ``kind`` of every row of ``preds`` (rounded like every prediction) with ``gold``."""
    return rows_correlation(round_preds(preds), np.asarray(gold, float)[None, :], kind)


def best_set(matrix: np.ndarray, test: np.ndarray, gold: np.ndarray, b: int, kind: str) -> tuple[float, tuple]:
    """The set of ``b`` rows whose mean has the highest correlation on ``test``, by trying every set (the 16
    released instructions of an aspect make at most C(16, 8) = 12 870)."""
    combos = list(itertools.combinations(range(matrix.shape[0]), b))
    r = row_correlations(np.stack([matrix[list(c)][:, test].mean(0) for c in combos]), gold[test], kind)
    k = int(np.nanargmax(r))
    return float(r[k]), combos[k]


def simulate(matrix: np.ndarray, gold: np.ndarray, train: np.ndarray, test: np.ndarray, sel: SelectionSettings,
             ocfg: OptimizerConfig, seed: list[int], full: list[int]) -> list[dict]:
    """The set ``full`` (the top b by full-train correlation), then every policy × budget × c (the optimizer's own
    among them) × repetition for one aspect and fold."""
    n, b, kind, per_pull = matrix.shape[0], ocfg.beam, ocfg.reward, min(ocfg.pull_minibatch, len(train))
    budgets, cs = with_own(sel.budgets, ocfg.pulls), with_own(sel.ucb_cs, ocfg.ucb_c)

    def row(policy: str, budget: int, c: float, rep: int, chosen: list[int], pulls: int) -> dict[str, Any]:
        return {"policy": policy, "budget": budget, "ucb_c": c, "repeat": rep, "set": chosen, "pulls": pulls,
                "heldout": correlation(matrix[chosen][:, test].mean(0), gold[test], kind),
                "item_evaluations": pulls * per_pull}

    def policy_run(policy: str, budget: int, c: float, rep: int, rng: np.random.Generator) -> dict[str, Any]:
        def pull(a: int) -> float:
            idx = rng.choice(train, size=per_pull, replace=False)
            return reward(matrix[a, idx], gold[idx], kind)

        bandit = Bandit(n, c).run(pull, budget, policy)
        return row(policy, budget, c if policy == "ucb" else np.nan, rep, bandit.top(b), int(bandit.t))

    # full: every candidate on every training item
    rows = [{**row("full", 0, np.nan, 0, full, 0), "item_evaluations": n * len(train)}]
    for rep in range(sel.repeats):
        rng = np.random.default_rng([*seed, rep])
        rows.append(row("random", 0, np.nan, rep, random_choice(n, b, rng), 0))
        for budget in budgets:
            rows += [policy_run("ucb", budget, c, rep, np.random.default_rng([*seed, rep, budget, int(c * 1000)]))
                     for c in cs]
            rows.append(policy_run("uniform", budget, 0.0, rep, np.random.default_rng([*seed, rep, budget, 7])))
    return rows


def parts(cfg: DictConfig) -> Parts:
    """Nothing beside the skeleton's parts; the optimizer's and the selection's settings are checked with the others,
    before anything is written."""
    optimizer_config(cfg)
    own_settings(SelectionSettings, cfg, "selection")
    return Parts()


def run(plan: Plan) -> ExperimentResult:
    ocfg = optimizer_config(plan.cfg)
    sel = own_settings(SelectionSettings, plan.cfg, "selection")
    kind, b, m = ocfg.reward, ocfg.beam, ocfg.pull_minibatch
    folds = range(ocfg.split.folds) if sel.all_folds else [ocfg.split.fold]
    with experiment(plan) as ctx:
        done, timing = [], {}  # per aspect: (its runs, its instructions' values)
        for a in ctx.aspects:
            t0 = time.perf_counter()
            done.append(_aspect_runs(ctx, a, ocfg, sel, folds))
            timing[a.name] = time.perf_counter() - t0
        df = pd.DataFrame([r for runs, _ in done for r in runs])
        df["regret"] = df["best"] - df["heldout"]
        df["set"] = df["set"].map(lambda s: ",".join(map(str, s)))
        grid = order_aspects(df.groupby(["aspect", "policy", "budget", "ucb_c"], dropna=False).agg(
            heldout=("heldout", "mean"), heldout_sd=("heldout", "std"), regret=("regret", "mean"),
            regret_sd=("regret", "std"), best=("best", "mean"), pulls=("pulls", "mean"),
            item_evaluations=("item_evaluations", "mean"), runs=("heldout", "size")).reset_index())
        headline = _headline(grid, ocfg)
        by_inst = pd.DataFrame([r for _, rows in done for r in rows]).groupby(["aspect", "instruction_id"])
        inst = order_aspects(by_inst[["train", "heldout"]].mean().reset_index())
        note = (f"Replay of the authors' released judgements (no LLM; 16 released instructions per aspect as the "
                f"candidate pool); {ctx.subset}; {len(folds)} held-out folds × "
                f"{sel.repeats} repetitions (conversation level, stratified by CRS); set size b={b}, minibatch {m} "
                f"items per pull, reward = {kind} (also the held-out metric). 'best' is an oracle chosen on the "
                f"held-out fold. The released instructions were themselves selected by the authors on all 467 "
                f"conversations.")
        tables = {"headline": Table(headline, f"Bandit selection at the default budget ({ocfg.pulls} pulls, "
                                              f"c={ocfg.ucb_c}). {note}"),
                  "grid": Table(grid, f"Every budget × c (means over folds and repetitions). {note}"),
                  "instructions": Table(inst, f"Train / held-out {ocfg.reward} of each released instruction (mean "
                                              f"over folds). {note}"),
                  # wall times differ from run to run: the job's own directory, not the committed results
                  "timing": Table(pd.DataFrame([{"aspect": k, "seconds": v} for k, v in timing.items()]),
                                  "Wall time of the replay simulation per aspect (every policy, budget, c, fold and "
                                  "repetition).", in_run_dir=True),
                  "selection_runs": Table(df, in_run_dir=True)}
        from face.report import optimizer_figures as figures  # matplotlib only where a figure is drawn

        drawn = {"figures/heldout_vs_budget.png": partial(
                     figures.heldout_vs_budget, grid, ocfg.ucb_c, f"held-out {kind} of top-{b}",
                     "Bandit selection among the released instructions (replay, no LLM)", note),
                 "figures/regret_vs_c.png": partial(figures.regret_vs_c, grid, ocfg.pulls,
                                                    "UCB regret against the exploration constant", note)}
        return ctx.result(tables=tables, figures=drawn, extra={"timing": timing},
                          shown=[(f"Bandit selection at the default budget. {note}", headline)],
                          metrics=_metrics(headline, timing))


def _aspect_runs(ctx, a, ocfg: OptimizerConfig, sel: SelectionSettings, folds) -> tuple[list[dict], list[dict]]:
    """Every policy's runs on one aspect, fold by fold, and each released instruction's train / held-out value."""
    kind, b, m = ocfg.reward, ocfg.beam, ocfg.pull_minibatch
    items = items_for(a, ctx.convs)
    scorer = ReplayScorer(load_scores(ctx.data_dir, [a.name], {c.conv_id for c in ctx.convs}), items, a.level)
    matrix, gold, covered = scorer.matrix, scorer.gold, scorer.covered()
    if b > matrix.shape[0]:
        raise ConfigError(f"optimizer.beam={b} is more than the {matrix.shape[0]} released instructions")
    runs, inst_rows = [], []
    for fold in folds:
        split = split_conversations(ctx.convs, ocfg.split.folds, fold, 0.0, ocfg.split.seed)
        train, test = (np.intersect1d(indices_of(items, ids), covered) for ids in (split.train, split.test))
        train_corr, test_corr = (row_correlations(matrix[:, ix], gold[ix], kind) for ix in (train, test))
        inst_rows += [{"aspect": a.name, "fold": fold, "instruction_id": iid, "train": train_corr[k],
                       "heldout": test_corr[k]} for k, iid in enumerate(scorer.ids)]
        best, best_combo = best_set(matrix, test, gold, b, kind)
        full = [int(i) for i in np.argsort(-np.nan_to_num(train_corr, nan=-2), kind="stable")[:b]]
        base = {"aspect": a.name, "level": a.level, "fold": fold, "train_items": len(train),
                "test_items": len(test), "candidates": matrix.shape[0], "beam": b, "minibatch": m,
                "best": best, "best_set": ",".join(scorer.ids[i] for i in best_combo)}
        seed = [ocfg.seed, fold, int.from_bytes(a.name.encode()[:4], "little")]
        runs += [{**base, **r} for r in simulate(matrix, gold, train, test, sel, ocfg, seed, full)]
    return runs, inst_rows


def _metrics(headline: pd.DataFrame, timing: dict[str, float]) -> dict[str, Any]:
    return {**{f"selection.{r.aspect}.{col}": getattr(r, col) for r in headline.itertuples()
               for col in ("ucb", "uniform", "random", "full", "best", "ucb_regret")},
            **{f"selection.{k}.seconds": v for k, v in timing.items()},
            # the headline: held-out correlation of the bandit's set at the default budget, and its regret (means)
            "summary.ucb_heldout_mean": float(headline["ucb"].mean()),
            "summary.ucb_regret_mean": float(headline["ucb_regret"].mean())}


def _headline(grid: pd.DataFrame, ocfg) -> pd.DataFrame:
    rows = []
    for a, g in grid.groupby("aspect", sort=False):
        at_c = np.isclose(g["ucb_c"], ocfg.ucb_c)  # the UCB rows of the default c (the other policies' c: NaN)
        at = {(r.policy, r.budget): r for r in g[(g["policy"] != "ucb") | at_c].itertuples()}
        ucb, uni, full, rnd = at[("ucb", ocfg.pulls)], at[("uniform", ocfg.pulls)], at[("full", 0)], at[("random", 0)]
        curve = g[(g["policy"] == "ucb") & at_c].sort_values("budget")
        enough = curve[curve["heldout"] >= full.heldout - 0.01]
        needed = float(enough["budget"].iloc[0]) if len(enough) else np.nan
        rows.append({"aspect": a, "ucb": ucb.heldout, "uniform": uni.heldout, "random": rnd.heldout,
                     "full": full.heldout, "best": ucb.best, "ucb_regret": ucb.regret, "random_regret": rnd.regret,
                     "ucb_pulls": ucb.pulls, "ucb_item_evals": ucb.item_evaluations,
                     "full_item_evals": full.item_evaluations, "pulls_to_full_minus_0.01": needed})
    return pd.DataFrame(rows)
