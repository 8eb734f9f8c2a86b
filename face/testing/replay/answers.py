"""Answers: integer samples whose every 5 average the released value, a log-probability distribution with the
released value as its expectation, the released particles; and ``Judge``, which answers one request body (or
refuses it) and keeps the count."""
from __future__ import annotations

import hashlib
import json
import math
import re
import threading
import time
from typing import Any

from .data import SAMPLES, Judged, ReplayData
from .reader import Refusal, View, read_prompt
from .request import ChatBody

MODEL = "face-released-judgements"


def sample_values(value: float, positions: list[int]) -> list[int]:
    """Integer samples at these positions of the 5-cycle whose every 5 consecutive samples average ``value``."""
    total = round(value * SAMPLES)
    return [(((k % SAMPLES) + 1) * total) // SAMPLES - ((k % SAMPLES) * total) // SAMPLES for k in positions]


_TOKEN = re.compile(r"\s*\d|\s*[A-Za-z_]+|\s*[^\sA-Za-z_\d]|\s+")

_FILLERS = ("\u2581", "\u2582", "\u2583", "\u2584", "\u2585", "\u2586", "\u2587", "\u2588", "\u2589", "\u258a")


def _logprobs(toks: list[str], value: float | None, k: int) -> dict:
    """The top-k log-probabilities of each token: the last digit (the score) carries the distribution whose
    expectation is ``value``, every other token is certain."""
    score_at = max((i for i, t in enumerate(toks) if t.strip().isdigit()), default=None)
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


class Judge:
    """Answers one chat-completion body (a dict) or raises Refusal; keeps the counts."""

    def __init__(self, data: ReplayData, model: str = MODEL):
        self.data, self.model = data, model
        self.stats: dict[str, Any] = {"requests": 0, "samples": 0, "scoring": 0, "decomposition": 0,
                                      "logprobs_requests": 0, "refused": 0, "refused_by_code": {},
                                      "ambiguous_requests": 0}
        self.ambiguous: dict[str, dict] = {}  # prompt digest -> the identical-prompt group it stands for
        self._lock = threading.Lock()

    def answer(self, raw: Any) -> dict:
        try:
            body = ChatBody.of(raw)
            v = read_prompt(body.messages, body.response_format)
            j = self.data.resolve(v)
            value, instr = (None, "") if v.kind == "decompose" else self.data.judgement(v, j)
        except Refusal as e:
            with self._lock:
                self.stats["refused"] += 1
                self.stats["refused_by_code"][e.code] = self.stats["refused_by_code"].get(e.code, 0) + 1
            raise
        positions = [body.seed + c for c in range(body.n)]
        schema = body.response_format is not None and body.response_format["type"] in ("json_schema", "json_object")
        reasoning = not schema and v.style == "numbered"
        if value is None:
            texts = [decompose_text(self.data.particles.get((j.conv.conv_id, j.turn_ind), []), reasoning)] * body.n
        else:
            xs = sample_values(value, positions)
            if body.logprobs:  # the reply's score token carries the distribution; its text shows the likelier value
                xs = [math.floor(value) + (value - math.floor(value) >= 0.5)] * body.n
            if j.candidates > 1:
                self._note_ambiguous(body.messages, v, j, instr)
            texts = [score_text(x, p, reasoning) for x, p in zip(xs, positions, strict=True)]
        with self._lock:
            self.stats["requests"] += 1
            self.stats["samples"] += body.n
            self.stats["scoring" if v.kind == "score" else "decomposition"] += 1
            self.stats["logprobs_requests"] += body.logprobs
        return _completion(body, texts, value, positions, self.model)

    def _note_ambiguous(self, messages: list, v: View, j: Judged, instr: str) -> None:
        digest = hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).hexdigest()[:16]
        with self._lock:
            self.stats["ambiguous_requests"] += 1
            if digest in self.ambiguous or len(self.ambiguous) >= 50_000:
                return
            table = self.data.scores[v.aspect or ""].get(j.conv.conv_id, {})
            self.ambiguous[digest] = {
                "aspect": v.aspect, "conv_id": j.conv.conv_id, "instruction_id": instr,
                "candidates": [{"turn_ind": t, "particle_ind": i, "value": table.get(t, {}).get(i, {}).get(instr)}
                               for t, i in j.group],
                "answered": {"turn_ind": j.turn_ind, "particle_ind": j.particle_ind}}

    def report(self) -> dict:
        with self._lock:
            groups = list(self.ambiguous.values())
            return {**json.loads(json.dumps(self.stats)), "ambiguous_prompts": len(groups),
                    "ambiguous_prompts_with_different_values": sum(
                        len({c["value"] for c in g["candidates"]}) > 1 for g in groups),
                    "ambiguous": groups}


def _completion(body: ChatBody, texts: list[str], value: float | None, positions: list[int], model: str) -> dict:
    """The chat completion of these answers (of the released ``value``; None: a decomposition): ``max_tokens`` cuts
    an answer; logprobs where asked for."""
    choices, out_tokens = [], 0
    for c, text in enumerate(texts):
        toks = _TOKEN.findall(text)
        finish = "stop"
        if body.max_tokens is not None and len(toks) > body.max_tokens:
            toks, finish = toks[: body.max_tokens], "length"
        out_tokens += len(toks)
        lp = _logprobs(toks, value, body.top_logprobs) if body.logprobs else None
        choices.append({"index": c, "message": {"role": "assistant", "content": "".join(toks)},
                        "finish_reason": finish, "logprobs": lp})
    prompt_tokens = sum(len(str(m.get("content", ""))) // 4 + 4 for m in body.messages)
    return {"id": "replay-" + hashlib.sha1(json.dumps(positions).encode()).hexdigest()[:12],
            "object": "chat.completion", "created": int(time.time()), "model": body.model or model,
            "choices": choices, "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": out_tokens,
                                          "total_tokens": prompt_tokens + out_tokens}}
