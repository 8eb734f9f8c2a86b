"""Prompt templates as files: ``[system]`` / ``[user]`` sections with ``$name`` placeholders."""

from __future__ import annotations

import re
from functools import cache
from importlib import resources
from string import Template

_SECTION = re.compile(r"^\[(system|user|assistant)\]\s*$", re.MULTILINE)


@cache
def template_text(name: str) -> str:
    return resources.files("face.prompts").joinpath(name).read_text(encoding="utf-8")


def render(name: str, **values: object) -> tuple[tuple[str, str], ...]:
    """Chat messages from template ``name``; every placeholder must be given (KeyError otherwise)."""
    text = template_text(name)
    parts = _SECTION.split(text)
    messages = []
    for role, body in zip(parts[1::2], parts[2::2]):
        messages.append((role, Template(body.strip()).substitute({k: str(v) for k, v in values.items()})))
    if not messages:
        raise ValueError(f"prompt template {name!r} has no [system]/[user] sections")
    return tuple(messages)


def initial_instruction(aspect: str) -> str:
    return template_text(f"initial/{aspect}.txt").strip()
