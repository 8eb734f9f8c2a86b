"""The one batch driver: every batch of requests the project sends goes through `drive` (the client's `stream`,
`chat_many` and `run_batch`; scoring's plan -> stream -> record; decomposition; the baselines; the optimizer).

    async for item, result in drive(client, items, request_of, desc="scoring", total=n):
        ...   # in the order of `items`, each as soon as it and every earlier one are done

- **Window**: at most `max(64, 4 × llm.concurrency)` items are planned ahead, so memory holds what is in flight,
  not the run (`items` may be a generator of 10^5 planned requests).
- **Cache read-ahead**: the cache is read one chunk ahead in a thread of its own (`LLMClient.cached_stream`); an
  item whose answers are all in the cache (with an answer type: all n valid) is answered without a task.
- **Identical requests** (two identical particles of one turn) are sent once and share their result.
- **Stops**: a refused request (`LLMRequestRefused`) stops at once; any other failure of an LLM request stops
  taking new items, lets the ones in flight finish (they are cached), then raises one `BudgetExceeded` (if the
  budget stopped it: its line, then how many of the stage's requests completed) or one `LLMCallError`. With
  `on_error="return"` a failed request yields a result with `error` set instead. A bug (any other exception) is
  raised as it is.
"""
from __future__ import annotations

import asyncio
import itertools
from collections import deque
from collections.abc import AsyncGenerator, Callable, Iterable, Iterator
from typing import Any

from face.console import Progress

from .base import ChatRequest, ChatResult, LLMCallError, LLMRequestRefused
from .sizes import WINDOW
from .usage import BudgetExceeded

LLM_FAILURES = (LLMCallError, BudgetExceeded)


class _Driver:
    def __init__(self, client: Any, desc: str, total: int | None, on_error: str):
        if on_error not in ("raise", "return"):
            raise ValueError(f"on_error must be 'raise' or 'return', got {on_error!r}")
        self.client, self.desc, self.total, self.on_error = client, desc, total, on_error
        self.window = max(WINDOW, 4 * int(client.cfg.concurrency))
        self.queue: deque = deque()  # (item, request, its result or the future drawing it), in order
        self.shared: dict[ChatRequest, asyncio.Future] = {}  # request -> its future while in flight
        # the batch's progress (a bar on a terminal, a line every 30 s in a log): requests done / total, and info()
        self.bar = Progress(total or 0, desc, unit="requests", enabled=client.cfg.progress, info=self.info)
        self.done = self.hits = self.failed = 0

    def info(self) -> dict[str, str]:
        """Cache hits, failures and the cost so far (the estimate in a dry run)."""
        usage = self.client.usage
        cost = usage.est_cost_usd if usage.dry_run else usage.spent_usd
        return {"hits": str(self.hits), "fail": str(self.failed),
                "cost": f"${cost:.4f}" + (" (dry-run estimate)" if usage.dry_run else "")}

    def fill(self, looked_up: Iterator[tuple[Any, ChatRequest, ChatResult | None]]) -> None:
        for item, req, hit in itertools.islice(looked_up, self.window - len(self.queue)):
            got: Any = self.shared.get(req) or hit
            if got is None:
                got = self.shared[req] = asyncio.ensure_future(self.client.chat(req))
                got.add_done_callback(lambda _, key=req: self.shared.pop(key, None))
            self.queue.append((item, req, got))

    async def take(self) -> tuple[Any, ChatResult]:
        item, req, got = self.queue.popleft()
        if isinstance(got, asyncio.Future):
            try:
                got = await got
            except LLM_FAILURES as e:
                if isinstance(e, LLMRequestRefused) or self.on_error == "raise":
                    await self.stop(e)
                self.failed += 1
                self.bar.update(1)
                return item, ChatResult(request=req, samples=[], error=f"{type(e).__name__}: {e}")
        self.done += 1
        self.hits += got.cached_samples
        self.bar.update(1)
        return item, got

    async def stop(self, first: BaseException) -> None:
        """Stop after `first`: at once for a refused request; else once the requests in flight have settled."""
        if isinstance(first, LLMRequestRefused):
            raise first
        rest = [g for _, _, g in self.queue if isinstance(g, asyncio.Future)]
        settled = await asyncio.gather(*rest, return_exceptions=True)
        errors = [first, *(x for x in settled if isinstance(x, BaseException))]
        for x in errors:
            if not isinstance(x, LLM_FAILURES):
                raise x  # a bug, not an endpoint failure
        done = self.done + len(settled) - (len(errors) - 1)
        total = self.total if self.total is not None else "?"
        of = f"{done} of {total} requests completed"
        budget = [x for x in errors if isinstance(x, BudgetExceeded)]
        if budget:
            raise BudgetExceeded(f"{budget[0]} Stage {self.desc!r}: {of}.") from budget[0]
        raise LLMCallError(f"{len(errors)} of {total} requests of {self.desc!r} failed ({of}); first: {first}",
                           retries=getattr(first, "retries", 0)) from first

    def close(self) -> None:
        for _, _, got in self.queue:
            if isinstance(got, asyncio.Future):
                got.cancel()
        self.bar.close()


async def drive(client: Any, items: Iterable[Any], request: Callable[[Any], ChatRequest], desc: str = "LLM",
                total: int | None = None, on_error: str = "raise") -> AsyncGenerator[tuple[Any, ChatResult], None]:
    """``(item, result of request(item))`` for every item, in order (see the module doc)."""
    d = _Driver(client, desc, total, on_error)
    looked_up = client.cached_stream(items, request)  # the cache read ahead, in a thread
    try:
        d.fill(looked_up)
        while d.queue:
            yield await d.take()
            if len(d.queue) <= d.window // 2:
                d.fill(looked_up)
    finally:
        d.close()
        looked_up.close()

