"""The optimization loop: per round, expand the beam (gradients -> rewrites), then select with a UCB bandit.

Expand (live scorer only): for every beam instruction, score a fresh minibatch of training items, take the
``writer.examples`` worst-predicted ones, ask for α critiques, and for each critique β rewrites. Select:
a UCB bandit over beam ∪ new candidates; one pull = the reward (correlation with the gold labels) of one
candidate on a fresh random minibatch of training items; after ``pulls`` pulls the top ``beam`` by mean
reward form the next beam. With the replay scorer there is nothing to expand: the bandit selects among
the released instructions. The state is checkpointed after every round.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from face.aspects import Aspect
from face.console import progress
from face.optimize import checkpoint
from face.optimize.bandit import Bandit
from face.optimize.checkpoint import Candidate, OptState
from face.optimize.config import OptimizerConfig
from face.optimize.items import correlation, reward, worst
from face.optimize.prompt_log import PromptLog
from face.optimize.writer import Writer

log = logging.getLogger(__name__)


class StopOptimization(Exception):
    """A clean stop after a completed round (``optimizer.stop_after_round``); the checkpoint is intact."""


def minibatch(rng: np.random.Generator, pool: np.ndarray, size: int) -> np.ndarray:
    """``size`` distinct items of ``pool`` (all of them, shuffled, if the pool is smaller)."""
    return rng.choice(pool, size=min(size, len(pool)), replace=False)


@dataclass
class BeamSearch:
    cfg: OptimizerConfig
    aspect: Aspect
    scorer: Any  # face.optimize.scorers: LiveScorer, or ReplayScorer (no expansion)
    train: np.ndarray  # item indices the loop may use
    dev: np.ndarray  # item indices for the per-round dev correlation of the beam (never used to select)
    writer: Writer | None = None  # None: no expansion (replay)
    prompts: PromptLog | None = None  # None: nothing registered (tracking off)
    checkpoint_dir: str | None = None
    usage: Callable[[], tuple[int, float]] | None = None  # () -> (LLM calls so far, cost so far)

    def __post_init__(self) -> None:
        self.gold = np.array([it.gold for it in self.scorer.items], float)
        self.registry = self.prompts or PromptLog(None, self.aspect.name)
        if len(self.train) < 3:
            raise ValueError(f"{self.aspect.name}: {len(self.train)} training items; the rewards need at least 3")

    # ---- state ------------------------------------------------------------
    def new_state(self, start: Sequence[Candidate], config: dict) -> OptState:
        state = OptState(self.aspect.name, config, prompt_name=self.registry.name)
        for c in start:
            self.registry.register(c, None)
            state.add(c)
        state.beam = [c.cid for c in start][: self.cfg.beam] if self.writer is not None else [c.cid for c in start]
        return state

    # ---- one round --------------------------------------------------------
    def expand(self, state: OptState, r: int, rng: np.random.Generator) -> list[Candidate]:
        """The round's new candidates (rewrites of the beam from its worst-predicted items), added to ``state``."""
        assert self.writer is not None, "a replay run does not expand"
        jobs = []
        for p in (state.candidates[c] for c in state.beam):
            idx = minibatch(rng, self.train, self.cfg.expand_minibatch)
            bad = idx[worst(self.scorer.predict(p, idx), self.gold[idx], self.cfg.writer.examples, self.cfg.error)]
            jobs.append((p, self.scorer.explain(p, bad)))
        rewrites = []  # (parent, gradient, its id)
        for (p, ex), gs in zip(jobs, self.writer.gradients(jobs)):
            for j, g in enumerate(gs):
                gid = f"r{r}:{p.cid}:g{j}"
                state.gradients.append({"gradient_id": gid, "round": r, "parent": p.cid, "parent_version": p.version,
                                        "text": g, "examples": [{k: e[k] for k in ("conv_id", "turn_ind", "pred",
                                                                                   "gold")} for e in ex]})
                rewrites.append((p, g, gid))
        texts = {c.text for c in state.candidates.values()}
        new: list[Candidate] = []
        for (p, _, gid), outs in zip(rewrites, self.writer.rewrites([(p, g) for p, g, _ in rewrites])):
            for text in outs:
                if text in texts:
                    continue
                texts.add(text)
                cand = Candidate(f"r{r}c{len(new) + 1}", text, parent=p.cid, gradient_id=gid, round=r, origin="rewrite")
                self.registry.register(cand, p)
                state.add(cand)
                new.append(cand)
        return new

    def select(self, state: OptState, pool: list[Candidate], rng: np.random.Generator) -> Bandit:
        def pull(a: int) -> float:
            idx = minibatch(rng, self.train, self.cfg.pull_minibatch)
            rw = reward(self.scorer.predict(pool[a], idx), self.gold[idx], self.cfg.reward)
            state.rewards[pool[a].cid].append(rw)
            return rw

        return Bandit(len(pool), self.cfg.ucb_c).run(pull, self.cfg.pulls, "ucb")

    def dev_correlation(self, cands: Sequence[Candidate]) -> float:
        if len(self.dev) < 3:
            return float("nan")
        return correlation(self.scorer.predict_set(cands, self.dev), self.gold[self.dev], self.cfg.reward)

    def run(self, state: OptState) -> OptState:
        rounds = self.cfg.rounds if self.writer is not None else 1
        todo = range(state.round + 1, rounds + 1)
        for r in progress(todo, f"optimizer rounds {self.aspect.name}", total=len(todo), unit="round"):
            calls0, cost0 = self.usage() if self.usage else (0, 0.0)
            rng = np.random.default_rng(self.cfg.seed)
            if state.rng is not None:  # where the last completed round left it
                rng.bit_generator.state = state.rng
            new = self.expand(state, r, rng) if self.writer is not None else []  # added to the state
            pool = [state.candidates[c] for c in state.beam] + new
            bandit = self.select(state, pool, rng)
            chosen = [pool[i] for i in bandit.top(self.cfg.beam)]
            state.beam = [c.cid for c in chosen]
            means = bandit.means()
            calls, cost = self.usage() if self.usage else (0, 0.0)
            calls, cost = calls - calls0, cost - cost0  # this round's (the client counts per process)
            row = {"round": r, "candidates": len(pool), "new_candidates": len(new),
                   "gradients": sum(g["round"] == r for g in state.gradients), "pulls": int(bandit.t),
                   "best_train_reward": float(np.nanmax(means)), "mean_train_reward": float(np.nanmean(means)),
                   "beam_train_reward": float(np.nanmean([means[i] for i in bandit.top(self.cfg.beam)])),
                   "dev_correlation_beam": self.dev_correlation(chosen),
                   "dev_correlation_best": self.dev_correlation(chosen[:1]),
                   "llm_calls": calls, "cost_usd": cost,
                   "beam": ",".join(state.beam)}
            state.trajectory.append(row)
            state.round = r
            state.rng = dict(rng.bit_generator.state)
            state.llm_calls += calls
            state.cost_usd += cost
            if self.checkpoint_dir:
                checkpoint.save(state, self.checkpoint_dir)
            log.info("%s round %d: %d candidates, best train reward %.3f, dev %.3f", self.aspect.name, r, len(pool),
                     row["best_train_reward"], row["dev_correlation_beam"])
            if self.cfg.stop_after_round is not None and r >= self.cfg.stop_after_round and r < rounds:
                raise StopOptimization(f"stopped after round {r} of {self.aspect.name}")
        return state

    def final_set(self, state: OptState) -> list[Candidate]:
        """The ``top_k`` candidates that were evaluated, best mean reward first (ties: more pulls, then creation
        order: the sort is stable)."""
        pulled = [cid for cid in state.candidates if state.rewards.get(cid)]
        best = sorted(pulled, key=lambda cid: (-(state.mean_reward(cid) or 0.0), -len(state.rewards[cid])))
        return [state.candidates[cid] for cid in best[: self.cfg.top_k]]
