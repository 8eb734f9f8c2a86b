"""Expected scores from token log-probabilities (pure functions).

For an answer like `{"score": 2}` requested with logprobs + top_logprobs, the
distribution over the score is read at the answer token's position and
renormalised over the valid score values:

    pos = find_answer_position(completion.logprobs, valid=[1, 2, 3])
    es = expected_from_top_logprobs(completion.logprobs[pos].top, valid=[1, 2, 3])
    es.value, es.valid_mass   # E[score | valid], probability mass on valid tokens
"""
from __future__ import annotations

import itertools
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from .base import Completion, TokenLogprob


@dataclass
class ExpectedScore:
    value: float | None  # None when no valid token is among the top logprobs
    valid_mass: float  # total probability of the valid tokens among the top logprobs (0..1)
    distribution: dict[float, float]  # valid value -> renormalised probability (sums to 1)


def token_value(token: str, valid: Sequence[int | float]) -> int | float | None:
    """The valid value a token spells ("1", " 1", "1.0"), else None."""
    try:
        x = float(token)  # surrounding whitespace is ignored; "", "nan", "inf" match no valid value
    except ValueError:
        return None
    return next((v for v in valid if float(v) == x), None)


def expected_from_top_logprobs(top: Sequence[tuple[str, float]], valid: Sequence[int | float]) -> ExpectedScore:
    """Expectation over valid numeric tokens, renormalised over their probability mass.

    Several tokens spelling the same value (e.g. "2" and " 2") add up."""
    mass: dict[float, float] = {}
    for tok, lp in top:
        v = token_value(tok, valid)
        if v is not None:
            mass[v] = mass.get(v, 0.0) + math.exp(lp)
    total = sum(mass.values())
    if total <= 0.0:
        return ExpectedScore(value=None, valid_mass=0.0, distribution={})
    dist = {v: p / total for v, p in sorted(mass.items())}
    return ExpectedScore(value=sum(v * p for v, p in dist.items()), valid_mass=min(1.0, total), distribution=dist)


_SKIPPABLE = re.compile(r'^[\s"\':]*$')


def find_answer_position(tokens: Sequence[TokenLogprob], valid: Sequence[int | float], key: str = "score"
                         ) -> int | None:
    """Index of the token carrying the answer value: the first token after `"key"` (and its colon) whose text is a
    valid value; only whitespace, quotes and colons may lie in between. None if not found."""
    texts = [t.token for t in tokens]
    m = re.search(r'["\']' + re.escape(key) + r'["\']\s*:', "".join(texts))
    if m is None:
        return None
    ends = itertools.accumulate(len(t) for t in texts)  # where each token ends in the joined text
    start = next((i for i, end in enumerate(ends) if end > m.end()), len(texts))  # the first after the colon
    for i in range(start, len(texts)):
        if token_value(texts[i], valid) is not None:
            return i
        if not _SKIPPABLE.match(texts[i]):
            return None
    return None


def expected_score(completion: Completion, valid: Sequence[int | float], key: str = "score") -> ExpectedScore | None:
    """ExpectedScore at the answer position of a completion requested with top_logprobs (None if absent)."""
    tokens = completion.logprobs or []
    pos = find_answer_position(tokens, valid, key)
    if pos is None:
        return None
    tok = tokens[pos]
    return expected_from_top_logprobs(tok.top or [(tok.token, tok.logprob)], valid)
