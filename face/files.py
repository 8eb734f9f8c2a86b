"""Writing a run's outputs safely: every file appears whole or not at all, a directory belongs to one run at a
time, and a run never writes over another run's results or over its own input.

* ``atomic_path`` / ``atomic_open`` / ``atomic_write_text``: the bytes go to a temporary
  name in the same directory, which is renamed onto the file (``os.replace``) only when everything was written; a
  crash or an exception half-way leaves the old file as it was and no temporary file behind (a ``kill -9`` leaves
  one, removed by the next run that takes the directory: ``dir_lock``).
* ``dir_lock``: an exclusive ``fcntl.flock`` on the directory itself (no lock file, so ``results/`` stays exactly
  as committed); the operating system releases it when the process ends, however it ends. A second run into the
  same directory stops with one line; the one that takes it removes the temporary files a killed run left there.
  Re-entrant within a process (``face evaluate`` holds it across its dry pass, its run and its report; the
  experiment takes it again inside).
* ``write_marker``: the ownership marker ``.face-run.json`` (a digest of the input files and of
  the settings that decide the results): the same input and settings resume, anything else needs ``overwrite``.
* ``claimed``: a run's (or a comparison's) output directories held for a block: each checked (writable, not the
  input, not another run's), locked and marked as its own (``face.runner.run`` names a run's; ``face compare``
  its ``--out``).
* ``process_alive`` / ``process_start``: whether the process that owns a run, a lock or a claim is still there
  (a zombie and a reused pid count as gone), for the owners of runs and of in-flight LLM requests alike.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from face.errors import ConfigError, require_writable_dir

MARKER = ".face-run.json"
# what a run may write into its own directory (a name ending in / is a directory): another run's results among them
# (without an ownership marker) make the directory another run's; an input file with one of these names would be
# replaced. Hydra's record of the configuration (.hydra/) and the run's log alone are not results: a run refused
# for a bad setting may leave them.
OUTPUTS = (".hydra/", "results/", "run_file.json", "particles.jsonl", "particle_scores.jsonl", "cost_estimate.csv",
           "llm_usage.json", "llm_server.json", "run_settings.json", "conversations.json", "report.html",
           "report_tables/", "correlations.csv", "correlations.md", "vs_published.csv", "vs_published.md", "figures/")


_UMASK = os.umask(0)
os.umask(_UMASK)
_MODE = 0o666 & ~_UMASK  # what an ordinary open(path, "w") gives (mkstemp's 0600 would hide outputs from others)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """A temporary path next to ``path`` with the same suffix (matplotlib and pandas pick the format from it),
    renamed onto ``path`` when the block ends normally and removed when it raises."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=f".tmp{path.suffix}")
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, _MODE)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[IO]:
    """``open(path, mode)`` whose file replaces ``path`` only once it is complete and closed."""
    with atomic_path(path) as tmp, open(tmp, mode, encoding=None if "b" in mode else encoding) as f:
        yield f


def atomic_write_text(path: str | os.PathLike, text: str, encoding: str = "utf-8") -> Path:
    with atomic_open(path, "w", encoding=encoding) as f:
        f.write(text)
    return Path(path)


# ---------------------------------------------------------------- one run per directory
_held: dict[str, list[int]] = {}  # real path -> [fd, depth]: the locks this process holds
# atomic_path's temporary names: mkstemp's ``.<stem>.<8 characters>.tmp<suffix>``
_PARTIAL = re.compile(r"\..+\.[a-z0-9_]{8}\.tmp(\.[^.]+)?")


@contextlib.contextmanager
def dir_lock(path: str | os.PathLike, setting: str) -> Iterator[Path]:
    """Hold an exclusive lock on directory ``path`` (created if needed) for the block; ConfigError naming
    ``setting`` when another process holds it."""
    require_writable_dir(Path(path), setting)
    key = os.path.realpath(path)
    if key in _held:
        _held[key][1] += 1
    else:
        os.makedirs(key, exist_ok=True)
        _held[key] = [_lock(key, path, setting), 1]
        # the temporary files atomic_path left when a process was killed while writing (kill -9: no finally ran);
        # this process holds the directory's lock now: no one else writes there
        for p in Path(key).glob(".*.tmp*"):
            if _PARTIAL.fullmatch(p.name) and p.is_file():
                with contextlib.suppress(OSError):
                    p.unlink()
    try:
        yield Path(path)
    finally:
        _held[key][1] -= 1
        if not _held[key][1]:
            os.close(_held.pop(key)[0])  # closing the last descriptor releases the flock


def _lock(key: str, path: str | os.PathLike, setting: str) -> int:
    """The descriptor of directory ``key`` holding its exclusive lock; ConfigError if another process holds it."""
    fd = os.open(key, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise ConfigError(f"{setting}: {path} is in use by another run (locked); wait for it to finish or "
                          "choose another directory") from None
    return fd


def digest_files(paths: Iterable[str | os.PathLike]) -> str:
    """sha256 over the files' bytes, in order (what the run read; each as a whole, as its loader reads it)."""
    h = hashlib.sha256()
    for p in paths:
        h.update(Path(p).read_bytes())
        h.update(b"\0")
    return h.hexdigest()


def digest_settings(settings: dict) -> str:
    return hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()


def write_marker(directory: Path, owner: dict) -> None:
    """The directory's ownership marker (``_check`` reads it), rewritten only when it changes."""
    text = json.dumps({"owner": owner, "note": "the run that owns this directory: digests of its input and of the "
                       "settings that decide its results"}, indent=1, sort_keys=True) + "\n"
    marker = Path(directory) / MARKER
    with contextlib.suppress(OSError):
        if marker.read_text(encoding="utf-8") == text:
            return
    atomic_write_text(marker, text)


# ---------------------------------------------------------------- the claim of a run's directories
@dataclass(frozen=True)
class Location:
    """An output directory of the run and the setting that names it (in a refusal)."""

    setting: str
    path: Path  # absolute, as given (not resolved: a refusal names it as the user wrote it)
    owned: bool = True  # a run directory (marked); False: the committed results directory (locked only)


def _refuse_input(loc: Location, inputs: Sequence[Path]) -> None:
    """ConfigError when an input file is the directory itself or one of the files the run writes there."""
    d = Path(os.path.realpath(loc.path))
    for inp in inputs:
        i = Path(os.path.realpath(inp))
        if i == d:
            raise ConfigError(f"{loc.setting}: {loc.path} is the input {'directory' if i.is_dir() else 'file'} "
                              "itself; choose a directory for the outputs")
        for name in [*OUTPUTS, MARKER]:
            target = d / name.rstrip("/")
            if i == target or (name.endswith("/") and target in i.parents):
                raise ConfigError(f"{loc.setting}: {loc.path} contains the input {inp}, which the run would "
                                  f"overwrite with its {name}; choose another output directory")


def _check(loc: Location, owner: dict, inputs: Sequence[Path], overwrite: bool, how: str) -> str:
    """Can the run have ``loc``? Its state: ``"new"`` (no run's), ``"resume"`` (its marker names the same ``owner``:
    the same input and settings) or ``"overwrite"`` (another run's, and ``overwrite``). ConfigError naming the setting
    when an input file is the directory or one of the files the run writes there, when it cannot be written or a
    running run holds it, or when it holds another run's results without ``overwrite`` (results without a marker,
    in a run directory, count as another run's); ``how``: how the entry point asks to replace them. Writes
    nothing (``write_marker`` does, once the run's settings passed their checks)."""
    _refuse_input(loc, inputs)
    require_writable_dir(loc.path, loc.setting)
    if not loc.path.is_dir():
        return "new"
    if os.path.realpath(loc.path) not in _held:  # in use by a running run: said before the input is fetched
        os.close(_lock(os.path.realpath(loc.path), loc.path, loc.setting))
    marker = loc.path / MARKER
    if marker.exists():
        with contextlib.suppress(OSError, ValueError):  # a marker that cannot be read is another run's
            theirs = json.loads(marker.read_text(encoding="utf-8"))
            if isinstance(theirs, dict) and theirs.get("owner") == owner:
                return "resume"
    elif not loc.owned or not any((loc.path / o.rstrip("/")).exists() for o in OUTPUTS if o != ".hydra/"):
        return "new"  # results without a marker: an older run, or something else entirely
    if not overwrite:
        raise ConfigError(f"{loc.setting}: {loc.path} holds another run's results (a different input or different "
                          f"settings); {how}, or choose another directory")
    return "overwrite"


def check_locations(locs: Sequence[Location], owner: dict, inputs: Sequence[Path], overwrite: bool, how: str
                    ) -> list[str]:
    """Every location checked (``_check``: writable, not the input, not another run's): their states; nothing
    written."""
    return [_check(loc, owner, inputs, overwrite, how) for loc in locs]


@contextlib.contextmanager
def claimed(locs: Sequence[Location], owner: dict, inputs: Sequence[Path], overwrite: bool, how: str
            ) -> Iterator[list[str]]:
    """Hold every location for the block: all are checked before any is created, then each is locked (a second run
    into one stops at once), checked again under its lock and marked as this run's. Yields each one's state. A
    refusal leaves no directory it created."""
    check_locations(locs, owner, inputs, overwrite, how)
    missing = [[p for p in (loc.path, *loc.path.parents) if not p.exists()] for loc in locs]
    created = [m[-1] for m in missing if m]  # each location's topmost directory that locking it creates
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
            for top in created:  # removed, deepest first, if nothing was written into them
                for dirpath, _, _ in sorted(os.walk(top), key=lambda w: -len(w[0])):
                    with contextlib.suppress(OSError):
                        os.rmdir(dirpath)
            raise
        yield states


def _stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/PID/stat`` after the command name (Linux); None where unknown."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def process_start(pid: int) -> str | None:
    """The start time of a process, to tell a live process from a reused pid; None where unknown."""
    fields = _stat(pid)
    return fields[19] if fields is not None and len(fields) > 19 else None


def process_alive(pid: int, start: str | None = None) -> bool:
    """Whether process ``pid`` of this host is still running: not gone, not a zombie (killed, not yet reaped), and,
    when ``start`` is given, the same process (not a later one that reused its pid). Unknowable counts as alive."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    fields = _stat(pid)
    return fields is None or (fields[0] != "Z" and (start is None or len(fields) < 20 or fields[19] == start))
