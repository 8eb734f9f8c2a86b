"""What the figures show, read back from matplotlib (the ``plotted`` fixture), against hand-written data: bars
below zero are drawn below zero with the axis reaching them, heatmaps have readable labels, a labelled colorbar
and the aspect's fixed scale, integer parameters get integer ticks, spread over repetitions is drawn, legends stay
off the data."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from face.report import figures, optimizer_figures

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
    assert shown["bars"] == {"BLEU": [pytest.approx(0.1)]}  # one bar: ours; the published value a marker on it
    assert shown["points"].tolist() == [[0.0, pytest.approx(-0.31)]]
    assert shown["ylims"][0][0] < -0.31


def test_positive_only_bars_start_at_zero(plotted, tmp_path):
    ours = _ours({"relevance": (0.5, 0.4, 0.6)})
    figures.bars_vs_published(ours, _published({"relevance": 0.55}), "redial", "spearman", "ours", "n",
                              tmp_path / "p.png")
    assert plotted["p.png"]["ylims"][0] == (0.0, 1.0)


def _aggregation() -> pd.DataFrame:  # as ablation_aggregation draws it: its settings' correlations, no bootstrap
    rows = []
    for setting, base in (("mean / mean", 0.5), ("median / min", 0.4)):
        for j, a in enumerate(["relevance", "dialogue_overall", "task_completion"]):
            v = base + 0.01 * j
            rows.append({"setting": setting, "aspect": a, "coefficient": "spearman", "value": v,
                         "ci_low": np.nan, "ci_high": np.nan})
    return pd.DataFrame(rows)


def test_aggregation_heatmap_has_rotated_labels_and_a_labelled_colorbar(plotted, tmp_path):
    figures.aggregation_heatmap(_aggregation(), "aspect", "note", tmp_path / "h.png", "spearman — ReDial")
    shown = plotted["h.png"]
    assert shown["xticks"] == ["relevance", "task completion", "dialogue overall"]
    assert shown["xtick_rotation"] == 30
    assert shown["colorbar_labels"] == ["Spearman ρ"]
    assert not any("CI" in t for t in shown["texts"])  # no CI promised when none is drawn


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


@pytest.mark.slow  # process-, server- or rendering-bound (≈ 1 s): the fast suite stays within 45 s
def test_heldout_vs_budget_is_a_grid_of_panels_with_integer_budget_ticks_and_the_spread(plotted, tmp_path):
    optimizer_figures.heldout_vs_budget(_grid(), 1.0, "held-out spearman", "Bandit selection", "note",
                                        tmp_path / "hb.png")
    shown = plotted["hb.png"]
    width, height = shown["size"]
    assert width / height < 2.5  # not a 2184 × 336 strip
    assert len(shown["ylims"]) == 7  # one panel per aspect; the 8th cell holds the legend only
    assert all(locs == [8.0, 16.0, 128.0] for locs in shown["xticklocs"])
    assert {"8", "16", "128"} <= set(shown["texts"])
    assert any("±1 sd over 20 runs" in t for t in shown["texts"])


@pytest.fixture(scope="module")
def regret_shown(tmp_path_factory) -> dict:
    """What regret_vs_c draws for _grid() at budget 128 (drawn once for the tests that read it)."""
    from helpers import spy_on_figures

    with pytest.MonkeyPatch.context() as mp:
        seen = spy_on_figures(mp)
        optimizer_figures.regret_vs_c(_grid(), 128, "UCB regret", "note", tmp_path_factory.mktemp("regret") / "r.png")
    return seen["r.png"]


def test_regret_vs_c_keeps_its_legend_off_the_data_and_labels_c_plainly(regret_shown):
    shown = regret_shown
    assert shown["legend_outside"] is True
    assert shown["xticks"] == ["0.25", "1", "4"]


def test_position_curve_ticks_are_the_integer_positions(plotted, tmp_path):
    by_position = pd.DataFrame({"aspect": "relevance", "position": [1, 2, 3], "low_share": [0.1, 0.2, 0.05]})
    figures.position_curve(by_position, "note", tmp_path / "pos.png")
    assert plotted["pos.png"]["xticks"] == ["1", "2", "3"]


def test_regret_vs_c_draws_the_spread_over_repetitions(regret_shown):
    lines = regret_shown["lines"]
    assert len(lines) == 7  # one error-bar line per aspect: mean regret with ±1 sd whiskers
    assert all(y == pytest.approx([0.04, 0.04, 0.04]) for _, y in lines.values())


@pytest.mark.slow  # process-, server- or rendering-bound (≈ 1 s): the fast suite stays within 45 s
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


# ---------------------------------------------------------------- text that never overlaps

@pytest.fixture
def finished_figures(monkeypatch) -> list:
    """Every figure as it is when saved and closed (caption included): plt.close only collects it here."""
    import matplotlib.pyplot as plt

    kept, close = [], plt.close
    monkeypatch.setattr(plt, "close", lambda fig=None: kept.append(fig))
    yield kept
    for fig in kept:
        close(fig)


def overlapping_texts(fig) -> list[tuple[str, str]]:
    """Pairs of visible, non-empty texts of ``fig`` whose drawn bounding boxes overlap (by more than a pixel each
    way), read from matplotlib's renderer: titles, tick and axis labels, legend entries, the caption, annotations.
    Two tick labels of one axis rotated by an angle other than 0 or 90° are not compared (their upright boxes
    overlap where the glyphs do not)."""
    import matplotlib.text

    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    hidden = {id(t) for ax in fig.axes if not ax.get_visible() for t in ax.findobj(matplotlib.text.Text)}
    tick_sets = {id(t): id(axis) for ax in fig.axes for axis in (ax.xaxis, ax.yaxis)
                 for t in axis.get_ticklabels(which="both")}
    texts = [t for t in fig.findobj(matplotlib.text.Text)
             if t.get_visible() and t.get_text().strip() and id(t) not in hidden]
    boxes = [(t, t.get_window_extent(renderer)) for t in texts]
    out = []
    for i, (a, ba) in enumerate(boxes):
        for b, bb in boxes[i + 1:]:
            same_axis = tick_sets.get(id(a), 0) == tick_sets.get(id(b), 1)
            if same_axis and a.get_rotation() % 90 and b.get_rotation() % 90:
                continue
            if min(ba.x1, bb.x1) - max(ba.x0, bb.x0) > 1 and min(ba.y1, bb.y1) - max(ba.y0, bb.y0) > 1:
                out.append((a.get_text()[:40], b.get_text()[:40]))
    return out


LONG_NOTE = ("FACE live — LLM: scripted-model (scripted) — SCRIPTED TEST SERVER, canned answers, not an LLM "
             "judgement; decomposition n=3, T=0.6; scoring n=5, T=0.7, 16 instructions; 467 conversations, "
             "2235 assistant turns; particles: the authors' released decomposition.")
ACTS = ["recommendation", "preference elicitation", "others", "explanation", "chit-chat and greetings"]


def _by_act(aspect="relevance") -> pd.DataFrame:
    return pd.DataFrame([{"system": f"crs_{s}_opendialkg", "dialogue_act": act, "aspect": aspect,
                          "mean_score": (s + j) % 3 * 0.6} for s in range(9) for j, act in enumerate(ACTS)])


@pytest.mark.slow  # seconds of processes, servers or rendering: the fast suite stays within 45 s
def test_no_text_overlaps_in_the_reports_heatmaps_and_the_committed_diagnostics_figures(finished_figures, tmp_path):
    from face.datasets.crsarena import ASPECTS
    from face.report.diagnostic_report import act_heatmaps

    by_act = pd.concat([_by_act(a) for a in ("relevance", "dialogue_overall")])
    assert len(act_heatmaps(by_act, [ASPECTS["relevance"], ASPECTS["dialogue_overall"]])) == 2
    two = pd.DataFrame([{"system": s, "dialogue_act": a, "aspect": "relevance", "mean_score": 1.0}
                        for s in ("moviebot-a", "moviebot-b") for a in ("preference elicitation", "recommendation")])
    assert len(act_heatmaps(two, [ASPECTS["relevance"]])) == 1  # two rows: seaborn would turn the names upright
    assert [t.get_rotation() for t in finished_figures[-1].axes[0].get_yticklabels()] == [0.0, 0.0]
    figures.act_heatmap(_by_act(), "relevance", (0, 2), LONG_NOTE, tmp_path / "a.png")
    share = _by_act().rename(columns={"mean_score": "share"})
    figures.act_share_bars(share, LONG_NOTE, tmp_path / "s.png")
    by_position = pd.DataFrame([{"aspect": a, "position": p, "low_share": 0.1 + 0.05 * (a == "efficiency") * p,
                                 "n": 100} for a in ASPECTS for p in range(1, 9)])
    figures.position_curve(by_position, LONG_NOTE, tmp_path / "p.png")
    assert len(finished_figures) == 6
    for fig in finished_figures:
        assert overlapping_texts(fig) == [], fig.axes[0].get_title()


def test_overlapping_texts_finds_a_caption_written_over_rotated_tick_labels():
    """The check itself can fail: the report's former heatmap caption (fig.text at y = −0.01) under labels rotated
    30°."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(4, 3))
    ax.plot(range(5))
    ax.set_xticks(range(5))
    ax.set_xticklabels([f"dialogue act {i}" for i in range(5)], rotation=30, ha="right")
    fig.text(0.01, 0.05, "Scores by: scripted-model (scripted), n=5, T=0.7", fontsize=7)
    try:
        assert overlapping_texts(fig)
    finally:
        plt.close(fig)


def _usr_rows():
    metrics = ["BLEU-1", "BLEU-2", "BLEU-3", "BLEU-4", "METEOR", "ROUGE-L"]
    qualities = ["understandable", "natural", "maintains_context", "engaging", "uses_knowledge", "overall"]
    ours = pd.DataFrame([{"method": m, "aspect": q, "coefficient": "spearman", "value": 0.1 + 0.04 * i + 0.02 * j,
                          "ci_low": 0.02 * j, "ci_high": 0.3 + 0.05 * i} for i, q in enumerate(qualities)
                         for j, m in enumerate(metrics)])
    pub = pd.DataFrame([{"method": m, "aspect": "overall", "coefficient": "spearman", "value": 0.27} for m in metrics])
    return ours, pub


def test_usr_bars_show_every_published_value_on_its_metrics_bar_with_one_legend_entry(plotted, finished_figures,
                                                                                        tmp_path):
    ours, pub = _usr_rows()
    figures.bars_by_quality(ours, pub, "spearman", "method", "USR Topical-Chat", LONG_NOTE, tmp_path / "u.png")
    shown = plotted["u.png"]
    assert list(shown["bars"]) == ["BLEU-1", "BLEU-2", "BLEU-3", "BLEU-4", "METEOR", "ROUGE-L"]  # 6 series, not 12
    assert len(shown["points"]) == 6 and shown["points"][:, 1].tolist() == [pytest.approx(0.27)] * 6
    legend = [t.get_text() for t in finished_figures[0].axes[0].get_legend().get_texts()]
    assert legend == ["BLEU-1", "BLEU-2", "BLEU-3", "BLEU-4", "METEOR", "ROUGE-L", "published value"]
    assert shown["legend_outside"] is True
    assert overlapping_texts(finished_figures[0]) == []


def _trajectory(dev=True) -> pd.DataFrame:
    rows = []
    for a in ["relevance", "interestingness", "understanding", "task_completion", "interest_arousal", "efficiency",
              "dialogue_overall"]:
        for r in (1, 2, 3):
            rows.append({"aspect": a, "round": r, "best_train_reward": 0.3 + 0.1 * r,
                         "mean_train_reward": 0.2 + 0.05 * r,
                         "dev_correlation_beam": 0.25 + 0.05 * r if dev else np.nan})
    return pd.DataFrame(rows)


@pytest.mark.slow  # seconds of processes, servers or rendering: the fast suite stays within 45 s
def test_the_optimizer_trajectory_fits_a_page_with_labelled_axes_integer_rounds_and_only_drawn_lines(
        plotted, finished_figures, tmp_path):
    optimizer_figures.trajectory(_trajectory(dev=False), "spearman", "Instruction optimizer", LONG_NOTE,
                                 tmp_path / "t.png")
    shown, fig = plotted["t.png"], finished_figures[0]
    width, height = shown["size"]
    assert width <= 7.5 and width / height < 2.5  # paper width, not a 2464 × 330 strip of 7 panels
    assert all(locs == [1.0, 2.0, 3.0] for locs in shown["xticklocs"])  # rounds: no 1.5 or 2.5
    visible = [ax for ax in fig.axes if ax.get_visible()]
    assert len(visible) == 7 and {ax.get_ylabel() for ax in visible if ax.get_ylabel()} == {"Spearman ρ"}
    assert {ax.get_xlabel() for ax in visible if ax.get_xlabel()} == {"round"}
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend == ["best candidate, train", "mean of candidates, train"]  # the dev line is not drawn: not listed
    assert "not drawn: beam, dev" in fig._suptitle.get_text()
    assert overlapping_texts(fig) == []
    optimizer_figures.trajectory(_trajectory(dev=True), "spearman", "Instruction optimizer", LONG_NOTE,
                                 tmp_path / "t2.png")
    assert [t.get_text() for t in finished_figures[1].legends[0].get_texts()][-1] == "beam, dev"


def test_the_position_curve_says_which_aspects_have_more_than_10_percent_in_their_lowest_10_percent(plotted,
                                                                                                   tmp_path):
    # efficiency: 40 % of 200 particles at or below its 10th percentile (ties at 0); relevance 10 %: no note
    by_position = pd.DataFrame({"aspect": ["relevance", "relevance", "efficiency", "efficiency"],
                                "position": [1, 2, 1, 2], "low_share": [0.1, 0.1, 0.3, 0.5], "n": [100] * 4})
    figures.position_curve(by_position, "note", tmp_path / "pos.png")
    texts = plotted["pos.png"]["texts"]
    assert "efficiency (40 % of all: ties)" in texts and "relevance" in texts
    assert "10 % (no ties)" in texts


def test_a_figure_has_the_same_bytes_whatever_the_process_drew_before_and_leaves_its_settings_alone(tmp_path):
    # `face evaluate` drew the report's heatmaps after its other figures had set a theme for the process; a later
    # `face report` drew them in a fresh process: the same data, two looks (test_cli caught it, depending on order)
    import matplotlib
    import seaborn as sns

    from face.aspects import Aspect
    from face.report.diagnostic_report import act_heatmaps

    by_act = pd.DataFrame([{"system": s, "dialogue_act": "recommendation", "aspect": "relevance", "mean_score": v}
                           for s, v in [("a", 1.05), ("b", 1.5)]])
    relevance = Aspect("relevance", "turn", (0, 1, 2), "how relevant")

    def draw() -> tuple[str, bytes]:
        figures.act_heatmap(by_act, "relevance", (0, 2), "note", tmp_path / "h.png")
        return act_heatmaps(by_act, [relevance])[0][1], (tmp_path / "h.png").read_bytes()

    with matplotlib.rc_context():  # whatever this test sets stays in it
        matplotlib.rcdefaults()
        fresh = draw()
        sns.set_theme(style="darkgrid", context="poster", font_scale=1.7)  # what any earlier figure might have left
        before = dict(matplotlib.rcParams)
        assert draw() == fresh
        assert dict(matplotlib.rcParams) == before  # drawing changed nothing the process had set


def test_system_scatter_is_the_same_png_when_the_means_differ_in_their_last_bits(tmp_path):
    """The means a scatter plots differ in their last bits from one CPU to another (numpy's SIMD kernels sum in
    another order); the committed PNG must not: crowded labels are placed by an iterative layout that amplifies them."""
    rng = np.random.default_rng(3)
    pred = rng.uniform(0.9, 2.1, 9)
    table = pd.DataFrame({"system": [f"sys_{i}" for i in range(9)], "pred": pred,
                          "human": pred * 0.8 + rng.normal(0, 0.05, 9)})
    table.loc[1:4, "pred"] = table.loc[1, "pred"] + np.arange(4) * 1e-3  # four labels on one spot
    nudged = table.assign(pred=np.nextafter(table["pred"], np.inf), human=np.nextafter(table["human"], -np.inf))
    a = figures.system_scatter(table, "t", "note", tmp_path / "a.png")
    b = figures.system_scatter(nudged, "t", "note", tmp_path / "b.png")
    assert a.read_bytes() == b.read_bytes()
