"""Write a table three ways — Markdown for reading, CSV for code, LaTeX for papers — with a caption."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from face.datasets import crsarena, usr
from face.files import atomic_path, atomic_write_text
from face.secrets import redact

# display order of the aspects we know; any other aspect follows in order of appearance
ASPECT_ORDER = [*crsarena.ASPECTS, *usr.ASPECTS]
SPLIT_LABELS = {"redial": "ReDial", "opendialkg": "OpenDialKG", "all": "pooled"}


# p-values (``p``, ``p_value``, ``p_bootstrap``, ``p_williams``, …): printed as ``< 0.001`` below the shown precision
P_VALUE_COLUMNS = ("p", "pvalue")
COUNT_COLUMNS = ("n", "runs", "pulls", "conversations", "turns", "particles", "recommendations", "repeats")


def _fmt(v: object, digits: int) -> str:
    if isinstance(v, (float, np.floating)):
        return "–" if np.isnan(v) else f"{v:.{digits}f}"
    return str(v)


def _fmt_p(v: object, digits: int) -> str:
    """A p-value: ``< 0.001`` (at 3 digits) rather than a ``0.000`` that reads as impossible."""
    if isinstance(v, (int, float, np.integer, np.floating)) and not np.isnan(v) and v < 10 ** -digits:
        return f"< {10 ** -digits:.{digits}f}"
    return _fmt(v, digits)


def _is_count(name: str, col: pd.Series) -> bool:
    """A float column that holds whole numbers (a mean of equal counts, a budget): printed as integers. Columns in
    [-1, 1] (correlations that happen to be 0 or ±1) keep their decimals unless the name says it is a count."""
    if not pd.api.types.is_float_dtype(col):
        return False
    v = col.dropna().to_numpy(float)
    if not len(v) or not np.all(np.isfinite(v)) or not np.all(v == np.round(v)):
        return False
    return name in COUNT_COLUMNS or name.startswith(("n_", "num_")) or bool(np.abs(v).max() > 1)


def _formatter(name: str, col: pd.Series) -> Callable[[object, int], str]:
    """A column's display function: p-values, counts, split names (``SPLIT_LABELS``), the rest by ``_fmt``."""
    if name in P_VALUE_COLUMNS or name.startswith("p_") or name.endswith("_p_value"):
        return _fmt_p
    if name == "split":
        return lambda v, d: SPLIT_LABELS.get(v, str(v)) if isinstance(v, str) else _fmt(v, d)
    if _is_count(name, col):
        return lambda v, d: str(int(v)) if isinstance(v, (float, np.floating)) and not np.isnan(v) else _fmt(v, d)
    return _fmt


def display_rows(df: pd.DataFrame, digits: int = 3) -> list[list[str]]:
    """The table's cells as printed in Markdown, LaTeX and on the console (the CSV keeps the raw values)."""
    fmts = [_formatter(str(name), df[name]) for name in df.columns]
    return [[f(v, digits) for f, v in zip(fmts, row)] for row in df.itertuples(index=False)]


# one escape per format a name (a system's, an aspect's, a method's) reaches: each cell and caption goes through it
_LATEX = {**{c: "\\" + c for c in "&%$#_{}"}, "\\": "\\textbackslash{}", "~": "\\textasciitilde{}",
          "^": "\\textasciicircum{}", "\n": " ", "\r": " "}
_LATEX_SPECIAL = re.compile(r"[&%$#_{}\\~^\n\r]")
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")  # a spreadsheet reads such a CSV cell as a formula


def latex_text(s: str) -> str:
    """``s`` as LaTeX text: its special characters printed, not obeyed."""
    return _LATEX_SPECIAL.sub(lambda m: _LATEX[m.group()], s)


def markdown_cell(s: str) -> str:
    """``s`` inside one cell of a Markdown table: its ``|`` escaped, its line breaks spaces."""
    return " ".join(s.replace("|", "\\|").splitlines())


def csv_cells(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with every text cell that a spreadsheet would run as a formula quoted by a leading ``'``."""
    return df.apply(lambda col: col if pd.api.types.is_numeric_dtype(col) else col.map(
        lambda v: f"'{v}" if isinstance(v, str) and v.startswith(FORMULA_STARTS) else v))


def to_markdown(df: pd.DataFrame, digits: int = 3) -> str:
    cols = [markdown_cell(str(c)) for c in df.columns]
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    lines += ["| " + " | ".join(map(markdown_cell, row)) + " |" for row in display_rows(df, digits)]
    return "\n".join(lines)


def print_table(title: str, df: pd.DataFrame, digits: int = 3) -> None:
    print(f"\n== {title}\n{to_markdown(df, digits)}\n", flush=True)


def to_latex(df: pd.DataFrame, caption: str, digits: int = 3) -> str:
    cols = [latex_text(str(c)) for c in df.columns]
    body = [" & ".join(latex_text(v).replace("< ", "$<$ ") for v in row) + " \\\\" for row in display_rows(df, digits)]
    return "\n".join([
        "\\begin{table}[t]", "\\centering", "\\small",
        "\\begin{tabular}{" + "l" * 1 + "r" * (len(cols) - 1) + "}", "\\toprule",
        " & ".join(cols) + " \\\\", "\\midrule", *body, "\\bottomrule", "\\end{tabular}",
        f"\\caption{{{latex_text(caption)}}}", "\\end{table}", ""])


def write_table(df: pd.DataFrame, out_dir: str | Path, name: str, caption: str, digits: int = 3) -> list[Path]:
    """``name.md`` (caption + table), ``name.csv`` (6 significant digits: the same bytes on every machine and
    rerun), ``name.tex``; returns the paths. The caption is redacted (face.secrets): it often quotes settings."""
    caption = redact(caption)
    out_dir = Path(out_dir)
    md, csv, tex = out_dir / f"{name}.md", out_dir / f"{name}.csv", out_dir / f"{name}.tex"
    atomic_write_text(md, f"{caption}\n\n{to_markdown(df, digits)}\n")
    with atomic_path(csv) as tmp:
        csv_cells(df).to_csv(tmp, index=False, float_format="%.6g")
    atomic_write_text(tex, to_latex(df, caption, digits))
    return [md, csv, tex]


def ordered(names) -> list[str]:
    """Aspect names in display order: known ones first (``ASPECT_ORDER``), then the rest as they come."""
    names = list(dict.fromkeys(names))
    return [a for a in ASPECT_ORDER if a in names] + [a for a in names if a not in ASPECT_ORDER]


def order_aspects(df: pd.DataFrame, col: str = "aspect") -> pd.DataFrame:
    key = {a: i for i, a in enumerate(ordered(df[col]))}
    return df.sort_values(col, key=lambda s: s.map(key), kind="stable").reset_index(drop=True)


def comparison_table(ours: pd.DataFrame, published: pd.DataFrame, method: str = "FACE",
                     splits: tuple[str, ...] = ("redial", "opendialkg")) -> pd.DataFrame:
    """Ours vs a published row: one line per (aspect, split, coefficient) with the delta.

    ``ours``: meta-evaluation results (turn/dialogue level); ``published``: the published table.
    """
    mine = ours[ours["level"].isin(["turn", "dialogue"]) & ours["split"].isin(splits)
                & ours["coefficient"].isin(["pearson", "spearman"])]
    pub = published[published["method"] == method][["split", "aspect", "coefficient", "value"]]
    df = mine.merge(pub.rename(columns={"value": "published"}), on=["split", "aspect", "coefficient"], how="left")
    df = df.assign(ours=df["value"], delta=(df["value"].round(3) - df["published"]).round(4),
                   within_0_001=(df["value"] - df["published"]).abs() <= 0.001 + 1e-9)
    df["split"] = df["split"].map(SPLIT_LABELS)
    return order_aspects(df[["aspect", "level", "split", "coefficient", "ours", "ci_low", "ci_high", "published",
                             "delta", "within_0_001", "n"]])


