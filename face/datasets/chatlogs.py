"""Conversation logs in the chat format CRS builders already have, or in CRSArena-Eval's format.

Accepted (JSON or JSON Lines, detected from the content; UTF-8, with or without a byte-order mark):
- a list of conversations, each a list of messages ``{"role": "user"|"assistant"|"system", "content": str}``;
- a list (JSON) or one per line (JSONL) of objects ``{"id": str, "system": str, "messages": [...]}``
  (``id`` and ``system`` optional, or null; each a string or an integer, an integer kept as its digits);
- a message's ``content`` may also be OpenAI's multi-part form, a list of ``{"type": "text", "text": str}``
  parts: the text parts are joined with a newline (a part of another type, e.g. ``image_url``, is refused);
- CRSArena-Eval's format (objects with ``conv_id`` and ``dialogue``), read by ``face.datasets.crsarena``.

System messages are ignored; two consecutive messages of the same role, an unknown role, an empty message,
an id or system name that is not a string or an integer (true/false, 1.5, NaN, Infinity, an object, a list),
a lone surrogate escape (``"\\ud800"``), a conversation without an assistant message, an empty file or text
that is not UTF-8 raise a DataError naming the file, the conversation and the message; every bad conversation
of a file is listed in one error (``face.data.io.parse_all``). Positions count from 1: lines, conversations (an
id-less one is ``conv<position>``), messages and content parts.

The dataset ``ChatLogs`` (``conf/dataset/``): your own conversation logs (chat format or CRSArena-Eval's), evaluated
for CRSArena-Eval's aspects with their instructions. Human labels are optional: without them a run writes
predictions and the diagnostics report only.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from pydantic import model_validator

from face.aspects import Aspect, aspect_table
from face.data.io import check_text, check_type, field, json_kind, parse_all, parse_json, read_text
from face.data.schema import ASSISTANT, USER, Conversation, Turn
from face.datasets import Dataset, Selection
from face.datasets.crsarena import ASPECT_ALIASES, ASPECTS, check_unique_ids, optional_id, parse_conversation
from face.errors import DataError
from face.settings import settings

ROLES = {"user": USER, "assistant": ASSISTANT}


def _records(path: Path) -> tuple[list[tuple[str, object]], bool]:
    """(record name, raw conversation) from a JSON list, or (line name, its text) from JSON Lines; whether the
    records are lines (each parsed with the others' checks, so that one bad line hides no other bad record)."""
    text = read_text(path)
    try:
        raw = json.loads(text)
    except json.JSONDecodeError:  # not one JSON document: JSON Lines, or an error named by its line
        raw = None
    except (ValueError, RecursionError):  # well-formed up to a value Python cannot hold (4,300+ digits, nesting)
        parse_json(text, path)  # raises the DataError that says what is wrong
    if isinstance(raw, list):
        return [(f"conversation {i}", r) for i, r in enumerate(raw, start=1)], False
    if isinstance(raw, dict):
        return [("conversation 1", raw)], False
    return [(f"line {n}", line) for n, line in enumerate(text.splitlines(), start=1) if line.strip()], True


def _conversation(raw: object, path: Path, record: str, index: int, line: bool) -> Conversation:
    """One record (``line``: a JSON Lines line, parsed first): CRSArena-Eval's format or the chat format."""
    if line:
        try:
            raw = json.loads(str(raw))
        except json.JSONDecodeError as e:
            raise DataError(path, f"neither JSON nor JSON Lines: {e.msg}", record) from None
        except (ValueError, RecursionError):
            raw = parse_json(str(raw), path, record)  # raises the DataError that says what is wrong
    if isinstance(raw, dict) and "dialogue" in raw:  # CRSArena-Eval's format
        return parse_conversation(raw, path, record, require_labels=False, allow_empty_utterances=False)
    return _chat(raw, path, record, index)


def _content(content: object, path: Path, at: str) -> str:
    """A message's text: a string, or OpenAI's multi-part content (a list of ``{"type": "text", "text": ...}``
    parts), whose text parts are joined with a newline. A part of another type (``image_url``,
    ``input_audio``, ...) cannot be evaluated from text and is refused, named with its index and type."""
    if isinstance(content, list):
        texts = []
        for k, part in enumerate(content, start=1):
            where = f"{at}, content part {k}"
            if not isinstance(part, dict) or "type" not in part:
                raise DataError(path, "a content part must be an object with a 'type' (e.g. {\"type\": \"text\", "
                                      "\"text\": \"...\"})", where)
            if part["type"] != "text":
                raise DataError(path, f"content part of type {part['type']!r:.40}: only text parts can be evaluated "
                                      "(remove it, or describe it in a text part)", where)
            texts.append(check_text(field(part, "text", str, path, where), path, where))
        content = "\n".join(texts)
    elif not isinstance(content, str):
        raise DataError(path, f"content must be a string or a list of text parts, got {json_kind(content)}",
                        f"{at}, content")
    content = check_text(content, path, at)
    if not content.strip():
        raise DataError(path, "empty message", at)
    return content


def _chat(raw: object, path: Path, record: str, index: int) -> Conversation:
    """A conversation in the chat format; ``index``: its position from 1 (an id-less conversation is
    ``conv<index>``)."""
    if isinstance(raw, dict):
        conv_id = optional_id(raw, ("id", "conv_id"), path, record, "conversation id") or f"conv{index}"
        where = f"{record} ({conv_id})"
        system = optional_id(raw, ("system",), path, where, "system name") or "unknown"
        if "messages" not in raw:
            raise DataError(path, "missing key 'messages' (a list of {role, content})", where)
        messages = raw["messages"]
    else:
        conv_id, system, messages = f"conv{index}", "unknown", raw
        where = f"{record} ({conv_id})"
    check_type(messages, list, path, f"{where}, messages")
    turns: list[Turn] = []
    for j, m in enumerate(messages, start=1):
        at = f"{where}, message {j}"
        if not isinstance(m, dict) or "role" not in m or "content" not in m:
            raise DataError(path, "a message must be an object with 'role' and 'content'", at)
        role = m["role"]
        if role == "system":
            continue
        if not isinstance(role, str) or role not in ROLES:
            raise DataError(path, f"unknown role {role!r:.60} (expected user, assistant or system)", at)
        content = _content(m["content"], path, at)
        if turns and turns[-1].role == ROLES[role]:
            raise DataError(path, f"two consecutive {role} messages (merge them, or insert the missing turn)", at)
        turns.append(Turn(len(turns), ROLES[role], content))
    if not any(t.role == ASSISTANT for t in turns):
        raise DataError(path, "no assistant message: nothing to evaluate", where)
    return Conversation(conv_id, tuple(turns), system=system, split="all")


def load_logs(path: str | Path) -> list[Conversation]:
    """Every conversation of a log file (see the module doc for the formats)."""
    path = Path(path)
    if not path.exists():  # the user's own file: no "run the fetch step" hint (check_file's, for data files)
        raise DataError(path, "file not found")
    records, lines = _records(path)
    if not records:
        raise DataError(path, "contains no conversation")
    convs = parse_all(path, _conversation, [(raw, path, record, i, lines)
                                            for i, (record, raw) in enumerate(records, start=1)], "conversations")
    return check_unique_ids(convs, path)


ASPECT_KEYS = {"name", "level", "scale", "definition", "grades", "particle_definition", "instructions"}


def load_aspects(path: str | Path) -> list[Aspect]:
    """Aspects of your own (``dataset.aspects_file``): a JSON or YAML list, one object per aspect::

        - name: explainability               # a new name (not one of CRSArena-Eval's seven)
          level: turn                        # turn | dialogue
          scale: [0, 1, 2]                   # the score values, increasing integers
          definition: Does the assistant say why it recommends what it recommends?
          grades: {0: No reason., 1: A vague reason., 2: A specific reason.}   # optional: each score's meaning
          particle_definition: ...           # optional: the question asked of one particle (default: definition)
          instructions: [Rate how well ...]  # the live method's instructions for it (one or more)

    A missing or malformed entry is one DataError naming the file and the aspect."""
    from omegaconf import OmegaConf

    path = Path(path)
    if not path.is_file():
        raise DataError(path, "aspects file not found")
    if path.suffix.lower() == ".json":
        raw = parse_json(read_text(path), path)
    else:
        try:
            raw = OmegaConf.to_container(OmegaConf.load(path))
        except Exception as e:  # YAML syntax
            raise DataError(path, f"not a YAML list of aspects: {str(e).splitlines()[0]}") from None
    out = []
    for i, a in enumerate(check_type(raw, list, path, "top level"), start=1):
        where = f"aspect {i}"
        check_type(a, dict, path, where)
        name = field(a, "name", str, path, where)
        where = f"aspect {name!r}"
        a = _renamed_keys(a, path, where)
        unknown = sorted(set(a) - ASPECT_KEYS)
        if unknown:
            raise DataError(path, f"unknown key(s) {', '.join(map(str, unknown))}; an aspect has "
                                  f"{', '.join(sorted(ASPECT_KEYS))}", where)
        if name in ASPECTS or name in ASPECT_ALIASES:
            raise DataError(path, f"{name!r} is one of CRSArena-Eval's aspects: give yours another name", where)
        instructions = field(a, "instructions", list, path, where)
        if not instructions or not all(isinstance(t, str) and t.strip() for t in instructions):
            raise DataError(path, "instructions must be a non-empty list of non-empty strings", where)
        grades = check_type(a.get("grades") or {}, dict, path, f"{where}, grades")
        try:
            scale = tuple(int(v) for v in field(a, "scale", list, path, where))
            out.append(Aspect(name, field(a, "level", str, path, where), scale,
                              field(a, "definition", str, path, where), {int(k): str(v) for k, v in grades.items()},
                              str(a.get("particle_definition") or ""), tuple(instructions)))
        except (TypeError, ValueError) as e:
            raise DataError(path, str(e), where) from None
    if not out:
        raise DataError(path, "no aspect in the file")
    return out


def _renamed_keys(a: dict, path: Path, where: str) -> dict:
    """The aspect with its keys' current names: the old ``levels`` is read as ``grades`` with a warning (both at
    once: refused)."""
    if "levels" not in a:
        return a
    if "grades" in a:
        raise DataError(path, "both 'levels' and 'grades': 'levels' is the old name of 'grades'; keep one", where)
    print(f"warning: {path}: {where}: the key 'levels' is now called 'grades' (what each score means); 'levels' is "
          "read as 'grades' for now", file=sys.stderr, flush=True)
    return {("grades" if k == "levels" else k): v for k, v in a.items()}


@settings("dataset", conf="dataset/chat_logs.yaml")
class ChatLogsSettings(Selection):
    path: str | None = None  # the conversations: a JSON / JSONL file (required: ??? in conf/)
    aspects_file: str | None  # your own aspects beside CRSArena-Eval's (load_aspects)

    @model_validator(mode="after")
    def _a_path(self) -> ChatLogsSettings:
        if not self.path:
            raise ValueError("dataset.path is required: a JSON / JSONL file of conversations")
        return self


class ChatLogs(Dataset):
    aspects = ASPECTS
    aliases = ASPECT_ALIASES
    assistant = "conversational recommendation assistant"
    judged = "conversational recommender systems"

    def __init__(self, **settings: Any):
        own = ChatLogsSettings(**settings)
        super().__init__(own)
        self.path = Path(str(own.path))
        self.title = self.path.name
        if own.aspects_file:  # CRSArena-Eval's aspects and yours
            self.aspects = aspect_table([*ASPECTS.values(), *load_aspects(own.aspects_file)])
        self.is_subset = True  # never the committed results of an experiment

    def load_all(self, data_dir: Path) -> list[Conversation]:
        return load_logs(self.path)
