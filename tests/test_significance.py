"""face.significance: Williams' test and the paired clustered bootstrap, checked on simulated data with a
known difference (power) and with none (the false-positive rate at alpha = 0.05 is near 0.05)."""

import math

import numpy as np
import pandas as pd
import pytest

from face.aspects import Aspect
from face.data.schema import ASSISTANT, USER, Conversation, Turn
from face.metaeval import paired_difference
from face.predictions import Predictions
from face.significance import comparison_table, paired_bootstrap, williams, williams_test


def _draw(rng, n, r_a, r_b, r_ab):
    """(a, b, y) jointly normal with corr(a, y) = r_a, corr(b, y) = r_b, corr(a, b) = r_ab."""
    cov = np.array([[1, r_ab, r_a], [r_ab, 1, r_b], [r_a, r_b, 1]])
    return rng.multivariate_normal(np.zeros(3), cov, size=n).T


def test_williams_by_hand():
    # r_ay = .5, r_by = .3, r_ab = .4, n = 100: K = 1 - .25 - .09 - .16 + 2*.5*.3*.4 = .62
    k = 0.62
    t = 0.2 * math.sqrt(99 * 1.4) / math.sqrt(2 * k * 99 / 97 + (0.4 ** 2) * 0.6 ** 3)
    got_t, got_p = williams(0.5, 0.3, 0.4, 100)
    assert got_t == pytest.approx(t, rel=1e-12)
    from scipy import stats

    assert got_p == pytest.approx(2 * stats.t.sf(t, 97), rel=1e-12)
    # symmetric, and no difference gives t = 0, p = 1
    assert williams(0.3, 0.5, 0.4, 100)[0] == pytest.approx(-t)
    assert williams(0.4, 0.4, 0.2, 50) == (0.0, 1.0)


@pytest.mark.slow  # process-, server- or rendering-bound (≈ 1 s): the fast suite stays within 45 s
def test_williams_calibration_and_power():
    rng = np.random.default_rng(0)
    sims, n = 2000, 80
    null = [williams_test(*_draw(rng, n, 0.4, 0.4, 0.5))[1] for _ in range(sims)]
    fpr = np.mean(np.array(null) < 0.05)
    assert 0.035 < fpr < 0.065, fpr  # binomial sd at 2000 draws: 0.005
    alt = [williams_test(*_draw(rng, 200, 0.6, 0.3, 0.5))[1] for _ in range(300)]
    assert np.mean(np.array(alt) < 0.05) > 0.95


def _clustered(rng, n_clusters, per, r_a, r_b, r_ab):
    """Items in clusters sharing a random effect on every variable (like responses sharing a context)."""
    a, b, y = _draw(rng, n_clusters * per, r_a, r_b, r_ab)
    shared = _draw(rng, n_clusters, r_a, r_b, r_ab)
    a, b, y = (v + 0.7 * np.repeat(s, per) for v, s in zip((a, b, y), shared))
    return a, b, y, np.repeat(np.arange(n_clusters), per)


# Spearman's calibration is the slow one (ranks in every replicate, ≈ 5 s); the fast suite keeps Pearson's and the
# check that Spearman's replicates are paired_difference's (test_paired_bootstrap_reuses_paired_difference)
@pytest.mark.parametrize("coefficient", ["pearson", pytest.param("spearman", marks=pytest.mark.slow)])
def test_paired_bootstrap_false_positive_rate(coefficient):
    rng = np.random.default_rng(1)
    ps = [paired_bootstrap(*_clustered(rng, 40, 3, 0.4, 0.4, 0.5), coefficient, n_boot=400, seed=i)["p_value"]
          for i in range(400)]
    fpr = np.mean(np.array(ps) < 0.05)
    assert 0.02 < fpr < 0.095, fpr  # near 0.05 (sd 0.011 at 400 draws; the percentile bootstrap runs a bit hot)


def test_paired_bootstrap_power_and_ci():
    rng = np.random.default_rng(2)
    hits, covered = 0, 0
    for i in range(100):
        a, b, y, cl = _clustered(rng, 60, 5, 0.65, 0.25, 0.4)
        res = paired_bootstrap(a, b, y, cl, "pearson", n_boot=400, seed=i)
        hits += res["p_value"] < 0.05
        covered += res["ci_low"] > 0
    assert hits >= 90 and covered == hits  # p < .05 exactly when the 95 % CI excludes 0


def test_paired_bootstrap_reuses_paired_difference():
    rng = np.random.default_rng(3)
    a, b, y, cl = _clustered(rng, 30, 4, 0.5, 0.2, 0.3)
    res = paired_bootstrap(a, b, y, cl, "spearman", n_boot=300, seed=7)
    assert (res["diff"], res["ci_low"], res["ci_high"]) == paired_difference(a, b, y, cl, "spearman", 300, 7)
    assert paired_bootstrap(a, a, y, cl, "pearson", n_boot=100)["p_value"] == 1.0  # identical: d* = 0 always


def test_comparison_table_on_conversations():
    rng = np.random.default_rng(4)
    aspect = Aspect("overall", "turn", (1, 2, 3, 4, 5), "overall", {i: str(i) for i in range(1, 6)}, "overall")
    a, b, y, cl = _clustered(rng, 30, 2, 0.8, 0.0, 0.0)
    convs, rows_a, rows_b = [], [], []
    for i in range(len(y)):
        cid = f"{cl[i]}:{i}"
        convs.append(Conversation(cid, (Turn(0, USER, "hi", {}), Turn(1, ASSISTANT, "hello", {"overall": y[i]})),
                                  {}, system=f"s{i % 3}", split="all", evaluated=(1,)))
        rows_a.append(("overall", cid, 1, a[i]))
        rows_b.append(("overall", cid, 1, b[i]))
    cols = ["aspect", "conv_id", "turn_ind", "pred"]
    preds = {"A": Predictions(pd.DataFrame(rows_a, columns=cols), pd.DataFrame(columns=["aspect", "conv_id", "pred"])),
             "B": Predictions(pd.DataFrame(rows_b, columns=cols), pd.DataFrame(columns=["aspect", "conv_id", "pred"]))}
    ctx = {c.conv_id: c.conv_id.split(":")[0] for c in convs}
    table = comparison_table(preds, "A", convs, [aspect], n_boot=200, cluster_of=ctx)
    assert list(table["coefficient"]) == ["pearson", "spearman"]
    row = table.iloc[0]
    assert row["n"] == 60 and row["n_clusters"] == 30
    assert row["diff"] == pytest.approx(np.corrcoef(a, y)[0, 1] - np.corrcoef(b, y)[0, 1])
    assert row["p_bootstrap"] < 0.05 and row["p_williams"] < 0.05
    assert math.isnan(table.iloc[1]["p_williams"])  # Williams is for Pearson only


def test_p_value_and_ci_come_from_the_same_resampled_differences():
    """Brute force: the conversations drawn for the CI (seeded), d* = coef(a) − coef(b) on each resample by scipy;
    the CI is its percentile interval and the p-value 2·min(P(d* ≤ 0), P(d* ≥ 0)) of the very same d*."""
    from scipy import stats

    from face.metaeval import cluster_weights

    rng = np.random.default_rng(5)
    a, b, y, cl = _clustered(rng, 15, 3, 0.5, 0.35, 0.3)
    res = paired_bootstrap(a, b, y, cl, "pearson", n_boot=300, seed=9, confidence=0.9)
    w = cluster_weights(cl, 300, np.random.default_rng(9)).astype(int)
    d = np.array([stats.pearsonr(np.repeat(a, r), np.repeat(y, r))[0] - stats.pearsonr(np.repeat(b, r),
                                                                                      np.repeat(y, r))[0] for r in w])
    assert (res["ci_low"], res["ci_high"]) == pytest.approx(tuple(np.percentile(d, [5, 95])), abs=1e-9)
    assert res["p_value"] == pytest.approx(min(1.0, 2 * min(np.mean(d <= 0), np.mean(d >= 0))))
    assert 0 < res["p_value"] < 1  # a case where the two tails differ


def test_comparison_table_rows_are_per_split_with_the_reference_as_a():
    """Each split's row uses that split's items only; value_a is the reference's correlation, value_b the other's."""
    from scipy import stats

    rng = np.random.default_rng(6)
    aspect = Aspect("overall", "turn", (1, 2, 3, 4, 5), "overall", {i: str(i) for i in range(1, 6)}, "overall")
    convs, rows_a, rows_b, truth = [], [], [], []
    for i in range(40):
        split = "x" if i < 24 else "z"
        y = float(rng.integers(1, 6))
        pa, pb = y + rng.normal(0, 0.5 if split == "x" else 2.0), y + rng.normal(0, 1.5)
        cid = f"c{i}"
        convs.append(Conversation(cid, (Turn(0, USER, "hi", {}), Turn(1, ASSISTANT, "hello", {"overall": y})),
                                  {}, system=f"s{i % 3}", split=split, evaluated=(1,)))
        rows_a.append(("overall", cid, 1, pa))
        rows_b.append(("overall", cid, 1, pb))
        truth.append((split, y, pa, pb))
    cols = ["aspect", "conv_id", "turn_ind", "pred"]
    empty = pd.DataFrame(columns=["aspect", "conv_id", "pred"])
    preds = {"A": Predictions(pd.DataFrame(rows_a, columns=cols), empty),
             "B": Predictions(pd.DataFrame(rows_b, columns=cols), empty)}
    table = comparison_table(preds, "A", convs, [aspect], splits=["x", "z", "all"], coefficients=["spearman"],
                             n_boot=50).set_index("split")
    t = pd.DataFrame(truth, columns=["split", "y", "a", "b"])
    for split in ("x", "z", "all"):
        sub = t if split == "all" else t[t["split"] == split]
        row = table.loc[split]
        assert row["n"] == len(sub) and (row["method_a"], row["method_b"]) == ("A", "B")
        assert row["value_a"] == pytest.approx(stats.spearmanr(sub["a"], sub["y"])[0])
        assert row["value_b"] == pytest.approx(stats.spearmanr(sub["b"], sub["y"])[0])
        assert row["diff"] == pytest.approx(row["value_a"] - row["value_b"])


def test_williams_is_undefined_where_its_formula_is():
    assert all(math.isnan(v) for v in williams(0.5, 0.3, 0.4, 3))  # n − 3 degrees of freedom: none
    assert all(math.isfinite(v) for v in williams(0.5, 0.3, 0.4, 4))
    assert all(math.isnan(v) for v in williams(0.5, 0.5, 1.0, 50))  # a and b identical: the denominator is 0
    assert all(math.isnan(v) for v in williams(float("nan"), 0.3, 0.4, 50))


def test_williams_test_on_raw_values():
    rng = np.random.default_rng(3)
    a, b, y = _draw(rng, 60, 0.7, 0.2, 0.3)
    t, p = williams_test(a, b, y)
    assert t > 0 and p < 0.05  # a is the better one: a positive t
    want = williams(*(float(np.corrcoef(u, v)[0, 1]) for u, v in ((a, y), (b, y), (a, b))), 60)
    assert (t, p) == pytest.approx(want)
    binary = (y > 0).astype(float)  # a side with range exactly 1 is not constant
    assert all(math.isfinite(v) for v in williams_test(a, b, binary))
    assert all(math.isnan(v) for v in williams_test(np.ones(60), b, y))  # a constant side: undefined
    assert all(math.isnan(v) for v in williams_test(a[:3], b[:3], y[:3]))
    assert all(math.isfinite(v) for v in williams_test(a[:4], b[:4], y[:4]))


def test_paired_bootstrap_defaults_and_where_it_has_no_p_value():
    rng = np.random.default_rng(4)
    a, b, y, cl = _clustered(rng, 10, 2, 0.5, 0.2, 0.3)
    assert paired_bootstrap(a, b, y, cl, "pearson") == paired_bootstrap(a, b, y, cl, "pearson", 1000, 0, 0.95)
    assert math.isnan(paired_bootstrap(a, b, y, cl, "pearson", n_boot=0)["p_value"])
    assert paired_bootstrap(a, b, y, cl, "pearson", n_boot=1)["p_value"] in (0.0, 1.0)  # one resample: a p-value
    assert math.isnan(paired_bootstrap(a, b, y, np.zeros(len(y)), "pearson", n_boot=50)["p_value"])  # 1 cluster
    two = paired_bootstrap(a[:4], b[:4], y[:4], np.array([0, 0, 1, 1]), "pearson", n_boot=50)
    assert math.isfinite(two["p_value"])  # two clusters are enough
    three = paired_bootstrap(a[:3], b[:3], y[:3], np.array([0, 1, 2]), "pearson", n_boot=50)
    assert math.isfinite(three["p_value"])  # three items are enough
    assert math.isnan(paired_bootstrap(a[:2], b[:2], y[:2], np.array([0, 1]), "pearson", n_boot=50)["p_value"])


def test_comparison_table_defaults_are_a_thousand_resamples_seed_0():
    rng = np.random.default_rng(7)
    aspect = Aspect("overall", "turn", (1, 2, 3, 4, 5), "overall", {i: str(i) for i in range(1, 6)}, "overall")
    a, b, y, cl = _clustered(rng, 12, 1, 0.6, 0.2, 0.3)
    convs = [Conversation(f"c{i}", (Turn(0, USER, "hi", {}), Turn(1, ASSISTANT, "x", {"overall": y[i]})), {},
                          system="s", split="all", evaluated=(1,)) for i in range(len(y))]
    cols = ["aspect", "conv_id", "turn_ind", "pred"]
    empty = pd.DataFrame(columns=["aspect", "conv_id", "pred"])
    preds = {n: Predictions(pd.DataFrame([("overall", f"c{i}", 1, v[i]) for i in range(len(y))], columns=cols), empty)
             for n, v in (("A", a), ("B", b))}
    pd.testing.assert_frame_equal(comparison_table(preds, "A", convs, [aspect]),
                                  comparison_table(preds, "A", convs, [aspect], n_boot=1000, seed=0))
