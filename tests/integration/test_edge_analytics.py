"""Analytics counted at the edge, on a real cluster: statistics and insights count exactly the
deliveries this test made (hits on the fast path, misses, HEADs, 404s), the request log lists every
error and a sample of the rest whose rates add up to the count, and the access log has one JSON line
per delivery. A scan of unique 404s is counted in full under a bounded number of paths, and a path
outside every zone under no zone."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from typing import Any

import aiohttp
import orjson
import pytest

from tests.integration.harness import ACCESS, ACCOUNT, RunningCdn, start_cdn

pytestmark = pytest.mark.integration

# The edge flushes every [analytics] flush_interval_s (1 s); this only bounds a test on a loaded machine.
WAIT_S = 30.0
ZONE = "counted"
FILE = f"{ZONE}/v1/logos/a.txt"
BODY = b"counted at the edge"
LOG_PER_S = 3
PATHS_PER_HOUR = 5


@pytest.fixture(scope="module")
def cdn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningCdn]:
    running = start_cdn(tmp_path_factory.mktemp("edge-analytics"), env_extra={
        "ASSETCDN_ACCESS_LOG_OUTPUT": "file", "ASSETCDN_ANALYTICS_LOG_DELIVERIES_PER_S": str(LOG_PER_S),
        "ASSETCDN_ANALYTICS_PATHS_PER_ZONE_HOUR": str(PATHS_PER_HOUR)})
    yield running
    running.stop()


async def until(check: Any, what: str) -> Any:
    deadline = time.monotonic() + WAIT_S
    while True:
        found = await check()
        if found is not None:
            return found
        assert time.monotonic() < deadline, f"still waiting for {what}"
        await asyncio.sleep(0.2)


async def test_statistics_count_every_delivery_and_the_logs_sample_them(cdn: RunningCdn) -> None:
    base = cdn.edge_urls[0]
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{base}/api/core/zones", json={"Name": ZONE}, headers=ACCOUNT) as resp:
            assert resp.status == 201, await resp.text()
        async with session.put(f"{base}/api/storage/{FILE}", data=BODY, headers=ACCESS) as resp:
            assert resp.status == 201, await resp.text()

        made: dict[tuple[str, int], int] = {}
        error_ids: set[str] = set()
        received = 0
        for i in range(400):
            method, path = ("HEAD", FILE) if i % 10 == 3 else ("GET", FILE)
            if i % 8 == 5:
                path = f"{ZONE}/v1/logos/missing-{i % 3}.txt"
            request_id = str(uuid.uuid4())
            async with session.request(method, f"{base}/{path}",
                                       headers={"X-Request-ID": request_id, "CF-IPCountry": "de"}) as resp:
                received += len(await resp.read())
                made[(path, resp.status)] = made.get((path, resp.status), 0) + 1
                if resp.status >= 400:
                    error_ids.add(request_id)
        total = sum(made.values())
        assert made[(FILE, 200)] > 300 and len(error_ids) == 50

        async def counted() -> dict[str, Any] | None:
            async with session.get(f"{base}/api/core/statistics?days=1&zone={ZONE}", headers=ACCOUNT) as resp:
                body = await resp.json()
            return body if body["Summary"]["TotalRequests"] == total else None

        statistics = await until(counted, f"statistics to count {total} requests")
        assert statistics["Summary"]["TotalBandwidth"] == received
        assert statistics["GeoDistribution"] == [{"CountryCode": "DE", "Requests": total}]
        assert statistics["TopAssets"] == [{"Path": f"/{FILE}", "Requests": made[(FILE, 200)]}]
        async with session.get(f"{base}/api/insights/errors?days=1&zone={ZONE}", headers=ACCOUNT) as resp:
            errors = (await resp.json())["Errors"]
        assert [(group["StatusCode"], group["Count"]) for group in errors if group["StatusCode"] == 404] == [(404, 50)]

        async def sampled() -> list[dict[str, Any]] | None:
            async with session.get(f"{base}/api/logs?limit=500", headers=ACCOUNT) as resp:
                records = [r for r in (await resp.json())["records"] if r["code"] == "delivery"
                           and r["path"].startswith(f"/{ZONE}/")]
            estimate = sum(1 / r["sampleRate"] for r in records if r["status"] < 400)
            listed = {r["requestId"] for r in records if r["status"] >= 400}
            return records if listed == error_ids and round(estimate) == total - 50 else None

        records = await until(sampled, "every error and a sample adding up to the deliveries")
        assert all(r["sampleRate"] == 1.0 for r in records if r["status"] >= 400)
        per_second: dict[str, int] = {}
        for record in records:
            if record["status"] < 400:
                per_second[record["timestamp"][:19]] = per_second.get(record["timestamp"][:19], 0) + 1
        assert max(per_second.values()) <= LOG_PER_S

    # Every delivery, unsampled, in the edge worker's access log.
    async def logged() -> list[dict[str, Any]] | None:
        files = list(cdn.data_dir.rglob("access-edge-0-0.log"))
        lines = [orjson.loads(line) for line in files[0].read_bytes().splitlines()] if files else []
        mine = [line for line in lines if line["path"].startswith(f"/{ZONE}/")]
        return mine if len(mine) == total else None

    lines = await until(logged, f"{total} access-log lines")
    assert {line["request_id"] for line in lines} >= error_ids
    first = lines[0]
    assert set(first) == {"time", "edge", "host", "method", "path", "status", "bytes", "cache", "duration_ms",
                          "client_ip", "country", "request_id", "aborted"}
    assert first["edge"] == "edge-0/0" and first["client_ip"] == "127.0.0.1" and first["country"] == "DE"
    # Every answer was read whole: each line has the bytes the client got, none is aborted.
    assert sum(line["bytes"] for line in lines) == received and not any(line["aborted"] for line in lines)
    # The host every delivery decision used (canonical: no port), alike on the hit path and the application's.
    assert first["host"] == base.removeprefix("http://").rsplit(":", 1)[0] and first["time"].endswith("Z")
    assert sum(1 for line in lines if line["cache"] == "HIT" and line["status"] == 200) > 250


async def test_a_scan_of_unique_404s_is_counted_under_a_bounded_number_of_paths(cdn: RunningCdn) -> None:
    base, zone, scan = cdn.edge_urls[0], "scanned", 40
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{base}/api/core/zones", json={"Name": zone}, headers=ACCOUNT) as resp:
            assert resp.status == 201, await resp.text()
        async with session.put(f"{base}/api/storage/{zone}/v1/logos/a.txt", data=BODY, headers=ACCESS) as resp:
            assert resp.status == 201, await resp.text()
        # First segments that name no zone; sent first, so they are counted once the scan is.
        for path in ("evil.example/a", "go/b"):
            async with session.get(f"{base}/{path}") as resp:
                assert resp.status == 404
        for i in range(scan):
            async with session.get(f"{base}/{zone}/v1/logos/{i}-xxxxxxxx.svg") as resp:
                assert resp.status == 404

        async def report(query: str) -> dict[str, Any]:
            async with session.get(f"{base}/api/insights/{query}", headers=ACCOUNT) as resp:
                assert resp.status == 200, await resp.text()
                return await resp.json()

        async def counted() -> list[dict[str, Any]] | None:
            errors = (await report(f"errors?days=1&zone={zone}"))["Errors"]
            return errors if errors and errors[0]["Count"] == scan else None

        errors = await until(counted, f"the {scan} 404s of the scan")
        # One edge worker names at most PATHS_PER_HOUR paths an hour (twice that across an hour's end).
        other = errors[0]["TopPaths"][0]
        assert other["Path"] == "(other)" and scan - 2 * PATHS_PER_HOUR <= other["Count"] <= scan - PATHS_PER_HOUR
        assert (await report("summary?days=1&zone=go"))["TotalRequests"] == 0
