"""Accounting: per-call records, totals, cost, budget caps and dry-run estimates.

A *call* is one `client.chat(request)` (one ChatRequest, n samples). It may be
served from the cache (per sample) and/or need one or more HTTP requests
(n is split into chunks of `n_per_request`). Only HTTP requests cost money.
`face.llm.budget` fills this in: per HTTP request (caps, cost, retries) and per call (records).
A request's cost is the tokens the endpoint reports (the estimate where it reports none); the caps reserve
each request's worst case before it is sent (``reserve``) and take the real cost when it settles
(``settle``). ``note_scores`` adds what the scorer made of the answers to the adapters' counts.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from face.files import atomic_write_text
from face.secrets import redact


class BudgetExceeded(RuntimeError):
    """Raised before a request that would exceed llm.max_calls or llm.max_cost_usd.

    ``render`` (optional) writes the message when it is read rather than when the stop happened: requests
    still in flight then settle first, so the spend it states is the one ``llm_usage.json`` records."""

    def __init__(self, message: str, render: Any = None):
        super().__init__(message)
        self.render = render

    def __str__(self) -> str:
        return self.render() if self.render is not None else super().__str__()


@dataclass
class CallRecord:
    tag: str
    n: int
    cached_samples: int = 0
    http_requests: int = 0
    retries: int = 0
    latency_s: float = 0.0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    dry_run: bool = False
    error: str | None = None
    answer_retries: int = 0  # extra draws that replaced invalid answers
    rejected_answers: int = 0  # draws that failed validation
    invalid_answers: int = 0  # samples returned invalid (no valid draw within llm.answer_retries)


def estimate_tokens(text_chars: int) -> int:
    """~4 characters per token (a deliberately rough, slightly pessimistic estimate)."""
    return math.ceil(text_chars / 4)


def estimate_input_tokens(messages: tuple[tuple[str, str], ...]) -> int:
    return sum(estimate_tokens(len(c)) + 4 for _, c in messages) + 3


def cost_usd(input_tokens: float, output_tokens: float, price_in: float, price_out: float) -> float:
    return input_tokens * price_in / 1e6 + output_tokens * price_out / 1e6


def _quantile(xs: list[float], q: float) -> float:
    if not xs:
        return 0.0
    s = sorted(xs)
    pos = q * (len(s) - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


KEEP_CALLS = 1000  # per-call records kept for llm_usage.json (the first ones, and every failed call); totals are exact
KEEP_EVENTS = 1000  # fallback / invalid-answer events kept (counts are exact)
LATENCY_SAMPLE = 10_000  # HTTP latencies kept for the quantiles (a uniform reservoir beyond that; mean and max exact)


class Latencies:
    """HTTP latencies in constant memory: exact count, mean and max; quantiles from a uniform reservoir of
    ``LATENCY_SAMPLE`` values (exact while there are fewer)."""

    def __init__(self) -> None:
        import random

        self.n, self.total, self.max = 0, 0.0, 0.0
        self.sample: list[float] = []
        self._rng = random.Random(0)

    def append(self, x: float) -> None:
        self.n += 1
        self.total += x
        self.max = max(self.max, x)
        if len(self.sample) < LATENCY_SAMPLE:
            self.sample.append(x)
        else:
            j = self._rng.randrange(self.n)
            if j < LATENCY_SAMPLE:
                self.sample[j] = x

    def __len__(self) -> int:
        return self.n

    def __bool__(self) -> bool:
        return self.n > 0


_TAG_FIELDS = ("calls", "http_requests", "cache_hits", "failures", "input_tokens", "output_tokens", "cost_usd",
               "answer_retries", "rejected_answers", "invalid_answers", "defaulted_answers", "logprob_fallbacks")


@dataclass
class Usage:
    price_input_per_mtok: float = 0.0
    price_output_per_mtok: float = 0.0
    max_calls: int | None = None
    max_cost_usd: float | None = None
    dry_run: bool = False
    cache_dir: str | None = None
    records: list[CallRecord] = field(default_factory=list)  # the first KEEP_CALLS calls and every failed one
    fallback_events: list[dict[str, Any]] = field(default_factory=list)  # the first KEEP_EVENTS
    invalid_events: list[dict[str, Any]] = field(default_factory=list)  # samples left invalid (the first KEEP_EVENTS)
    calls: int = 0  # every call (records keeps a bounded part of them)
    fallbacks: int = 0
    invalid_samples: int = 0
    by_tag: dict[str, dict[str, float]] = field(default_factory=dict)  # running totals per tag
    # running totals (kept incrementally so budget checks are O(1))
    http_requests: int = 0
    dry_run_requests: int = 0
    retries: int = 0
    cache_hits: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    spent_usd: float = 0.0
    reserved_usd: float = 0.0  # worst cases of the requests in flight
    requests_in_flight: int = 0
    est_input_tokens: int = 0
    est_output_tokens: int = 0
    est_cost_usd: float = 0.0
    # reported / estimated tokens, the largest seen (>= 1): a request's worst case is scaled by them, so an
    # endpoint whose tokenizer counts more than ~4 characters a token cannot push the spend past the cap
    input_ratio: float = 1.0
    output_ratio: float = 1.0
    settled: int = 0  # HTTP requests finished (their cost known)
    unreported_usage: int = 0  # of them, answered without token counts (their cost is the estimate)
    http_latencies: Latencies = field(default_factory=Latencies)
    # () -> {"concurrency_limit", "concurrency_limit_reached", "max_in_flight", ...} (set by BudgetLM)
    concurrency: Any = field(default=None, repr=False, compare=False)
    _written: tuple = field(default=(), repr=False, compare=False)  # (path, counts) of the last write_artifact

    # ---- budget -------------------------------------------------------
    def estimate(self, messages, max_tokens: int, n: int) -> tuple[int, int, float]:
        tin = estimate_input_tokens(messages)
        tout = max_tokens * n
        return tin, tout, cost_usd(tin, tout, self.price_input_per_mtok, self.price_output_per_mtok)

    def worst_case(self, est: tuple[int, int, float]) -> float:
        """What one request may cost at most: its input estimate and max_tokens × n, each scaled by the largest
        ratio of reported to estimated tokens seen so far."""
        tin, tout, _ = est
        return cost_usd(tin * self.input_ratio, tout * self.output_ratio, self.price_input_per_mtok,
                        self.price_output_per_mtok)

    def must_wait(self, est: tuple[int, int, float]) -> bool:
        """Whether the next request fits the cost cap only once the requests in flight have settled (their
        reservations are worst cases: most give back the difference)."""
        if self.dry_run or self.max_cost_usd is None or self.requests_in_flight <= 0:
            return False
        worst = self.worst_case(est)
        return (self.spent_usd + self.reserved_usd + worst > self.max_cost_usd
                and self.spent_usd + worst <= self.max_cost_usd)

    def reserve(self, tag: str, est: tuple[int, int, float]) -> float:
        """Check the caps for one more HTTP request and reserve its worst-case cost (returned: hand it back to
        ``settle`` or ``release``).

        Called right before sending (no await in between), so concurrent tasks
        cannot jointly overshoot the caps."""
        tin, tout, c = est
        worst = 0.0
        if not self.dry_run:
            worst = self.worst_case(est)
            if self.max_calls is not None and self.http_requests + 1 > self.max_calls:
                raise self._stop(f"llm.max_calls={self.max_calls} reached", tag)
            if self.max_cost_usd is not None and self.spent_usd + self.reserved_usd + worst > self.max_cost_usd:
                raise self._stop(f"llm.max_cost_usd={self.max_cost_usd} would be exceeded by the next request "
                                 f"(worst case ${worst:.6f})", tag)
            self.http_requests += 1
            self.requests_in_flight += 1
            self.reserved_usd += worst
        else:
            self.dry_run_requests += 1
        self.est_input_tokens += tin
        self.est_output_tokens += tout
        self.est_cost_usd += c
        return worst

    def settle(self, reserved: float, est: tuple[int, int, float], input_tokens: int, output_tokens: int,
               latency_s: float, output_estimate: int = 0) -> tuple[int, int, float]:
        """A request finished: replace its reservation with its cost, from the tokens the endpoint reports; where
        it reports none, the estimate (the input's; ``output_estimate`` for the output, ~4 characters a token of
        the answers). Returns (input tokens, output tokens, cost) as counted."""
        self._give_back(reserved)
        tin, tout, _ = est
        if input_tokens > 0 and tin > 0:
            self.input_ratio = max(self.input_ratio, input_tokens / tin)
        if output_tokens > 0 and tout > 0:
            self.output_ratio = max(self.output_ratio, output_tokens / tout)
        if input_tokens <= 0 and output_tokens <= 0:
            self.unreported_usage += 1
            input_tokens, output_tokens = tin, output_estimate
        c = cost_usd(input_tokens, output_tokens, self.price_input_per_mtok, self.price_output_per_mtok)
        self.settled += 1
        self.spent_usd += c
        self.input_tokens += input_tokens
        self.output_tokens += output_tokens
        self.http_latencies.append(latency_s)
        return input_tokens, output_tokens, c

    def release(self, reserved: float) -> None:
        """A request failed for good: drop its reservation."""
        self._give_back(reserved)

    def _give_back(self, reserved: float) -> None:
        self.requests_in_flight = max(0, self.requests_in_flight - 1)
        # nothing in flight: exactly nothing reserved (no rounding residue left to block a request)
        self.reserved_usd = max(0.0, self.reserved_usd - reserved) if self.requests_in_flight else 0.0

    def _stop(self, what: str, tag: str) -> BudgetExceeded:
        """The budget stop; its message is written when read, once the requests in flight have settled."""
        return BudgetExceeded(self._budget_message(what, tag), render=lambda: self._budget_message(what, tag))

    def _budget_message(self, what: str, tag: str) -> str:
        remaining = []
        if self.max_calls is not None:
            remaining.append(f"{max(0, self.max_calls - self.http_requests)} requests")
        if self.max_cost_usd is not None:
            remaining.append(f"${max(0.0, self.max_cost_usd - self.spent_usd - self.reserved_usd):.6f}")
        where = f" in {self.cache_dir}" if self.cache_dir else ""
        return (f"LLM budget exceeded: {what} (next request tag={tag!r}). "
                f"Done so far: {self.calls} calls, {self.http_requests} HTTP requests sent, "
                f"{self.cache_hits} samples from cache, ${self.spent_usd:.6f} spent"
                f"{f' (${self.reserved_usd:.6f} still in flight)' if self.reserved_usd else ''}; "
                f"remaining budget: {', '.join(remaining) or 'n/a'}. "
                f"All finished calls are cached{where}: raise the cap and re-run to continue "
                f"without paying for them again.")

    # ---- records ------------------------------------------------------
    def add(self, rec: CallRecord) -> None:
        self.calls += 1
        if rec.error:  # written to llm_usage.json: an error may quote the key (face.secrets)
            rec.error = redact(rec.error)
        self.cache_hits += rec.cached_samples
        if len(self.records) < KEEP_CALLS or rec.error is not None:
            self.records.append(rec)
        t = self.by_tag.get(rec.tag or "(none)")
        if t is None:
            t = self.by_tag[rec.tag or "(none)"] = dict.fromkeys(_TAG_FIELDS, 0)
            t["cost_usd"] = 0.0
        t["calls"] += 1
        t["http_requests"] += rec.http_requests
        t["cache_hits"] += rec.cached_samples
        t["failures"] += rec.error is not None
        t["input_tokens"] += rec.input_tokens
        t["output_tokens"] += rec.output_tokens
        t["cost_usd"] += rec.cost_usd
        t["answer_retries"] += rec.answer_retries
        t["rejected_answers"] += rec.rejected_answers
        t["invalid_answers"] += rec.invalid_answers

    def note_retries(self, k: int) -> None:
        """Retries spent on one HTTP request (also when it failed for good)."""
        self.retries += k

    def note_fallback(self, tag: str, reason: str) -> None:
        self.fallbacks += 1
        t = self.by_tag.setdefault(tag or "(none)", {**dict.fromkeys(_TAG_FIELDS, 0), "cost_usd": 0.0})
        t["fallbacks"] = t.get("fallbacks", 0) + 1
        if len(self.fallback_events) < KEEP_EVENTS:
            self.fallback_events.append({"tag": tag, "reason": reason})

    def note_invalid(self, tag: str, reason: str) -> None:
        """A sample with no valid answer after the answer retries (llm.answer_retries)."""
        self.invalid_samples += 1
        if len(self.invalid_events) < KEEP_EVENTS:
            self.invalid_events.append({"tag": tag, "reason": reason})

    def note_scores(self, tag: str, rejected: int = 0, redraws: int = 0, invalid: int = 0, defaulted: int = 0,
                    logprob_fallbacks: int = 0) -> None:
        """What the scorer made of its answers (face.pipeline.scoring parses them itself, not through an adapter): draws
        that were not a valid score, extra draws, samples left without a valid answer, samples counted as the
        lowest score, answers scored without their logprobs. Added to the same totals as the adapters' counts."""
        t = self.by_tag.setdefault(tag or "(none)", {**dict.fromkeys(_TAG_FIELDS, 0), "cost_usd": 0.0})
        for k, v in (("rejected_answers", rejected), ("answer_retries", redraws), ("invalid_answers", invalid),
                     ("defaulted_answers", defaulted), ("logprob_fallbacks", logprob_fallbacks)):
            t[k] = t.get(k, 0) + v

    def counts_line(self) -> str:
        """The answer counts of the run, one line (printed after a run; the same numbers as llm_usage.json)."""
        s = self.summary()
        return (f"LLM answers: {s['rejected_answers']} invalid draws, {s['answer_retries']} redraws, "
                f"{s['invalid_answers']} samples without a valid answer ({s['defaulted_answers']} scored as the "
                f"lowest), {s['logprob_fallbacks']} scored without logprobs; {s['http_requests']} HTTP requests, "
                f"{s['retries']} retries, ${s['cost_usd']:.6f} spent")

    # ---- reports ------------------------------------------------------
    def summary(self) -> dict[str, Any]:
        lat = self.http_latencies
        tags = self.by_tag.values()
        failed = [r for r in self.records if r.error is not None]
        return {
            "calls": self.calls,
            "http_requests": self.http_requests,
            "cache_hits": self.cache_hits,
            "retries": self.retries,
            "failures": sum(not r.error.startswith("budget") for r in failed),
            "budget_stops": sum(r.error.startswith("budget") for r in failed),
            "fallbacks": self.fallbacks,
            "answer_retries": sum(t["answer_retries"] for t in tags),
            "rejected_answers": sum(t["rejected_answers"] for t in tags),
            "invalid_answers": sum(t["invalid_answers"] for t in tags),
            "defaulted_answers": sum(t.get("defaulted_answers", 0) for t in tags),
            "logprob_fallbacks": sum(t.get("logprob_fallbacks", 0) for t in tags),
            "unreported_usage_requests": self.unreported_usage,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cost_usd": self.spent_usd,
            "dry_run": self.dry_run,
            "dry_run_requests": self.dry_run_requests,
            "estimated_input_tokens": self.est_input_tokens,
            "estimated_output_tokens": self.est_output_tokens,
            "estimated_cost_usd": self.est_cost_usd,
            "latency_mean_s": lat.total / lat.n if lat.n else 0.0,
            "latency_p50_s": _quantile(lat.sample, 0.5),
            "latency_p95_s": _quantile(lat.sample, 0.95),
            "latency_max_s": lat.max,
            **(self.concurrency() if self.concurrency is not None else {}),
            "by_tag": {k: dict(v) for k, v in self.by_tag.items()},
        }

    def mlflow_metrics(self, prefix: str = "llm_") -> dict[str, float]:
        """The run's totals; the counts per stage (``by_tag``: ~10 numbers per stage and aspect, 270 for an
        optimizer run) stay in the usage artifact, so the runs table's metric list stays short."""
        s = self.summary()
        return {prefix + k: float(v) for k, v in s.items() if isinstance(v, (int, float))}

    def write_artifact(self, path: str | os.PathLike) -> Path:
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        # one line per call record (json's C encoder; `indent` would switch to its pure-Python one)
        state = (str(p.resolve()), self.calls, self.fallbacks, self.invalid_samples, len(self.records))
        if state == self._written and p.exists():
            return p  # already written with these records (the method wrote it, then the client closed)
        calls = ",\n  ".join(json.dumps(vars(r)) for r in self.records)  # flat records: no asdict deep copy
        kept = "" if len(self.records) == self.calls else (
            f' "calls_note": "the first {KEEP_CALLS} of {self.calls} calls and every failed one; totals and by_tag '
            'count them all",\n')
        text = (f'{{"totals": {json.dumps(self.summary(), indent=1)},\n{kept} "calls": [\n  {calls}\n ],\n'
                f' "fallbacks": {json.dumps(self.fallback_events)},\n'
                f' "invalid_answers": {json.dumps(self.invalid_events)}\n}}\n')
        atomic_write_text(p, text)  # a stop while writing never leaves half a file
        self._written = state
        return p
