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


@cache
def _sections(name: str) -> tuple[tuple[str, Template], ...]:
    parts = _SECTION.split(template_text(name))
    out = tuple((role, Template(body.strip())) for role, body in zip(parts[1::2], parts[2::2]))
    if not out:
        raise ValueError(f"prompt template {name!r} has no [system]/[user] sections")
    return out


def render(name: str, **values: object) -> tuple[tuple[str, str], ...]:
    """Chat messages from template ``name``; every placeholder must be given (KeyError otherwise)."""
    strings = {k: str(v) for k, v in values.items()}
    return tuple((role, t.substitute(strings)) for role, t in _sections(name))


def initial_instruction(aspect: str) -> str:
    """Our aspect-specific initial instruction (``face/prompts/initial/<aspect>.txt``)."""
    return template_text(f"initial/{aspect}.txt").strip()


def generic_instruction(aspect: str) -> str:
    """The paper's aspect-agnostic initial instruction (three steps), in our words: "FACE w/o train"."""
    return Template(template_text("initial/generic.txt").strip()).substitute(aspect=aspect.replace("_", " "))


_PARTICLE_WORDS = re.compile(r"\b(?:(an?)(\s+))?(nugget|particle)(s?)\b", re.IGNORECASE)


def unit_wording(text: str, level: str) -> str:
    """An instruction written for particles, reworded for a whole turn / dialogue (the no-particles
    ablation): every "nugget" / "particle" becomes "assistant turn" (turn level) or "dialogue", and the article
    before it follows ("a nugget" -> "an assistant turn")."""
    noun = "assistant turn" if level == "turn" else "dialogue"

    def cased(word: str, like: str) -> str:
        return word[0].upper() + word[1:] if like[0].isupper() else word

    def sub(m: re.Match) -> str:
        article, space, original, plural = m.groups()
        word = cased(noun + plural, original)
        return cased("an" if noun[0] in "aeiou" else "a", article) + space + word if article else word

    return _PARTICLE_WORDS.sub(sub, text)
