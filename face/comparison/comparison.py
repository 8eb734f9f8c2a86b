"""``Comparison``: what ``face compare`` / ``face.compare`` return — DataFrames, and the tables, report and console
summary made from them. Every table is captioned with what scored the runs and with every warning (runs compared
although not comparable, settings a run does not record)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from face.errors import ConfigError
from face.report.tables import to_markdown

SPELLED_OUT = 21  # verdicts the console spells out one line each (three runs × 7 aspects); more: counted
VERDICT_COLUMNS = ["aspect", "baseline", "candidate", "baseline_mean", "candidate_mean", "diff", "ci_low", "ci_high",
                   "p_holm", "verdict", "detectable_diff", "n_needed", "pairing", "n_shared"]


@dataclass
class Comparison:
    """``systems``: one row per compared system (source, conversations, judge); ``means``: per aspect × system the
    mean with its interval; ``differences``: per pair (baseline, candidate) × aspect the difference candidate −
    baseline, interval, p-value, Holm's adjusted p, verdict, smallest detectable difference (and conversations
    needed for ``target_diff``); ``ranking`` / ``beats`` (three systems or more): ranks with intervals and
    P(system beats opponent); ``moved``: ``acts``, ``particles``, ``conversations`` (face.comparison.moved)."""

    systems: pd.DataFrame
    means: pd.DataFrame
    differences: pd.DataFrame
    ranking: pd.DataFrame | None
    beats: pd.DataFrame | None
    moved: dict[str, pd.DataFrame]
    scales: dict[str, tuple[int, int] | None]
    warnings: list[str] = field(default_factory=list)
    settings: dict = field(default_factory=dict)
    reports: dict[str, Path | None] = field(default_factory=dict, repr=False)

    @property
    def judge(self) -> str:
        """What scored the runs, said once (the distinct labels of the compared runs)."""
        labels = list(dict.fromkeys(self.systems["label"]))
        return labels[0] if len(labels) == 1 else " | ".join(f"{n}: {lab}" for n, lab in
                                                             zip(self.systems["system"], self.systems["label"]))

    @property
    def aspects(self) -> list[str]:
        return list(self.scales)

    def verdicts(self) -> pd.DataFrame:
        """The differences as a builder reads them: one row per pair × aspect, the verdict beside the numbers."""
        return self.differences[[c for c in VERDICT_COLUMNS if c in self.differences]]

    def method_note(self) -> str:
        s = self.settings
        pct = f"{100 * s['confidence']:g} %"
        return (f"Differences: candidate − baseline, {pct} studentized bootstrap intervals and p-values ({s['n_boot']} "
                f"resamples of conversations: paired where the runs share conversation ids, else each system on its "
                f"own), Holm's correction over {len(self.differences)} tests (aspects × pairs); verdict at α = "
                f"{s['alpha']:g} on the adjusted p (the intervals are not adjusted); 'no detectable difference' is not "
                f"'equal'. Paired comparisons use the shared conversations only (n_shared): their means and verdict "
                f"are on those rows. detectable_diff / n_needed: the difference / conversations per system for which "
                f"the Holm-adjusted verdict has {100 * s['power']:g} % power (Student's t at α / "
                f"{len(self.differences)}, never below the interval's half-width). Means: {pct} percentile intervals "
                f"over all of a system's conversations, resampled within the system.")

    def caption(self, title: str) -> str:
        """``title``, what scored, the method, then every warning."""
        return " ".join([f"{title}. Scored by: {self.judge}.", self.method_note(), *self.warnings])

    def tables(self) -> dict[str, pd.DataFrame]:
        out = {"verdicts": self.verdicts(), "means": self.means, "differences": self.differences,
               "systems": self.systems.drop(columns=["label"])}
        if self.ranking is not None:
            out.update(ranking=self.ranking, beats=self.beats)
        out.update({f"moved_{k}": v for k, v in self.moved.items()})
        return out

    def to_markdown(self, table: str | None = None) -> str:
        """The verdict table (in Markdown, or ``table`` drawn otherwise), the warnings above it, what scored and how
        below it."""
        head = "".join(f"> {w}\n\n" for w in self.warnings)
        return f"{head}{table or to_markdown(self.verdicts())}\n\nScored by: {self.judge}. {self.method_note()}\n"

    def summary(self) -> str:
        """The console summary: what scored, warnings, the per-aspect verdicts (and the ranking, if any)."""
        lines = [f"face compare: {' vs '.join(self.systems['system'])}", f"Scored by: {self.judge}", *self.warnings,
                 "", to_markdown(self.verdicts()), ""]
        v = self.verdicts()
        if len(v) <= SPELLED_OUT:
            lines += [f"  {r.aspect}: {r.candidate} vs {r.baseline}: {r.diff:+.3f} [{r.ci_low:+.3f}, {r.ci_high:+.3f}]"
                      f", p (Holm) {r.p_holm:.3g} -> {r.verdict}" for r in v.itertuples(index=False)]
        else:
            counts = v["verdict"].value_counts()
            lines.append(f"  {len(v)} tests: " + ", ".join(f"{counts.get(k, 0)} {k}" for k in
                                                           ("better", "worse", "no detectable difference")))
        if self.ranking is not None:
            lines += ["", "Ranking (1 = best; rank interval):", to_markdown(self.ranking)]
        lines += ["", *self.warnings, self.method_note()]
        return "\n".join(lines)

    def write(self, out_dir: str | os.PathLike, overwrite: bool = False) -> list[Path]:
        """Every table (``.md`` / ``.csv`` / ``.tex``), the figures and ``report.html`` into ``out_dir``, a directory
        of its own as a run's is: another run's or comparison's is refused unless ``overwrite``, a compared run's and
        the project's ``results/`` always (``ConfigError``, nothing written)."""
        from face.comparison.report import write_all

        if not isinstance(overwrite, bool):
            raise ConfigError(f"overwrite must be True or False, got {overwrite!r}")
        return write_all(self, _path(out_dir, "out_dir"), overwrite)

    def report(self, path: str | os.PathLike) -> Path:
        """The HTML report (figures embedded; drill-down links relative to ``path``)."""
        from face.comparison.report import write_html

        return write_html(self, _path(path, "report"))

    def __repr__(self) -> str:
        counts = self.differences["verdict"].value_counts().to_dict()
        return (f"face.Comparison({' vs '.join(self.systems['system'])}; {len(self.aspects)} aspects; "
                f"{', '.join(f'{v} {k}' for k, v in counts.items())})")


def _path(path: object, what: str) -> Path:
    if not isinstance(path, (str, os.PathLike)) or not str(path).strip():
        raise ConfigError(f"{what} must be a path (a string or a Path), got {path!r}")
    return Path(path)
