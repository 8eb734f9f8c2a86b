"""Figures of a comparison: means with intervals on each aspect's fixed scale, the differences with their intervals,
and the P(X beats Y) matrix of each aspect. Each is returned as PNG bytes without a version stamp (the same bytes on
every run), to be embedded in the report or written beside the tables."""

from __future__ import annotations

import io
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from face.files import atomic_path
from face.report.figures import _caption
from face.report.look import drawn

VERDICT_COLOURS = {"better": "#1b7837", "worse": "#b2182b", "no detectable difference": "#777777"}


def png(fig: plt.Figure, note: str = "") -> bytes:
    """The figure as PNG bytes, ``note`` under it."""
    if note:
        _caption(fig, note)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)
    return buf.getvalue()


def save(data: bytes, path: Path) -> Path:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
    return path


@drawn(None, math=False)
def means(df: pd.DataFrame, scales: dict[str, tuple[int, int] | None], note: str) -> bytes:
    """One panel per aspect: each system's mean and interval, the x axis the aspect's whole scale."""
    aspects = list(scales)
    systems = list(dict.fromkeys(df["system"]))
    fig, axes = plt.subplots(len(aspects), 1, figsize=(7, 0.35 * len(systems) * len(aspects) + 0.9 * len(aspects)),
                             squeeze=False)
    for ax, a in zip(axes[:, 0], aspects):
        d = df[df["aspect"] == a].set_index("system").reindex(systems)
        y = np.arange(len(systems))[::-1]
        ax.errorbar(d["mean"], y, xerr=[d["mean"] - d["ci_low"], d["ci_high"] - d["mean"]], fmt="o", color="#2166ac",
                    capsize=3)
        ax.set_yticks(y, systems, fontsize=8)
        scale = scales[a]
        if scale is not None:
            ax.set_xlim(scale[0], scale[1])
        ax.set_title(f"{a} (scale {scale[0]}–{scale[1]})" if scale else f"{a} (scale not recorded)", fontsize=9,
                     loc="left")
        ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return png(fig, note)


@drawn(None, math=False)
def differences(df: pd.DataFrame, note: str) -> bytes:
    """Every pair × aspect: candidate − baseline with its interval, coloured by the verdict, a zero line."""
    fig, ax = plt.subplots(figsize=(7, 0.28 * len(df) + 1.2))
    y = np.arange(len(df))[::-1]
    for verdict, rows in df.assign(y=y).groupby("verdict", sort=False, dropna=False):  # an artist a colour
        ax.errorbar(rows["diff"], rows["y"], xerr=[rows["diff"] - rows["ci_low"], rows["ci_high"] - rows["diff"]],
                    fmt="o", capsize=3, color=VERDICT_COLOURS.get(str(verdict), "black"))
    ax.axvline(0, color="black", lw=0.8)
    ax.set_yticks(y, [f"{r.aspect}: {r.candidate} − {r.baseline}" for r in df.itertuples()], fontsize=7)
    ax.set_xlabel("difference of means (candidate − baseline), on the aspect's scale")
    ax.set_title("green: better, red: worse, grey: no detectable difference (Holm)", fontsize=8, loc="left")
    return png(fig, note)


@drawn(None, math=False)
def beats(df: pd.DataFrame, aspect: str, note: str) -> bytes:
    """P(row system's mean > column system's) for one aspect, rows and columns ordered by rank."""
    import seaborn as sns

    d = df[df["aspect"] == aspect]
    order = list(d.groupby("system")["p_beats"].mean().sort_values(ascending=False).index)
    m = d.pivot(index="system", columns="opponent", values="p_beats").reindex(index=order, columns=order)
    fig, ax = plt.subplots(figsize=(0.6 * len(order) + 2.5, 0.5 * len(order) + 1.5))
    sns.heatmap(m, annot=True, fmt=".2f", cmap="RdBu", vmin=0, vmax=1, ax=ax, cbar_kws={"label": "P(row beats column)"},
                annot_kws={"fontsize": 7})
    ax.set_title(f"{aspect}: probability that the row system's mean is higher", fontsize=9)
    ax.set(xlabel="", ylabel="")
    ax.set_xticklabels(ax.get_xticklabels(), rotation=30, ha="right", rotation_mode="anchor", fontsize=8)
    return png(fig, note)


@drawn(None, math=False)
def power_curve(df: pd.DataFrame, note: str) -> bytes:
    """Share of pairs whose human ordering FACE recovers against conversations per system, one line per aspect:
    (left) all pairs, (right) the pairs the human labels themselves separate."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), sharey=True)
    sizes = list(dict.fromkeys(df["n"]))
    x = np.arange(len(sizes))
    for ax, col, title in zip(axes, ["recovered_all_pairs", "recovered_human_separated"],
                              ["all 36 pairs", "pairs the human labels separate"]):
        for a, g in df.groupby("aspect", sort=False):
            ax.plot(x, g.set_index("n").reindex(sizes)[col], marker="o", label=a)
        ax.set_xticks(x, [str(n) for n in sizes])
        ax.set(xlabel="conversations per system", ylim=(0, 1))
        ax.set_title(title, fontsize=9)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("share of pairs recovered (significant, human direction)")
    axes[1].legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    return png(fig, note)


@drawn(None, math=False)
def sequence(steps: pd.DataFrame, aspect: str, note: str) -> bytes:
    """One aspect of a sequential comparison: its confidence sequence's bounds against the conversations scored,
    a zero line, and where the scoring stopped with the decision there."""
    fig, ax = plt.subplots(figsize=(6, 3.4))
    x = steps["scored"].to_numpy()
    ax.fill_between(x, steps["ci_low"], steps["ci_high"], step="post", alpha=0.25, color="#2166ac")
    ax.step(x, steps["ci_low"], where="post", color="#2166ac", label="lower bound")
    ax.step(x, steps["ci_high"], where="post", color="#b2182b", label="upper bound")
    ax.axhline(0, color="black", lw=0.8)
    last = steps.iloc[-1]
    ax.axvline(last["scored"], color="grey", ls="--", lw=1)
    ax.annotate(f"stopped: {last['decision']}", (last["scored"], last["ci_high"]), fontsize=8, ha="right",
                va="bottom")
    ax.set(xlabel="conversations scored (both systems)", ylabel="candidate − baseline")
    ax.set_title(f"{aspect}: anytime-valid confidence sequence", fontsize=9, loc="left")
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(alpha=0.3)
    return png(fig, note)
