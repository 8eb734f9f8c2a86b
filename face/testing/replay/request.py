"""A chat-completion request body checked field by field before anything is read from it (``ChatBody.of``): a
wrong JSON type or a value out of range is a ``Refusal`` (HTTP 400) naming the field (``param``), never a server
error. Fields the replay does not use (temperature, stop, …) are ignored."""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from face.errors import type_name

from .reader import Refusal

MAX_N = 128  # choices per request (OpenAI's limit; the client's llm.n_per_request for the replay)
MAX_TOP_LOGPROBS = 20
MAX_SEED = 2 ** 63  # |seed| below this (a 64-bit integer)
RESPONSE_FORMATS = ("text", "json_object", "json_schema")


def _shown(value: Any) -> str:
    """A short scalar as JSON (42 characters at most), anything else by its JSON type."""
    text = json.dumps(value) if isinstance(value, int | float | str) else ""
    return text if 0 < len(text) <= 42 else type_name(type(value))


def _invalid(param: str, wanted: str, value: Any, code: str = "invalid_type") -> Refusal:
    return Refusal(code, f"{param} must be {wanted}, got {_shown(value)}", param=param)


def _integer(body: dict, key: str, default: int | None, lo: int, hi: int, wanted: str = "") -> int | None:
    value = body.get(key)
    if value is None:
        return default
    wanted = wanted or f"an integer from {lo} to {hi}"
    if type(value) is not int:
        raise _invalid(key, wanted, value)
    if not lo <= value <= hi:
        raise _invalid(key, wanted, value, "invalid_value")
    return value


def _flag(body: dict, key: str) -> bool:
    value = body.get(key)
    if value is not None and not isinstance(value, bool):
        raise _invalid(key, "a boolean", value)
    return bool(value)


def _messages(body: dict) -> list[dict]:
    messages = body.get("messages")
    if messages is None or messages == []:
        raise Refusal("no_prompt", "the request has no messages", param="messages")
    if not isinstance(messages, list):
        raise _invalid("messages", "an array of messages", messages)
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise _invalid(f"messages[{i}]", "an object with a role and a content", m)
        if not isinstance(m.get("role"), str):
            raise _invalid(f"messages[{i}].role", "a string", m.get("role"))
        content = m.get("content")
        if isinstance(content, list):
            for j, part in enumerate(content):
                if not isinstance(part, dict) or not isinstance(part.get("text", ""), str):
                    raise _invalid(f"messages[{i}].content[{j}]", "an object with a string text", part)
        elif content is not None and not isinstance(content, str):
            raise _invalid(f"messages[{i}].content", "a string, an array of parts or null", content)
    return messages


def _response_format(body: dict) -> dict | None:
    rf = body.get("response_format")
    if rf is None or rf == {}:
        return None
    if not isinstance(rf, dict):
        raise _invalid("response_format", "an object", rf)
    if rf.get("type") not in RESPONSE_FORMATS:
        raise Refusal("invalid_value", f"response_format.type must be one of {', '.join(RESPONSE_FORMATS)}, got "
                                       f"{str(rf.get('type'))[:40]!r}", param="response_format.type")
    return rf


@dataclass(frozen=True)
class ChatBody:
    """What the replay reads of a request body, checked."""

    messages: list[dict]
    n: int
    seed: int
    max_tokens: int | None
    logprobs: bool
    top_logprobs: int
    response_format: dict | None
    model: str | None

    @classmethod
    def of(cls, body: Any) -> ChatBody:
        """The checked body, or Refusal (``invalid_type``, ``invalid_value``, ``no_prompt``, ``unsupported``)."""
        if not isinstance(body, dict):
            raise Refusal("invalid_type", f"the request body must be a JSON object, got {type_name(type(body))}")
        if _flag(body, "stream"):
            raise Refusal("unsupported", "stream=true is not served: the replay answers whole completions",
                          param="stream")
        model = body.get("model")
        if model is not None and not isinstance(model, str):
            raise _invalid("model", "a string", model)
        return cls(messages=_messages(body), n=_integer(body, "n", 1, 1, MAX_N) or 1,
                   seed=_integer(body, "seed", 0, -MAX_SEED, MAX_SEED - 1, "a 64-bit integer") or 0,
                   max_tokens=_integer(body, "max_tokens", None, 1, MAX_SEED - 1, "a positive integer"),
                   logprobs=_flag(body, "logprobs"),
                   top_logprobs=_integer(body, "top_logprobs", 0, 0, MAX_TOP_LOGPROBS) or 0,
                   response_format=_response_format(body), model=model)
