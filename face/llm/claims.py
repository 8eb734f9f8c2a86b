"""No request paid twice across processes: every process that shares an LLM cache (parallel sweep jobs, two
notebooks, a run and its rerun) claims the samples it is about to send, in the cache's own SQLite database.

A claim is one row per sample key: ``claims(key, owner, pid, host, beat)``. Before a sample is sent, its key is
claimed; a key already answered (in ``samples``) is read instead, a key another live process holds is waited for
(its answer read from the cache as soon as it is committed). A process's answers are stored and its claims
dropped in one transaction, so a key is always either claimed, answered or free. Claims are asked for, and
given back, in the transaction the cache commits once per turn of the event loop (``SampleCache.flush``): no SQLite
round trip per request on the single-process path.

The owner keeps its claims alive: ``beat`` is refreshed every ``BEAT_S`` seconds while it holds any. A waiter
takes a claim over when its owner is gone -- a process on this host that no longer runs (``kill -9``: at once), or
a claim not refreshed for ``STALE_S`` seconds (another host, a hung process, a reused pid): its beat older than
that, or the same beat seen by the waiter for that long on its own clock (a beat in the future -- another host's
clock ahead, a bogus value -- never ages) -- or when the owner gave it back without an answer (its request failed
or was cancelled): it claims the key itself and sends it.
"""
from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import socket
import sqlite3
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from face.files import process_alive

SCHEMA = """
CREATE TABLE IF NOT EXISTS claims (
    key TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    pid INTEGER NOT NULL,
    host TEXT NOT NULL,
    beat REAL NOT NULL
)
"""
BEAT_S = 2.0  # an owner refreshes its claims this often
STALE_S = 30.0  # a claim not refreshed for this long has no owner
POLL_S = 0.05  # a waiter looks for the answers it waits for this often (at first; then up to 1 s)
_CHUNK = 500  # keys per SQL statement


@dataclass
class Claimed:
    """What the claims of one transaction gave (each request that asked reads its own keys): keys now ours (send
    them), keys answered meanwhile (their payloads), keys another live process holds (wait for them)."""

    mine: set[str] = field(default_factory=set)
    found: dict[str, str] = field(default_factory=dict)
    theirs: set[str] = field(default_factory=set)


def alive(pid: int, host: str, beat: float, now: float) -> bool:
    """Whether a claim's owner may still answer it."""
    if now - beat > STALE_S:
        return False
    if host != socket.gethostname():
        return True
    return process_alive(pid)


def _chunks(keys: list[str]) -> Iterable[list[str]]:
    for i in range(0, len(keys), _CHUNK):
        yield keys[i:i + _CHUNK]


def _where(keys: list[str]) -> str:
    return f"key IN ({','.join('?' * len(keys))})"


class Claims:
    """The claims of one cache connection (one owner). ``ask`` / ``release`` queue work for the cache's next
    transaction (``run``, inside it; ``done``, after the commit); ``wait`` polls for keys other owners hold."""

    def __init__(self, conn: sqlite3.Connection, flush: Callable[[], None]) -> None:
        self.conn = conn  # the cache's connection
        self._flush = flush  # the cache's: one transaction now, even with nothing else queued
        self.pid, self.host = os.getpid(), socket.gethostname()
        self.owner = f"{self.host}:{self.pid}:{secrets.token_hex(4)}"
        self.held: set[str] = set()
        self._asked: list[tuple[list[str], asyncio.Future]] = []
        self._released: set[str] = set()
        self._beat_at = 0.0
        self._beat_ran = False
        self._ticking = False
        self.waited = 0  # keys this owner waited for (another process was sending them)
        self.taken_over = 0  # keys taken over from an owner that was gone

    # ---- queued work, done in the cache's transaction ---------------------------------------------------------
    def ask(self, keys: list[str]) -> asyncio.Future:
        """A future of ``Claimed`` for ``keys``, settled by the cache's next transaction."""
        fut = asyncio.get_running_loop().create_future()
        self._asked.append((keys, fut))
        return fut

    def release(self, keys: Iterable[str]) -> None:
        """Give back claims (answered or not) in the cache's next transaction."""
        self._released.update(k for k in keys if k in self.held)

    def pending(self) -> bool:
        return bool(self._asked or self._released)

    def run(self) -> tuple[list[asyncio.Future], Claimed]:
        """Inside the open transaction: the releases, the heartbeat, the claims asked for. Nothing is changed in
        memory here (the transaction may be retried); ``done`` applies it after the commit."""
        conn = self.conn
        for part in _chunks(list(self._released)):
            conn.execute(f"DELETE FROM claims WHERE owner = ? AND {_where(part)}", [self.owner, *part])
        now = time.time()
        self._beat_ran = bool(self.held) and now - self._beat_at >= BEAT_S
        if self._beat_ran:
            conn.execute("UPDATE claims SET beat = ? WHERE owner = ?", (now, self.owner))
        asked = [(keys, fut) for keys, fut in self._asked if not fut.done()]
        return [fut for _, fut in asked], self._claim(list(dict.fromkeys(k for keys, _ in asked for k in keys)), now)

    def done(self, outcome: tuple[list[asyncio.Future], Claimed]) -> None:
        """After the commit: the claims held, the futures settled."""
        asked, claimed = outcome
        self.held.difference_update(self._released)
        self._released.clear()
        self._asked.clear()
        if self._beat_ran or not self.held:  # refreshed now, or every claim about to be held is fresh
            self._beat_at = time.time()
        self.held.update(claimed.mine)
        for fut in asked:  # (none is done: run() left out the cancelled, and nothing ran since)
            fut.set_result(claimed)
        if self.held:
            self._tick()

    def failed(self, exc: BaseException) -> None:
        """The transaction failed for good: every request that asked learns it."""
        for _, fut in self._asked:
            if not fut.done():
                fut.set_exception(exc)
        self._asked.clear()

    def _claim(self, keys: list[str], now: float) -> Claimed:
        """Every key asked for this turn, at once (a few statements per 500 keys, not per request)."""
        conn, out = self.conn, Claimed()
        for part in _chunks(keys):
            out.found.update(conn.execute(f"SELECT key, payload FROM samples WHERE {_where(part)}", part).fetchall())
            rest = [k for k in part if k not in out.found]  # may be empty: the statements below then change nothing
            before = conn.total_changes
            conn.executemany("INSERT OR IGNORE INTO claims (key, owner, pid, host, beat) VALUES (?,?,?,?,?)",
                             [(k, self.owner, self.pid, self.host, now) for k in rest])
            if conn.total_changes - before == len(rest):  # every one was free: no other owner (the common case)
                out.mine.update(rest)
                continue
            rows = conn.execute(f"SELECT key, owner FROM claims WHERE {_where(rest)}", rest).fetchall()
            for k, owner in rows:
                (out.mine if owner == self.owner else out.theirs).add(k)
        return out

    # ---- the heartbeat ------------------------------------------------------------------------------------------
    def _tick(self) -> None:
        """While claims are held, make sure the cache commits at least every ``BEAT_S`` (the beat rides on it)."""
        if self._ticking:
            return

        def tick() -> None:
            self._ticking = False
            if self.held:
                self._flush()

        with contextlib.suppress(RuntimeError):  # no loop (the cache closing): nothing is in flight to keep alive
            asyncio.get_running_loop().call_later(BEAT_S, tick)
            self._ticking = True

    # ---- waiting for other owners -----------------------------------------------------------------------------
    async def wait(self, keys: set[str]) -> tuple[dict[str, str], set[str]]:
        """Wait until other owners answered ``keys`` or let them go: (payloads answered, keys now free to claim --
        their owner gave them back or is gone)."""
        self.waited += len(keys)
        found: dict[str, str] = {}
        free: set[str] = set()
        seen: dict[str, tuple[tuple[str, float], float]] = {}  # key -> (its owner and beat, first seen then)
        pause = POLL_S
        while left := sorted(keys - found.keys() - free):
            await asyncio.sleep(pause)
            pause = min(1.0, pause * 1.5)
            self._look(left, seen, found, free)
        return found, free

    def _look(self, keys: list[str], seen: dict[str, tuple[tuple[str, float], float]], found: dict[str, str],
              free: set[str]) -> None:
        """One look at waited keys: the answered ones' payloads go to ``found``, the free ones (no claim left or its
        owner gone -- taken over) to ``free``. ``seen``: when this waiter first saw each claim's owner and beat (a
        beat unchanged for ``STALE_S``: gone)."""
        conn, now = self.conn, time.time()
        for part in _chunks(keys):
            found.update(conn.execute(f"SELECT key, payload FROM samples WHERE {_where(part)}", part).fetchall())
            rest = [k for k in part if k not in found]  # may be empty: the statements below then find nothing
            owners = {k: (o, pid, host, beat) for k, o, pid, host, beat in conn.execute(
                f"SELECT key, owner, pid, host, beat FROM claims WHERE {_where(rest)}", rest)}
            free.update(k for k in rest if k not in owners)
            for k, (o, _, _, beat) in owners.items():
                if seen.get(k, (None,))[0] != (o, beat):
                    seen[k] = ((o, beat), now)
            dead = [(k, o) for k, (o, pid, host, beat) in owners.items()
                    if not alive(pid, host, beat, now) or now - seen[k][1] > STALE_S]
            if dead:
                with conn:  # drop a gone owner's claims (only if still its own): the caller claims them anew
                    conn.executemany("DELETE FROM claims WHERE key = ? AND owner = ?", dead)
                free.update(k for k, _ in dead)
                self.taken_over += len(dead)

    def close(self) -> None:
        """Give back whatever is still held (a run stopped half-way): others need not wait for it."""
        if not self.held:
            return
        with contextlib.suppress(sqlite3.Error), self.conn:
            self.conn.execute("DELETE FROM claims WHERE owner = ?", (self.owner,))
        self.held.clear()
