"""Redraw a committed result directory's tables and ours-vs-published bar figures from its own CSVs, without
rerunning its experiment: for runs that need an LLM (``results/tiny_model_signal``: the embedded local model,
≈ 10 min on 2 cores), so that a change to how tables and figures are drawn reaches them too.

    python scripts/replot_results.py results/tiny_model_signal

Reads ``correlations.csv`` (every correlation with its CI) and, where present, ``vs_published.csv``; keeps each
table's caption (the first paragraph of its ``.md``); rewrites the Markdown and LaTeX (``face.report.tables``;
the CSVs, the data, are left as they are) and ``figures/bars_<split>_spearman.png`` through
``face.report.figures.bars_vs_published`` against the published Table 2 (fetched like every experiment's data:
``FACE_DATA_MIRROR`` / ``FACE_DATA_DIR``). The numbers are the committed ones: nothing is recomputed."""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's face, not an installed one


def caption_of(md: Path) -> str:
    """The caption a table was written with: the first paragraph of its Markdown."""
    return md.read_text(encoding="utf-8").split("\n\n", 1)[0].strip()


def label_of(caption: str) -> str:
    """``ours (MODEL)`` as the experiment labels its bars, from the ``LLM: MODEL (backend)`` in the caption."""
    m = re.search(r"LLM: (\S+) \(", caption)
    return f"ours ({m.group(1)})" if m else "ours"


def rewrite_table(df, out_dir: Path, name: str, caption: str, digits: int = 3) -> list[Path]:
    """``name.md`` and ``name.tex`` as ``write_table`` writes them, from the committed ``name.csv``."""
    from face.files import atomic_write_text
    from face.report.tables import to_latex, to_markdown

    md, tex = out_dir / f"{name}.md", out_dir / f"{name}.tex"
    atomic_write_text(md, f"{caption}\n\n{to_markdown(df, digits)}\n")
    atomic_write_text(tex, to_latex(df, caption, digits))
    return [md, tex]


def replot(out_dir: Path, data_dir: Path, mirror: Path | None) -> list[Path]:
    import pandas as pd

    from face.data import PUBLISHED_TABLE, ensure_data
    from face.datasets.crsarena import load_published_table
    from face.report import figures
    results = pd.read_csv(out_dir / "correlations.csv")
    caption = caption_of(out_dir / "correlations.md")
    paths = rewrite_table(results, out_dir, "correlations", caption, digits=4)
    note = caption.removeprefix("All correlations. ")
    if (out_dir / "vs_published.csv").exists():
        comp = pd.read_csv(out_dir / "vs_published.csv")
        paths += rewrite_table(comp, out_dir, "vs_published", caption_of(out_dir / "vs_published.md"))
        ensure_data(data_dir, [PUBLISHED_TABLE], mirror=mirror, download=mirror is None)
        published = load_published_table(data_dir / PUBLISHED_TABLE)
        for split in [s for s in dict.fromkeys(results["split"]) if s != "all"]:
            shown = results[(results["split"] == split) & (results["coefficient"] == "spearman")]
            if shown["value"].isna().all():
                continue
            paths.append(figures.bars_vs_published(results, published, split, "spearman", label_of(caption), note,
                                                   out_dir / "figures" / f"bars_{split}_spearman.png"))
    return paths


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out_dir", type=Path, help="a committed result directory, e.g. results/tiny_model_signal")
    args = p.parse_args(argv)
    if not (args.out_dir / "correlations.csv").exists():
        print(f"error: {args.out_dir}: no correlations.csv (not a result directory)", file=sys.stderr)
        return 2
    mirror = os.environ.get("FACE_DATA_MIRROR")
    data_dir = Path(os.environ.get("FACE_DATA_DIR", ROOT / "data" / "raw"))
    for path in replot(args.out_dir, data_dir, Path(mirror) if mirror else None):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
