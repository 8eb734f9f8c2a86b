"""The one batch driver: every batch of requests the project sends goes through `drive` (the client's `run_stream`,
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
from collections.abc import AsyncGenerator, Callable, Iterable
from typing import Any

from face.console import Progress

from .base import ChatRequest, ChatResult, LLMCallError, LLMRequestRefused
from .sizes import WINDOW
from .usage import BudgetExceeded

LLM_FAILURES = (LLMCallError, BudgetExceeded)


async def drive(client: Any, items: Iterable[Any], request: Callable[[Any], ChatRequest], desc: str = "LLM",
                total: int | None = None, on_error: str = "raise") -> AsyncGenerator[tuple[Any, ChatResult], None]:
    """``(item, result of request(item))`` for every item, in order (see the module doc)."""
    if on_error not in ("raise", "return"):
        raise ValueError(f"on_error must be 'raise' or 'return', got {on_error!r}")
    usage = client.usage
    window = max(WINDOW, 4 * int(client.cfg.concurrency))
    queue: deque = deque()  # (item, request, its result or the future drawing it), in order
    shared: dict[ChatRequest, asyncio.Future] = {}  # request -> its future while in flight
    done = hits = failed = 0

    def info() -> dict[str, str]:
        """Cache hits, failures and the cost so far (the estimate in a dry run)."""
        cost = usage.est_cost_usd if usage.dry_run else usage.spent_usd
        return {"hits": str(hits), "fail": str(failed),
                "cost": f"${cost:.4f}" + (" (dry-run estimate)" if usage.dry_run else "")}

    def fill() -> None:
        for item, req, hit in itertools.islice(looked_up, window - len(queue)):
            got: Any = shared.get(req) or hit
            if got is None:
                got = shared[req] = asyncio.ensure_future(client.chat(req))
                got.add_done_callback(lambda _, key=req: shared.pop(key, None))
            queue.append((item, req, got))

    # the batch's progress (a bar on a terminal, a line every 30 s in a log): requests done / total, and info()
    bar = Progress(total or 0, desc, unit="requests", enabled=client.cfg.progress, info=info)
    looked_up = client.cached_stream(items, request)  # the cache read ahead, in a thread
    try:
        fill()
        while queue:
            item, req, got = queue.popleft()
            got = await _take(req, got, on_error, queue, done, total, desc)
            done += got.error is None
            failed += got.error is not None
            hits += got.cached_samples
            bar.update(1)
            yield item, got
            if len(queue) <= window // 2:
                fill()
    finally:
        for got in _futures(queue):
            got.cancel()
        bar.close()
        looked_up.close()


async def _take(req: ChatRequest, got: Any, on_error: str, queue: deque, done: int, total: int | None, desc: str
                ) -> ChatResult:
    """The result of one request of the queue (awaited while in flight); a failure stops the batch (``_stop``) or,
    with on_error="return", gives a result with `error` set and no samples."""
    if not isinstance(got, asyncio.Future):
        return got
    try:
        return await got
    except LLM_FAILURES as e:
        if isinstance(e, LLMRequestRefused) or on_error == "raise":
            await _stop(e, queue, done, total, desc)
        return ChatResult(request=req, samples=[], error=f"{type(e).__name__}: {e}")


async def _stop(first: BaseException, queue: deque, done: int, total: int | None, desc: str) -> None:
    """Stop after `first`: at once for a refused request; else once the requests in flight have settled."""
    if isinstance(first, LLMRequestRefused):
        raise first
    settled = await asyncio.gather(*_futures(queue), return_exceptions=True)
    errors = [first, *(x for x in settled if isinstance(x, BaseException))]
    for x in errors:
        if not isinstance(x, LLM_FAILURES):
            raise x  # a bug, not an endpoint failure
    done += len(settled) - (len(errors) - 1)
    of_total = total if total is not None else "?"
    of = f"{done} of {of_total} requests completed"
    budget = [x for x in errors if isinstance(x, BudgetExceeded)]
    if budget:
        raise BudgetExceeded(f"{budget[0]} Stage {desc!r}: {of}.") from budget[0]
    raise LLMCallError(f"{len(errors)} of {of_total} requests of {desc!r} failed ({of}); first: {first}",
                       retries=getattr(first, "retries", 0)) from first


def _futures(queue: deque) -> list[asyncio.Future]:
    """The requests of the queue still in flight (their futures)."""
    return [got for _, _, got in queue if isinstance(got, asyncio.Future)]
