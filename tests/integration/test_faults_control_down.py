"""Control plane hung (SIGSTOP): the edge serves what it has cached (STALE), answers uncached misses and
management calls with 503 in the envelope at once, not after its (here deliberately long) origin and
proxy timeouts; when control resumes, the edge catches up by itself, without a restart."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Iterator

import aiohttp
import pytest

from tests.integration.faults import control_check, health, poll, wait_healthy
from tests.integration.harness import ACCESS, ACCOUNT, RunningCdn, start_cdn

pytestmark = pytest.mark.integration
# Far longer than a client here waits (CLIENT_TIMEOUT): an answer at all proves the edge did not wait them out.
ORIGIN_TIMEOUT_S = 120
CLIENT_TIMEOUT = aiohttp.ClientTimeout(total=30)


@pytest.fixture(scope="module")
def cdn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningCdn]:
    running = start_cdn(tmp_path_factory.mktemp("control-down"), edges=1,
                        env_extra={"ASSETCDN_EDGE_ORIGIN_TIMEOUT_S": str(ORIGIN_TIMEOUT_S),
                                   "ASSETCDN_EDGE_PROXY_TIMEOUT_S": str(ORIGIN_TIMEOUT_S)})
    yield running
    running.stop()


async def _get(session: aiohttp.ClientSession, url: str, **kwargs: object) -> tuple[int, str, bytes, dict]:
    async with session.get(url, timeout=CLIENT_TIMEOUT, **kwargs) as resp:  # type: ignore[arg-type]
        return resp.status, resp.headers.get("X-Cache", ""), await resp.read(), dict(resp.headers)


async def test_a_hung_control_plane_costs_clients_no_timeout_and_the_edge_recovers_by_itself(cdn: RunningCdn) -> None:
    edge = cdn.edge_urls[0]
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{edge}/api/core/zones", json={"Name": "hung"}, headers=ACCOUNT) as resp:
            assert resp.status == 201
        for name, data in (("cached.txt", b"cached"), ("never.txt", b"never fetched")):
            async with session.put(f"{edge}/api/storage/hung/v1/logos/{name}", data=data, headers=ACCESS) as resp:
                assert resp.status == 201, await resp.text()
        assert (await _get(session, f"{edge}/hung/v1/logos/cached.txt"))[:3] == (200, "MISS", b"cached")
        edge_pids = cdn.pids("--name edge-0")

        paused = cdn.signal("-m assetcdn.control", signal.SIGSTOP)
        assert paused
        cdn.stopped_pids.extend(paused)
        # A management call made as the hang begins, before the edge knows: it waits until the breaker opens, then
        # answers 504 (control was asked and did not answer; docs/failure-behaviour.md), not after the proxy timeout
        # (longer than CLIENT_TIMEOUT).
        asked_as_it_hung = asyncio.ensure_future(_get(session, f"{edge}/api/assets", headers=ACCESS))
        try:
            # The edge notices by itself (its background probe times out) and says so in its health.
            async def breaker_open() -> dict | None:
                status, body = await health(session, edge)
                return body if status == 503 and control_check(body)["circuit"] == "open" else None

            body = await poll(breaker_open, timeout_s=30, what="edge health shows control down")
            assert body["status"] == "degraded"
            assert control_check(body)["healthy"] is False

            status, cache, data, _ = await _get(session, f"{edge}/hung/v1/logos/cached.txt")
            assert (status, cache, data) == (200, "STALE", b"cached")
            status, _, data, _ = await _get(session, f"{edge}/hung/v1/logos/never.txt")
            assert status == 503
            assert b'"code":"OriginUnreachable"' in data.replace(b" ", b"")
            status, _, data, headers = await _get(session, f"{edge}/api/assets", headers=ACCESS)
            assert status == 503
            assert b'"code":"ControlUnreachable"' in data.replace(b" ", b"")
            assert int(headers["Retry-After"]) >= 1
            status, _, data, _ = await asked_as_it_hung
            assert status == 504
            assert b'"code":"ControlTimeout"' in data.replace(b" ", b"")
        finally:
            asked_as_it_hung.cancel()
            for pid in paused:
                os.kill(pid, signal.SIGCONT)
            cdn.stopped_pids.clear()

        await wait_healthy(session, edge)
        status, cache, data, _ = await _get(session, f"{edge}/hung/v1/logos/never.txt")
        assert (status, cache, data) == (200, "MISS", b"never fetched")
        # A change made at control after it resumed reaches the edge without restarting it.
        async with session.put(f"{cdn.control_url}/api/storage/hung/v1/logos/later.txt", data=b"later",
                               headers=ACCESS) as resp:
            assert resp.status == 201

        async def served() -> bytes | None:
            status, _, data, _ = await _get(session, f"{edge}/hung/v1/logos/later.txt")
            return data if status == 200 else None

        assert await poll(served, timeout_s=30, what="the edge serves a file added after control resumed") == b"later"
        assert cdn.pids("--name edge-0") == edge_pids
