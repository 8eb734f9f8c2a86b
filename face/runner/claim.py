"""The output directories of a run, claimed before anything is written: every location the composed configuration
names (the Hydra job's directory, ``paths.output_dir``, ``report.out_dir`` or the results directory), whatever
override spelled it (``key=``, ``+key=``, ``++key=``, an interpolation): each is checked (writable, not the input,
not another run's), locked for the whole run and marked as this run's (``face.files.claimed``)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from face.errors import ConfigError
from face.files import MARKER, NOT_RESULTS, OUTPUTS, Location, check_locations, claimed


def locations(named: Sequence[tuple[str, str | os.PathLike | None]], results_dir: Path, out: Path | None = None,
              out_name: str = "out") -> list[Location]:
    """The run's distinct output directories, in order: a directory inside an earlier one is that one's (the run's
    ``results/`` inside its run directory); one equal to the entry point's ``out`` is named ``out_name``; one inside
    the results directory is the committed results' (locked, not marked)."""
    found: list[tuple[Location, Path]] = []
    results = Path(os.path.realpath(results_dir))
    mine = Path(os.path.realpath(os.path.abspath(out))) if out is not None else None
    for setting, path in named:
        if path is None:
            continue
        if not str(path).strip():
            raise ConfigError(f"{setting}: the path is empty")
        real = Path(os.path.realpath(os.path.abspath(path)))
        if any(real == r or r in real.parents for _, r in found):
            continue
        loc = Location(out_name if real == mine else setting, Path(os.path.abspath(path)),
                       owned=not (real == results or results in real.parents))
        found.append((loc, real))
    return [loc for loc, _ in found]


__all__ = ["MARKER", "NOT_RESULTS", "OUTPUTS", "Location", "check_locations", "claimed", "locations"]
