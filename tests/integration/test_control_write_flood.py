"""Anonymous floods against real processes (`assetcdn up`) never break control's writes: while 1,000
`POST /api/passkeys/auth/begin` (10 at a time, from 50 addresses named by a trusted proxy) run beside
uploads, no answer is a 5xx, every upload is stored, and afterwards an upload, a zone and a token are
created and the edge serves the new file (at once when its push was acknowledged before the upload
answered). The same holds for every other route a stranger may call."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest

from tests.integration.flood import (
    ADDRESSES,
    PASSWORD,
    ZONE,
    flood,
    prepare,
    served_by_edge,
    upload,
    uploads_beside,
)
from tests.integration.harness import ACCOUNT, RunningCdn, start_cdn

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cdn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningCdn]:
    running = start_cdn(tmp_path_factory.mktemp("flood"), env_extra={
        "ASSETCDN_DASHBOARD_SECRET": PASSWORD, "ASSETCDN_SEARCH_SEMANTIC": "false"})
    try:
        asyncio.run(prepare(running))
        yield running
    finally:
        running.stop()


async def assert_writes_work(cdn: RunningCdn) -> None:
    """An upload answers 201 and the edge serves it; a zone and a token are created."""
    async with aiohttp.ClientSession() as http:
        made = await upload(http, cdn, f"after-{uuid.uuid4().hex[:8]}")
        assert made.status == 201
        assert await served_by_edge(http, cdn, made), f"the edge did not serve {made.path}"
        async with http.post(f"{cdn.control_url}/api/core/zones", json={"Name": f"z{uuid.uuid4().hex[:10]}"},
                             headers=ACCOUNT) as resp:
            assert resp.status == 201, await resp.text()
        async with http.post(f"{cdn.control_url}/api/tokens", json={"name": "after the flood",
                                                                    "scopes": ["storage:read"]},
                             headers=ACCOUNT) as resp:
            assert resp.status == 201, await resp.text()


@pytest.mark.parametrize("sources", [ADDRESSES, ["203.0.113.99"]], ids=["50-addresses", "one-address"])
async def test_a_thousand_passkey_begins_beside_uploads_break_nothing(cdn: RunningCdn, sources: list[str]) -> None:
    flooding = asyncio.create_task(flood(cdn, "POST", "/api/passkeys/auth/begin", 1000, sources=sources))
    made = await uploads_beside(cdn, flooding)
    statuses = await flooding
    assert statuses == Counter({200: 1000}), statuses
    assert [status for status, _ in made] == [201] * len(made)
    await assert_writes_work(cdn)


ASSERTION = {"id": "AAAA", "rawId": "AAAA", "type": "public-key",
             "response": {"clientDataJSON": "eyJjaGFsbGVuZ2UiOiJBQUFBIn0", "authenticatorData": "AAAA",
                          "signature": "AAAA"}}
# (method, path, request, on the dashboard's origin, the statuses a stranger gets): each flood must reach
# its route's handler (a 404 from the wrong listener would exercise no write at all).
UNAUTHENTICATED = [
    pytest.param("POST", "/dashboard/login", {"data": {"password": "a guess"}}, True, {401, 429},
                 id="dashboard-login"),
    pytest.param("POST", "/api/passkeys/auth/begin", {}, True, {200}, id="passkey-auth-begin"),
    pytest.param("POST", "/api/passkeys/auth/complete", {"json": {"credential": ASSERTION}}, True, {400, 401, 429},
                 id="passkey-auth-complete"),
    pytest.param("POST", "/api/analytics", {"json": {"path": f"/{ZONE}/v1/docs/a.txt", "status": 200,
                                                     "bytes": 10}}, False, {200, 429},
                 id="analytics-track"),
    pytest.param("POST", "/api/chat", {"json": {"message": "How do I purge a file?"}}, False, {200, 429}, id="chat"),
    pytest.param("GET", "/api/search?q=logo", {}, False, {200, 429, 503}, id="search"),
]


@pytest.mark.parametrize(("method", "path", "request_args", "on_dashboard", "expected"), UNAUTHENTICATED)
async def test_a_flood_on_any_public_route_leaves_writes_working(cdn: RunningCdn, method: str, path: str,
                                                                 request_args: dict[str, Any], on_dashboard: bool,
                                                                 expected: set[int]) -> None:
    base_url = cdn.dashboard_url if on_dashboard else cdn.control_url
    flooding = asyncio.create_task(flood(cdn, method, path, 200, base_url=base_url, **request_args))
    made = await uploads_beside(cdn, flooding)
    statuses = await flooding
    assert set(statuses) <= expected, statuses
    assert [status for status, _ in made] == [201] * len(made)
    await assert_writes_work(cdn)
