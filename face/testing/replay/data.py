"""The released judgements, indexed by what a prompt shows (``ReplayData``), and how a request is resolved to the
released unit it shows — the first of several identical ones — or refused."""
from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from pathlib import Path

from .reader import NO_TURNS, Refusal, View, norm

# the files read, relative to the data directory (the project's manifest layout)
CONVERSATIONS = "crsarena_eval/crs_arena_eval.json"
PARTICLES = "face_released/particles.jsonl"
# CRSArena-Eval's aspects, their annotation scales (the dataset's README) and levels
SCALES = {"relevance": (0, 2), "interestingness": (0, 2), "understanding": (0, 2), "task_completion": (0, 2),
          "interest_arousal": (0, 2), "efficiency": (0, 1), "dialogue_overall": (0, 4)}
ASPECTS = tuple(SCALES)
DATA_FILES = (CONVERSATIONS, PARTICLES, *(f"face_released/run_files/{a}.jsonl" for a in ASPECTS),
              *(f"face_released/top16_instructions/{a}.json" for a in ASPECTS))
TURN_LEVEL = ("relevance", "interestingness")
SAMPLES = 5  # the authors' samples per particle × instruction


@dataclass
class Conv:
    conv_id: str
    turns: list[tuple[int, str, str]]  # (turn_ind, "USER" | "ASST", normalised utterance)


@dataclass
class Judged:
    """What a request was resolved to."""

    conv: Conv
    turn_ind: int
    particle_ind: int | None = None
    candidates: int = 1  # released units the prompt reads as (> 1: an identical-prompt group)
    group: list[tuple[int, int]] = field(default_factory=list)  # (turn, particle) of the identical particles shown


def load(data_dir: str | Path) -> ReplayData:
    """The released judgements of ``data_dir``, read once per process and state of their files (each file's size and
    modification time): a judge in a thread of a process that starts several (tests, a notebook) reads the ~60 MB
    once (≈ 0.8 s)."""
    d = Path(data_dir).resolve()
    return _load(d, tuple((f, (d / f).stat().st_size, (d / f).stat().st_mtime_ns) for f in DATA_FILES
                          if (d / f).is_file()))


@functools.lru_cache(maxsize=1)  # one data directory's at a time: the index is large
def _load(data_dir: Path, state: tuple) -> ReplayData:
    return ReplayData(data_dir)


class ReplayData:
    """The released judgements, indexed by what a prompt shows (read-only once built: ``load`` shares it)."""

    def __init__(self, data_dir: str | Path):
        self.data_dir = Path(data_dir)
        missing = [f for f in DATA_FILES if not (self.data_dir / f).is_file()]
        if missing:
            raise FileNotFoundError(f"the replay judge needs the FACE authors' released files in {self.data_dir}; "
                                    f"missing: {', '.join(missing[:3])}{' …' if len(missing) > 3 else ''} (any "
                                    "experiment with llm=replay fetches them; or set FACE_DATA_MIRROR)")
        raw = json.loads((self.data_dir / CONVERSATIONS).read_text(encoding="utf-8"))
        self.convs = [Conv(c["conv_id"], [(t["turn_ind"], t["role"], norm(t["utterance"])) for t in c["dialogue"]])
                      for c in raw]
        self.by_text: dict[str, list[tuple[Conv, int]]] = {}  # assistant utterance -> (conversation, position),
        # in file order: the order identical prompts are resolved in
        self.by_dialogue: dict[tuple[str, str], Conv] = {}  # (style, full dialogue) -> conversation
        for c in self.convs:
            for pos, (_, role, text) in enumerate(c.turns):
                if role == "ASST":
                    self.by_text.setdefault(text, []).append((c, pos))
            for style in ("numbered", "speaker"):
                self.by_dialogue.setdefault((style, transcript(c.turns, style)), c)
        self.particles: dict[tuple[str, int], list[dict]] = {
            (r["conv_id"], r["turn_ind"]): r["particles"] for r in _jsonl(self.data_dir / PARTICLES)}
        self.shown = {k: [(p["dialogue_act"], norm(p["particle"]), norm(p["user_feedback"])) for p in ps]
                      for k, ps in self.particles.items()}
        self.instructions: dict[str, dict[str, str]] = {}  # normalised text -> {aspect: instruction id}
        self.scores: dict[str, dict] = {}  # aspect -> conv_id -> turn -> particle -> instruction id -> value
        for a in ASPECTS:
            for ins in json.loads((self.data_dir / f"face_released/top16_instructions/{a}.json").read_text("utf-8")):
                self.instructions.setdefault(norm(ins["text"]), {})[a] = f"itr{ins['iteration']}"
            self.scores[a] = {r["conv_id"]: {int(t): {int(p): s for p, s in tv["particles"].items()}
                                             for t, tv in r["turns"].items()}
                              for r in _jsonl(self.data_dir / f"face_released/run_files/{a}.jsonl")}

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
        c, p = nxt[0]  # the first in file order
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
        return Judged(conv, t, i, len(found), found)

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


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
