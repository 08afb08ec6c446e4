"""The control plane's SQLite database (WAL): zones' metadata, tokens, manifest history, sign-in
state (signed-out sessions, passkeys), webhooks with their event outbox and deliveries
(``control.webhooks``), and the tables analytics, the audit log and the request log add.

Every write of the process goes through one `Database`: one writer connection whose transactions
take turns (an asyncio lock), each `BEGIN IMMEDIATE` ... `COMMIT` with nothing but its own statements
in between, rolled back on any exception or cancellation. So writers never contend for SQLite's lock
(`busy_timeout` only covers another process, such as a backup), a transaction never sees a stale
snapshot, and no failure leaves a transaction open for the next request. Reads use a second,
read-only connection and are fetched whole, so no read holds a snapshot across an await. A write
that another process keeps out past the busy timeout is an `ApiError` 503 `DatabaseBusy`
(`busy_error`, one WARNING line), never a 500.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import aiosqlite

from assetcdn.shared.errors import ApiError

log = logging.getLogger(__name__)
T = TypeVar("T")

BUSY_TIMEOUT_MS = 5000     # only ever reached when another process holds the file's write lock
BUSY_CODES = (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
Params = Sequence[Any] | dict[str, Any]

# The storage package's tables; every other package owns its own (assetcdn/control/schemas.py gathers them).
SCHEMA = """
CREATE TABLE IF NOT EXISTS zones (
    name TEXT PRIMARY KEY,
    created_at TEXT NOT NULL,
    enabled INTEGER NOT NULL DEFAULT 1,
    suspended INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS manifest_generations (
    generation INTEGER PRIMARY KEY,
    commit_id TEXT NOT NULL,
    created_at TEXT NOT NULL,
    changes BLOB NOT NULL,
    purge BLOB
);
-- Limits are counted in the shared counter store (assetcdn/shared/counter_store.py) since it
-- replaced these tables; an older database loses them here.
DROP TABLE IF EXISTS daily_counters;
CREATE TABLE IF NOT EXISTS domains (
    hostname TEXT PRIMARY KEY,
    zone TEXT NOT NULL,
    created_at TEXT NOT NULL,
    ssl_status TEXT NOT NULL DEFAULT 'provisioning'
);
-- A pull zone's origin (assetcdn/shared/pull_origin.py, its client form as JSON); a zone without a row is stored.
CREATE TABLE IF NOT EXISTS zone_origins (
    zone TEXT PRIMARY KEY,
    origin TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
-- Each file's time as the manifest dates it (the commit that last changed it), with the content it dates, so a start
-- dates it so again rather than by HEAD's commit (assetcdn/control/storage/manifest_store.py).
CREATE TABLE IF NOT EXISTS file_times (
    path TEXT PRIMARY KEY,
    blob_id TEXT NOT NULL,
    modified TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS blob_hashes (
    blob_id TEXT PRIMARY KEY,
    sha256 TEXT NOT NULL
);
"""


def busy_error(path: Path, busy_timeout_ms: int) -> ApiError:
    """The answer when another process held the file's lock past the busy timeout, logged as one line (the
    file's name and the bound: no statement, whose parameters may hold a client's data)."""
    log.warning("%s: another process held the write lock past the busy timeout (%d ms); answering 503 "
                "DatabaseBusy", path.name, busy_timeout_ms)
    return ApiError(503, "DatabaseBusy", "The database is busy (another process holds its write lock); "
                    "retry shortly.", headers={"Retry-After": "1"})


def _is_busy(error: sqlite3.Error) -> bool:
    return getattr(error, "sqlite_errorcode", None) in BUSY_CODES or "database is locked" in str(error)


async def _connect(path: Path, busy_timeout_ms: int, *, query_only: bool = False) -> aiosqlite.Connection:
    """An autocommit connection (isolation_level None): a statement outside BEGIN ... COMMIT is its own
    transaction, so the sqlite3 module never opens one implicitly that nobody ends."""
    db = await aiosqlite.connect(str(path), isolation_level=None)
    try:
        db.row_factory = aiosqlite.Row
        await db.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
        if not query_only:
            await db.execute("PRAGMA journal_mode=WAL")
        await db.execute("PRAGMA synchronous=NORMAL")
        if query_only:
            await db.execute("PRAGMA query_only=ON")
    except BaseException:
        # Its worker thread is not a daemon: an unclosed connection would keep the process alive.
        await db.close()
        raise
    return db


class Transaction:
    """The statements of one write transaction (only valid inside `Database.transaction`)."""

    def __init__(self, db: aiosqlite.Connection) -> None:
        self._db = db

    async def execute(self, sql: str, params: Params = ()) -> int:
        """Run one statement; its row count."""
        cursor = await self._db.execute(sql, params)
        count = cursor.rowcount
        await cursor.close()
        return count

    async def executemany(self, sql: str, rows: Iterable[Params]) -> int:
        cursor = await self._db.executemany(sql, rows)
        count = cursor.rowcount
        await cursor.close()
        return count

    async def fetch(self, sql: str, params: Params = ()) -> list[sqlite3.Row]:
        """A read inside the transaction: it sees the transaction's own writes."""
        return list(await self._db.execute_fetchall(sql, params))


class Database:
    """The process's one way to control.sqlite3: `transaction()` / `write()` for writes, `fetch()` for reads."""

    def __init__(self, path: Path, writer: aiosqlite.Connection, reader: aiosqlite.Connection,
                 busy_timeout_ms: int) -> None:
        self.path = path
        self._writer, self._reader = writer, reader
        self._busy_timeout_ms = busy_timeout_ms
        self._turn = asyncio.Lock()

    @classmethod
    async def open(cls, path: Path, *, busy_timeout_ms: int = BUSY_TIMEOUT_MS, schema: str = SCHEMA) -> Database:
        """`schema`: control's tables, or another module's alone (a store given a file of its own)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        writer = await _connect(path, busy_timeout_ms)
        try:
            await writer.executescript(schema)
            reader = await _connect(path, busy_timeout_ms, query_only=True)
        except BaseException:
            await writer.close()
            raise
        return cls(path, writer, reader, busy_timeout_ms)

    async def close(self) -> None:
        try:
            await self._reader.close()
        finally:
            await self._writer.close()

    async def fetch(self, sql: str, params: Params = ()) -> list[sqlite3.Row]:
        """Every row of a read, fetched in one call on the read-only connection."""
        return list(await self._reader.execute_fetchall(sql, params))

    async def fetch_one(self, sql: str, params: Params = ()) -> sqlite3.Row | None:
        rows = await self.fetch(sql, params)
        return rows[0] if rows else None

    async def write(self, sql: str, params: Params = ()) -> int:
        """One statement in a transaction of its own; its row count."""
        async with self.transaction() as tx:
            return await tx.execute(sql, params)

    async def script(self, sql: str) -> None:
        """A schema script (CREATE ... IF NOT EXISTS), run in its turn."""
        async with self._turn:
            try:
                await self._writer.executescript(sql)
            finally:
                await self._end()  # executescript commits its own work; this only ends a failure's

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[Transaction]:
        """`async with db.transaction() as tx:` one write transaction, committed when the block ends and
        rolled back when it raises or is cancelled. Keep it short: every other write waits for it, so no
        await inside may be anything but `tx`'s own statements."""
        async with self._turn:
            try:
                await self._writer.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as error:
                await self._end()
                if _is_busy(error):
                    raise busy_error(self.path, self._busy_timeout_ms) from error
                raise
            except BaseException:
                await self._end()
                raise
            try:
                yield Transaction(self._writer)
            except BaseException:
                await self._end()
                raise
            try:
                await self._writer.execute("COMMIT")
            except BaseException as error:
                await self._end()
                if isinstance(error, sqlite3.OperationalError) and _is_busy(error):
                    raise busy_error(self.path, self._busy_timeout_ms) from error
                raise

    async def _end(self) -> None:
        """End whatever transaction the writer has open. The ROLLBACK is queued behind any statement still
        running on the writer's thread (a cancelled caller's included) and awaited to completion even when
        the caller is cancelled meanwhile, so the next turn starts on a connection with no transaction."""
        await to_the_end(self._rollback_or_reopen())

    async def _rollback_or_reopen(self) -> None:
        try:
            await self._rollback()
        except Exception:
            log.error("the database writer could not roll back; reopening it", exc_info=True)
            await self._reopen_writer()

    async def _rollback(self) -> None:
        try:
            await self._writer.execute("ROLLBACK")
        except sqlite3.OperationalError as error:
            if "no transaction is active" not in str(error):
                raise

    async def _reopen_writer(self) -> None:
        old = self._writer
        self._writer = await _connect(self.path, self._busy_timeout_ms)
        with contextlib.suppress(Exception):
            await old.close()


async def to_the_end(work: Awaitable[T]) -> T:
    """`work`'s result, run to its end even when the caller is cancelled meanwhile (the cancellation is
    raised once it has ended). For a write and what follows it in memory: a COMMIT that a cancelled
    caller stopped waiting for still lands, and its in-memory side must land with it."""
    running = asyncio.ensure_future(work)
    cancelled = False
    while not running.done():
        try:
            await asyncio.shield(running)
        except asyncio.CancelledError:
            cancelled = True
        except Exception:
            break
    if cancelled:
        raise asyncio.CancelledError()
    return running.result()


async def open_database(path: Path, *, busy_timeout_ms: int = BUSY_TIMEOUT_MS, schema: str = SCHEMA) -> Database:
    return await Database.open(path, busy_timeout_ms=busy_timeout_ms, schema=schema)
