"""Conversation logs in the chat format CRS builders already have, or in CRSArena-Eval's format.

Accepted (JSON or JSON Lines, detected from the content):
- a list of conversations, each a list of messages ``{"role": "user"|"assistant"|"system", "content": str}``;
- a list (JSON) or one per line (JSONL) of objects ``{"id": str, "system": str, "messages": [...]}``
  (``id`` and ``system`` optional);
- CRSArena-Eval's format (objects with ``conv_id`` and ``dialogue``), read by ``face.datasets.crsarena``.

System messages are ignored; two consecutive messages of the same role, an unknown role, an empty message,
a conversation without an assistant message, an empty file or text that is not UTF-8 raise one DataError
naming the file, the conversation and the message index.

The dataset ``ChatLogs`` (``conf/dataset/``): your own conversation logs (chat format or CRSArena-Eval's), evaluated
for CRSArena-Eval's aspects with their instructions. Human labels are optional: without them a run writes
predictions and the diagnostics report only.
"""

from __future__ import annotations

import json
from pathlib import Path

from face.data.io import check_file, check_type
from face.data.schema import ASSISTANT, USER, Conversation, Turn
from face.datasets import Dataset
from face.datasets.crsarena import ASPECT_ALIASES, ASPECTS, check_unique_ids, parse_conversation
from face.errors import DataError

ROLES = {"user": USER, "assistant": ASSISTANT}


def _records(path: Path) -> list[tuple[str, object]]:
    """(record name, raw conversation) from a JSON list or JSON Lines."""
    check_file(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise DataError(path, f"not UTF-8 text: {e.reason}") from None
    if not text.strip():
        raise DataError(path, "contains no conversation")
    try:
        raw = json.loads(text)
    except json.JSONDecodeError:
        raw = None
    if isinstance(raw, list):
        return [(f"conversation {i}", r) for i, r in enumerate(raw)]
    if isinstance(raw, dict):
        return [("conversation 0", raw)]
    out = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            out.append((f"line {lineno}", json.loads(line)))
        except json.JSONDecodeError as e:
            raise DataError(path, f"neither JSON nor JSON Lines: {e.msg}", f"line {lineno}") from None
    return out


def _chat(raw: object, path: Path, record: str, index: int) -> Conversation:
    if isinstance(raw, dict):
        conv_id = str(raw.get("id") or raw.get("conv_id") or f"conv{index}")
        system = str(raw.get("system") or "unknown")
        if "messages" not in raw:
            raise DataError(path, "missing key 'messages' (a list of {role, content})", f"{record} ({conv_id})")
        messages = raw["messages"]
    else:
        conv_id, system, messages = f"conv{index}", "unknown", raw
    where = f"{record} ({conv_id})"
    check_type(messages, list, path, f"{where}, messages")
    turns: list[Turn] = []
    for j, m in enumerate(messages):
        at = f"{where}, message {j}"
        if not isinstance(m, dict) or "role" not in m or "content" not in m:
            raise DataError(path, "a message must be an object with 'role' and 'content'", at)
        role = m["role"]
        if role == "system":
            continue
        if role not in ROLES:
            raise DataError(path, f"unknown role {role!r} (expected user, assistant or system)", at)
        content = check_type(m["content"], str, path, f"{at}, content")
        if not content.strip():
            raise DataError(path, "empty message", at)
        if turns and turns[-1].role == ROLES[role]:
            raise DataError(path, f"two consecutive {role} messages (merge them, or insert the missing turn)", at)
        turns.append(Turn(len(turns), ROLES[role], content))
    if not any(t.role == ASSISTANT for t in turns):
        raise DataError(path, "no assistant message: nothing to evaluate", where)
    return Conversation(conv_id, tuple(turns), system=system, split="all")


def load_logs(path: str | Path) -> list[Conversation]:
    """Every conversation of a log file (see the module doc for the formats)."""
    path = Path(path)
    records = _records(path)
    if not records:
        raise DataError(path, "contains no conversation")
    convs = []
    for i, (record, raw) in enumerate(records):
        if isinstance(raw, dict) and "dialogue" in raw:  # CRSArena-Eval's format
            convs.append(parse_conversation(raw, path, record, require_labels=False))
        else:
            convs.append(_chat(raw, path, record, i))
    return check_unique_ids(convs, path)


class ChatLogs(Dataset):
    aspects = ASPECTS
    aliases = ASPECT_ALIASES
    assistant = "conversational recommendation assistant"
    judged = "conversational recommender systems"

    def __init__(self, name: str = "chat_logs", path: str | None = None, **selection):
        if not path:
            raise ValueError("dataset.path is required: a JSON / JSONL file of conversations")
        super().__init__(name, **selection)
        self.path = Path(path)
        self.title = self.path.name

    @property
    def is_subset(self) -> bool:
        return True  # never the committed results of an experiment

    def load_all(self, data_dir: Path) -> list[Conversation]:
        return load_logs(self.path)
