"""One machine: counters in a SQLite file every process opens."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from assetcdn.shared.counter_backends.base import (
    SAME_WINDOW_S,
    CounterStoreUnavailable,
    Decision,
    decision,
)

T = TypeVar("T")
PRUNE_EVERY_S = 60.0      # how often a process deletes ended windows from the embedded store

_SCHEMA = """
CREATE TABLE IF NOT EXISTS counters (
    key TEXT PRIMARY KEY,
    count INTEGER NOT NULL,
    reset_at REAL NOT NULL      -- Unix time the window ends
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS counters_by_reset ON counters (reset_at);
"""


def _switch_to_wal(db: sqlite3.Connection, timeout_s: float) -> None:
    """Put the file in WAL mode (it stays so). Connections switching a new file at the same moment deadlock
    on the lock upgrade, and SQLite then answers one of them "database is locked" at once, without waiting
    out the busy timeout: that happens when `assetcdn up` starts control and the edges on a new data
    directory. The other connection's switch takes milliseconds, so try again until the busy timeout."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            db.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if getattr(exc, "sqlite_errorcode", None) != sqlite3.SQLITE_BUSY or time.monotonic() >= deadline:
                raise
        time.sleep(0.005)


class SqliteCounterStore:
    """The counters in one SQLite file, shared by every process that opens it (WAL mode).

    Each call runs on this store's own thread and connection, as one `BEGIN IMMEDIATE` transaction:
    the write lock is held from before the count is read until it is written, so hits from other
    processes wait (up to the busy timeout) instead of racing or failing."""

    backend = "embedded"

    def __init__(self, path: Path, *, busy_timeout_s: float = 5.0, clock: Callable[[], float] = time.time) -> None:
        self.path = Path(path)
        self._busy_ms = max(int(busy_timeout_s * 1000), 1)
        self._clock = clock
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="counters")
        self._db: sqlite3.Connection | None = None
        self._pruned_at = 0.0

    def _connect(self) -> sqlite3.Connection:
        if self._db is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(self.path, isolation_level=None, timeout=self._busy_ms / 1000,
                                 check_same_thread=False)
            try:
                db.execute(f"PRAGMA busy_timeout={self._busy_ms}")
                _switch_to_wal(db, self._busy_ms / 1000)
                db.execute("PRAGMA synchronous=NORMAL")  # WAL: a power cut may lose the last hits, never the file
                db.executescript(_SCHEMA)
            except BaseException:
                db.close()
                raise
            self._db = db
        return self._db

    async def _run(self, work: Callable[[sqlite3.Connection], T], *, write: bool = True) -> T:
        def call() -> T:
            db = self._connect()
            if not write:  # a read in autocommit mode: WAL readers never wait for the writer
                return work(db)
            db.execute("BEGIN IMMEDIATE")
            try:
                result = work(db)
                db.execute("COMMIT")
            except BaseException:
                # A failed COMMIT (disk full, I/O error) leaves the transaction open: end it, or every
                # later BEGIN fails; a connection that cannot even roll back is opened afresh.
                try:
                    if db.in_transaction:
                        db.execute("ROLLBACK")
                except sqlite3.Error:
                    self._db = None
                    db.close()
                raise
            return result
        try:
            return await asyncio.get_running_loop().run_in_executor(self._thread, call)
        except sqlite3.Error as exc:
            raise CounterStoreUnavailable(f"counter database: {exc}") from exc

    def _current(self, db: sqlite3.Connection, key: str, window_s: float, now: float) -> tuple[int, float]:
        row = db.execute("SELECT count, reset_at FROM counters WHERE key = ?", (key,)).fetchone()
        if row is None or row[1] <= now:
            return 0, now + window_s
        return int(row[0]), float(row[1])

    async def hit(self, key: str, limit: int, window_s: float) -> Decision:
        def work(db: sqlite3.Connection) -> Decision:
            now = self._clock()
            used, reset_at = self._current(db, key, window_s, now)
            if used >= limit:
                return decision(False, limit, used, reset_at, now)
            db.execute("INSERT INTO counters (key, count, reset_at) VALUES (?, ?, ?) ON CONFLICT (key) "
                       "DO UPDATE SET count = excluded.count, reset_at = excluded.reset_at",
                       (key, used + 1, reset_at))
            if now - self._pruned_at > PRUNE_EVERY_S:
                self._pruned_at = now
                db.execute("DELETE FROM counters WHERE reset_at <= ?", (now,))
            return decision(True, limit, used + 1, reset_at, now)
        return await self._run(work)

    async def peek(self, key: str, limit: int, window_s: float) -> Decision:
        def work(db: sqlite3.Connection) -> Decision:
            now = self._clock()
            used, reset_at = self._current(db, key, window_s, now)
            return decision(used < limit, limit, used, reset_at, now)
        return await self._run(work, write=False)

    async def refund(self, key: str, window_end: float) -> None:
        def work(db: sqlite3.Connection) -> None:
            db.execute("UPDATE counters SET count = count - 1 WHERE key = ? AND count > 0 AND reset_at > ? "
                       "AND reset_at <= ?", (key, self._clock(), window_end + SAME_WINDOW_S))
        await self._run(work)

    async def ping(self) -> None:
        await self._run(lambda db: db.execute("SELECT 1").fetchone(), write=False)

    async def close(self) -> None:
        def shut() -> None:
            if self._db is not None:
                self._db.close()
                self._db = None
        with contextlib.suppress(RuntimeError):  # the loop may be closing already
            await asyncio.get_running_loop().run_in_executor(self._thread, shut)
        self._thread.shutdown(wait=True)

