"""Accounting: per-request records, totals, cost, the budget caps and dry-run estimates.

A *request* is one `client.chat(request)` (one ChatRequest: n samples of one prompt, and the redraws of its invalid
answers). Its samples may come from the cache and/or need HTTP requests (n split into chunks of `n_per_request`);
only HTTP requests cost money. The units and their arithmetic are face/llm/sizes.py's: `requests`, `samples`
(drawn over HTTP), `http_requests`, tokens. `face.llm.budget` fills this in: per HTTP request (caps, cost,
retries) and per request (records). Before an HTTP request is sent its true upper bound (`sizes.Bound`: the
prompt's UTF-8 bytes + the chat template's overhead, `max_tokens` × n) is reserved (``reserve``); when it settles
its cost is the tokens the endpoint reports (``sizes.reported_tokens``: integers >= 0; else the bound) (``settle``). An
endpoint *misreport* -- usage not counts of tokens or above the bound, answers longer than the bound can hold --
stops a run under llm.max_cost_usd at once, else is a warning. ``note_scores`` adds what the scorer made of the answers.
"""
from __future__ import annotations

import json
import logging
import os
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from face.files import atomic_write_text
from face.secrets import redact

from .sizes import MAX_BYTES_PER_TOKEN, Bound, bound, cost_usd, estimate_input_tokens, reported_tokens


class BudgetExceeded(RuntimeError):
    """Raised before a request that would exceed llm.max_calls or llm.max_cost_usd, or after an endpoint misreport
    under llm.max_cost_usd (the cap could not hold against it).

    ``render`` (optional) writes the message when it is read rather than when the stop happened: requests
    still in flight then settle first, so the spend it states is the one ``llm_usage.json`` records."""

    def __init__(self, message: str, render: Any = None):
        super().__init__(message)
        self.render = render

    def __str__(self) -> str:
        return self.render() if self.render is not None else super().__str__()


@dataclass(frozen=True)
class Piece:
    """One HTTP request as the budget sees it: its samples, estimated prompt tokens and true bound."""

    tag: str
    n: int
    max_tokens: int
    est_input_tokens: int
    bound: Bound

    @classmethod
    def of(cls, tag: str, messages: Any, max_tokens: int, n: int, response_format: dict | None) -> Piece:
        return cls(tag, n, max_tokens, estimate_input_tokens(messages),
                   bound(messages, max_tokens, n, response_format))


KEEP_REQUESTS = 1000  # request records kept for llm_usage.json (the first ones, and every failed one); totals exact
KEEP_EVENTS = 1000  # invalid-answer events kept (the count is exact)
LATENCY_SAMPLE = 10_000  # HTTP latencies kept for the quantiles (a uniform reservoir beyond that; mean and max exact)


class Latencies:
    """HTTP latencies in constant memory: exact count, mean and max; quantiles from a uniform reservoir of
    ``LATENCY_SAMPLE`` values (exact while there are fewer)."""

    def __init__(self) -> None:
        self.n, self.total, self.max = 0, 0.0, 0.0
        self.sample: list[float] = []
        self._rng = random.Random(0)

    def append(self, x: float) -> None:
        self.n += 1
        self.total += x
        self.max = max(self.max, x)
        if len(self.sample) < LATENCY_SAMPLE:
            self.sample.append(x)
        elif (j := self._rng.randrange(self.n)) < LATENCY_SAMPLE:
            self.sample[j] = x


_TAG_FIELDS = ("requests", "samples", "http_requests", "cache_hits", "failures", "input_tokens", "output_tokens",
               "cost_usd", "answer_retries", "rejected_answers", "invalid_answers", "defaulted_answers",
               "logprob_fallbacks")

# the per-tag totals a request record adds its field of the same name to (and its cached_samples to cache_hits)
_FROM_RECORD = ("samples", "http_requests", "input_tokens", "output_tokens", "cost_usd", "answer_retries",
                "rejected_answers", "invalid_answers")


def _tag_totals() -> dict[str, float]:
    return {**dict.fromkeys(_TAG_FIELDS, 0), "cost_usd": 0.0}


@dataclass
class Usage:
    price_input_per_mtok: float = 0.0
    price_output_per_mtok: float = 0.0
    max_calls: int | None = None  # llm.max_calls: a cap on HTTP requests
    max_cost_usd: float | None = None
    dry_run: bool = False
    cache_dir: str | None = None
    records: list[dict[str, Any]] = field(default_factory=list)  # the first KEEP_REQUESTS requests and every failed one
    invalid_events: list[dict[str, Any]] = field(default_factory=list)  # answers left missing (the first KEEP_EVENTS)
    requests: int = 0  # every request (records keeps a bounded part of them)
    by_tag: dict[str, dict[str, float]] = field(default_factory=dict)  # running totals per tag
    # running totals (kept incrementally so budget checks are O(1))
    http_requests: int = 0
    samples: int = 0  # samples drawn over HTTP (the n of every HTTP request sent)
    dry_run_requests: int = 0
    retries: int = 0
    cache_hits: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    spent_usd: float = 0.0
    reserved_usd: float = 0.0  # bounds of the requests in flight
    requests_in_flight: int = 0
    est_input_tokens: int = 0
    est_output_tokens: int = 0
    est_cost_usd: float = 0.0
    unreported_usage: int = 0  # HTTP requests answered without token counts (charged at their bound)
    misreports: int = 0  # HTTP requests the endpoint misreported (usage not counts, above the bound, overlong text)
    misreport: str | None = None  # the first of them, said once (under llm.max_cost_usd: every later one refused)
    http_latencies: Latencies = field(default_factory=Latencies)
    # () -> {"concurrency_limit", "concurrency_limit_reached", "max_in_flight", ...} (set by BudgetLM)
    concurrency: Any = field(default=None, repr=False, compare=False)
    _written: tuple = field(default=(), repr=False, compare=False)  # (path, counts) of the last write_artifact

    # ---- budget -------------------------------------------------------
    def cost(self, input_tokens: float, output_tokens: float) -> float:
        return cost_usd(input_tokens, output_tokens, self.price_input_per_mtok, self.price_output_per_mtok)

    def worst_case(self, piece: Piece) -> float:
        """What one HTTP request may cost at most: the price of its bound."""
        return self.cost(piece.bound.input_tokens, piece.bound.output_tokens)

    def must_wait(self, piece: Piece) -> bool:
        """Whether the next request fits the cost cap only once the requests in flight have settled (their
        reservations are bounds: most give back the difference)."""
        if self.dry_run or self.max_cost_usd is None or self.requests_in_flight <= 0 or self.misreport:
            return False
        worst = self.worst_case(piece)
        return (self.spent_usd + self.reserved_usd + worst > self.max_cost_usd
                and self.spent_usd + worst <= self.max_cost_usd)

    def reserve(self, piece: Piece) -> float:
        """Check the caps for one more HTTP request and reserve its bound's cost (returned: hand it back to
        ``settle`` or ``release``). Called right before sending (no await in between), so concurrent tasks cannot
        jointly overshoot the caps: the spend recorded never exceeds llm.max_cost_usd while the endpoint reports
        no more tokens than a request can use."""
        worst = 0.0
        if self.dry_run:
            self.dry_run_requests += 1
        else:
            if self.misreport is not None and self.max_cost_usd is not None:
                raise self._stop(self.misreport, piece.tag)
            worst = self.worst_case(piece)
            if self.max_calls is not None and self.http_requests + 1 > self.max_calls:
                raise self._stop(f"llm.max_calls={self.max_calls} reached", piece.tag)
            if self.max_cost_usd is not None and self.spent_usd + self.reserved_usd + worst > self.max_cost_usd:
                raise self._stop(f"llm.max_cost_usd={self.max_cost_usd} would be exceeded by the next request "
                                 f"(its bound: ${worst:.6f})", piece.tag)
            self.http_requests += 1
            self.samples += piece.n
            self.requests_in_flight += 1
            self.reserved_usd += worst
        self.est_input_tokens += piece.est_input_tokens
        self.est_output_tokens += piece.bound.output_tokens
        self.est_cost_usd += self.cost(piece.est_input_tokens, piece.bound.output_tokens)
        return worst

    def settle(self, piece: Piece, reserved: float, reported: Any, answer_bytes: int, latency_s: float,
               into: Any = None) -> tuple[int, int, float]:
        """A request finished: replace its reservation with its cost, from the tokens the endpoint reports
        (``reported``: the reply's ``usage``; a count left out, or not a count, is charged at the request's bound).
        Returns (input tokens, output tokens, cost), also set on ``into`` (a result or a record) before a stop."""
        self.release(reserved)
        b, got = piece.bound, reported_tokens(reported)
        tin, tout = (None, None) if isinstance(got, str) else got
        self.unreported_usage += tin is None or tout is None
        tin, tout = b.input_tokens if tin is None else tin, b.output_tokens if tout is None else tout
        c = self.cost(tin, tout)
        self.spent_usd += c
        self.input_tokens += tin
        self.output_tokens += tout
        self.http_latencies.append(latency_s)
        if into is not None:
            into.input_tokens, into.output_tokens, into.cost_usd = tin, tout, c
        explained = b.explain(piece.max_tokens, piece.n)
        if isinstance(got, str):
            self._misreported(piece, f"usage {got}, not a count of tokens (charged its bound of {explained})", c)
        elif tin > b.input_tokens or tout > b.output_tokens:
            self._misreported(piece, f"{tin} input and {tout} output tokens, above its bound of {explained} "
                                     "(recorded as reported)", c)
        elif answer_bytes > MAX_BYTES_PER_TOKEN * b.output_tokens:
            self._misreported(piece, f"{answer_bytes} bytes of answers, more than {MAX_BYTES_PER_TOKEN} bytes a "
                                     f"token of its bound of {explained}: the endpoint ignores max_tokens", c)
        return tin, tout, c

    def _misreported(self, piece: Piece, what: str, cost: float) -> None:
        """Counted; the first said once: under llm.max_cost_usd a stop (every later request refused), else a warning."""
        self.misreports += 1
        if self.misreport is None:
            self.misreport = (f"endpoint misreport: a request was answered with {what} (${cost:.6f}); no cap can "
                              "hold against an endpoint that misreports what its requests use")
            if self.max_cost_usd is None:
                logging.getLogger("face.llm").warning("%s -- without llm.max_cost_usd the run goes on", self.misreport)
        if self.max_cost_usd is not None:
            raise self._stop(self.misreport, piece.tag)

    def release(self, reserved: float) -> None:
        """A request settled or failed for good: drop its reservation."""
        self.requests_in_flight = max(0, self.requests_in_flight - 1)
        # nothing in flight: exactly nothing reserved (no rounding residue left to block a request)
        self.reserved_usd = max(0.0, self.reserved_usd - reserved) if self.requests_in_flight else 0.0

    def _stop(self, what: str, tag: str) -> BudgetExceeded:
        """The budget stop; its message is written when read, once the requests in flight have settled."""
        return BudgetExceeded(self._budget_message(what, tag), render=lambda: self._budget_message(what, tag))

    def _budget_message(self, what: str, tag: str) -> str:
        remaining = []
        if self.max_calls is not None:
            remaining.append(f"{max(0, self.max_calls - self.http_requests)} HTTP requests")
        if self.max_cost_usd is not None:
            remaining.append(f"${max(0.0, self.max_cost_usd - self.spent_usd - self.reserved_usd):.6f}")
        where = f" in {self.cache_dir}" if self.cache_dir else ""
        return (f"LLM budget exceeded: {what} (tag={tag!r}). "
                f"Done so far: {self.requests} requests, {self.http_requests} HTTP requests sent "
                f"({self.samples} samples), {self.cache_hits} samples from cache, ${self.spent_usd:.6f} spent"
                f"{f' (${self.reserved_usd:.6f} still in flight)' if self.reserved_usd else ''}; "
                f"remaining budget: {', '.join(remaining) or 'n/a'}. "
                f"All finished requests are cached{where}: raise the cap and re-run to continue "
                f"without paying for them again.")

    # ---- records ------------------------------------------------------
    def add(self, res: Any, error: BaseException | None = None) -> None:
        """Record one request: its result (a ChatResult), or -- ``error`` given -- the exception it failed with (a
        budget stop's record says "budget: "); ``res`` then carries only the request and its latency."""
        why = None if error is None else redact(  # written to llm_usage.json: an error may quote the key (face.secrets)
            f"{'budget: ' if isinstance(error, BudgetExceeded) else ''}{type(error).__name__}: {error}")
        rec = {"tag": res.request.tag, "n": res.request.n, "cached_samples": res.cached_samples,
               "http_requests": res.http_requests, "retries": res.retries, "latency_s": res.latency_s,
               "input_tokens": res.input_tokens, "output_tokens": res.output_tokens, "cost_usd": res.cost_usd,
               "dry_run": self.dry_run, "error": why, "answer_retries": res.answer_retries,
               "rejected_answers": res.rejected_answers, "invalid_answers": 0 if error else res.invalid_samples,
               "samples": res.http_samples}  # samples drawn over HTTP for it
        self.requests += 1
        self.cache_hits += res.cached_samples
        if len(self.records) < KEEP_REQUESTS or why is not None:
            self.records.append(rec)
        t = self.by_tag.setdefault(rec["tag"] or "(none)", _tag_totals())
        t["requests"] += 1
        t["failures"] += why is not None
        t["cache_hits"] += res.cached_samples
        for name in _FROM_RECORD:
            t[name] += rec[name]

    def note_invalid(self, tag: str, reason: str) -> None:
        """An answer still missing after its request's draws (the request's ``draws`` policy; counted by the request's
        record: ``invalid_answers``)."""
        if len(self.invalid_events) < KEEP_EVENTS:
            self.invalid_events.append({"tag": tag, "reason": reason})

    def note_scores(self, tag: str, defaulted: int = 0, logprob_fallbacks: int = 0) -> None:
        """What the scorer made of its answers beyond what every request counts (draws that were not a valid
        answer, redraws, answers still missing): samples counted as the lowest score, answers scored without
        their logprobs."""
        t = self.by_tag.setdefault(tag or "(none)", _tag_totals())
        t["defaulted_answers"] += defaulted
        t["logprob_fallbacks"] += logprob_fallbacks

    def counts_line(self) -> str:
        """The answer counts of the run, one line (printed after a run; the same numbers as llm_usage.json)."""
        s = self.summary()
        return (f"LLM answers: {s['rejected_answers']} invalid draws, {s['answer_retries']} redraws, "
                f"{s['invalid_answers']} samples without a valid answer ({s['defaulted_answers']} scored as the "
                f"lowest), {s['logprob_fallbacks']} scored without logprobs; {s['http_requests']} HTTP requests "
                f"({s['samples']} samples), {s['retries']} retries, ${s['cost_usd']:.6f} spent")

    # ---- reports ------------------------------------------------------
    def summary(self) -> dict[str, Any]:
        import numpy as np  # here, not at the top: face.llm alone (its cache CLI, the local install) stays without it

        lat = self.http_latencies
        p50, p95 = np.quantile(lat.sample, [0.5, 0.95]).tolist() if lat.sample else (0.0, 0.0)
        tags = self.by_tag.values()
        errors = [r["error"] for r in self.records if r["error"] is not None]
        return {
            **{k: getattr(self, k) for k in ("requests", "samples", "http_requests", "cache_hits", "retries")},
            "failures": sum(not e.startswith("budget") for e in errors),
            "budget_stops": sum(e.startswith("budget") for e in errors),
            **{k: sum(t[k] for t in tags) for k in ("answer_retries", "rejected_answers", "invalid_answers",
                                                     "defaulted_answers", "logprob_fallbacks")},
            "unreported_usage_requests": self.unreported_usage,
            "misreported_requests": self.misreports,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cost_usd": self.spent_usd,
            "dry_run": self.dry_run,
            "dry_run_requests": self.dry_run_requests,
            **{f"estimated_{k}": getattr(self, f"est_{k}") for k in ("input_tokens", "output_tokens", "cost_usd")},
            "latency_mean_s": lat.total / lat.n if lat.n else 0.0,
            "latency_p50_s": p50,
            "latency_p95_s": p95,
            "latency_max_s": lat.max,
            **(self.concurrency() if self.concurrency is not None else {}),
            "by_tag": {k: dict(v) for k, v in self.by_tag.items()},
        }

    def mlflow_metrics(self, prefix: str = "llm_") -> dict[str, float]:
        """The run's totals; the counts per stage (``by_tag``: ~10 numbers per stage and aspect, 270 for an
        optimizer run) stay in the usage artifact, so the runs table's metric list stays short."""
        return {prefix + k: float(v) for k, v in self.summary().items() if isinstance(v, (int, float))}

    def write_artifact(self, path: str | os.PathLike) -> Path:
        p = Path(path)
        # one line per request record (json's C encoder; `indent` would switch to its pure-Python one)
        state = (str(p.resolve()), self.requests, len(self.records), self.misreports)
        if state == self._written and p.exists():
            return p  # already written with these records (the method wrote it, then the client closed)
        records = ",\n  ".join(json.dumps(r) for r in self.records)
        kept = "" if len(self.records) == self.requests else (
            f' "requests_note": "the first {KEEP_REQUESTS} of {self.requests} requests and every failed one; totals '
            'and by_tag count them all",\n')
        stop = f' "misreport": {json.dumps(self.misreport)},\n' if self.misreport else ""
        text = (f'{{"totals": {json.dumps(self.summary(), indent=1)},\n{kept}{stop} "requests": [\n  {records}\n ],\n'
                f' "invalid_answers": {json.dumps(self.invalid_events)}\n}}\n')
        atomic_write_text(p, text)  # makes the folder; a stop while writing never leaves half a file
        self._written = state
        return p
