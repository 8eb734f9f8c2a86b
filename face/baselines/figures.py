"""Charts of the baseline and transfer experiments: bars per quality / aspect and method with 95 % CIs
(ours, solid) beside the published value of the same method where one exists (hatched, no CI), and the
transfer figure (one aspect's correlation on CRSArena-Eval, Topical-Chat, PersonaChat)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pandas as pd

from face.report.figures import COEF_LABELS, _save
from face.report.tables import ordered


def bars_by_quality(ours: pd.DataFrame, published: pd.DataFrame, coefficient: str, method_col: str,
                    title: str, note: str, path: str | Path) -> Path:
    """``ours``: rows with ``method_col``, aspect, coefficient, value, ci_low, ci_high; ``published``: method,
    aspect, coefficient, value (method names as in ``method_col``)."""
    import matplotlib.pyplot as plt
    import seaborn as sns

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
    import matplotlib.pyplot as plt
    import seaborn as sns

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
