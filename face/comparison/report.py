"""A comparison's outputs: its tables (Markdown, CSV, LaTeX: ``face.report.tables.write_table``), figures and one
self-contained HTML report in the style of the diagnostics report (Jinja2, autoescaped; what scored named once at
the top, every warning above the verdicts; means drawn on each aspect's fixed scale; conversations linked into the
compared runs' own diagnostics reports, ``report.html#<conv_id>``)."""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

import numpy as np

from face.comparison import figures
from face.errors import ConfigError, require_writable_dir
from face.files import Location, atomic_write_text, check_locations, claimed, digest_settings

if TYPE_CHECKING:
    from face.comparison.comparison import Comparison


def _conversations(comp: Comparison, html_dir: Path) -> list[dict]:
    """What moved's conversations, each linked into the runs' diagnostics reports at the conversation (its
    anchor)."""
    def link(report: str, conv_id: str) -> str:
        return f"{quote(os.path.relpath(report, html_dir))}#{quote(str(conv_id), safe='')}" if report else ""

    rows = comp.moved["conversations"].to_dict("records")
    for r in rows:
        r["candidate_link"] = link(r["candidate_report"], r["conv_id"])
        r["baseline_link"] = link(r["baseline_report"], r["conv_id"]) if r["kind"] == "got worse" else ""
    return rows


def figure_data(comp: Comparison, note: str = "") -> dict:
    """PNG bytes of every figure by its file's stem: ``means``, ``differences`` and, with three systems or more,
    ``beats_<aspect>``; ``note`` under each (the files say what scored; the report says it once, at its top)."""
    out = {"means": figures.means(comp.means, comp.scales, note),
           "differences": figures.differences(comp.differences, note)}
    if comp.beats is not None:
        out.update({f"beats_{a}": figures.beats(comp.beats, a, note) for a in comp.aspects})
    return out


def write_html(comp: Comparison, path: Path, data: dict | None = None) -> Path:
    """The report: what scored, warnings, systems, verdicts, means, ranking, what moved."""
    from jinja2 import Environment, PackageLoader, select_autoescape

    if path.is_dir():
        raise ConfigError(f"report: {path} is a directory; name the HTML file to write")
    require_writable_dir(path.parent, "report")
    env = Environment(loader=PackageLoader("face.comparison", "templates"), autoescape=select_autoescape(["html"]))
    env.filters["fmt"] = lambda v, digits=2: "–" if v is None or (isinstance(v, float) and np.isnan(v)) \
        else f"{v:.{digits}f}"
    html = env.get_template("comparison.html").render(
        title=f"FACE comparison — {' vs '.join(comp.systems['system'])}", judge=comp.judge,
        warnings=comp.warnings, method=comp.method_note(), scales=comp.scales,
        systems=comp.systems.to_dict("records"), verdicts=comp.verdicts().to_dict("records"),
        with_needed="n_needed" in comp.differences, means=comp.means.to_dict("records"),
        ranking=None if comp.ranking is None else comp.ranking.to_dict("records"),
        figures={k: base64.b64encode(v).decode("ascii") for k, v in (data or figure_data(comp)).items()},
        acts=comp.moved["acts"].to_dict("records"), particles=comp.moved["particles"].to_dict("records"),
        conversations=_conversations(comp, path.resolve().parent))
    atomic_write_text(path, html)
    return path


def _claim(comp: Comparison, out_dir: Path, setting: str) -> tuple[Location, dict, list[Path]]:
    """The comparison's directory (never inside the project's results, which only an experiment's default run
    writes), its owner (what was compared: systems, sources, aspects) and its inputs (the compared runs'
    directories: never written into)."""
    from face.comparison.runs import project_root

    results, real = project_root() / "results", Path(os.path.realpath(out_dir))
    if real == results or results in real.parents:
        raise ConfigError(f"{setting}: {out_dir} is inside the project's results directory {results}, which only an "
                          "experiment's default run writes; choose another directory")
    owner = {"comparison": digest_settings({"systems": comp.systems[["system", "source"]].values.tolist(),
                                            "aspects": comp.aspects})}
    read = [Path(s) for s in comp.systems["source"] if os.path.exists(s)] + [r for r in comp.reports.values() if r]
    return Location(setting, Path(os.path.abspath(out_dir))), owner, [p if p.is_dir() else p.parent for p in read]


def write_all(comp: Comparison, out_dir: Path, overwrite: bool = False, setting: str = "out_dir") -> list[Path]:
    """``<name>.md|csv|tex`` per table, ``figures/*.png`` and ``report.html`` into ``out_dir``, claimed as a run's
    directory is (``face.files.claimed``): not another run's or comparison's unless ``overwrite``, never a compared
    run's. The figures are drawn before anything is written."""
    from face.report.tables import write_table

    titles = {"verdicts": "Verdicts per aspect and pair", "means": "Mean score per aspect and system",
              "differences": "Differences per aspect and pair (every column)", "systems": "The compared systems",
              "ranking": "Ranking with rank intervals", "beats": "P(system beats opponent)",
              "moved_acts": "What moved: dialogue acts", "moved_particles": "What moved: particles",
              "moved_conversations": "What moved: conversations"}
    loc, owner, inputs = _claim(comp, out_dir, setting)
    how = f"pass {'--overwrite' if setting.startswith('--') else 'overwrite=True'} to replace them"
    check_locations([loc], owner, inputs, overwrite, how)  # refused before anything is drawn
    data, shown = figure_data(comp, " ".join([f"Scored by: {comp.judge}.", *comp.warnings])), figure_data(comp)
    paths: list[Path] = []
    with claimed([loc], owner, inputs, overwrite, how):
        for name, df in comp.tables().items():
            paths += write_table(df, out_dir, name, comp.caption(titles.get(name, name)))
        paths += [figures.save(v, out_dir / "figures" / f"{k}.png") for k, v in data.items()]
        paths.append(write_html(comp, out_dir / "report.html", shown))
    return paths
