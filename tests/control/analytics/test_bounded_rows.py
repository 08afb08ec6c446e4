"""Anonymous requests cannot grow control's database without bound: a scan of unique paths adds a fixed
number of rows (the edge names at most ``paths_per_zone_hour`` paths per zone and hour, control at
most ``paths_per_zone_day`` per zone and day, whatever several edges send), a path outside every zone
is counted under no zone, every total stays exact, and the reports stay fast."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestClient

from assetcdn.control.analytics.tables import TABLES
from assetcdn.control.app import create_app
from assetcdn.edge.delivery_log import HOUR_S, DeliveryLog
from assetcdn.shared.config import load_settings
from tests.support.analytics import send_v2, with_zones
from tests.support.control import ACCOUNT, SECRETS

SCAN = 100_000
# Paths an edge worker names per zone and hour ([analytics] paths_per_zone_hour in default.toml).
EDGE_NAMES = load_settings(environ={}).get("analytics", "paths_per_zone_hour")
REPORTS = ["/api/insights/errors?days=1", "/api/insights/top-assets?days=1&limit=100", "/api/core/statistics?days=1",
           "/api/insights/summary?days=1", "/api/insights/errors?days=1&zone=akande"]


def rows(data_dir: Path) -> int:
    with sqlite3.connect(f"file:{data_dir / 'control.sqlite3'}?mode=ro", uri=True) as db:
        return sum(db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0] for table in TABLES)


def deliver(edge: DeliveryLog, now: float, path: str, status: int = 404, sent: int = 0) -> None:
    edge.delivered(now, "cdn.test", "GET", path, path.split("/", 1)[0], status, sent, "MISS", "XX", None,
                   "127.0.0.1", 0.0)


async def ship(control: TestClient, edge: DeliveryLog, now: float, name: str) -> None:
    number = 0
    while (batch := edge.take(now)) is not None:
        resp = await send_v2(control, {**batch, "batch": f"{name}-{number}"})
        assert resp.status == 200, await resp.text()
        number += 1


async def get(control: TestClient, url: str) -> dict[str, Any]:
    resp = await control.get(url, headers=ACCOUNT)
    assert resp.status == 200, await resp.text()
    return await resp.json()


async def test_a_scan_of_100000_unique_404s_adds_a_fixed_number_of_rows_and_reports_stay_fast(
        control: TestClient, data_dir: Path) -> None:
    before = rows(data_dir)
    now = time.time()
    edge = DeliveryLog("cf-ipcountry", node="edge-0/0", log_per_s=0, errors_per_s=0)
    for _ in range(3):
        deliver(edge, now, "akande/v1/logos/logo.svg", status=200, sent=1000)
    for i in range(SCAN):
        deliver(edge, now, f"akande/v1/logos/{i}-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx.svg")
    await ship(control, edge, now + 1, "scan")

    # Per table: the named paths, an "other" row, the zone's and its countries' rows.
    assert rows(data_dir) - before <= 2 * (EDGE_NAMES + 10)
    summary = await get(control, "/api/insights/summary?days=1")
    assert summary["TotalRequests"] == SCAN + 3
    errors = (await get(control, "/api/insights/errors?days=1"))["Errors"]
    assert [(group["StatusCode"], group["Count"]) for group in errors] == [(404, SCAN)]
    assert errors[0]["TopPaths"][0] == {"Path": "(other)", "Count": SCAN - (EDGE_NAMES - 1)}
    top = (await get(control, "/api/insights/top-assets?days=1"))["Assets"]
    assert top == [{"Path": "/akande/v1/logos/logo.svg", "Requests": 3}]  # "other" is no asset

    for url in REPORTS:  # each report answers over the bounded rows (how fast is benchmarks/' to say, not a test's)
        await get(control, url)


async def test_control_caps_paths_per_zone_and_day_whatever_several_edges_send(
        aiohttp_client: Any, tmp_path: Path) -> None:
    settings = load_settings(environ={}).with_overrides("analytics", paths_per_zone_day=100, write_interval_s=0.0)
    control = await with_zones(await aiohttp_client(create_app(settings, SECRETS, tmp_path / "data")))
    now = time.time()
    for number in range(10):  # ten edges, each naming its own 60 paths (below its own cap)
        edge = DeliveryLog("cf-ipcountry", node=f"edge-{number}/0", log_per_s=0, errors_per_s=0)
        deliver(edge, now, "akande/v1/logo.svg", status=200, sent=10)
        for i in range(60):
            deliver(edge, now, f"akande/v1/{number}-{i}.svg")
        await ship(control, edge, now + 1, f"edge-{number}")
    assert rows(tmp_path / "data") <= 2 * 100 + 10

    errors = (await get(control, "/api/insights/errors?days=1"))["Errors"]
    assert [(group["StatusCode"], group["Count"]) for group in errors] == [(404, 600)]
    assert {"Path": "(other)", "Count": 600 - 99} in errors[0]["TopPaths"]
    # A path control already names keeps its own count past the cap.
    edge = DeliveryLog("cf-ipcountry", node="edge-0/0", log_per_s=0, errors_per_s=0)
    for _ in range(700):
        deliver(edge, now, "akande/v1/0-0.svg")
    await ship(control, edge, now + 1, "again")
    assert (await get(control, "/api/insights/asset?path=/akande/v1/0-0.svg&days=1"))["TotalRequests"] == 701
    statistics = await get(control, "/api/core/statistics?days=1&zone=akande")
    assert statistics["Summary"]["TotalRequests"] == 1310
    assert statistics["TopAssets"] == [{"Path": "/akande/v1/logo.svg", "Requests": 10}]

    # A new path with more requests in one write than the least-counted named one in its whole day
    # takes its place; that one's count goes to "other". The rows stay within the cap.
    edge = DeliveryLog("cf-ipcountry", node="edge-0/0", log_per_s=0, errors_per_s=0)
    for _ in range(5):
        deliver(edge, now, "akande/v1/new.svg", status=200, sent=10)
    await ship(control, edge, now + 1, "heavier")
    assert rows(tmp_path / "data") <= 2 * 100 + 10
    assert (await get(control, "/api/insights/top-assets?days=1"))["Assets"] == [
        {"Path": "/akande/v1/logo.svg", "Requests": 10}, {"Path": "/akande/v1/new.svg", "Requests": 5}]
    assert (await get(control, "/api/insights/asset?path=/akande/v1/0-1.svg&days=1"))["TotalRequests"] == 0
    errors = (await get(control, "/api/insights/errors?days=1"))["Errors"]
    assert errors[0]["Count"] == 1300 and {"Path": "(other)", "Count": 600 - 98} in errors[0]["TopPaths"]


async def test_a_zone_that_does_not_exist_names_no_row_but_is_in_every_total(control: TestClient) -> None:
    hour = int(time.time()) // HOUR_S * HOUR_S
    fake = ["evil.example", ".well-known", "go"]
    batch = {"v": 2, "batch": "zones",
             "zones": [[hour, zone, "MISS", 5, 50] for zone in [*fake, "akande"]],
             "paths": [[hour, zone, f"{zone}/x-{i}", 404, 1, 10] for zone in [*fake, "akande"] for i in range(5)],
             "countries": [[hour, zone, "DE", 5] for zone in [*fake, "akande"]], "log": []}
    assert (await send_v2(control, batch)).status == 200
    resp = await control.post("/api/analytics", json={"path": "/evil.example/probe", "status": 404})
    assert resp.status == 200

    assert (await get(control, "/api/insights/summary?days=1"))["TotalRequests"] == 21
    assert (await get(control, "/api/insights/summary?days=1&zone=go"))["TotalRequests"] == 0
    assert (await get(control, "/api/insights/summary?days=1&zone=akande"))["TotalRequests"] == 5
    errors = (await get(control, "/api/insights/errors?days=1"))["Errors"]
    assert errors[0]["Count"] == 21
    assert sorted(entry["Path"] for entry in errors[0]["TopPaths"]) == sorted(
        ["(other)", *(f"/akande/x-{i}" for i in range(5))])
    assert {"Path": "(other)", "Count": 16} in errors[0]["TopPaths"]
