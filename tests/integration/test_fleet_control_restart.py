"""Control restarted in front of a fleet: a purge made before an edge has called it again (at most a heartbeat away)
must not leave that edge out of its answer and say it purged every edge. Control keeps its list of edges across a
restart (assetcdn/control/publishing/edge_registry.py): one that does not acknowledge is pending, as before the
restart, and applies the purge when it catches up."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from tests.integration.faults import wait_control_restarted
from tests.integration.harness import ACCESS, ACCOUNT, PURGE, RunningCdn, start_cdn

pytestmark = pytest.mark.integration

PATH = "/restarted/v1/logos/file.txt"


@pytest.fixture
def cdn(tmp_path: Path) -> Iterator[RunningCdn]:
    # An edge stays live in control's view for a minute after its last call: the paused one below is still part of
    # the fleet, as it would be for 15 s by default.
    running = start_cdn(tmp_path, edges=2, env_extra={"ASSETCDN_CONTROL_EDGE_TIMEOUT_S": "60"})
    yield running
    running.stop()


async def _purge(session: aiohttp.ClientSession, base: str) -> dict:
    async with session.post(f"{base}/api/purge", json={"urls": [PATH]}, headers=PURGE) as resp:
        assert resp.status == 200, await resp.text()
        body: dict = await resp.json()
        return body


async def test_a_purge_right_after_control_restarted_does_not_claim_edges_it_has_not_heard_from(
        cdn: RunningCdn) -> None:
    writer = cdn.edge_urls[0]
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{writer}/api/core/zones", json={"Name": "restarted"}, headers=ACCOUNT) as resp:
            assert resp.status == 201
        async with session.put(f"{writer}/api/storage{PATH}", data=b"bytes", headers=ACCESS) as resp:
            assert resp.status == 201
        for edge in cdn.edge_urls:
            async with session.get(f"{edge}{PATH}") as resp:
                assert resp.status == 200

        paused = cdn.signal("--name edge-1", signal.SIGSTOP)  # busy, or cut off: it answers no push for now
        assert paused
        cdn.stopped_pids.extend(paused)
        try:
            body = await _purge(session, writer)
            assert "edge-1" in body["edges"]["pending"]  # control that knew it says so

            killed = cdn.signal("-m assetcdn.control", signal.SIGKILL)
            assert killed
            await wait_control_restarted(session, cdn, killed)
            body = await _purge(session, writer)
        finally:
            for pid in paused:
                os.kill(pid, signal.SIGCONT)
            cdn.stopped_pids.clear()
        # Control started again knows the edges that were live: the paused one is pending still, not left out.
        assert "edge-1" in body["edges"]["pending"]
        assert body["edges"]["total"] == 2
        assert body["note"].startswith("Not yet acknowledged by") and "edge-1" in body["note"]
