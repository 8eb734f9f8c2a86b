"""The scorer the optimization loop talks to: predictions of a candidate instruction for items.

Protocol: ``predict(candidate, idx) -> array`` (one prediction per item index, NaN = none),
``predict_set(candidates, idx)`` (the FACE prediction of an instruction set: mean over instructions ×
particles, face.pipeline.aggregate) and, for the live scorer only, ``explain(candidate, idx)`` (what the gradient
prompt shows: the item's text, its particles with their scores, prediction and gold).

- ``LiveScorer``: FACE scoring through face/llm (any backend); every (instruction, particle) score is
  computed once per process and cached on disk by the LLM layer; an item without particles gets no prediction (the
  pipeline's default, ``method.empty_turn=drop``) unless given an ``empty_score``.
- ``ReplayScorer``: the authors' released per-particle scores; a candidate is a released instruction.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from face.aspects import Aspect
from face.data.schema import Conversation, Instruction
from face.datasets.face_released import SCORE_COLUMNS
from face.optimize.checkpoint import Candidate
from face.optimize.items import Item
from face.pipeline.aggregate import aggregate
from face.pipeline.particles import Decomposition
from face.pipeline.score_prompts import Unit, one_line, units_for
from face.pipeline.scoring import ScoringSpec, plan, score
from face.predictions import Predictions


class ReplayScorer:
    """The released judgements as an oracle: ``matrix[k, i]`` = item i's FACE prediction under instruction k alone
    (face.pipeline.aggregate: the mean over the particles of the turn, or of the whole conversation). Every particle
    has a score under every instruction, so the mean of rows is the prediction of their set (unrounded here: the
    means of rows are rounded where they are correlated)."""

    def __init__(self, scores: pd.DataFrame, items: Sequence[Item], level: str):
        self.items = list(items)
        self.ids = sorted(scores["instruction_id"].astype(str).unique())
        levels = dict.fromkeys(scores["aspect"].unique(), level)
        self.matrix = np.vstack([_item_preds(aggregate(scores, levels, instructions=[k], rounded=False), self.items)
                                 for k in self.ids]) if self.ids else np.empty((0, len(self.items)))
        self.row = {k: i for i, k in enumerate(self.ids)}
        self.gold = np.array([it.gold for it in self.items])

    def covered(self) -> np.ndarray:
        """Indices of items with a released score (turns without particles have none)."""
        return np.flatnonzero(~np.isnan(self.matrix).any(0))

    def predict(self, cand: Candidate, idx: np.ndarray) -> np.ndarray:
        return self.matrix[self.row[cand.cid], idx]

    def predict_set(self, cands: Sequence[Candidate], idx: np.ndarray) -> np.ndarray:
        return self.matrix[[self.row[c.cid] for c in cands]][:, idx].mean(0)


class LiveScorer:
    """FACE's own scoring (face.pipeline.scoring) of the particles of each item under a candidate instruction."""

    def __init__(self, client, aspect: Aspect, convs: Sequence[Conversation], items: Sequence[Item],
                 decomps: dict[tuple[str, int], Decomposition], spec: ScoringSpec, json_schema: bool,
                 judged: str = "conversational recommender systems", empty_score: float | None = None,
                 example_chars: int = 400):
        self.client, self.aspect, self.spec = client, aspect, spec
        self.json_schema, self.judged = json_schema, judged
        self.convs = {c.conv_id: c for c in convs}
        self.items = list(items)
        self.empty = np.nan if empty_score is None else empty_score
        self.example_chars = example_chars
        by_conv = {c.conv_id: units_for(aspect, [c], decomps, "particle") for c in convs}
        self.units: list[list[Unit]] = [by_conv[it.conv_id] if it.turn_ind < 0 else
                                        [u for u in by_conv[it.conv_id] if u.turn_ind == it.turn_ind]
                                        for it in self.items]
        self.memo: dict[tuple[str, Unit], float] = {}  # (candidate id, unit) -> its score

    def _ensure(self, cands: Sequence[Candidate], idx: np.ndarray) -> None:
        """Score what is not known yet: one batch over every missing (candidate, particle)."""
        planned = []
        for cand in cands:
            todo = list(dict.fromkeys(u for i in idx for u in self.units[i] if (cand.cid, u) not in self.memo))
            if todo:
                ins = Instruction(cand.cid, cand.text, None, "optimizer")
                planned += plan(todo, [ins], self.convs, self.spec, self.json_schema, self.judged)
        if not planned:
            return
        records = score(self.client, planned, self.spec, desc=f"optimizer scoring {self.aspect.name}")
        for rec, p in zip(records, planned):
            self.memo[(p.instruction.instruction_id, p.unit)] = rec.score

    def covered(self) -> np.ndarray:
        """Indices of items with a prediction whatever the scores: those with particles, or all given an
        ``empty_score``."""
        return np.array([i for i, us in enumerate(self.units) if us or not np.isnan(self.empty)], dtype=int)

    def predict(self, cand: Candidate, idx: np.ndarray) -> np.ndarray:
        return self.predict_set([cand], idx)

    def predict_set(self, cands: Sequence[Candidate], idx: np.ndarray) -> np.ndarray:
        """The pipeline's prediction (face.pipeline.aggregate) of items ``idx`` under the set ``cands``; NaN where a
        particle-less item has no ``empty_score`` or no particle has a valid answer (fallback=drop)."""
        idx = np.asarray(idx, dtype=int)
        self._ensure(cands, idx)
        rows = [(self.aspect.name, u.conv_id, u.turn_ind, u.particle_ind, c.cid, self.memo[(c.cid, u)])
                for c in cands for i in idx for u in self.units[i]]
        preds = aggregate(pd.DataFrame(rows, columns=SCORE_COLUMNS), {self.aspect.name: self.aspect.level})
        items = [self.items[i] for i in idx]
        return np.where([bool(self.units[i]) for i in idx], _item_preds(preds, items), self.empty)

    def explain(self, cand: Candidate, idx: np.ndarray) -> list[dict]:
        out, cut = [], self.example_chars
        for i, pred in zip(idx, self.predict(cand, idx)):
            it = self.items[i]
            conv = self.convs[it.conv_id]
            if it.turn_ind >= 0:  # the turn and the one before it
                shown = [t for t in conv.turns if t.turn_ind < it.turn_ind][-1:] + [conv.turn(it.turn_ind)]
                context = "\n".join(f"{t.role}: {one_line(t.utterance)[:cut]}" for t in shown)
            else:
                context = "\n".join(f"Turn {t.turn_ind} {t.role}: {one_line(t.utterance)[:cut // 4]}"
                                    for t in conv.turns)[: cut * 3]
            particles = [{"turn": u.turn_ind, **vars(u.particle), "score": self.memo[(cand.cid, u)]}
                         for u in self.units[i]]  # (units of particles: each has one)
            out.append({"conv_id": it.conv_id, "turn_ind": it.turn_ind, "context": context, "particles": particles,
                        "pred": float(pred), "gold": it.gold})
        return out


def _item_preds(preds: Predictions, items: Sequence[Item]) -> np.ndarray:
    """The prediction of each item (a turn, or a dialogue: ``turn_ind`` -1) from ``preds``; NaN where it has none."""
    turn = {(c, t): p for c, t, p in zip(preds.turn["conv_id"].astype(str), preds.turn["turn_ind"], preds.turn["pred"])}
    dial = {c: p for c, p in zip(preds.dialogue["conv_id"].astype(str), preds.dialogue["pred"])}
    return np.array([dial.get(it.conv_id, np.nan) if it.turn_ind < 0 else turn.get((it.conv_id, it.turn_ind), np.nan)
                     for it in items], float)
