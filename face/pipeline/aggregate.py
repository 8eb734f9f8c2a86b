"""Per-particle scores -> turn and dialogue predictions.

Input: a long score table (one row per aspect × particle × instruction; columns ``SCORE_COLUMNS``),
whether it comes from the authors' released files or from our live scoring.
Output: ``Predictions`` — turn-level predictions for turn-level aspects, dialogue-level predictions
for dialogue-level aspects.

Aggregation is two-stage: first over a particle's instructions (``instruction_agg``), then over
particles (``particle_agg``) — all particles of the turn for a turn score, all particles of the
conversation for a dialogue score. With ``mean``/``mean`` and the same instructions for every
particle (the released data and our pipeline), this is exactly the mean over particles ×
instructions, the paper's definition.

Predictions are rounded to ``PRED_DECIMALS`` decimals: different summation orders of the same
numbers differ in the last bits, and such noise would break (or invent) ties and so move rank
correlations. Rounding makes mathematically equal predictions tie exactly, whatever the order.
"""

from __future__ import annotations

from typing import Literal, Mapping, Sequence, get_args

import numpy as np
import pandas as pd

from face.predictions import DIALOGUE_COLUMNS, TURN_COLUMNS, Predictions, round_preds

Aggregator = Literal["mean", "median", "max", "min"]
AGGREGATORS = get_args(Aggregator)


def _check_agg(name: str) -> str:
    if name not in AGGREGATORS:
        raise ValueError(f"unknown aggregator {name!r}; choose one of {', '.join(AGGREGATORS)}")
    return name


def particle_scores(scores: pd.DataFrame, instruction_agg: str = "mean",
                    instructions: Sequence[str] | None = None) -> pd.DataFrame:
    """One score per particle: ``instruction_agg`` over its instructions (optionally a subset of them)."""
    _check_agg(instruction_agg)
    if instructions is not None:
        known = set(scores["instruction_id"].unique())
        unknown = [i for i in instructions if i not in known]
        if unknown:
            raise ValueError(f"instructions {unknown} not in the scores; available: {sorted(known)}")
        scores = scores[scores["instruction_id"].isin(instructions)]
    keys = ["aspect", "conv_id", "turn_ind", "particle_ind"]
    return scores.groupby(keys, sort=False, observed=True)["score"].agg(instruction_agg).reset_index()


def aggregate(scores: pd.DataFrame, levels: Mapping[str, str], instruction_agg: str = "mean",
              particle_agg: str = "mean", instructions: Sequence[str] | None = None,
              rounded: bool = True) -> Predictions:
    """Turn and dialogue predictions from per-particle × instruction scores.

    ``levels`` maps each aspect to ``turn`` or ``dialogue``; ``rounded=False``: unrounded, for predictions that are
    averaged again (the optimizer's replay of instruction sets), rounded once at the end."""
    _check_agg(particle_agg)
    missing = sorted(set(scores["aspect"].unique()) - set(levels))
    if missing:
        raise ValueError(f"no level known for aspect(s) {missing}")
    per_particle = particle_scores(scores, instruction_agg, instructions)
    levels = per_particle["aspect"].map(dict(levels)).astype(str)
    turn_part, dial_part = per_particle[levels == "turn"], per_particle[levels == "dialogue"]
    turn = (turn_part.groupby(["aspect", "conv_id", "turn_ind"], sort=False)["score"].agg(particle_agg)
            .reset_index().rename(columns={"score": "pred"}))
    dialogue = (dial_part.groupby(["aspect", "conv_id"], sort=False)["score"].agg(particle_agg)
                .reset_index().rename(columns={"score": "pred"}))
    if rounded:
        turn["pred"] = round_preds(turn["pred"])
        dialogue["pred"] = round_preds(dialogue["pred"])
    return Predictions(turn[TURN_COLUMNS], dialogue[DIALOGUE_COLUMNS])


def instruction_ids(scores: pd.DataFrame) -> list[str]:
    return sorted(scores["instruction_id"].unique())


def random_instruction_subsets(ids: Sequence[str], k: int, seeds: Sequence[int]) -> list[list[str]]:
    """One random k-subset of ``ids`` per seed (reproducible)."""
    if not 1 <= k <= len(ids):
        raise ValueError(f"k={k} must be between 1 and the number of instructions ({len(ids)})")
    return [sorted(np.random.default_rng(s).choice(sorted(ids), size=k, replace=False).tolist()) for s in seeds]
