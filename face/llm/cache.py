"""Persistent per-sample LLM cache: one SQLite file (WAL mode) in cache_dir, and `CachingLM`,
the layer of the stack that serves samples from it and stores new ones.

One row per *sample*: key = sha256 of the canonical JSON of everything that
determines that sample (model, messages, sampling parameters, response format,
logprob settings, base seed, sample index). The API key and the base_url are
never part of a key or a row. Samples are committed as soon as they arrive --
everything that arrived during one turn of the event loop in one transaction --
so a killed run loses nothing that finished. WAL + busy_timeout + one short
transaction per write make it safe for many asyncio tasks (one connection,
one thread) and for several processes sharing the file.

`CachingLM.chat(req)` looks every sample of the request up, sends only the missing ones (one
sub-request per consecutive run of at most `n_per_request` indices) and stores each run as
soon as it arrives. Dry-run placeholders are never stored. For a request with an `adapter` (a
validator), every sample is parsed before it is stored: an invalid one is stored *marked invalid*
(`"invalid": reason` in its payload; the key is unchanged) and always comes back with
`Completion.error` set, never as a valid sample -- so a rerun replays the same decision for free.
Cached samples are re-validated on read, so answers cached before validation existed are caught too.
"""
from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import sqlite3
import time
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

from .base import (
    Chat,
    ChatRequest,
    ChatResult,
    Completion,
    TokenLogprob,
    merge,
    raise_first,
    request_params,
    runs,
    validate,
)

CACHE_FILE = "llm_cache.sqlite"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS samples (
    key TEXT PRIMARY KEY,
    model TEXT NOT NULL,
    tag TEXT NOT NULL DEFAULT '',
    sample_index INTEGER NOT NULL,
    created REAL NOT NULL,
    payload TEXT NOT NULL
)
"""


def canonical_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def sample_key(fields: dict[str, Any]) -> str:
    """sha256 of the canonical JSON of the fields that determine one sample."""
    return hashlib.sha256(canonical_json(fields).encode("utf-8")).hexdigest()


_INDEX_MARK = -7_319_046_251  # an integer no request uses: marks where sample_index goes in the canonical JSON


def sample_keys(fields: dict[str, Any], indices: Iterable[int]) -> dict[int, str]:
    """`sample_key({**fields, "sample_index": i})` for every i, serialising the fields once (same bytes:
    the canonical JSON of an int is its decimal string)."""
    text = canonical_json({**fields, "sample_index": _INDEX_MARK})
    mark = f'"sample_index":{_INDEX_MARK}'
    if text.count(mark) != 1:  # cannot happen with JSON-escaped strings; stay exact anyway
        return {i: sample_key({**fields, "sample_index": i}) for i in indices}
    head, tail = (part.encode("utf-8") for part in text.split(mark))
    start = hashlib.sha256(head + b'"sample_index":')  # the long part hashed once, then copied per index
    out = {}
    for i in indices:
        h = start.copy()
        h.update(str(int(i)).encode())
        h.update(tail)
        out[i] = h.hexdigest()
    return out


class SampleCache:
    """Key -> JSON payload store. Use from one thread (the client's event loop).

    `put_many` inside a running event loop queues the rows and commits everything queued during one
    turn of the loop in one transaction (scheduled with `call_soon`): many concurrent requests that
    finish together cost one commit. Reads see queued rows; `flush()` / `close()` commit at once."""

    def __init__(self, cache_dir: str | os.PathLike, busy_timeout_ms: int = 30_000):
        self.dir = Path(cache_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.path = self.dir / CACHE_FILE
        self._conn = sqlite3.connect(str(self.path), timeout=busy_timeout_ms / 1000, isolation_level=None,
                                     check_same_thread=False)
        self._conn.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
        self._retry_locked(lambda: self._conn.execute("PRAGMA journal_mode=WAL"))
        self._conn.execute("PRAGMA synchronous=NORMAL")  # durable against process death, fast
        self._conn.execute("PRAGMA cache_size=-65536")  # 64 MB of pages: a warm paper-size rerun reads ~1 GB
        self._retry_locked(lambda: self._conn.execute(_SCHEMA))
        self._pending: dict[str, tuple] = {}  # key -> row, committed by the next flush
        self._reader: sqlite3.Connection | None = None  # read_committed's (one other thread)
        self._flush_scheduled = False
        self.commits = 0

    @staticmethod
    def _retry_locked(fn, attempts: int = 50):
        for i in range(attempts):
            try:
                return fn()
            except sqlite3.OperationalError as e:  # "database is locked" during concurrent setup
                if "locked" not in str(e) or i == attempts - 1:
                    raise
                time.sleep(0.05)

    def get_many(self, keys: Iterable[str]) -> dict[str, dict]:
        keys = list(keys)
        out: dict[str, dict] = {}
        if self._pending:
            for k in keys:
                row = self._pending.get(k)
                if row is not None:
                    out[k] = json.loads(row[5])
            keys = [k for k in keys if k not in out]
        for i in range(0, len(keys), 500):
            chunk = keys[i:i + 500]
            q = f"SELECT key, payload FROM samples WHERE key IN ({','.join('?' * len(chunk))})"
            for k, payload in self._conn.execute(q, chunk):
                out[k] = json.loads(payload)
        return out

    def read_committed(self, keys: list[str]) -> dict[str, str]:
        """Payloads (JSON text) of the committed rows among ``keys``, read through a connection of its own: safe to
        call from one other thread while this one writes (SQLite lets go of the GIL while it searches)."""
        if self._reader is None:
            self._reader = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, check_same_thread=False,
                                           timeout=30)
            self._reader.execute("PRAGMA cache_size=-65536")
        out: dict[str, str] = {}
        for i in range(0, len(keys), 500):
            chunk = keys[i:i + 500]
            # one row for all: the whole search runs in one step, without the GIL (JSON escapes \x1e and \x1f)
            q = ("SELECT group_concat(key || char(31) || payload, char(30)) FROM samples WHERE key IN "
                 f"({','.join('?' * len(chunk))})")
            (found,), = self._reader.execute(q, chunk).fetchall()
            if found:
                out.update(row.split("\x1f", 1) for row in found.split("\x1e"))
        return out

    def put_many(self, rows: Iterable[tuple[str, str, str, int, dict]]) -> None:
        """rows: (key, model, tag, sample_index, payload); one short transaction."""
        now = time.time()
        data = [(k, m, t, i, now, json.dumps(p, ensure_ascii=False)) for k, m, t, i, p in rows]
        if not data:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if loop is None:
            self._write(data)
            return
        self._pending.update((row[0], row) for row in data)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            loop.call_soon(self.flush)

    def flush(self) -> None:
        """Commit the queued rows in one transaction."""
        self._flush_scheduled = False
        if self._pending:
            data, self._pending = list(self._pending.values()), {}
            self._write(data)

    def _write(self, data: list[tuple]) -> None:
        def transaction() -> None:
            self._conn.execute("BEGIN IMMEDIATE")  # takes the write lock (waits busy_timeout for it)
            try:
                self._conn.executemany("INSERT OR REPLACE INTO samples (key, model, tag, sample_index, created, "
                                       "payload) VALUES (?,?,?,?,?,?)", data)
                self._conn.execute("COMMIT")
            except BaseException:
                if self._conn.in_transaction:
                    self._conn.rollback()
                raise

        self._retry_locked(transaction)
        self.commits += 1

    def __len__(self) -> int:
        self.flush()
        return self._conn.execute("SELECT COUNT(*) FROM samples").fetchone()[0]

    def stats(self) -> dict[str, Any]:
        rows = self._conn.execute(
            "SELECT model, COUNT(*), MIN(created), MAX(created) FROM samples GROUP BY model ORDER BY model").fetchall()
        tags = self._conn.execute("SELECT tag, COUNT(*) FROM samples GROUP BY tag ORDER BY tag").fetchall()
        size = sum(p.stat().st_size for p in self.dir.glob(CACHE_FILE + "*") if p.exists())
        return {
            "path": str(self.path),
            "samples": sum(r[1] for r in rows),
            "bytes": size,
            "models": {r[0]: {"samples": r[1], "oldest": r[2], "newest": r[3]} for r in rows},
            "tags": {t or "(none)": c for t, c in tags},
        }

    def clear(self, model: str | None = None) -> int:
        if model is None:
            cur = self._retry_locked(lambda: self._conn.execute("DELETE FROM samples"))
        else:
            cur = self._retry_locked(lambda: self._conn.execute("DELETE FROM samples WHERE model = ?", (model,)))
        n = cur.rowcount
        self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return n

    def close(self) -> None:
        with contextlib.suppress(sqlite3.Error):
            self.flush()
        with contextlib.suppress(sqlite3.Error):
            self._conn.close()
        if self._reader is not None:
            with contextlib.suppress(sqlite3.Error):
                self._reader.close()
            self._reader = None


def check_cache_dir(cache_dir: str | os.PathLike) -> None:
    """ValueError (one line) if `cache_dir` cannot hold the cache: a file, not writable, or a cache file that
    is not an SQLite database of samples. Creates nothing."""
    d = Path(cache_dir)
    if d.exists() and not d.is_dir():
        raise ValueError(f"{d} is a file, not a directory")
    p = d.resolve()
    while not p.exists() and p.parent != p:
        p = p.parent
    if not p.is_dir():
        raise ValueError(f"{d} cannot be created: {p} is a file")
    if not os.access(p, os.W_OK | os.X_OK):
        raise ValueError(f"{d} is not writable ({p}: permission denied)")
    db = d / CACHE_FILE
    if db.exists():
        if not db.is_file():
            raise ValueError(f"{db} is not a file")
        try:
            with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)) as conn:
                tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        except sqlite3.DatabaseError as e:
            raise ValueError(f"{db} is not an SQLite database ({e}); move it away or set llm.cache_dir") from None
        if tables and "samples" not in tables:
            raise ValueError(f"{db} is an SQLite database but not an LLM cache (no table 'samples')")


def _lp_to_json(lps: list[TokenLogprob] | None) -> list | None:
    return None if lps is None else [[t.token, t.logprob, [list(x) for x in t.top]] for t in lps]


def _lp_from_json(data: list | None) -> list[TokenLogprob] | None:
    return None if data is None else [TokenLogprob(t, lp, [(a, b) for a, b in top]) for t, lp, top in data]


def request_key(cfg: Any, model: str, req: ChatRequest, sample_index: int) -> str:
    """The cache key of sample ``sample_index`` of ``req`` sent to ``model`` with the settings ``cfg``."""
    return sample_key({"model": model, "messages": [list(m) for m in req.messages],
                       **request_params(cfg, req), "seed": cfg.seed, "sample_index": sample_index})


class CachingLM:
    def __init__(self, inner: Chat, store: SampleCache, cfg: Any, model: str):
        self.inner, self.store, self.cfg, self.model = inner, store, cfg, model
        self._decoded: dict[str, dict] = {}  # payload text -> its JSON (read only): answers repeat

    def key_for(self, req: ChatRequest, sample_index: int) -> str:
        """The cache key of one sample (unchanged since the first cache was written: fixtures test it)."""
        return request_key(self.cfg, self.model, req, sample_index)

    def keys_for(self, req: ChatRequest) -> dict[int, str]:
        """`key_for(req, i)` for every sample of `req` (the request serialised once)."""
        return sample_keys({"model": self.model, "messages": [list(m) for m in req.messages],
                            **request_params(self.cfg, req), "seed": self.cfg.seed}, req.indices)

    def _cached(self, req: ChatRequest) -> tuple[dict[int, str], dict[int, Completion]]:
        keys = self.keys_for(req)
        hit = self.store.get_many(keys.values())
        got = {i: validate(Completion(p["text"], p["finish_reason"], _lp_from_json(p.get("logprobs")), cached=True,
                                      sample_index=i, error=p.get("invalid")), req.adapter)
               for i, k in keys.items() if (p := hit.get(k)) is not None}
        return keys, got

    def results(self, reqs: list[ChatRequest], keys: list[dict[int, str]], hit: dict) -> list[ChatResult | None]:
        """The results of `reqs` from looked-up payloads (dicts, or their JSON text); None where one is missing."""
        out: list[ChatResult | None] = []
        memo = self._decoded
        for req, ks in zip(reqs, keys):
            payloads = [hit.get(ks[i]) for i in req.indices]
            if any(p is None for p in payloads):
                out.append(None)
                continue
            if len(memo) > 10_000:
                memo.clear()
            payloads = [(memo.get(p) or memo.setdefault(p, json.loads(p))) if isinstance(p, str) else p
                        for p in payloads]
            samples = [validate(Completion(p["text"], p["finish_reason"], _lp_from_json(p.get("logprobs")),
                                           cached=True, sample_index=i, error=p.get("invalid")), req.adapter)
                       for i, p in zip(req.indices, payloads)]
            out.append(ChatResult(request=req, samples=samples, cached_samples=req.n))
        return out

    async def chat(self, req: ChatRequest) -> ChatResult:
        keys, got = self._cached(req)
        missing = [i for i in req.indices if i not in got]
        subs = [replace(req, n=len(r), first_sample=r[0]) for r in runs(missing, self.cfg.n_per_request)]
        if len(subs) <= 1:  # the common case: no task per sub-request
            parts = [await self._fetch(s, keys) for s in subs]
        else:
            parts = await asyncio.gather(*(self._fetch(s, keys) for s in subs), return_exceptions=True)
            raise_first([p for p in parts if isinstance(p, BaseException)])
        return merge(req, parts, got)

    async def _fetch(self, req: ChatRequest, keys: dict[int, str]) -> ChatResult:
        res = await self.inner.chat(req)
        for s in res.samples:
            validate(s, req.adapter)
        self.store.put_many((keys[s.sample_index], self.model, req.tag, s.sample_index, _payload(s))
                            for s in res.samples if not s.dry_run)
        return res


def _payload(s: Completion) -> dict:
    p = {"text": s.text, "finish_reason": s.finish_reason, "logprobs": _lp_to_json(s.logprobs)}
    if s.error is not None:
        p["invalid"] = s.error  # never served as a valid sample
    return p
