"""Daily analytics counters in SQLite, and the reports of statistics, insights and /api/analytics.

Hits are folded into per-UTC-day counters (one transaction of UPSERTs per batch), so a report reads
at most ``days`` rows per key. Tables are prefixed ``analytics_`` because the file may be shared.

Conventions of every report:
- "Today" is the UTC date of ``now`` (injectable); a period of N days is today and the N-1 before it.
- Paths are reported with a leading slash (``/akande/v1/logos/logo.svg``); they are stored without.
- STALE counts as a cache hit (served from cache), BYPASS as a miss; CacheHit + CacheMiss = requests.
  A hit rate is CacheHit / requests as text with one decimal (``"87.5%"``; ``"0.0%"`` with no traffic).
- ``XX`` (unknown country) is listed in geography but not counted in UniqueCountries.
- Ties are broken by path, country or status code so answers are stable.
- Every per-day list (statistics ``Daily``, the asset report's ``Daily``, /api/analytics ``data``) is
  newest first.
- Rows are bounded: counts for a zone that does not exist go to the ``UNKNOWN_ZONE`` bucket (in every
  total, under no zone, with no path of its own), and a zone's day names at most ``paths_per_day``
  paths (and as many status-and-path error rows); the counts of any path past that go to the zone's
  "other" row (``OTHER_PATH``), reported as ``OTHER_REPORTED`` in the errors' top paths and never as a
  top asset.
- Top-asset lists count asset deliveries only (``is_asset_delivery``, assetcdn/shared/deliveries.py); the asset report counts
  every request for its path, errors included.
- Counters never overflow: each stored counter saturates at ``COUNTER_MAX`` (adds are checked in
  SQL), sums are read with ``TOTAL`` (a float sum that cannot overflow) and every reported number is
  clamped to ``COUNTER_MAX``, so even rows written by an older version at SQLite's limit read back.

Retention: ``prune`` keeps 90 days (statistics and insights). GET /api/analytics shares the tables
and never reads more than 35 days back (``ANALYTICS_RETENTION_DAYS``), which is its retention.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Collection, Iterable, Sequence
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

from assetcdn.control.analytics.hits import (
    COUNTER_MAX,
    MAX_HIT_BYTES,
    UNKNOWN_ZONE,
    Hit,
)
from assetcdn.control.analytics.params import ANALYTICS_DAYS_MAXIMUM, DAYS_MAXIMUM
from assetcdn.control.storage.database import Database, Transaction, open_database
from assetcdn.shared.analytics_keys import UNKNOWN_COUNTRY
from assetcdn.shared.cache_results import COUNTED
from assetcdn.shared.deliveries import is_asset_delivery
from assetcdn.shared.manifest import human_size

RETENTION_DAYS = 90
ANALYTICS_RETENTION_DAYS = 35
STATISTICS_TOP_ASSETS = 10
ERROR_TOP_PATHS = 10
ANALYTICS_TOP_ASSETS = 100   # per day, as the original service's `analytics:top:<date>` kept
BATCH_MEMORY_S = 86400       # an edge's batch id is remembered this long (edges retry within seconds)
MAX_PATH_LENGTH = 2048
PATHS_PER_DAY = 2000         # paths named per zone and day ([analytics] paths_per_zone_day)
# The row of a zone's day that counts every path past its cap. No stored path starts with "/"
# (``_stored_path`` strips it), so no path's counts can land in it; reported as OTHER_REPORTED.
OTHER_PATH = "/"
OTHER_REPORTED = "(other)"
_IN_CHUNK = 500              # parameters per "IN (...)" look-up

SCHEMA = """
CREATE TABLE IF NOT EXISTS analytics_daily_zone (
    date TEXT NOT NULL,
    zone TEXT NOT NULL,
    hits INTEGER NOT NULL DEFAULT 0,
    bytes INTEGER NOT NULL DEFAULT 0,
    cache_hit INTEGER NOT NULL DEFAULT 0,
    cache_miss INTEGER NOT NULL DEFAULT 0,
    cache_stale INTEGER NOT NULL DEFAULT 0,
    cache_bypass INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (date, zone)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS analytics_daily_path (
    date TEXT NOT NULL,
    zone TEXT NOT NULL,
    path TEXT NOT NULL,
    requests INTEGER NOT NULL DEFAULT 0,
    bytes INTEGER NOT NULL DEFAULT 0,
    deliveries INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (date, zone, path)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS analytics_daily_path_by_path ON analytics_daily_path (path, date);
CREATE TABLE IF NOT EXISTS analytics_daily_country (
    date TEXT NOT NULL,
    zone TEXT NOT NULL,
    country TEXT NOT NULL,
    requests INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (date, zone, country)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS analytics_daily_error (
    date TEXT NOT NULL,
    zone TEXT NOT NULL,
    status INTEGER NOT NULL,
    path TEXT NOT NULL,
    count INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (date, zone, status, path)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS analytics_daily_error_by_path ON analytics_daily_error (path, date);
CREATE TABLE IF NOT EXISTS analytics_batches (
    batch TEXT PRIMARY KEY,
    received_at REAL NOT NULL
) WITHOUT ROWID;
"""

TABLES = ("analytics_daily_zone", "analytics_daily_path", "analytics_daily_country", "analytics_daily_error")



def _add(column: str) -> str:
    """``column + excluded.column``, saturating at COUNTER_MAX. The excluded value is at most
    COUNTER_MAX, so the subtraction cannot overflow; a stored value past the cap (an older version's
    row) is brought back to it."""
    return (f"{column} = CASE WHEN {column} > {COUNTER_MAX} - excluded.{column} THEN {COUNTER_MAX} "
            f"ELSE {column} + excluded.{column} END")


_UPSERT_ZONE = f"""
INSERT INTO analytics_daily_zone (date, zone, hits, bytes, cache_hit, cache_miss, cache_stale, cache_bypass)
VALUES (?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (date, zone) DO UPDATE SET
    {_add("hits")}, {_add("bytes")}, {_add("cache_hit")}, {_add("cache_miss")}, {_add("cache_stale")},
    {_add("cache_bypass")}
"""
_UPSERT_PATH = f"""
INSERT INTO analytics_daily_path (date, zone, path, requests, bytes, deliveries) VALUES (?, ?, ?, ?, ?, ?)
ON CONFLICT (date, zone, path) DO UPDATE SET {_add("requests")}, {_add("bytes")}, {_add("deliveries")}
"""
_UPSERT_COUNTRY = f"""
INSERT INTO analytics_daily_country (date, zone, country, requests) VALUES (?, ?, ?, ?)
ON CONFLICT (date, zone, country) DO UPDATE SET {_add("requests")}
"""
_UPSERT_ERROR = f"""
INSERT INTO analytics_daily_error (date, zone, status, path, count) VALUES (?, ?, ?, ?, ?)
ON CONFLICT (date, zone, status, path) DO UPDATE SET {_add("count")}
"""
# Tables written before top assets counted deliveries only: add the column and estimate it as the
# path's requests minus its recorded errors (API paths deliver no asset).
_ADD_DELIVERIES = [
    "ALTER TABLE analytics_daily_path ADD COLUMN deliveries INTEGER NOT NULL DEFAULT 0",
    "UPDATE analytics_daily_path AS p SET deliveries = MAX(p.requests - COALESCE((SELECT TOTAL(e.count) "
    "FROM analytics_daily_error AS e WHERE e.date = p.date AND e.zone = p.zone AND e.path = p.path), 0), 0) "
    "WHERE p.path NOT LIKE 'api/%'",
]

_CACHE_COLUMN = {result.value: column for column, result in enumerate(COUNTED)}


def utc_day(timestamp: float) -> date:
    return datetime.fromtimestamp(timestamp, UTC).date()


def counter(value: float | int | None) -> int:
    """A stored or summed counter as reported: an int in 0..COUNTER_MAX (``TOTAL`` returns a float,
    exact below 2**53)."""
    if value is None:
        return 0
    if isinstance(value, float) and not math.isfinite(value):
        return COUNTER_MAX if value > 0 else 0
    return max(0, min(int(value), COUNTER_MAX))


def _saturated(value: int) -> int:
    return min(value, COUNTER_MAX)


def hit_rate(hits: int, total: int) -> str:
    return f"{(100.0 * hits / total) if total else 0.0:.1f}%"


def _report_path(path: str) -> str:
    return OTHER_REPORTED if path == OTHER_PATH else "/" + path


def _stored_path(path: str) -> str:
    return path.lstrip("/")[:MAX_PATH_LENGTH]


class _Period:
    """The UTC days of a report, oldest first, and the SQL filter for them (and a zone)."""

    def __init__(self, days: int, now: float | None, zone: str | None = None) -> None:
        today = utc_day(time.time() if now is None else now)
        self.days = days
        self.dates = [(today - timedelta(days=offset)).isoformat() for offset in range(days - 1, -1, -1)]
        self.zone = zone or None
        where = "date BETWEEN ? AND ?"
        params: list[Any] = [self.dates[0], self.dates[-1]]
        if self.zone is not None:
            where += " AND zone = ?"
            params.append(self.zone)
        self.where = where
        self.params = tuple(params)


class DailyCounts:
    """What one write adds to the daily counters, keyed as the tables are: built from single hits
    (``add_hit``) or from an edge's rollups (``add_zone``, ``add_path``, ``add_country``), so a write's
    work grows with its distinct keys, not with the hits they count."""

    __slots__ = ("zones", "paths", "countries", "errors")

    def __init__(self) -> None:
        # (date, zone) -> hits, bytes, HIT, MISS, STALE, BYPASS
        self.zones: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0, 0, 0, 0, 0])
        # (date, zone, path) -> requests, bytes, asset deliveries
        self.paths: dict[tuple[str, str, str], list[int]] = defaultdict(lambda: [0, 0, 0])
        self.countries: dict[tuple[str, str, str], int] = defaultdict(int)
        self.errors: dict[tuple[str, str, int, str], int] = defaultdict(int)

    def __bool__(self) -> bool:
        return bool(self.zones or self.paths or self.countries)

    def add_zone(self, day: str, zone: str, cache: str, requests: int, size: int) -> None:
        counters = self.zones[(day, zone)]
        counters[0] += requests
        counters[1] += size
        counters[2 + _CACHE_COLUMN.get(cache, 1)] += requests

    def add_path(self, day: str, zone: str, path: str | None, status: int, requests: int, size: int) -> None:
        """``path`` None: the zone's "other" row, paths not named (an edge's own cap)."""
        stored = OTHER_PATH if path is None else _stored_path(path)
        counters = self.paths[(day, zone, stored)]
        counters[0] += requests
        counters[1] += size
        if path is not None and is_asset_delivery(status, stored):
            counters[2] += requests
        if status >= 400:
            self.errors[(day, zone, status, stored)] += requests

    def in_zones(self, zones: Collection[str]) -> DailyCounts:
        """These counts with every zone not in ``zones`` as ``UNKNOWN_ZONE``, whose paths are all "other"."""
        if all(zone in zones for _, zone in self.zones) and all(zone in zones for _, zone, _ in self.paths) \
                and all(zone in zones for _, zone, _ in self.countries):
            return self
        counts = DailyCounts()
        for (day, zone), values in self.zones.items():
            counters = counts.zones[(day, zone if zone in zones else UNKNOWN_ZONE)]
            for index, value in enumerate(values):
                counters[index] += value
        for (day, zone, path), values in self.paths.items():
            known = zone in zones
            counters = counts.paths[(day, zone, path) if known else (day, UNKNOWN_ZONE, OTHER_PATH)]
            counters[0] += values[0]
            counters[1] += values[1]
            counters[2] += values[2] if known else 0
        for (day, zone, country), count in self.countries.items():
            counts.countries[(day, zone if zone in zones else UNKNOWN_ZONE, country)] += count
        for (day, zone, status, path), count in self.errors.items():
            key = (day, zone, status, path) if zone in zones else (day, UNKNOWN_ZONE, status, OTHER_PATH)
            counts.errors[key] += count
        return counts

    def fold_paths(self, day: str, zone: str, paths: Collection[str]) -> None:
        """Count ``paths`` of a zone's day (and their errors) in its "other" row."""
        other = self.paths[(day, zone, OTHER_PATH)]
        for path in paths:
            values = self.paths.pop((day, zone, path))
            other[0] += values[0]
            other[1] += values[1]
        for key in [key for key in self.errors if key[0] == day and key[1] == zone and key[3] in paths]:
            self.errors[(day, zone, key[2], OTHER_PATH)] += self.errors.pop(key)

    def fold_errors(self, day: str, zone: str, keys: Iterable[tuple[int, str]]) -> None:
        """Count the (status, path) error rows ``keys`` of a zone's day in its "other" row of that status."""
        for status, path in keys:
            self.errors[(day, zone, status, OTHER_PATH)] += self.errors.pop((day, zone, status, path))

    def add_country(self, day: str, zone: str, country: str, requests: int) -> None:
        country = country.upper() if len(country) == 2 and country.isalpha() else UNKNOWN_COUNTRY
        self.countries[(day, zone, country)] += requests

    def merge(self, other: DailyCounts) -> None:
        for zone_key, values in other.zones.items():
            counters = self.zones[zone_key]
            for index, value in enumerate(values):
                counters[index] += value
        for path_key, values in other.paths.items():
            counters = self.paths[path_key]
            for index, value in enumerate(values):
                counters[index] += value
        for country_key, count in other.countries.items():
            self.countries[country_key] += count
        for error_key, count in other.errors.items():
            self.errors[error_key] += count

    def add_hit(self, hit: Hit) -> None:
        day = utc_day(hit.timestamp).isoformat()
        size = max(0, min(int(hit.bytes), MAX_HIT_BYTES))  # callers validate; the store clamps anyway
        self.add_zone(day, hit.zone, hit.cache.upper(), 1, size)
        self.add_path(day, hit.zone, hit.path, hit.status, 1, size)
        self.add_country(day, hit.zone, hit.country, 1)


def _zone_filter(zone: str | None) -> str | None:
    """``None``, ``""`` and ``"all"`` mean every zone (``all`` is what Period.Zone reports for them)."""
    return None if zone in (None, "", "all") else zone


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
            for statement in _ADD_DELIVERIES:
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
                await tx.executemany(_UPSERT_ZONE, [(*key, *map(_saturated, values))
                                                    for key, values in total.zones.items()])
            if total.paths:
                await tx.executemany(_UPSERT_PATH, [(*key, *map(_saturated, values))
                                                    for key, values in total.paths.items()])
            if total.countries:
                await tx.executemany(_UPSERT_COUNTRY, [(*key, _saturated(count))
                                                       for key, count in total.countries.items()])
            if total.errors:
                await tx.executemany(_UPSERT_ERROR, [(*key, _saturated(count))
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

    # -- reads ------------------------------------------------------------------------------------

    async def _rows(self, sql: str, params: Iterable[Any]) -> list[tuple[Any, ...]]:
        return [tuple(row) for row in await self.db.fetch(sql, tuple(params))]

    async def _totals(self, period: _Period) -> tuple[int, int, int]:
        (requests, size, cached), = await self._rows(
            "SELECT TOTAL(hits), TOTAL(bytes), TOTAL(cache_hit) + TOTAL(cache_stale) "
            f"FROM analytics_daily_zone WHERE {period.where}", period.params)
        return counter(requests), counter(size), counter(cached)

    async def _daily_totals(self, period: _Period) -> dict[str, tuple[int, int, int, int]]:
        """Per date: requests, bytes, served from cache (HIT, STALE), not (MISS, BYPASS)."""
        rows = await self._rows(
            "SELECT date, TOTAL(hits), TOTAL(bytes), TOTAL(cache_hit) + TOTAL(cache_stale), "
            f"TOTAL(cache_miss) + TOTAL(cache_bypass) FROM analytics_daily_zone WHERE {period.where} "
            "GROUP BY date", period.params)
        return {row[0]: (counter(row[1]), counter(row[2]), counter(row[3]), counter(row[4])) for row in rows}

    async def _countries(self, period: _Period) -> list[dict[str, Any]]:
        rows = await self._rows(
            f"SELECT country, TOTAL(requests) AS n FROM analytics_daily_country WHERE {period.where} "
            "GROUP BY country ORDER BY n DESC, country", period.params)
        return [{"CountryCode": country, "Requests": counter(count)} for country, count in rows]

    async def _top_paths(self, period: _Period, limit: int) -> list[dict[str, Any]]:
        rows = await self._rows(
            f"SELECT path, TOTAL(deliveries) AS n FROM analytics_daily_path WHERE {period.where} "
            "AND deliveries > 0 GROUP BY path ORDER BY n DESC, path LIMIT ?", (*period.params, limit))
        return [{"Path": _report_path(path), "Requests": counter(count)} for path, count in rows]

    @staticmethod
    def _unique_countries(countries: list[dict[str, Any]]) -> int:
        return sum(1 for entry in countries if entry["CountryCode"] != UNKNOWN_COUNTRY)

    async def statistics(self, days: int, zone: str | None = None, *, now: float | None = None) -> dict[str, Any]:
        """StatisticsResponse without DateFetched. Daily lists every day of the period, newest first."""
        days = max(1, min(days, DAYS_MAXIMUM))
        period = _Period(days, now, _zone_filter(zone))
        requests, size, cached = await self._totals(period)
        countries = await self._countries(period)
        by_date = await self._daily_totals(period)
        daily = []
        for day in reversed(period.dates):
            hits, day_bytes, day_cached, day_missed = by_date.get(day, (0, 0, 0, 0))
            daily.append({"Date": day, "TotalRequests": hits, "Bandwidth": day_bytes,
                          "BandwidthHuman": human_size(day_bytes), "CacheHit": day_cached, "CacheMiss": day_missed})
        return {
            "Period": {"Days": days, "Zone": period.zone or "all"},
            "Summary": {
                "TotalRequests": requests,
                "TotalBandwidth": size,
                "TotalBandwidthHuman": human_size(size),
                "CacheHitRate": hit_rate(cached, requests),
                "UniqueCountries": self._unique_countries(countries),
            },
            "Daily": daily,
            "TopAssets": await self._top_paths(period, STATISTICS_TOP_ASSETS),
            "GeoDistribution": countries,
        }

    async def insights_summary(self, days: int, zone: str | None = None, *, now: float | None = None) -> dict[str, Any]:
        """InsightsSummaryResponse without DateFetched."""
        days = max(1, min(days, DAYS_MAXIMUM))
        period = _Period(days, now, _zone_filter(zone))
        requests, size, cached = await self._totals(period)
        countries = await self._countries(period)
        return {
            "Period": {"Days": days, "Zone": period.zone or "all"},
            "TotalRequests": requests,
            "TotalBandwidth": human_size(size),
            "TotalBandwidthBytes": size,
            "CacheHitRate": hit_rate(cached, requests),
            "UniqueCountries": self._unique_countries(countries),
        }

    async def top_assets(self, days: int, limit: int, zone: str | None = None, *,
                         now: float | None = None) -> dict[str, Any]:
        """TopAssetsResponse without DateFetched: asset deliveries per path, most first."""
        days = max(1, min(days, DAYS_MAXIMUM))
        period = _Period(days, now, _zone_filter(zone))
        return {"Period": {"Days": days}, "Assets": await self._top_paths(period, max(1, limit))}

    async def geography(self, days: int, zone: str | None = None, *, now: float | None = None) -> dict[str, Any]:
        """GeographyResponse without DateFetched: requests per country, descending."""
        days = max(1, min(days, DAYS_MAXIMUM))
        period = _Period(days, now, _zone_filter(zone))
        return {"Period": {"Days": days}, "Countries": await self._countries(period)}

    async def errors(self, days: int, zone: str | None = None, *, now: float | None = None) -> dict[str, Any]:
        """ErrorsResponse without DateFetched: per status (most frequent first) the top 10 paths."""
        days = max(1, min(days, DAYS_MAXIMUM))
        period = _Period(days, now, _zone_filter(zone))
        groups = {status: {"StatusCode": status, "Count": counter(total), "TopPaths": []}
                  for status, total in await self._rows(
                      f"SELECT status, TOTAL(count) FROM analytics_daily_error WHERE {period.where} GROUP BY status",
                      period.params)}
        # Only the top paths of each status leave SQLite, however many paths the period holds.
        for status, path, total in await self._rows(
                "SELECT status, path, n FROM (SELECT status, path, TOTAL(count) AS n, ROW_NUMBER() OVER "
                "(PARTITION BY status ORDER BY TOTAL(count) DESC, path) AS rank FROM analytics_daily_error "
                f"WHERE {period.where} GROUP BY status, path) WHERE rank <= ? ORDER BY status, rank",
                (*period.params, ERROR_TOP_PATHS)):
            groups[status]["TopPaths"].append({"Path": _report_path(path), "Count": counter(total)})
        report: dict[str, Any] = {
            "Period": {"Days": days},
            "Errors": sorted(groups.values(), key=lambda g: (-g["Count"], g["StatusCode"])),
        }
        if not groups:
            report["Note"] = "No 4xx or 5xx responses were recorded in this period."
        return report

    async def asset_report(self, path: str, days: int, *, now: float | None = None) -> dict[str, Any]:
        """AssetInsightsResponse without DateFetched; ``/p`` and ``p`` name the same asset. Daily is
        newest first."""
        days = max(1, min(days, DAYS_MAXIMUM))
        period = _Period(days, now)
        stored = _stored_path(path)
        params = (*period.params, stored)
        requests = {day: counter(total) for day, total in await self._rows(
            f"SELECT date, TOTAL(requests) FROM analytics_daily_path WHERE {period.where} AND path = ? "
            "GROUP BY date", params)}
        daily_errors: dict[str, dict[str, int]] = defaultdict(dict)
        totals: dict[str, int] = {}
        for day, status, total in await self._rows(
                f"SELECT date, status, TOTAL(count) FROM analytics_daily_error WHERE {period.where} AND path = ? "
                "GROUP BY date, status ORDER BY date, status", params):
            count = counter(total)
            daily_errors[day][str(status)] = count
            totals[str(status)] = _saturated(totals.get(str(status), 0) + count)
        return {
            "Path": _report_path(stored),
            "Period": {"Days": days},
            "TotalRequests": _saturated(sum(requests.values())),
            "Errors": dict(sorted(totals.items())),
            "Daily": [{"Date": day, "Requests": requests.get(day, 0), "Errors": daily_errors.get(day, {})}
                      for day in reversed(period.dates)],
        }

    async def analytics_report(self, days: int, *, now: float | None = None) -> dict[str, Any]:
        """AnalyticsReportResponse for GET /api/analytics: every day, newest first (as the original
        service walks back from today), at most 35 days back; top 100 asset paths per day."""
        days = max(1, min(days, ANALYTICS_DAYS_MAXIMUM, ANALYTICS_RETENTION_DAYS))
        period = _Period(days, now)
        totals = await self._daily_totals(period)
        top: dict[str, dict[str, int]] = defaultdict(dict)
        for day, path, count in await self._rows(
                "SELECT date, path, n FROM (SELECT date, path, TOTAL(deliveries) AS n, ROW_NUMBER() OVER "
                "(PARTITION BY date ORDER BY TOTAL(deliveries) DESC, path) AS rank "
                f"FROM analytics_daily_path WHERE {period.where} AND deliveries > 0 GROUP BY date, path) "
                "WHERE rank <= ? ORDER BY date, rank", (*period.params, ANALYTICS_TOP_ASSETS)):
            top[day][_report_path(path)] = counter(count)
        geo: dict[str, dict[str, int]] = defaultdict(dict)
        for day, country, count in await self._rows(
                f"SELECT date, country, TOTAL(requests) AS n FROM analytics_daily_country WHERE {period.where} "
                "GROUP BY date, country ORDER BY date, n DESC, country", period.params):
            geo[day][country] = counter(count)
        data = []
        for day in reversed(period.dates):
            hits, size, cached, missed = totals.get(day, (0, 0, 0, 0))
            data.append({
                "date": day,
                "hits": hits,
                "bandwidth": {"bytes": size, "human": human_size(size)},
                "top_assets": top.get(day, {}),
                "geo": geo.get(day, {}),
                "cache": {"hit": cached, "miss": missed, "ratio": hit_rate(cached, _saturated(cached + missed))},
            })
        return {"days": days, "data": data}
