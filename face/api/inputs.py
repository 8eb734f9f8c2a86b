"""The conversations of ``face.evaluate`` / ``face.estimate`` / ``face evaluate`` as the input of a run: a file (the
caller's), in-memory conversations written to a temporary file, or a dataset of ``conf/dataset/`` by name; checked
as ``face evaluate`` checks a file, before anything is written."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union

import pandas as pd

from face.errors import ConfigError, DataError, closest_first
from face.settings import CONF

IN_MEMORY = "conversations (in memory)"

# conversations: a JSON / JSONL file (chat format or CRSArena-Eval's), chat-format dicts, bare message lists,
# face.data.schema.Conversation objects, or a DataFrame of messages (one row each: conv_id, role, content)
Conversations = Union[str, os.PathLike, Sequence[Any], "pd.DataFrame"]


@dataclass(frozen=True)
class Source:
    """Where the conversations come from: a file (the caller's, or the in-memory input written to a temporary file)
    or, with ``dataset``, a dataset of ``conf/dataset/`` by name (``crsarena_eval``)."""

    path: Path | None
    dataset: str | None = None


def _frame_records(df: pd.DataFrame) -> list[dict]:
    """A DataFrame of messages, one row each in order: ``conv_id`` (or ``id``), ``role`` (user / assistant /
    system), ``content`` (or ``utterance``), optionally ``system`` (the CRS's name)."""
    id_col = next((c for c in ("conv_id", "id") if c in df.columns), None)
    text_col = next((c for c in ("content", "utterance") if c in df.columns), None)
    missing = [what for what, col in (("conv_id (or id)", id_col), ("role", "role" if "role" in df.columns else None),
                                      ("content (or utterance)", text_col)) if col is None]
    if missing:
        raise DataError(IN_MEMORY, f"a DataFrame of messages needs the columns {', '.join(missing)} (one row per "
                                   f"message, in order); it has {', '.join(map(str, df.columns))}")
    convs: dict[str, dict] = {}
    for i, values in enumerate(df.to_dict("records")):
        cid = values[id_col]
        if not isinstance(cid, (str, int)) or isinstance(cid, bool):
            raise DataError(IN_MEMORY, f"conversation id {cid!r:.40} is not a string or an integer", f"row {i}")
        conv = convs.setdefault(str(cid), {"id": str(cid), "messages": []})
        if "system" in df.columns and values["system"] is not None and values["system"] == values["system"]:
            conv["system"] = values["system"]
        conv["messages"].append({"role": values["role"], "content": values[text_col]})
    return list(convs.values())


def _record(c: Any) -> Any:
    """A ``Conversation`` in CRSArena-Eval's format, labels included; anything else as given."""
    from face.data.schema import Conversation

    if not isinstance(c, Conversation):
        return c
    return {"conv_id": c.conv_id, "system": c.system or None, "dialogue": [
        {"turn_ind": t.turn_ind, "role": t.role, "utterance": t.utterance,
         **({"turn_level_aggregated": t.labels} if t.labels else {})} for t in c.turns],
        **({"dial_level_aggregated": c.labels} if c.labels else {})}


def source_of(conversations: Conversations, tmp: Path) -> tuple[Source, list]:
    """The source the run reads and its conversations, checked as ``face evaluate`` checks a file, before anything
    is written (a dataset's: none here, the run loads them once its files are fetched). An in-memory input is written
    to ``tmp`` (as JSON with every non-ASCII character escaped: the loader then reads it as it reads a file, and
    refuses invalid Unicode the same way) and named as such in a refusal."""
    from face.datasets.chatlogs import load_logs

    if isinstance(conversations, (str, os.PathLike)):
        source = _file_or_dataset(conversations)
        return source, [] if source.path is None else load_logs(source.path)
    if isinstance(conversations, pd.DataFrame):
        records = _frame_records(conversations)
    elif isinstance(conversations, Sequence) and not isinstance(conversations, (bytes, str)):
        records = [_record(c) for c in conversations]
    else:
        raise ConfigError(f"conversations must be a path, a dataset name, a list of conversations or a DataFrame of "
                          f"messages, got {type(conversations).__name__}")
    if not records:
        raise DataError(IN_MEMORY, "contains no conversation")
    path = tmp / "conversations.json"
    try:
        text = json.dumps(records, ensure_ascii=True, indent=1, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise DataError(IN_MEMORY, f"not JSON-serializable: {e}") from None
    path.write_text(text, encoding="ascii")
    try:
        return Source(path), load_logs(path)
    except DataError as e:
        raise DataError(IN_MEMORY, e.problem, e.record) from None


def _file_or_dataset(conversations: str | os.PathLike) -> Source:
    name = os.fspath(conversations)
    if isinstance(name, bytes) or not name.strip():
        raise ConfigError("conversations: the path is empty" if not isinstance(name, bytes) else
                          "conversations: give the path as a string, not bytes")
    path = Path(name).expanduser()
    if path.exists():  # a file wins over a dataset of its name
        return Source(path.resolve())
    datasets = sorted(p.stem for p in (CONF / "dataset").glob("*.yaml") if p.stem != "chat_logs")
    if name not in datasets:
        raise DataError(path, f"file not found (nor is it the name of a dataset; datasets, closest first: "
                              f"{', '.join(closest_first(path.name, datasets))})")
    return Source(None, dataset=name)
