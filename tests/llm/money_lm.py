"""What the money-path tests of the LLM layer share: a scripted inner layer, an answer type, hand-priced bounds."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from helpers import approx  # noqa: F401 (the money tests of this layer import it from here)

from face.llm.base import ChatRequest, ChatResult, Completion, Provisional
from face.llm.usage import Piece, Usage

MSGS = (("user", "hi"),)  # bound: 4 + 2 + 16 + 16 = 38 input tokens; estimate: ceil(2/4) + 4 + 3 = 8
PRICE_IN, PRICE_OUT = 1.0, 4.0
WORST = 38 * PRICE_IN / 1e6 + 50 * PRICE_OUT / 1e6  # the bound of 5 samples of max_tokens 10, priced by hand


def piece(n: int = 5) -> Piece:
    return Piece.of("t", MSGS, 10, n, None)


def reported(tin, tout) -> dict:
    """A reply's ``usage`` reporting these tokens."""
    return {"prompt_tokens": tin, "completion_tokens": tout, "total_tokens": 0}


def usage(**kw) -> Usage:
    return Usage(price_input_per_mtok=PRICE_IN, price_output_per_mtok=PRICE_OUT, **kw)


def cfg(**kw) -> SimpleNamespace:
    base = dict(n_per_request=2, concurrency=4, dry_run=False, max_tokens=10, temperature=0.0, top_p=1.0,
                supports_json_schema=False, supports_logprobs=True, seed=0, concurrency_start=None,
                adaptive_concurrency=False, latency_tolerance=2.0)
    return SimpleNamespace(**{**base, **kw})


class Scripted:
    """An inner layer answering sample i with ``texts[i]`` ("ok" by default), reporting ``tokens`` (None: no usage);
    it remembers what it was asked."""

    def __init__(self, texts: dict[int, str] | None = None, tokens: tuple[int, int] | None = None,
                 dry_run: bool = False):
        self.texts, self.tokens, self.dry_run = texts or {}, tokens, dry_run
        self.asked: list[tuple[int, int]] = []

    async def chat(self, req: ChatRequest) -> ChatResult:
        self.asked.append((req.first_sample, req.n))
        samples = [Completion(self.texts.get(i, "ok"), "stop", sample_index=i, dry_run=self.dry_run)
                   for i in req.indices]
        return ChatResult(request=req, samples=samples, http_requests=1,
                          usage=None if self.tokens is None else reported(*self.tokens))


class Answer:
    """An answer type: "ok..." is valid ((text,)), "prov:x" provisional ((x,)), anything else invalid (a str: why)."""

    keeps_provisional = True

    def parse(self, s: Completion):
        if s.text.startswith("ok"):
            return (s.text,)
        if s.text.startswith("prov:"):
            return Provisional((s.text[5:],), "provisional")
        return "not ok"


def run(coro):
    return asyncio.run(coro)
