"""Figures: ours vs published bars, system-level scatter, k-instructions curve, aggregation heatmap; for the baseline
and transfer experiments, bars per quality and method with 95 % CIs (ours, solid) beside the published value of the
same method where one exists (hatched, no CI), and the transfer figure (one aspect's correlation on CRSArena-Eval,
Topical-Chat, PersonaChat)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import matplotlib

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
    fig.text(0.01, -0.02, textwrap.fill(note, max(chars, 40), break_on_hyphens=False), fontsize=fontsize,
             ha="left", va="top")


def _flat_ticks(ax: plt.Axes, names) -> None:
    """Horizontal x tick labels, one word a line: rotated ones reach down into the caption."""
    ax.set_xticklabels([str(c).replace("_", " ").replace(" ", "\n") for c in names], rotation=0)


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
    lowest = np.nanmin([0.0, *mine["value"].tolist(), *mine["ci_low"].tolist(), *pub["value"].dropna().tolist()])
    ax.set_ylim(min(0.0, lowest - 0.05), 1)  # negative correlations stay visible
    ax.axhline(0, color="black", lw=0.6)
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
    sns.heatmap(pivot, annot=True, fmt=".3f", cmap="viridis", ax=ax, cbar_kws={"shrink": 0.7})
    ax.set_title(title)
    ax.set_xlabel("")
    ax.set_ylabel("instruction agg / particle agg")
    _flat_ticks(ax, pivot.columns)
    return _save(fig, path, note)


def act_heatmap(by_act: pd.DataFrame, aspect: str, note: str, path: str | Path) -> Path:
    """Mean particle score per system (rows) × dialogue act (columns) for one aspect."""
    sns.set_theme(style="white", context="paper")
    pivot = by_act[by_act["aspect"] == aspect].pivot(index="system", columns="dialogue_act", values="mean_score")
    fig, ax = plt.subplots(figsize=(1.3 * pivot.shape[1] + 2.5, 0.4 * pivot.shape[0] + 1.5))
    sns.heatmap(pivot, annot=True, fmt=".2f", cmap="RdYlGn", ax=ax, cbar_kws={"shrink": 0.7})
    ax.set_title(f"{aspect}: mean particle score by system and dialogue act")
    ax.set_xlabel("")
    ax.set_ylabel("")
    _flat_ticks(ax, pivot.columns)
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
    ax.axhline(0, color="black", linewidth=0.6)
    ax.set_xticks(x + width * (len(series) - 1) / 2)
    ax.set_xticklabels([a.replace("_", "\n") for a in aspects])
    ax.set_ylabel(COEF_LABELS[coefficient])
    ax.set_ylim(min(-0.2, float(np.nanmin(np.append(mine["ci_low"].to_numpy(float), 0))) - 0.05), 1)
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
