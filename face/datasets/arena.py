"""CRSArena-Dial: the pairwise human votes between CRSs."""

from __future__ import annotations

import csv
from pathlib import Path

from face.data.io import check_file
from face.data.schema import ArenaVote
from face.errors import DataError

_VOTE_COLUMNS = ("session_id", "user_id", "crs1", "crs2", "vote")


def load_votes(path: str | Path, source: str) -> list[ArenaVote]:
    """Pairwise votes; ``vote`` is the winning CRS id or ``tie``."""
    path = Path(path)
    check_file(path)
    with open(path, encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in _VOTE_COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise DataError(path, f"missing columns {missing}", "header")
        out = []
        for lineno, row in enumerate(reader, start=2):
            vote = (row["vote"] or "").strip()
            if vote not in ("tie", row["crs1"], row["crs2"]):
                raise DataError(path, f"vote {vote!r} is neither 'tie' nor one of the two CRSs", f"line {lineno}")
            out.append(ArenaVote(row["session_id"], row["user_id"], row["crs1"], row["crs2"],
                                 None if vote == "tie" else vote, source))
    return out

