"""Adaptive concurrency: how many HTTP requests may be in flight at once.

`Limiter` replaces a fixed semaphore in `BudgetLM`. With `llm.adaptive_concurrency=false` it is a
plain semaphore of `llm.concurrency` slots. With `true` it runs additive-increase /
multiplicative-decrease (AIMD, as TCP congestion control) between 1 and `llm.concurrency`:

* it starts at `llm.concurrency_start` and, while latency stays flat, grows by one slot per
  completed request (doubling per round trip: "slow start") until the first back-off, then by one
  slot per round trip (additive increase);
* a 429 / 503 (reported by the transport, `throttle()`) halves the limit (at most once per round
  trip) and holds every new request until the server's `Retry-After` has passed;
* rising latency -- the recent mean above `llm.latency_tolerance` × the lowest recent mean --
  shrinks it by a quarter (at most once per round trip): the server is queueing, more requests in
  flight would only wait longer.

`summary()` reports the limit reached, the peak number in flight and the back-offs (they go to
`llm_usage.json` and the MLflow `llm_*` metrics).
"""
from __future__ import annotations

import asyncio
import collections
import time


class Limiter:
    def __init__(self, max_limit: int, start: int | None = None, adaptive: bool = False,
                 latency_tolerance: float = 2.0):
        self.max_limit = max(1, int(max_limit))
        self.adaptive = adaptive
        first = self.max_limit if not adaptive or start is None else int(start)
        self.limit = float(max(1, min(self.max_limit, first)))
        self.tolerance = float(latency_tolerance)
        self.in_flight = 0
        self.max_in_flight = 0
        self.limit_reached = self.limit
        self.slow_start = True
        self.throttles = 0  # 429 / 503 seen
        self.decreases = 0  # multiplicative decreases applied
        self.paused_until = 0.0
        self._waiters: collections.deque[asyncio.Future] = collections.deque()
        self._short: float | None = None  # EWMA of recent latencies
        self._floor: float | None = None  # lowest EWMA seen (the unloaded latency)
        self._last_decrease = 0.0

    # ---- slots ------------------------------------------------------------
    async def acquire(self) -> None:
        while True:
            now = time.monotonic()
            if self.paused_until > now:
                await asyncio.sleep(self.paused_until - now)
                continue
            if self.in_flight < int(self.limit) and not self._waiters:
                break
            fut = asyncio.get_running_loop().create_future()
            self._waiters.append(fut)
            try:
                await fut
            except BaseException:
                if fut in self._waiters:
                    self._waiters.remove(fut)
                elif fut.done() and not fut.cancelled():
                    self._wake()  # pass on the slot we were woken for
                raise
            if self.paused_until <= time.monotonic() and self.in_flight < int(self.limit):
                break
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def release(self, latency_s: float | None = None) -> None:
        """A request finished (latency_s: its duration, if it succeeded on its first attempt)."""
        self.in_flight -= 1
        if self.adaptive and latency_s is not None:
            self._observe(latency_s)
        self._wake()

    def _wake(self) -> None:
        free = int(self.limit) - self.in_flight
        while free > 0 and self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_result(None)
                free -= 1

    # ---- adaptation -------------------------------------------------------
    def _observe(self, latency: float) -> None:
        self._short = latency if self._short is None else 0.8 * self._short + 0.2 * latency
        self._floor = self._short if self._floor is None else min(self._floor, self._short)
        if self._short > self.tolerance * self._floor:
            self._decrease(0.75)
            return
        # grow (at most to max_limit): by one per request in slow start, else by one per round trip
        self.limit = min(float(self.max_limit), self.limit + (1.0 if self.slow_start else 1.0 / self.limit))
        self.limit_reached = max(self.limit_reached, self.limit)

    def _decrease(self, factor: float) -> None:
        now = time.monotonic()
        if now - self._last_decrease < (self._short or 0.2):
            return  # at most once per round trip
        self._last_decrease = now
        self.slow_start = False
        self.decreases += 1
        self.limit = max(1.0, self.limit * factor)
        # what the server copes with now becomes the new normal latency
        self._floor = max(self._floor or 0.0, (self._short or 0.0) / self.tolerance)

    def throttle(self, retry_after_s: float | None) -> None:
        """The server said "too many requests" (429 / 503): back off, and pause for Retry-After."""
        self.throttles += 1
        if retry_after_s:
            self.paused_until = max(self.paused_until, time.monotonic() + min(retry_after_s, 120.0))
        if self.adaptive:
            self._decrease(0.5)

    def summary(self) -> dict[str, float]:
        return {"concurrency_limit": int(self.limit), "concurrency_limit_reached": int(self.limit_reached),
                "max_in_flight": self.max_in_flight, "throttled_requests": self.throttles,
                "concurrency_decreases": self.decreases}
