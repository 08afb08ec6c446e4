"""AnalyticsStore against a real SQLite file: multi-day counters, report shapes, zone filter, pruning."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import aiosqlite
import pytest

from assetcdn.control.analytics.hits import (
    COUNTER_MAX,
    MAX_HIT_BYTES,
    Hit,
    hit_from_track_body,
    is_asset_delivery,
)
from assetcdn.control.analytics.params import parse_days, parse_limit
from assetcdn.control.analytics.store import AnalyticsStore
from assetcdn.control.analytics.tables import hit_rate
from assetcdn.shared.analytics_keys import zone_of
from assetcdn.shared.errors import LegacyError

# "Today" of these tests: 2026-04-10 12:00 UTC.
NOW = datetime(2026, 4, 10, 12, 0, tzinfo=UTC).timestamp()
DAY = 86400.0


def hit(path: str, *, days_ago: int = 0, status: int = 200, size: int = 100, cache: str = "HIT",
        country: str = "US") -> Hit:
    return Hit(timestamp=NOW - days_ago * DAY, path=path, zone=zone_of(path), status=status,
               bytes=size, cache=cache, country=country)  # type: ignore[arg-type]


LOGO = "akande/v1/logos/logo.svg"
BANNER = "akande/v1/banners/hero.png"
OTHER = "brand/v1/logos/brand.svg"


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[AnalyticsStore]:
    analytics = AnalyticsStore(tmp_path / "data" / "control.sqlite")
    await analytics.open()
    yield analytics
    await analytics.close()


@pytest.fixture
async def filled(store: AnalyticsStore) -> AnalyticsStore:
    await store.record_hits([
        # today: 4 hits on akande, 1 on brand
        hit(LOGO, size=1000),
        hit(LOGO, size=1000, cache="MISS", country="DE"),
        hit(LOGO, size=1000, cache="STALE"),
        hit(BANNER, size=2000, status=404, cache="BYPASS", country="XX"),
        hit(OTHER, size=500, country="FR"),
    ])
    await store.record_hits([
        # two days ago
        hit(LOGO, days_ago=2, size=1000, country="DE"),
        hit(BANNER, days_ago=2, size=10, status=404, cache="MISS"),
        hit(BANNER, days_ago=2, size=10, status=500, cache="MISS"),
        hit(OTHER, days_ago=2, status=404, cache="MISS", country="FR"),
        # outside a 7-day window
        hit(LOGO, days_ago=10, size=99999),
    ])
    return store


async def test_schema_uses_prefixed_tables_and_wal(store: AnalyticsStore, tmp_path: Path) -> None:
    async with aiosqlite.connect(tmp_path / "data" / "control.sqlite") as db:
        names = [row[0] for row in await db.execute_fetchall("SELECT name FROM sqlite_master WHERE type='table'")]
        mode = (await db.execute_fetchall("PRAGMA journal_mode"))[0][0]
    assert names and all(name.startswith("analytics_") for name in names)
    assert mode == "wal"


async def test_statistics_all_zones(filled: AnalyticsStore) -> None:
    report = await filled.reports.statistics(7, now=NOW)
    assert report["Period"] == {"Days": 7, "Zone": "all"}
    assert report["Summary"] == {
        "TotalRequests": 9,
        "TotalBandwidth": 1000 * 4 + 2000 + 500 + 10 + 10 + 100,
        "TotalBandwidthHuman": "6.5 KB",
        "CacheHitRate": "44.4%",   # HIT, STALE and HIT today, one HIT two days ago: 4 of 9
        "UniqueCountries": 3,
    }
    daily = report["Daily"]
    assert [d["Date"] for d in daily] == [f"2026-04-{n:02d}" for n in range(10, 3, -1)]  # newest first
    assert daily[0] == {"Date": "2026-04-10", "TotalRequests": 5, "Bandwidth": 5500,
                        "BandwidthHuman": "5.4 KB", "CacheHit": 3, "CacheMiss": 2}
    assert daily[2] == {"Date": "2026-04-08", "TotalRequests": 4, "Bandwidth": 1120,
                        "BandwidthHuman": "1.1 KB", "CacheHit": 1, "CacheMiss": 3}
    assert daily[-1] == {"Date": "2026-04-04", "TotalRequests": 0, "Bandwidth": 0,
                         "BandwidthHuman": "0 B", "CacheHit": 0, "CacheMiss": 0}
    # Top assets count deliveries only: BANNER only ever answered errors, OTHER once 404.
    assert report["TopAssets"] == [
        {"Path": "/" + LOGO, "Requests": 4},
        {"Path": "/" + OTHER, "Requests": 1},
    ]
    assert report["GeoDistribution"] == [
        {"CountryCode": "US", "Requests": 4},
        {"CountryCode": "DE", "Requests": 2},
        {"CountryCode": "FR", "Requests": 2},
        {"CountryCode": "XX", "Requests": 1},
    ]


async def test_statistics_zone_filter_and_wider_window(filled: AnalyticsStore) -> None:
    report = await filled.reports.statistics(30, "brand", now=NOW)
    assert report["Period"] == {"Days": 30, "Zone": "brand"}
    assert report["Summary"]["TotalRequests"] == 2
    assert report["Summary"]["CacheHitRate"] == "50.0%"
    assert report["TopAssets"] == [{"Path": "/" + OTHER, "Requests": 1}]
    assert report["GeoDistribution"] == [{"CountryCode": "FR", "Requests": 2}]
    assert len(report["Daily"]) == 30
    wide = await filled.reports.statistics(11, "akande", now=NOW)
    assert wide["Summary"]["TotalRequests"] == 8
    assert wide["Summary"]["TotalBandwidth"] == 3000 + 2000 + 1000 + 20 + 99999
    assert (await filled.reports.statistics(7, "all", now=NOW))["Period"]["Zone"] == "all"


async def test_statistics_empty_store(store: AnalyticsStore) -> None:
    report = await store.reports.statistics(1, now=NOW)
    assert report["Summary"] == {"TotalRequests": 0, "TotalBandwidth": 0, "TotalBandwidthHuman": "0 B",
                                 "CacheHitRate": "0.0%", "UniqueCountries": 0}
    assert report["Daily"] == [{"Date": "2026-04-10", "TotalRequests": 0, "Bandwidth": 0,
                                "BandwidthHuman": "0 B", "CacheHit": 0, "CacheMiss": 0}]
    assert report["TopAssets"] == [] and report["GeoDistribution"] == []


async def test_insights_summary(filled: AnalyticsStore) -> None:
    assert await filled.reports.insights_summary(1, "akande", now=NOW) == {
        "Period": {"Days": 1, "Zone": "akande"},
        "TotalRequests": 4,
        "TotalBandwidth": "4.9 KB",
        "TotalBandwidthBytes": 5000,
        "CacheHitRate": "50.0%",
        "UniqueCountries": 2,
    }


async def test_top_assets_limit_and_zone(filled: AnalyticsStore) -> None:
    assert await filled.reports.top_assets(7, 2, now=NOW) == {
        "Period": {"Days": 7},
        "Assets": [{"Path": "/" + LOGO, "Requests": 4}, {"Path": "/" + OTHER, "Requests": 1}],
    }
    assert (await filled.reports.top_assets(7, 20, "brand", now=NOW))["Assets"] == [{"Path": "/" + OTHER, "Requests": 1}]


async def test_geography(filled: AnalyticsStore) -> None:
    assert await filled.reports.geography(1, "akande", now=NOW) == {
        "Period": {"Days": 1},
        "Countries": [{"CountryCode": "US", "Requests": 2}, {"CountryCode": "DE", "Requests": 1},
                      {"CountryCode": "XX", "Requests": 1}],
    }


async def test_errors_grouped_by_status(filled: AnalyticsStore) -> None:
    assert await filled.reports.errors(7, now=NOW) == {
        "Period": {"Days": 7},
        "Errors": [
            {"StatusCode": 404, "Count": 3, "TopPaths": [{"Path": "/" + BANNER, "Count": 2},
                                                         {"Path": "/" + OTHER, "Count": 1}]},
            {"StatusCode": 500, "Count": 1, "TopPaths": [{"Path": "/" + BANNER, "Count": 1}]},
        ],
    }
    empty = await filled.reports.errors(7, "nobody", now=NOW)
    assert empty["Errors"] == [] and "Note" in empty


async def test_errors_keep_ten_paths_per_status(store: AnalyticsStore) -> None:
    await store.record_hits([hit(f"z1/v1/logos/{i:02d}.svg", status=404) for i in range(12) for _ in range(i + 1)])
    report = await store.reports.errors(1, now=NOW)
    (group,) = report["Errors"]
    assert group["Count"] == sum(range(1, 13))
    assert [p["Path"] for p in group["TopPaths"]] == [f"/z1/v1/logos/{i:02d}.svg" for i in range(11, 1, -1)]


async def test_asset_report_with_and_without_slash(filled: AnalyticsStore) -> None:
    report = await filled.reports.asset_report("/" + BANNER, 3, now=NOW)
    assert report == {
        "Path": "/" + BANNER,
        "Period": {"Days": 3},
        "TotalRequests": 3,
        "Errors": {"404": 2, "500": 1},
        "Daily": [  # newest first, like statistics and /api/analytics
            {"Date": "2026-04-10", "Requests": 1, "Errors": {"404": 1}},
            {"Date": "2026-04-09", "Requests": 0, "Errors": {}},
            {"Date": "2026-04-08", "Requests": 2, "Errors": {"404": 1, "500": 1}},
        ],
    }
    assert await filled.reports.asset_report(BANNER, 3, now=NOW) == report
    assert (await filled.reports.asset_report("nothing/here.svg", 2, now=NOW))["TotalRequests"] == 0


async def test_analytics_report_shape(filled: AnalyticsStore) -> None:
    report = await filled.reports.analytics_report(3, now=NOW)
    assert report["days"] == 3
    assert [d["date"] for d in report["data"]] == ["2026-04-10", "2026-04-09", "2026-04-08"]
    assert report["data"][0] == {
        "date": "2026-04-10",
        "hits": 5,
        "bandwidth": {"bytes": 5500, "human": "5.4 KB"},
        "top_assets": {"/" + LOGO: 3, "/" + OTHER: 1},  # BANNER's 404 delivered nothing
        "geo": {"US": 2, "DE": 1, "FR": 1, "XX": 1},
        "cache": {"hit": 3, "miss": 2, "ratio": "60.0%"},
    }
    assert report["data"][1] == {"date": "2026-04-09", "hits": 0, "bandwidth": {"bytes": 0, "human": "0 B"},
                                 "top_assets": {}, "geo": {}, "cache": {"hit": 0, "miss": 0, "ratio": "0.0%"}}


async def test_analytics_report_reads_at_most_35_days(store: AnalyticsStore) -> None:
    await store.record_hits([hit(LOGO, days_ago=31), hit(LOGO, days_ago=40)])
    report = await store.reports.analytics_report(90, now=NOW)
    assert report["days"] == 30
    assert sum(d["hits"] for d in report["data"]) == 0
    # Statistics still see both (90-day retention).
    assert (await store.reports.statistics(90, now=NOW))["Summary"]["TotalRequests"] == 2


async def test_batches_accumulate(store: AnalyticsStore) -> None:
    for _ in range(3):
        await store.record_hits([hit(LOGO, size=10), hit(LOGO, size=10, status=404)])
    await store.record_hits([])
    report = await store.reports.statistics(1, now=NOW)
    assert report["Summary"]["TotalRequests"] == 6
    assert report["Summary"]["TotalBandwidth"] == 60
    assert (await store.reports.errors(1, now=NOW))["Errors"][0]["Count"] == 3


async def test_utc_day_boundary(store: AnalyticsStore) -> None:
    midnight = datetime(2026, 4, 10, 0, 0, tzinfo=UTC).timestamp()
    await store.record_hits([
        Hit(midnight - 1, LOGO, "akande", 200, 1, "HIT", "US"),
        Hit(midnight, LOGO, "akande", 200, 1, "HIT", "US"),
    ])
    daily = (await store.reports.statistics(2, now=NOW))["Daily"]
    assert [(d["Date"], d["TotalRequests"]) for d in daily] == [("2026-04-10", 1), ("2026-04-09", 1)]


async def test_prune_keeps_ninety_days(store: AnalyticsStore) -> None:
    await store.record_hits([
        hit(LOGO, days_ago=89, status=404), hit(LOGO, days_ago=90, status=404), hit(LOGO, days_ago=200),
    ])
    removed = await store.prune(NOW)
    # Two old days, each with a zone, path and country row, plus one error row.
    assert removed == 2 * 3 + 1
    report = await store.reports.statistics(90, now=NOW)
    assert report["Summary"]["TotalRequests"] == 1
    assert (await store.reports.errors(90, now=NOW))["Errors"][0]["Count"] == 1
    assert await store.prune(NOW) == 0


async def test_days_are_clamped_by_the_store(filled: AnalyticsStore) -> None:
    assert (await filled.reports.statistics(500, now=NOW))["Period"]["Days"] == 90
    assert len((await filled.reports.statistics(0, now=NOW))["Daily"]) == 1


async def test_store_must_be_open(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError):
        await AnalyticsStore(tmp_path / "x.sqlite").reports.statistics(7)


class TestParams:
    @pytest.mark.parametrize(("value", "expected"), [
        (None, 7), ("", 7), ("abc", 7), ("14", 14), (" 3 ", 3), ("7d", 7), ("0", 1), ("-5", 1),
        ("1000", 90), (30, 30), (True, 7), ("0" * 30 + "5", 5), ("9" * 5000, 90), ("-" + "9" * 5000, 1),
    ])
    def test_parse_days(self, value: object, expected: int) -> None:
        assert parse_days(value) == expected

    def test_parse_days_analytics_maximum(self) -> None:
        assert parse_days("31", maximum=30) == 30

    @pytest.mark.parametrize(("value", "expected"), [(None, 20), ("5", 5), ("500", 100), ("x", 20), ("0", 1)])
    def test_parse_limit(self, value: object, expected: int) -> None:
        assert parse_limit(value) == expected


class TestTrackBody:
    def test_defaults(self) -> None:
        got = hit_from_track_body({}, now=NOW)
        assert got == Hit(NOW, "", "", 200, 0, "MISS", "XX")

    def test_full_body(self) -> None:
        got = hit_from_track_body({"path": "/akande/v1/logos/logo.svg", "bytes": 4523, "country": "us",
                                   "cache": "hit"}, now=NOW)
        assert got == Hit(NOW, LOGO, "akande", 200, 4523, "HIT", "US")
        assert hit_from_track_body({"path": "stocks/images/a.svg"}, now=NOW).zone == "stocks"

    @pytest.mark.parametrize("body", [
        [], {"path": 3}, {"bytes": -1}, {"bytes": "1"}, {"country": "USA"}, {"cache": "WARM"}, {"status": 99},
    ])
    def test_bad_bodies(self, body: object) -> None:
        with pytest.raises(LegacyError) as caught:
            hit_from_track_body(body, now=NOW)
        assert caught.value.status == 400


async def test_concurrent_batches_do_not_interleave(store: AnalyticsStore) -> None:
    await asyncio.gather(*(store.record_hits([hit(LOGO, size=1)] * 5) for _ in range(20)))
    assert (await store.reports.statistics(1, now=NOW))["Summary"]["TotalRequests"] == 100


async def test_single_hits_arriving_together_share_one_write(store: AnalyticsStore,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    writes = []
    record_hits = store.record_hits

    async def counted(hits: list[Hit], batch_id: str | None = None) -> bool:
        writes.append(len(hits))
        return await record_hits(hits, batch_id)

    monkeypatch.setattr(store, "record_hits", counted)
    await asyncio.gather(*(store.record_hit(hit(LOGO, size=1)) for _ in range(100)))
    assert (await store.reports.statistics(1, now=NOW))["Summary"]["TotalRequests"] == 100
    assert sum(writes) == 100 and len(writes) <= 3  # POST /api/analytics under a flood: not one write per hit


async def test_two_stores_share_one_file(tmp_path: Path) -> None:
    first, second = AnalyticsStore(tmp_path / "db.sqlite"), AnalyticsStore(tmp_path / "db.sqlite")
    await first.open()
    await second.open()
    try:
        await first.record_hits([hit(LOGO)])
        await second.record_hits([hit(LOGO)])
        assert (await first.reports.statistics(1, now=NOW))["Summary"]["TotalRequests"] == 2
    finally:
        await first.close()
        await second.close()


async def test_rows_an_older_version_let_overflow_still_read_and_saturate(tmp_path: Path) -> None:
    path = tmp_path / "control.sqlite"
    store = AnalyticsStore(path)
    await store.open()
    # What the previous version could leave behind: counters at SQLite's limit, whose SUM overflowed,
    # and a REAL where its unchecked add overflowed.
    async with aiosqlite.connect(path) as db:
        await db.executemany(
            "INSERT INTO analytics_daily_zone (date, zone, hits, bytes, cache_hit) VALUES (?, ?, ?, ?, ?)",
            [("2026-04-10", "a", 2**63 - 1, 2**63 - 1, 2**63 - 1), ("2026-04-10", "b", 1, 2**63 - 1, 1),
             ("2026-04-09", "a", 1, 1.8e19, 1)])
        await db.executemany(
            "INSERT INTO analytics_daily_path (date, zone, path, requests, bytes, deliveries) VALUES (?, ?, ?, ?, ?, ?)",
            [("2026-04-10", "a", "a/v1/x.svg", 2**63 - 1, 2**63 - 1, 2**63 - 1),
             ("2026-04-10", "b", "a/v1/x.svg", 2**63 - 1, 1, 2**63 - 1)])
        await db.executemany("INSERT INTO analytics_daily_country (date, zone, country, requests) VALUES (?, ?, ?, ?)",
                             [("2026-04-10", "a", "US", 2**63 - 1), ("2026-04-10", "b", "US", 2**63 - 1)])
        await db.executemany("INSERT INTO analytics_daily_error (date, zone, status, path, count) VALUES (?, ?, ?, ?, ?)",
                             [("2026-04-10", "a", 404, "a/v1/x.svg", 2**63 - 1),
                              ("2026-04-10", "b", 404, "a/v1/x.svg", 2**63 - 1)])
        await db.commit()
    try:
        await store.record_hits([Hit(NOW, "a/v1/x.svg", "a", 404, MAX_HIT_BYTES, "HIT", "US")] * 3)
        stats = await store.reports.statistics(7, now=NOW)
        assert stats["Summary"]["TotalBandwidth"] == stats["Summary"]["TotalRequests"] == COUNTER_MAX
        assert stats["Daily"][0]["Bandwidth"] == stats["Daily"][1]["Bandwidth"] == COUNTER_MAX
        assert stats["TopAssets"] == [{"Path": "/a/v1/x.svg", "Requests": COUNTER_MAX}]
        assert stats["GeoDistribution"] == [{"CountryCode": "US", "Requests": COUNTER_MAX}]
        assert (await store.reports.insights_summary(7, now=NOW))["TotalBandwidthBytes"] == COUNTER_MAX
        assert (await store.reports.errors(7, now=NOW))["Errors"][0]["Count"] == COUNTER_MAX
        assert (await store.reports.asset_report("a/v1/x.svg", 7, now=NOW))["Errors"] == {"404": COUNTER_MAX}
        assert (await store.reports.analytics_report(7, now=NOW))["data"][0]["bandwidth"]["bytes"] == COUNTER_MAX
        async with aiosqlite.connect(path) as db:  # the rows the new hits touched were brought back to the cap
            rows = await db.execute_fetchall("SELECT bytes, hits FROM analytics_daily_zone WHERE zone = 'a' "
                                             "AND date = '2026-04-10'")
        assert rows == [(COUNTER_MAX, COUNTER_MAX)]
    finally:
        await store.close()


async def test_a_store_from_before_top_assets_counted_deliveries_is_migrated(tmp_path: Path) -> None:
    path = tmp_path / "control.sqlite"
    async with aiosqlite.connect(path) as db:
        await db.executescript(
            "CREATE TABLE analytics_daily_path (date TEXT NOT NULL, zone TEXT NOT NULL, path TEXT NOT NULL, "
            "requests INTEGER NOT NULL DEFAULT 0, bytes INTEGER NOT NULL DEFAULT 0, "
            "PRIMARY KEY (date, zone, path)) WITHOUT ROWID;"
            "CREATE TABLE analytics_daily_error (date TEXT NOT NULL, zone TEXT NOT NULL, status INTEGER NOT NULL, "
            "path TEXT NOT NULL, count INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (date, zone, status, path)) "
            "WITHOUT ROWID;")
        await db.executemany("INSERT INTO analytics_daily_path VALUES (?, ?, ?, ?, ?)",
                             [("2026-04-10", "akande", LOGO, 5, 500), ("2026-04-10", "", "api/transform", 9, 9),
                              ("2026-04-10", "akande", BANNER, 2, 0)])
        await db.executemany("INSERT INTO analytics_daily_error VALUES (?, ?, ?, ?, ?)",
                             [("2026-04-10", "akande", 404, LOGO, 2), ("2026-04-10", "akande", 404, BANNER, 2)])
        await db.commit()
    store = AnalyticsStore(path)
    await store.open()
    try:
        assert (await store.reports.top_assets(7, 10, now=NOW))["Assets"] == [{"Path": "/" + LOGO, "Requests": 3}]
        assert (await store.reports.asset_report(LOGO, 1, now=NOW))["TotalRequests"] == 5
        await store.record_hits([hit(BANNER)])
        assert (await store.reports.top_assets(7, 10, now=NOW))["Assets"][1] == {"Path": "/" + BANNER, "Requests": 1}
    finally:
        await store.close()
    reopened = AnalyticsStore(path)  # the migration runs once
    await reopened.open()
    try:
        assert (await reopened.reports.top_assets(7, 10, now=NOW))["Assets"][0] == {"Path": "/" + LOGO, "Requests": 3}
    finally:
        await reopened.close()


@pytest.mark.parametrize(("status", "path", "counted"), [
    (200, LOGO, True), (206, LOGO, True), (304, LOGO, True), (301, LOGO, False), (404, LOGO, False),
    (500, LOGO, False), (200, "api/transform", False), (200, "api/stream", False), (200, "", False),
])
def test_what_counts_as_an_asset_delivery(status: int, path: str, counted: bool) -> None:
    assert is_asset_delivery(hit(path, status=status)) is counted


def test_a_hit_rate_short_of_all_or_above_none_never_reads_as_all_or_none() -> None:
    # 1,999 hits of 2,000 read 100.0%: the misses vanished from the figure (the dashboard's too).
    assert [hit_rate(h, t) for h, t in ((1999, 2000), (1, 2000), (2000, 2000), (0, 2000), (0, 0), (1, 3), (2, 3),
                                        (4, 9), (4, 7), (1, 8), (5, 1000))] == \
        ["99.9%", "0.1%", "100.0%", "0.0%", "0.0%", "33.3%", "66.7%", "44.4%", "57.1%", "12.5%", "0.5%"]
