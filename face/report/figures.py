"""Figures: ours vs published bars, system-level scatter, k-instructions curve, aggregation heatmap."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from face.report.tables import SPLIT_LABELS, ordered

COEF_LABELS = {"pearson": "Pearson r", "spearman": "Spearman ρ", "kendall": "Kendall τ"}


def _save(fig: plt.Figure, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight", metadata={"Software": None})
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
    ax.set_xticks(x + width * (len(series) - 1) / 2)
    ax.set_xticklabels([a.replace("_", "\n") for a in aspects])
    ax.set_ylabel(COEF_LABELS[coefficient])
    ax.set_ylim(0, 1)
    ax.set_title(f"{dataset_title} {SPLIT_LABELS.get(split, split)} — {COEF_LABELS[coefficient]}")
    ax.legend(ncol=4, fontsize=7, loc="upper left")
    fig.text(0.01, -0.02, note, fontsize=7, ha="left", va="top", wrap=True)
    return _save(fig, path)


def system_scatter(table: pd.DataFrame, title: str, note: str, path: str | Path,
                   x_label: str = "FACE mean prediction", y_label: str = "human mean label",
                   label_col: str = "system") -> Path:
    """One labelled point per system: mean prediction vs mean human label (``table``: label_col, pred, human)."""
    sns.set_theme(style="whitegrid", context="paper")
    fig, ax = plt.subplots(figsize=(5.5, 4.5))
    sns.regplot(data=table, x="pred", y="human", ax=ax, ci=None, scatter_kws={"s": 40},
                line_kws={"color": "grey", "lw": 1})
    for i, r in enumerate(table.sort_values("pred").itertuples(index=False)):  # alternate sides: fewer overlaps
        ax.annotate(getattr(r, label_col), (r.pred, r.human), textcoords="offset points", fontsize=7,
                    xytext=(5, 4) if i % 2 else (-5, -10), ha="left" if i % 2 else "right")
    ax.set_xlabel(x_label)
    ax.set_ylabel(y_label)
    ax.set_title(title)
    fig.text(0.01, -0.02, note, fontsize=7, ha="left", va="top", wrap=True)
    return _save(fig, path)


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
    fig.text(0.01, -0.02, note, fontsize=7, ha="left", va="top", wrap=True)
    return _save(fig, path)


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
    fig.text(0.01, -0.02, note, fontsize=7, ha="left", va="top", wrap=True)
    return _save(fig, path)
