"""Reading a FACE prompt the way an LLM reads it: its sections by their headings, the dialogue or the turn with its
history and the user's response, the particle, the instruction, the aspect and its scale (``read_prompt``), all
whitespace-normalised (``norm``). Nothing of the project's prompt code is used."""
from __future__ import annotations

import re
from dataclasses import dataclass

from ..service import RequestError

NO_TURNS = "(no earlier turns)"
NO_NEXT = ("N/A", "(the conversation ended here)", "")

_COPY_MARK = re.compile(r"(?:^| )\(copy \d+\)(?= |$)")


def norm(text: str) -> str:
    """Whitespace-normalised text: how the replay compares what a prompt shows with the data. The mark of a
    conversation copy (``dataset.repeat``: " (copy k)" after every utterance) is dropped: a copy reads as its
    original (and is judged as it)."""
    s = " ".join(text.split())
    return _COPY_MARK.sub("", s) if "(copy " in s else s


class Refusal(RequestError):
    """A request the replay cannot answer: HTTP 400 with ``code`` and a message that says why (``param``: the field
    of the request body at fault, where one is)."""


# ------------------------------------------------------------------ what a prompt shows
@dataclass
class View:
    kind: str  # "score" | "decompose"
    level: str  # "turn" | "dialogue" (decomposition: "turn")
    style: str  # "numbered" (Turn N - ROLE: text, one line per turn) | "speaker" (User: / Assistant: text)
    target_turn: int | None = None  # the turn number shown with the target turn, if any
    target_text: str | None = None
    history: str | None = None  # normalised section
    next_user: str | None = None  # normalised; "" when the prompt says there is none
    dialogue: str | None = None  # normalised full dialogue
    aspect: str | None = None
    scale: tuple[int, int] | None = None
    instruction: str | None = None  # normalised
    whole: bool = False  # a whole turn / dialogue instead of a particle
    particle: tuple[str, str, str] | None = None  # dialogue act, mention, user feedback (normalised)
    particle_turn: int | None = None  # "(from assistant turn N)" in dialogue-level prompts
    particle_nth: int | None = None  # "(from the assistant's 2nd turn)": its k-th turn, counted from 1
    history_window: int | None = None  # turns of history the prompt says it shows (None: all earlier turns)


_LAST = "\x00last:"  # marker prefix: the last occurrence after the previous marker (targets follow instructions)
_FAMILIES: dict[str, tuple[str, str, str, str, int | None, dict[str, str]]] = {
    # name: (what only its prompt shows, in the order tried; kind, level, style, history window,
    #        {section: the heading it follows, in order})
    "score_turn_reasoning": ("Current assistant turn:\n", "score", "turn", "numbered", 2, {
        "history": "\n\nDialogue history (the two turns before the current one):\n",
        "target": "\n\nCurrent assistant turn:\n", "next": "\n\nUser's response:\n", "aspect": "\n\nAspect: ",
        "instruction": "\n\nInstruction:\n", "particle": _LAST + "\n\nTarget",
        "tail": _LAST + "\n\nFollow the instruction"}),
    "score_dialogue_reasoning": ("Full dialogue:\n", "score", "dialogue", "numbered", None, {
        "dialogue": "\n\nFull dialogue:\n", "aspect": "\n\nAspect: ", "instruction": "\n\nInstruction:\n",
        "particle": _LAST + "\n\nTarget", "tail": _LAST + "\n\nFollow the instruction"}),
    "score_turn_compact": ("Context (the two turns before the assistant turn):\n", "score", "turn", "speaker", 2, {
        "aspect": "\n\nAspect: ", "history": "\n\nContext (the two turns before the assistant turn):\n",
        "target": "\n\nAssistant turn:\n", "next": "\n\nUser's next turn:\n", "instruction": "\n\nInstruction:\n",
        "particle": _LAST + "\n\nParticle to rate:\n", "tail": _LAST + "\n\nAnswer with JSON"}),
    "decompose_compact": ("Assistant turn to split:\n", "decompose", "turn", "speaker", None, {
        "history": "\n\nConversation so far:\n", "target": "\n\nAssistant turn to split:\n",
        "next": "\n\nThe user's next turn (their reaction):\n", "task": "\n\nSplit the assistant turn"}),
    "decompose_reasoning": ("Target assistant turn:\n", "decompose", "turn", "numbered", None, {
        "history": "\n\nDialogue history:\n", "target": "\n\nTarget assistant turn:\n",
        "next": "\n\nUser's response:\n", "task": "\n\nYour task:"}),
    "score_dialogue_compact": ("\nDialogue:\n", "score", "dialogue", "speaker", None, {
        "aspect": "\n\nAspect: ", "dialogue": "\n\nDialogue:\n", "instruction": "\n\nInstruction:\n",
        "particle": _LAST + "\n\nParticle to rate", "tail": _LAST + "\n\nAnswer with JSON"}),
}
_SCORE_FORMAT = re.compile(r'\{"score": <integer from (-?\d+) to (-?\d+)>\}')
_NUMBERED = re.compile(r"^Turn (\d+) - (USER|ASST):(.*)$", re.DOTALL)
_PARTICLE = re.compile(r"- dialogue act:[ ]?(.*?)\n- mention:[ ]?(.*?)\n- user feedback:[ ]?(.*)", re.DOTALL)
_FROM_TURN = re.compile(r"\(from assistant turn (\d+)\)")
_NTH_TURN = re.compile(r"\(from the assistant's (\d+)(?:st|nd|rd|th) turn\)")
_ASPECT = re.compile(r"([a-z][a-z ]*?)(?: — .*)?$", re.DOTALL)


def _sections(text: str, headings: dict[str, str]) -> dict[str, str] | None:
    """Each section's text: after its heading, up to the next one; None if a heading is missing or out of order."""
    text = "\n\n" + text
    bounds: list[tuple[int, int]] = []  # (start, end) of each heading
    pos = 0
    for h in headings.values():
        i = text.rfind(h.removeprefix(_LAST)) if h.startswith(_LAST) else text.find(h, pos)
        if i < pos:
            return None
        pos = i + len(h.removeprefix(_LAST))
        bounds.append((i, pos))
    stops = [start for start, _ in bounds[1:]] + [len(text)]
    return {name: text[end:stop] for name, (_, end), stop in zip(headings, bounds, stops, strict=True)}


def _unquote(s: str) -> str:
    s = s.strip()
    if s.startswith('"""') and s.endswith('"""') and len(s) >= 6:
        s = s[3:-3]
    return s


def read_prompt(messages: list[dict], response_format: dict | None = None) -> View:
    """What the last user message of a chat request shows (Refusal if it is not a FACE prompt this replay reads)."""
    text = _user_text(messages)
    family = next((f for f, spec in _FAMILIES.items() if spec[0] in text), None)
    if family is None:
        raise Refusal("unknown_prompt", "not a FACE particle-scoring or decomposition prompt (none of the sections "
                                        "'Current assistant turn:', 'Full dialogue:', 'Target assistant turn:', … "
                                        "is shown): another method's prompt cannot be replayed")
    _, kind, level, style, window, headings = _FAMILIES[family]
    sec = _sections(text, headings)
    if sec is None:
        wanted = ", ".join(repr(h.replace(_LAST, "").strip().rstrip(":")) for h in headings.values())
        raise Refusal("unreadable_prompt", f"not a FACE prompt this replay reads: it lacks the sections of FACE's "
                                           f"{family.replace('_', ' ')} prompt ({wanted}, in this order)")
    v = View(kind=kind, level=level, style=style, history_window=window)
    if level == "turn":
        v.history, v.next_user = norm(sec["history"]), _next(sec["next"])
        v.target_turn, v.target_text = _target(sec["target"], style)
    else:
        v.dialogue = norm(sec["dialogue"])
    if kind == "decompose":
        return v
    m = _ASPECT.match(sec["aspect"].split("\n", 1)[0].strip())
    v.aspect = m.group(1).strip().replace(" ", "_") if m else None
    v.instruction = norm(sec["instruction"])
    v.scale = _scale(sec["tail"], response_format)
    block = _particle_block(v, sec["particle"])
    if block is None:
        v.whole = True
        return v
    p = _PARTICLE.match(block.strip())
    if p is None:
        raise Refusal("unreadable_particle", "the target particle is not shown as '- dialogue act: …', '- mention: "
                                             "…', '- user feedback: …'")
    v.particle = (norm(p.group(1)), norm(p.group(2)), norm(p.group(3)))
    return v


def _user_text(messages: list[dict]) -> str:
    """The text of the last user message (OpenAI multi-part content: its text parts)."""
    text = next((m.get("content") for m in reversed(messages) if m.get("role") == "user"), None)
    if isinstance(text, list):
        text = "".join(p["text"] for p in text if isinstance(p, dict) and isinstance(p.get("text"), str))
    if not isinstance(text, str) or not text.strip():
        raise Refusal("no_prompt", "the request has no user message")
    return text.replace("\r\n", "\n")


def _particle_block(v: View, section: str) -> str | None:
    """The lines that show the particle to rate (None: the prompt rates a whole turn or dialogue); the turn it came
    from where a dialogue-level prompt says so."""
    if v.style == "numbered":
        first, _, block = ("Target" + section).strip().partition("\n")
        if first.startswith("Target:") or not block.strip():
            return None
        f = _FROM_TURN.search(first)
        v.particle_turn = int(f.group(1)) if f else None
        return block
    block = section
    if v.level == "dialogue":  # "Particle to rate (from the assistant's 2nd turn):" in the compact prompt
        first, _, block = ("Particle to rate" + section).strip().partition("\n")
        f = _NTH_TURN.search(first)
        v.particle_nth = int(f.group(1)) if f else None
    return None if block.strip().startswith("(no particle") else block


def _next(section: str) -> str:
    s = norm(_unquote(section))
    return "" if s in NO_NEXT else s


def _target(section: str, style: str) -> tuple[int | None, str]:
    s = section.strip()
    if style == "numbered":
        m = _NUMBERED.match(s)
        if m is None or m.group(2) != "ASST":
            raise Refusal("unreadable_turn", f"the target turn is not shown as 'Turn N - ASST: …': {s[:80]!r}")
        return int(m.group(1)), norm(m.group(3))
    return None, norm(_unquote(s))


def _scale(tail: str, response_format: dict | None) -> tuple[int, int] | None:
    """The scale a prompt asks for: in its answer format, else in the score enum of its JSON schema."""
    m = _SCORE_FORMAT.search(tail)
    if m:
        return int(m.group(1)), int(m.group(2))
    schema = _field(_field(response_format, "json_schema"), "schema") or _field(response_format, "schema")
    enum = _field(_field(_field(schema, "properties"), "score"), "enum")
    if not isinstance(enum, list) or not enum or not all(type(x) is int for x in enum):
        return None
    return min(enum), max(enum)


def _field(obj: object, key: str) -> object:
    """obj[key] of a JSON object (None for anything else)."""
    return obj.get(key) if isinstance(obj, dict) else None
