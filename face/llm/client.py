"""The client: starts the configured server (if any), builds the stack, runs batches.

    with make_client(cfg) as client:
        results = client.run_batch(requests, desc="scoring")   # sync
        result = await client.chat(request)                   # async

Validated answers: give a request an answer type (face.llm.adapters) and a draw policy; it comes back with n
valid answers (or fewer, when the draws ran out), every draw parsed, nothing invalid cached as valid::

    scores = score_adapter([0, 1, 2])
    req = scores.request(ChatRequest(messages=msgs, n=5, tag="score", draws=Draws(rounds=4, max_extra=None)),
                         native=cfg.supports_json_schema, validate=True)   # + replace(req, adapter=scores)
    [res] = client.run_batch([req], desc="scoring")
    for s in res.answers:        # the valid ones (s.value is ScoreAnswer(score=2), s.text the raw answer)
        use(s.value.score)
    res.invalid_samples          # answers still missing; res.samples holds every draw, s.error says why

Batches go through one driver (face/llm/stream.py: window, identical-request dedup, cache read-ahead):
`run_stream`, `chat_many` and `run_batch` are the same thing collected differently.

The stack, outermost first (each layer has `async chat(request) -> ChatResult`):
AccountingLM (per-request records) -> ValidatingLM (the one draw-until-valid loop) ->
CachingLM (per-sample cache) -> BudgetLM (HTTP-sized pieces,
concurrency, caps, dry run) -> OpenAITransport (one HTTP request, retries), or with `llm.batch=true`
BatchTransport (the pieces as lines of OpenAI Batch API jobs; face/llm/batch.py). A backend is a
config: `llm.server` names a server class started beside the client (`face.llm.local.LocalServer`,
`face.testing.scripted.ScriptedServer`), or is null for an endpoint at `llm.base_url`.
"""
from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Self, TypeVar

from face.errors import import_class

from . import probe
from .base import ChatRequest, ChatResult
from .batch import BatchTransport
from .budget import AccountingLM, BudgetLM
from .cache import CachingLM, SampleCache, request_key
from .config import LLMConfig
from .stream import drive
from .transport import OpenAITransport
from .usage import Usage
from .validating import ValidatingLM

T = TypeVar("T")
READ_AHEAD = 256  # items whose cached samples cached_stream reads at once, one chunk ahead of those it yields

log = logging.getLogger("face.llm")


class LLMClient:
    def __init__(self, cfg: LLMConfig):
        self.cfg = cfg
        self.usage = Usage(*cfg.prices, max_calls=cfg.max_calls, max_cost_usd=cfg.max_cost_usd,  # (input, output)
                           dry_run=cfg.dry_run, cache_dir=cfg.cache_dir if cfg.cache else None)
        # the server started beside the client (``llm.server``): start(), stop(), base_url (set by start), model,
        # and for one that answers in this process without a socket http_client(cfg), the SDK's HTTP client to it
        self.server: Any = None
        self.base_url: str | None = None
        self.model: str = cfg.model
        self.transport: OpenAITransport | BatchTransport | None = None
        self.cache: CachingLM | None = None
        self._lm: AccountingLM | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # private loop of run_batch

    # ---- lifecycle ----------------------------------------------------
    def start(self) -> Self:
        if self._lm is not None:
            return self
        cfg = self.cfg
        urls = cfg.base_urls
        if cfg.server is not None:  # {"_target_": "pkg.module.Name", **kwargs} -> pkg.module.Name(**kwargs)
            kwargs = dict(cfg.server)
            server = import_class(kwargs.pop("_target_"), "llm.server._target_")(**kwargs)
            server.start()
            self.server = server
            self.model = server.model
            urls = [server.base_url] if server.base_url else []
        if not urls:
            raise ValueError(f"llm.base_url is required when no llm.server is configured (backend {cfg.backend!r})")
        self.base_url = urls[0]
        wire = getattr(self.server, "http_client", None)  # a server that answers without a socket hands its own
        # the endpoint probed first (face/llm/probe.py: n_per_request fitted to it): every layer is built knowing it
        cfg = self.cfg = probe.fitted(cfg, self.usage, urls[0], self.model,
                                      None if _loop_running() else self._private_loop, wire)
        if cfg.batch:  # a batch line's custom_id is the cache key of its first sample
            self.transport = BatchTransport(cfg, urls[0], self.model, Path(str(cfg.cache_dir)) / "batches",
                                            functools.partial(request_key, cfg, self.model))
        else:
            self.transport = OpenAITransport(cfg, urls, self.model, wire)
        # a batch takes every piece at once: the concurrency cap is for HTTP requests, not batch lines
        inner: Any = BudgetLM(self.transport, cfg.replace(concurrency=10**9, adaptive_concurrency=False)
                              if cfg.batch else cfg, self.usage)
        if cfg.cache and cfg.cache_dir:
            inner = self.cache = CachingLM(inner, SampleCache(cfg.cache_dir), cfg, self.model)
            # the usage summary's entries on what sharing the cache with other processes gave: samples this process
            # waited for while another sent them, claims it took over from a process that was gone
            concurrency, claims = self.usage.concurrency, self.cache.store.claims
            self.usage.concurrency = lambda: {**concurrency(), "claims_waited_samples": claims.waited,
                                              "claims_taken_over": claims.taken_over}
        self._lm = AccountingLM(ValidatingLM(inner, self.usage), self.usage)
        return self

    def _private_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None or self._loop.is_closed():
            self._loop = asyncio.new_event_loop()
            self._loop.set_task_factory(_tracked)
        _LOOPS[self._loop] = threading.get_ident()  # the thread that runs it (``interrupt``)
        return self._loop

    def close(self) -> None:
        if self.cfg.usage_file and (self.usage.requests or self.usage.http_requests or self.usage.dry_run_requests):
            try:  # also after a budget stop, Ctrl-C or a failed batch: what was paid for is on record
                self.usage.write_artifact(self.cfg.usage_file)
            except OSError as e:
                log.warning("could not write %s: %s", self.cfg.usage_file, e)
        if self._loop is not None and not self._loop.is_closed():
            settle(self._loop)  # nothing left pending: no task finalised on a closed loop
            if self.transport is not None:
                self._loop.run_until_complete(self.transport.aclose())
            self._loop.run_until_complete(self._loop.shutdown_asyncgens())
            self._loop.close()
        self._loop = None
        if self.cache is not None:
            self.cache.store.close()
        self.transport = self.cache = self._lm = None
        if self.server is not None:
            server, self.server = self.server, None
            server.stop()

    def __enter__(self) -> Self:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- calls ----------------------------------------------------------
    async def chat(self, req: ChatRequest) -> ChatResult:
        """All n samples of one request: cached ones from the cache, the rest over HTTP."""
        self.start()
        assert self._lm is not None  # start() built it
        return await self._lm.chat(req)

    def cached_stream(self, items: Iterable[T], request: Callable[[T], ChatRequest]
                      ) -> Iterator[tuple[T, ChatRequest, ChatResult | None]]:
        """``(item, request(item), its cached result)`` for every item, in order (None: not every answer is in the
        cache -- what was found is kept for the request's ``chat``, face/llm/cache.py; with an
        answer type, not all n valid), the cache read one chunk ahead in a thread of its own: SQLite lets go of the GIL
        while it searches, so a paper-size warm rerun (≈ 3.5 M samples) reads the cache while this thread renders
        prompts and scores the chunk before. A request answered here is recorded in the usage like any other."""
        items = iter(items)
        self.start()
        if self.cache is None or self.cfg.dry_run:
            yield from ((x, request(x), None) for x in items)
            return
        cache = self.cache
        with ThreadPoolExecutor(1, thread_name_prefix="cache-read") as pool:

            def look(batch: list[T]) -> tuple[list[T], list[ChatRequest], list[dict[int, str]], Future]:
                """A chunk's requests and keys, its cached samples read in the thread."""
                reqs = [request(x) for x in batch]
                keys = [cache.keys_for(r) for r in reqs]
                found = pool.submit(cache.store.read_committed, [k for ks in keys for k in ks.values()])
                return batch, reqs, keys, found

            chunks = map(look, iter(lambda: list(itertools.islice(items, READ_AHEAD)), []))
            ahead = next(chunks, None)
            while ahead is not None:
                (batch, reqs, keys, found), ahead = ahead, next(chunks, None)  # the next read while this is handed out
                for x, req, res in zip(batch, reqs, cache.results(reqs, keys, found.result())):
                    if res is not None and req.adapter is not None and any(s.error is not None for s in res.samples):
                        res = None
                    if res is not None:
                        self.usage.add(res)
                    yield x, req, res

    def run_stream(self, items: Iterable[T], request: Callable[[T], ChatRequest], emit: Callable[[T, ChatResult], Any],
                   desc: str = "LLM", total: int | None = None) -> None:
        """The batch driver (face/llm/stream.py: ``(item, result)`` for every item, in order, as soon as it and every
        earlier one are done) on the client's private loop, each ``(item, result)`` handed to ``emit`` as it comes."""

        async def run() -> None:
            async with contextlib.aclosing(drive(self, items, request, desc, total)) as got:
                async for item, res in got:
                    emit(item, res)

        self.run_async(run())

    async def chat_many(self, requests: Sequence[ChatRequest], desc: str = "LLM",
                        on_error: str = "raise") -> list[ChatResult]:
        """Async batch: order preserved, progress bar; the batch driver's stops (on_error="raise": one
        BudgetExceeded or LLMCallError once the requests in flight have finished, which are cached either way;
        on_error="return": a failed request gives a ChatResult with `error` set and no samples)."""
        requests = list(requests)
        self.start()
        gen = drive(self, requests, lambda r: r, desc, len(requests), on_error)
        async with contextlib.aclosing(gen):
            return [res async for _, res in gen]

    def run_batch(self, requests: Iterable[ChatRequest], desc: str = "LLM",
                  on_error: str = "raise") -> list[ChatResult]:
        """Synchronous batch on the client's private event loop (callable repeatedly)."""
        return self.run_async(self.chat_many(list(requests), desc=desc, on_error=on_error))

    def run_async(self, coro: Any) -> Any:
        """Run a coroutine using this client on its private event loop (not from inside a loop). Interrupted
        (Ctrl-C, or ``interrupt`` from another thread), every task of the loop is cancelled and settled before the
        KeyboardInterrupt goes on: nothing is left to be finalised on a closed loop, and what arrived is cached."""
        if _loop_running():
            coro.close()
            raise RuntimeError("run_batch()/run_async() called inside a running event loop; "
                               "use `await client.chat_many(...)` instead")
        self.start()
        loop = self._private_loop()
        try:
            return loop.run_until_complete(coro)
        except BaseException as e:
            if isinstance(e, KeyboardInterrupt):
                _retrieve(loop)
            settle(loop)
            raise

    def run(self, request: ChatRequest) -> ChatResult:
        return self.run_batch([request], desc=request.tag or "LLM")[0]


# the private loops of the clients, and the thread each runs in (``interrupt`` stops them from another thread)
_LOOPS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, int] = weakref.WeakKeyDictionary()
_TASKS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, weakref.WeakSet] = weakref.WeakKeyDictionary()


def _tracked(loop: asyncio.AbstractEventLoop, coro: Any, **kw: Any) -> asyncio.Task:
    """The private loops' task factory: every task is remembered (weakly), for ``_retrieve``."""
    task = asyncio.Task(coro, loop=loop, **kw)
    _TASKS.setdefault(loop, weakref.WeakSet()).add(task)
    return task


def _retrieve(loop: asyncio.AbstractEventLoop) -> None:
    """Ctrl-C raises KeyboardInterrupt in whatever code runs, often a task nobody awaits (aiohttp writes a request's
    body in one): the interrupt ends it, and unless taken here Python prints "Task exception was never retrieved"."""
    for task in [t for t in _TASKS.get(loop, ()) if t.done() and not t.cancelled()]:
        task.exception()  # marks it retrieved


def settle(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel every task left on ``loop`` and run it until they have finished (asyncio.run's clean-up)."""
    tasks = [t for t in asyncio.all_tasks(loop) if not t.done()]
    for t in tasks:
        t.cancel()
    if tasks:
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))


def _interrupted() -> None:
    raise KeyboardInterrupt


def interrupt(thread: int) -> int:
    """Stop the LLM clients running in ``thread`` as Ctrl-C stops one in the main thread: their loop raises
    KeyboardInterrupt, cancels its tasks and lets the run end. Returns how many."""
    loops = [loop for loop, owner in list(_LOOPS.items())
             if loop.is_running() and not loop.is_closed() and owner == thread]
    for loop in loops:
        loop.call_soon_threadsafe(_interrupted)
    return len(loops)


def run_off_loop(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(...)`` here, or in a worker thread when this thread runs an event loop (Jupyter, an async app): the LLM
    client runs an event loop of its own, which cannot start inside a running one. Ctrl-C while it waits stops the
    worker's LLM client too (``interrupt``), waits for it to wind down, and raises the one KeyboardInterrupt."""
    if not _loop_running():
        return fn(*args, **kwargs)
    pool = ThreadPoolExecutor(1, thread_name_prefix="face")
    worker: list[int] = []

    def call() -> T:
        worker.append(threading.get_ident())
        return fn(*args, **kwargs)

    future = pool.submit(call)
    try:
        return future.result()
    except KeyboardInterrupt:
        if worker and not interrupt(worker[0]):  # not in an LLM client's loop right now: raised at its next instruction
            import ctypes

            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(worker[0]), ctypes.py_object(KeyboardInterrupt))
        with contextlib.suppress(BaseException):  # let it wind down (a second Ctrl-C stops waiting)
            future.exception()
        raise
    finally:
        pool.shutdown(wait=False)


def _loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def make_client(cfg: LLMConfig | dict) -> LLMClient:
    """The LM stack for a config; use as a context manager (starts/stops the configured server)."""
    return LLMClient(cfg if isinstance(cfg, LLMConfig) else LLMConfig.from_dict(cfg))
