"""Low-level readers that turn every parse or shape problem into a DataError naming file and record."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Iterator

from face.errors import DataError


def check_file(path: Path) -> None:
    """An existing, readable, non-empty regular file (not a directory, device or pipe), or a DataError."""
    if not path.exists():
        raise DataError(path, "file not found (run the fetch step, or set FACE_DATA_DIR / FACE_DATA_MIRROR)")
    if path.is_dir():
        raise DataError(path, "is a directory, not a file")
    if not path.is_file():
        raise DataError(path, "is not a regular file (a device, pipe or socket)")
    if not os.access(path, os.R_OK):
        raise DataError(path, "is not readable (permission denied)")
    if path.stat().st_size == 0:
        raise DataError(path, "is empty")


def read_json(path: str | Path) -> Any:
    path = Path(path)
    check_file(path)
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        raise DataError(path, f"malformed JSON: {e.msg}", f"line {e.lineno}, column {e.colno}") from None
    except UnicodeDecodeError as e:
        raise DataError(path, f"not UTF-8 text: {e.reason}") from None


def read_jsonl(path: str | Path) -> Iterator[tuple[int, Any]]:
    """Yield (line number, parsed object) for each non-empty line."""
    path = Path(path)
    check_file(path)
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                yield lineno, json.loads(line)
            except json.JSONDecodeError as e:
                raise DataError(path, f"malformed JSON: {e.msg}", f"line {lineno}") from None


_TYPE_NAMES = {str: "a string", int: "an integer", float: "a number", list: "a list", dict: "an object",
               bool: "a boolean"}


def field(obj: Any, key: str, kind: type | tuple[type, ...], path: str | Path, record: str) -> Any:
    """``obj[key]``, checked to exist and to be of ``kind`` (ints count as numbers, bools never do)."""
    if not isinstance(obj, dict):
        raise DataError(path, f"expected an object, got {type(obj).__name__}", record)
    if key not in obj:
        raise DataError(path, f"missing key {key!r}", record)
    return check_type(obj[key], kind, path, f"{record}, key {key!r}")


def check_type(value: Any, kind: type | tuple[type, ...], path: str | Path, record: str) -> Any:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if float in kinds:
        kinds = kinds + (int,)
    ok = isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds)
    if not ok:
        want = " or ".join(_TYPE_NAMES.get(k, k.__name__) for k in (kind if isinstance(kind, tuple) else (kind,)))
        raise DataError(path, f"expected {want}, got {type(value).__name__} {value!r:.60}", record)
    return value


def as_int(value: Any, path: str | Path, record: str) -> int:
    """An integer, also accepted as a decimal string (JSON object keys are strings)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    raise DataError(path, f"expected an integer index, got {value!r:.60}", record)


def check_label(value: Any, scale: tuple[float, ...] | None, path: str | Path, record: str) -> float:
    """A human label: a finite number within the aspect's scale [min, max] (labels may be means of ratings)."""
    v = float(check_type(value, float, path, record))
    if not math.isfinite(v):
        raise DataError(path, f"label is {value!r}; expected a finite number", record)
    if scale and not min(scale) <= v <= max(scale):
        raise DataError(path, f"label {v:g} is outside the aspect's scale {min(scale):g}..{max(scale):g}", record)
    return v
