"""Which runs may be compared: scores from different judges are not on one scale.

Refused (one line saying why; ``allow_incomparable`` overrides, and the reason is then printed as a warning on every
table): different aspects, an aspect on different scales, different judge LLMs, different instruction sets, different
estimators. What a run does not record (a bare run file has no judge) cannot be checked: that is said as a warning,
not refused.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from face.aspects import Aspect
from face.comparison.runs import Run
from face.errors import ConfigError, DataError

SLACK = 1e-9  # a mean of scores may pass its scale's end by rounding

OVERRIDE = "allow_incomparable=True / --allow-incomparable"


class IncomparableRuns(ConfigError):
    """Runs whose scores are not on one scale (the message says why, in one line)."""


def aspect_of(run: Run, name: str) -> Aspect | None:
    """The aspect as the run defines it (its own aspects file), else CRSArena-Eval's, else unknown."""
    from face.datasets.crsarena import ASPECTS

    return run.aspects.get(name) or ASPECTS.get(name)


def in_scale(runs: Sequence[Run], aspects: Sequence[str]) -> None:
    """A DataError naming the run, the conversation and the value of a score outside its aspect's scale (or not a
    finite number, where the scale is not known): no judge gives it, and it would move every mean and interval."""
    for r in runs:
        for a, g in r.scores(aspects).groupby("aspect", sort=False):
            spec = aspect_of(r, a)
            low, high = (spec.low, spec.high) if spec is not None else (-math.inf, math.inf)
            v = g["pred"].astype(float)
            bad = g[~(np.isfinite(v) & v.between(low - SLACK, high + SLACK))]
            if len(bad):
                where = f"its scale {low}–{high}" if spec is not None else "the finite numbers"
                raise DataError(r.source, f"the {a} score {float(bad['pred'].iloc[0])!r} is outside {where}",
                                f"conversation {bad['conv_id'].iloc[0]}")


def _differs(runs: Sequence[Run], what: str, value, note: str = "") -> str | None:
    """'different <what>: A <v>, B <v><note>' when the recorded values of the runs differ (unrecorded ones
    skipped)."""
    known = [(r.name, value(r)) for r in runs if value(r) is not None]
    if len({v for _, v in known}) <= 1:
        return None
    return f"different {what}: " + ", ".join(f"{n} {v}" for n, v in known) + note


def check(runs: Sequence[Run], aspects: Sequence[str], allow: bool, wanted: Sequence[str] | None) -> list[str]:
    """The warnings to print on every table: why the runs are not comparable (``wanted``: only these aspects count),
    one line each, and what could not be checked (runs that do not record their judge, estimator or instructions);
    raises ``IncomparableRuns`` (the first reason) unless ``allow``."""
    found = []
    sets = [tuple(sorted(a for a in r.aspect_names() if wanted is None or a in wanted)) for r in runs]
    if len(set(sets)) > 1:
        found.append("different aspects: " + "; ".join(f"{r.name} scores {', '.join(s) or 'none'}"
                                                       for r, s in zip(runs, sets)))
    lines = [_differs(runs, f"scales for {a}", lambda r, a=a: tuple(s.scale) if (s := aspect_of(r, a)) else None)
             for a in aspects]
    lines += [_differs(runs, "judge LLMs", lambda r: r.judge), _differs(runs, "estimators", lambda r: r.estimator)]
    lines += [_differs(runs, f"instruction sets for {a}", lambda r, a=a: None if r.instructions is None
                       else r.instructions.get(a), " (sha256 of ids and texts)") for a in aspects]
    found += [line for line in lines if line]
    if found and not allow:
        raise IncomparableRuns(f"not comparable: {found[0]} (scores from different judges or scales are not on "
                               f"one scale; {OVERRIDE} compares them anyway)")
    notes = [f"WARNING: compared although not comparable ({OVERRIDE}): {line}" for line in found]
    for r in runs:
        missing = [what for what, v in (("judge LLM", r.judge), ("estimator", r.estimator),
                                        ("instruction sets", r.instructions)) if v is None]
        if missing:
            notes.append(f"note: {r.name} ({r.source}) does not record its {', '.join(missing)}: not checked for "
                         "comparability")
    return notes
