"""Errors that end a run with one line and exit code 2 (``scripts/run.py``): nothing was sent."""

from face.data.errors import DataError


class ConfigError(ValueError):
    """A setting with a value that cannot work: the message names the setting and the allowed values."""


__all__ = ["ConfigError", "DataError"]
