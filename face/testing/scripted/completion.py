"""The scripted server's tokens and their logprobs (numeric tokens get a deterministic distribution over the
digits)."""
from __future__ import annotations

import math
import random
import re

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
