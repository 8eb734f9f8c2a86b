"""experiment=system_comparison (face compare checked on CRSArena-Eval's nine CRSs) and the per-level means of the
system-level correlations (experiment=system_level)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

import face.runner
from face.aspects import Aspect
from face.experiments.system_level import level_means

ROOT = Path(__file__).resolve().parents[1]


def test_level_means_average_the_per_aspect_values_of_each_group():
    aspects = [Aspect("t1", "turn", (0, 1), ""), Aspect("t2", "turn", (0, 1), ""), Aspect("d1", "dialogue", (0, 1), ""),
               Aspect("dialogue_overall", "dialogue", (0, 1, 2), "")]
    rows = [("system_vs_human_labels", a, c, v) for a, v in (("t1", 0.9), ("t2", 0.8), ("d1", 0.5),
                                                              ("dialogue_overall", 0.7))
            for c in ("pearson", "spearman", "kendall")]
    results = pd.DataFrame(rows, columns=["level", "aspect", "coefficient", "value"])
    m = level_means(results, aspects).set_index(["group", "coefficient"])["mean_value"]
    assert m[("turn level", "pearson")] == pytest.approx(0.85)
    assert m[("dialogue level without dialogue_overall", "kendall")] == pytest.approx(0.5)
    assert m[("dialogue_overall", "spearman")] == pytest.approx(0.7)


def test_the_committed_level_means_are_the_means_of_the_committed_per_aspect_values():
    per_aspect = pd.read_csv(ROOT / "results" / "system_level" / "system_level.csv")
    means = pd.read_csv(ROOT / "results" / "system_level" / "system_level_means.csv")
    pearson = per_aspect[(per_aspect["level"] == "system_vs_human_labels") & (per_aspect["coefficient"] == "pearson")]
    by = pearson.set_index("aspect")["value"]
    got = means[(means["level"] == "system_vs_human_labels") & (means["coefficient"] == "pearson")].set_index(
        "group")["mean_value"]
    dial = ["understanding", "task_completion", "interest_arousal", "efficiency"]
    assert got["dialogue level without dialogue_overall"] == pytest.approx(by[dial].mean(), abs=1e-5)
    assert got["turn level"] == pytest.approx(by[["relevance", "interestingness"]].mean(), abs=1e-5)
    # the numbers docs/comparing_systems.md states (quoted from summaries of the paper: 0.902 and 0.93)
    assert round(got["dialogue level without dialogue_overall"], 3) == 0.902 and round(got["turn level"], 3) == 0.932


def test_the_default_resamples_let_holm_reject_in_a_family_of_any_size():
    from face.comparison.stats import boot_size

    # the agreement's 36 pairs x 7 aspects, a calibration split's 9 systems x 7 aspects, a pair's 7 aspects
    assert [boot_size(n, 0.05) for n in (252, 63, 7)] == [50_400, 12_600, 10_000]
    for n in (252, 63, 7, 1000):
        assert n / (boot_size(n, 0.05) + 1) <= 0.05 / 10  # the smallest p after Holm: a tenth of α at most


@pytest.mark.slow
def test_system_comparison_small(cfg_factory, data_dir):
    # 6 000 resamples for the 252 agreement tests (the default's 50 400, test_the_default_resamples_...: 7x the
    # time): the smallest p, 1/6 001, times Holm's 252 is 0.042 < α, so pairs can still be separated
    cfg = cfg_factory("experiment=system_comparison", "comparison.n_boot=6000", "comparison.calibration_splits=4",
                      "comparison.calibration_boot=1500", "comparison.power_reps=1", "comparison.power_boot=1000",
                      "comparison.power_sizes=[10,null]", "comparison.arena_boot=400",
                      "report.out_dir=${paths.output_dir}/res", tracking=False)
    out = face.runner.run(cfg).experiment
    total = out.tables["agreement"].frame.set_index("aspect").loc["all aspects"]
    assert total["pairs"] == 252
    assert total["confirmed_by_humans"] + total["contradicted_by_humans"] + total["unconfirmed_by_humans"] == \
        total["face_separated"] <= 252
    assert 0 < total["human_separated"] < 252
    cal = out.tables["calibration"].frame
    assert set(cal["mode"]) == {"unpaired", "paired"} and (cal[cal.aspect == "all aspects"]["tests"] == 4 * 63).all()
    assert (cal["fpr"] < 0.2).all()  # halves of one system: few rejections
    pw = out.tables["power"].frame
    assert list(dict.fromkeys(pw["n"])) == [10, "all"]
    small, full = (pw[pw["n"] == n]["recovered_all_pairs"].mean() for n in (10, "all"))
    assert small < full  # more conversations recover more of the human ordering
    res = Path(cfg.paths.output_dir) / "res"
    for name in ("agreement", "agreement_pairs", "calibration", "power", "ranking"):
        assert (res / f"{name}.md").exists() and (res / f"{name}.csv").exists()
    assert (res / "figures" / "power.png").exists() and (res / "figures" / "beats_dialogue_overall.png").exists()
    assert (Path(cfg.paths.output_dir) / "nine_systems" / "report.html").exists()
