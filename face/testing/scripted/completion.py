"""The scripted server's chat completion around its answers: simple tokens, ``max_tokens``, the answer faults,
logprobs (numeric tokens get a deterministic distribution over the digits), and the reported usage."""
from __future__ import annotations

import math
import random
import re
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..faults import half, spoil, unit
from .answers import _h

_TOKEN_RE = re.compile(r"\s*\d|\s*[A-Za-z]+|\s*[^\sA-Za-z\d]|\s+")
_ALTERNATIVES = (" the", ".", " and", ",", " a")


def tokenize(text: str) -> list[str]:
    """Simple tokens: words, single digits, single punctuation marks, each with leading whitespace."""
    return _TOKEN_RE.findall(text)


def _token_logprob(tok: str, rng: random.Random) -> tuple[float, list[tuple[str, float]]]:
    """(the token's logprob, the distribution it was drawn from, likeliest first)."""
    s = tok.strip()
    if s.isdigit() and len(s) == 1:
        prefix = tok[: len(tok) - 1]
        logits = {d: rng.random() * 2.0 for d in "0123456789"}
        logits[s] += 2.0  # the emitted digit is the likely one
        z = math.log(sum(math.exp(v) for v in logits.values()))
        return logits[s] - z, sorted(((prefix + d, v - z) for d, v in logits.items()), key=lambda x: -x[1])
    lp = -0.05 - rng.random() * 0.2
    alts = [(a, -float(3 + i) - rng.random()) for i, a in enumerate(_ALTERNATIVES)]
    return lp, [(tok, lp)] + [a for a in alts if a[0] != tok]


def token_logprobs(tokens: list[str], k: int, rng: random.Random) -> list[dict]:
    out = []
    for tok in tokens:
        lp, dist = _token_logprob(tok, rng)
        top = dist[:k]
        if k and all(t != tok for t, _ in top):
            top[-1] = (tok, lp)
        out.append({"token": tok, "logprob": lp, "bytes": list(tok.encode()),
                    "top_logprobs": [{"token": t, "logprob": v, "bytes": list(t.encode())} for t, v in top]})
    return out


@dataclass(eq=False)
class Completer:
    """What ``ScriptedServer`` answers (its base), the chat completion of a request body (``_completion``):
    ``responder(body)`` per choice (the body with ``n=1`` and
    ``seed = request seed + choice index``), usage tokens × ``usage_factor`` (left out without ``report_usage``),
    a share ``logprobs_missing`` of choices (by hash) without the logprobs asked for."""

    responder: Callable[[dict], str]
    model: str
    usage_factor: float = 1.0
    report_usage: bool = True
    logprobs_missing: float = 0.0

    def _completion(self, body: dict, fault: str | None) -> dict:
        """(A subclass may change what is answered: tests/test_performance.py's endpoint that ignores n.)"""
        n = int(body.get("n") or 1)
        seed = body.get("seed")
        built = [self._choice(j, dict(body, n=1, seed=None if seed is None else seed + j), fault) for j in range(n)]
        choices, out_tokens = [c for c, _ in built], sum(t for _, t in built)
        prompt_tokens = sum(len(tokenize(str(m.get("content", "")))) + 3 for m in body.get("messages", []))
        prompt_tokens, out_tokens = round(prompt_tokens * self.usage_factor), round(out_tokens * self.usage_factor)
        reply = {"id": "chatcmpl-" + _h(body)[:12], "object": "chat.completion", "created": int(time.time()),
                 "model": body.get("model") or self.model, "choices": choices}
        if self.report_usage:
            reply["usage"] = {"prompt_tokens": prompt_tokens, "completion_tokens": out_tokens,
                              "total_tokens": prompt_tokens + out_tokens}
        return reply

    def _choice(self, j: int, sub: dict, fault: str | None) -> tuple[dict, int]:
        """Choice j (its request body ``sub``) and its number of tokens."""
        text = self.responder(sub)
        finish = "stop"
        toks = tokenize(text)
        max_tokens = sub.get("max_tokens")
        if max_tokens is not None and len(toks) > int(max_tokens):
            toks, finish = toks[: int(max_tokens)], "length"
        if fault == "truncated":
            toks, finish = half(toks), "length"
        text = "".join(toks)
        if fault in ("malformed", "garbled"):
            text = spoil(fault, text)
            toks = tokenize(text)
        lp = None
        if sub.get("logprobs") and not (self.logprobs_missing and unit(_h(sub.get("messages"), sub.get("seed"),
                                                                           "nolp")) < self.logprobs_missing):
            lp = {"content": token_logprobs(toks, int(sub.get("top_logprobs") or 0),
                                            random.Random(_h(text, sub.get("seed"))))}
        return {"index": j, "message": {"role": "assistant", "content": text}, "finish_reason": finish,
                "logprobs": lp}, len(toks)
