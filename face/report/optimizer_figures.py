"""The optimizer's figures: the instruction optimizer's trajectory (``experiment=optimize_instructions``) and the
bandit selection of released instructions (``experiment=optimize_selection``). Saved with the captions and
settings of ``face.report.figures``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib.ticker
import numpy as np
import pandas as pd

from face.report import figures
from face.report.figures import plt
from face.report.tables import ordered

TRAJECTORY_SERIES = (("best_train_reward", "o-", "best candidate, train"),
                     ("mean_train_reward", "s--", "mean of candidates, train"),
                     ("dev_correlation_beam", "^-", "beam, dev"))


@figures.drawn()
def trajectory(traj: pd.DataFrame, reward: str, title: str, note: str, path: str | Path) -> Path:
    """Per aspect (a grid of panels, at most 4 a row: readable at paper width), the optimizer's rounds: the best
    and mean train reward of the round's candidates and the dev correlation of its beam, on integer round ticks.
    A series with no finite value (e.g. an empty dev fold) is not drawn and the legend says so; the legend lists
    only lines drawn."""
    aspects = list(dict.fromkeys(traj["aspect"])) if len(traj) else []
    cols = max(1, min(4, len(aspects)))
    rows = max(1, -(-len(aspects) // cols))
    fig, axes = plt.subplots(rows, cols, figsize=(1.7 * cols + 0.4, 1.9 * rows + 0.9), squeeze=False,
                             sharey=True)
    missing: set[str] = set()  # the labels of series with no finite value (not drawn)
    drawn: dict[str, Any] = {}  # label -> its first line
    for ax, a in zip(axes.flat, aspects):
        t = traj[traj["aspect"] == a].sort_values("round")
        for col, style, label in TRAJECTORY_SERIES:
            y = t[col].to_numpy(float)
            if np.isfinite(y).any():
                drawn.setdefault(label, ax.plot(t["round"], y, style, label=label, ms=3, lw=1)[0])
            else:
                missing.add(label)
        figures._integer_ticks(ax, t["round"])
        ax.tick_params(labelsize=7)
        ax.set_title(a.replace("_", " "), fontsize=8)
    for k, ax in enumerate(axes.flat):
        if k >= max(len(aspects), 1):
            ax.set_visible(False)
        elif k + cols >= len(aspects):  # the lowest panel of its column
            ax.set_xlabel("round", fontsize=8)
            ax.xaxis.set_tick_params(labelbottom=True)
    for ax in axes[:, 0]:
        ax.set_ylabel(f"{figures.COEF_LABELS.get(reward, reward)}", fontsize=8)
    labels = [lab for _, _, lab in TRAJECTORY_SERIES if lab in drawn]
    extra = f" (not drawn: {', '.join(sorted(missing))} — no finite value)" if missing else ""
    fig.suptitle(f"{title}{extra}", fontsize=8)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    if labels:
        fig.legend(handles=[drawn[lab] for lab in labels], labels=labels, loc="lower center", ncol=len(labels),
                   fontsize=7, frameon=False, bbox_to_anchor=(0.5, 0.0))
    return figures._save(fig, path, note)


@figures.drawn()
def heldout_vs_budget(grid: pd.DataFrame, ucb_c: float, ylabel: str, title: str, note: str,
                      path: str | Path) -> Path:
    """Per aspect (a grid of panels, at most 4 a row): held-out correlation of the chosen set against the pull
    budget, UCB and uniform as mean ± sd over folds × repetitions; random and full evaluation as their mean (a
    dotted / dash-dotted line), the oracle best set solid. ``grid``: aspect, policy, budget, ucb_c, heldout,
    heldout_sd, best, runs (one row per policy × budget × c, means over repetitions)."""
    aspects = ordered(grid["aspect"])
    cols = min(4, len(aspects))
    rows = -(-len(aspects) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.0 * cols, 2.6 * rows + 0.4), squeeze=False, sharex=True)
    reps = int(grid.loc[grid["policy"] == "ucb", "runs"].max())
    for ax, a in zip(axes.flat, aspects):
        g = grid[grid["aspect"] == a]
        u = g[(g["policy"] == "ucb") & np.isclose(g["ucb_c"], ucb_c)].sort_values("budget")
        f = g[g["policy"] == "uniform"].sort_values("budget")
        for s, style, label in ((u, "o-", f"UCB (c={ucb_c:g})"), (f, "s--", "uniform")):
            # the mean with a ±1 sd band over the repetitions (the spread a single seed would hide)
            x, mean, sd = (s[col].to_numpy(float) for col in ("budget", "heldout", "heldout_sd"))
            line, = ax.plot(x, mean, style, label=label, ms=3)
            ax.fill_between(x, mean - np.nan_to_num(sd), mean + np.nan_to_num(sd), color=line.get_color(), alpha=0.2,
                            lw=0)
        for pol, style in (("random", ":"), ("full", "-.")):
            ax.axhline(g[g["policy"] == pol]["heldout"].iloc[0], ls=style, color="grey", lw=1, label=pol)
        ax.axhline(u["best"].iloc[0], color="black", lw=1, label="best set (oracle)")
        ax.set_xscale("log", base=2)
        figures._integer_ticks(ax, u["budget"])
        ax.tick_params(labelsize=7)
        ax.set_title(a.replace("_", " "), fontsize=9)
    for ax in axes[-1]:
        ax.set_xlabel("pull budget", fontsize=8)
    for ax in axes[:, 0]:
        ax.set_ylabel(ylabel, fontsize=8)
    spare = list(axes.flat)[len(aspects):]
    for ax in spare[1:]:
        ax.set_visible(False)
    handles, labels = axes[0][0].get_legend_handles_labels()
    if spare:  # the legend in the first empty panel: off the data and clear of the caption
        spare[0].axis("off")
        spare[0].legend(handles, labels, loc="center", fontsize=8, frameon=False)
    else:
        fig.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8, frameon=False)
    fig.suptitle(f"{title}; bands: ±1 sd over {reps} runs (folds × repetitions)", fontsize=9)
    fig.tight_layout()
    return figures._save(fig, path, note)


@figures.drawn()
def regret_vs_c(grid: pd.DataFrame, pulls: int, title: str, note: str, path: str | Path) -> Path:
    """UCB regret (best set − chosen set, held out) against the exploration constant c at ``pulls`` pulls, one
    line per aspect with ±1 sd whiskers over folds × repetitions; the legend beside the axes, not over the data."""
    u = grid[(grid["policy"] == "ucb") & (grid["budget"] == pulls)]
    fig, ax = plt.subplots(figsize=(6.0, 3.4))
    names = ordered(u["aspect"])
    for i, a in enumerate(names):
        s = u[u["aspect"] == a].sort_values("ucb_c")
        dodge = 2 ** (0.04 * (i - (len(names) - 1) / 2))  # side by side on the log axis: whiskers do not overlap
        ax.errorbar(s["ucb_c"].to_numpy(float) * dodge, s["regret"], yerr=np.nan_to_num(s["regret_sd"].to_numpy(float)),
                    marker="o", ms=3, capsize=2, lw=1, elinewidth=0.7, label=a.replace("_", " "))
    cs = sorted(u["ucb_c"].dropna().unique())
    ax.set_xscale("log", base=2)
    ax.set_xticks(cs, [f"{c:g}" for c in cs])
    ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    ax.set(xlabel="UCB exploration constant c", ylabel=f"regret vs best set ({pulls} pulls; ±1 sd)")
    ax.axhline(0, color="black", lw=0.6)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False)
    ax.set_title(title, fontsize=9)
    return figures._save(fig, path, note)
