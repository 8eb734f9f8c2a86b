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
from face.report.tables import SPLIT_LABELS, ordered

COEF_LABELS = {"pearson": "Pearson r", "spearman": "Spearman ρ", "kendall": "Kendall τ"}


def _caption(fig: plt.Figure, note: str, fontsize: float = 7) -> None:
    """The note under the axes, wrapped to the figure's width. Measured once for the whole note (its mean
    character width), not word by word as matplotlib's ``wrap=True`` does (≈ 0.2 s a figure for a long note)."""
    from matplotlib.font_manager import FontProperties
    from matplotlib.textpath import TextToPath

    width_pt, _, _ = TextToPath().get_text_width_height_descent(note, FontProperties(size=fontsize), ismath=False)
    chars = int(0.9 * fig.get_figwidth() * 72 / max(width_pt / max(len(note), 1), 1e-6))
    fig.text(0.01, _below_axes(fig), textwrap.fill(note, max(chars, 40), break_on_hyphens=False), fontsize=fontsize,
             ha="left", va="top")


def _below_axes(fig: plt.Figure) -> float:
    """Where a caption starts (figure coordinates): under the lowest tick label or axis label of any axes, so
    rotated labels never run into it."""
    renderer = fig.canvas.get_renderer()
    lowest = min((ax.get_tightbbox(renderer).y0 for ax in fig.axes if ax.get_visible()), default=0.0)
    return min(-0.02, lowest / fig.bbox.height - 0.02)


def _ylim_from_zero(ax: plt.Axes, *values, top: float = 1.0, pad: float = 0.05) -> None:
    """Y from below the lowest bar, whisker or published value (never cut at 0: a negative correlation is drawn
    below the zero line) up to ``top`` (a correlation's 1), with a zero line."""
    flat = np.concatenate([np.asarray(v, float).ravel() for v in values] or [np.zeros(1)])
    flat = flat[np.isfinite(flat)]
    low = min(0.0, float(flat.min()) if len(flat) else 0.0)
    high = max(top, float(flat.max()) if len(flat) else top)
    ax.set_ylim(low - pad if low < 0 else 0.0, high)
    ax.axhline(0, color="black", lw=0.6)


def _integer_ticks(ax: plt.Axes, values, axis: str = "x") -> None:
    """Ticks exactly at the integer values a parameter took (k, budget, position), labelled without decimals."""
    ticks = sorted({int(v) for v in values if np.isfinite(v)})
    if axis == "x":
        ax.set_xticks(ticks)
        ax.set_xticklabels([str(t) for t in ticks])
        ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    else:
        ax.set_yticks(ticks)
        ax.set_yticklabels([str(t) for t in ticks])


def _save(fig: plt.Figure, path: str | Path, note: str | None = None) -> Path:
    """The figure (with ``note`` as its caption) as a PNG with no version stamp (the same bytes on every run)."""
    if note is not None:
        _caption(fig, note)
    path = Path(path)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=110, bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)
    return path


def bars_vs_published(ours: pd.DataFrame, published: pd.DataFrame, split: str, coefficient: str,
                      ours_label: str, note: str, path: str | Path, dataset_title: str = "CRSArena-Eval") -> Path:
    """Grouped bars per aspect: every published method, then ours with its bootstrap CI."""
    sns.set_theme(style="whitegrid", context="paper")
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
    for i, m in enumerate(series):
        if m == ours_label:
            vals = [mine["value"].get(a, np.nan) for a in aspects]
            lo = [mine["ci_low"].get(a, np.nan) for a in aspects]
            hi = [mine["ci_high"].get(a, np.nan) for a in aspects]
            err = np.array([np.subtract(vals, lo), np.subtract(hi, vals)])
            ax.bar(x + i * width, vals, width, label=m, color=colors[i], edgecolor="black", linewidth=0.8,
                   yerr=np.clip(np.nan_to_num(err), 0, None), capsize=2)
        else:
            p = pub[pub["method"] == m].set_index("aspect")["value"]
            vals = [p.get(a, np.nan) for a in aspects]
            ax.bar(x + i * width, [0 if v is None or np.isnan(v) else v for v in vals], width, label=m,
                   color=colors[i], alpha=0.75)
            for j, v in enumerate(vals):  # a method the paper reports without this value
                if v is None or np.isnan(v):
                    ax.text(x[j] + i * width, 0.01, "n/a", rotation=90, fontsize=6, ha="center", va="bottom",
                            color=colors[i])
    ax.set_xticks(x + width * (len(series) - 1) / 2)
    ax.set_xticklabels([a.replace("_", "\n") for a in aspects])
    ax.set_ylabel(COEF_LABELS[coefficient])
    _ylim_from_zero(ax, mine["value"], mine["ci_low"], mine["ci_high"], pub["value"].dropna())
    ax.set_title(f"{dataset_title} {SPLIT_LABELS.get(split, split)} — {COEF_LABELS[coefficient]}")
    ax.legend(ncol=4, fontsize=7, loc="upper left")
    return _save(fig, path, note)


def system_scatter(table: pd.DataFrame, title: str, note: str, path: str | Path,
                   x_label: str = "FACE mean prediction", y_label: str = "human mean label",
                   label_col: str = "system", stats: str = "") -> Path:
    """One labelled point per system: mean prediction vs mean human label (``table``: label_col, pred, human,
    optionally split — one colour per split); ``stats`` (e.g. "Spearman ρ = 0.88 [0.77, 0.98], n = 9 systems")
    is printed in the plot. Labels are placed by adjustText so they do not overlap."""
    from adjustText import adjust_text

    sns.set_theme(style="whitegrid", context="paper")
    fig, ax = plt.subplots(figsize=(5.8, 4.6))
    sns.regplot(data=table, x="pred", y="human", ax=ax, ci=None, scatter=False, line_kws={"color": "grey", "lw": 1})
    hue = "split" if "split" in table.columns and table["split"].nunique() > 1 else None
    if hue:
        table = table.assign(split=table["split"].map(lambda s: SPLIT_LABELS.get(s, s)))
    sns.scatterplot(data=table, x="pred", y="human", hue=hue, ax=ax, s=45, palette="deep", zorder=3)
    texts = [ax.text(r.pred, r.human, str(getattr(r, label_col)), fontsize=7)
             for r in table.sort_values(label_col).itertuples(index=False)]
    # a fixed number of iterations, not adjustText's default 1-second time limit: the same figure every run
    adjust_text(texts, ax=ax, iter_lim=300, arrowprops={"arrowstyle": "-", "color": "grey", "lw": 0.5})
    if stats:
        ax.text(0.02, 0.98, stats, transform=ax.transAxes, va="top", ha="left", fontsize=8,
                bbox={"boxstyle": "round", "facecolor": "white", "alpha": 0.8, "edgecolor": "#ccc"})
    if hue:
        ax.legend(title="", fontsize=7, loc="lower right")
    ax.set_xlabel(x_label)
    ax.set_ylabel(y_label)
    ax.set_title(title)
    return _save(fig, path, note)


def k_curve(summary: pd.DataFrame, coefficient: str, note: str, path: str | Path) -> Path:
    """Correlation (mean ± sd over seeds) against the number of instructions k, one line per aspect."""
    sns.set_theme(style="whitegrid", context="paper")
    df = summary[summary["coefficient"] == coefficient]
    splits = list(dict.fromkeys(df["split"]))
    fig, axes = plt.subplots(1, len(splits), figsize=(5 * len(splits), 4), sharey=True, squeeze=False)
    for ax, split in zip(axes[0], splits):
        for aspect in ordered(df["aspect"]):
            g = df[(df["split"] == split) & (df["aspect"] == aspect)].sort_values("k")
            ax.errorbar(g["k"], g["mean"], yerr=g["sd"], marker="o", capsize=3, label=aspect)
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted(df["k"].unique()))
        ax.set_xticklabels([str(k) for k in sorted(df["k"].unique())])
        ax.set_xlabel("number of instructions k")
        ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        ax.set_title(SPLIT_LABELS.get(split, split))
    axes[0][0].set_ylabel(COEF_LABELS[coefficient])
    axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    return _save(fig, path, note)


def aggregation_heatmap(df: pd.DataFrame, aspect_col: str, note: str, path: str | Path, title: str) -> Path:
    """Heatmap: rows = aggregator setting, columns = aspect, cells = correlation."""
    sns.set_theme(style="white", context="paper")
    pivot = df.pivot(index="setting", columns=aspect_col, values="value")
    pivot = pivot[ordered(pivot.columns)]
    fig, ax = plt.subplots(figsize=(1.2 * pivot.shape[1] + 2, 0.45 * pivot.shape[0] + 1.5))
    annot = pivot.map(lambda v: f"{v:.3f}")
    has_ci = {"ci_low", "ci_high"} <= set(df.columns) and df[["ci_low", "ci_high"]].notna().all().all()
    if has_ci:  # each cell: the value and its 95 % CI beneath
        lo = df.pivot(index="setting", columns=aspect_col, values="ci_low")[pivot.columns]
        hi = df.pivot(index="setting", columns=aspect_col, values="ci_high")[pivot.columns]
        annot = annot + "\n[" + lo.map(lambda v: f"{v:.2f}") + ", " + hi.map(lambda v: f"{v:.2f}") + "]"
        title = f"{title} (95 % CIs)"
    coefficient = df["coefficient"].iloc[0] if "coefficient" in df.columns and len(df) else ""
    fig, ax = plt.subplots(figsize=(1.3 * pivot.shape[1] + 2.5, (0.7 if has_ci else 0.45) * pivot.shape[0] + 1.8))
    sns.heatmap(pivot, annot=annot, fmt="", cmap="viridis", ax=ax, annot_kws={"fontsize": 7},
                cbar_kws={"shrink": 0.7, "label": COEF_LABELS.get(coefficient, "correlation")})
    ax.set_title(title)
    ax.set_xlabel("")
    ax.set_ylabel("instruction agg / particle agg")
    _rotated_ticks(ax, pivot.columns)
    return _save(fig, path, note)


def _rotated_ticks(ax: plt.Axes, names) -> None:
    """Long column names rotated 30° and anchored at their cell's right edge: they never run together."""
    ax.set_xticklabels([str(c).replace("_", " ") for c in names], rotation=30, ha="right", rotation_mode="anchor")


def score_heatmap(ax: plt.Axes, pivot: pd.DataFrame, scale: tuple[float, float], label: str) -> None:
    """Mean scores coloured on the aspect's FIXED human scale (``scale`` = its lowest and highest label) with a
    colour-blind-safe sequential map (cividis): 1.05 and 1.11 on a 0–2 scale look alike, as they should."""
    sns.heatmap(pivot, annot=True, fmt=".2f", cmap="cividis", vmin=scale[0], vmax=scale[1], ax=ax,
                cbar_kws={"shrink": 0.7, "label": label})


def act_heatmap(by_act: pd.DataFrame, aspect: str, scale: tuple[float, float], note: str, path: str | Path) -> Path:
    """Mean particle score per system (rows) × dialogue act (columns) for one aspect, on the aspect's scale."""
    sns.set_theme(style="white", context="paper")
    pivot = by_act[by_act["aspect"] == aspect].pivot(index="system", columns="dialogue_act", values="mean_score")
    fig, ax = plt.subplots(figsize=(1.3 * pivot.shape[1] + 2.5, 0.4 * pivot.shape[0] + 1.5))
    score_heatmap(ax, pivot, scale, f"mean particle score ({scale[0]:g}–{scale[1]:g} scale)")
    ax.set_title(f"{aspect}: mean particle score by system and dialogue act")
    ax.set_xlabel("")
    ax.set_ylabel("")
    _rotated_ticks(ax, pivot.columns)
    return _save(fig, path, note)


def act_share_bars(act_share: pd.DataFrame, note: str, path: str | Path) -> Path:
    """Stacked bars: the share of each dialogue act among a system's particles."""
    sns.set_theme(style="whitegrid", context="paper")
    pivot = act_share.pivot(index="system", columns="dialogue_act", values="share").fillna(0.0)
    fig, ax = plt.subplots(figsize=(7, 0.4 * len(pivot) + 1.5))
    pivot.plot(kind="barh", stacked=True, ax=ax, colormap="tab10", width=0.8)
    ax.set_xlabel("share of the system's particles")
    ax.set_ylabel("")
    ax.set_xlim(0, 1)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.set_title("Dialogue acts per system")
    return _save(fig, path, note)


def position_curve(by_position: pd.DataFrame, note: str, path: str | Path) -> Path:
    """Share of an aspect's lowest-scoring particles (bottom 10 %) by assistant-turn position."""
    sns.set_theme(style="whitegrid", context="paper")
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for aspect in ordered(by_position["aspect"]):
        g = by_position[by_position["aspect"] == aspect].sort_values("position")
        ax.plot(g["position"], g["low_share"], marker="o", label=aspect)
    ax.axhline(0.1, color="grey", lw=0.8, ls="--")
    _integer_ticks(ax, by_position["position"])
    ax.set_xlabel("assistant turn (8 = 8th or later)")
    ax.set_ylabel("share of particles in the lowest 10 %")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.set_title("Where low-scoring particles fall")
    return _save(fig, path, note)


# ---------------------------------------------------------------- baselines and transfer

def bars_by_quality(ours: pd.DataFrame, published: pd.DataFrame, coefficient: str, method_col: str,
                    title: str, note: str, path: str | Path) -> Path:
    """``ours``: rows with ``method_col``, aspect, coefficient, value, ci_low, ci_high; ``published``: method,
    aspect, coefficient, value (method names as in ``method_col``)."""
    sns.set_theme(style="whitegrid", context="paper")
    mine = ours[ours["coefficient"] == coefficient]
    pub = published[published["coefficient"] == coefficient]
    methods = list(dict.fromkeys(mine[method_col]))
    aspects = ordered(mine["aspect"])
    series = []
    for m in methods:
        series.append((m, "ours"))
        if ((pub["method"] == m) & pub["aspect"].isin(aspects)).any():
            series.append((m, "published"))
    colors = dict(zip(methods, sns.color_palette("muted", len(methods))))
    width = 0.85 / max(len(series), 1)
    x = np.arange(len(aspects))
    fig, ax = plt.subplots(figsize=(max(8, 1.6 * len(aspects)), 4.2))
    for i, (m, kind) in enumerate(series):
        if kind == "ours":
            d = mine[mine[method_col] == m].set_index("aspect")
            vals = np.array([d["value"].get(a, np.nan) for a in aspects], float)
            lo = np.array([d["ci_low"].get(a, np.nan) for a in aspects], float)
            hi = np.array([d["ci_high"].get(a, np.nan) for a in aspects], float)
            err = np.clip(np.nan_to_num(np.array([vals - lo, hi - vals])), 0, None)
            ax.bar(x + i * width, np.nan_to_num(vals), width, yerr=err, capsize=2, color=colors[m],
                   edgecolor="black", linewidth=0.6, label=f"{m} (ours)")
        else:
            d = pub[pub["method"] == m].set_index("aspect")["value"]
            vals = np.array([d.get(a, np.nan) for a in aspects], float)
            ax.bar(x + i * width, np.nan_to_num(vals), width, color=colors[m], alpha=0.45, hatch="//",
                   edgecolor="black", linewidth=0.4, label=f"{m} (published)")
    ax.set_xticks(x + width * (len(series) - 1) / 2)
    ax.set_xticklabels([a.replace("_", "\n") for a in aspects])
    ax.set_ylabel(COEF_LABELS[coefficient])
    _ylim_from_zero(ax, mine["value"], mine["ci_low"], mine["ci_high"], pub["value"].dropna())
    ax.set_title(title)
    ax.legend(ncol=4, fontsize=6.5, loc="upper left")
    fig.text(0.01, -0.02, textwrap.fill(note, 170), fontsize=6.5, ha="left", va="top")
    return _save(fig, path)


def transfer_figure(rows: pd.DataFrame, coefficient: str, title: str, note: str, path: str | Path) -> Path:
    """``rows``: dataset (in display order), aspect (the FACE aspect), value, ci_low, ci_high, source — one
    line per FACE aspect across the data sets (CRSArena-Eval → Topical-Chat → PersonaChat)."""
    sns.set_theme(style="whitegrid", context="paper")
    datasets = list(dict.fromkeys(rows["dataset"]))
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for aspect, d in rows.groupby("aspect", sort=False):
        d = d.set_index("dataset").reindex(datasets)
        x = np.arange(len(datasets))
        v = d["value"].to_numpy(float)
        err = np.clip(np.nan_to_num(np.array([v - d["ci_low"].to_numpy(float), d["ci_high"].to_numpy(float) - v])),
                      0, None)
        ax.errorbar(x, v, yerr=err, marker="o", capsize=3, label=aspect)
    ax.set_xticks(np.arange(len(datasets)))
    ax.set_xticklabels(datasets)
    ax.set_ylabel(COEF_LABELS[coefficient])
    ax.axhline(0, color="black", linewidth=0.6)
    ax.set_title(title)
    ax.legend(fontsize=7)
    fig.text(0.01, -0.02, textwrap.fill(note, 170), fontsize=6.5, ha="left", va="top")
    return _save(fig, path)


# ---------------------------------------------------------------- instruction selection (bandit)

def _band(ax: plt.Axes, x, mean, sd, style: str, label: str) -> None:
    """A mean line with a ±1 sd band over the repetitions (the spread a single seed would hide)."""
    x, mean, sd = (np.asarray(v, float) for v in (x, mean, sd))
    line, = ax.plot(x, mean, style, label=label, ms=3)
    ax.fill_between(x, mean - np.nan_to_num(sd), mean + np.nan_to_num(sd), color=line.get_color(), alpha=0.2, lw=0)


def heldout_vs_budget(grid: pd.DataFrame, ucb_c: float, ylabel: str, title: str, note: str,
                      path: str | Path) -> Path:
    """Per aspect (a grid of panels, at most 4 a row): held-out correlation of the chosen set against the pull
    budget, UCB and uniform as mean ± sd over folds × repetitions; random and full evaluation as their mean (a
    dotted / dash-dotted line), the oracle best set solid. ``grid``: aspect, policy, budget, ucb_c, heldout,
    heldout_sd, best, runs (one row per policy × budget × c, means over repetitions)."""
    sns.set_theme(style="whitegrid", context="paper")
    aspects = ordered(grid["aspect"])
    cols = min(4, len(aspects))
    rows = -(-len(aspects) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.0 * cols, 2.6 * rows + 0.4), squeeze=False, sharex=True)
    reps = int(grid.loc[grid["policy"] == "ucb", "runs"].max()) if "runs" in grid.columns else 0
    for ax, a in zip(axes.flat, aspects):
        g = grid[grid["aspect"] == a]
        u = g[(g["policy"] == "ucb") & np.isclose(g["ucb_c"], ucb_c)].sort_values("budget")
        f = g[g["policy"] == "uniform"].sort_values("budget")
        _band(ax, u["budget"], u["heldout"], u["heldout_sd"], "o-", f"UCB (c={ucb_c:g})")
        _band(ax, f["budget"], f["heldout"], f["heldout_sd"], "s--", "uniform")
        for pol, style in (("random", ":"), ("full", "-.")):
            ax.axhline(g[g["policy"] == pol]["heldout"].iloc[0], ls=style, color="grey", lw=1, label=pol)
        ax.axhline(u["best"].iloc[0], color="black", lw=1, label="best set (oracle)")
        ax.set_xscale("log", base=2)
        _integer_ticks(ax, u["budget"])
        ax.tick_params(labelsize=7)
        ax.set_title(a.replace("_", " "), fontsize=9)
    for ax in axes[-1]:
        ax.set_xlabel("pull budget", fontsize=8)
    for ax in axes[:, 0]:
        ax.set_ylabel(ylabel, fontsize=8)
    spare = list(axes.flat)[len(aspects):]
    for ax in spare:
        ax.set_visible(False)
    handles, labels = axes[0][0].get_legend_handles_labels()
    if spare:  # the legend in the first empty panel: off the data and clear of the caption
        spare[0].set_visible(True)
        spare[0].axis("off")
        spare[0].legend(handles, labels, loc="center", fontsize=8, frameon=False)
    else:
        fig.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8, frameon=False)
    spread = f"; bands: ±1 sd over {reps} runs (folds × repetitions)" if reps else ""
    fig.suptitle(f"{title}{spread}", fontsize=9)
    fig.tight_layout()
    return _save(fig, path, note)


def regret_vs_c(grid: pd.DataFrame, pulls: int, title: str, note: str, path: str | Path) -> Path:
    """UCB regret (best set − chosen set, held out) against the exploration constant c at ``pulls`` pulls, one
    line per aspect with ±1 sd whiskers over folds × repetitions; the legend beside the axes, not over the data."""
    sns.set_theme(style="whitegrid", context="paper")
    u = grid[(grid["policy"] == "ucb") & (grid["budget"] == pulls)]
    fig, ax = plt.subplots(figsize=(6.0, 3.4))
    names = ordered(u["aspect"])
    for i, a in enumerate(names):
        s = u[u["aspect"] == a].sort_values("ucb_c")
        sd = s["regret_sd"].to_numpy(float) if "regret_sd" in s.columns else np.zeros(len(s))
        dodge = 2 ** (0.04 * (i - (len(names) - 1) / 2))  # side by side on the log axis: whiskers do not overlap
        ax.errorbar(s["ucb_c"].to_numpy(float) * dodge, s["regret"], yerr=np.nan_to_num(sd), marker="o", ms=3,
                    capsize=2, lw=1, elinewidth=0.7, label=a.replace("_", " "))
    cs = sorted(u["ucb_c"].dropna().unique())
    ax.set_xscale("log", base=2)
    ax.set_xticks(cs)
    ax.set_xticklabels([f"{c:g}" for c in cs])
    ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    ax.set_xlabel("UCB exploration constant c")
    ax.set_ylabel(f"regret vs best set ({pulls} pulls; ±1 sd)")
    ax.axhline(0, color="black", lw=0.6)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False)
    ax.set_title(title, fontsize=9)
    return _save(fig, path, note)
