"""What moved between a baseline and a candidate: per aspect, the dialogue acts and the particles whose mean score
changed most, and the conversations that got worse (linked into the runs' diagnostics reports).

* Dialogue acts: the mean particle score (a particle's score: its mean over instructions) per act in each run.
* Particles: the same per particle *kind* — dialogue act and mention (case and spacing ignored) — where both runs
  have it (e.g. how "recommendation: Heat (1995)" fared before and after).
* Conversations: with shared conversation ids, those whose score (its dialogue score, or the mean of its turns'
  scores at turn level) dropped most; without, the candidate's lowest-scoring conversations.
"""

from __future__ import annotations

from typing import Sequence

import pandas as pd

from face.comparison.runs import Run

_MEANS = ["baseline_mean", "candidate_mean", "diff", "n_baseline", "n_candidate"]
COLUMNS = {"acts": ["baseline", "candidate", "aspect", "dialogue_act", *_MEANS],
           "particles": ["baseline", "candidate", "aspect", "dialogue_act", "mention", *_MEANS],
           "conversations": ["baseline", "candidate", "aspect", "kind", "conv_id", "baseline_score", "candidate_score",
                             "diff", "baseline_report", "candidate_report"]}


def _top_changes(a: pd.DataFrame, b: pd.DataFrame, keys: list[str], top: int) -> pd.DataFrame:
    """Per aspect, the ``top`` keys present in both with the largest |candidate − baseline| of their mean score."""
    def per(p: pd.DataFrame) -> pd.DataFrame:
        return p.groupby(["aspect", *keys])["score"].agg(["mean", "size"])

    j = per(a).merge(per(b), left_index=True, right_index=True, suffixes=("_a", "_b")).reset_index()
    j = j.assign(diff=j["mean_b"] - j["mean_a"], change=(j["mean_b"] - j["mean_a"]).abs())
    j = j.sort_values(["aspect", "change", *keys], ascending=[True, False, *[True] * len(keys)], kind="stable")
    j = j.groupby("aspect", sort=False).head(top)
    return j.rename(columns={"mean_a": "baseline_mean", "mean_b": "candidate_mean", "size_a": "n_baseline",
                             "size_b": "n_candidate"}).drop(columns=["change"])


def _kind(p: pd.DataFrame) -> pd.DataFrame:
    """The particles with their mention as its kind: case and spacing ignored (an act's mean does not read it)."""
    return p.assign(mention=p["mention"].astype(str).map(lambda m: " ".join(m.lower().split())))


def conversation_scores(run: Run, aspects: Sequence[str]) -> pd.DataFrame:
    """conv_id, aspect, score: the dialogue score, or the mean of the conversation's turn scores."""
    return run.scores(aspects).groupby(["conv_id", "aspect"])["pred"].mean().rename("score").reset_index()


def worse_conversations(base: Run, cand: Run, aspects: Sequence[str], top: int) -> pd.DataFrame:
    """Per aspect the conversations that got worse most (shared ids), else the candidate's lowest-scoring."""
    a, b = conversation_scores(base, aspects), conversation_scores(cand, aspects)
    j = a.merge(b, on=["conv_id", "aspect"], suffixes=("_a", "_b"))
    if len(j):
        j = j.assign(diff=j["score_b"] - j["score_a"], kind="got worse")
        j = j[j["diff"] < 0].sort_values(["aspect", "diff", "conv_id"], kind="stable")
    else:
        j = b.rename(columns={"score": "score_b"}).assign(score_a=float("nan"), diff=float("nan"),
                                                          kind="lowest-scoring of the candidate")
        j = j.sort_values(["aspect", "score_b", "conv_id"], kind="stable")
    j = j.groupby("aspect", sort=False).head(top)
    return j.rename(columns={"score_a": "baseline_score", "score_b": "candidate_score"}).assign(
        baseline=base.name, candidate=cand.name, baseline_report=str(base.report or ""),
        candidate_report=str(cand.report or ""))[COLUMNS["conversations"]]


def what_moved(base: Run, candidates: Sequence[Run], aspects: Sequence[str], top: int) -> dict[str, pd.DataFrame]:
    """``{"acts", "particles", "conversations"}`` for the baseline against each candidate (empty frames where the
    runs have no particles: a run file keeps only turn and dialogue scores)."""
    found: dict[str, list[pd.DataFrame]] = {name: [] for name in COLUMNS}
    for cand in candidates:
        found["conversations"].append(worse_conversations(base, cand, aspects, top))
        if base.particles is None or cand.particles is None:
            continue
        pa, pb = (_kind(p[p["aspect"].isin(aspects)]) for p in (base.particles, cand.particles))
        for name, keys in (("acts", ["dialogue_act"]), ("particles", ["dialogue_act", "mention"])):
            t = _top_changes(pa, pb, keys, top)
            if len(t):
                found[name].append(t.assign(baseline=base.name, candidate=cand.name))
    return {name: pd.concat(items, ignore_index=True)[COLUMNS[name]] if items else pd.DataFrame(columns=COLUMNS[name])
            for name, items in found.items()}
