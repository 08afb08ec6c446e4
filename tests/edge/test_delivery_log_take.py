"""The edge's delivery log on its own: counts rolled up into batches, the per-second sample of the
request log (budget, errors, rate), the bounds."""

from __future__ import annotations

import collections
import random
from typing import Any

from assetcdn.edge import delivery_log
from assetcdn.edge.delivery_log import BATCH_VERSION, HOUR_S, DeliveryLog, country_code

T0 = 1_790_000_000 - 1_790_000_000 % HOUR_S  # an hour's start
T1 = T0 + HOUR_S


def deliver(log: DeliveryLog, now: float, path: str = "z/v1/a.txt", status: int = 200, sent: int = 10,
            cache: str = "HIT", country: str = "FR", request_id: str = "id") -> None:
    log.delivered(now, "cdn.test", "GET", path, path.split("/", 1)[0], status, sent, cache, country,
                  request_id, "127.0.0.1", 0.001)


def test_a_batch_holds_the_rollups_of_every_count_not_one_item_per_delivery() -> None:
    log = DeliveryLog("cf-ipcountry", node="edge-0/0")
    for i in range(1000):
        deliver(log, T0 + i / 1000, country="FR" if i % 2 else "DE", cache="HIT" if i % 10 else "MISS")
    deliver(log, T0 + 1, path="z/v1/missing.txt", status=404, sent=5)
    deliver(log, T0 + HOUR_S, path="y/v1/b.txt", sent=7)  # the next hour
    batch = log.take(now=T0 + HOUR_S + 5)
    assert batch is not None and batch["v"] == BATCH_VERSION and batch["node"] == "edge-0/0"
    assert sorted(batch["zones"]) == [[T0, "z", "HIT", 901, 9005], [T0, "z", "MISS", 100, 1000], [T1, "y", "HIT", 1, 7]]
    assert sorted(batch["paths"]) == [[T0, "z", "z/v1/a.txt", 200, 1000, 10000],
                                      [T0, "z", "z/v1/missing.txt", 404, 1, 5], [T1, "y", "y/v1/b.txt", 200, 1, 7]]
    assert sorted(batch["countries"]) == [[T0, "z", "DE", 500], [T0, "z", "FR", 501], [T1, "y", "FR", 1]]
    assert log.take(now=T0 + HOUR_S + 5) is None  # the counts went with the batch


def test_the_sample_keeps_its_budget_per_second_every_error_and_a_rate_that_estimates_the_count() -> None:
    log = DeliveryLog("cf-ipcountry", log_per_s=20, errors_per_s=500)
    for i in range(1000):
        deliver(log, T0 + i / 1000, request_id=f"r{i}")
    for i in range(30):
        deliver(log, T0 + 0.5, path="z/v1/gone.txt", status=404, request_id=f"e{i}")
    assert log.take(now=T0 + 0.9) is not None
    # The second is not over: its sample waits for the next batch.
    later = log.take(now=T0 + 1.5)
    assert later is not None
    entries = later["log"]
    errors = [entry for entry in entries if entry[3] == 404]
    assert sorted(entry[5] for entry in errors) == sorted(f"e{i}" for i in range(30))
    assert all(entry[7] == 1.0 for entry in errors)
    sampled = [entry for entry in entries if entry[3] == 200]
    assert len(sampled) == 20 and len({entry[5] for entry in sampled}) == 20
    assert sum(1 / entry[7] for entry in sampled) == 1000  # the estimate is the count
    assert [entry[0] for entry in entries] == sorted(entry[0] for entry in entries)


def test_an_entry_at_the_very_end_of_a_second_is_listed_in_that_second() -> None:
    log = DeliveryLog("cf-ipcountry", log_per_s=3)
    for i in range(3):
        deliver(log, T0 + 0.9996 + i / 100_000, request_id=f"late{i}")  # the last half millisecond of T0
    deliver(log, T0 + 1.2, request_id="next")
    batch = log.take(now=T0 + 2.5)
    assert batch is not None
    seconds = sorted(int(entry[0]) for entry in batch["log"])
    assert seconds == [T0, T0, T0, T0 + 1]  # no second lists more than its budget of 3
    assert all(entry[0] <= T0 + 0.9999 for entry in batch["log"] if entry[5].startswith("late"))


def test_a_watched_tail_raises_the_budget_and_nothing_is_logged_with_a_budget_of_zero() -> None:
    log = DeliveryLog("cf-ipcountry", log_per_s=0, tail_per_s=50)
    for i in range(100):
        deliver(log, T0 + i / 100)
    log.watched(True)
    for i in range(100):
        deliver(log, T0 + 1 + i / 100)
    log.watched(False)
    for i in range(100):
        deliver(log, T0 + 2 + i / 100)
    batch = log.take(now=T0 + 4)
    assert batch is not None
    assert [int(entry[0]) for entry in batch["log"]] == [int(T0) + 1] * 50
    assert {entry[7] for entry in batch["log"]} == {0.5}


def test_distinct_keys_are_bounded_and_a_big_flush_is_split_into_batches(monkeypatch: Any) -> None:
    monkeypatch.setattr(delivery_log, "MAX_KEYS", 50)
    monkeypatch.setattr(delivery_log, "MAX_BATCH_ROWS", 20)
    log = DeliveryLog("cf-ipcountry", log_per_s=0, errors_per_s=0)
    for i in range(200):  # a scan: every path new
        deliver(log, T0, path=f"z/v1/{i}.txt", status=404, sent=1)
    assert len(log.counts) == 51  # 50 paths, then the rest counted without their path
    batches = []
    while (batch := log.take(now=T0 + 2)) is not None:
        batches.append(batch)
    assert len(batches) == 3 and all(len(batch["paths"]) <= 20 for batch in batches)
    paths = [row for batch in batches for row in batch["paths"]]
    assert sum(row[4] for row in paths) == 200 and [row for row in paths if row[2] is None][0][4] == 150
    assert sum(row[3] for batch in batches for row in batch["zones"]) == 200


def test_past_the_bound_a_scan_of_first_segments_that_name_no_zone_adds_no_key(monkeypatch: Any) -> None:
    """On the default host a path's first segment is its zone: each one past MAX_KEYS its own key would let a
    scan of made-up zones grow the counts without bound (while control is away they are not taken)."""
    monkeypatch.setattr(delivery_log, "MAX_KEYS", 50)
    log = DeliveryLog("cf-ipcountry", log_per_s=0, errors_per_s=0, zones=lambda: {"demo"})
    for i in range(200):
        deliver(log, T0, path=f"demo/v1/{i}.txt", status=404, sent=1)
    for i in range(2_000):
        deliver(log, T0, path=f"made-up-{i}/v1/a.txt", status=404, sent=1)
    deliver(log, T0, path="api/transform", status=400, sent=1)
    assert len(log.counts) == 53  # 50 paths, then demo's, api's and the rest's without their path
    rows = shipped(log, T0 + 2)
    assert sum(row[3] for row in rows["zones"]) == 2_201
    assert {row[1]: row[3] for row in rows["zones"]} == {"demo": 200, "": 2_000, "api": 1}


def test_past_the_bound_a_scan_is_counted_in_its_zones_other_row_not_as_requests_for_its_root(
        monkeypatch: Any) -> None:
    """A flood of distinct URLs past MAX_KEYS between two flushes (a pull zone's origin has as many paths as
    clients make up): the paths past the bound go in the zone's "other" row (path None), as the paths its budget
    does not name do. Shipped under the path "" they were named as a path of their own, which control reports as
    requests for "/" (the root, which nobody asked for here), the scan's 404s at the top of the zone's errors."""
    monkeypatch.setattr(delivery_log, "MAX_KEYS", 50)
    log = DeliveryLog("cf-ipcountry", log_per_s=0, errors_per_s=0, zones=lambda: {"demo"})
    for i in range(2_000):
        deliver(log, T0, path=f"demo/{i}.txt", status=404, sent=1)
    deliver(log, T0, path="demo", status=404, sent=1)  # past the bound too
    rows = shipped(log, T0 + 2)
    assert [row for row in rows["paths"] if not row[2]] == [[T0, "demo", None, 404, 1_951, 1_951]]
    assert len(rows["paths"]) == 51
    assert sum(row[4] for row in rows["paths"]) == sum(row[3] for row in rows["zones"]) == 2_001


def test_a_country_is_two_ascii_letters_so_past_the_bound_a_scan_of_made_up_countries_adds_no_key(
        monkeypatch: Any) -> None:
    """The country header is a client's field where no proxy in front sets it. Two letters of any script were a
    country of their own (control counts them as XX), so past MAX_KEYS each made-up pair still added a key: the
    counts grew without bound (while control is away they are not taken). And `ß` or `ﬀ`, upper-cased first,
    were counted as the countries SS and FF."""
    assert [country_code(header) for header in (" de ", "fr", "ß", "ﬀ", "ÄÖ", "中国", "D1", "DEU")] == \
        ["DE", "FR", "XX", "XX", "XX", "XX", "XX", "XX"]
    monkeypatch.setattr(delivery_log, "MAX_KEYS", 50)
    log = DeliveryLog("cf-ipcountry", log_per_s=0, errors_per_s=0, zones=lambda: {"demo"})
    for i in range(3_000):  # every path new, and every country header two letters never seen before
        deliver(log, T0, path=f"demo/{i}.txt", status=404, sent=1,
                country=country_code(chr(0x4E00 + i // 60) + chr(0x4E00 + i % 60)))
    assert len(log.counts) == 51  # 50 paths, then demo's without their path
    assert {row[2]: row[3] for row in shipped(log, T0 + 2)["countries"]} == {"XX": 3_000}


def shipped(log: DeliveryLog, now: float) -> dict[str, list[list[Any]]]:
    """Every row of every batch a flush at ``now`` makes."""
    rows: dict[str, list[list[Any]]] = {"zones": [], "paths": [], "countries": []}
    while (batch := log.take(now=now)) is not None:
        for name, found in rows.items():
            found.extend(batch[name])
    return rows


def test_a_scan_of_unique_404s_ships_a_bounded_number_of_rows_and_every_count() -> None:
    log = DeliveryLog("cf-ipcountry", log_per_s=0, errors_per_s=0, zones=lambda: {"demo"}, paths_per_hour=50)
    for _ in range(100):
        deliver(log, T0 + 1, path="demo/v1/logos/logo.svg", sent=100)
    for i in range(100_000):
        deliver(log, T0 + 1 + i / 100_000, path=f"demo/v1/logos/{i}-xxxx.svg", status=404, sent=0)
    rows = shipped(log, T0 + 3)
    # 50 paths named (the logo first: it is the heaviest), and one "other" row for the rest of the 404s.
    assert len(rows["paths"]) == 51
    assert [T0, "demo", "demo/v1/logos/logo.svg", 200, 100, 10_000] in rows["paths"]
    assert [row for row in rows["paths"] if row[2] is None] == [[T0, "demo", None, 404, 100_000 - 49, 0]]
    assert sum(row[4] for row in rows["paths"]) == sum(row[3] for row in rows["zones"]) == 100_100


def test_each_hour_names_at_most_twice_the_budget_and_a_path_that_grows_heavy_takes_a_place() -> None:
    log = DeliveryLog("cf-ipcountry", log_per_s=0, errors_per_s=0, zones=lambda: {"demo"}, paths_per_hour=10)
    named: set[str] = set()
    for second in range(1, 301):  # a flush a second; every one a scan of new paths
        now = T0 + second
        deliver(log, now, path="demo/v1/popular.svg")
        deliver(log, now, path="demo/v1/popular.svg")
        for i in range(30):
            deliver(log, now, path=f"demo/v1/scan-{second}-{i}.svg", status=404)
        if second == 200:  # a new asset, requested a lot at once
            for _ in range(50):
                deliver(log, now, path="demo/v1/new.svg")
        rows = shipped(log, now + 0.5)
        named |= {row[2] for row in rows["paths"] if row[2] is not None}
        assert sum(row[4] for row in rows["paths"]) == sum(row[3] for row in rows["zones"])
    assert "demo/v1/popular.svg" in named and "demo/v1/new.svg" in named
    assert len(named) <= 20
    # The next hour starts afresh.
    deliver(log, T1 + 1, path="demo/v1/next-hour.svg")
    assert [row[2] for row in shipped(log, T1 + 2)["paths"]] == ["demo/v1/next-hour.svg"]


def test_deliveries_outside_every_zone_are_counted_in_one_bucket_without_paths() -> None:
    log = DeliveryLog("cf-ipcountry", log_per_s=0, errors_per_s=0, zones=lambda: {"demo"})
    for first in ("evil.example", ".well-known", "go", "demo", "api"):
        for i in range(3):
            deliver(log, T0, path=f"{first}/thing-{i}", status=404 if first != "api" else 200)
    rows = shipped(log, T0 + 2)
    assert sorted(row[1] for row in rows["zones"]) == ["", "api", "demo"]
    assert [row for row in rows["zones"] if row[1] == ""] == [[T0, "", "HIT", 9, 90]]
    assert [row for row in rows["paths"] if row[1] == ""] == [[T0, "", None, 404, 9, 90]]
    assert sorted(row[2] for row in rows["paths"] if row[1] != "") == sorted(
        [f"demo/thing-{i}" for i in range(3)] + [f"api/thing-{i}" for i in range(3)])
    assert [row for row in rows["countries"] if row[1] == ""] == [[T0, "", "FR", 9]]


def test_a_pull_zones_revalidated_and_passed_answers_count_as_control_counts_them() -> None:
    # Control's analytics keep HIT, MISS, STALE and BYPASS counters (assetcdn/shared/cache_results.py):
    # a row of another value would be refused there, and its deliveries lost from statistics.
    log = DeliveryLog("cf-ipcountry", node="edge-0/0")
    deliver(log, T0, cache="REVALIDATED")
    deliver(log, T0 + 1, cache="PASS")
    deliver(log, T0 + 2, cache="not-a-result")
    assert sorted(shipped(log, T0 + HOUR_S + 5)["zones"]) == [[T0, "z", "BYPASS", 2, 20], [T0, "z", "HIT", 1, 10]]


def test_every_offer_of_a_second_is_as_likely_to_be_in_its_sample() -> None:
    random.seed(37)  # the sample's draws: the same counts every run
    kept: collections.Counter[int] = collections.Counter()
    for _ in range(2000):
        sample = delivery_log.Sample(20)
        for offer in range(500):
            slot = sample.slot(T0)
            if slot >= 0:
                sample.keep(slot, (float(offer), "GET", "z/a", 200, "HIT", None, None))
        assert len(sample.kept) == 20 and len({entry[0] for entry in sample.kept}) == 20
        kept.update(int(entry[0]) for entry in sample.kept)
    # 2000 samples of 20 out of 500: each offer is kept 80 times on average, whatever its place.
    thirds = [sum(kept[offer] for offer in range(start, start + 166)) / 166 for start in (0, 167, 334)]
    assert all(72 <= third <= 88 for third in thirds), thirds
    assert 40 <= min(kept[offer] for offer in range(500)) and max(kept.values()) <= 125


def test_a_budget_changed_within_a_second_bounds_that_second_by_the_larger() -> None:
    random.seed(38)
    for first, second in ((20, 200), (200, 20), (0, 50), (50, 0)):
        sample = delivery_log.Sample(first)
        for offer in range(1000):
            if offer == 300:
                sample.set_budget(second)
            slot = sample.slot(T0)
            if slot >= 0:
                sample.keep(slot, (float(offer), "GET", "z/a", 200, "HIT", None, None))
        offers = [int(entry[0]) for entry in sample.kept]
        assert len(offers) == len(set(offers)) and len(offers) <= max(first, second), (first, second, offers)
        assert len(offers) >= min(first, second)
        if second:  # the new budget draws from the offers after the change too
            assert any(offer >= 300 for offer in offers), (first, second)
