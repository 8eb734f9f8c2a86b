"""The arithmetic of a planned request, once: how many HTTP requests and samples it takes, its estimated tokens,
and the true upper bound of one HTTP request's tokens that the budget reserves. The cost estimates
(face/pipeline/estimate.py, face/optimize/estimate.py, face/baselines/llm.py), the budget (face/llm/budget.py) and
the usage (face/llm/usage.py) all count with these functions, in the same units under the same names:

- ``requests``: LM requests (one prompt, its n samples and their redraws: one ``ChatRequest``);
- ``samples``: completions drawn over HTTP (a request of n samples sent whole: n);
- ``http_requests``: HTTP requests, ``ceil(samples / n_per_request)`` per LM request;
- ``input_tokens`` / ``output_tokens``: the prompt is sent once per HTTP request, the answer once per sample.

Estimates count ~4 characters a token (rough, slightly pessimistic). The bound (``Bound``) is not an estimate: a
prompt of B UTF-8 bytes is at most B tokens for a byte-level BPE tokenizer (every token covers at least one byte)
and for a SentencePiece one with byte fallback (every piece covers at least one byte, but for the word-start
marker the template may add before a message); a chat template adds a few special and role tokens per message
(ChatML: 4, Llama 3: 5, Gemma: 5) and the assistant header once (≤ 5). ``MESSAGE_OVERHEAD`` and ``REQUEST_OVERHEAD``
cover them with room to spare; a JSON-schema ``response_format`` is counted as its bytes too (some endpoints add
it to the prompt). The output is at most ``max_tokens`` per sample for an endpoint that honours ``max_tokens``; answers
of more than ``MAX_BYTES_PER_TOKEN`` UTF-8 bytes a token of that bound show an endpoint that does not (4 × the
estimate's rule of thumb: no honest text averages that over a whole answer; the longest token of the embedded model's
vocabulary, a run of 32 spaces or dashes, is one).
"""
from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Annotated, Any

from pydantic import AfterValidator, Field

CHARS_PER_TOKEN = 4  # the estimate's rule of thumb
MESSAGE_OVERHEAD = 16  # bound: tokens a chat template adds per message (role, start / end markers)
REQUEST_OVERHEAD = 16  # bound: tokens it adds per request (BOS, the assistant header)
MAX_BYTES_PER_TOKEN = 16  # answers longer than this a token of their output bound: max_tokens was ignored
WINDOW = 64  # requests the batch driver plans ahead at least (face/llm/stream.py: max(64, 4 × llm.concurrency))
SAMPLE_BYTES = 5_000  # memory a sample of a request in flight holds (measured: 2.5-5.2 KB, scripted server in process)

Messages = Sequence[tuple[str, str]]


def http_requests(samples: int, n_per_request: int) -> int:
    """HTTP requests for ``samples`` samples of one prompt, ``n_per_request`` at most in each."""
    return -(-int(samples) // max(1, int(n_per_request)))


def held_in_memory(n: int) -> int:
    """``n`` samples a request (a ``Samples`` setting), refused before anything is sent or written where the
    ``WINDOW`` requests a run keeps in flight would hold more than half this machine's memory."""
    held, total = WINDOW * n * SAMPLE_BYTES, os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    if held > total / 2:
        raise ValueError(f"must fit in memory: {WINDOW} requests in flight of {n:,} samples would hold ≈ "
                         f"{held / 1e9:,.0f} GB (~{SAMPLE_BYTES // 1000} KB a sample), more than half this machine's "
                         f"{total / 1e9:.0f} GB (at most {total // 2 // (WINDOW * SAMPLE_BYTES):,} here), got {n}")
    return n


Samples = Annotated[int, Field(ge=1), AfterValidator(held_in_memory)]  # a setting's samples per request


def estimate_tokens(text_chars: int) -> int:
    """~4 characters a token (a deliberately rough, slightly pessimistic estimate)."""
    return math.ceil(text_chars / CHARS_PER_TOKEN)


def estimate_input_tokens(messages: Messages) -> int:
    """The estimated prompt tokens of one HTTP request: ~4 characters a token, + 4 per message, + 3."""
    return sum(estimate_tokens(len(c)) + 4 for _, c in messages) + 3


def reported_tokens(usage: Any) -> tuple[int | None, int | None] | str:
    """The (input, output) tokens a reply's ``usage`` reports, None for a count left out (both for 0 and 0: servers
    that do not count send them), or a value that is not a count of tokens (an endpoint misreport)."""
    keys = ("prompt_tokens", "completion_tokens")
    got = [usage.get(k) if isinstance(usage, dict) else usage for k in keys]
    got = [int(v) if isinstance(v, float) and v.is_integer() else v for v in got]
    bad = [f"{k}={v!r}"[:60] for k, v in zip(keys, got) if v is not None and (type(v) is not int or v < 0)]
    return bad[0] if bad else (None, None) if got == [0, 0] else (got[0], got[1])


def input_bound(messages: Messages, response_format: dict | None = None) -> int:
    """At most this many prompt tokens, whatever the tokenizer (see the module doc)."""
    size = sum(len(role.encode("utf-8")) + len(content.encode("utf-8")) + MESSAGE_OVERHEAD
               for role, content in messages)
    if response_format is not None:
        size += len(json.dumps(response_format, ensure_ascii=False).encode("utf-8"))
    return size + REQUEST_OVERHEAD


@dataclass(frozen=True)
class Bound:
    """The most tokens one HTTP request can use: what the budget reserves before it is sent."""

    input_tokens: int
    output_tokens: int

    def explain(self, max_tokens: int, n: int) -> str:
        return (f"{self.input_tokens} input tokens (the prompt's UTF-8 bytes + the chat template's overhead) and "
                f"{self.output_tokens} output tokens (max_tokens {max_tokens} × n {n})")


def bound(messages: Messages, max_tokens: int, n: int, response_format: dict | None = None) -> Bound:
    """The bound of one HTTP request for ``n`` samples (``max_tokens``: the request's after the config's default,
    ``llm.max_tokens`` >= 1: every request has an output bound)."""
    return Bound(input_bound(messages, response_format), int(max_tokens) * int(n))


@dataclass(frozen=True)
class Size:
    """What planned requests take (or took): LM requests, samples, HTTP requests, estimated tokens. Sizes add up
    (a stage is the sum of its requests) and scale (a stage whose particle count is assumed)."""

    requests: int = 0
    samples: int = 0
    http_requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0

    def __add__(self, other: Size) -> Size:
        return Size(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))

    def scaled(self, factor: float) -> Size:
        return Size(*(round(getattr(self, f.name) * factor) for f in fields(self)))


def planned(samples: int, n_per_request: int, input_tokens: int, answer_tokens: int, requests: int = 1) -> Size:
    """``requests`` LM requests of ``samples`` samples each; ``input_tokens``: the prompt tokens of one HTTP request
    of each, summed over the ``requests``; ``answer_tokens``: the assumed length of one answer."""
    per = http_requests(samples, n_per_request)
    return Size(requests, requests * samples, requests * per, input_tokens * per, requests * samples * answer_tokens)


def planned_request(messages: Messages, samples: int, n_per_request: int, answer_tokens: int) -> Size:
    """One LM request of ``samples`` samples of ``messages``."""
    return planned(samples, n_per_request, estimate_input_tokens(messages), answer_tokens)


def cost_usd(input_tokens: float, output_tokens: float, price_in: float, price_out: float) -> float:
    return input_tokens * price_in / 1e6 + output_tokens * price_out / 1e6
