"""The optimizer's beam search with a fake scorer and writer: its bookkeeping, a checkpoint resumed equal to the
uninterrupted run (and refused under another configuration), its settings checked and its cost estimated, rewrites
rendered and instruction sets stored as one template."""

from __future__ import annotations

import numpy as np
import pytest

from face.aspects import Aspect
from face.errors import ConfigError
from face.optimize import checkpoint
from face.optimize.beam import BeamSearch, StopOptimization
from face.optimize.checkpoint import Candidate
from face.optimize.config import OptimizerConfig
from face.optimize.estimate import CostInputs, estimate, paper_setting
from face.optimize.items import Item
from face.optimize.writer import Rewrite, instruction_text
from face.tracking.prompts import parse_set, set_template

ASPECT = Aspect("relevance", "turn", (0, 1, 2, 3), "Is it relevant?", {})


# ------------------------------------------------------------------ beam bookkeeping with fakes

class FakeScorer:
    """Prediction = gold + noise whose size shrinks with the length of the instruction text."""

    def __init__(self, n=60):
        rng = np.random.default_rng(0)
        self.items = [Item(f"c{i}", 1, float(rng.integers(0, 4))) for i in range(n)]
        self.noise = rng.normal(size=n)

    def predict(self, cand, idx):
        gold = np.array([self.items[i].gold for i in idx])
        return gold + self.noise[idx] * 10.0 / len(cand.text)

    def predict_set(self, cands, idx):
        return np.mean([self.predict(c, idx) for c in cands], 0)

    def explain(self, cand, idx):
        return [{"conv_id": self.items[i].conv_id, "turn_ind": 1, "pred": 0.0, "gold": self.items[i].gold,
                 "context": "", "particles": []} for i in idx]


class FakeWriter:
    def __init__(self, cfg):
        self.cfg, self.calls = cfg, []

    def gradients(self, jobs):
        self.calls.append(("g", len(jobs)))
        return [[f"critique {j} of {c.cid}" for j in range(self.cfg.alpha)] for c, _ in jobs]

    def rewrites(self, jobs):
        self.calls.append(("r", len(jobs)))
        return [[f"{c.text} more{j} ({g})" for j in range(self.cfg.beta)] for c, g in jobs]


def _loop(cfg, tmp_path=None):
    scorer = FakeScorer()
    return BeamSearch(cfg, ASPECT, scorer, np.arange(40), np.arange(40, 60), FakeWriter(cfg),
                      checkpoint_dir=str(tmp_path) if tmp_path else None)


def test_beam_bookkeeping():
    cfg = OptimizerConfig(alpha=2, beta=3, beam=2, rounds=2, pulls=30, pull_minibatch=10, expand_minibatch=10, top_k=5)
    loop = _loop(cfg)
    state = loop.run(loop.new_state([Candidate("initial", "x")], {"k": 1}))
    # round 1: 1 parent × 2 × 3 = 6 new; round 2: 2 parents × 2 × 3 = 12 new
    assert [t["new_candidates"] for t in state.trajectory] == [6, 12]
    assert [t["candidates"] for t in state.trajectory] == [7, 14]
    assert len(state.candidates) == 19 and len(state.beam) == 2
    assert loop.writer.calls == [("g", 1), ("r", 2), ("g", 2), ("r", 4)]
    assert sum(len(v) for v in state.rewards.values()) == 60  # 30 pulls per round
    for c in state.candidates.values():
        if c.origin == "rewrite":
            assert c.parent in state.candidates and state.candidates[c.parent].round < c.round
            assert c.gradient_id.startswith(f"r{c.round}:{c.parent}:g")
    assert len(state.gradients) == 2 + 4
    final = loop.final_set(state)
    assert len(final) == 5 and [state.mean_reward(c.cid) for c in final] == sorted(
        [state.mean_reward(c.cid) for c in final], reverse=True)


def test_checkpoint_resume_equals_uninterrupted_and_refuses_another_config(tmp_path):
    cfg = OptimizerConfig(alpha=2, beta=2, beam=2, rounds=3, pulls=20, pull_minibatch=10, expand_minibatch=10)
    full = _loop(cfg).run(_loop(cfg).new_state([Candidate("initial", "x")], {"k": 1}))
    stop = OptimizerConfig(**{**cfg.__dict__, "stop_after_round": 1})
    loop = _loop(stop, tmp_path)
    with pytest.raises(StopOptimization):
        loop.run(loop.new_state([Candidate("initial", "x")], {"k": 1}))
    saved = checkpoint.load(tmp_path, "relevance")
    assert saved.round == 1 and saved.rng is not None
    resumed = _loop(cfg, tmp_path).run(saved)
    assert resumed.beam == full.beam and resumed.rewards == full.rewards
    assert [c.text for c in resumed.candidates.values()] == [c.text for c in full.candidates.values()]
    with pytest.raises(ConfigError, match="optimizer.alpha|k"):
        checkpoint.check_same(saved, {"k": 2}, tmp_path)
    checkpoint.check_same(saved, {"k": 1}, tmp_path)
    assert checkpoint.load(tmp_path, "relevance").round == 3


def test_config_validation_and_cost_estimate():
    with pytest.raises(ValueError, match="optimizer.alpha"):
        OptimizerConfig(alpha=0)
    with pytest.raises(ValueError, match="^unknown setting optimizer.alpa; the settings of optimizer: name, alpha, "):
        OptimizerConfig(**{"alpa": 2})
    p = paper_setting(OptimizerConfig(alpha=1, beta=1, beam=1))
    assert (p.alpha, p.beta, p.beam, p.ucb_c, p.pull_minibatch) == (4, 4, 4, 1.0, 20)
    from face.pipeline.estimate import Pricing

    est = estimate(p, CostInputs(1000, 500, 2.8, 5, 900.0, 300), Pricing()).set_index("stage")
    assert est.loc["gradients / round", "samples"] == 16 and est.loc["rewrites / round", "samples"] == 64
    assert est.loc["rewrites / round", "requests"] == 16
    assert est.loc["expand scoring / round", "samples"] == round(4 * 20 * 2.8 * 5)


def test_rewrite_rendering_and_set_templates():
    r = Rewrite.model_validate({"task": "Rate the particle.", "steps": [
        {"action": "Look at the  mention.", "check": "Does the particle name a movie?"},
        {"action": "Weigh feedback.", "check": "Does the particle get a positive reaction?"}]})
    text = instruction_text(r)
    assert text.splitlines()[0] == "Task: Rate the particle." and "Step 2: Weigh feedback." in text
    assert "Check: Does the particle name a movie?" in text
    pairs = [("a", "first\ntext"), ("r1c2", "second")]
    assert parse_set(set_template(pairs), "x") == pairs
    assert parse_set("just one", "p@3") == [("p@3", "just one")]
