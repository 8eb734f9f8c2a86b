"""Errors that end a run with one line and exit code 2 (``scripts/run.py``): nothing was sent. ``DataError``: a bad
input file, always named with the record; ``ConfigError``: a setting that cannot work."""

from __future__ import annotations

import os
from pathlib import Path


class DataError(ValueError):
    """A data file is missing, corrupt or malformed.

    The message always names the file and, where there is one, the record
    (conversation id, line number or list index) and what was expected.
    """

    def __init__(self, path: str | Path, problem: str, record: str | None = None):
        self.path = str(path)
        self.record = record
        self.problem = problem
        where = f"{self.path}" + (f" [{record}]" if record else "")
        super().__init__(f"{where}: {problem}")


class ConfigError(ValueError):
    """A setting with a value that cannot work: the message names the setting and the allowed values."""


def import_class(path: str, setting: str) -> type:
    """The class a setting names by its dotted path (``my_project.module.Class``), or a ConfigError naming the
    setting: the one way every ``_target_``-like setting is resolved."""
    import importlib

    module, _, name = str(path).rpartition(".")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError) as e:
        raise ConfigError(f"{setting}={path}: not an importable class ({e})") from None


def require_writable_dir(path: Path, setting: str) -> None:
    """ConfigError naming ``setting`` unless ``path`` is, or can be created as, a directory this process may
    write (nothing is created here)."""
    p = Path(path).resolve()
    while not p.exists() and p.parent != p:
        p = p.parent
    if not p.is_dir():
        raise ConfigError(f"{setting}: {path} cannot be a directory: {p} is a file")
    if not os.access(p, os.W_OK | os.X_OK):
        raise ConfigError(f"{setting}: {path} is not writable ({p}: permission denied)")


__all__ = ["ConfigError", "DataError", "import_class", "require_writable_dir"]
