"""Anonymous floods against real processes (`assetcdn up`) never break control's writes: while 1,000
`POST /api/passkeys/auth/begin` (10 at a time, from 50 addresses named by a trusted proxy) run beside
uploads, no answer is a 5xx, every upload is stored, and afterwards an upload, a zone and a token are
created and the edge serves the new file. The same holds for every other route a stranger may call."""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest

from tests.control.signin_client import session_from
from tests.control.soft_authenticator import SoftAuthenticator
from tests.integration.harness import ACCESS, ACCOUNT, RunningCdn, start_cdn

pytestmark = pytest.mark.integration

PASSWORD = "a dashboard password for the flood test"
ZONE = "flood"
CONCURRENCY = 10
# 50 client addresses, IPv4 and IPv6 in distinct /64s, named in X-Forwarded-For by a loopback peer
# (control believes a trusted proxy).
ADDRESSES = [f"198.51.100.{i}" for i in range(1, 26)] + [f"2001:db8:{i:x}::1" for i in range(1, 26)]
SERVED_WITHIN_S = 2.0  # the brief: an upload made after a flood is served by the edge this soon


@pytest.fixture(scope="module")
def cdn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningCdn]:
    running = start_cdn(tmp_path_factory.mktemp("flood"), env_extra={
        "ASSETCDN_DASHBOARD_SECRET": PASSWORD, "ASSETCDN_SEARCH_SEMANTIC": "false"})
    try:
        asyncio.run(_prepare(running))
        yield running
    finally:
        running.stop()


async def _prepare(cdn: RunningCdn) -> None:
    """A zone to upload to, and one registered passkey (so auth/begin names a credential)."""
    edge = cdn.edge_urls[0]
    origin = edge.replace("127.0.0.1", "localhost")
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{cdn.control_url}/api/core/zones", json={"Name": ZONE}, headers=ACCOUNT) as resp:
            assert resp.status == 201, await resp.text()
        async with http.post(f"{edge}/dashboard/login", data={"password": PASSWORD}, headers={"Origin": origin},
                             allow_redirects=False) as resp:
            assert resp.status == 302, await resp.text()
            session = session_from(resp)
        signed_in = {"Cookie": f"cdn_session={session}", "Origin": origin}
        async with http.post(f"{edge}/api/passkeys/register/begin", headers=signed_in) as resp:
            assert resp.status == 200, await resp.text()
            options = await resp.json()
        credential = SoftAuthenticator(origin=origin).create(options)
        async with http.post(f"{edge}/api/passkeys/register/complete", json={"credential": credential},
                             headers=signed_in) as resp:
            assert resp.status == 201, await resp.text()


async def upload(http: aiohttp.ClientSession, cdn: RunningCdn, name: str) -> tuple[int, float, bytes, str]:
    """PUT one small file; (status, seconds it took, its bytes, its CDN path)."""
    body = f"flood test {name} {uuid.uuid4()}\n".encode()
    path = f"{ZONE}/v1/docs/{name}.txt"
    started = time.monotonic()
    async with http.put(f"{cdn.control_url}/api/storage/{path}", data=body,
                        headers={**ACCESS, "Checksum": hashlib.sha256(body).hexdigest()}) as resp:
        await resp.read()
        return resp.status, time.monotonic() - started, body, path


async def served_by_edge(http: aiohttp.ClientSession, cdn: RunningCdn, path: str, body: bytes) -> bool:
    deadline = time.monotonic() + SERVED_WITHIN_S
    while True:
        async with http.get(f"{cdn.edge_urls[0]}/{path}") as resp:
            if resp.status == 200 and await resp.read() == body:
                return True
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.05)


async def flood(cdn: RunningCdn, method: str, path: str, count: int, **request: Any) -> Counter[int]:
    """`count` anonymous requests, CONCURRENCY at a time, each from the next of ADDRESSES."""
    statuses: Counter[int] = Counter()
    addresses = itertools.cycle(ADDRESSES)
    remaining = iter(range(count))

    async def worker(http: aiohttp.ClientSession) -> None:
        for _ in remaining:
            headers = {"X-Forwarded-For": next(addresses)}
            async with http.request(method, f"{cdn.control_url}{path}", headers=headers, **request) as resp:
                await resp.read()
                statuses[resp.status] += 1

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as http:
        await asyncio.gather(*(worker(http) for _ in range(CONCURRENCY)))
    return statuses


async def uploads_beside(cdn: RunningCdn, flooding: asyncio.Task[Counter[int]]) -> list[tuple[int, float]]:
    """Upload one file after another until the flood ends: (status, seconds) of each."""
    made: list[tuple[int, float]] = []
    async with aiohttp.ClientSession() as http:
        while not flooding.done() or not made:
            status, seconds, _, _ = await upload(http, cdn, f"beside-{uuid.uuid4().hex[:8]}")
            made.append((status, seconds))
    return made


async def assert_writes_work(cdn: RunningCdn) -> None:
    """An upload answers 201 and the edge serves it; a zone and a token are created."""
    async with aiohttp.ClientSession() as http:
        status, _, body, path = await upload(http, cdn, f"after-{uuid.uuid4().hex[:8]}")
        assert status == 201
        assert await served_by_edge(http, cdn, path, body), f"the edge did not serve {path}"
        async with http.post(f"{cdn.control_url}/api/core/zones", json={"Name": f"z{uuid.uuid4().hex[:10]}"},
                             headers=ACCOUNT) as resp:
            assert resp.status == 201, await resp.text()
        async with http.post(f"{cdn.control_url}/api/tokens", json={"name": "after the flood",
                                                                    "scopes": ["storage:read"]},
                             headers=ACCOUNT) as resp:
            assert resp.status == 201, await resp.text()


async def test_a_thousand_passkey_begins_beside_uploads_break_nothing(cdn: RunningCdn) -> None:
    flooding = asyncio.create_task(flood(cdn, "POST", "/api/passkeys/auth/begin", 1000))
    made = await uploads_beside(cdn, flooding)
    statuses = await flooding
    assert statuses == Counter({200: 1000}), statuses
    assert [status for status, _ in made] == [201] * len(made)
    await assert_writes_work(cdn)


ASSERTION = {"id": "AAAA", "rawId": "AAAA", "type": "public-key",
             "response": {"clientDataJSON": "eyJjaGFsbGVuZ2UiOiJBQUFBIn0", "authenticatorData": "AAAA",
                          "signature": "AAAA"}}
UNAUTHENTICATED = [
    pytest.param("POST", "/dashboard/login", {"data": {"password": "a guess"}}, id="dashboard-login"),
    pytest.param("POST", "/api/passkeys/auth/begin", {}, id="passkey-auth-begin"),
    pytest.param("POST", "/api/passkeys/auth/complete", {"json": {"credential": ASSERTION}},
                 id="passkey-auth-complete"),
    pytest.param("POST", "/api/analytics", {"json": {"path": f"/{ZONE}/v1/docs/a.txt", "status": 200,
                                                     "bytes": 10}}, id="analytics-track"),
    pytest.param("POST", "/api/chat", {"json": {"message": "How do I purge a file?"}}, id="chat"),
    pytest.param("GET", "/api/search?q=logo", {}, id="search"),
]


@pytest.mark.parametrize(("method", "path", "request_args"), UNAUTHENTICATED)
async def test_a_flood_on_any_public_route_leaves_writes_working(cdn: RunningCdn, method: str, path: str,
                                                                 request_args: dict[str, Any]) -> None:
    flooding = asyncio.create_task(flood(cdn, method, path, 200, **request_args))
    made = await uploads_beside(cdn, flooding)
    statuses = await flooding
    assert not [status for status in statuses if status >= 500], statuses
    assert [status for status, _ in made] == [201] * len(made)
    await assert_writes_work(cdn)
