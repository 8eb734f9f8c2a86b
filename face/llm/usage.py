"""Accounting: per-call records, totals, cost, budget caps and dry-run estimates.

A *call* is one `client.chat(request)` (one ChatRequest, n samples). It may be
served from the cache (per sample) and/or need one or more HTTP requests
(n is split into chunks of `n_per_request`). Only HTTP requests cost money.
`face.llm.budget` fills this in: per HTTP request (caps, cost, retries) and per call (records).
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class BudgetExceeded(RuntimeError):
    """Raised before a request that would exceed llm.max_calls or llm.max_cost_usd."""


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


@dataclass
class Usage:
    price_input_per_mtok: float = 0.0
    price_output_per_mtok: float = 0.0
    max_calls: int | None = None
    max_cost_usd: float | None = None
    dry_run: bool = False
    cache_dir: str | None = None
    records: list[CallRecord] = field(default_factory=list)
    fallback_events: list[dict[str, Any]] = field(default_factory=list)
    invalid_events: list[dict[str, Any]] = field(default_factory=list)  # samples left invalid (with the reason)
    # running totals (kept incrementally so budget checks are O(1))
    http_requests: int = 0
    dry_run_requests: int = 0
    retries: int = 0
    cache_hits: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    spent_usd: float = 0.0
    reserved_usd: float = 0.0  # estimates of requests in flight
    est_input_tokens: int = 0
    est_output_tokens: int = 0
    est_cost_usd: float = 0.0
    http_latencies: list[float] = field(default_factory=list)
    # () -> {"concurrency_limit", "concurrency_limit_reached", "max_in_flight", ...} (set by BudgetLM)
    concurrency: Any = field(default=None, repr=False, compare=False)
    _written: tuple = field(default=(), repr=False, compare=False)  # (path, counts) of the last write_artifact

    # ---- budget -------------------------------------------------------
    def estimate(self, messages, max_tokens: int, n: int) -> tuple[int, int, float]:
        tin = estimate_input_tokens(messages)
        tout = max_tokens * n
        return tin, tout, cost_usd(tin, tout, self.price_input_per_mtok, self.price_output_per_mtok)

    def reserve(self, tag: str, est: tuple[int, int, float]) -> None:
        """Check the caps for one more HTTP request and reserve its estimated cost.

        Called right before sending (no await in between), so concurrent tasks
        cannot jointly overshoot the caps."""
        tin, tout, c = est
        if not self.dry_run:
            if self.max_calls is not None and self.http_requests + 1 > self.max_calls:
                raise BudgetExceeded(self._budget_message(
                    f"llm.max_calls={self.max_calls} reached", tag))
            if self.max_cost_usd is not None and self.spent_usd + self.reserved_usd + c > self.max_cost_usd:
                raise BudgetExceeded(self._budget_message(
                    f"llm.max_cost_usd={self.max_cost_usd} would be exceeded by the next request "
                    f"(estimated ${c:.6f}; spent ${self.spent_usd:.6f}, in flight ${self.reserved_usd:.6f})", tag))
            self.http_requests += 1
            self.reserved_usd += c
        else:
            self.dry_run_requests += 1
        self.est_input_tokens += tin
        self.est_output_tokens += tout
        self.est_cost_usd += c

    def settle(self, est_cost: float, input_tokens: int, output_tokens: int, latency_s: float) -> float:
        """A request finished: replace its reservation with the actual cost."""
        self.reserved_usd = max(0.0, self.reserved_usd - est_cost)
        c = cost_usd(input_tokens, output_tokens, self.price_input_per_mtok, self.price_output_per_mtok)
        self.spent_usd += c
        self.input_tokens += input_tokens
        self.output_tokens += output_tokens
        self.http_latencies.append(latency_s)
        return c

    def release(self, est_cost: float) -> None:
        """A request failed for good: drop its reservation."""
        self.reserved_usd = max(0.0, self.reserved_usd - est_cost)

    def _budget_message(self, what: str, tag: str) -> str:
        remaining = []
        if self.max_calls is not None:
            remaining.append(f"{max(0, self.max_calls - self.http_requests)} requests")
        if self.max_cost_usd is not None:
            remaining.append(f"${max(0.0, self.max_cost_usd - self.spent_usd - self.reserved_usd):.6f}")
        where = f" in {self.cache_dir}" if self.cache_dir else ""
        return (f"LLM budget exceeded: {what} (next request tag={tag!r}). "
                f"Done so far: {len(self.records)} calls, {self.http_requests} HTTP requests sent, "
                f"{self.cache_hits} samples from cache, ${self.spent_usd:.6f} spent; "
                f"remaining budget: {', '.join(remaining) or 'n/a'}. "
                f"All finished calls are cached{where}: raise the cap and re-run to continue "
                f"without paying for them again.")

    # ---- records ------------------------------------------------------
    def add(self, rec: CallRecord) -> None:
        self.records.append(rec)
        self.cache_hits += rec.cached_samples

    def note_retries(self, k: int) -> None:
        """Retries spent on one HTTP request (also when it failed for good)."""
        self.retries += k

    def note_fallback(self, tag: str, reason: str) -> None:
        self.fallback_events.append({"tag": tag, "reason": reason})

    def note_invalid(self, tag: str, reason: str) -> None:
        """A sample with no valid answer after the answer retries (llm.answer_retries)."""
        self.invalid_events.append({"tag": tag, "reason": reason})

    # ---- reports ------------------------------------------------------
    def summary(self) -> dict[str, Any]:
        lat = self.http_latencies
        by_tag: dict[str, dict[str, float]] = {}
        for r in self.records:
            t = by_tag.setdefault(r.tag or "(none)", {"calls": 0, "http_requests": 0, "cache_hits": 0,
                                                     "failures": 0, "input_tokens": 0, "output_tokens": 0,
                                                     "cost_usd": 0.0, "answer_retries": 0, "rejected_answers": 0,
                                                     "invalid_answers": 0})
            t["calls"] += 1
            t["http_requests"] += r.http_requests
            t["cache_hits"] += r.cached_samples
            t["failures"] += r.error is not None
            t["input_tokens"] += r.input_tokens
            t["output_tokens"] += r.output_tokens
            t["cost_usd"] += r.cost_usd
            t["answer_retries"] += r.answer_retries
            t["rejected_answers"] += r.rejected_answers
            t["invalid_answers"] += r.invalid_answers
        for e in self.fallback_events:
            by_tag.setdefault(e["tag"] or "(none)", {}).setdefault("fallbacks", 0)
            by_tag[e["tag"] or "(none)"]["fallbacks"] += 1
        return {
            "calls": len(self.records),
            "http_requests": self.http_requests,
            "cache_hits": self.cache_hits,
            "retries": self.retries,
            "failures": sum(r.error is not None and not r.error.startswith("budget") for r in self.records),
            "budget_stops": sum(r.error is not None and r.error.startswith("budget") for r in self.records),
            "fallbacks": len(self.fallback_events),
            "answer_retries": sum(r.answer_retries for r in self.records),
            "rejected_answers": sum(r.rejected_answers for r in self.records),
            "invalid_answers": sum(r.invalid_answers for r in self.records),
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cost_usd": self.spent_usd,
            "dry_run": self.dry_run,
            "dry_run_requests": self.dry_run_requests,
            "estimated_input_tokens": self.est_input_tokens,
            "estimated_output_tokens": self.est_output_tokens,
            "estimated_cost_usd": self.est_cost_usd,
            "latency_mean_s": sum(lat) / len(lat) if lat else 0.0,
            "latency_p50_s": _quantile(lat, 0.5),
            "latency_p95_s": _quantile(lat, 0.95),
            "latency_max_s": max(lat) if lat else 0.0,
            **(self.concurrency() if self.concurrency is not None else {}),
            "by_tag": by_tag,
        }

    def mlflow_metrics(self, prefix: str = "llm_") -> dict[str, float]:
        s = self.summary()
        out = {prefix + k: float(v) for k, v in s.items() if isinstance(v, (int, float))}
        for tag, d in s["by_tag"].items():
            safe = "".join(ch if ch.isalnum() or ch in "_-." else "_" for ch in tag)
            for k, v in d.items():
                out[f"{prefix}{safe}_{k}"] = float(v)
        return out

    def write_artifact(self, path: str | os.PathLike) -> Path:
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        # one line per call record (json's C encoder; `indent` would switch to its pure-Python one)
        state = (str(p.resolve()), len(self.records), len(self.fallback_events), len(self.invalid_events))
        if state == self._written and p.exists():
            return p  # already written with these records (the method wrote it, then the client closed)
        calls = ",\n  ".join(json.dumps(vars(r)) for r in self.records)  # flat records: no asdict deep copy
        text = (f'{{"totals": {json.dumps(self.summary(), indent=1)},\n "calls": [\n  {calls}\n ],\n'
                f' "fallbacks": {json.dumps(self.fallback_events)},\n'
                f' "invalid_answers": {json.dumps(self.invalid_events)}\n}}\n')
        tmp = p.with_name(f".{p.name}.{os.getpid()}.part")
        tmp.write_text(text)
        os.replace(tmp, p)  # atomic: a stop while writing never leaves half a file
        self._written = state
        return p
