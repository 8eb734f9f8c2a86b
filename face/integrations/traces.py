"""How FACE reads MLflow traces: a session's traces become a chat-format conversation (the rules are in
``face.integrations.mlflow``'s doc and docs/api.md). Plain functions over the trace objects (``mlflow.entities.Trace``:
``info``, ``data.spans``), importable without MLflow."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from face.errors import DataError

SESSION_KEY = "mlflow.trace.session"  # MLflow's trace metadata of a session id
SYSTEM_KEY = "face.system"  # optional trace metadata: the system (CRS) under evaluation
USER_KEYS = ("input", "query", "question", "message", "prompt", "user_input", "request", "text", "content")
ASSISTANT_KEYS = ("content", "output", "response", "answer", "reply", "text", "message")


def _text(content: Any) -> str | None:
    """A message content as text: a string, or OpenAI's list of parts (text parts joined with a newline)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text") for p in content if isinstance(p, dict) and p.get("type") == "text"]
        return "\n".join(t for t in parts if isinstance(t, str)) or None
    return None


def _last(messages: Any, role: str) -> str | None:
    found = [m for m in messages if isinstance(m, dict) and m.get("role") == role] if isinstance(messages, list) else []
    return _text(found[-1].get("content")) if found else None


def _by_keys(value: dict, keys: Sequence[str]) -> str | None:
    for k in keys:
        v = value.get(k)
        if isinstance(v, str) and v.strip():
            return v
        if isinstance(v, dict) and _text(v.get("content")):
            return _text(v.get("content"))
    return None


def _only_string(value: dict) -> str | None:
    strings = [v for v in value.values() if isinstance(v, str) and v.strip()]
    return strings[0] if len(strings) == 1 else None


def user_text(inputs: Any) -> str | None:
    """The user's message of a trace, from its root span's inputs (rules in the module doc)."""
    if isinstance(inputs, str):
        return inputs if inputs.strip() else None
    if isinstance(inputs, list):
        return _last(inputs, "user")
    if not isinstance(inputs, dict):
        return None
    if "messages" in inputs:
        return _last(inputs["messages"], "user")
    return _by_keys(inputs, USER_KEYS) or _only_string(inputs)


def assistant_text(outputs: Any) -> str | None:
    """The assistant's message of a trace, from its root span's outputs (rules in the module doc)."""
    if isinstance(outputs, str):
        return outputs if outputs.strip() else None
    if not isinstance(outputs, dict):
        return None
    choices = outputs.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):  # an OpenAI chat completion
        text = _text((choices[0].get("message") or {}).get("content"))
        if text:
            return text
    return _by_keys(outputs, ASSISTANT_KEYS) or _last(outputs.get("messages"), "assistant") or _only_string(outputs)


def _root(trace: Any):
    spans = trace.data.spans if trace.data else []
    return next((s for s in spans if s.parent_id is None), None)


def _started(trace: Any) -> tuple:
    root = _root(trace)
    return (root.start_time_ns if root is not None else trace.info.timestamp_ms * 1_000_000, trace.info.trace_id)


def _describe(value: Any) -> str:
    if isinstance(value, dict):
        return f"an object with keys {', '.join(map(str, list(value)[:8])) or 'none'}"
    return "nothing" if value is None else f"a {type(value).__name__}"


def is_trace(t: Any) -> bool:
    """An MLflow trace as this module reads one: ``info`` (trace_id, timestamp_ms, trace_metadata) and ``data``."""
    info = getattr(t, "info", None)
    return info is not None and hasattr(t, "data") and isinstance(getattr(info, "trace_id", None), str)


def _check_traces(traces: Any) -> None:
    """A non-empty list of MLflow traces, or a DataError saying what it is instead."""
    if isinstance(traces, (str, bytes)) or not isinstance(traces, Sequence):
        raise DataError("MLflow traces", f"a list of MLflow traces (mlflow.entities.Trace) is needed, got "
                                         f"{type(traces).__name__}")
    if not traces:
        raise DataError("MLflow traces", "an empty session: no trace to evaluate")
    odd = next((i for i, t in enumerate(traces) if not is_trace(t)), None)
    if odd is not None:
        raise DataError("MLflow traces", f"item {odd} is a {type(traces[odd]).__name__}, not an MLflow trace "
                                         "(mlflow.entities.Trace: info and data)")


def conversation(traces: Sequence[Any]) -> tuple[dict, dict[str, int]]:
    """The chat-format conversation of a session's traces (rules in the module doc), and each trace's assistant
    turn index in it (traces without an assistant message are not in the map)."""
    _check_traces(traces)
    ordered = sorted(traces, key=_started)
    messages: list[dict] = []
    turn_of: dict[str, int] = {}
    for t in ordered:
        root = _root(t)
        inputs, outputs = (root.inputs, root.outputs) if root is not None else (None, None)
        if root is None and t.data is not None:  # a trace without spans: its request / response previews
            inputs, outputs = _json(t.data.request), _json(t.data.response)
        user, assistant = user_text(inputs), assistant_text(outputs)
        if user is None and assistant is None:
            raise DataError(f"MLflow trace {t.info.trace_id}", f"neither a user message nor an assistant reply: its "
                            f"input is {_describe(inputs)}, its output {_describe(outputs)} (how FACE reads a trace: "
                            "docs/api.md, 'From traces to a conversation')")
        for role, text in (("user", user), ("assistant", assistant)):
            if text is None:
                continue
            if messages and messages[-1]["role"] == role:
                messages[-1]["content"] += "\n" + text
            else:
                messages.append({"role": role, "content": text})
            if role == "assistant":
                turn_of[t.info.trace_id] = len(messages) - 1
    first = ordered[0].info
    meta = first.trace_metadata or {}
    conv = {"id": meta.get(SESSION_KEY) or first.trace_id, "messages": messages}
    if meta.get(SYSTEM_KEY):
        conv["system"] = meta[SYSTEM_KEY]
    return conv, turn_of


def _json(text: Any) -> Any:
    try:
        return json.loads(text) if isinstance(text, str) else text
    except ValueError:
        return text
