"""The replay judge: an OpenAI-compatible server that answers FACE's prompts with the FACE authors' released
judgements of CRSArena-Eval, so that the live method can be checked end to end against the paper with no LLM.

What it serves (read from a data directory laid out as the project fetches it, ``DATA_FILES``):
* a **scoring** request — one particle of one conversation, one aspect, one of the authors' top-16
  instructions — gets the authors' judgement of that particle under that instruction. The released value is
  the mean of their 5 sampled scores (always a multiple of 0.2), so it is answered as integer samples:
  sample k of a prompt (k = the request's ``seed`` + the choice index) is the (k mod 5)-th of the five
  integers ``x_i = floor((i+1)·5v/5) − floor(i·5v/5)``; any 5 consecutive samples have exactly the released
  mean, and the mean of the first m is within 1/m of it (the rule for n ≠ 5). A reasoned prompt gets a line
  of text, then ``{"score": x}``; the compact prompt (``method.reasoning=false``) gets ``{"score": x}``
  alone. With ``logprobs`` the reply's score token carries a top-logprobs distribution on ``floor(v)`` and
  ``ceil(v)`` whose expectation is ``v``.
* a **decomposition** request gets the authors' particles of the turn it shows (``{"particles": [...]}``;
  an empty list where they found none), after a line of text for the reasoned prompt.
* anything else — another method's prompt, a whole turn or dialogue instead of a particle, a dialogue,
  turn, particle or instruction the authors never judged, a scale that is not the aspect's — gets HTTP 400
  with a JSON error saying what could not be identified and why. The client stops on it (a request the
  endpoint refuses is not retried, not cached and never scored as an invalid answer).

How a request is identified: from what its prompt shows, as an LLM reads it — the dialogue (or the turn
with its history and the user's response), the turn number where shown, the particle's dialogue act, mention
and user feedback, the instruction, the aspect and its scale — compared after whitespace normalisation with
the data. Never from an id the client adds, and never by rendering a prompt with the project's prompt code:
this module reads the prompt's sections by their headings and knows the data, nothing else of the project.

Conversation copies (``dataset.repeat=K``, for scale benchmarks: " (copy k)" after every utterance) are read
as their original.

Identical prompts: where several released particles read the same in a prompt (same turn, dialogue act,
mention and feedback: 72 particles of CRSArena-Eval in 31 groups), the prompt is one request for the client
(one cache key); the replay answers it with the first of them (conversation file order, then turn, then
particle) and counts it (``/v1/replay/stats``: ``ambiguous_requests``, and each distinct prompt with its
candidates and their values).

Run:   python -m face.testing.replay --data-dir data/raw --port 8000     (prints "READY <base_url>")
As the configured server of a client (``llm=replay``): ``ReplayServer`` starts it in a process of its own.
"""
from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import math
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# the files read, relative to the data directory (the project's manifest layout)
CONVERSATIONS = "crsarena_eval/crs_arena_eval.json"
PARTICLES = "face_released/particles.jsonl"
ASPECTS = ("relevance", "interestingness", "understanding", "task_completion", "interest_arousal", "efficiency",
           "dialogue_overall")
DATA_FILES = (CONVERSATIONS, PARTICLES, *(f"face_released/run_files/{a}.jsonl" for a in ASPECTS),
              *(f"face_released/top16_instructions/{a}.json" for a in ASPECTS))
# CRSArena-Eval's annotation scales (the dataset's README) and levels
SCALES = {"relevance": (0, 2), "interestingness": (0, 2), "understanding": (0, 2), "task_completion": (0, 2),
          "interest_arousal": (0, 2), "efficiency": (0, 1), "dialogue_overall": (0, 4)}
TURN_LEVEL = ("relevance", "interestingness")
SAMPLES = 5  # the authors' samples per particle × instruction
NO_TURNS = "(no earlier turns)"
NO_NEXT = ("N/A", "(the conversation ended here)", "")
MODEL = "face-released-judgements"


_COPY_MARK = re.compile(r"(?:^| )\(copy \d+\)(?= |$)")


def norm(text: str) -> str:
    """Whitespace-normalised text: how the replay compares what a prompt shows with the data. The mark of a
    conversation copy (``dataset.repeat``: " (copy k)" after every utterance) is dropped: a copy reads as its
    original (and is judged as it)."""
    s = " ".join(text.split())
    return _COPY_MARK.sub("", s) if "(copy " in s else s


class Refusal(Exception):
    """A request the replay cannot answer: HTTP 400 with ``code`` and a message that says why."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


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
_FAMILIES: dict[str, tuple[str, str, str, int | None, tuple[str, ...]]] = {
    # name: (kind, level, style, history window, section headings in order)
    "score_turn_reasoning": ("score", "turn", "numbered", 2, (
        "Dialogue history (the two turns before the current one):\n", "\n\nCurrent assistant turn:\n",
        "\n\nUser's response:\n", "\n\nAspect: ", "\n\nInstruction:\n", _LAST + "\n\nTarget",
        _LAST + "\n\nFollow the instruction")),
    "score_dialogue_reasoning": ("score", "dialogue", "numbered", None, (
        "Full dialogue:\n", "\n\nAspect: ", "\n\nInstruction:\n", _LAST + "\n\nTarget",
        _LAST + "\n\nFollow the instruction")),
    "score_turn_compact": ("score", "turn", "speaker", 2, (
        "Aspect: ", "\n\nContext (the two turns before the assistant turn):\n", "\n\nAssistant turn:\n",
        "\n\nUser's next turn:\n", "\n\nInstruction:\n", _LAST + "\n\nParticle to rate:\n",
        _LAST + "\n\nAnswer with JSON")),
    "score_dialogue_compact": ("score", "dialogue", "speaker", None, (
        "Aspect: ", "\n\nDialogue:\n", "\n\nInstruction:\n", _LAST + "\n\nParticle to rate",
        _LAST + "\n\nAnswer with JSON")),
    "decompose_reasoning": ("decompose", "turn", "numbered", None, (
        "Dialogue history:\n", "\n\nTarget assistant turn:\n", "\n\nUser's response:\n", "\n\nYour task:")),
    "decompose_compact": ("decompose", "turn", "speaker", None, (
        "Conversation so far:\n", "\n\nAssistant turn to split:\n", "\n\nThe user's next turn (their reaction):\n",
        "\n\nSplit the assistant turn")),
}
_SIGNATURES = (("Current assistant turn:\n", "score_turn_reasoning"), ("Full dialogue:\n", "score_dialogue_reasoning"),
               ("Context (the two turns before the assistant turn):\n", "score_turn_compact"),
               ("Assistant turn to split:\n", "decompose_compact"), ("Target assistant turn:\n", "decompose_reasoning"),
               ("\nDialogue:\n", "score_dialogue_compact"))
_SCORE_FORMAT = re.compile(r'\{"score": <integer from (-?\d+) to (-?\d+)>\}')
_NUMBERED = re.compile(r"^Turn (\d+) - (USER|ASST):(.*)$", re.DOTALL)
_PARTICLE = re.compile(r"- dialogue act:[ ]?(.*?)\n- mention:[ ]?(.*?)\n- user feedback:[ ]?(.*)", re.DOTALL)
_FROM_TURN = re.compile(r"\(from assistant turn (\d+)\)")
_NTH_TURN = re.compile(r"\(from the assistant's (\d+)(?:st|nd|rd|th) turn\)")
_ASPECT = re.compile(r"([a-z][a-z ]*?)(?: — .*)?$", re.DOTALL)


def _sections(text: str, headings: tuple[str, ...]) -> list[str] | None:
    """The text after each heading, up to the next one; None if a heading is missing or out of order."""
    text = "\n\n" + text
    starts, ends, pos = [], [], 0
    for h in headings:
        if h.startswith(_LAST):
            h = h[len(_LAST):]
            i = text.rfind(h)
            if i < pos:
                return None
        else:
            i = text.find(h if h.startswith("\n") else "\n\n" + h, pos)
            if i < 0:
                return None
            if not h.startswith("\n"):
                i += 2
        starts.append(i)
        ends.append(i + len(h))
        pos = i + len(h)
    return [text[ends[k]:(starts[k + 1] if k + 1 < len(starts) else len(text))] for k in range(len(headings))]


def _unquote(s: str) -> str:
    s = s.strip()
    if s.startswith('"""') and s.endswith('"""') and len(s) >= 6:
        s = s[3:-3]
    return s


def read_prompt(messages: list[dict], response_format: dict | None = None) -> View:
    """What the last user message of a chat request shows (Refusal if it is not a FACE prompt this replay reads)."""
    text = next((m.get("content") for m in reversed(messages) if m.get("role") == "user"), None)
    if isinstance(text, list):  # OpenAI multi-part content: the text parts
        text = "".join(p.get("text", "") for p in text if isinstance(p, dict))
    if not isinstance(text, str) or not text.strip():
        raise Refusal("no_prompt", "the request has no user message")
    text = text.replace("\r\n", "\n")
    family = next((f for sig, f in _SIGNATURES if sig in text), None)
    if family is None:
        raise Refusal("unknown_prompt", "not a FACE particle-scoring or decomposition prompt (none of the sections "
                                        "'Current assistant turn:', 'Full dialogue:', 'Target assistant turn:', … "
                                        "is shown): another method's prompt cannot be replayed")
    kind, level, style, window, headings = _FAMILIES[family]
    parts = _sections(text, headings)
    if parts is None:
        wanted = ", ".join(repr(h.replace(_LAST, "").strip().rstrip(":")) for h in headings)
        raise Refusal("unreadable_prompt", f"not a FACE prompt this replay reads: it lacks the sections of FACE's "
                                           f"{family.replace('_', ' ')} prompt ({wanted}, in this order)")
    v = View(kind=kind, level=level, style=style, history_window=window)
    if kind == "decompose":
        history, target, nxt, _ = parts
        v.history, v.next_user = norm(history), _next(nxt)
        v.target_turn, v.target_text = _target(target, style)
        return v
    if family == "score_turn_reasoning":
        history, target, nxt, aspect, instruction, particle, tail = parts
    elif family == "score_dialogue_reasoning":
        dialogue, aspect, instruction, particle, tail = parts
    elif family == "score_turn_compact":
        aspect, history, target, nxt, instruction, particle, tail = parts
    else:
        aspect, dialogue, instruction, particle, tail = parts
    if level == "turn":
        v.history, v.next_user = norm(history), _next(nxt)
        v.target_turn, v.target_text = _target(target, style)
    else:
        v.dialogue = norm(dialogue)
    m = _ASPECT.match(aspect.split("\n", 1)[0].strip())
    v.aspect = m.group(1).strip().replace(" ", "_") if m else None
    v.instruction = norm(instruction)
    v.scale = _scale(tail, response_format)
    if style == "numbered":
        first, _, block = ("Target" + particle).strip().partition("\n")
        if first.startswith("Target:") or not block.strip():
            v.whole = True
            return v
        f = _FROM_TURN.search(first)
        v.particle_turn = int(f.group(1)) if f else None
    else:
        block = particle
        if level == "dialogue":  # "Particle to rate (from the assistant's 2nd turn):" in the compact prompt
            first, _, block = ("Particle to rate" + particle).strip().partition("\n")
            f = _NTH_TURN.search(first)
            v.particle_nth = int(f.group(1)) if f else None
        if block.strip().startswith("(no particle"):
            v.whole = True
            return v
    p = _PARTICLE.match(block.strip())
    if p is None:
        raise Refusal("unreadable_particle", "the target particle is not shown as '- dialogue act: …', '- mention: "
                                             "…', '- user feedback: …'")
    v.particle = (norm(p.group(1)), norm(p.group(2)), norm(p.group(3)))
    return v


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
    m = _SCORE_FORMAT.search(tail)
    if m:
        return int(m.group(1)), int(m.group(2))
    schema = ((response_format or {}).get("json_schema") or {}).get("schema") or (response_format or {}).get("schema")
    enum = (((schema or {}).get("properties") or {}).get("score") or {}).get("enum")
    return (min(enum), max(enum)) if enum else None


# ------------------------------------------------------------------ the data
@dataclass
class Conv:
    index: int  # position in the data file (the order identical prompts are resolved in)
    conv_id: str
    turns: list[tuple[int, str, str]]  # (turn_ind, "USER" | "ASST", normalised utterance)


@dataclass
class Judged:
    """What a request was resolved to."""

    conv: Conv
    turn_ind: int
    particle_ind: int | None = None
    candidates: int = 1  # released units the prompt reads as (> 1: an identical-prompt group)


class ReplayData:
    """The released judgements, indexed by what a prompt shows."""

    def __init__(self, data_dir: str | Path):
        self.data_dir = Path(data_dir)
        missing = [f for f in DATA_FILES if not (self.data_dir / f).is_file()]
        if missing:
            raise FileNotFoundError(f"the replay judge needs the FACE authors' released files in {self.data_dir}; "
                                    f"missing: {', '.join(missing[:3])}{' …' if len(missing) > 3 else ''} (any "
                                    "experiment with llm=replay fetches them; or set FACE_DATA_MIRROR)")
        raw = json.loads((self.data_dir / CONVERSATIONS).read_text(encoding="utf-8"))
        self.convs = [Conv(i, c["conv_id"], [(t["turn_ind"], t["role"], norm(t["utterance"])) for t in c["dialogue"]])
                      for i, c in enumerate(raw)]
        self.by_id = {c.conv_id: c for c in self.convs}
        self.by_text: dict[str, list[tuple[Conv, int]]] = {}  # assistant utterance -> (conversation, position)
        self.by_dialogue: dict[tuple[str, str], Conv] = {}  # (style, full dialogue) -> conversation
        for c in self.convs:
            for pos, (_, role, text) in enumerate(c.turns):
                if role == "ASST":
                    self.by_text.setdefault(text, []).append((c, pos))
            for style in ("numbered", "speaker"):
                self.by_dialogue.setdefault((style, transcript(c.turns, style)), c)
        self.particles: dict[tuple[str, int], list[dict]] = {}
        for line in (self.data_dir / PARTICLES).read_text(encoding="utf-8").splitlines():
            if line.strip():
                r = json.loads(line)
                self.particles[(r["conv_id"], r["turn_ind"])] = r["particles"]
        self.shown = {k: [(p["dialogue_act"], norm(p["particle"]), norm(p["user_feedback"])) for p in ps]
                      for k, ps in self.particles.items()}
        self.instructions: dict[str, dict[str, str]] = {}  # normalised text -> {aspect: instruction id}
        self.scores: dict[str, dict] = {}
        for a in ASPECTS:
            for ins in json.loads((self.data_dir / f"face_released/top16_instructions/{a}.json").read_text("utf-8")):
                self.instructions.setdefault(norm(ins["text"]), {})[a] = f"itr{ins['iteration']}"
            table: dict[str, dict] = {}
            for line in (self.data_dir / f"face_released/run_files/{a}.jsonl").read_text("utf-8").splitlines():
                if line.strip():
                    r = json.loads(line)
                    table[r["conv_id"]] = {int(t): {int(p): s for p, s in tv["particles"].items()}
                                           for t, tv in r["turns"].items()}
            self.scores[a] = table

    # ---- resolution ---------------------------------------------------------------------------------------
    def resolve(self, v: View) -> Judged:
        """The released unit a prompt shows (the first of several identical ones), or Refusal."""
        if v.level == "dialogue":
            conv = self.by_dialogue.get((v.style, v.dialogue or ""))
            if conv is None:
                raise Refusal("unknown_conversation", "no conversation of CRSArena-Eval reads as the dialogue shown "
                                                      f"(it begins {(v.dialogue or '')[:100]!r})")
            if v.whole:
                raise Refusal("whole_unit", f"the prompt rates conversation {conv.conv_id} as a whole, not one of its "
                                            "particles: the authors released judgements of particles only "
                                            "(method.unit=whole cannot be replayed)")
            turns = [t for t, role, _ in conv.turns if role == "ASST"]
            if v.particle_turn is not None:
                if v.particle_turn not in turns:
                    raise Refusal("unknown_turn", f"conversation {conv.conv_id} has no assistant turn "
                                                  f"{v.particle_turn}")
                turns = [v.particle_turn]
            elif v.particle_nth is not None:
                if not 1 <= v.particle_nth <= len(turns):
                    raise Refusal("unknown_turn", f"conversation {conv.conv_id} has {len(turns)} assistant turns, "
                                                  f"not {v.particle_nth}")
                turns = [turns[v.particle_nth - 1]]
            return self._particle(conv, turns, v)
        conv, pos, n = self._turn(v)
        turn_ind = conv.turns[pos][0]
        if v.kind == "decompose":
            return Judged(conv, turn_ind, None, n)
        if v.whole:
            raise Refusal("whole_unit", f"the prompt rates assistant turn {turn_ind} of {conv.conv_id} as a whole, "
                                        "not one of its particles: the authors released judgements of particles "
                                        "only (method.unit=whole cannot be replayed)")
        j = self._particle(conv, [turn_ind], v)
        j.candidates *= n
        return j

    def _turn(self, v: View) -> tuple[Conv, int, int]:
        cands = self.by_text.get(v.target_text or "", [])
        if not cands:
            raise Refusal("unknown_turn", f"no assistant turn of CRSArena-Eval reads {(v.target_text or '')[:100]!r}")
        if v.target_turn is not None:
            cands = [(c, p) for c, p in cands if c.turns[p][0] == v.target_turn]
            if not cands:
                raise Refusal("unknown_turn", f"no assistant turn {v.target_turn} of CRSArena-Eval reads "
                                              f"{(v.target_text or '')[:100]!r}")
        fit = [(c, p) for c, p in cands if self._history(c, p, v) == v.history]
        if not fit:
            c, p = cands[0]
            raise Refusal("history_mismatch", f"the dialogue history shown before {c.conv_id} turn {c.turns[p][0]} "
                                              f"is not the conversation's (expected {self._history(c, p, v)[:120]!r}, "
                                              f"shown {(v.history or '')[:120]!r})")
        nxt = [(c, p) for c, p in fit if _user_after(c, p) == v.next_user]
        if not nxt:
            c, p = fit[0]
            raise Refusal("response_mismatch", f"the user's response shown after {c.conv_id} turn {c.turns[p][0]} is "
                                               f"not the conversation's (expected {_user_after(c, p)[:100]!r}, shown "
                                               f"{(v.next_user or '')[:100]!r})")
        c, p = min(nxt, key=lambda x: (x[0].index, x[1]))
        return c, p, len(nxt)

    @staticmethod
    def _history(c: Conv, pos: int, v: View) -> str:
        before = c.turns[:pos] if v.history_window is None else c.turns[max(0, pos - v.history_window):pos]
        return transcript(before, v.style) if before else NO_TURNS

    def _particle(self, conv: Conv, turns: list[int], v: View) -> Judged:
        found = [(t, i) for t in turns for i, p in enumerate(self.shown.get((conv.conv_id, t), ()))
                 if p == v.particle]
        if not found:
            act, mention, feedback = v.particle or ("", "", "")
            where = f"turn {turns[0]}" if len(turns) == 1 else f"any turn ({len(turns)} assistant turns)"
            released = [list(p) for t in turns for p in self.shown.get((conv.conv_id, t), ())][:4]
            raise Refusal("unknown_particle", f"{conv.conv_id} {where} has no released particle with dialogue act "
                                              f"{act!r}, mention {mention!r}, user feedback {feedback!r} (released: "
                                              f"{json.dumps(released, ensure_ascii=False)[:300]})")
        t, i = found[0]
        return Judged(conv, t, i, len(found))

    def judgement(self, v: View, j: Judged) -> tuple[float, str]:
        """(released value, instruction id) of a resolved scoring request, or Refusal."""
        aspect = v.aspect or ""
        if aspect not in SCALES:
            raise Refusal("unknown_aspect", f"aspect {aspect!r} is not one of CRSArena-Eval's "
                                            f"({', '.join(ASPECTS)})")
        level = "turn" if aspect in TURN_LEVEL else "dialogue"
        if level != v.level:
            raise Refusal("wrong_level", f"{aspect} is a {level}-level aspect, shown in a {v.level}-level prompt")
        if v.scale != SCALES[aspect]:
            raise Refusal("wrong_scale", f"{aspect} is annotated on {SCALES[aspect][0]}..{SCALES[aspect][1]}; the "
                                         f"prompt asks for {v.scale}")
        owners = self.instructions.get(v.instruction or "")
        if not owners:
            raise Refusal("unknown_instruction", f"the instruction shown is not one of the authors' released top-16 "
                                                 f"instructions (it begins {(v.instruction or '')[:80]!r})")
        if aspect not in owners:
            raise Refusal("unknown_instruction", f"the instruction shown is one of the released instructions of "
                                                 f"{', '.join(owners)}, not of {aspect}")
        instr = owners[aspect]
        value = self.scores[aspect].get(j.conv.conv_id, {}).get(j.turn_ind, {}).get(j.particle_ind, {}).get(instr)
        if value is None:
            raise Refusal("no_judgement", f"the authors released no {aspect} judgement of {j.conv.conv_id} turn "
                                          f"{j.turn_ind} particle {j.particle_ind} under {instr} (their run files "
                                          "leave out turns without a human label for the aspect and conversations "
                                          "without particles)")
        return float(value), instr


def transcript(turns: list[tuple[int, str, str]], style: str) -> str:
    """The replay's reading of a run of turns, normalised: ``Turn N - ROLE: text`` or ``User: / Assistant: text``."""
    if style == "numbered":
        return norm(" ".join(f"Turn {i} - {role}: {text}" for i, role, text in turns))
    return norm(" ".join(f"{'User' if role == 'USER' else 'Assistant'}: {text}" for _, role, text in turns))


def _user_after(c: Conv, pos: int) -> str:
    return next((text for _, role, text in c.turns[pos + 1:] if role == "USER"), "")


# ------------------------------------------------------------------ answers
def sample_values(value: float, positions: list[int]) -> list[int]:
    """Integer samples at these positions of the 5-cycle whose every 5 consecutive samples average ``value``."""
    total = round(value * SAMPLES)
    return [(((k % SAMPLES) + 1) * total) // SAMPLES - ((k % SAMPLES) * total) // SAMPLES for k in positions]


_TOKEN = re.compile(r"\s*\d|\s*[A-Za-z_]+|\s*[^\sA-Za-z_\d]|\s+")


def tokens(text: str) -> list[str]:
    return _TOKEN.findall(text)


_FILLERS = ("\u2581", "\u2582", "\u2583", "\u2584", "\u2585", "\u2586", "\u2587", "\u2588", "\u2589", "\u258a")


def _logprobs(toks: list[str], score_at: int | None, value: float | None, k: int) -> dict:
    content = []
    for i, tok in enumerate(toks):
        if i == score_at and value is not None:
            lo, frac = math.floor(value), value - math.floor(value)
            dist = [(lo, 1.0 - frac)] + ([(lo + 1, frac)] if frac > 1e-12 else [])
            prefix = tok[: len(tok) - len(tok.lstrip())]
            top = [(prefix + str(d), math.log(p)) for d, p in sorted(dist, key=lambda x: -x[1])]
            lp = next(lp for t, lp in top if t == tok)
        else:
            lp, top = 0.0, [(tok, 0.0)]
        top += [(filler, -30.0) for filler in _FILLERS][: max(0, k - len(top))]  # tokens that spell no score
        content.append({"token": tok, "logprob": lp, "bytes": None,
                        "top_logprobs": [{"token": t, "logprob": x, "bytes": None} for t, x in top[:max(k, 1)]]})
    return {"content": content}


def score_text(x: int, position: int, reasoning: bool) -> str:
    answer = json.dumps({"score": x})
    if not reasoning:
        return answer
    return f"Replayed judgement of the FACE authors' LLM (sample {position % SAMPLES + 1} of {SAMPLES}).\n{answer}"


def decompose_text(particles: list[dict], reasoning: bool) -> str:
    answer = json.dumps({"particles": [{"dialogue_act": p["dialogue_act"], "mention": p["particle"],
                                        "user_feedback": p["user_feedback"]} for p in particles]}, ensure_ascii=False)
    if not reasoning:
        return answer
    return f"Replayed decomposition of the FACE authors ({len(particles)} particles).\n{answer}"


# ------------------------------------------------------------------ the server
class Judge:
    """Answers one chat-completion body (a dict) or raises Refusal; keeps the counts."""

    def __init__(self, data: ReplayData, model: str = MODEL):
        self.data, self.model = data, model
        self.stats: dict[str, Any] = {"requests": 0, "samples": 0, "scoring": 0, "decomposition": 0,
                                      "logprobs_requests": 0, "refused": 0, "refused_by_code": {},
                                      "ambiguous_requests": 0}
        self.ambiguous: dict[str, dict] = {}  # prompt digest -> the identical-prompt group it stands for
        self._lock = threading.Lock()

    def answer(self, body: dict) -> dict:
        try:
            return self._answer(body)
        except Refusal as e:
            with self._lock:
                self.stats["refused"] += 1
                self.stats["refused_by_code"][e.code] = self.stats["refused_by_code"].get(e.code, 0) + 1
            raise

    def _answer(self, body: dict) -> dict:
        messages = body.get("messages")
        if not isinstance(messages, list):
            raise Refusal("no_prompt", "the request has no messages")
        rf = body.get("response_format") or None
        v = read_prompt(messages, rf)
        j = self.data.resolve(v)
        n = int(body.get("n") or 1)
        seed = int(body.get("seed") or 0)
        positions = [seed + c for c in range(n)]
        schema = bool(rf) and rf.get("type") in ("json_schema", "json_object")
        want_lp = bool(body.get("logprobs"))
        k = int(body.get("top_logprobs") or 0)
        if v.kind == "decompose":
            text = decompose_text(self.data.particles.get((j.conv.conv_id, j.turn_ind), []),
                                  reasoning=not schema and v.style == "numbered")
            texts, values = [text] * n, [None] * n
        else:
            value, instr = self.data.judgement(v, j)
            xs = sample_values(value, positions)
            if want_lp:  # the reply's score token carries the distribution; its text shows the likelier value
                xs = [math.floor(value) + (value - math.floor(value) >= 0.5)] * n
            texts = [score_text(x, p, reasoning=not schema and v.style == "numbered") for x, p in zip(xs, positions)]
            values = [value] * n
            if j.candidates > 1:
                self._note_ambiguous(messages, v, j, instr)
        with self._lock:
            self.stats["requests"] += 1
            self.stats["samples"] += n
            self.stats["scoring" if v.kind == "score" else "decomposition"] += 1
            self.stats["logprobs_requests"] += want_lp
        max_tokens = body.get("max_tokens")
        choices, out_tokens = [], 0
        for c, (text, value) in enumerate(zip(texts, values)):
            toks = tokens(text)
            finish = "stop"
            if max_tokens is not None and len(toks) > int(max_tokens):
                toks, finish = toks[: int(max_tokens)], "length"
            out_tokens += len(toks)
            lp = None
            if want_lp:
                at = max((i for i, t in enumerate(toks) if t.strip().isdigit()), default=None)
                lp = _logprobs(toks, at, value, k)
            choices.append({"index": c, "message": {"role": "assistant", "content": "".join(toks)},
                            "finish_reason": finish, "logprobs": lp})
        prompt_tokens = sum(len(str(m.get("content", ""))) // 4 + 4 for m in messages)
        return {"id": "replay-" + hashlib.sha1(json.dumps(positions).encode()).hexdigest()[:12],
                "object": "chat.completion", "created": int(time.time()), "model": body.get("model") or self.model,
                "choices": choices, "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": out_tokens,
                                              "total_tokens": prompt_tokens + out_tokens}}

    def _note_ambiguous(self, messages: list, v: View, j: Judged, instr: str) -> None:
        digest = hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).hexdigest()[:16]
        with self._lock:
            self.stats["ambiguous_requests"] += 1
            if digest in self.ambiguous or len(self.ambiguous) >= 50_000:
                return
            c = j.conv
            turns = [j.turn_ind] if v.level == "turn" or v.particle_turn is not None or v.particle_nth else \
                [t for t, role, _ in c.turns if role == "ASST"]
            group = [(t, i) for t in turns for i, p in enumerate(self.data.shown.get((c.conv_id, t), ()))
                     if p == v.particle]
            table = self.data.scores[v.aspect or ""].get(c.conv_id, {})
            self.ambiguous[digest] = {
                "aspect": v.aspect, "conv_id": c.conv_id, "instruction_id": instr,
                "candidates": [{"turn_ind": t, "particle_ind": i, "value": table.get(t, {}).get(i, {}).get(instr)}
                               for t, i in group],
                "answered": {"turn_ind": j.turn_ind, "particle_ind": j.particle_ind}}

    def report(self) -> dict:
        with self._lock:
            groups = list(self.ambiguous.values())
            return {**json.loads(json.dumps(self.stats)), "ambiguous_prompts": len(groups),
                    "ambiguous_prompts_with_different_values": sum(
                        len({c["value"] for c in g["candidates"]}) > 1 for g in groups),
                    "ambiguous": groups}


def make_app(judge: Judge, latency_s: float = 0.0):
    from aiohttp import web

    async def chat(request: web.Request) -> web.Response:
        try:
            body = json.loads(await request.read())
        except ValueError:
            return _error(web, "bad_json", "the request body is not JSON")
        if latency_s > 0:
            await asyncio.sleep(latency_s)
        try:
            out = judge.answer(body)
        except Refusal as e:
            return _error(web, e.code, str(e))
        return web.Response(body=json.dumps(out, ensure_ascii=False).encode(), content_type="application/json")

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": judge.model, "object": "model",
                                                               "owned_by": "face-replay"}]})

    async def health(request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def stats(request: web.Request) -> web.Response:
        return web.json_response(judge.report())

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/health", health)
    app.router.add_get("/v1/replay/stats", stats)
    return app


def _error(web, code: str, message: str):
    return web.json_response({"error": {"message": f"replay judge: {message}", "type": "invalid_request_error",
                                        "code": code, "param": None}}, status=400)


class ReplayServer:
    """The replay judge as the configured server of a client (``llm.server``): started before the first request,
    stopped after the last; ``report()`` is its count of what it answered (identical prompts included).

    ``process=True`` (the default) runs it in a process of its own, so its CPU is not the client's; ``False``
    in a thread of this process (tests)."""

    data_files = DATA_FILES  # fetched by the experiment before anything runs

    def __init__(self, data_dir: str, model: str = MODEL, host: str = "127.0.0.1", port: int = 0,
                 latency_s: float = 0.0, process: bool = True, startup_timeout_s: float = 120.0):
        self.data_dir, self.model, self.host, self.port = str(data_dir), model, host, port
        self.latency_s, self.process, self.startup_timeout_s = latency_s, process, startup_timeout_s
        self.base_url: str | None = None
        self._proc: subprocess.Popen | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner = None
        self._judge: Judge | None = None
        self.final_report: dict | None = None

    def start(self) -> ReplayServer:
        if self.process:
            self._spawn()
        else:
            self._serve_in_thread()
        return self

    def _spawn(self) -> None:
        import os

        root = str(Path(__file__).resolve().parents[2])
        env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
        cmd = [sys.executable, "-m", "face.testing.replay", "--data-dir", self.data_dir, "--host", self.host,
               "--port", str(self.port), "--latency", str(self.latency_s), "--model", self.model,
               "--until-stdin-closes"]
        # its stdin is a pipe from this process: when this process ends, however it ends (kill -9 included), the
        # pipe closes and the server stops
        self._proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True, env=env)
        line = self._proc.stdout.readline() if self._proc.stdout else ""
        if not line.startswith("READY "):
            self._proc.wait(timeout=30)
            err = (self._proc.stderr.read() if self._proc.stderr else "").strip().splitlines()
            self._proc = None
            raise RuntimeError(f"the replay judge did not start: {(err or [line.strip()])[-1]}")
        self.base_url = line.split()[1]

    def _serve_in_thread(self) -> None:
        from aiohttp import web

        self._judge = Judge(ReplayData(self.data_dir), self.model)
        ready, err = threading.Event(), []

        def run() -> None:
            self._loop = asyncio.new_event_loop()
            asyncio.set_event_loop(self._loop)

            async def up() -> None:
                self._runner = web.AppRunner(make_app(self._judge, self.latency_s), access_log=None,
                                             shutdown_timeout=0.2)
                await self._runner.setup()
                await web.TCPSite(self._runner, self.host, self.port).start()
                self.base_url = f"http://{self.host}:{self._runner.addresses[0][1]}/v1"

            try:
                self._loop.run_until_complete(up())
            except BaseException as e:  # handed to the starting thread
                err.append(e)
                ready.set()
                return
            ready.set()
            self._loop.run_forever()
            self._loop.run_until_complete(self._runner.cleanup())
            self._loop.close()

        self._thread = threading.Thread(target=run, name="replay-judge", daemon=True)
        self._thread.start()
        ready.wait(self.startup_timeout_s)
        if err:
            raise err[0]

    def report(self) -> dict | None:
        """What the judge answered so far (None when it cannot be asked)."""
        if self._judge is not None:
            return self._judge.report()
        if self.base_url is None:
            return self.final_report
        try:
            with urllib.request.urlopen(self.base_url + "/replay/stats", timeout=30) as r:
                return json.loads(r.read())
        except OSError:
            return self.final_report

    def stop(self) -> None:
        if self.base_url is not None:
            self.final_report = self.report()
        if self._proc is not None:
            if self._proc.stdin is not None:
                self._proc.stdin.close()
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
            self._proc = None
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._thread = self._loop = None
        self.base_url = None

    def __enter__(self) -> ReplayServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="The replay judge: FACE's prompts answered with the FACE authors' "
                                             "released judgements of CRSArena-Eval (an OpenAI-compatible server)")
    ap.add_argument("--data-dir", default="data/raw", help="directory laid out as the project fetches the data")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0, help="0: a free port (printed)")
    ap.add_argument("--latency", type=float, default=0.0, help="seconds before each answer")
    ap.add_argument("--model", default=MODEL)
    ap.add_argument("--until-stdin-closes", action="store_true",
                    help="stop when standard input reaches its end (a parent that started it has gone)")
    a = ap.parse_args(argv)
    try:
        judge = Judge(ReplayData(a.data_dir), a.model)
    except (OSError, ValueError, KeyError) as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        sys.exit(2)
    from aiohttp import web

    async def serve() -> None:
        runner = web.AppRunner(make_app(judge, a.latency), access_log=None, shutdown_timeout=0.2)
        await runner.setup()
        await web.TCPSite(runner, a.host, a.port).start()
        print(f"READY http://{a.host}:{runner.addresses[0][1]}/v1", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        if a.until_stdin_closes:
            def watch() -> None:
                sys.stdin.read()  # returns at end of input: the parent's end of the pipe is closed
                loop.call_soon_threadsafe(stop.set)

            threading.Thread(target=watch, name="parent-watch", daemon=True).start()
        await stop.wait()
        await runner.cleanup()

    asyncio.run(serve())


if __name__ == "__main__":
    main()
