"""How analytics counters are stored: the daily tables, their saturating UPSERTs, and the path and
number forms every writer and report share."""

from __future__ import annotations

import math
from datetime import UTC, date, datetime

from assetcdn.control.analytics.hits import COUNTER_MAX
from assetcdn.shared.analytics_keys import MAX_PATH_LENGTH
from assetcdn.shared.cache_results import COUNTED

RETENTION_DAYS = 90
ANALYTICS_RETENTION_DAYS = 35
# The row of a zone's day that counts every path past its cap. No stored path starts with "/"
# (``stored_path`` strips it), so no path's counts can land in it; reported as OTHER_REPORTED.
OTHER_PATH = "/"
OTHER_REPORTED = "(other)"

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


UPSERT_ZONE = f"""
INSERT INTO analytics_daily_zone (date, zone, hits, bytes, cache_hit, cache_miss, cache_stale, cache_bypass)
VALUES (?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (date, zone) DO UPDATE SET
    {_add("hits")}, {_add("bytes")}, {_add("cache_hit")}, {_add("cache_miss")}, {_add("cache_stale")},
    {_add("cache_bypass")}
"""
UPSERT_PATH = f"""
INSERT INTO analytics_daily_path (date, zone, path, requests, bytes, deliveries) VALUES (?, ?, ?, ?, ?, ?)
ON CONFLICT (date, zone, path) DO UPDATE SET {_add("requests")}, {_add("bytes")}, {_add("deliveries")}
"""
UPSERT_COUNTRY = f"""
INSERT INTO analytics_daily_country (date, zone, country, requests) VALUES (?, ?, ?, ?)
ON CONFLICT (date, zone, country) DO UPDATE SET {_add("requests")}
"""
UPSERT_ERROR = f"""
INSERT INTO analytics_daily_error (date, zone, status, path, count) VALUES (?, ?, ?, ?, ?)
ON CONFLICT (date, zone, status, path) DO UPDATE SET {_add("count")}
"""
# Tables written before top assets counted deliveries only: add the column and estimate it as the
# path's requests minus its recorded errors (API paths deliver no asset).
ADD_DELIVERIES = [
    "ALTER TABLE analytics_daily_path ADD COLUMN deliveries INTEGER NOT NULL DEFAULT 0",
    "UPDATE analytics_daily_path AS p SET deliveries = MAX(p.requests - COALESCE((SELECT TOTAL(e.count) "
    "FROM analytics_daily_error AS e WHERE e.date = p.date AND e.zone = p.zone AND e.path = p.path), 0), 0) "
    "WHERE p.path NOT LIKE 'api/%'",
]

CACHE_COLUMN = {result.value: column for column, result in enumerate(COUNTED)}


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


def saturated(value: int) -> int:
    return min(value, COUNTER_MAX)


def hit_rate(hits: int, total: int) -> str:
    """`hits` of `total` as a percentage with one decimal, the nearest (a half up); but a share short of all reads at
    most 99.9% and one above none at least 0.1%: 1,999 of 2,000 rounded to 100.0%, and the misses vanished."""
    if total <= 0:
        return "0.0%"
    tenths = (2000 * hits + total) // (2 * total)
    tenths = min(max(tenths, 1 if hits > 0 else 0), 999 if hits < total else 1000)
    return f"{tenths // 10}.{tenths % 10}%"


def report_path(path: str) -> str:
    return OTHER_REPORTED if path == OTHER_PATH else "/" + path


def stored_path(path: str) -> str:
    return path.lstrip("/")[:MAX_PATH_LENGTH]
