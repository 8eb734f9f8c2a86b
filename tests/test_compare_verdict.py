"""The decision layer of ``face compare`` (face.comparison.engine, validation) against independent values: which
rows a pair is tested on, which resamples are joint, Holm's family, the verdict's level, the seed, the halves of the
calibration null. Each test is named for the wrong engine it would catch."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from face.comparison import engine, stats, validation
from face.comparison.runs import Run
from face.errors import ConfigError
from face.predictions import DIALOGUE_COLUMNS, TURN_COLUMNS, Predictions


def _run(name: str, scores: dict[str, float | list[float]]) -> Run:
    """dialogue_overall per conversation id; a list: two aspects (dialogue_overall, efficiency)."""
    rows = []
    for c, v in scores.items():
        vals = v if isinstance(v, list) else [v]
        rows += [(a, c, float(x)) for a, x in zip(["dialogue_overall", "efficiency"], vals)]
    dial = pd.DataFrame(rows, columns=DIALOGUE_COLUMNS)
    return Run(name, name, Predictions(pd.DataFrame(columns=TURN_COLUMNS), dial))


def _compare(*runs: Run, aspects=("dialogue_overall",), **opts) -> engine.Comparison:
    return engine.build(list(runs), list(aspects), engine.Options(**opts))


def test_partial_overlap_is_paired_on_the_shared_rows_their_means_and_verdict_alike():
    rng = np.random.default_rng(11)
    a = {f"c{i}": float(v) for i, v in enumerate(rng.normal(2, 0.8, 30))}  # c0..c29
    shared = [f"c{i}" for i in range(10, 30)]  # 20 of 30: paired
    b = {c: a[c] - 0.3 + float(rng.normal(0, 0.1)) for c in shared}
    b.update({f"z{i}": 4.0 for i in range(10)})  # the candidate's own conversations: all high
    row = _compare(_run("a", a), _run("b", b), n_boot=20_000).differences.iloc[0]
    x, y = np.array([a[c] for c in shared]), np.array([b[c] for c in shared])
    assert (row["pairing"], row["n_shared"]) == ("paired", 20)
    assert np.mean(list(b.values())) > np.mean(list(a.values()))  # over all conversations the candidate is higher
    assert (row["baseline_mean"], row["candidate_mean"]) == pytest.approx((x.mean(), y.mean()), abs=1e-12)
    assert row["diff"] == pytest.approx(y.mean() - x.mean(), abs=1e-12)
    assert row["verdict"] == "worse" and row["candidate_mean"] < row["baseline_mean"]
    lo, hi = sps.ttest_rel(y, x).confidence_interval(0.95)  # rows misaligned: an interval ~ 10x as wide
    assert row["ci_high"] - row["ci_low"] == pytest.approx(hi - lo, rel=0.2)


def test_the_verdict_table_says_how_many_conversations_were_paired():
    a = {f"c{i}": float(i % 4) for i in range(10)}
    cmp = _compare(_run("a", a), _run("b", {c: v + 0.5 for c, v in a.items()}), n_boot=1000)
    assert cmp.verdicts()[["pairing", "n_shared"]].values.tolist() == [["paired", 10]]


def test_pairing_paired_needs_two_shared_conversations_and_two_are_enough():
    a, b = {"c0": 1.0, "c1": 2.0, "x": 3.0}, {"c0": 1.5, "c1": 2.5, "y": 0.0}
    row = _compare(_run("a", a), _run("b", b), pairing="paired", n_boot=200).differences.iloc[0]
    assert (row["pairing"], row["n_shared"], row["diff"]) == ("paired", 2, pytest.approx(0.5))
    with pytest.raises(ConfigError, match="a and b share 1 conversation id"):
        _compare(_run("a", {"c0": 1.0, "x": 2.0}), _run("b", {"c0": 1.0, "y": 2.0}), pairing="paired", n_boot=200)


def test_auto_pairs_two_shared_conversations_and_exactly_half_and_sizes_the_difference_of_two():
    cmp = _compare(_run("a", {"c0": 1.0, "c1": 2.0}), _run("b", {"c0": 1.5, "c1": 2.0}), n_boot=200)
    row = cmp.differences.iloc[0]
    assert (row["pairing"], row["n_shared"], cmp.settings["joint"]) == ("paired", 2, True)
    assert not np.isnan(row["detectable_diff"])  # two conversations, one degree of freedom: sized, not left blank
    a, b = {f"c{i}": float(i) for i in range(4)}, {"c0": 1.0, "c1": 2.0, "x": 0.0, "y": 3.0}  # 2 of 4 shared
    assert _compare(_run("a", a), _run("b", b), n_boot=200).differences["pairing"].tolist() == ["paired"]


def test_the_default_resamples_suffice_for_holm_over_aspects_times_pairs():
    runs = [_run(n, {f"c{i}": [float(i % 3), float((i + k) % 4)] for i in range(6)}) for k, n in enumerate("abc")]
    cmp = _compare(*runs, aspects=("dialogue_overall", "efficiency"), alpha=0.001)
    assert cmp.settings["n_boot"] == 60_000  # 2 aspects × 3 pairs = 6 tests, 10 × 6 / 0.001


def test_the_differences_table_has_holms_p_and_the_verdict_right_after_the_p_value():
    a = {f"c{i}": float(i % 4) for i in range(10)}
    cmp = _compare(_run("a", a), _run("b", {c: v + 0.5 for c, v in a.items()}), n_boot=200, target_diff=0.5)
    assert list(cmp.differences.columns) == [
        "aspect", "baseline", "candidate", "pairing", "n_baseline", "n_candidate", "n_shared", "baseline_mean",
        "candidate_mean", "diff", "ci_low", "ci_high", "p_value", "p_holm", "verdict", "detectable_diff", "n_needed"]


def test_pairing_unpaired_resamples_each_system_on_its_own_even_on_the_same_ids():
    rng = np.random.default_rng(12)
    x = rng.normal(2, 0.8, 40)
    y = x + 0.1 + rng.normal(0, 0.05, 40)  # strongly correlated: a joint draw would cancel their spread
    ids = [f"c{i}" for i in range(40)]
    row = _compare(_run("a", dict(zip(ids, x))), _run("b", dict(zip(ids, y))), pairing="unpaired",
                   n_boot=20_000).differences.iloc[0]
    welch = sps.ttest_ind(y, x, equal_var=False)
    lo, hi = welch.confidence_interval(0.95)
    assert row["pairing"] == "unpaired"
    assert row["p_value"] == pytest.approx(welch.pvalue, abs=0.03)  # ≈ 0.6; jointly drawn: < 0.001
    assert row["ci_high"] - row["ci_low"] == pytest.approx(hi - lo, rel=0.1)


def test_ranks_and_p_beats_come_from_the_joint_draws_of_systems_on_the_same_conversations():
    rng = np.random.default_rng(13)
    ids = [f"c{i}" for i in range(40)]
    x = rng.normal(2, 0.8, 40)
    runs = [_run("a", dict(zip(ids, x))), _run("up", dict(zip(ids, x + 0.1))), _run("down", dict(zip(ids, x - 0.1)))]
    cmp = _compare(*runs, n_boot=2000)
    # every joint resample keeps up > a > down (a constant shift); independent draws (sd of a mean 0.13) would not
    beats = cmp.beats.set_index(["system", "opponent"])["p_beats"]
    assert beats[("up", "a")] == 1.0 and beats[("a", "down")] == 1.0
    rank = cmp.ranking.set_index("system")
    assert rank.loc[["up", "a", "down"], ["rank", "rank_low", "rank_high"]].values.tolist() == [
        [1, 1, 1], [2, 2, 2], [3, 3, 3]]


def test_the_ranking_lists_each_aspect_best_first_in_the_aspects_order_not_by_mean_or_input_order():
    rng = np.random.default_rng(16)
    ids = [f"c{i}" for i in range(30)]
    x = rng.normal(2, 0.8, 30)
    # efficiency reverses dialogue_overall's order; the systems are given neither best-first nor worst-first
    shifts = {"mid": 0.0, "top": 0.5, "low": -0.5}
    runs = [_run(n, {c: [v + d, v - d] for c, v in zip(ids, x)}) for n, d in shifts.items()]
    ranking = _compare(*runs, aspects=("efficiency", "dialogue_overall"), n_boot=500).ranking
    assert ranking[["aspect", "system", "rank"]].values.tolist() == [
        ["efficiency", "low", 1], ["efficiency", "mid", 2], ["efficiency", "top", 3],
        ["dialogue_overall", "top", 1], ["dialogue_overall", "mid", 2], ["dialogue_overall", "low", 3]]


def test_the_rank_interval_of_three_exchangeable_systems_spans_every_rank_at_60_percent():
    values = np.random.default_rng(14).normal(2, 0.8, 30)  # the same scores, other conversations: drawn apart
    runs = [_run(n, {f"{n}{i}": float(v) for i, v in enumerate(values)}) for n in "abc"]
    ranking = _compare(*runs, n_boot=2000, confidence=0.6).ranking  # each rank in about a third of the resamples
    assert (ranking["rank_low"].tolist(), ranking["rank_high"].tolist()) == ([1, 1, 1], [3, 3, 3])


def test_the_rank_interval_leaves_out_a_rank_held_in_fewer_than_its_tail_of_the_resamples():
    rng = np.random.default_rng(15)
    x, ids = rng.normal(2, 0.8, 40), [f"c{i}" for i in range(40)]
    a, b = dict(zip(ids, x)), dict(zip(ids, x + 0.076 + rng.normal(0, 0.5, 40)))
    cmp = _compare(_run("a", a), _run("b", b), _run("z", dict.fromkeys(ids, 0.0)), n_boot=4000, confidence=0.55)
    assert 0.15 < cmp.beats.set_index(["system", "opponent"])["p_beats"]["a", "b"] < 0.225  # a first in ~a fifth
    # a 55 % interval runs from the 22.5th to the 77.5th percentile of a's ranks: rank 1 (~20 %) is left out
    assert cmp.ranking.set_index("system").loc["a", ["rank_low", "rank_high"]].tolist() == [2, 2]


def _rank_one_resamples(x: np.ndarray, y: np.ndarray, n_boot: int, seed: int) -> int:
    """In how many of the joint resamples of the conversations (face.resample's draws from ``seed``, the engine's
    first) the mean of ``x`` is above the mean of ``y``: by hand."""
    from face.resample import draw_counts

    counts = draw_counts(len(x), n_boot, np.random.default_rng(seed))
    return int(((counts @ x) > (counts @ y)).sum())


def test_the_rank_interval_is_read_at_exactly_the_lower_and_upper_tail_of_the_resampled_ranks():
    # a is first in k of N resamples, b in the others: a's ranks sorted are k ones, then twos. numpy's "lower"
    # percentile q picks the element at floor(q / 100 (N − 1)); a confidence putting the lower tail at k − 0.5 keeps
    # rank 1 in a's interval, one reading the tail 1 % further (101 for 100) would not. Likewise b's upper tail at
    # N − k − 1.5 ("higher": the ceiling) ends b's interval at rank 1.
    rng = np.random.default_rng(21)
    x, ids, n = rng.normal(2, 0.8, 40), [f"c{i:02d}" for i in range(40)], 4000  # the engine's order: sorted ids
    y = x + 0.1 + rng.normal(0, 0.5, 40)
    k = _rank_one_resamples(x, y, n, 0)
    assert 200 < k < n / 5  # the premise: far from the ends, and both confidences above 0.5 (581 here)
    runs = _run("a", dict(zip(ids, x))), _run("b", dict(zip(ids, y))), _run("z", dict.fromkeys(ids, 0.0))  # z: 3rd
    low = _compare(*runs, n_boot=n, seed=0, confidence=1 - 2 * (k - 0.5) / (n - 1)).ranking.set_index("system")
    assert low.loc["a", "rank_low"] == 1
    high = _compare(*runs, n_boot=n, seed=0, confidence=2 * (n - k - 1.5) / (n - 1) - 1).ranking.set_index("system")
    assert high.loc["b", "rank_high"] == 1


def test_conversations_without_a_score_on_an_aspect_count_for_neither_its_means_nor_its_sizing():
    # efficiency scored on one conversation of one side: its mean counts 1 conversation, and a difference over 1
    # conversation has no spread to size a detectable difference with (NaN); dialogue_overall, on all six, does
    full = {f"c{i}": [float(i % 3), float(i % 2)] for i in range(6)}
    part = {c: ([v[0] + 0.5, v[1]] if c == "c0" else [v[0] + 0.5]) for c, v in full.items()}
    for runs in ((_run("a", part), _run("b", full)), (_run("a", full), _run("b", part))):
        cmp = _compare(*runs, aspects=("dialogue_overall", "efficiency"), n_boot=500)
        means = cmp.means.set_index(["aspect", "system"])["conversations"]
        assert means["efficiency"].tolist() in ([1, 6], [6, 1]) and means["dialogue_overall"].tolist() == [6, 6]
        sized = cmp.differences.set_index("aspect")["detectable_diff"]
        assert np.isnan(sized["efficiency"]) and np.isfinite(sized["dialogue_overall"])


def test_a_verdict_needs_holms_p_below_alpha_and_a_difference_of_that_sign():
    diff, p = [0.5, -0.5, 0.5, -0.5, 0.0, 0.5, -0.5], [0.01, 0.01, 0.5, 0.5, 0.001, 0.05, 0.05]
    assert engine.verdicts(pd.Series(diff), pd.Series(p), 0.05) == [
        "better", "worse", "no detectable difference", "no detectable difference", "no detectable difference",
        "no detectable difference", "no detectable difference"]  # p = α rejects nothing, on either side


def test_holm_adjusts_over_every_pair_and_aspect_of_the_comparison():
    rng = np.random.default_rng(14)
    runs = [_run(n, {f"{n}{i}": list(rng.normal(2 + s, 0.8, 2)) for i in range(30)})
            for n, s in (("a", 0), ("b", 0.6), ("c", 0.2))]
    d = _compare(*runs, aspects=("dialogue_overall", "efficiency"), n_boot=20_000).differences
    assert len(d) == 6  # 3 pairs × 2 aspects: the smallest p times 6, not times a pair's 2
    p = d["p_value"].sort_values().to_numpy()
    assert d["p_holm"].min() == pytest.approx(min(1, 6 * p[0]))
    assert sorted(d["p_holm"])[1] == pytest.approx(min(1, max(6 * p[0], 5 * p[1])))


def test_the_verdict_is_taken_at_alpha_not_alpha_over_two():
    rng = np.random.default_rng(15)
    x = rng.normal(2, 0.8, 30)
    shift = 0.25
    assert 0.2 < sps.ttest_ind(x + shift, x, equal_var=False).pvalue < 0.4  # between α / 2 and α = 0.4
    row = _compare(_run("a", {f"a{i}": v for i, v in enumerate(x)}),
                   _run("b", {f"b{i}": v + shift for i, v in enumerate(x)}), alpha=0.4, n_boot=5000).differences.iloc[0]
    assert 0.2 < row["p_holm"] < 0.4 and row["verdict"] == "better"
    assert engine.verdicts(pd.Series([0.1, -0.1, 0.1]), pd.Series([0.04, 0.04, 0.05]), 0.05) == [
        "better", "worse", "no detectable difference"]


def test_the_seed_sets_the_resamples():
    rng = np.random.default_rng(16)
    runs = [_run(n, {f"{n}{i}": float(v) for i, v in enumerate(rng.normal(2, 0.8, 25))}) for n in ("a", "b")]
    one, same, other = (_compare(*runs, n_boot=500, seed=s).differences.iloc[0] for s in (1, 1, 2))
    assert one["ci_low"] == same["ci_low"] and one["p_value"] == same["p_value"]
    assert one["ci_low"] != other["ci_low"]


def test_the_calibration_null_compares_two_disjoint_halves_of_one_system():
    u = stats.Units(np.array([f"c{i}" for i in range(11)], dtype=object), np.arange(11.0)[:, None],
                    np.ones((11, 1)))
    a, b = validation._halves(u, np.random.default_rng(0))
    assert len(a) == len(b) == 5 and not set(a.ids) & set(b.ids) and set(a.ids) | set(b.ids) <= set(u.ids)
    # on a true null the rejections are near α, not the 0 of a half compared with itself
    rng = np.random.default_rng(1)
    systems = {f"s{i}": stats.Units(np.array([f"c{j}" for j in range(40)], dtype=object),
                                    rng.normal(0, 1, (40, 1)), np.ones((40, 1))) for i in range(5)}
    cal = validation.calibration(systems, ["x"], 40, 1000, 0.05, 0)
    fpr = cal[cal["mode"] == "unpaired"]["rejected"].mean()  # 200 tests: binomial sd 0.015 around 0.05
    assert 0.05 - 3 * 0.0154 <= fpr <= 0.05 + 3 * 0.0154


def test_n_needed_by_hand_paired_and_unpaired_each_side_counted():
    # paired differences −0.5, 0.5, 1.5: sample variance 1 -> target 1 needs n ≥ (t_{.975,n-1} + t_{.8,n-1})²:
    # 10 (tests/test_compare_stats.py works it out); a per-conversation variance without its × n would say 2
    a = {"c0": 1.0, "c1": 1.0, "c2": 1.0}
    b = {"c0": 0.5, "c1": 1.5, "c2": 2.5}
    row = _compare(_run("a", a), _run("b", b), n_boot=1000, target_diff=1.0).differences.iloc[0]
    assert (row["pairing"], row["n_needed"]) == ("paired", 10)
    # unpaired: variances 1 and 4 per conversation, σ² = 5: n = 42 (5 (2.019541 + 0.850338)² = 41.18 ≤ 42; at 41:
    # 5 (2.021075 + 0.850671)² = 41.24 > 41); one side's variance alone would say 10 or 34
    a = {"a0": -1.0, "a1": 0.0, "a2": 1.0}
    b = {"b0": -2.0, "b1": 0.0, "b2": 2.0}
    row = _compare(_run("a", a), _run("b", b), n_boot=1000, target_diff=1.0).differences.iloc[0]
    assert (row["pairing"], row["n_needed"]) == ("unpaired", 42)


def test_n_needed_is_sized_for_holm_over_the_family():
    # the same paired differences on two aspects: a family of 2, each tested at α / 2 by Holm's first step:
    # n ≥ (t_{.9875,n-1} + t_{.8,n-1})²: 13 (11.78 ≤ 13; at 12: (2.593093 + 0.875530)² = 12.03 > 12), not 10
    a = {"c0": [1.0, 1.0], "c1": [1.0, 1.0], "c2": [1.0, 1.0]}
    b = {"c0": [0.5, 0.5], "c1": [1.5, 1.5], "c2": [2.5, 2.5]}
    d = _compare(_run("a", a), _run("b", b), aspects=("dialogue_overall", "efficiency"), n_boot=1000,
                 target_diff=1.0).differences
    assert d["n_needed"].tolist() == [13, 13]


def test_the_detectable_difference_is_never_below_the_intervals_half_width_at_small_n():
    rng = np.random.default_rng(17)
    a = {f"c{i}": float(v) for i, v in enumerate(rng.normal(2, 0.8, 5))}
    b = {c: v + float(rng.normal(0.2, 0.5)) for c, v in a.items()}
    row = _compare(_run("a", a), _run("b", b), n_boot=5000).differences.iloc[0]
    half = (row["ci_high"] - row["ci_low"]) / 2
    se = float(np.std([b[c] - a[c] for c in a], ddof=1) / np.sqrt(5))
    assert half > (2.776445 + 0.940965) * se  # the premise: the studentized quantile beyond t_{.975,4} + t_{.8,4}
    assert row["detectable_diff"] == pytest.approx(half + 0.940965 * se, abs=1e-6)  # the interval's q + t_{.8,4}


# ---------------------------------------------------------------- agreement with the humans and the arena

def _diffs(rows: list[tuple[str, float, float]]) -> pd.DataFrame:
    """differences of one pair (a, b) on aspects named by rows (aspect, diff, p_holm)."""
    return pd.DataFrame([(asp, "a", "b", d, p, p) for asp, d, p in rows],
                        columns=["aspect", "baseline", "candidate", "diff", "p_value", "p_holm"])


def test_a_separated_cell_is_confirmed_contradicted_or_unconfirmed_by_the_humans_test():
    face = _diffs([("x", 0.3, 0.001), ("y", 0.3, 0.001), ("z", 0.3, 0.001), ("w", 0.3, 0.001), ("v", 0.3, 0.5)])
    human = _diffs([("x", 0.2, 0.01), ("y", -0.2, 0.01), ("z", -0.2, 0.3), ("w", 0.0, 1.0), ("v", 0.2, 0.01)])
    arena = validation.arena_tests(np.array([[0.0, 1.0]] * 99), np.array([0.0, 1.0]), ["a", "b"])
    t = validation.agreement(face, human, arena, 0.05).set_index("aspect")
    assert t["face_by_humans"].to_dict() == {"x": "confirmed", "y": "contradicted", "z": "unconfirmed",
                                             "w": "unconfirmed", "v": ""}
    # against the humans' mean difference: y and z; a human difference of exactly 0 is no disagreement
    assert t["face_against_human_means"].to_dict() == {"x": False, "y": True, "z": True, "w": False, "v": False}
    total = validation.agreement_summary(t.reset_index()).set_index("aspect").loc["all aspects"]
    assert total[["face_separated", "confirmed_by_humans", "contradicted_by_humans", "unconfirmed_by_humans",
                  "against_human_means", "confirmed_by_arena", "human_separated"]].tolist() == [4, 1, 1, 2, 2, 4, 3]


def test_the_arena_test_of_a_pair_by_hand():
    # point ratings a 0.2, b 0.7, c and e tied with a; resampled: b 1.2 in 96 of 99, 0.2 (a tie) in 1, -0.8 in 2;
    # c 0.3 but 0.2 where b is 0.2 (b and c tied there), e always 0.1 (a point tie stays p = 1 however they fall)
    col = np.array([1.2] * 96 + [0.2] + [-0.8] * 2)
    boot = np.column_stack([np.full(99, 0.2), col, np.where(col == 0.2, 0.2, 0.3), np.full(99, 0.1)])
    t = validation.arena_tests(boot, np.array([0.2, 0.7, 0.2, 0.2]), ["a", "b", "c", "e"])
    t = t.set_index(["baseline", "candidate"])
    assert t.loc[("a", "b"), "arena_p"] == pytest.approx(2 * 4 / 100)  # (1 + 3 not above 0) · 2 / (B + 1)
    assert t.loc[("a", "b"), "arena_direction"] == 1 and t.loc[("b", "a"), "arena_direction"] == -1
    for pair in (("a", "c"), ("a", "e"), ("c", "e")):
        assert (t.loc[pair, "arena_p"], t.loc[pair, "arena_direction"]) == (1.0, 0)
    # b − c: c − b = -0.9, 0 (a tie), 1.1: 3 not below 0 -> 0.08; b − e: -1.1, -0.1, 0.9: 2 -> 0.06. Holm over the 6
    # pairs (not the 12 rows both ways): 0.06 · 6 = 0.36, 0.08 · 5 = 0.40, max(0.08 · 4, 0.40) = 0.40
    assert t.loc[("b", "e"), "arena_p"] == pytest.approx(0.06) and t.loc[("b", "c"), "arena_p"] == pytest.approx(0.08)
    assert t.loc[("a", "b"), "arena_p_holm"] == pytest.approx(0.40)
    assert t.loc[("b", "a"), "arena_p_holm"] == t.loc[("a", "b"), "arena_p_holm"]


def test_a_lower_candidate_is_confirmed_by_a_reference_that_also_puts_it_lower_and_p_alpha_separates_nothing():
    face = _diffs([("x", -0.3, 0.001), ("y", -0.3, 0.05)])
    human = _diffs([("x", -0.2, 0.01), ("y", -0.2, 0.01)])
    arena = validation.arena_tests(np.array([[1.0, 0.0]] * 99), np.array([1.0, 0.0]), ["a", "b"])
    t = validation.agreement(face, human, arena, 0.05).set_index("aspect")
    assert t.loc["x", ["face_by_humans", "face_by_arena", "human_by_arena"]].tolist() == ["confirmed"] * 3
    assert t.loc["y", "face_by_humans"] == ""  # p = α is not below α
    border = validation.agreement(human, face, validation.arena_tests(
        np.array([[1.0, 0.0]] * 39), np.array([1.0, 0.0]), ["a", "b"]), 0.05).set_index("aspect")
    assert t["arena_p_holm"].iloc[0] == pytest.approx(0.02) and border["arena_p_holm"].iloc[0] == pytest.approx(0.05)
    assert border.loc["y", ["human_separates", "arena_separates"]].tolist() == [False, False]
