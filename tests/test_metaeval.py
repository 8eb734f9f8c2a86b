"""Correlations agree with scipy; vectorised bootstrap coefficients equal scipy on the resampled data."""

from __future__ import annotations

import functools

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from face.coefficients import REGISTRY, rows_correlation
from face.data.schema import Conversation, Turn
from face.datasets.crsarena import ASPECTS
from face.metaeval import (
    COEFFICIENTS,
    bootstrap_ci,
    cluster_weights,
    correlate,
    meta_evaluate,
    system_correlations,
    warn_once,
)
from face.predictions import Predictions

WEIGHTED = {name: c.weighted for name, c in REGISTRY.items()}
SCIPY = {"pearson": stats.pearsonr, "spearman": stats.spearmanr, "kendall": stats.kendalltau}


@pytest.mark.parametrize("seed", range(5))
def test_point_estimates_match_scipy(seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=60)
    y = x + rng.normal(size=60)
    got = correlate(x, y)
    for c in COEFFICIENTS:
        assert got[c][0] == pytest.approx(SCIPY[c](x, y)[0], abs=1e-12)


@pytest.mark.parametrize("coef", COEFFICIENTS)
@pytest.mark.parametrize("seed", range(4))
def test_weighted_coefficients_equal_scipy_on_expanded_sample(coef, seed):
    rng = np.random.default_rng(seed)
    n = 40
    x = rng.integers(0, 5, n).astype(float)  # many ties, like human labels
    y = np.round(rng.normal(size=n) + 0.3 * x, 1)
    w = rng.integers(0, 4, (6, n)).astype(float)
    got = WEIGHTED[coef](x, y, w)
    for r in range(len(w)):
        xe, ye = np.repeat(x, w[r].astype(int)), np.repeat(y, w[r].astype(int))
        assert got[r] == pytest.approx(SCIPY[coef](xe, ye)[0], abs=1e-9)


def test_rows_correlation_matches_scipy_per_row():
    rng = np.random.default_rng(0)
    a, b = rng.integers(0, 4, (20, 9)).astype(float), rng.normal(size=(20, 9))
    for c in COEFFICIENTS:
        got = rows_correlation(a, b, c)
        want = [SCIPY[c](a[r], b[r])[0] for r in range(20)]
        np.testing.assert_allclose(got, want, atol=1e-12)


def test_cluster_weights_resample_whole_clusters_within_strata():
    clusters = np.array(["a", "a", "b", "c", "c", "c", "d"])
    strata = np.array(["s1", "s1", "s1", "s2", "s2", "s2", "s2"])
    w = cluster_weights(clusters, 200, np.random.default_rng(0), strata)
    assert (w[:, 0] == w[:, 1]).all() and (w[:, 3] == w[:, 4]).all()  # a conversation's turns move together
    # s1 has 2 conversations (a, b): their counts always sum to 2; s2 (c, d) likewise
    assert ((w[:, 0] + w[:, 2]) == 2).all() and ((w[:, 3] + w[:, 6]) == 2).all()


def _clustered(seed: int, n_convs: int, turns: int):
    """Correlated predictions and labels of ``n_convs`` conversations with ``turns`` items each."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=n_convs * turns)
    return x, x + rng.normal(size=len(x)), np.repeat(np.arange(n_convs), turns)


def test_bootstrap_is_reproducible_and_seed_dependent():
    x, y, groups = _clustered(3, 60, 5)
    a = bootstrap_ci(x, y, groups, 500, seed=1)
    b = bootstrap_ci(x, y, groups, 500, seed=1)
    c = bootstrap_ci(x, y, groups, 500, seed=2)
    assert a == b and a != c
    point = correlate(x, y)
    for coef in COEFFICIENTS:
        lo, hi = a[coef]
        assert lo < point[coef][0] < hi and hi - lo < 0.3


def test_bootstrap_ci_is_the_percentile_interval_of_scipy_on_resampled_conversations():
    x, y, groups = _clustered(4, 30, 4)
    got = bootstrap_ci(x, y, groups, 200, seed=7)
    w = cluster_weights(groups, 200, np.random.default_rng(7)).astype(int)  # the same draws of conversations
    for coef in COEFFICIENTS:
        vals = [SCIPY[coef](np.repeat(x, wr), np.repeat(y, wr))[0] for wr in w]
        assert got[coef] == pytest.approx(tuple(np.percentile(vals, [2.5, 97.5])), abs=1e-9)


def _toy(n_convs=30, seed=0):
    """Conversations of 3 systems with one turn aspect and one dialogue aspect; predictions = label + noise."""
    rng = np.random.default_rng(seed)
    convs, turn_rows, dial_rows = [], [], []
    for i in range(n_convs):
        sys_ = ["kbrd", "barcor", "unicrs"][i % 3]
        split = "redial" if i % 2 else "opendialkg"
        cid = f"{sys_}_{split}_{i}"
        turns = []
        for t in range(3):
            rel = int(rng.integers(0, 3))
            turns += [Turn(2 * t, "USER", "u"), Turn(2 * t + 1, "ASST", "a", {"relevance": rel})]
            turn_rows.append(("relevance", cid, 2 * t + 1, rel + rng.normal(0, 0.5)))
        ov = int(rng.integers(0, 5))
        convs.append(Conversation(cid, tuple(turns), {"dialogue_overall": ov}, system=f"{sys_}_{split}", split=split))
        dial_rows.append(("dialogue_overall", cid, ov + rng.normal(0, 0.5)))
    preds = Predictions(pd.DataFrame(turn_rows, columns=["aspect", "conv_id", "turn_ind", "pred"]),
                        pd.DataFrame(dial_rows, columns=["aspect", "conv_id", "pred"]))
    return convs, preds


def test_meta_evaluate_levels_splits_and_missing_items():
    convs, preds = _toy()
    preds.turn = preds.turn.iloc[1:]  # one turn without prediction
    res = meta_evaluate(preds, convs, [ASPECTS["relevance"], ASPECTS["dialogue_overall"]],
                        ["redial", "opendialkg", "all"], n_boot=200)
    assert set(res["level"]) == {"turn", "dialogue", "system"}
    assert set(res["split"]) == {"redial", "opendialkg", "all"}
    turn_all = res[(res.level == "turn") & (res.split == "all") & (res.coefficient == "pearson")].iloc[0]
    assert turn_all["n"] == 89 and turn_all["n_missing"] == 1
    df = preds.turn.merge(pd.DataFrame([(c.conv_id, t.turn_ind, t.labels["relevance"]) for c in convs
                                        for t in c.assistant_turns()], columns=["conv_id", "turn_ind", "h"]))
    assert turn_all["value"] == pytest.approx(stats.pearsonr(df["pred"], df["h"])[0])
    assert turn_all["ci_low"] < turn_all["value"] < turn_all["ci_high"]
    dial = res[(res.level == "dialogue") & (res.split == "redial") & (res.coefficient == "spearman")].iloc[0]
    h = {c.conv_id: c.labels["dialogue_overall"] for c in convs if c.split == "redial"}
    d = preds.dialogue[preds.dialogue["conv_id"].isin(h)]
    assert dial["n"] == 15 and dial["value"] == pytest.approx(stats.spearmanr(d["pred"], d["conv_id"].map(h))[0])
    sys_rows = res[(res.level == "system") & (res.split == "all")]
    assert (sys_rows["n"] == 6).all()  # 3 systems × 2 datasets = 6 CRSs
    # system level: per-system means of predictions and labels (plain pandas), then scipy
    df = preds.dialogue.assign(system=preds.dialogue["conv_id"].str.rsplit("_", n=1).str[0],
                               human=[next(c.labels["dialogue_overall"] for c in convs if c.conv_id == i)
                                      for i in preds.dialogue["conv_id"]])
    means = df.groupby("system")[["pred", "human"]].mean()
    sys_k = sys_rows[(sys_rows.aspect == "dialogue_overall") & (sys_rows.coefficient == "kendall")].iloc[0]
    assert sys_k["value"] == pytest.approx(stats.kendalltau(means["pred"], means["human"])[0])


def test_system_level_uses_per_system_means():
    df = pd.DataFrame({"conv_id": list("abcdef"), "system": ["s1", "s1", "s2", "s2", "s3", "s3"],
                       "pred": [1, 3, 2, 2, 5, 7], "human": [0, 2, 1, 1, 3, 3]})
    out = system_correlations(df, n_boot=100)
    # means: pred (2, 2, 6), human (1, 1, 3) -> human = pred / 2: Pearson 1; ranks (1.5, 1.5, 3) on both: Spearman 1
    assert out["pearson"][0] == pytest.approx(1.0) and out["spearman"][0] == pytest.approx(1.0)
    assert out["pearson"][4] == 3


def test_bootstrap_coefficients_in_blocks_equal_the_whole_matrix_and_stay_linear_in_memory(monkeypatch):
    import tracemalloc

    from face import coefficients

    rng = np.random.default_rng(3)
    n = 3000  # S of Kendall's tau as one n × n float32 matrix: 36 MB, ≈ 108 MB at its peak with its temporaries
    x, y = np.round(rng.normal(size=n), 2), rng.integers(0, 3, n).astype(float)
    w = cluster_weights(rng.integers(0, 500, n), 40, np.random.default_rng(4))
    tracemalloc.start()
    kendall, spearman = WEIGHTED["kendall"](x, y, w), WEIGHTED["spearman"](x, y, w)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 80e6, peak  # blocks of S (16 MB each, ≈ 51 MB at the peak with their temporaries), not all of it
    monkeypatch.setattr(coefficients, "KENDALL_BLOCK", 10 ** 12)  # one block: the whole matrix
    monkeypatch.setattr(coefficients, "ROWS", 10 ** 9)
    assert np.array_equal(kendall, WEIGHTED["kendall"](x, y, w), equal_nan=True)
    assert np.array_equal(spearman, WEIGHTED["spearman"](x, y, w), equal_nan=True)


def test_bootstrap_ci_in_blocks_of_replicates_equals_every_replicate_at_once_on_integer_data(monkeypatch):
    """bootstrap_ci spreads the replicates over the items ``metaeval.ROWS`` at a time: the intervals are those of
    every replicate at once, to the bit. On integer predictions and labels every sum the coefficients take (of
    integer weights × integer values, far below 2**53) is exact in float64 whatever order a BLAS kernel adds in,
    so the equality cannot depend on which kernel the CPU gets (AVX-512 and Haswell kernels add in other orders)."""
    from face import metaeval

    rng = np.random.default_rng(5)
    x = rng.integers(0, 5, size=120).astype(float)
    y = x + rng.integers(-2, 3, size=120)
    groups = np.repeat(np.arange(40), 3)
    monkeypatch.setattr(metaeval, "ROWS", 7)  # 103 replicates: 14 blocks of 7 and one of 5
    blocks = bootstrap_ci(x, y, groups, 103, seed=3)
    monkeypatch.setattr(metaeval, "ROWS", 10 ** 9)  # one block
    assert bootstrap_ci(x, y, groups, 103, seed=3) == blocks


def test_bootstrap_ci_in_blocks_of_replicates_equals_every_replicate_at_once_on_real_data(monkeypatch):
    """The same on real-valued data, where a matrix product's last bit depends on how the BLAS kernel splits it
    (block shape, CPU): the same terms added in another order differ by at most ~n·eps relative (n = 120 items,
    eps = 2.2e-16: ~3e-14), so 1e-12 states "the same numbers" with room to spare and still tells a missing or
    repeated block (a different replicate set moves a percentile by ~1e-2)."""
    from face import metaeval

    x, y, groups = _clustered(5, 40, 3)
    monkeypatch.setattr(metaeval, "ROWS", 7)
    blocks = bootstrap_ci(x, y, groups, 103, seed=3)
    monkeypatch.setattr(metaeval, "ROWS", 10 ** 9)
    whole = bootstrap_ci(x, y, groups, 103, seed=3)
    assert whole.keys() == blocks.keys()
    for c in whole:
        assert whole[c] == pytest.approx(blocks[c], rel=1e-12, abs=0), c


# ---------------------------------------------------------------- what the mutation run showed untested

def test_p_values_are_scipys():
    rng = np.random.default_rng(11)
    x = rng.normal(size=25)
    y = 0.3 * x + rng.normal(size=25)
    got = correlate(x, y)
    for c in COEFFICIENTS:
        assert got[c][1] == pytest.approx(SCIPY[c](x, y)[1], rel=1e-9)
        assert got[c][1] != pytest.approx(got[c][0])  # a p-value, not the coefficient again


def test_every_conversation_is_drawn_once_per_replicate_on_average_within_its_stratum():
    """Resampling with replacement: each conversation is expected once per replicate (the last one too), and a
    stratum's draws stay in the stratum."""
    from face.metaeval import cluster_counts

    clusters = np.array([f"c{i}" for i in range(7)])
    strata = np.array(["s1"] * 3 + ["s2"] * 4)
    counts, inv = cluster_counts(clusters, 4000, np.random.default_rng(5), strata)
    assert counts.shape == (4000, 7) and (inv == np.arange(7)).all()
    assert (counts[:, :3].sum(axis=1) == 3).all() and (counts[:, 3:].sum(axis=1) == 4).all()
    np.testing.assert_allclose(counts.mean(axis=0), 1.0, atol=0.08)  # every one, the last included
    assert (counts.max(axis=0) >= 3).all()  # with replacement: a conversation can come several times


@functools.lru_cache(maxsize=1)
def _scipy_on_resampled_conversations() -> dict[str, list[float]]:
    """Each coefficient by scipy on each of 300 resamples of _clustered(4, 20, 3)'s conversations (seed 2): computed
    once for every confidence level asked of them."""
    x, y, groups = _clustered(4, 20, 3)
    w = cluster_weights(groups, 300, np.random.default_rng(2)).astype(int)
    return {coef: [SCIPY[coef](np.repeat(x, wr), np.repeat(y, wr))[0] for wr in w] for coef in COEFFICIENTS}


@pytest.mark.parametrize("confidence", [0.8, 0.95])
def test_bootstrap_ci_is_the_requested_percentile_interval(confidence):
    x, y, groups = _clustered(4, 20, 3)
    got = bootstrap_ci(x, y, groups, 300, seed=2, confidence=confidence)
    tail = 50 * (1 - confidence)
    for coef, vals in _scipy_on_resampled_conversations().items():
        assert got[coef] == pytest.approx(tuple(np.percentile(vals, [tail, 100 - tail])), abs=1e-9)


def test_system_level_interval_is_the_brute_force_over_resampled_conversations():
    """Resample conversations within each system, recompute every system's mean prediction and mean label from
    the resampled items (pandas), correlate the means (scipy): the percentile interval is the reported one."""
    rng = np.random.default_rng(8)
    rows = []
    for s in range(5):
        for c in range(4):
            for _ in range(1 + (c % 3)):  # conversations of different lengths: a mean over items, not over convs
                h = float(rng.integers(0, 3))
                rows.append((f"s{s}_c{c}", f"s{s}", h + 0.5 * s + rng.normal(0, 0.7), h + 0.3 * s))
    df = pd.DataFrame(rows, columns=["conv_id", "system", "pred", "human"])
    got = system_correlations(df, n_boot=100, seed=4, confidence=0.9)
    w = cluster_weights(df["conv_id"].to_numpy(), 100, np.random.default_rng(4), strata=df["system"].to_numpy())
    assert (w[:, df["conv_id"] == "s0_c1"] == w[:, [list(df["conv_id"]).index("s0_c1")]]).all()  # whole convs
    boots = []  # each replicate's system means, from its resampled items (once for every coefficient)
    for wr in w.astype(int):
        boot = df.loc[df.index.repeat(wr)]
        boots.append(boot.groupby("system")[["pred", "human"]].mean().round(10))  # ties exact (system_means)
    for coef in COEFFICIENTS:
        vals = [SCIPY[coef](means["pred"], means["human"])[0] for means in boots]
        lo, hi = np.nanpercentile(vals, [5, 95])
        assert got[coef][2:4] == pytest.approx((lo, hi), abs=1e-9), coef
        means = df.groupby("system")[["pred", "human"]].mean()
        assert got[coef][:2] == pytest.approx(tuple(SCIPY[coef](means["pred"], means["human"])), abs=1e-9)


def test_correlations_are_undefined_below_three_items_or_with_a_constant_side():
    assert all(np.isnan(v) for c in correlate([1.0, 2.0], [1.0, 3.0]).values() for v in c)
    assert all(np.isnan(v) for c in correlate([1.0, 1.0, 1.0, 1.0], [1.0, 3.0, 2.0, 4.0]).values() for v in c)
    assert all(np.isnan(v) for c in correlate([1.0, 3.0, 2.0, 4.0], [2.0, 2.0, 2.0, 2.0]).values() for v in c)
    assert all(np.isfinite(v) for c in correlate([1.0, 3.0, 2.0], [1.0, 2.0, 4.0]).values() for v in c)
    assert all(np.isfinite(v) for c in correlate([0.0, 1.0, 1.0, 0.0], [1.0, 2.0, 3.0, 1.5]).values() for v in c)
    assert all(np.isfinite(v) for c in correlate([1.0, 2.0, 3.0, 1.5], [0.0, 1.0, 1.0, 0.0]).values() for v in c)


def test_two_conversations_are_enough_for_an_interval_one_is_not():
    x, y = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0]), np.array([1.0, 3.0, 2.0, 5.0, 4.0, 6.0])
    two = bootstrap_ci(x, y, np.array([0, 0, 0, 1, 1, 1]), 50)
    one = bootstrap_ci(x, y, np.zeros(6), 50)
    assert all(np.isfinite(v) for ci in two.values() for v in ci)
    assert all(np.isnan(v) for ci in one.values() for v in ci)


def test_a_constant_side_with_float_noise_has_no_weighted_pearson():
    """0.1 seven times: its variance is a few ulps, not 0 -- still no correlation (scipy: NaN)."""
    x = np.full(7, 0.1)
    y = np.arange(7.0)
    assert np.isnan(WEIGHTED["pearson"](x, y, np.ones((1, 7))))[0]
    assert np.isnan(WEIGHTED["pearson"](y, x, np.ones((1, 7))))[0]
    big = np.full(1000, 0.1)  # the tolerance grows with the weights' total (the sums do)
    assert np.isnan(WEIGHTED["pearson"](big, np.arange(1000.0), np.ones((1, 1000))))[0]
    assert np.isnan(WEIGHTED["pearson"](np.arange(1000.0), big, np.ones((1, 1000))))[0]
    for level in (1000.1, 98765.4321, 3.3e7 + 0.3):  # and with the size of the values
        assert np.isnan(WEIGHTED["pearson"](np.full(7, level), y, np.ones((1, 7))))[0]
        assert np.isnan(WEIGHTED["pearson"](y, np.full(7, level), np.ones((1, 7))))[0]
    tiny = 1e-13 * y  # varying, however small: a correlation (1: a multiple of y)
    assert WEIGHTED["pearson"](tiny, y, np.ones((1, 7)))[0] == pytest.approx(1.0)
    assert WEIGHTED["pearson"](y, tiny, np.ones((1, 7)))[0] == pytest.approx(1.0)


def test_a_constant_row_has_no_correlation_at_system_level():
    """Seven systems with the same mean 0.1 (float noise after subtracting the mean): NaN, as scipy says."""
    b = np.array([[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 9.0]])
    for c in COEFFICIENTS:
        for level in (0.1, 1000.1, 98765.4321, 3.3e7 + 0.3):
            assert np.isnan(rows_correlation(np.full((1, 7), level), b, c))[0]
            assert np.isnan(rows_correlation(b, np.full((1, 7), level), c))[0]
        assert rows_correlation(1e-13 * b, b, c)[0] == pytest.approx(1.0)  # varying, however small
        assert rows_correlation(b, 1e-13 * b, c)[0] == pytest.approx(1.0)


def test_a_replicate_of_two_distinct_items_has_correlation_one():
    w = np.array([[1.0, 1.0, 0.0]])
    for c in COEFFICIENTS:
        assert WEIGHTED[c](np.array([1.0, 2.0, 3.0]), np.array([1.0, 3.0, 2.0]), w)[0] == pytest.approx(
            SCIPY[c]([1, 2], [1, 3])[0])
        assert rows_correlation(np.array([[1.0, 2.0]]), np.array([[1.0, 3.0]]), c)[0] == pytest.approx(1.0)


def test_system_means_without_weights_are_one_row():
    from face.metaeval import system_means

    names, means = system_means(np.array([1.0, 3.0, 2.0]), np.array(["b", "b", "a"]))
    assert names == ["a", "b"] and means.tolist() == [[2.0, 2.0]]


def test_no_replicates_give_no_values():
    x, y = np.arange(5.0), np.array([1.0, 3.0, 2.0, 5.0, 4.0])
    for c in COEFFICIENTS:
        assert WEIGHTED[c](x, y, np.empty((0, 5))).shape == (0,)


def test_paired_difference_is_the_brute_force_difference_on_resampled_conversations():
    from face.metaeval import paired_difference

    rng = np.random.default_rng(12)
    y = rng.normal(size=24)
    a, b = y + rng.normal(0, 0.6, 24), y + rng.normal(0, 1.2, 24)
    groups = np.repeat(np.arange(8), 3)
    diff, lo, hi = paired_difference(a, b, y, groups, "spearman", n_boot=200, seed=3, confidence=0.9)
    assert diff == pytest.approx(stats.spearmanr(a, y)[0] - stats.spearmanr(b, y)[0])
    w = cluster_weights(groups, 200, np.random.default_rng(3)).astype(int)
    d = [stats.spearmanr(np.repeat(a, r), np.repeat(y, r))[0] - stats.spearmanr(np.repeat(b, r), np.repeat(y, r))[0]
         for r in w]
    assert (lo, hi) == pytest.approx(tuple(np.percentile(d, [5, 95])), abs=1e-9)
    assert paired_difference(a, b, y, groups, "pearson") == paired_difference(a, b, y, groups, "pearson", 1000, 0,
                                                                                0.95)
    for args in ((a, b, y, groups, "pearson", 0), (a[:2], b[:2], y[:2], groups[:2], "pearson", 50),
                 (a, b, y, np.zeros(24), "pearson", 50)):  # no resamples, two items, one conversation
        d0, lo0, hi0 = paired_difference(*args)
        assert np.isnan(lo0) and np.isnan(hi0)
    assert np.isfinite(paired_difference(a[:3], b[:3], y[:3], np.array([0, 1, 1]), "pearson", 50)[1])
    assert np.isfinite(paired_difference(a, b, y, groups, "pearson", 1)[1])  # one resample is an interval too


def test_paired_replicates_are_one_difference_per_resample_and_none_without_resamples():
    from face.metaeval import paired_replicates

    rng = np.random.default_rng(5)
    y = rng.normal(size=12)
    a, b, groups = y + rng.normal(0, 0.5, 12), y + rng.normal(0, 1.0, 12), np.repeat(np.arange(4), 3)
    assert paired_replicates(a, b, y, groups, "pearson", 30, 0, 0.95)[3].shape == (30,)
    for args in ((a, b, y, groups, "pearson", 0), (a, b, y, np.zeros(12), "pearson", 30)):  # no resamples; one conv
        assert paired_replicates(*args, 0, 0.95)[3].shape == (0,)


def test_bootstrap_ci_defaults_guards_and_warning(caplog):
    warn_once.cache_clear()  # identical warnings are said once per process
    x, y, groups = _clustered(5, 6, 2)
    assert bootstrap_ci(x, y, groups) == bootstrap_ci(x, y, groups, 1000, 0, 0.95)
    assert all(np.isnan(v) for ci in bootstrap_ci(x, y, groups, 0).values() for v in ci)
    assert all(np.isnan(v) for ci in bootstrap_ci(x[:2], y[:2], groups[:2], 50).values() for v in ci)
    assert all(np.isfinite(v) for ci in bootstrap_ci(x[:3], y[:3], np.array([0, 1, 1]), 50).values() for v in ci)
    assert all(np.isfinite(v) for ci in bootstrap_ci(x, y, groups, 1).values() for v in ci)  # one resample: lo = hi
    with caplog.at_level("WARNING", logger="face.metaeval"):
        bootstrap_ci(x, y, groups, 0)
        assert not caplog.records  # no interval asked for: nothing to warn about
        bootstrap_ci(x[:3], y[:3], np.zeros(3), 50)
        bootstrap_ci(x[:3], y[:3], np.zeros(3), 50)
    assert caplog.text.count("from 1 conversation(s), need >= 2") == 1  # twice met, said once
    warn_once.cache_clear()
    caplog.clear()
    with caplog.at_level("WARNING", logger="face.metaeval"):
        bootstrap_ci(x[:3], y[:3], np.zeros(3), 1)  # one resample asked for is an interval asked for
    assert caplog.text.count("from 1 conversation(s), need >= 2") == 1


def test_meta_evaluate_and_system_correlations_default_to_a_thousand_resamples_seed_0():
    convs, preds = _toy(12)
    aspects = [ASPECTS["dialogue_overall"]]
    pd.testing.assert_frame_equal(meta_evaluate(preds, convs, aspects),
                                  meta_evaluate(preds, convs, aspects, n_boot=1000, seed=0, confidence=0.95))
    rng = np.random.default_rng(2)
    df = pd.DataFrame({"conv_id": [f"c{i}" for i in range(15)], "system": [f"s{i % 5}" for i in range(15)],
                       "pred": rng.normal(size=15), "human": rng.normal(size=15)})
    assert system_correlations(df) == system_correlations(df, 1000, 0, 0.95)
    assert system_correlations(df) != system_correlations(df, 1001, 0, 0.95)  # the comparison can tell
    assert system_correlations(df) != system_correlations(df, 1000, 1, 0.95)


def test_system_level_interval_needs_three_systems_of_two_conversations(caplog):
    warn_once.cache_clear()  # identical warnings are said once per process
    df = pd.DataFrame({"conv_id": list("abcdefgh"), "system": ["s1", "s1", "s2", "s2", "s3", "s3", "s4", "s4"],
                       "pred": [1, 3, 2, 2.5, 5, 7, 4, 6], "human": [0, 2, 1, 1, 3, 2, 2, 3]})
    assert all(np.isfinite(v) for c in system_correlations(df, 50).values() for v in c[2:4])
    three = df[df["system"] != "s4"]
    assert all(np.isfinite(v) for c in system_correlations(three, 1).values() for v in c[2:4])
    assert all(np.isnan(v) for c in system_correlations(df, 0).values() for v in c[2:4])
    two = df[df["system"].isin(["s1", "s2"])]
    assert all(np.isnan(v) for c in system_correlations(two, 50).values() for v in c[2:4])
    with caplog.at_level("WARNING", logger="face.metaeval"):
        lone = three.iloc[1:]  # three systems, s1 now with one conversation
        system_correlations(lone, 0)
        assert not caplog.records  # no interval asked for: nothing to warn about
        got = [system_correlations(lone, n) for n in (50, 1)]
    assert all(np.isnan(v) for g in got for c in g.values() for v in c[2:4])
    assert caplog.text.count("a system has 1 conversation(s), need >= 2 per system") == 1  # twice met, said once


def test_system_table_is_the_per_system_mean_of_predictions_and_labels():
    from face.metaeval import system_table

    convs, preds = _toy(12)
    got = system_table(preds, convs, ASPECTS["dialogue_overall"]).set_index("system")
    labels = {c.conv_id: (c.system, c.labels["dialogue_overall"]) for c in convs}
    d = preds.dialogue.assign(system=[labels[i][0] for i in preds.dialogue["conv_id"]],
                              human=[labels[i][1] for i in preds.dialogue["conv_id"]])
    want = d.groupby("system")[["pred", "human"]].mean()
    assert got.loc[want.index, "pred"].tolist() == pytest.approx(want["pred"].tolist())
    assert got.loc[want.index, "human"].tolist() == pytest.approx(want["human"].tolist())


def test_turn_level_intervals_resample_conversations_not_turns():  # bootstrap_ci itself is checked against scipy
    convs, preds = _toy(n_convs=12)
    row = meta_evaluate(preds, convs, [ASPECTS["relevance"]], ["all"], levels=("turn",), n_boot=200, seed=3).iloc[0]
    df = preds.turn.assign(h=[t.labels["relevance"] for c in convs for t in c.assistant_turns()])  # same order
    by_conv = bootstrap_ci(df["pred"].to_numpy(), df["h"].to_numpy(), df["conv_id"].to_numpy(), 200, 3)[row.coefficient]
    by_turn = bootstrap_ci(df["pred"].to_numpy(), df["h"].to_numpy(), np.arange(len(df)), 200, 3)[row.coefficient]
    assert (row["ci_low"], row["ci_high"]) == pytest.approx(by_conv) and tuple(by_turn) != pytest.approx(by_conv)
