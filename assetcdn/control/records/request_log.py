"""The request log: what the control plane answered and what every edge delivered, buffered in
SQLite (bounded by count and by age) and handed to live readers as it arrives.

Entry: ``{id, timestamp, level, code, message, method, path, status, durationMs, requestId, ip, node,
cache, sampleRate}``.
- Control's own requests (``control.records.recording``; the signed ``/_cluster`` traffic aside, edge
  heartbeats would drown the rest): ``code`` ``request``, ``node`` ``control``, ``cache`` null,
  every one logged (``sampleRate`` 1).
- Deliveries the edges served, a sample shipped in their analytics batches
  (``control.routes.analytics``, ``assetcdn/edge/delivery_log.py``): ``code`` ``delivery``, ``node``
  the edge worker that served it (``edge-0/0``), ``cache`` its X-Cache (HIT, MISS, STALE, BYPASS),
  ``durationMs`` null, ``sampleRate`` the fraction of that worker's deliveries of that second the
  entry stands for (1: every one was logged; an estimate of the deliveries is the sum of 1/sampleRate).
The query string is never logged (it may carry ids or signatures). Level: ``error`` for 5xx,
``warn`` for 4xx, else ``info``. Ids grow with arrival, so a page newest first is by id; an edge's
entry carries the time it was served, which can be a moment older than entries logged before it.

Writes: control's entries are queued and written every ``FLUSH_INTERVAL_S`` (a page read writes the
queue first); an edge batch is written before it is acknowledged, once per batch id, so a batch the
edge retries (a lost reply, a control restart) is listed once. Every write drops entries beyond
``max_records``; ``prune`` (hourly, ``control.records.retention``) drops those older than the retention.
Subscribers get each new entry on their own bounded queue; a reader too slow to keep up loses its
oldest undelivered entries, never blocks a request.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from assetcdn.control.storage.database import Database, open_database

log = logging.getLogger(__name__)

MAX_RECORDS = 100_000
RETENTION_DAYS = 7
FLUSH_INTERVAL_S = 0.5
FLUSH_AT = 1_000            # queued entries that trigger a write before the interval is up
MAX_QUEUED = 50_000         # entries kept for writing while the database is failing
BACKLOG_LIMIT = 1_000       # entries a stream sends at most for its ``since``
SUBSCRIBER_QUEUE = 1000
LEVELS = ("info", "warn", "error")
CONTROL_NODE = "control"

Entry = dict[str, Any]

SCHEMA = """
CREATE TABLE IF NOT EXISTS request_log (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    timestamp TEXT NOT NULL,
    level TEXT NOT NULL,
    entry BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS request_log_by_time ON request_log (timestamp);
CREATE TABLE IF NOT EXISTS request_log_batches (
    batch TEXT PRIMARY KEY,
    received_at REAL NOT NULL
) WITHOUT ROWID;
"""
_COLUMNS = "id, entry"


def level_of(status: int) -> str:
    return "error" if status >= 500 else "warn" if status >= 400 else "info"


def iso_now(now: float | None = None) -> str:
    moment = datetime.fromtimestamp(time.time() if now is None else now, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def control_entry(*, method: str, path: str, status: int, duration_ms: float, request_id: str | None,
                  ip: str) -> Entry:
    """The log entry of one request the control plane answered."""
    return {"timestamp": iso_now(), "level": level_of(status), "code": "request",
            "message": f"{method} {path} {status}", "method": method, "path": path, "status": status,
            "durationMs": duration_ms, "requestId": request_id, "ip": ip, "node": CONTROL_NODE, "cache": None,
            "sampleRate": 1.0}


def delivery_entry(*, timestamp: float, method: str, path: str, status: int, cache: str,
                   request_id: str | None, ip: str, node: str, sample_rate: float = 1.0) -> Entry:
    """The log entry of one delivery an edge served (``path`` as analytics stores it, no leading slash)."""
    shown = "/" + path
    return {"timestamp": iso_now(timestamp), "level": level_of(status), "code": "delivery",
            "message": f"{method} {shown} {status} {cache}", "method": method, "path": shown,
            "status": status, "durationMs": None, "requestId": request_id, "ip": ip, "node": node,
            "cache": cache, "sampleRate": sample_rate}


def _entry(row: tuple[Any, ...]) -> Entry:
    return {"id": row[0], **orjson.loads(row[1])}


class RequestLog:
    def __init__(self, *, max_records: int = MAX_RECORDS, retention_days: float = RETENTION_DAYS,
                 flush_interval_s: float = FLUSH_INTERVAL_S) -> None:
        self.max_records = max(int(max_records), 1)
        self.retention_s = float(retention_days) * 86400
        self._flush_interval_s = flush_interval_s
        self._db: Database | None = None
        self._owns_db = False
        self._next_id = 1
        self._queued: list[tuple[int, str, str, bytes]] = []   # (id, timestamp, level, entry JSON)
        self._queued_batches: dict[str, float] = {}
        self._write_lock = asyncio.Lock()
        self._wake = asyncio.Event()
        self._writer: asyncio.Task[None] | None = None
        self._subscribers: set[asyncio.Queue[Entry | None]] = set()

    # -- storage ----------------------------------------------------------------------------------

    async def open(self, source: Database | Path) -> None:
        """On control's `Database` (its writes take turns with every other), or a file of its own."""
        db = source if isinstance(source, Database) else await open_database(source, schema=SCHEMA)
        try:
            await db.script(SCHEMA)
            (highest,) = await db.fetch_one("SELECT MAX(id) FROM request_log") or (None,)
            (sequence,) = await db.fetch_one("SELECT seq FROM sqlite_sequence WHERE name = 'request_log'") or (None,)
        except BaseException:
            if db is not source:
                await db.close()
            raise
        self._db, self._owns_db = db, db is not source
        # Ids never go back, even after every entry was pruned: a reader's cursor stays meaningful.
        self._next_id = max(highest or 0, sequence or 0, self._next_id - 1) + 1
        for position, (_, timestamp, level, data) in enumerate(self._queued):  # logged before open
            self._queued[position] = (self._next_id, timestamp, level, data)
            self._next_id += 1
        self._writer = asyncio.create_task(self._write_forever())

    async def close(self) -> None:
        """Stop the writer, write what is queued, close the database."""
        if self._writer is not None:
            self._writer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._writer
            self._writer = None
        if self._db is not None:
            with contextlib.suppress(Exception):
                await self.flush()
            db, self._db = self._db, None
            if self._owns_db:
                await db.close()

    async def _write_forever(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self._flush_interval_s)
            self._wake.clear()
            try:
                await self.flush()
            except Exception:
                log.exception("writing the request log failed; retrying")

    async def flush(self) -> None:
        """Write the queued entries (and edge batch ids) in one transaction, then drop the entries
        beyond ``max_records``."""
        async with self._write_lock:
            db = self._db
            if db is None or not (self._queued or self._queued_batches):
                return
            entries, self._queued = self._queued, []
            batches, self._queued_batches = self._queued_batches, {}
            try:
                async with db.transaction() as tx:
                    await tx.executemany("INSERT INTO request_log (id, timestamp, level, entry) VALUES (?, ?, ?, ?)",
                                         entries)
                    await tx.executemany("INSERT OR IGNORE INTO request_log_batches (batch, received_at) "
                                         "VALUES (?, ?)", list(batches.items()))
                    if entries:
                        await tx.execute("DELETE FROM request_log WHERE id <= ?", (entries[-1][0] - self.max_records,))
            except BaseException:
                # Keep them for the next attempt (newest kept when the queue is full).
                self._queued = (entries + self._queued)[-MAX_QUEUED:]
                self._queued_batches = {**batches, **self._queued_batches}
                raise

    async def prune(self, now: float | None = None) -> int:
        """Delete entries (and remembered batch ids) older than the retention; returns entries removed."""
        moment = time.time() if now is None else now
        await self.flush()
        async with self._write_lock:
            async with self.db.transaction() as tx:
                removed = await tx.execute("DELETE FROM request_log WHERE timestamp < ?",
                                           (iso_now(moment - self.retention_s),))
                await tx.execute("DELETE FROM request_log_batches WHERE received_at < ?", (moment - self.retention_s,))
        return removed

    @property
    def db(self) -> Database:
        if self._db is None:
            raise RuntimeError("RequestLog is not open; call 'await log.open(path)' first.")
        return self._db

    # -- writes -----------------------------------------------------------------------------------

    def append(self, entry: Entry) -> Entry:
        """Log one entry now (subscribers see it at once); it is written with the next flush."""
        entry = {"id": self._next_id, **entry}
        self._next_id += 1
        self._queued.append((entry["id"], entry["timestamp"], entry["level"], orjson.dumps(
            {k: v for k, v in entry.items() if k != "id"})))
        if len(self._queued) > MAX_QUEUED:
            del self._queued[: len(self._queued) - MAX_QUEUED]
        if len(self._queued) >= FLUSH_AT:
            self._wake.set()
        for queue in self._subscribers:
            if queue.full():
                queue.get_nowait()
            queue.put_nowait(entry)
        return entry

    async def ingest(self, batch_id: str | None, entries: Iterable[Entry]) -> int:
        """Log an edge's batch and write it before returning; a batch id logged before is skipped.
        Returns the number of entries logged."""
        if batch_id is not None and await self._known_batch(batch_id):
            return 0
        count = 0
        for entry in entries:
            self.append(entry)
            count += 1
        if batch_id is not None:
            self._queued_batches[batch_id] = time.time()
        await self.flush()
        return count

    async def _known_batch(self, batch_id: str) -> bool:
        if batch_id in self._queued_batches:
            return True
        return await self.db.fetch_one("SELECT 1 FROM request_log_batches WHERE batch = ?", (batch_id,)) is not None

    # -- reads ------------------------------------------------------------------------------------

    async def page(self, *, limit: int, before: int | None = None, since: str | None = None,
                   level: str | None = None) -> list[Entry]:
        """Newest first: at most ``limit`` entries older than id ``before``, newer than ``since`` (ISO)."""
        await self.flush()
        where, params = self._filters(since, level)
        if before is not None:
            where.append("id < ?")
            params.append(before)
        sql = f"SELECT {_COLUMNS} FROM request_log"
        if where:
            sql += " WHERE " + " AND ".join(where)
        return [_entry(tuple(row)) for row in await self.db.fetch(sql + " ORDER BY id DESC LIMIT ?", (*params, limit))]

    async def after(self, since: str, level: str | None = None) -> list[Entry]:
        """Entries newer than ``since`` (ISO), oldest first, at most the newest BACKLOG_LIMIT: the
        backlog of a stream that names one."""
        newest_first = await self.page(limit=BACKLOG_LIMIT, since=since, level=level)
        return newest_first[::-1]

    @staticmethod
    def _filters(since: str | None, level: str | None) -> tuple[list[str], list[Any]]:
        where: list[str] = []
        params: list[Any] = []
        if since is not None:
            where.append("timestamp > ?")
            params.append(since)
        if level is not None:
            where.append("level = ?")
            params.append(level)
        return where, params

    # -- live readers -----------------------------------------------------------------------------

    def subscribe(self) -> asyncio.Queue[Entry | None]:
        queue: asyncio.Queue[Entry | None] = asyncio.Queue(maxsize=SUBSCRIBER_QUEUE)
        self._subscribers.add(queue)
        return queue

    def unsubscribe(self, queue: asyncio.Queue[Entry | None]) -> None:
        self._subscribers.discard(queue)

    @property
    def subscribers(self) -> int:
        return len(self._subscribers)

    def end_streams(self) -> None:
        """End every live stream (``None`` is the end-of-stream marker)."""
        for queue in self._subscribers:
            if queue.full():
                queue.get_nowait()
            queue.put_nowait(None)
