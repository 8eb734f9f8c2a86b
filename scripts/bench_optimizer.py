"""Optimizer benchmark: (1) LLM calls per round of the paper setting (α = β = b = 4, c = 1, minibatch 20)
from the dry-run estimate — gradients, rewrites, scoring pulls — per aspect of CRSArena-Eval; (2) wall time of
the replay optimizer (the bandit selecting among the released instructions with the released scores) on the
full data, per aspect.

    FACE_DATA_MIRROR=../shared/data .venv/bin/python scripts/bench_optimizer.py
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("FACE_PROJECT_ROOT", str(ROOT))


def main() -> None:
    import tempfile

    import numpy as np
    import pandas as pd

    from face.data import CRSARENA_EVAL, RELEASED_PARTICLES, ensure_data
    from face.data.split import split_conversations
    from face.datasets.crsarena import ASPECTS, load_conversations
    from face.optimize.beam import BeamSearch
    from face.optimize.checkpoint import Candidate
    from face.optimize.config import OptimizerConfig
    from face.optimize.estimate import CostInputs, estimate
    from face.optimize.items import correlation, indices_of, items_for
    from face.optimize.scorers import ReplayScorer
    from face.pipeline.estimate import Pricing
    from face.pipeline.parts import released_decompositions
    from face.pipeline.released import load_scores
    from face.pipeline.scoring import units_for
    from face.report.tables import print_table

    data = Path(os.environ.get("FACE_DATA_DIR") or tempfile.mkdtemp(prefix="face-bench-"))
    ensure_data(data, mirror=os.environ.get("FACE_DATA_MIRROR"), download=True)
    convs = load_conversations(data / CRSARENA_EVAL)
    decomps = released_decompositions(data / RELEASED_PARTICLES, convs)
    paper = OptimizerConfig()  # the paper's α = β = b = 4, c = 1; minibatches of 20; 128 pulls per round
    gpt4o_mini = Pricing(1, 0.15, 0.60)
    split = split_conversations(convs, paper.split.folds, paper.split.fold, paper.split.dev_fraction, 0)
    calls, times = [], []
    for name, a in ASPECTS.items():
        items = items_for(a, convs)
        n_units = len(units_for(a, convs, decomps, "particle"))
        ppi = n_units / max(len(items), 1) if a.level == "turn" else n_units / len(convs)
        train, dev, test = (indices_of(items, getattr(split, s)) for s in ("train", "dev", "test"))
        est = estimate(paper, CostInputs(len(train), len(dev) + len(test), ppi, 5, 900.0, 300), gpt4o_mini)
        est = est.set_index("stage")
        calls.append({"aspect": name, "gradients": est.loc["gradients / round", "samples"],
                      "rewrites": est.loc["rewrites / round", "samples"],
                      "expand_scoring": est.loc["expand scoring / round", "samples"],
                      "pull_scoring_max": est.loc["bandit pulls / round (upper bound)", "samples"],
                      "per_round": est.loc["per round", "samples"], "total_3_rounds": est.loc["total", "samples"],
                      "total_usd_gpt4o_mini": est.loc["total", "cost_usd"]})
        t0 = time.perf_counter()
        scores = load_scores(data, [name])
        scorer = ReplayScorer(scores, items, a.level)
        cov = scorer.covered()
        tr, te = np.intersect1d(train, cov), np.intersect1d(test, cov)
        t1 = time.perf_counter()
        loop = BeamSearch(OptimizerConfig(scorer="replay"), a, scorer, tr, np.intersect1d(dev, cov))
        state = loop.run(loop.new_state([Candidate(i, "", origin="released") for i in scorer.ids], {}))
        chosen = [state.candidates[c] for c in state.beam]
        t2 = time.perf_counter()
        times.append({"aspect": name, "load_s": t1 - t0, "optimize_s": t2 - t1, "pulls": state.trajectory[0]["pulls"],
                      "heldout_top4": correlation(scorer.predict_set(chosen, te), scorer.gold[te])})
    print_table("LLM calls of the paper setting (α=β=b=4, c=1, minibatch 20, 128 pulls/round, 5 samples per score, "
                "reasoning prompt; CRSArena-Eval train fold; pull scoring is an upper bound: cached pairs are free; "
                "cost at gpt-4o-mini list prices, ~900 input / 300 output tokens per scoring call)",
                pd.DataFrame(calls), 2)
    print_table("Replay optimizer wall time on the full data (released scores, 16 candidates, 128 pulls)",
                pd.DataFrame(times), 3)


if __name__ == "__main__":
    main()
