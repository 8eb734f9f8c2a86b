"""The LLM cache's store: one SQLite file (WAL mode) in cache_dir, one row per sample (key -> JSON payload), and
the claims of the samples in flight (face/llm/claims.py), committed together once per turn of the event loop.
`check_cache_dir` says before a run whether a directory can hold it."""
from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sqlite3
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .claims import SCHEMA as CLAIMS_SCHEMA
from .claims import Claims, _chunks, _where

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
                                     check_same_thread=False)  # (the timeout is SQLite's busy_timeout)
        self._retry_locked(lambda: self._conn.execute("PRAGMA journal_mode=WAL"))
        self._conn.execute("PRAGMA synchronous=NORMAL")  # durable against process death, fast
        self._conn.execute("PRAGMA cache_size=-65536")  # 64 MB of pages: a warm paper-size rerun reads ~1 GB
        self._retry_locked(lambda: self._conn.executescript(_SCHEMA + ";" + CLAIMS_SCHEMA))
        self._pending: dict[str, tuple] = {}  # key -> row, committed by the next flush
        self._reader: sqlite3.Connection | None = None  # read_committed's (one other thread)
        self._flush_scheduled = False
        self.commits = 0
        self.claims = Claims(self._conn, lambda: self.flush(force=True))  # samples in flight, across processes

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
        out = {k: json.loads(self._pending[k][5]) for k in keys if k in self._pending}  # queued, not committed yet
        for part in _chunks([k for k in keys if k not in out]):
            rows = self._conn.execute(f"SELECT key, payload FROM samples WHERE {_where(part)}", part)
            out.update((k, json.loads(payload)) for k, payload in rows)
        return out

    def read_committed(self, keys: list[str]) -> dict[str, str]:
        """Payloads (JSON text) of the committed rows among ``keys``, read through a connection of its own: safe to
        call from one other thread while this one writes (SQLite lets go of the GIL while it searches)."""
        if self._reader is None:
            self._reader = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, check_same_thread=False,
                                           timeout=30)
            self._reader.execute("PRAGMA cache_size=-65536")
        out: dict[str, str] = {}
        for part in _chunks(keys):
            # one row for all: the whole search runs in one step, without the GIL (JSON escapes \x1e and \x1f)
            q = f"SELECT group_concat(key || char(31) || payload, char(30)) FROM samples WHERE {_where(part)}"
            (found,), = self._reader.execute(q, part).fetchall()
            if found:
                out.update(row.split("\x1f", 1) for row in found.split("\x1e"))
        return out

    def put_many(self, rows: Iterable[tuple[str, str, str, int, dict]], release: Iterable[str] = ()) -> None:
        """rows: (key, model, tag, sample_index, payload), stored by the next transaction, which also gives back the
        claims of ``release`` (face/llm/claims.py): a key is answered and let go at once."""
        now = time.time()
        self._pending.update((k, (k, m, t, i, now, json.dumps(p, ensure_ascii=False))) for k, m, t, i, p in rows)
        self.release(release)

    def claim(self, keys: list[str]) -> asyncio.Future:
        """A future of ``Claimed`` (face/llm/claims.py) for ``keys``: which to send, which were answered meanwhile,
        which another process is sending -- settled by the next transaction, with everything else of this turn (the
        whole transaction's claims: a caller reads only its own keys)."""
        fut = self.claims.ask(keys)
        self._schedule(asyncio.get_running_loop())
        return fut

    def release(self, keys: Iterable[str]) -> None:
        """Give back claims in the next transaction: answered (put_many) or not (a request failed or was cancelled).
        The transaction runs after this turn of the event loop, or at once outside one."""
        self.claims.release(keys)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.flush()
        else:
            self._schedule(loop)

    def _schedule(self, loop: asyncio.AbstractEventLoop) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            loop.call_soon(self.flush)

    def flush(self, force: bool = False) -> None:
        """Commit the queued rows, claims and releases in one transaction (``force``: even with nothing queued,
        for the claims' heartbeat)."""
        self._flush_scheduled = False
        if not (self._pending or self.claims.pending() or force):
            return
        data, self._pending = list(self._pending.values()), {}

        def transaction() -> tuple:
            with self._conn:  # commits at the end, or rolls back on any error (a failed commit too)
                self._conn.execute("BEGIN IMMEDIATE")  # takes the write lock (waits busy_timeout for it)
                self._conn.executemany("INSERT OR REPLACE INTO samples (key, model, tag, sample_index, created, "
                                       "payload) VALUES (?,?,?,?,?,?)", data)
                return self.claims.run()

        try:
            outcome = self._retry_locked(transaction)
        except BaseException as e:
            self.claims.failed(e)
            raise
        self.commits += 1
        self.claims.done(outcome)

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
        where, args = ("", ()) if model is None else (" WHERE model = ?", (model,))
        n = self._retry_locked(lambda: self._conn.execute("DELETE FROM samples" + where, args)).rowcount
        self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return n

    def close(self) -> None:
        with contextlib.suppress(sqlite3.Error, RuntimeError):
            self.flush()
        self.claims.close()
        for conn in filter(None, (self._conn, self._reader)):
            with contextlib.suppress(sqlite3.Error):
                conn.close()
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
