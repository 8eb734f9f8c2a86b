"""Low-level readers that turn every parse or shape problem into a DataError naming file and record."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from face.errors import DataError, type_name


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


def read_text(path: str | Path) -> str:
    """The file's text, decoded as UTF-8; a leading byte-order mark is dropped (editors on Windows and Excel's
    "CSV UTF-8" write one), any other undecodable byte is a DataError naming its line."""
    path = Path(path)
    check_file(path)
    data = path.read_bytes()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise DataError(path, f"not UTF-8 text: {e.reason} (byte 0x{data[e.start]:02x})", f"line {line}") from None


def parse_json(text: str, path: str | Path, record: str | None = None) -> Any:
    """``json.loads``, with every way it can fail as a DataError: malformed text, an integer of more digits than
    Python converts (a ValueError, not a JSONDecodeError) or nesting deeper than the parser's recursion."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise DataError(path, f"malformed JSON: {e.msg}", record or f"line {e.lineno}, column {e.colno}") from None
    except RecursionError:
        raise DataError(path, "malformed JSON: nested too deeply", record) from None
    except ValueError as e:  # e.g. "Exceeds the limit (4300 digits) for integer string conversion"
        raise DataError(path, f"malformed JSON: {str(e).splitlines()[0].split(';')[0]}", record) from None


def read_json(path: str | Path) -> Any:
    return parse_json(read_text(path), Path(path))


def read_jsonl(path: str | Path) -> Iterator[tuple[int, Any]]:
    """Yield (line number, parsed object) for each non-empty line, reading line by line (score files are
    large); a leading byte-order mark is dropped, an undecodable line is a DataError naming it."""
    path = Path(path)
    check_file(path)
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
            except UnicodeDecodeError as e:
                raise DataError(path, f"not UTF-8 text: {e.reason}", f"line {lineno}") from None
            if line.strip():
                yield lineno, parse_json(line, path, f"line {lineno}")


def field(obj: Any, key: str, kind: type | tuple[type, ...], path: str | Path, record: str) -> Any:
    """``obj[key]``, checked to exist and to be of ``kind`` (ints count as numbers, bools never do)."""
    if not isinstance(obj, dict):
        raise DataError(path, f"expected an object, got {type(obj).__name__}", record)
    if key not in obj:
        raise DataError(path, f"missing key {key!r}", record)
    return check_type(obj[key], kind, path, f"{record}, key {key!r}")


def check_type(value: Any, kind: type | tuple[type, ...], path: str | Path, record: str) -> Any:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    numbers = (int,) if float in kinds else ()  # ints count as numbers
    if not isinstance(value, kinds + numbers) or (isinstance(value, bool) and bool not in kinds):
        want = " or ".join(type_name(k) for k in kinds)
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


def json_kind(value: Any) -> str:
    """How a JSON value reads in an error message: ``NaN``, ``Infinity``, ``a number (1.5)``, ``an object``..."""
    if value is None or isinstance(value, bool) or (isinstance(value, float) and not math.isfinite(value)):
        return json.dumps(value)  # null, true, false, NaN, Infinity, -Infinity
    if isinstance(value, float):
        return f"a non-integer number ({value!r})"
    return f"{type_name(type(value))} {value!r:.60}"


def check_text(value: Any, path: str | Path, record: str) -> str:
    """A string that can be written out as UTF-8. JSON's escapes can spell a lone surrogate (``"\\ud800"``),
    which Python reads into a ``str`` but cannot encode: refused here, at load time, rather than as an
    encoding error half way through a run."""
    check_type(value, str, path, record)
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise DataError(path, f"a lone surrogate {value[e.start]!r} at character {e.start} (invalid Unicode: a "
                              "\\uD800-\\uDFFF escape without its pair)", record) from None
    return value


def as_id(value: Any, path: str | Path, record: str, what: str) -> str:
    """An identifier (conversation id, system name) as text: a non-empty string, kept as it is, or an integer,
    kept as its decimal digits (``0`` is ``"0"``). Anything else -- true/false, a non-integer number, NaN,
    Infinity, null, an object, a list -- is a DataError, never stringified into an id nobody wrote."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, str):
        raise DataError(path, f"{what} must be a string or an integer, got {json_kind(value)}", record)
    if not value.strip():
        raise DataError(path, f"empty {what}", record)
    return check_text(value, path, record)


MAX_REPORTED = 20  # bad records of one file listed in one error (the rest counted)


def parse_all(path: str | Path, parse: Callable[..., Any], records: Iterable[tuple], what: str = "records"
              ) -> list:
    """``parse(*record)`` of every record; the DataErrors of the bad ones collected so that one error lists them all
    (``raise_all``): a user fixes every bad conversation of a file in one go, not one per run. Positions are counted
    from 1 in every message (lines, conversations, messages, turns, content parts); the data's own ``turn_ind`` is
    named as such."""
    out, errors = [], []
    for record in records:
        try:
            out.append(parse(*record))
        except DataError as e:
            errors.append(e)
    raise_all(path, errors, what)
    return out


def raise_all(path: str | Path, errors: list[DataError], what: str) -> None:
    """Nothing if no record was bad; the error itself for one; one DataError listing each (up to ``MAX_REPORTED``)
    for several."""
    if len(errors) == 1:
        raise errors[0]
    if errors:
        shown = "".join(f"\n  [{e.record or 'file'}] {e.problem}" for e in errors[:MAX_REPORTED])
        more = len(errors) - MAX_REPORTED
        raise DataError(path, f"{len(errors)} {what} are malformed (fix them all, then rerun):{shown}"
                              + (f"\n  … and {more} more" if more > 0 else ""))
