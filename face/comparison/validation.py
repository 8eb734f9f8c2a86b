"""``face compare``'s tests checked on systems with known answers (``experiment=system_comparison``).

Input: per system, ``Units`` of its scores (K aspects); for agreement, two finished comparisons.

* ``agreement``: every pair of systems as ``face compare`` tests it (``face.comparison.engine``: unpaired, different
  systems having different conversations; Holm over aspects × pairs), once on FACE's scores and once on the human
  labels: which pairs FACE separates and whether the direction agrees with the human labels' means and with an
  external ranking (the arena's Bradley–Terry ratings); which pairs the humans' own scores separate.
* ``calibration``: each system's conversations split at random into two halves, the halves compared (unpaired; and
  paired, the i-th conversation of one half given the same id as the i-th of the other, so that the pairs are
  exchangeable and the null holds exactly): the rate of rejections per test, and after Holm over a split's family
  (every system × aspect) the rate of splits with any rejection.
* ``power``: n conversations per system subsampled without replacement, every pair tested (Holm over the pair's
  aspects: the family a builder comparing two versions has), how often the human ordering is recovered.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from face.comparison import stats
from face.resample import draw_counts

Systems = Mapping[str, stats.Units]


def _moments(units: Systems, n_boot: int, rng: np.random.Generator) -> dict[str, stats.Moments]:
    return {name: stats.moments(u, draw_counts(len(u), n_boot, rng)) for name, u in units.items()}


def _pair_tests(mom: dict[str, stats.Moments], pairs: Sequence[tuple[str, str]]) -> tuple[np.ndarray, np.ndarray]:
    """(differences, p-values), pairs × K, each pair's second system minus its first, unpaired."""
    tests = [stats.unpaired(mom[a], mom[b], 0.95) for a, b in pairs]
    return np.array([t.diff for t in tests]), np.array([t.p_value for t in tests])


def agreement(face: pd.DataFrame, human: pd.DataFrame, reference: Mapping[str, float], alpha: float
              ) -> pd.DataFrame:
    """One row per pair × aspect from two comparisons of the same systems (``Comparison.differences``: FACE's
    scores and the human labels, each with Holm over its own aspects × pairs): both differences, p-values and
    verdicts, the human means' and the reference's direction (candidate − baseline), and who agrees with whom."""
    keys = ["aspect", "baseline", "candidate"]
    cols = [*keys, "diff", "p_value", "p_holm"]
    df = face[cols].merge(human[cols], on=keys, suffixes=("_face", "_human"), validate="one_to_one")
    df = df.rename(columns={"diff_face": "face_diff", "p_value_face": "face_p", "p_holm_face": "face_p_holm",
                            "diff_human": "human_diff", "p_value_human": "human_p", "p_holm_human": "human_p_holm"})
    df["arena_direction"] = [np.sign(reference[c] - reference[b]) for b, c in zip(df["baseline"], df["candidate"])]
    df["face_separates"] = df["face_p_holm"] < alpha
    df["human_separates"] = df["human_p_holm"] < alpha
    df["face_agrees_human"] = np.sign(df["face_diff"]) == np.sign(df["human_diff"])
    df["face_agrees_arena"] = np.sign(df["face_diff"]) == df["arena_direction"]
    df["human_agrees_arena"] = np.sign(df["human_diff"]) == df["arena_direction"]
    return df


def agreement_summary(df: pd.DataFrame) -> pd.DataFrame:
    """Per aspect (and all aspects): pairs, how many FACE separates, of those how many agree with the human means
    and with the arena; how many the human labels separate, of those how many agree with the arena; both."""
    def row(name: str, g: pd.DataFrame) -> tuple:
        f, h = g[g["face_separates"]], g[g["human_separates"]]
        return (name, len(g), len(f), int(f["face_agrees_human"].sum()), int(f["face_agrees_arena"].sum()),
                len(h), int(h["human_agrees_arena"].sum()), int((g["face_separates"] & g["human_separates"]).sum()))

    rows = [row(a, g) for a, g in df.groupby("aspect", sort=False)] + [row("all aspects", df)]
    return pd.DataFrame(rows, columns=["aspect", "pairs", "face_separated", "face_agree_human_means",
                                       "face_agree_arena", "human_separated", "human_agree_arena", "both_separated"])


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


def _subsample(u: stats.Units, n: int | None, rng: np.random.Generator) -> stats.Units:
    if n is None or n >= len(u):
        return u
    return u.take(np.sort(rng.choice(len(u), n, replace=False)))


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
            sub = {s: _subsample(u, n, rng) for s, u in units.items()}
            with stats.one_thread():
                d, p = _pair_tests(_moments(sub, n_boot, rng), pairs)
            for i, pair in enumerate(pairs):
                adj = stats.holm(p[i])
                sep = adj < alpha
                right = sep & (np.sign(d[i]) == human_dir[pair])
                rows += [("all" if n is None else n, rep, *pair, a, bool(right[k]), bool(sep[k] and not right[k]))
                         for k, a in enumerate(aspects)]
    return pd.DataFrame(rows, columns=["n", "rep", "system_a", "system_b", "aspect", "recovered", "wrong_direction"])
