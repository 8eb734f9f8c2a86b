"""``face compare``'s tests checked on systems with known answers (``experiment=system_comparison``).

Input: per system, ``Units`` of its scores (K aspects); for agreement, two finished comparisons.

* ``agreement``: every pair of systems as ``face compare`` tests it (``face.comparison.engine``: unpaired, different
  systems having different conversations; Holm over aspects × pairs), once on FACE's scores and once on the human
  labels, and the arena's own test of each pair (its Bradley–Terry ratings, votes resampled): each cell FACE
  separates is *confirmed* by a reference that separates it the same way, *contradicted* by one that separates it
  the other way, *unconfirmed* where the reference does not separate it (not counted as an agreement).
* ``calibration``: each system's conversations split at random into two halves, the halves compared (unpaired; and
  paired, the i-th conversation of one half given the same id as the i-th of the other, so that the pairs are
  exchangeable and the null holds exactly): the rate of rejections per test, and after Holm over a split's family
  (every system × aspect) the rate of splits with any rejection.
* ``power``: n conversations per system subsampled without replacement, every pair tested (Holm over the pair's
  aspects: the family a builder comparing two versions has), how often the human ordering is recovered.
"""

from __future__ import annotations

import itertools
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from face.comparison import stats
from face.resample import draw_counts

Systems = Mapping[str, stats.Units]


def arena_tests(boot: np.ndarray, point: np.ndarray, names: Sequence[str]) -> pd.DataFrame:
    """The arena's own test of every pair of ``names``, both ways round (baseline, candidate): the direction of the
    point Bradley–Terry ratings ``point`` and a two-sided bootstrap p-value from the ratings of votes resampled
    (``boot``: B × systems), ``min(1, 2 (1 + #{Δ* on the other side of 0}) / (B + 1))``, Holm over the pairs."""
    rows = []
    for i, j in itertools.combinations(range(len(names)), 2):
        d, bd = point[j] - point[i], boot[:, j] - boot[:, i]
        other = np.sum(bd <= 0) if d > 0 else np.sum(bd >= 0) if d < 0 else len(bd)
        rows.append((names[i], names[j], np.sign(d), min(1.0, 2 * (1 + other) / (len(bd) + 1))))
    df = pd.DataFrame(rows, columns=["baseline", "candidate", "arena_direction", "arena_p"])
    df = df.assign(arena_p_holm=stats.holm(df["arena_p"].to_numpy()))
    mirror = df.rename(columns={"baseline": "candidate", "candidate": "baseline"})
    return pd.concat([df, mirror.assign(arena_direction=-mirror["arena_direction"])], ignore_index=True)


def checked_by(separates: pd.Series, sign: pd.Series, ref_separates: pd.Series, ref_sign: pd.Series) -> list[str]:
    """Per cell a verdict separates: "confirmed" where the reference separates it in the same direction,
    "contradicted" where the reference separates it in the other, "unconfirmed" where the reference does not
    separate it (it neither agrees nor disagrees); "" where the verdict does not separate the cell."""
    return ["" if not s else "unconfirmed" if not r else "confirmed" if d == rd else "contradicted"
            for s, d, r, rd in zip(separates, sign, ref_separates, ref_sign)]


def agreement(face: pd.DataFrame, human: pd.DataFrame, arena: pd.DataFrame, alpha: float) -> pd.DataFrame:
    """One row per pair × aspect from two comparisons of the same systems (``Comparison.differences``: FACE's
    scores and the human labels, each with Holm over its own aspects × pairs) and the arena's tests of the pairs
    (``arena_tests``): differences, p-values, who separates the cell, FACE's separations checked by the humans'
    and by the arena's (``checked_by``), the humans' by the arena's, and FACE separating a cell against the
    direction of a non-zero human mean difference."""
    keys = ["aspect", "baseline", "candidate"]
    cols = [*keys, "diff", "p_value", "p_holm"]
    df = face[cols].merge(human[cols], on=keys, suffixes=("_face", "_human"), validate="one_to_one")
    df = df.rename(columns={"diff_face": "face_diff", "p_value_face": "face_p", "p_holm_face": "face_p_holm",
                            "diff_human": "human_diff", "p_value_human": "human_p", "p_holm_human": "human_p_holm"})
    df = df.merge(arena[["baseline", "candidate", "arena_direction", "arena_p_holm"]], on=["baseline", "candidate"],
                  how="left", validate="many_to_one")
    for who in ("face", "human", "arena"):
        df[f"{who}_separates"] = df[f"{who}_p_holm"] < alpha
    face_sign, human_sign = np.sign(df["face_diff"]), np.sign(df["human_diff"])
    df["face_by_humans"] = checked_by(df["face_separates"], face_sign, df["human_separates"], human_sign)
    df["face_by_arena"] = checked_by(df["face_separates"], face_sign, df["arena_separates"], df["arena_direction"])
    df["human_by_arena"] = checked_by(df["human_separates"], human_sign, df["arena_separates"],
                                      df["arena_direction"])
    df["face_against_human_means"] = df["face_separates"] & (human_sign == -face_sign)  # 0: none
    return df


def agreement_summary(df: pd.DataFrame) -> pd.DataFrame:
    """Per aspect (and all aspects): pairs; of those FACE separates, how many the humans' own test confirms,
    contradicts, leaves unconfirmed, and how many lie against the humans' mean difference; the same against the
    arena's test; of those the humans separate, how many the arena confirms / contradicts; both separated."""
    def row(name: str, g: pd.DataFrame) -> tuple:
        f, h = g["face_by_humans"], g["face_by_arena"]
        return (name, len(g), int(g["face_separates"].sum()),
                *(int((f == v).sum()) for v in ("confirmed", "contradicted", "unconfirmed")),
                int(g["face_against_human_means"].sum()),
                *(int((h == v).sum()) for v in ("confirmed", "contradicted", "unconfirmed")),
                int(g["human_separates"].sum()),
                *(int((g["human_by_arena"] == v).sum()) for v in ("confirmed", "contradicted")),
                int((g["face_separates"] & g["human_separates"]).sum()))

    rows = [row(a, g) for a, g in df.groupby("aspect", sort=False)] + [row("all aspects", df)]
    return pd.DataFrame(rows, columns=["aspect", "pairs", "face_separated", "confirmed_by_humans",
                                       "contradicted_by_humans", "unconfirmed_by_humans", "against_human_means",
                                       "confirmed_by_arena", "contradicted_by_arena", "unconfirmed_by_arena",
                                       "human_separated", "human_confirmed_by_arena", "human_contradicted_by_arena",
                                       "both_separated"])


def _halves(u: stats.Units, rng: np.random.Generator) -> tuple[stats.Units, stats.Units]:
    perm = rng.permutation(len(u))
    h = len(u) // 2
    return u.take(perm[:h]), u.take(perm[h:2 * h])


def _split_tests(units: Systems, n_boot: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """One random split of every system: p-values (systems × K) of its halves, unpaired and paired."""
    out: dict[str, list] = {"unpaired": [], "paired": []}
    for u in units.values():
        a, b = _halves(u, rng)
        ma = stats.moments(a, draw_counts(len(a), n_boot, rng))
        mb = stats.moments(b, draw_counts(len(b), n_boot, rng))
        out["unpaired"].append(stats.unpaired(ma, mb, 0.95).p_value)
        out["paired"].append(stats.paired(a, b, draw_counts(len(a), n_boot, rng), 0.95).p_value)
    return {k: np.array(v) for k, v in out.items()}


def calibration(units: Systems, aspects: Sequence[str], n_splits: int, n_boot: int, alpha: float, seed: int
                ) -> pd.DataFrame:
    """One row per split × test mode × system × aspect: p, Holm-adjusted p (over the split's systems × aspects)."""
    rng = np.random.default_rng(seed)
    names = list(units)
    rows = []
    for split in range(n_splits):
        with stats.one_thread():
            tests = _split_tests(units, n_boot, rng)
        for mode, p in tests.items():
            adj = stats.holm(p.ravel()).reshape(p.shape)
            rows += [(split, mode, s, a, p[i, k], adj[i, k]) for i, s in enumerate(names)
                     for k, a in enumerate(aspects)]
    df = pd.DataFrame(rows, columns=["split", "mode", "system", "aspect", "p", "p_holm"])
    return df.assign(rejected=df["p"] < alpha, rejected_holm=df["p_holm"] < alpha)


def calibration_summary(df: pd.DataFrame, alpha: float) -> pd.DataFrame:
    """Per mode (and aspect): the false-positive rate per test before Holm with its Monte Carlo error (the sd of
    the per-split rates / √splits: tests of one split share conversations), and after Holm the family-wise rate
    (splits with any rejection) with its binomial error; ``within`` says whether each is ≤ α + 2 MC errors."""
    rows = []
    groups = [((mode, "all aspects"), g) for mode, g in df.groupby("mode", sort=False)]
    for (mode, aspect), g in [*groups, *df.groupby(["mode", "aspect"], sort=False)]:
        per_split = g.groupby("split")
        rate = per_split["rejected"].mean()
        fwer = per_split["rejected_holm"].any()
        se, fse = rate.std(ddof=1) / np.sqrt(len(rate)), np.sqrt(fwer.mean() * (1 - fwer.mean()) / len(fwer))
        rows.append((mode, aspect, len(rate), len(g), g["rejected"].mean(), se, g["rejected_holm"].mean(),
                     fwer.mean(), fse))
    out = pd.DataFrame(rows, columns=["mode", "aspect", "splits", "tests", "fpr", "fpr_mc_error", "fpr_holm",
                                      "familywise_holm", "familywise_mc_error"])
    return out.assign(fpr_within=out["fpr"] <= alpha + 2 * out["fpr_mc_error"],
                      familywise_within=out["familywise_holm"] <= alpha + 2 * out["familywise_mc_error"])


def power(units: Systems, human_dir: Mapping[tuple[str, str], np.ndarray], aspects: Sequence[str],
          sizes: Sequence[int | None], reps: int, n_boot: int, alpha: float, seed: int) -> pd.DataFrame:
    """One row per size × repetition × pair × aspect: whether FACE (Holm over the pair's aspects) separates the pair
    in the humans' direction (``human_dir[pair]``: sign of the human means' difference, per aspect) or against it.
    ``sizes``: conversations per system (None: all; a system with fewer keeps all of its)."""
    rng = np.random.default_rng(seed)
    pairs = list(human_dir)
    rows = []
    for n in sizes:
        for rep in range(reps):
            sub = {s: u if n is None or n >= len(u) else u.take(np.sort(rng.choice(len(u), n, replace=False)))
                   for s, u in units.items()}  # n of each system's conversations, without replacement
            with stats.one_thread():  # each pair's second system minus its first, unpaired
                mom = {s: stats.moments(u, draw_counts(len(u), n_boot, rng)) for s, u in sub.items()}
                tests = [stats.unpaired(mom[a], mom[b], 0.95) for a, b in pairs]
            for pair, test in zip(pairs, tests):
                sep = stats.holm(test.p_value) < alpha
                right = sep & (np.sign(test.diff) == human_dir[pair])
                rows += [("all" if n is None else n, rep, *pair, a, bool(right[k]), bool(sep[k] and not right[k]))
                         for k, a in enumerate(aspects)]
    return pd.DataFrame(rows, columns=["n", "rep", "system_a", "system_b", "aspect", "recovered", "wrong_direction"])
