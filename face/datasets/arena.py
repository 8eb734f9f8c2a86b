"""CRSArena-Dial: the raw arena conversations and the pairwise human votes between CRSs."""

from __future__ import annotations

import csv
from pathlib import Path

from face.data.io import check_file, check_type, field, read_json
from face.data.schema import ArenaDialogue, ArenaVote
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


def load_dialogues(path: str | Path) -> list[ArenaDialogue]:
    path = Path(path)
    raw = check_type(read_json(path), list, path, "top level")
    out = []
    for i, obj in enumerate(raw):
        rec = f"index {i}"
        conv_id = field(obj, "conversation ID", str, path, rec)
        rec = f"conversation {conv_id!r}"
        agent = field(obj, "agent", dict, path, rec)
        utts = tuple((field(u, "participant", str, path, f"{rec}, utterance {j}"),
                      field(u, "utterance", str, path, f"{rec}, utterance {j}"))
                     for j, u in enumerate(field(obj, "conversation", list, path, rec)))
        meta = obj.get("metadata") or {}
        out.append(ArenaDialogue(conv_id, field(agent, "id", str, path, rec), utts, meta.get("sentiment")))
    return out
