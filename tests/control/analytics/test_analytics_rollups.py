"""Version 2 analytics batches (counted at the edge, rolled up): statistics, insights and analytics
answer exactly what the same deliveries sent one by one (version 1) answer, a batch id counts once,
hostile rows are skipped, and the request-log sample is listed with its rate."""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestClient

from assetcdn.control.analytics.ingest import MAX_BATCH_ROWS
from assetcdn.control.app import create_app
from assetcdn.edge.delivery_log import HOUR_S, DeliveryLog
from assetcdn.shared.config import load_settings
from tests.support.analytics import ANALYTICS_KEY, page, send_batch, send_v2, with_zones
from tests.support.control import ACCOUNT, SECRETS

PATHS = ["akande/v1/logos/logo.svg", "akande/v1/img/a.png", "stocks/images/b.jpg", "akande/v1/gone.txt",
         "api/transform", "", "Not-A-Zone!/x.png", "favicon.ico"]
READS = ["/api/core/statistics?days=3", "/api/core/statistics?days=3&zone=akande", "/api/insights/summary?days=3",
         "/api/insights/top-assets?days=3&limit=100", "/api/insights/geography?days=3", "/api/insights/errors?days=3",
         "/api/insights/asset?path=/akande/v1/gone.txt&days=3", "/api/insights/asset?path=/akande/v1/logos/logo.svg"]


def deliveries(count: int, now: float) -> list[dict[str, Any]]:
    """``count`` deliveries over today and yesterday, of every kind a report tells apart."""
    chosen = random.Random(20)
    made = []
    for i in range(count):
        path = chosen.choice(PATHS)
        status = 404 if path.endswith("gone.txt") else chosen.choice([200, 200, 200, 304, 206, 301, 500])
        made.append({"timestamp": now - chosen.choice([0, 0, 86400]) - chosen.random() * 60, "path": path,
                     "zone": path.split("/", 1)[0], "status": status, "bytes": chosen.randrange(0, 10_000),
                     "cache": chosen.choice(["HIT", "HIT", "MISS", "STALE", "BYPASS"]),
                     "country": chosen.choice(["DE", "FR", "XX", "US"]), "requestId": f"r-{i}"})
    return made


async def answers(control: TestClient) -> list[Any]:
    found = []
    for url in READS:
        resp = await control.get(url, headers=ACCOUNT)
        assert resp.status == 200, await resp.text()
        found.append({k: v for k, v in (await resp.json()).items() if k != "DateFetched"})
    resp = await control.get("/api/analytics?days=3", headers=ANALYTICS_KEY)
    found.append({k: v for k, v in (await resp.json()).items() if k != "DateFetched"})
    return found


async def test_rollups_answer_exactly_what_every_delivery_sent_alone_answers(
        control: TestClient, aiohttp_client: Any, tmp_path: Path) -> None:
    one_by_one = await with_zones(await aiohttp_client(create_app(load_settings(environ={}), SECRETS, tmp_path / "v1")))
    now = time.time()
    made = deliveries(3000, now)
    assert (await (await send_batch(one_by_one, made, batch="all")).json())["recorded"] == len(made)
    edge = DeliveryLog("cf-ipcountry", node="edge-0/0")
    for item in made:
        edge.delivered(item["timestamp"], "cdn.test", "GET", item["path"], item["zone"], item["status"],
                       item["bytes"], item["cache"], item["country"], item["requestId"], "127.0.0.1", 0.0)
    batch = edge.take(now + 2)
    assert batch is not None and edge.take(now + 2) is None
    resp = await send_v2(control, {**batch, "batch": "rolled-up"})
    assert resp.status == 200, await resp.text()
    body = await resp.json()
    assert body["rejected"] == 0 and body["tail"] is False
    counted_rows = sum(len(batch[name]) for name in ("zones", "paths", "countries"))
    assert counted_rows < len(made) // 10  # control's work: distinct keys, not deliveries
    assert body["recorded"] == counted_rows + len(batch["log"])

    rolled_up = await answers(control)
    assert rolled_up == await answers(one_by_one)
    statistics = rolled_up[0]
    assert statistics["Summary"]["TotalRequests"] == len(made)  # the count this test made
    assert statistics["Summary"]["TotalBandwidth"] == sum(item["bytes"] for item in made)
    errors = {group["StatusCode"]: group["Count"] for group in rolled_up[5]["Errors"]}
    assert errors == {status: sum(1 for item in made if item["status"] == status) for status in (404, 500)}

    # The same batch again (a lost reply): counted once.
    assert (await (await send_v2(control, {**batch, "batch": "rolled-up"})).json())["duplicate"] is True
    assert (await answers(control))[0]["Summary"]["TotalRequests"] == len(made)


async def test_the_sample_is_listed_with_its_rate_and_the_reply_says_when_the_tail_is_watched(
        control: TestClient) -> None:
    now = time.time()
    edge = DeliveryLog("cf-ipcountry", node="edge-0/1", log_per_s=5)
    for i in range(100):
        edge.delivered(now, "cdn.test", "GET", "akande/v1/a.png", "akande", 200, 10, "HIT", "DE", f"ok-{i}",
                       "127.0.0.1", 0.0)
    edge.delivered(now, "cdn.test", "HEAD", "akande/v1/none.png", "akande", 404, 0, "MISS", "DE", "missing",
                   "::1", 0.0)
    batch = edge.take(now + 2)
    assert batch is not None
    assert (await send_v2(control, {**batch, "batch": "sampled"})).status == 200
    records = [r for r in (await page(control))["records"] if r["code"] == "delivery"]
    assert len(records) == 6 and {r["node"] for r in records} == {"edge-0/1"}
    missing = [r for r in records if r["status"] == 404]
    assert [(r["requestId"], r["method"], r["ip"], r["level"], r["sampleRate"]) for r in missing] == [
        ("missing", "HEAD", "::1", "warn", 1.0)]
    assert sum(1 / r["sampleRate"] for r in records if r["status"] == 200) == 100

    stream = await control.get("/api/logs?stream=1", headers=ACCOUNT)
    try:
        assert (await stream.content.readline()).startswith(b"event: connected")
        resp = await send_v2(control, {"v": 2, "batch": "watched", "zones": [], "paths": [], "countries": [],
                                       "log": []})
        assert (await resp.json())["tail"] is True
    finally:
        stream.close()


async def test_hostile_rows_are_skipped_and_the_rest_counted(control: TestClient) -> None:
    hour = int(time.time()) // HOUR_S * HOUR_S
    good_zone, good_path, good_country = [hour, "akande", "HIT", 3, 30], [hour, "akande", "akande/v1/a", 200, 3, 30], \
        [hour, "akande", "DE", 3]
    batch = {
        "v": 2, "batch": "hostile",
        "zones": [good_zone, [hour + 1, "akande", "HIT", 1, 1], [hour - 200 * 86400, "akande", "HIT", 1, 1],
                  [hour, "ak/ande", "HIT", 1, 1], [hour, "akande", "hit", 1, 1], [hour, "akande", "HIT", -1, 1],
                  [hour, "akande", "HIT", True, 1], [hour, "akande", "HIT", 1], "row", None,
                  [hour + 86400, "akande", "HIT", 1, 1], [hour, "akande", "HIT", 2**41, 1], [[hour], "akande", "HIT", 1, 1],
                  [hour, ["akande"], "HIT", 1, 1], [hour, "akande", ["HIT"], 1, 1]],
        "paths": [good_path, [hour, "akande", "a\x00b", 200, 1, 1], [hour, "akande", "x" * 3000, 200, 1, 1],
                  [hour, "akande", "akande/v1/a", 99, 1, 1], [hour, "akande", "akande/v1/a", 200, 1.5, 1]],
        "countries": [good_country, [hour, "akande", "DE", "3"]],
        "log": [[time.time(), "GET", "akande/v1/a", 200, "HIT", "id", "1.2.3.4", 0.0],
                [time.time(), "GET", "akande/v1/a", 200, "HIT", "id", "1.2.3.4", 2],
                [time.time(), "GET", "akande/v1/a", 200, "HIT", "<script>", "not an ip", 1]],
    }
    resp = await send_v2(control, batch)
    assert resp.status == 200, await resp.text()
    assert await resp.json() == {"recorded": 4, "rejected": 21, "tail": False}
    summary = await (await control.get("/api/core/statistics?days=1", headers=ACCOUNT)).json()
    assert summary["Summary"]["TotalRequests"] == 3 and summary["Summary"]["TotalBandwidth"] == 30
    assert summary["GeoDistribution"] == [{"CountryCode": "DE", "Requests": 3}]
    listed = [r for r in (await page(control))["records"] if r["code"] == "delivery"]
    assert [(r["requestId"], r["ip"], r["sampleRate"]) for r in listed] == [(None, "unknown", 1.0)]

    too_many = {"v": 2, "zones": [good_zone] * (MAX_BATCH_ROWS + 1)}
    resp = await send_v2(control, too_many)
    assert resp.status == 400 and (await resp.json())["error"]["code"] == "BatchTooLarge"
