"""CRSArena-Eval: 467 conversations with 9 CRSs, turn- and dialogue-level human labels."""

from __future__ import annotations

from pathlib import Path

from face.aspects import ASPECTS, UNREPORTED_DIALOGUE_LABELS, canonical_aspect
from face.data.errors import DataError
from face.data.io import check_type, field, read_json
from face.data.schema import ASSISTANT, USER, Conversation, Turn

_KNOWN_DIALOGUE_LABELS = {a for a, s in ASPECTS.items() if s.level == "dialogue"} | set(UNREPORTED_DIALOGUE_LABELS)
_KNOWN_TURN_LABELS = {a for a, s in ASPECTS.items() if s.level == "turn"}


def _labels(raw: dict, known: set[str], path: Path, record: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for name, value in raw.items():
        canon = {"dialog_overall": "dialogue_overall", "overall_impression": "dialogue_overall"}.get(name, name)
        if canon not in known:
            raise DataError(path, f"unknown aspect {name!r} (known: {', '.join(sorted(known))})", record)
        out[canon] = float(check_type(value, float, path, f"{record}, label {name!r}"))
    return out


def parse_conversation(raw: object, path: Path, record: str, require_labels: bool = True) -> Conversation:
    conv_id = field(raw, "conv_id", str, path, record)
    record = f"conversation {conv_id!r}"
    dialogue = field(raw, "dialogue", list, path, record)
    if not dialogue:
        raise DataError(path, "empty dialogue", record)
    turns = []
    for i, t in enumerate(dialogue):
        rec = f"{record}, turn {i}"
        role = field(t, "role", str, path, rec)
        if role not in (USER, ASSISTANT):
            raise DataError(path, f"unknown role {role!r} (expected {USER!r} or {ASSISTANT!r})", rec)
        labels = t.get("turn_level_aggregated") or {}
        check_type(labels, dict, path, rec + ", turn_level_aggregated")
        turns.append(Turn(
            turn_ind=field(t, "turn_ind", int, path, rec),
            role=role,
            utterance=field(t, "utterance", str, path, rec),
            labels=_labels(labels, _KNOWN_TURN_LABELS, path, rec),
        ))
    for prev, cur in zip(turns, turns[1:]):
        if prev.role == cur.role:
            raise DataError(path, f"roles do not alternate: turns {prev.turn_ind} and {cur.turn_ind} are both "
                                  f"{cur.role}", record)
    if len({t.turn_ind for t in turns}) != len(turns):
        raise DataError(path, "duplicate turn_ind", record)
    if require_labels:
        dial_labels = field(raw, "dial_level_aggregated", dict, path, record)
    else:
        dial_labels = check_type(raw.get("dial_level_aggregated") or {}, dict, path, record)
    return Conversation(conv_id, tuple(turns), _labels(dial_labels, _KNOWN_DIALOGUE_LABELS, path, record))


def load_conversations(path: str | Path, require_labels: bool = True) -> list[Conversation]:
    """Load CRSArena-Eval (or any file in its format: a JSON list of conversations)."""
    path = Path(path)
    raw = read_json(path)
    check_type(raw, list, path, "top level")
    convs = [parse_conversation(c, path, f"index {i}", require_labels) for i, c in enumerate(raw)]
    seen: set[str] = set()
    for c in convs:
        if c.conv_id in seen:
            raise DataError(path, "duplicate conversation id", f"conversation {c.conv_id!r}")
        seen.add(c.conv_id)
    return convs


def select(convs: list[Conversation], systems: list[str] | None = None, splits: list[str] | None = None,
           limit: int | None = None) -> list[Conversation]:
    """A subset: by system (``kbrd`` or a CRS ``kbrd_redial``), by split, then the first ``limit``."""
    out = convs
    if systems:
        out = [c for c in out if c.system in systems or c.crs in systems]
    if splits:
        out = [c for c in out if c.split in splits]
    if limit is not None:
        out = out[:limit]
    return out


__all__ = ["load_conversations", "parse_conversation", "select", "canonical_aspect"]
