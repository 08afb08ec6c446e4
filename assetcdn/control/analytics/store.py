"""Daily analytics counters in SQLite: the writes (batched, bounded, pruned).

Hits are folded into per-UTC-day counters (one transaction of UPSERTs per batch, assetcdn/control/analytics/tables.py),
so a report reads at most ``days`` rows per key; the reports are assetcdn/control/analytics/reports.py
(``AnalyticsStore.reports``). Tables are prefixed ``analytics_`` because the file may be shared.

Two batching layers: the hits of concurrent ``record_hit`` callers share one ``DailyCounts``
(assetcdn/control/analytics/daily_counts.py), and batches from edges wait for a group write, at most
every ``write_interval_s``, so keys several edges counted are written once.

Rows are bounded: counts for a zone that does not exist go to the ``UNKNOWN_ZONE`` bucket, and a
zone's day names at most ``paths_per_day`` paths (and as many status-and-path error rows); the counts
of any path past that go to the zone's "other" row (``OTHER_PATH``).

Retention: ``prune`` keeps 90 days (statistics and insights). GET /api/analytics shares the tables
and never reads more than 35 days back (``ANALYTICS_RETENTION_DAYS``), which is its retention.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Collection, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

from assetcdn.control.analytics.daily_counts import DailyCounts
from assetcdn.control.analytics.hits import Hit
from assetcdn.control.analytics.reports import AnalyticsReports
from assetcdn.control.analytics.tables import (
    ADD_DELIVERIES,
    OTHER_PATH,
    RETENTION_DAYS,
    SCHEMA,
    TABLES,
    UPSERT_COUNTRY,
    UPSERT_ERROR,
    UPSERT_PATH,
    UPSERT_ZONE,
    saturated,
    utc_day,
)
from assetcdn.control.storage.database import Database, Transaction, open_database

BATCH_MEMORY_S = 86400       # an edge's batch id is remembered this long (edges retry within seconds)
PATHS_PER_DAY = 2000         # paths named per zone and day ([analytics] paths_per_zone_day)
_IN_CHUNK = 500              # parameters per "IN (...)" look-up


class AnalyticsStore:
    def __init__(self, source: Database | Path | str, *, write_interval_s: float = 0.0,
                 zones: Callable[[], Awaitable[Collection[str]]] | None = None,
                 paths_per_day: int = PATHS_PER_DAY) -> None:
        """On control's `Database` (its writes take turns with every other), or a file of its own.
        ``zones``: the zones that exist, asked at each write (None: every zone named is taken);
        ``paths_per_day``: the paths named per zone and day."""
        self._source = source
        self._zones = zones
        self._paths_per_day = max(int(paths_per_day), 0)
        self._db: Database | None = None
        self._gathered: list[Hit] = []                      # hits of record_hit waiting for the next write
        self._gathering: asyncio.Future[None] | None = None  # resolved when they are stored
        self._gather_turn = asyncio.Lock()
        # Edge batches wait this long after the previous write began, so the batches of a whole
        # fleet go into one write and a key several edges counted is written once.
        self._write_interval_s = max(float(write_interval_s), 0.0)
        self._last_write = -math.inf
        self._urgent = asyncio.Event()  # a write that should not wait for the interval is queued
        self._write_turn = asyncio.Lock()
        # Batches waiting for the next write (group commit): those that arrive while one is being
        # written are written together, so keys that several edges counted are written once.
        self._queue: list[tuple[DailyCounts, str | None, asyncio.Future[bool]]] = []
        self._writer: asyncio.Task[None] | None = None
        self.reports = AnalyticsReports(lambda: self.db)

    async def open(self) -> None:
        if isinstance(self._source, Database):
            db = self._source
        else:
            db = await open_database(Path(self._source), schema=SCHEMA)
        try:
            await db.script(SCHEMA)
            await self._migrate(db)
        except BaseException:
            if db is not self._source:
                await db.close()
            raise
        self._db = db

    @staticmethod
    async def _migrate(db: Database) -> None:
        columns = {row[1] for row in await db.fetch("PRAGMA table_info(analytics_daily_path)")}
        if "deliveries" in columns:
            return
        async with db.transaction() as tx:
            for statement in ADD_DELIVERIES:
                await tx.execute(statement)

    async def close(self) -> None:
        if self._writer is not None:
            await asyncio.gather(self._writer, return_exceptions=True)
        if self._db is not None:
            db, self._db = self._db, None
            if db is not self._source:
                await db.close()

    @property
    def db(self) -> Database:
        if self._db is None:
            raise RuntimeError("AnalyticsStore is not open; call 'await store.open()' first.")
        return self._db

    # -- writes -----------------------------------------------------------------------------------

    async def record_hit(self, hit: Hit) -> None:
        """One hit of `POST /api/analytics`. The hits of concurrent callers share one transaction, so a
        flood of them costs one write per turn, not one per hit; each caller returns once its hit is stored."""
        self._gathered.append(hit)
        if self._gathering is None:
            self._gathering = asyncio.get_running_loop().create_future()
        stored = self._gathering
        async with self._gather_turn:
            if not stored.done():
                hits, self._gathered, self._gathering = self._gathered, [], None
                try:
                    await self.record_hits(hits)
                except BaseException as error:
                    stored.set_exception(error if isinstance(error, Exception) else RuntimeError("write cancelled"))
                    stored.exception()  # retrieved: no warning when no other caller waits for it
                    raise
                stored.set_result(None)
        await stored

    async def record_hits(self, hits: Sequence[Hit], batch_id: str | None = None) -> bool:
        """Fold a batch of hits into the daily counters, in one transaction. With a ``batch_id`` the
        batch is counted once: False (nothing counted) when that id was counted before."""
        counts = DailyCounts()
        for hit in hits:
            counts.add_hit(hit)
        return await self.record(counts, batch_id)

    async def record(self, counts: DailyCounts, batch_id: str | None = None, *, grouped: bool = False) -> bool:
        """Add ``counts`` to the daily counters, durably, before returning; with a ``batch_id``, once:
        False (nothing counted) when that id was counted before. Batches queued while a write runs
        (or, ``grouped``, within the write interval) go into the next write, in one transaction;
        each counts or not as if written alone."""
        if not counts and batch_id is None:
            return True
        done: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._queue.append((counts, batch_id, done))
        if not grouped:
            self._urgent.set()
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write_queued())
        return await asyncio.shield(done)

    async def _write_queued(self) -> None:
        wait = self._last_write + self._write_interval_s - time.monotonic()
        if wait > 0 and not self._urgent.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._urgent.wait(), wait)
        self._urgent.clear()
        async with self._write_turn:
            while self._queue:
                self._last_write = time.monotonic()
                queue, self._queue = self._queue, []
                try:
                    counted = await self._write(queue)
                except BaseException as exc:
                    for _, _, done in queue:
                        if not done.done():
                            done.set_exception(exc)
                            done.exception()  # retrieved: a caller that went away leaves no warning
                    if isinstance(exc, asyncio.CancelledError):
                        raise
                    continue
                for (_, _, done), new in zip(queue, counted, strict=True):
                    if not done.done():
                        done.set_result(new)

    async def _write(self, queue: list[tuple[DailyCounts, str | None, asyncio.Future[bool]]]) -> list[bool]:
        """One transaction: the batch ids not counted before are remembered and their counts added,
        within the zones that exist and each zone's day's cap on paths."""
        zones = None if self._zones is None else await self._zones()
        async with self.db.transaction() as tx:
            ids = [batch_id for _, batch_id, _ in queue if batch_id is not None]
            known: set[str] = set()
            if ids:
                known = {row[0] for row in await tx.fetch(
                    f"SELECT batch FROM analytics_batches WHERE batch IN ({', '.join('?' * len(ids))})", ids)}
            counted: list[bool] = []
            fresh: list[DailyCounts] = []
            new_ids: dict[str, float] = {}
            for counts, batch_id, _ in queue:
                new = batch_id is None or (batch_id not in known and batch_id not in new_ids)
                counted.append(new)
                if new:
                    fresh.append(counts)
                    if batch_id is not None:
                        new_ids[batch_id] = time.time()
            total = fresh[0] if len(fresh) == 1 else DailyCounts()
            if len(fresh) > 1:
                for counts in fresh:
                    total.merge(counts)
            if new_ids:
                await tx.executemany("INSERT INTO analytics_batches (batch, received_at) VALUES (?, ?)",
                                     new_ids.items())
            if zones is not None:
                total = total.in_zones(zones)
            await self._bound(tx, total)
            if total.zones:
                await tx.executemany(UPSERT_ZONE, [(*key, *map(saturated, values))
                                                    for key, values in total.zones.items()])
            if total.paths:
                await tx.executemany(UPSERT_PATH, [(*key, *map(saturated, values))
                                                    for key, values in total.paths.items()])
            if total.countries:
                await tx.executemany(UPSERT_COUNTRY, [(*key, saturated(count))
                                                       for key, count in total.countries.items()])
            if total.errors:
                await tx.executemany(UPSERT_ERROR, [(*key, saturated(count))
                                                     for key, count in total.errors.items()])
        return counted

    async def _bound(self, tx: Transaction, total: DailyCounts) -> None:
        """Keep each zone's day within ``paths_per_day`` paths and as many error rows, as a Space-Saving
        summary does: a stored row keeps counting; a new one takes the room left, heaviest first, or
        the place of the least-counted stored row when it has more in this write than that one in
        its whole day (which then counts in the "other" row); the rest are counted in "other"."""
        paths: dict[tuple[str, str], dict[str, int]] = defaultdict(dict)
        for (day, zone, path), counters in total.paths.items():
            if path != OTHER_PATH:
                paths[(day, zone)][path] = counters[0]
        for (day, zone), requests in paths.items():
            folded, evicted = await self._admit(tx, "analytics_daily_path", ("path",), ("requests", "bytes"),
                                                day, zone, requests)
            if folded:
                total.fold_paths(day, zone, set(folded))
            if evicted:
                other = total.paths[(day, zone, OTHER_PATH)]
                for _path, evicted_requests, evicted_bytes in evicted:
                    other[0] += evicted_requests
                    other[1] += evicted_bytes
                names = [row[0] for row in evicted]
                for status, count in await self._fetch_in(
                        tx, "SELECT status, count FROM analytics_daily_error WHERE date = ? AND zone = ? AND path",
                        (day, zone), names):
                    total.errors[(day, zone, status, OTHER_PATH)] += count
                await tx.executemany("DELETE FROM analytics_daily_path WHERE date = ? AND zone = ? AND path = ?",
                                     [(day, zone, name) for name in names])
                await tx.executemany("DELETE FROM analytics_daily_error WHERE date = ? AND zone = ? AND path = ?",
                                     [(day, zone, name) for name in names])
        errors: dict[tuple[str, str], dict[tuple[int, str], int]] = defaultdict(dict)
        for (day, zone, status, path), count in total.errors.items():
            if path != OTHER_PATH:
                errors[(day, zone)][(status, path)] = count
        for (day, zone), counts in errors.items():
            folded, evicted = await self._admit(tx, "analytics_daily_error", ("status", "path"), ("count",),
                                                day, zone, counts)
            total.fold_errors(day, zone, folded)
            for status, _path, count in evicted:
                total.errors[(day, zone, status, OTHER_PATH)] += count
            await tx.executemany("DELETE FROM analytics_daily_error WHERE date = ? AND zone = ? AND status = ? "
                                 "AND path = ?", [(day, zone, status, path) for status, path, _ in evicted])

    async def _admit(self, tx: Transaction, table: str, columns: tuple[str, ...], values: tuple[str, ...],
                     day: str, zone: str, weights: dict[Any, int]) -> tuple[list[Any], list[tuple[Any, ...]]]:
        """For the keys of ``weights`` (paths, or (status, path) pairs, of a zone's day, with their
        requests in this write): those that find no place, and the stored rows (``columns`` then
        ``values``, the first of them the day's count) whose place a heavier one takes."""
        (stored_rows,), = await tx.fetch(f"SELECT COUNT(*) FROM {table} WHERE date = ? AND zone = ? AND path <> ?",
                                         (day, zone, OTHER_PATH))
        room = self._paths_per_day - int(stored_rows)
        if len(weights) <= room:
            return [], []
        keys = list(weights)
        if len(columns) == 1:
            stored = {row[0] for row in await self._fetch_in(
                tx, f"SELECT path FROM {table} WHERE date = ? AND zone = ? AND path", (day, zone), keys)}
        else:
            stored = {(row[0], row[1]) for row in await self._fetch_in(
                tx, f"SELECT status, path FROM {table} WHERE date = ? AND zone = ? AND (status, path)", (day, zone),
                keys)}
        new = sorted((key for key in keys if key not in stored), key=lambda key: (-weights[key], key))
        rest = new[max(room, 0):]
        if not rest:
            return [], []
        (least_count,), = await tx.fetch(f"SELECT MIN({values[0]}) FROM {table} WHERE date = ? AND zone = ? "
                                         "AND path <> ?", (day, zone, OTHER_PATH))
        if least_count is None or weights[rest[0]] <= least_count:
            return rest, []  # the common case under a scan: no newcomer outweighs any stored row
        # The least-counted stored rows, but for those this write counts (they are not idle).
        selected = ", ".join((*columns, *values))
        least = await tx.fetch(
            f"SELECT {selected} FROM {table} WHERE date = ? AND zone = ? AND path <> ? "
            f"ORDER BY {values[0]}, {', '.join(columns)} LIMIT ?", (day, zone, OTHER_PATH, len(rest) + len(stored)))
        idle = [tuple(row) for row in least if (row[0] if len(columns) == 1 else (row[0], row[1])) not in weights]
        evicted: list[tuple[Any, ...]] = []
        for key in rest:
            if len(evicted) == len(idle) or weights[key] <= idle[len(evicted)][len(columns)]:
                break  # newcomers come heaviest first and the stored counts least first: none after wins
            evicted.append(idle[len(evicted)])
        return rest[len(evicted):], evicted

    @staticmethod
    async def _fetch_in(tx: Transaction, sql: str, params: tuple[Any, ...], keys: list[Any]) -> list[Any]:
        """``sql`` ending in a column (or a row value) to be found among ``keys``, asked a chunk at a time."""
        found: list[Any] = []
        for start in range(0, len(keys), _IN_CHUNK):
            chunk = keys[start:start + _IN_CHUNK]
            if isinstance(chunk[0], tuple):
                found += await tx.fetch(f"{sql} IN (VALUES {', '.join(['(?, ?)'] * len(chunk))})",
                                        (*params, *(value for key in chunk for value in key)))
            else:
                found += await tx.fetch(f"{sql} IN ({', '.join('?' * len(chunk))})", (*params, *chunk))
        return found

    async def prune(self, now: float | None = None) -> int:
        """Delete counters older than the 90-day retention; returns the number of rows removed."""
        today = utc_day(time.time() if now is None else now)
        oldest_kept = (today - timedelta(days=RETENTION_DAYS - 1)).isoformat()
        removed = 0
        async with self.db.transaction() as tx:
            for table in TABLES:
                removed += await tx.execute(f"DELETE FROM {table} WHERE date < ?", (oldest_kept,))
            await tx.execute("DELETE FROM analytics_batches WHERE received_at < ?",
                             ((time.time() if now is None else now) - BATCH_MEMORY_S,))
        return removed
