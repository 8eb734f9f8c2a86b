"""The output directories of a run, claimed before anything is written: every location the composed configuration
names (the Hydra job's directory, ``paths.output_dir``, ``report.out_dir`` or the results directory), whatever
override spelled it (``key=``, ``+key=``, ``++key=``, an interpolation): each is checked (writable, not the input,
not another run's), locked for the whole run and marked as this run's (``face.files``)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from face.errors import ConfigError, require_writable_dir
from face.files import MARKER, claim_state, dir_lock, refuse_input_overwrite, write_marker

# what a run may write into its own directory (a name ending in / is a directory): another run's results among them
# (without an ownership marker) make the directory another run's; an input file with one of these names would be
# replaced. Hydra's record of the configuration (.hydra/) and the run's log alone are not results: a run refused
# for a bad setting may leave them.
OUTPUTS = (".hydra/", "results/", "run_file.json", "particles.jsonl", "particle_scores.jsonl", "cost_estimate.csv",
           "llm_usage.json", "llm_server.json", "run_settings.json", "conversations.json", "report.html",
           "report_tables/", "correlations.csv", "correlations.md", "vs_published.csv", "vs_published.md", "figures/")
NOT_RESULTS = (".hydra/",)


@dataclass(frozen=True)
class Location:
    """An output directory of the run and the setting that names it (in a refusal)."""

    setting: str
    path: Path  # absolute, as given (not resolved: a refusal names it as the user wrote it)
    owned: bool = True  # a run directory (marked); False: the committed results directory (locked only)


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


def _check(loc: Location, owner: dict, inputs: Sequence[Path], overwrite: bool, how: str) -> str:
    """Can the run have ``loc``? Its state (new, resume, overwrite), or a ConfigError; nothing written."""
    refuse_input_overwrite(loc.path, inputs, OUTPUTS, loc.setting)
    require_writable_dir(loc.path, loc.setting)
    if not loc.path.is_dir():
        return "new"
    outputs = [o for o in OUTPUTS if o not in NOT_RESULTS] if loc.owned else []
    return claim_state(loc.path, owner, loc.setting, overwrite, outputs, how)


def _first_missing(path: Path) -> Path | None:
    """The topmost directory of ``path`` that does not exist yet (what locking it would create)."""
    missing = None
    for p in [path, *path.parents]:
        if p.exists():
            break
        missing = p
    return missing


def check_locations(locs: Sequence[Location], owner: dict, inputs: Sequence[Path], overwrite: bool = False,
                    how: str = "pass --overwrite to replace them") -> list[str]:
    """Every location checked (writable, not the input, not another run's): their states; nothing written."""
    return [_check(loc, owner, inputs, overwrite, how) for loc in locs]


@contextlib.contextmanager
def claimed(locs: Sequence[Location], owner: dict, inputs: Sequence[Path], overwrite: bool = False,
            how: str = "pass --overwrite to replace them") -> Iterator[list[str]]:
    """Hold every location for the block: all are checked before any is created, then each is locked (a second run
    into one stops at once), checked again under its lock and marked as this run's. Yields each one's state. A
    refusal leaves no directory it created."""
    check_locations(locs, owner, inputs, overwrite, how)
    created = [m for m in (_first_missing(loc.path) for loc in locs) if m is not None]
    with contextlib.ExitStack() as held:
        try:
            states = []
            for loc in locs:
                held.enter_context(dir_lock(loc.path, loc.setting))
                states.append(_check(loc, owner, inputs, overwrite, how))
            for loc in locs:
                if loc.owned:
                    write_marker(loc.path, owner)
        except BaseException:
            held.close()
            _remove_empty(created)
            raise
        yield states


def _remove_empty(dirs: Sequence[Path]) -> None:
    """Remove the directories a refused claim created, if nothing was written into them."""
    for top in dirs:
        for dirpath, _, _ in sorted(os.walk(top), key=lambda w: -len(w[0])):
            with contextlib.suppress(OSError):
                os.rmdir(dirpath)


__all__ = ["MARKER", "NOT_RESULTS", "OUTPUTS", "Location", "check_locations", "claimed", "locations"]
