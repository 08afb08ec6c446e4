"""Anonymous floods against a real `assetcdn up`, beside uploads: what the flood tests and
benchmarks/control_flood_bench.py share."""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from typing import Any

import aiohttp

from assetcdn.shared.cluster import FORWARDED_HEADER, sign_forwarded
from tests.control.identity.signin_client import session_from
from tests.control.identity.soft_authenticator import SoftAuthenticator
from tests.integration.harness import ACCESS, ACCOUNT, KEYS, RunningCdn

PASSWORD = "a dashboard password for the flood test"
ZONE = "flood"
CONCURRENCY = 10
# 50 client addresses, IPv4 and IPv6 in distinct /64s, named in X-Forwarded-For and signed as an edge
# signs what it forwards (control believes nothing else).
ADDRESSES = [f"198.51.100.{i}" for i in range(1, 26)] + [f"2001:db8:{i:x}::1" for i in range(1, 26)]
CATCH_UP_WAIT_S = 30.0  # an edge that did not acknowledge a push in time catches up on its own (0.5 s interval)


async def prepare(cdn: RunningCdn) -> None:
    """A zone to upload to, and one registered passkey (so auth/begin names a credential), signed in
    where a browser signs in: the dashboard's own origin (the edges and control's API port refuse it)."""
    dashboard = cdn.dashboard_url
    origin = dashboard.replace("127.0.0.1", "localhost")
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{cdn.control_url}/api/core/zones", json={"Name": ZONE}, headers=ACCOUNT) as resp:
            assert resp.status == 201, await resp.text()
        async with http.post(f"{dashboard}/dashboard/login", data={"password": PASSWORD}, headers={"Origin": origin},
                             allow_redirects=False) as resp:
            assert resp.status == 302, await resp.text()
            session = session_from(resp)
        signed_in = {"Cookie": f"cdn_session={session}", "Origin": origin}
        async with http.post(f"{dashboard}/api/passkeys/register/begin", headers=signed_in) as resp:
            assert resp.status == 200, await resp.text()
            options = await resp.json()
        credential = SoftAuthenticator(origin=origin).create(options)
        async with http.post(f"{dashboard}/api/passkeys/register/complete", json={"credential": credential},
                             headers=signed_in) as resp:
            assert resp.status == 201, await resp.text()


@dataclass(frozen=True)
class Upload:
    status: int
    seconds: float
    body: bytes
    path: str          # its CDN path
    acknowledged: bool  # every edge applied it before the answer (EdgeNote), so each serves it at once


async def upload(http: aiohttp.ClientSession, cdn: RunningCdn, name: str) -> Upload:
    """PUT one small file."""
    body = f"flood test {name} {uuid.uuid4()}\n".encode()
    path = f"{ZONE}/v1/docs/{name}.txt"
    started = time.monotonic()
    async with http.put(f"{cdn.control_url}/api/storage/{path}", data=body,
                        headers={**ACCESS, "Checksum": hashlib.sha256(body).hexdigest()}) as resp:
        answer = await resp.json(content_type=None)
        seconds = time.monotonic() - started
    edges = len(cdn.edge_urls)
    acknowledged = f"Acknowledged by {edges} of {edges} edges" in str(answer.get("EdgeNote", ""))
    return Upload(resp.status, seconds, body, path, acknowledged)


async def served_by_edge(http: aiohttp.ClientSession, cdn: RunningCdn, made: Upload) -> bool:
    """The edge answers the upload's bytes: at the first request when it acknowledged the push, else once it
    has caught up (bounded by CATCH_UP_WAIT_S, never asserted as a duration)."""
    deadline = time.monotonic() + (0 if made.acknowledged else CATCH_UP_WAIT_S)
    while True:
        async with http.get(f"{cdn.edge_urls[0]}/{made.path}") as resp:
            if resp.status == 200 and await resp.read() == made.body:
                return True
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.05)


async def flood(cdn: RunningCdn, method: str, path: str, count: int, *, sources: list[str] = ADDRESSES,
                base_url: str | None = None, **request: Any) -> Counter[int]:
    """`count` anonymous requests to `base_url` (control's API port unless named), CONCURRENCY at a
    time, each from the next of `sources`."""
    base = base_url or cdn.control_url
    statuses: Counter[int] = Counter()
    addresses = itertools.cycle(sources)
    remaining = iter(range(count))
    cluster_secret = KEYS["ASSETCDN_CLUSTER_SECRET"]

    async def worker(http: aiohttp.ClientSession) -> None:
        for _ in remaining:
            address = next(addresses)
            headers = {"X-Forwarded-For": address, FORWARDED_HEADER: sign_forwarded(cluster_secret, address)}
            async with http.request(method, f"{base}{path}", headers=headers, **request) as resp:
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
            beside = await upload(http, cdn, f"beside-{uuid.uuid4().hex[:8]}")
            made.append((beside.status, beside.seconds))
    return made
