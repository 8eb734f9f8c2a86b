"""`ValidatingLM`: the one draw-until-valid loop of the project. Scoring, decomposition, the baselines and the
optimizer ask through it; nothing else redraws.

A request with an `adapter` (its answer type: `parse(completion) -> value | reason | Provisional`) asks for n
valid answers and may spend what its `draws` policy allows (`Draws`: rounds, max_extra; face/llm/base.py). Round 1
draws samples first_sample .. first_sample + n - 1; each later round draws the next fresh indices, one per answer
still missing (so a rerun asks for exactly the same indices and is served from the cache, and the cache can never
hand back the same invalid text), until n are valid, `rounds` rounds are spent or `max_extra` draws beyond the n.
A dry run stops after round 1 (its placeholders carry nothing to validate). The result carries every draw in index
order; an answer still missing at the end is filled by the earliest provisional draw if there is one. Invalid draws
are stored in the cache *marked invalid* (face/llm/cache.py), never as valid samples. Counts go to the result
(`answer_retries`: draws beyond the n, `rejected_answers`: invalid draws, `invalid_samples`: answers still
missing) and so to the usage (llm_usage.json, the `llm_*` metrics, the console's counts line).
A request without an adapter passes through.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from .base import DEFAULT_DRAWS, ChatRequest, ChatResult, Completion, merge, validate
from .usage import Usage


class ValidatingLM:
    def __init__(self, inner: Any, usage: Usage):
        self.inner, self.usage = inner, usage

    async def chat(self, req: ChatRequest) -> ChatResult:
        adapter = req.adapter
        if adapter is None:
            return await self.inner.chat(req)
        policy = req.draws or DEFAULT_DRAWS
        parts: list[ChatResult] = []
        draws: list[Completion] = []
        ask = req
        for _ in range(policy.rounds):
            res = await self.inner.chat(ask)
            parts.append(res)
            draws += (validate(s, adapter) for s in res.samples)
            if any(s.dry_run for s in res.samples):
                break
            room = policy.room(req.n - sum(s.error is None for s in draws), len(draws) - req.n)
            if room <= 0:
                break
            ask = replace(req, n=room, first_sample=req.first_sample + len(draws))
        rejected = sum(s.error is not None for s in draws)
        missing = req.n - (len(draws) - rejected)
        for s in [s for s in draws if s.error is not None and s.value is not None][:max(0, missing)]:
            s.error = None  # a provisional answer stands in for one still missing
        out = merge(replace(req, n=len(draws)) if len(draws) != req.n else req, parts,
                    {s.sample_index: s for s in draws})
        out.request = req
        out.answer_retries, out.rejected_answers = len(draws) - req.n, rejected
        if out.invalid_samples:
            last = next((s.error for s in reversed(draws) if s.error is not None), "")
            why = f"no valid answer in {len(draws)} draw{'s' if len(draws) != 1 else ''}; last: {last}"
            for _ in range(out.invalid_samples):
                self.usage.note_invalid(req.tag, why)
        return out
