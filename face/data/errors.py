"""One error type for every bad input file, always naming the file and the record."""

from __future__ import annotations

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
