"""GET /api/logs on a real cluster: deliveries every edge served are listed (with the node and the
cache status), arrive on a live stream, and are still listed after control restarts."""

from __future__ import annotations

import asyncio
import signal
import time
import uuid
from collections.abc import Iterator
from typing import Any

import aiohttp
import orjson
import pytest

from tests.integration.faults import wait_control_restarted
from tests.integration.harness import ACCESS, ACCOUNT, RunningCdn, start_cdn

pytestmark = pytest.mark.integration

# The product ships deliveries every [analytics] flush_interval_s (1 s by default) and control lists
# them on arrival; this wait only bounds a test on a loaded machine, it is not the product's figure.
WAIT_S = 30.0


@pytest.fixture(scope="module")
def cdn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningCdn]:
    running = start_cdn(tmp_path_factory.mktemp("request-log"), edges=2)
    yield running
    running.stop()


async def logs_page(session: aiohttp.ClientSession, base: str) -> list[dict[str, Any]]:
    async with session.get(f"{base}/api/logs?limit=500", headers=ACCOUNT) as resp:
        assert resp.status == 200, await resp.text()
        return (await resp.json())["records"]


async def wait_listed(session: aiohttp.ClientSession, base: str, request_ids: set[str]) -> dict[str, dict]:
    """Poll the JSON page until every request id is listed (bounded)."""
    deadline = time.monotonic() + WAIT_S
    while True:
        found = {r["requestId"]: r for r in await logs_page(session, base) if r["requestId"] in request_ids}
        if set(found) == request_ids:
            return found
        assert time.monotonic() < deadline, f"not listed: {request_ids - set(found)}"
        await asyncio.sleep(0.1)


async def get_with_id(session: aiohttp.ClientSession, url: str) -> tuple[str, int, str]:
    request_id = str(uuid.uuid4())
    async with session.get(url, headers={"X-Request-ID": request_id}) as resp:
        await resp.read()
        assert resp.headers["X-Request-ID"] == request_id
        return request_id, resp.status, resp.headers.get("X-Cache", "")


async def test_every_edge_delivery_is_listed_and_survives_a_control_restart(cdn: RunningCdn) -> None:
    base = cdn.edge_urls[0]
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{base}/api/core/zones", json={"Name": "logged"}, headers=ACCOUNT) as resp:
            assert resp.status == 201, await resp.text()
        async with session.put(f"{base}/api/storage/logged/v1/logos/a.txt", data=b"logged bytes",
                               headers=ACCESS) as resp:
            assert resp.status == 201, await resp.text()

        served = [await get_with_id(session, f"{cdn.edge_urls[0]}/logged/v1/logos/a.txt?secret=s3cr3t"),
                  await get_with_id(session, f"{cdn.edge_urls[0]}/logged/v1/logos/a.txt"),
                  await get_with_id(session, f"{cdn.edge_urls[1]}/logged/v1/logos/a.txt"),
                  await get_with_id(session, f"{cdn.edge_urls[1]}/logged/v1/logos/missing.txt")]
        assert [(status, cache) for _, status, cache in served][:3] == [(200, "MISS"), (200, "HIT"), (200, "MISS")]
        listed = await wait_listed(session, base, {request_id for request_id, _, _ in served})

        expected = [("edge-0/0", 200, "MISS", "/logged/v1/logos/a.txt"), ("edge-0/0", 200, "HIT", "/logged/v1/logos/a.txt"),
                    ("edge-1/0", 200, "MISS", "/logged/v1/logos/a.txt"),
                    ("edge-1/0", 404, served[3][2] or "BYPASS", "/logged/v1/logos/missing.txt")]
        got = [(listed[rid]["node"], listed[rid]["status"], listed[rid]["cache"], listed[rid]["path"])
               for rid, _, _ in served]
        assert got == expected
        assert all(listed[rid]["code"] == "delivery" and listed[rid]["ip"] == "127.0.0.1" for rid, _, _ in served)
        assert listed[served[3][0]]["level"] == "warn"
        assert "s3cr3t" not in orjson.dumps(list(listed.values())).decode()
        before = await logs_page(session, base)
        assert any(r["node"] == "control" and r["path"] == "/api/core/zones" for r in before)

        old_pids = cdn.signal("-m assetcdn.control", signal.SIGTERM)
        assert old_pids
        await wait_control_restarted(session, cdn, old_pids)
        after = await logs_page(session, base)
        assert {r["id"] for r in before} <= {r["id"] for r in after}
        assert {r["requestId"] for r in after} >= set(listed)


async def test_a_live_stream_shows_deliveries_from_every_edge(cdn: RunningCdn) -> None:
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{cdn.edge_urls[0]}/api/core/zones", json={"Name": "streamed"},
                                headers=ACCOUNT) as resp:
            assert resp.status == 201, await resp.text()
        async with session.put(f"{cdn.edge_urls[0]}/api/storage/streamed/v1/logos/b.txt", data=b"b",
                               headers=ACCESS) as resp:
            assert resp.status == 201, await resp.text()
        async with session.get(f"{cdn.edge_urls[0]}/api/logs?stream=1", headers=ACCOUNT) as stream:
            assert stream.status == 200
            assert (await stream.content.readline()).startswith(b"event: connected")
            wanted = {(await get_with_id(session, f"{edge}/streamed/v1/logos/b.txt"))[0]: edge
                      for edge in cdn.edge_urls}
            nodes = {}
            async with asyncio.timeout(WAIT_S):
                while len(nodes) < len(wanted):
                    line = await stream.content.readline()
                    assert line, "the stream ended"
                    if line.startswith(b"data: "):
                        record = orjson.loads(line[6:])
                        if record.get("requestId") in wanted:
                            nodes[record["requestId"]] = record["node"]
            assert sorted(nodes.values()) == ["edge-0/0", "edge-1/0"]
