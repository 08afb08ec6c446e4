"""Faults: an edge that missed pushes catches up after a restart; with control stopped an edge serves
what it has cached (STALE) and answers 503 only for what it never had."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterator

import aiohttp
import pytest

from tests.integration.harness import ACCESS, ACCOUNT, RunningCdn, start_cdn

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cdn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningCdn]:
    running = start_cdn(tmp_path_factory.mktemp("faults"), edges=2,
                        env_extra={"ASSETCDN_EDGE_ORIGIN_TIMEOUT_S": "2"})
    yield running
    running.stop()


async def put(session: aiohttp.ClientSession, cdn: RunningCdn, path: str, data: bytes) -> dict:
    async with session.put(f"{cdn.edge_urls[0]}/api/storage/{path}", data=data, headers=ACCESS) as resp:
        assert resp.status == 201, await resp.text()
        return await resp.json()


async def get(session: aiohttp.ClientSession, url: str) -> tuple[int, str, bytes]:
    async with session.get(url) as resp:
        return resp.status, resp.headers.get("X-Cache", ""), await resp.read()


async def wait_health(session: aiohttp.ClientSession, url: str, status: int, timeout_s: float = 30) -> dict:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            async with session.get(f"{url}/api/health") as resp:
                body = await resp.json()
                if resp.status == status:
                    return body
        except aiohttp.ClientError:
            body = {}
        if time.monotonic() > deadline:
            raise AssertionError(f"{url} health never became {status}: {body}")
        await asyncio.sleep(0.2)


async def test_an_edge_that_missed_pushes_catches_up_after_restart(cdn: RunningCdn) -> None:
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{cdn.edge_urls[0]}/api/core/zones", json={"Name": "missed"},
                                headers=ACCOUNT) as resp:
            assert resp.status == 201
        await put(session, cdn, "missed/v1/banners/hero.txt", b"old")
        edge1 = cdn.edge_urls[1]
        assert (await get(session, f"{edge1}/missed/v1/banners/hero.txt"))[2] == b"old"

        paused = cdn.signal("--name edge-1", signal.SIGSTOP)
        assert paused
        cdn.stopped_pids.extend(paused)
        body = await put(session, cdn, "missed/v1/banners/hero.txt", b"new")
        assert "not yet: edge-1" in body["EdgeNote"]
        await put(session, cdn, "missed/v1/logos/added.txt", b"added while edge-1 was away")
        for pid in paused:  # it never saw those pushes; kill it and let `assetcdn up` restart it
            os.kill(pid, signal.SIGKILL)
        cdn.stopped_pids.clear()

        await wait_health(session, edge1, 200, timeout_s=60)
        status, _, data = await get(session, f"{edge1}/missed/v1/banners/hero.txt")
        assert (status, data) == (200, b"new")
        status, _, data = await get(session, f"{edge1}/missed/v1/logos/added.txt")
        assert (status, data) == (200, b"added while edge-1 was away")


async def test_with_control_stopped_cached_files_are_served_stale_and_only_unknown_ones_fail(
        cdn: RunningCdn) -> None:
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{cdn.edge_urls[0]}/api/core/zones", json={"Name": "stale"},
                                headers=ACCOUNT) as resp:
            assert resp.status == 201
        await put(session, cdn, "stale/v1/logos/cached.txt", b"cached bytes")
        await put(session, cdn, "stale/v1/logos/never.txt", b"never fetched")
        edge0 = cdn.edge_urls[0]
        assert (await get(session, f"{edge0}/stale/v1/logos/cached.txt"))[1] == "MISS"

        paused = cdn.signal("-m assetcdn.control", signal.SIGSTOP)
        assert paused
        cdn.stopped_pids.extend(paused)
        try:
            health = await wait_health(session, edge0, 503)
            assert health["status"] == "degraded"
            assert any(c["name"] == "control" and not c["healthy"] for c in health["checks"])

            status, cache, data = await get(session, f"{edge0}/stale/v1/logos/cached.txt")
            assert (status, cache, data) == (200, "STALE", b"cached bytes")
            status, _, data = await get(session, f"{edge0}/stale/v1/logos/never.txt")
            assert status == 503
            assert b"OriginUnreachable" in data
        finally:
            for pid in paused:
                    os.kill(pid, signal.SIGCONT)
            cdn.stopped_pids.clear()
        await wait_health(session, edge0, 200)
        status, cache, data = await get(session, f"{edge0}/stale/v1/logos/never.txt")
        assert (status, data) == (200, b"never fetched")
