"""Two edges started with one name (a copied command line): control keeps one address per name, so the edge that
registered first gets no push from then on (it catches up on its own), purge answers count the two as one, and both
take themselves for the shield of the same pull zone paths. Control cannot tell which of them is meant, but it must
say so: a WARNING naming the name and both addresses (assetcdn/control/publishing/edge_registry.py). So for two
edges of two names that register one address: the pushes for one reach the other, which refuses them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from tests.integration.faults import poll, start_edge, wait_healthy
from tests.integration.harness import METRICS, RunningCdn, start_cdn

pytestmark = pytest.mark.integration


@pytest.fixture
def cdn(tmp_path: Path) -> Iterator[RunningCdn]:
    # Heartbeats every half second: the first edge's next one comes soon after the second registered.
    running = start_cdn(tmp_path, edges=1, env_extra={"ASSETCDN_EDGE_HEARTBEAT_INTERVAL_S": "0.5"})
    yield running
    running.stop()


async def test_control_says_when_two_edges_share_one_name(cdn: RunningCdn, tmp_path: Path) -> None:
    twin = start_edge(cdn.data_dir / "twin", tmp_path, name="edge-0", control_url=cdn.control_url,
                      env_extra={"ASSETCDN_EDGE_HEARTBEAT_INTERVAL_S": "0.5"})
    try:
        async with aiohttp.ClientSession() as session:
            await wait_healthy(session, twin.url)

            async def warned() -> str | None:
                lines = [line for line in cdn.log_path.read_text(errors="replace").splitlines()
                         if "WARNING" in line and "edge-0/0" in line and "share" in line]
                return lines[0] if lines else None

            line = await poll(warned, timeout_s=30, what="control's warning of two edges named edge-0")
    finally:
        twin.stop()
    assert line.count("http://127.0.0.1:") == 2  # both cluster addresses


async def test_control_says_when_two_edges_register_one_address(cdn: RunningCdn, tmp_path: Path) -> None:
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{cdn.control_url}/api/health?deep=1", headers=METRICS) as resp:
            (first,) = (await resp.json())["edges"]
        # A second edge advertising the first one's address (a copied --advertise-host behind one NAT address, say):
        # control's pushes for it reach the first, which refuses them, so it is pending in every purge answer.
        port = first["url"].rsplit(":", 1)[1]
        other = start_edge(cdn.data_dir / "other", tmp_path, name="edge-other", control_url=cdn.control_url,
                           env_extra={"ASSETCDN_EDGE_CLUSTER_ADVERTISE_PORT": port})
        try:
            await wait_healthy(session, other.url)

            async def warned() -> str | None:
                lines = [line for line in cdn.log_path.read_text(errors="replace").splitlines()
                         if "WARNING" in line and first["url"] in line and "edge-other/0" in line]
                return lines[0] if lines else None

            line = await poll(warned, timeout_s=30, what="control's warning of two edges at one address")
        finally:
            other.stop()
    assert "edge-0/0" in line
