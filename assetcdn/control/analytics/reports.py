"""The reports of statistics, insights and /api/analytics, read from the daily counters.

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

import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from datetime import timedelta
from typing import Any

from assetcdn.control.analytics.params import ANALYTICS_DAYS_MAXIMUM, DAYS_MAXIMUM
from assetcdn.control.analytics.tables import (
    ANALYTICS_RETENTION_DAYS,
    counter,
    hit_rate,
    report_path,
    saturated,
    stored_path,
    utc_day,
)
from assetcdn.control.storage.database import Database
from assetcdn.shared.analytics_keys import UNKNOWN_COUNTRY
from assetcdn.shared.manifest import human_size

STATISTICS_TOP_ASSETS = 10
ERROR_TOP_PATHS = 10
ANALYTICS_TOP_ASSETS = 100   # per day, as the original service's `analytics:top:<date>` kept


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


def _zone_filter(zone: str | None) -> str | None:
    """``None``, ``""`` and ``"all"`` mean every zone (``all`` is what Period.Zone reports for them)."""
    return None if zone in (None, "", "all") else zone


class AnalyticsReports:
    """The report builders, over the database the store writes (``db`` gives it once open)."""

    def __init__(self, db: Callable[[], Database]) -> None:
        self._db = db


    async def _rows(self, sql: str, params: Iterable[Any]) -> list[tuple[Any, ...]]:
        return [tuple(row) for row in await self._db().fetch(sql, tuple(params))]

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
        return [{"Path": report_path(path), "Requests": counter(count)} for path, count in rows]

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
            groups[status]["TopPaths"].append({"Path": report_path(path), "Count": counter(total)})
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
        stored = stored_path(path)
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
            totals[str(status)] = saturated(totals.get(str(status), 0) + count)
        return {
            "Path": report_path(stored),
            "Period": {"Days": days},
            "TotalRequests": saturated(sum(requests.values())),
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
            top[day][report_path(path)] = counter(count)
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
                "cache": {"hit": cached, "miss": missed, "ratio": hit_rate(cached, saturated(cached + missed))},
            })
        return {"days": days, "data": data}
