"""Errors that end a run with one line and exit code 2 (``scripts/run.py``): nothing was sent. ``DataError``: a bad
input file, always named with the record; ``ConfigError``: a setting that cannot work."""

from __future__ import annotations

import difflib
import os
from collections.abc import Sequence
from pathlib import Path


class DataError(ValueError):
    """A data file is missing, corrupt or malformed.

    The message always names the file and, where there is one, the record
    (conversation id, line number or list index) and what was expected.
    """

    def __init__(self, path: str | Path, problem: str, record: str | None = None):
        self.path, self.record, self.problem = str(path), record, problem
        super().__init__(f"{self.path}{f' [{record}]' if record else ''}: {problem}")


# how a message names a value's type (a data file's JSON, a request to the replay server, a setting)
TYPE_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "a boolean", list: "a list",
              dict: "an object", type(None): "null"}


def type_name(kind: type) -> str:
    return TYPE_NAMES.get(kind, kind.__name__)


class ConfigError(ValueError):
    """A setting with a value that cannot work: the message names the setting and the allowed values."""


def closest_first(names: str | Sequence[str], options: Sequence[str]) -> list[str]:
    """``options``, those closest to one of the misspelled ``names`` first: how every refusal of a name lists the valid
    ones (config group options, datasets, aspects, a server's options)."""
    wrong = [names] if isinstance(names, str) else list(names)
    return sorted(options, key=lambda o: -max(difflib.SequenceMatcher(None, n, o).ratio() for n in wrong))


def import_class(path: str, setting: str) -> type:
    """The class a setting names by its dotted path (``my_project.module.Class``), or a ConfigError naming the
    setting: the one way every ``_target_``-like setting is resolved."""
    import importlib

    module, _, name = str(path).rpartition(".")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError) as e:
        raise ConfigError(f"{setting}={path}: not an importable class ({e})") from None


# kernel pseudo-filesystems: writable on paper (root may even pass os.access), but nothing can be created there
_PSEUDO_FS = ("/proc", "/sys")


def require_writable_dir(path: Path | str, setting: str) -> None:
    """ConfigError naming ``setting`` and the path unless ``path`` is, or can be created as, a directory this
    process may write (nothing is created here): an empty path, a name longer than the file system allows,
    a path under a file, under /proc or /sys, or under a read-only / immutable directory is refused."""
    if not str(path).strip():
        raise ConfigError(f"{setting}: the path is empty")
    try:
        p = Path(os.path.abspath(path))
        too_long = [part for part in p.parts if len(os.fsencode(part)) > 255]
        if too_long or len(os.fsencode(str(p))) > 4095:
            raise ConfigError(f"{setting}: {_short(path)} is too long a path for the file system "
                              f"({'a name over 255 bytes' if too_long else 'over 4095 bytes'})")
        p = p.resolve()
        while not p.exists() and p.parent != p:
            p = p.parent
        if any(p == Path(fs) or Path(fs) in p.parents for fs in _PSEUDO_FS):
            raise ConfigError(f"{setting}: {path} is under {p}, a kernel pseudo-filesystem: nothing can be written "
                              "there")
        if not p.is_dir():
            raise ConfigError(f"{setting}: {path} cannot be a directory: {p} is a file")
        if not os.access(p, os.W_OK | os.X_OK):
            raise ConfigError(f"{setting}: {path} is not writable ({p}: permission denied or read-only)")
    except OSError as e:  # ELOOP, EACCES on a parent, ...: still one line naming the path
        raise ConfigError(f"{setting}: {_short(path)} cannot be used: {e.strerror or e}") from None


def _short(path: Path | str) -> str:
    """The path as said in a message: a very long one cut in the middle."""
    s = str(path)
    return s if len(s) <= 200 else f"{s[:100]}...{s[-60:]} ({len(s)} characters)"
