"""Partition: an edge whose links to and from control run through a proxy that the test cuts. Cut off, it
misses a push (an overwrite), a purge and a new file, keeps serving what it has (STALE) and its health shows
the lag (as does control's); healed, it converges by itself: control's generation, the new bytes, the
purged entry gone. The time from healing to converged is measured (logged), not asserted."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from tests.integration.faults import (
    BlockingProxy,
    EdgeProcess,
    control_check,
    health,
    poll,
    start_edge,
    wait_healthy,
)
from tests.integration.harness import ACCESS, ACCOUNT, PURGE, RunningCdn, free_port_block, start_cdn

pytestmark = pytest.mark.integration
log = logging.getLogger(__name__)


class Partitioned:
    def __init__(self, cdn: RunningCdn, edge: EdgeProcess, to_control: BlockingProxy,
                 to_edge: BlockingProxy) -> None:
        self.cdn, self.edge, self.to_control, self.to_edge = cdn, edge, to_control, to_edge

    def cut(self) -> None:
        self.to_control.cut()
        self.to_edge.cut()

    def heal(self) -> None:
        self.to_control.heal()
        self.to_edge.heal()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Partitioned]:
    tmp: Path = tmp_path_factory.mktemp("partition")
    cdn = start_cdn(tmp, edges=1)
    to_control = BlockingProxy(int(cdn.control_url.rsplit(":", 1)[1]))
    cluster_port = free_port_block(1)
    to_edge = BlockingProxy(cluster_port)
    edge = None
    try:
        to_control.start()
        to_edge.start()
        # The cut-off edge reaches control through one proxy and is pushed to through the other.
        edge = start_edge(cdn.data_dir, tmp, name="edge-cut", control_url=f"http://127.0.0.1:{to_control.port}",
                          env_extra={"ASSETCDN_EDGE_CLUSTER_PORT": str(cluster_port),
                                     "ASSETCDN_EDGE_CLUSTER_ADVERTISE_PORT": str(to_edge.port)})
        yield Partitioned(cdn, edge, to_control, to_edge)
    finally:
        if edge is not None:
            edge.stop()
        to_control.close()
        to_edge.close()
        cdn.stop()


async def _get(session: aiohttp.ClientSession, url: str) -> tuple[int, str, bytes]:
    async with session.get(url) as resp:
        return resp.status, resp.headers.get("X-Cache", ""), await resp.read()


async def test_a_cut_off_edge_shows_its_lag_and_converges_after_healing(cluster: Partitioned) -> None:
    cdn, cut_url = cluster.cdn, cluster.edge.url
    writer = cdn.edge_urls[0]
    base = "/split/v1/logos"
    async with aiohttp.ClientSession() as session:
        await wait_healthy(session, cut_url)
        async with session.post(f"{writer}/api/core/zones", json={"Name": "split"}, headers=ACCOUNT) as resp:
            assert resp.status == 201
        for name, data in (("changed.txt", b"before"), ("purged.txt", b"purged")):
            async with session.put(f"{writer}/api/storage{base}/{name}", data=data, headers=ACCESS) as resp:
                assert resp.status == 201, await resp.text()

        async def cached(path: str) -> bytes | None:
            status, cache, data = await _get(session, f"{cut_url}{path}")
            return data if status == 200 and cache == "HIT" else None

        for name in ("changed.txt", "purged.txt"):
            await poll(lambda name=name: cached(f"{base}/{name}"), timeout_s=30, what=f"{name} cached on edge-cut")

        cluster.cut()
        try:
            async with session.put(f"{writer}/api/storage{base}/changed.txt", data=b"after", headers=ACCESS) as resp:
                assert resp.status == 201
                assert "not yet: edge-cut" in (await resp.json())["EdgeNote"]
            async with session.post(f"{writer}/api/purge", json={"urls": [f"{base}/purged.txt"]},
                                    headers=PURGE) as resp:
                assert resp.status == 200, await resp.text()
            async with session.put(f"{writer}/api/storage{base}/added.txt", data=b"added", headers=ACCESS) as resp:
                assert resp.status == 201

            # Cut off, it shows its lag and serves what it has, marked STALE.
            async def lagging() -> dict | None:
                status, body = await health(session, cut_url)
                check = control_check(body)
                return check if status == 503 and check["circuit"] == "open" and check["lagSeconds"] else None

            check = await poll(lagging, timeout_s=30, what="edge-cut health shows it is cut off")
            assert check["healthy"] is False and check["lastContactSecondsAgo"] > 0
            _, control_view = await health(session, cdn.control_url, deep=True)
            cut_view = next(e for e in control_view["edges"] if e["name"].startswith("edge-cut"))
            assert cut_view["generationsBehind"] >= 3
            assert await _get(session, f"{cut_url}{base}/changed.txt") == (200, "STALE", b"before")
            assert await _get(session, f"{cut_url}{base}/purged.txt") == (200, "STALE", b"purged")
            status, _, _ = await _get(session, f"{cut_url}{base}/added.txt")
            assert status == 404  # not in the generation it holds
        finally:
            cluster.heal()
        healed = time.monotonic()

        _, control_health = await health(session, cdn.control_url)
        target = control_health["manifestGeneration"]

        async def converged() -> float | None:
            _, body = await health(session, cut_url)
            if body["manifestGeneration"] != target:
                return None
            return time.monotonic() - healed

        generation_s = await poll(converged, timeout_s=30, what="edge-cut reaches control's generation",
                                  interval_s=0.01)
        # The purge it missed was applied: the entry is gone (fetched again: MISS), and it holds the new bytes.
        # Right after the pushes it missed arrived (before its own next call to control), as a client would.
        assert await _get(session, f"{cut_url}{base}/purged.txt") == (200, "MISS", b"purged")
        assert (await _get(session, f"{cut_url}{base}/changed.txt"))[::2] == (200, b"after")
        assert (await _get(session, f"{cut_url}{base}/added.txt"))[::2] == (200, b"added")
        log.warning("edge-cut converged %.3f s after the partition healed", generation_s)
        body = await wait_healthy(session, cut_url)
        assert control_check(body)["circuit"] == "closed"
