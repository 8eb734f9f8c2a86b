"""Answers: a chat-completion request body checked field by field before anything is read from it
(``checked``: a wrong JSON type or a value out of range is a ``Refusal``, HTTP 400, naming the field in
``param``, never a server error; fields the replay does not use, temperature, stop, …, are ignored); integer samples
whose every 5 average the released value, a log-probability distribution with the released value as its
expectation, the released particles; and ``Judge``, which answers one request body (or refuses it) and keeps the
count."""
from __future__ import annotations

import hashlib
import json
import math
import re
import threading
import time
from typing import Any

from face.errors import type_name

from .data import SAMPLES, Judged, ReplayData
from .reader import Refusal, View, read_prompt

# ------------------------------------------------------------------ the request body, checked
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


def checked(body: Any) -> dict[str, Any]:
    """What the replay reads of a request body (messages, n, seed, max_tokens, logprobs, top_logprobs,
    response_format, model), checked, or Refusal (``invalid_type``, ``invalid_value``, ``no_prompt``,
    ``unsupported``)."""
    if not isinstance(body, dict):
        raise Refusal("invalid_type", f"the request body must be a JSON object, got {type_name(type(body))}")
    if _flag(body, "stream"):
        raise Refusal("unsupported", "stream=true is not served: the replay answers whole completions", param="stream")
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise _invalid("model", "a string", model)
    return {"messages": _messages(body), "n": _integer(body, "n", 1, 1, MAX_N),
            "seed": _integer(body, "seed", 0, -MAX_SEED, MAX_SEED - 1, "a 64-bit integer"),
            "max_tokens": _integer(body, "max_tokens", None, 1, MAX_SEED - 1, "a positive integer"),
            "logprobs": _flag(body, "logprobs"), "top_logprobs": _integer(body, "top_logprobs", 0, 0, MAX_TOP_LOGPROBS),
            "response_format": _response_format(body), "model": model}


# ------------------------------------------------------------------ answers
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


def answer_text(answer: dict, reasoning: bool, preamble: str) -> str:
    """An answer's JSON, after a line of text (``preamble``) for the reasoned prompt."""
    text = json.dumps(answer, ensure_ascii=False)
    return f"{preamble}\n{text}" if reasoning else text


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
            body = checked(raw)
            v = read_prompt(body["messages"], body["response_format"])
            j = self.data.resolve(v)
            value, instr = (None, "") if v.kind == "decompose" else self.data.judgement(v, j)
        except Refusal as e:
            with self._lock:
                self.stats["refused"] += 1
                self.stats["refused_by_code"][e.code] = self.stats["refused_by_code"].get(e.code, 0) + 1
            raise
        n, rf = body["n"], body["response_format"]
        positions = [body["seed"] + c for c in range(n)]
        reasoning = v.style == "numbered" and (rf is None or rf["type"] == "text")  # (no JSON answer format asked for)
        if value is None:
            ps = self.data.particles.get((j.conv.conv_id, j.turn_ind), [])
            shown = [{"dialogue_act": p["dialogue_act"], "mention": p["particle"], "user_feedback": p["user_feedback"]}
                     for p in ps]
            texts = [answer_text({"particles": shown}, reasoning,
                                 f"Replayed decomposition of the FACE authors ({len(ps)} particles).")] * n
        else:
            xs = sample_values(value, positions)
            if body["logprobs"]:  # the reply's score token carries the distribution; its text shows the likelier value
                xs = [math.floor(value) + (value - math.floor(value) >= 0.5)] * n
            if j.candidates > 1:
                self._note_ambiguous(body["messages"], v, j, instr)
            texts = [answer_text({"score": x}, reasoning, "Replayed judgement of the FACE authors' LLM (sample "
                                 f"{p % SAMPLES + 1} of {SAMPLES}).") for x, p in zip(xs, positions, strict=True)]
        with self._lock:
            self.stats["requests"] += 1
            self.stats["samples"] += n
            self.stats["scoring" if v.kind == "score" else "decomposition"] += 1
            self.stats["logprobs_requests"] += body["logprobs"]
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


def _completion(body: dict[str, Any], texts: list[str], value: float | None, positions: list[int], model: str) -> dict:
    """The chat completion of these answers (of the released ``value``; None: a decomposition): ``max_tokens`` cuts
    an answer; logprobs where asked for."""
    choices, out_tokens = [], 0
    for c, text in enumerate(texts):
        toks = _TOKEN.findall(text)
        finish = "stop"
        if body["max_tokens"] is not None and len(toks) > body["max_tokens"]:
            toks, finish = toks[: body["max_tokens"]], "length"
        out_tokens += len(toks)
        lp = _logprobs(toks, value, body["top_logprobs"]) if body["logprobs"] else None
        choices.append({"index": c, "message": {"role": "assistant", "content": "".join(toks)},
                        "finish_reason": finish, "logprobs": lp})
    prompt_tokens = sum(len(str(m.get("content", ""))) // 4 + 4 for m in body["messages"])
    return {"id": "replay-" + hashlib.sha1(json.dumps(positions).encode()).hexdigest()[:12],
            "object": "chat.completion", "created": int(time.time()), "model": body["model"] or model,
            "choices": choices, "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": out_tokens,
                                          "total_tokens": prompt_tokens + out_tokens}}
