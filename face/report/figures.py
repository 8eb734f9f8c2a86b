"""Figures: ours vs published bars, system-level scatter, k-instructions curve, aggregation heatmap; for the baseline
and transfer experiments, bars per quality and method with 95 % CIs (ours, solid) beside the published value of the
same method where one exists (hatched, no CI), and the transfer figure (one aspect's correlation on CRSArena-Eval,
Topical-Chat, PersonaChat)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import matplotlib
import matplotlib.ticker

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from face.files import atomic_path
from face.report.look import drawn
from face.report.tables import SPLIT_LABELS, ordered

COEF_LABELS = {"pearson": "Pearson r", "spearman": "Spearman ρ", "kendall": "Kendall τ"}
TIED_ABOVE = 0.12  # an aspect with more than this share of its particles in its "lowest 10 %": ties, said so


def _caption(fig: plt.Figure, note: str, fontsize: float = 7) -> None:
    """The note under the axes, wrapped to the figure's width. Measured once for the whole note (its mean
    character width), not word by word as matplotlib's ``wrap=True`` does (≈ 0.2 s a figure for a long note)."""
    from matplotlib.font_manager import FontProperties
    from matplotlib.textpath import TextToPath

    width_pt, _, _ = TextToPath().get_text_width_height_descent(note, FontProperties(size=fontsize), ismath=False)
    chars = int(0.9 * fig.get_figwidth() * 72 / max(width_pt / max(len(note), 1), 1e-6))
    # it starts under the lowest tick label or axis label of any axes and under a figure legend, so rotated labels and
    # legends never run into it
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]  # Agg's canvas (matplotlib.use("Agg"))
    boxes = [ax.get_tightbbox(renderer) for ax in fig.axes if ax.get_visible()]
    boxes += [leg.get_window_extent(renderer) for leg in fig.legends]
    top = min(-0.02, min((b.y0 for b in boxes if b is not None), default=0.0) / fig.bbox.height - 0.02)
    fig.text(0.01, top, textwrap.fill(note, max(chars, 40), break_on_hyphens=False), fontsize=fontsize, ha="left",
             va="top")


def _bar_axes(ax: plt.Axes, ticks, aspects, coefficient: str, title: str, mine, pub) -> None:
    """The axes of bars grouped by aspect (``ticks``: the groups' middles): the aspects' names, the coefficient, the
    title, and y from 0.05 below the lowest bar, whisker (``mine``) or published value (``pub``) — never cut at 0: a
    negative correlation is drawn below the zero line — up to a correlation's 1 or above, with a zero line."""
    ax.set_xticks(ticks, [a.replace("_", "\n") for a in aspects])
    ax.set(ylabel=COEF_LABELS[coefficient], title=title)
    flat = np.concatenate([mine["value"], mine["ci_low"], mine["ci_high"], pub["value"].dropna(), [0, 1]]).astype(float)
    flat = flat[np.isfinite(flat)]
    ax.set_ylim(flat.min() - 0.05 if flat.min() < 0 else 0.0, flat.max())
    ax.axhline(0, color="black", lw=0.6)


def _integer_ticks(ax: plt.Axes, values) -> None:
    """X ticks exactly at the integer values a parameter took (k, budget, position), labelled without decimals."""
    ticks = sorted({int(v) for v in values if np.isfinite(v)})
    ax.set_xticks(ticks, [str(t) for t in ticks])
    ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())


def _with_ci(d: pd.DataFrame, keys) -> tuple[np.ndarray, np.ndarray]:
    """``d``'s ``value`` at each of ``keys`` (its index; NaN where missing) and its error bars (below, above) from
    ``ci_low`` / ``ci_high`` (0 where either is missing)."""
    v, lo, hi = (d[c].reindex(keys).to_numpy(float) for c in ("value", "ci_low", "ci_high"))
    return v, np.clip(np.nan_to_num(np.array([v - lo, hi - v])), 0, None)


def _save(fig: plt.Figure, path: str | Path, note: str) -> Path:
    """The figure (with ``note`` as its caption) as a PNG with no version stamp (the same bytes on every run)."""
    _caption(fig, note)
    path = Path(path)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=110, bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)
    return path


@drawn()
def bars_vs_published(ours: pd.DataFrame, published: pd.DataFrame, split: str, coefficient: str,
                      ours_label: str, note: str, path: str | Path, dataset_title: str = "CRSArena-Eval") -> Path:
    """Grouped bars per aspect: every published method, then ours with its bootstrap CI."""
    pub = published[(published["split"] == split) & (published["coefficient"] == coefficient)]
    methods = list(dict.fromkeys(pub["method"]))
    mine = ours[(ours["split"] == split) & (ours["coefficient"] == coefficient)
                & ours["level"].isin(["turn", "dialogue"])].set_index("aspect")
    aspects = ordered([*mine.index, *pub["aspect"]])
    series = methods + [ours_label]
    colors = sns.color_palette("muted", len(series))
    width = 0.85 / len(series)
    x = np.arange(len(aspects))
    fig, ax = plt.subplots(figsize=(max(8, 1.5 * len(aspects)), 4.2))
    for i, m in enumerate(methods):
        vals = pub[pub["method"] == m].set_index("aspect")["value"].reindex(aspects).to_numpy(float)
        ax.bar(x + i * width, np.nan_to_num(vals), width, label=m, color=colors[i], alpha=0.75)
        for j in np.flatnonzero(np.isnan(vals)):  # a method the paper reports without this value
            ax.text(x[j] + i * width, 0.01, "n/a", rotation=90, fontsize=6, ha="center", va="bottom", color=colors[i])
    value, err = _with_ci(mine, aspects)
    ax.bar(x + len(methods) * width, value, width, label=ours_label, color=colors[-1], edgecolor="black",
           linewidth=0.8, yerr=err, capsize=2)
    _bar_axes(ax, x + width * (len(series) - 1) / 2, aspects, coefficient,
              f"{dataset_title} {SPLIT_LABELS.get(split, split)} — {COEF_LABELS[coefficient]}", mine, pub)
    ax.legend(ncol=4, fontsize=7, loc="upper left")
    return _save(fig, path, note)


@drawn()
def system_scatter(table: pd.DataFrame, title: str, note: str, path: str | Path, y_label: str = "human mean label",
                   label_col: str = "system", stats: str = "") -> Path:
    """One labelled point per system: mean prediction vs mean human label (``table``: label_col, pred, human,
    optionally split — one colour per split); ``stats`` (e.g. "Spearman ρ = 0.88 [0.77, 0.98], n = 9 systems")
    is printed in the plot. Labels are placed by adjustText so they do not overlap."""
    from adjustText import adjust_text

    # rounded far below a pixel: labels placed from the last bits of a mean (which differ with the CPU's SIMD
    # kernels) would land on other pixels on another CPU
    table = table.assign(pred=table["pred"].round(9), human=table["human"].round(9))
    fig, ax = plt.subplots(figsize=(5.8, 4.6))
    sns.regplot(data=table, x="pred", y="human", ax=ax, ci=None, scatter=False, line_kws={"color": "grey", "lw": 1})
    hue = "split" if "split" in table.columns and table["split"].nunique() > 1 else None
    if hue:
        table = table.assign(split=table["split"].map(lambda s: SPLIT_LABELS.get(s, s)))
    sns.scatterplot(data=table, x="pred", y="human", hue=hue, ax=ax, s=45, palette="deep" if hue else None, zorder=3)
    texts = [ax.text(r.pred, r.human, str(getattr(r, label_col)), fontsize=7)
             for r in table.sort_values(label_col).itertuples(index=False)]
    # a fixed number of iterations, not adjustText's default 1-second time limit: the same figure every run
    adjust_text(texts, ax=ax, iter_lim=300, arrowprops={"arrowstyle": "-", "color": "grey", "lw": 0.5})
    if stats:
        ax.text(0.02, 0.98, stats, transform=ax.transAxes, va="top", ha="left", fontsize=8,
                bbox={"boxstyle": "round", "facecolor": "white", "alpha": 0.8, "edgecolor": "#ccc"})
    if hue:
        ax.legend(title="", fontsize=7, loc="lower right")
    ax.set(xlabel="FACE mean prediction", ylabel=y_label, title=title)
    return _save(fig, path, note)


@drawn()
def k_curve(summary: pd.DataFrame, coefficient: str, note: str, path: str | Path) -> Path:
    """Correlation (mean ± sd over seeds) against the number of instructions k, one line per aspect."""
    df = summary[summary["coefficient"] == coefficient]
    splits = list(dict.fromkeys(df["split"]))
    fig, axes = plt.subplots(1, len(splits), figsize=(5 * len(splits), 4), sharey=True, squeeze=False)
    for ax, split in zip(axes[0], splits):
        for aspect in ordered(df["aspect"]):
            g = df[(df["split"] == split) & (df["aspect"] == aspect)].sort_values("k")
            ax.errorbar(g["k"], g["mean"], yerr=g["sd"], marker="o", capsize=3, label=aspect)
        ax.set_xscale("log", base=2)
        _integer_ticks(ax, df["k"])
        ax.set(xlabel="number of instructions k", title=SPLIT_LABELS.get(split, split))
    axes[0][0].set_ylabel(COEF_LABELS[coefficient])
    axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    return _save(fig, path, note)


@drawn("white")
def aggregation_heatmap(df: pd.DataFrame, aspect_col: str, note: str, path: str | Path, title: str) -> Path:
    """Heatmap: rows = aggregator setting, columns = aspect, cells = correlation (no interval: the ablation's
    settings are compared with their paired CIs in aggregation_differences)."""
    pivot = df.pivot(index="setting", columns=aspect_col, values="value")
    pivot = pivot[ordered(pivot.columns)]
    fig, ax = plt.subplots(figsize=(1.3 * pivot.shape[1] + 2.5, 0.45 * pivot.shape[0] + 1.8))
    sns.heatmap(pivot, annot=pivot.map(lambda v: f"{v:.3f}"), fmt="", cmap="viridis", ax=ax, annot_kws={"fontsize": 7},
                cbar_kws={"shrink": 0.7, "label": COEF_LABELS[df["coefficient"].iloc[0]]})
    ax.set(title=title, xlabel="", ylabel="instruction agg / particle agg")
    _rotated_ticks(ax, pivot.columns)
    return _save(fig, path, note)


def _rotated_ticks(ax: plt.Axes, names) -> None:
    """Long column names rotated 30° and anchored at their cell's right edge: they never run together."""
    ax.set_xticklabels([str(c).replace("_", " ") for c in names], rotation=30, ha="right", rotation_mode="anchor")


def act_axes(by_act: pd.DataFrame, aspect: str, scale: tuple[float, float], label: str, height: float):
    """The figure of the mean particle score per system (rows) × dialogue act (columns) of one aspect, coloured on the
    aspect's FIXED human scale (``scale`` = its lowest and highest label) with a colour-blind-safe sequential map
    (cividis: 1.05 and 1.11 on a 0–2 scale look alike, as they should): (figure, axes, the acts), None where it has
    no score."""
    pivot = by_act[by_act["aspect"] == aspect].pivot(index="system", columns="dialogue_act", values="mean_score")
    if pivot.empty:
        return None
    fig, ax = plt.subplots(figsize=(1.3 * pivot.shape[1] + 2.5, 0.4 * pivot.shape[0] + height))
    sns.heatmap(pivot, annot=True, fmt=".2f", cmap="cividis", vmin=scale[0], vmax=scale[1], ax=ax,
                cbar_kws={"shrink": 0.7, "label": label})
    ax.set(xlabel="", ylabel="")
    return fig, ax, pivot.columns


@drawn("white")
def act_heatmap(by_act: pd.DataFrame, aspect: str, scale: tuple[float, float], note: str, path: str | Path) -> Path:
    """Mean particle score per system (rows) × dialogue act (columns) for one aspect, on the aspect's scale."""
    fig, ax, acts = act_axes(by_act, aspect, scale, f"mean particle score ({scale[0]:g}–{scale[1]:g} scale)", 1.5)
    ax.set_title(f"{aspect}: mean particle score by system and dialogue act")
    _rotated_ticks(ax, acts)
    return _save(fig, path, note)


@drawn()
def act_share_bars(act_share: pd.DataFrame, note: str, path: str | Path) -> Path:
    """Stacked bars: the share of each dialogue act among a system's particles."""
    pivot = act_share.pivot(index="system", columns="dialogue_act", values="share").fillna(0.0)
    fig, ax = plt.subplots(figsize=(7, 0.4 * len(pivot) + 1.5))
    pivot.plot(kind="barh", stacked=True, ax=ax, colormap="tab10", width=0.8)
    ax.set(xlabel="share of the system's particles", ylabel="", xlim=(0, 1), title="Dialogue acts per system")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return _save(fig, path, note)


@drawn()
def position_curve(by_position: pd.DataFrame, note: str, path: str | Path) -> Path:
    """Share of an aspect's lowest-scoring particles (at or below its 10th percentile) by assistant-turn position.
    Scores tied at the 10th percentile all count, so an aspect with many equal low scores (efficiency: a third of its
    particles score 0) has more than 10 % in the set: its legend entry says how many, and the grey line marks the
    10 % of an aspect without such ties."""
    fig, ax = plt.subplots(figsize=(6.5, 4))
    tied = tied_low(by_position)
    for aspect in ordered(by_position["aspect"]):
        g = by_position[by_position["aspect"] == aspect].sort_values("position")
        ties = f" ({100 * tied[aspect]:.0f} % of all: ties)" if aspect in tied else ""
        ax.plot(g["position"], g["low_share"], marker="o", label=f"{aspect}{ties}")
    ax.axhline(0.1, color="grey", lw=0.8, ls="--", label="10 % (no ties)")
    _integer_ticks(ax, by_position["position"])
    ax.set(xlabel="assistant turn (8 = 8th or later)", ylabel="share of particles in the lowest 10 %",
           title="Where low-scoring particles fall")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), title="aspect", title_fontsize=7)
    return _save(fig, path, note + " Lowest 10 %: at or below the aspect's 10th percentile; scores tied there all "
                 "count, so an aspect with many equal low scores has more than 10 % of its particles in the set.")


def tied_low(by_position: pd.DataFrame) -> dict[str, float]:
    """Aspects whose "lowest 10 %" holds clearly more than 10 % of their particles (``TIED_ABOVE``: scores tied at
    the 10th percentile all count as low): aspect → the share that does (none without the counts ``n``)."""
    if by_position.empty or "n" not in by_position.columns:
        return {}
    share = (by_position["low_share"] * by_position["n"]).groupby(by_position["aspect"]).sum() \
        / by_position.groupby("aspect")["n"].sum()
    return {str(a): float(v) for a, v in share.items() if v > TIED_ABOVE}


# ---------------------------------------------------------------- baselines and transfer

@drawn()
def bars_by_quality(ours: pd.DataFrame, published: pd.DataFrame, coefficient: str, method_col: str,
                    title: str, note: str, path: str | Path) -> Path:
    """One bar per method and quality with its 95 % CI (ours); the published value of the same method, where one
    exists, a black diamond on that bar (one legend entry for all of them) — not a second bar beside it.
    ``ours``: rows with ``method_col``, aspect, coefficient, value, ci_low, ci_high; ``published``: method, aspect,
    coefficient, value (method names as in ``method_col``)."""
    mine = ours[ours["coefficient"] == coefficient]
    pub = published[published["coefficient"] == coefficient]
    methods = list(dict.fromkeys(mine[method_col]))
    aspects = ordered(mine["aspect"])
    colors = dict(zip(methods, sns.color_palette("muted", len(methods))))
    width = 0.85 / max(len(methods), 1)
    x = np.arange(len(aspects))
    fig, ax = plt.subplots(figsize=(max(8, 1.6 * len(aspects)), 4.2))
    for i, m in enumerate(methods):
        vals, err = _with_ci(mine[mine[method_col] == m].set_index("aspect"), aspects)
        ax.bar(x + i * width, np.nan_to_num(vals), width, yerr=err, capsize=2, color=colors[m], edgecolor="black",
               linewidth=0.6, label=m, error_kw={"elinewidth": 0.8})
        p = pub[pub["method"] == m].set_index("aspect")["value"]
        at = [(x[j] + i * width, p[a]) for j, a in enumerate(aspects) if a in p.index and np.isfinite(p[a])]
        if at:
            px, py = zip(*at)
            ax.scatter(px, py, marker="D", s=22, color="black", zorder=4,
                       label="published value" if "published value" not in ax.get_legend_handles_labels()[1] else None)
    _bar_axes(ax, x + width * (len(methods) - 1) / 2, aspects, coefficient, title, mine, pub)
    handles, labels = ax.get_legend_handles_labels()
    order = sorted(range(len(labels)), key=lambda k: labels[k] == "published value")  # the marker's entry last
    ax.legend([handles[k] for k in order], [labels[k] for k in order], fontsize=7, loc="upper left",
              bbox_to_anchor=(1.01, 1.0), frameon=False, title="bars: ours, 95 % CI", title_fontsize=7)
    return _save(fig, path, note)


@drawn()
def transfer_figure(rows: pd.DataFrame, coefficient: str, title: str, note: str, path: str | Path) -> Path:
    """``rows``: dataset (in display order), aspect (the FACE aspect), value, ci_low, ci_high, source — one
    line per FACE aspect across the data sets (CRSArena-Eval → Topical-Chat → PersonaChat)."""
    datasets = list(dict.fromkeys(rows["dataset"]))
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for aspect, d in rows.groupby("aspect", sort=False):
        v, err = _with_ci(d.set_index("dataset"), datasets)
        ax.errorbar(np.arange(len(datasets)), v, yerr=err, marker="o", capsize=3, label=aspect)
    ax.set_xticks(np.arange(len(datasets)), datasets)
    ax.set(ylabel=COEF_LABELS[coefficient], title=title)
    ax.axhline(0, color="black", linewidth=0.6)
    ax.legend(fontsize=7)
    return _save(fig, path, note)


@drawn()
def saving_bars(summary: pd.DataFrame, note: str, path: str | Path) -> Path:
    """The sequential comparison's saving per aspect and method: the mean share of conversations not scored on the
    cells the fixed-n verdict separates (solid) and on all cells (hatched)."""
    df = summary[summary["aspect"] != "all aspects"]
    aspects, methods = list(dict.fromkeys(df["aspect"])), list(dict.fromkeys(df["method"]))
    x, width = np.arange(len(aspects)), 0.8 / (2 * len(methods))
    fig, ax = plt.subplots(figsize=(8, 3.8))
    for i, m in enumerate(methods):
        g = df[df["method"] == m].set_index("aspect").loc[aspects]
        colour = sns.color_palette()[i]
        ax.bar(x - 0.4 + (2 * i + 0.5) * width, 1 - g["share_separated_mean"], width, color=colour,
               label=f"{m}: cells the fixed-n verdict separates")
        ax.bar(x - 0.4 + (2 * i + 1.5) * width, 1 - g["share_all_mean"], width, color=colour, alpha=0.45,
               hatch="//", label=f"{m}: all cells")
    ax.set_xticks(x, aspects, rotation=30, ha="right")
    ax.set(ylim=(0, 1), ylabel="share of conversations not scored")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    return _save(fig, path, note)


@drawn(math=False)  # "$ per conversation": a dollar sign, not mathtext
def cost_frontier(table: pd.DataFrame, coefficient: str, note: str, path: str | Path) -> Path:
    """Correlation (with its interval) against $ per conversation on a log axis, one panel per level, one line per
    aspect over k (ticks: each k's cost); Pareto points filled. The estimators without a measured correlation: their
    cost at the largest k, dotted."""
    df = table[table["coefficient"] == coefficient]
    seen = df[df["correlation"] == "measured"]
    levels = [v for v in ("turn", "dialogue", "system") if v in set(df["level"])]
    ticks = seen.groupby("k")["usd"].first()
    fig, axes = plt.subplots(1, len(levels), figsize=(4.6 * len(levels), 4), sharey=True, squeeze=False)
    for ax, level in zip(axes[0], levels):
        for i, aspect in enumerate(ordered(seen[seen["level"] == level]["aspect"])):
            g = seen[(seen["level"] == level) & (seen["aspect"] == aspect)].sort_values("usd")
            colour = sns.color_palette("tab10")[i]
            v, err = _with_ci(g.set_index("k"), g["k"])
            ax.errorbar(g["usd"], v, yerr=err, color=colour, marker="o", mfc="white", capsize=2, label=aspect)
            front = g[g["pareto"]]
            ax.plot(front["usd"], front["value"], "o", color=colour, zorder=3)
        top = df[(df["level"] == level) & (df["correlation"] != "measured") & (df["k"] == df["k"].max())]
        for name, usd in top.groupby("estimator", sort=False)["usd"].first().items():
            ax.axvline(usd, color="grey", ls=":", lw=1)
            ax.text(usd, 0.02, f" {name}, k={df['k'].max()}", rotation=90, fontsize=6, color="grey",
                    transform=ax.get_xaxis_transform())
        ax.set_xscale("log")
        ax.set_xticks(ticks.to_numpy(), [f"${u:.2f}\nk={k}" for k, u in ticks.items()])
        ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        ax.set(xlabel="$ per conversation (log scale)", title=f"{level} level")
        ax.legend(fontsize=6, loc="lower right")
    axes[0][0].set_ylabel(COEF_LABELS[coefficient])
    return _save(fig, path, note)
