"""An edge of a fleet started again with a cluster secret that is not control's (an old one, a typo): control refuses
every call it signs (401), so it learns of no purge and no overwrite. It must not pass for current: what it holds
from before is served as it is when control cannot be reached (STALE, not HIT), its health says why it is not
healthy, and its log says so once, without the secret (assetcdn/edge/control_client.py). An edge whose signed-URL
secret is not control's refuses the URLs signed with control's (403): its health and log say so too."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.integration.faults import (
    EdgeProcess,
    control_check,
    health,
    poll,
    start_edge,
    wait_healthy,
)
from tests.integration.harness import ACCESS, ACCOUNT, KEYS, PURGE, RunningCdn, start_cdn

pytestmark = pytest.mark.integration

WRONG_SECRET = "not-the-cluster-secret"
WRONG_SIGNED_URL_SECRET = "not-the-signed-url-secret"
PATH = "/creds/v1/logos/file.txt"


@pytest.fixture
def cdn(tmp_path: Path) -> Iterator[RunningCdn]:
    running = start_cdn(tmp_path, edges=1)
    yield running
    running.stop()


async def _get(session: aiohttp.ClientSession, url: str) -> tuple[int, str, bytes]:
    async with session.get(url) as resp:
        return resp.status, resp.headers.get("X-Cache", ""), await resp.read()


async def _health_naming(session: aiohttp.ClientSession, edge: EdgeProcess, secret: str) -> dict[str, Any]:
    """The edge's control check once its health answers 503 and that check's error names `secret` (bounded)."""
    async def says_why() -> dict[str, Any] | None:
        status, body = await health(session, edge.url)
        check = control_check(body)
        return check if status == 503 and secret in check.get("error", "") else None

    return await poll(says_why, timeout_s=30, what=f"{edge.name}'s health naming its {secret}")


async def test_an_edge_with_a_wrong_cluster_secret_serves_nothing_as_current_and_says_why(
        cdn: RunningCdn, tmp_path: Path) -> None:
    writer = cdn.edge_urls[0]
    edge: EdgeProcess = start_edge(cdn.data_dir, tmp_path, name="edge-old", control_url=cdn.control_url)
    try:
        async with aiohttp.ClientSession() as session:
            await wait_healthy(session, edge.url)
            async with session.post(f"{writer}/api/core/zones", json={"Name": "creds"}, headers=ACCOUNT) as resp:
                assert resp.status == 201
            async with session.put(f"{writer}/api/storage{PATH}", data=b"before", headers=ACCESS) as resp:
                assert resp.status == 201

            async def cached() -> bool | None:
                status, cache, _ = await _get(session, f"{edge.url}{PATH}")
                return True if status == 200 and cache == "HIT" else None

            await poll(cached, timeout_s=30, what="the file cached on edge-old")
            edge.stop()

            # The same edge (its name, its cache) started again with another secret; the file is purged meanwhile.
            edge = start_edge(cdn.data_dir, tmp_path, name="edge-old", control_url=cdn.control_url,
                              env_extra={"ASSETCDN_CLUSTER_SECRET": WRONG_SECRET})
            async with session.post(f"{writer}/api/purge", json={"urls": [PATH]}, headers=PURGE) as resp:
                assert resp.status == 200

            async def answering() -> bool | None:
                status, _ = await health(session, edge.url)
                return True if status == 503 else None  # not caught up with control: never healthy

            await poll(answering, timeout_s=30, what="edge-old answering again")
            status, cache, data = await _get(session, f"{edge.url}{PATH}")
            assert (status, cache, data) == (200, "STALE", b"before")  # purged since: never passed for current
            check = await _health_naming(session, edge, "cluster secret")  # control refuses its signature
            assert check["healthy"] is False
    finally:
        edge.stop()
    log = edge.log_path.read_text()
    assert "cluster secret" in log and "ERROR" in log
    assert WRONG_SECRET not in log


async def test_an_edge_with_another_signed_url_secret_says_so(cdn: RunningCdn, tmp_path: Path) -> None:
    edge = start_edge(cdn.data_dir, tmp_path, name="edge-signed", control_url=cdn.control_url,
                      env_extra={"ASSETCDN_SIGNED_URL_SECRET": WRONG_SIGNED_URL_SECRET})
    try:
        async with aiohttp.ClientSession() as session:
            check = await _health_naming(session, edge, "signed-URL secret")
            assert check["healthy"] is False
    finally:
        edge.stop()
    log = edge.log_path.read_text()
    assert "signed-URL secret" in log and "ERROR" in log
    assert WRONG_SIGNED_URL_SECRET not in log and KEYS["ASSETCDN_SIGNED_URL_SECRET"] not in log
