"""The fixed-n verdict of ``face compare`` sized for what it reports: the conversations ``n_needed`` says give the
Holm-adjusted verdict its stated power (80 %), checked by simulation against the engine's own verdicts."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from face.comparison import engine
from face.comparison.runs import Run
from face.predictions import DIALOGUE_COLUMNS, TURN_COLUMNS, Predictions

ASPECTS = ["dialogue_overall", "efficiency", "task_completion", "interest_arousal", "understanding"]  # m = 5 tests


def _run(name: str, scores: np.ndarray) -> Run:
    """A run with one dialogue score per conversation (rows) and aspect (columns); ids prefixed by ``name``."""
    ids = [f"{name}{i}" for i in range(len(scores))]
    rows = [(a, c, float(scores[i, k])) for i, c in enumerate(ids) for k, a in enumerate(ASPECTS)]
    return Run(name, name, Predictions(pd.DataFrame(columns=TURN_COLUMNS), pd.DataFrame(rows,
                                                                                        columns=DIALOGUE_COLUMNS)))


def _draw(rng, n: int, shift: float) -> tuple[Run, Run]:
    """Baseline sd 1, candidate sd 1.5 (unequal: both sides' variance counts); the candidate better by ``shift``
    on dialogue_overall only, the other four aspects without a difference."""
    base = rng.normal(0.0, 1.0, (n, len(ASPECTS)))
    cand = rng.normal(0.0, 1.5, (n, len(ASPECTS)))
    cand[:, 0] += shift
    return _run("a", base), _run("b", cand)


@pytest.mark.slow  # 400 comparisons: ≈ 25 s of CPU (measured: power 0.825 at n = 156)
def test_n_needed_conversations_give_the_holm_adjusted_verdict_its_80_percent_power():
    target = 0.5
    rng = np.random.default_rng(7)
    opts = engine.Options(n_boot=2000, target_diff=target, seed=1)
    pilot = engine._Engine(_draw(rng, 4000, target), ASPECTS, opts).differences()
    n = int(pilot["n_needed"].iloc[0])
    # σ² = 1 + 2.25 per conversation; (z_{1-.05/10} + z_{.8})² · 3.25 / .25 = (2.5758 + 0.8416)² · 13 = 151.9: the
    # t quantiles add about one; an unadjusted test would say (1.96 + 0.8416)² · 13 = 102
    assert n == pytest.approx(153, abs=6)
    runs, better = 400, 0
    for r in range(runs):
        d = engine._Engine(_draw(rng, n, target), ASPECTS, engine.Options(n_boot=2000, seed=r)).differences()
        better += d["verdict"].iloc[0] == "better"
    power = better / runs
    # binomial sd at 0.8 over 400 runs: 0.02; Holm is at least as powerful as the Bonferroni level it is sized at
    assert 0.8 - 3 * 0.02 <= power <= 0.8 + 3 * 0.02 + 0.02, power
