"""What the figures show, read back from matplotlib (the ``plotted`` fixture), against hand-written data: bars
below zero are drawn below zero with the axis reaching them, heatmaps have readable labels, a labelled colorbar
and the aspect's fixed scale, integer parameters get integer ticks, spread over repetitions is drawn, legends stay
off the data."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from face.report import figures

ASPECTS = ["relevance", "interestingness"]


def _ours(values: dict[str, tuple[float, float, float]], split="redial", coefficient="spearman") -> pd.DataFrame:
    return pd.DataFrame([{"level": "turn", "aspect": a, "split": split, "coefficient": coefficient, "value": v,
                          "ci_low": lo, "ci_high": hi, "n": 60} for a, (v, lo, hi) in values.items()])


def _published(values: dict[str, float], method="FACE", split="redial", coefficient="spearman") -> pd.DataFrame:
    return pd.DataFrame([{"method": method, "split": split, "aspect": a, "coefficient": coefficient, "value": v}
                         for a, v in values.items()])


def test_negative_correlations_are_bars_below_zero_and_the_axis_reaches_their_whiskers(plotted, tmp_path):
    # the tiny model's committed values: relevance −0.021 [−0.227, 0.202] and −0.195 [−0.456, 0.158]
    ours = _ours({"relevance": (-0.195, -0.456, 0.158), "interestingness": (0.30, 0.10, 0.45)})
    figures.bars_vs_published(ours, _published({"relevance": 0.527, "interestingness": 0.454}), "redial",
                              "spearman", "ours", "note", tmp_path / "bars.png")
    shown = plotted["bars.png"]
    heights = dict(zip(["relevance", "interestingness"], shown["bars"]["ours"]))
    assert heights["relevance"] == pytest.approx(-0.195)  # a bar of negative height: drawn from 0 downwards
    assert shown["bar_bottoms"]["ours"] == [0.0, 0.0]
    low, high = shown["ylims"][0]
    assert low < -0.456 and high >= 1.0  # the whole lower whisker is inside the axes


def test_bars_by_quality_draw_a_negative_published_value_below_zero(plotted, tmp_path):
    ours = pd.DataFrame([{"method": "BLEU", "aspect": "relevance", "coefficient": "spearman", "value": 0.1,
                          "ci_low": 0.0, "ci_high": 0.2}])
    pub = pd.DataFrame([{"method": "BLEU", "aspect": "relevance", "coefficient": "spearman", "value": -0.31}])
    figures.bars_by_quality(ours, pub, "spearman", "method", "t", "note", tmp_path / "q.png")
    shown = plotted["q.png"]
    assert shown["bars"]["BLEU (published)"] == [pytest.approx(-0.31)]
    assert shown["ylims"][0][0] < -0.31


def test_positive_only_bars_start_at_zero(plotted, tmp_path):
    ours = _ours({"relevance": (0.5, 0.4, 0.6)})
    figures.bars_vs_published(ours, _published({"relevance": 0.55}), "redial", "spearman", "ours", "n",
                              tmp_path / "p.png")
    assert plotted["p.png"]["ylims"][0] == (0.0, 1.0)


def _aggregation(with_ci: bool) -> pd.DataFrame:
    rows = []
    for setting, base in (("mean / mean", 0.5), ("median / min", 0.4)):
        for j, a in enumerate(["relevance", "dialogue_overall", "task_completion"]):
            v = base + 0.01 * j
            rows.append({"setting": setting, "aspect": a, "coefficient": "spearman", "value": v,
                         "ci_low": v - 0.05 if with_ci else np.nan, "ci_high": v + 0.05 if with_ci else np.nan})
    return pd.DataFrame(rows)


def test_aggregation_heatmap_has_rotated_labels_and_a_labelled_colorbar(plotted, tmp_path):
    figures.aggregation_heatmap(_aggregation(False), "aspect", "note", tmp_path / "h.png", "spearman — ReDial")
    shown = plotted["h.png"]
    assert shown["xticks"] == ["relevance", "task completion", "dialogue overall"]
    assert shown["xtick_rotation"] == 30
    assert shown["colorbar_labels"] == ["Spearman ρ"]
    assert not any("CI" in t for t in shown["texts"])  # no CI promised when none is drawn


def test_aggregation_heatmap_prints_cis_when_it_has_them_and_says_so(plotted, tmp_path):
    figures.aggregation_heatmap(_aggregation(True), "aspect", "note", tmp_path / "h.png", "spearman — ReDial")
    texts = plotted["h.png"]["texts"]
    assert "0.500\n[0.45, 0.55]" in texts
    assert "spearman — ReDial (95 % CIs)" in texts


def test_act_heatmap_colours_on_the_aspects_fixed_scale(plotted, tmp_path):
    import matplotlib.pyplot as plt

    by_act = pd.DataFrame([{"system": "a", "dialogue_act": "recommendation", "aspect": "relevance",
                            "mean_score": 1.05},
                           {"system": "b", "dialogue_act": "recommendation", "aspect": "relevance",
                            "mean_score": 1.11}])
    limits = {}
    original = plt.Figure.savefig

    def spy(fig, *a, **k):  # the colour limits of the heatmap's mesh: the scale, not the data's range
        mesh = fig.axes[0].collections[0]
        limits["clim"], limits["cmap"] = mesh.get_clim(), mesh.get_cmap().name
        return original(fig, *a, **k)

    plt.Figure.savefig = spy
    try:
        figures.act_heatmap(by_act, "relevance", (0, 2), "note", tmp_path / "a.png")
    finally:
        plt.Figure.savefig = original
    assert limits == {"clim": (0.0, 2.0), "cmap": "cividis"}
    assert plotted["a.png"]["colorbar_labels"] == ["mean particle score (0–2 scale)"]


def _grid() -> pd.DataFrame:
    rows = []
    for a in ["relevance", "interestingness", "understanding", "task_completion", "interest_arousal", "efficiency",
              "dialogue_overall"]:
        rows += [{"aspect": a, "policy": "full", "budget": 0, "ucb_c": np.nan, "heldout": 0.55, "heldout_sd": 0.0,
                  "regret": 0.01, "regret_sd": 0.0, "best": 0.56, "runs": 2},
                 {"aspect": a, "policy": "random", "budget": 0, "ucb_c": np.nan, "heldout": 0.5, "heldout_sd": 0.02,
                  "regret": 0.06, "regret_sd": 0.02, "best": 0.56, "runs": 20}]
        for b in (8, 16, 128):
            for c in (0.25, 1.0, 4.0):
                rows.append({"aspect": a, "policy": "ucb", "budget": b, "ucb_c": c, "heldout": 0.52,
                             "heldout_sd": 0.01, "regret": 0.04, "regret_sd": 0.01, "best": 0.56, "runs": 20})
            rows.append({"aspect": a, "policy": "uniform", "budget": b, "ucb_c": np.nan, "heldout": 0.51,
                         "heldout_sd": 0.015, "regret": 0.05, "regret_sd": 0.015, "best": 0.56, "runs": 20})
    return pd.DataFrame(rows)


def test_heldout_vs_budget_is_a_grid_of_panels_with_integer_budget_ticks_and_the_spread(plotted, tmp_path):
    figures.heldout_vs_budget(_grid(), 1.0, "held-out spearman", "Bandit selection", "note", tmp_path / "hb.png")
    shown = plotted["hb.png"]
    width, height = shown["size"]
    assert width / height < 2.5  # not a 2184 × 336 strip
    assert len(shown["ylims"]) == 7  # one panel per aspect; the 8th cell holds the legend only
    assert all(locs == [8.0, 16.0, 128.0] for locs in shown["xticklocs"])
    assert {"8", "16", "128"} <= set(shown["texts"])
    assert any("±1 sd over 20 runs" in t for t in shown["texts"])


def test_regret_vs_c_keeps_its_legend_off_the_data_and_labels_c_plainly(plotted, tmp_path):
    figures.regret_vs_c(_grid(), 128, "UCB regret", "note", tmp_path / "r.png")
    shown = plotted["r.png"]
    assert shown["legend_outside"] is True
    assert shown["xticks"] == ["0.25", "1", "4"]


def test_position_curve_ticks_are_the_integer_positions(plotted, tmp_path):
    by_position = pd.DataFrame({"aspect": "relevance", "position": [1, 2, 3], "low_share": [0.1, 0.2, 0.05]})
    figures.position_curve(by_position, "note", tmp_path / "pos.png")
    assert plotted["pos.png"]["xticks"] == ["1", "2", "3"]


def test_regret_vs_c_draws_the_spread_over_repetitions(plotted, tmp_path):
    figures.regret_vs_c(_grid(), 128, "UCB regret", "note", tmp_path / "r.png")
    lines = plotted["r.png"]["lines"]
    assert len(lines) == 7  # one error-bar line per aspect: mean regret with ±1 sd whiskers
    assert all(y == pytest.approx([0.04, 0.04, 0.04]) for _, y in lines.values())


def test_the_committed_tiny_model_figures_redrawn_from_its_csvs_show_its_negative_correlations(
        plotted, tmp_path, data_dir, monkeypatch):
    import importlib.util
    import shutil
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("replot_results", root / "scripts" / "replot_results.py")
    replot = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(replot)
    committed = root / "results" / "tiny_model_signal"
    out = tmp_path / "tiny"
    shutil.copytree(committed, out)
    replot.replot(out, data_dir, None)
    for name in ("correlations.md", "vs_published.md", "correlations.tex", "vs_published.tex"):
        assert (out / name).read_text() == (committed / name).read_text(), f"{name}: results/ differs from the code"
    # committed values (correlations.csv): relevance turn-level Spearman −0.0222 (ReDial), −0.1886 (OpenDialKG)
    for split, value, low in (("redial", -0.0222, -0.2612), ("opendialkg", -0.1886, -0.3889)):
        shown = plotted[f"bars_{split}_spearman.png"]
        assert shown["bars"]["ours (smollm2-135m-instruct)"][0] == pytest.approx(value, abs=1e-4)
        assert shown["ylims"][0][0] < low
