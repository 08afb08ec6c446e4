"""Limits shared by every edge and worker: `assetcdn up` with two edges of two workers each, counting
in one Redis the test starts on a free loopback port (and, the default, in the machine's embedded
counter file). Under concurrent load from both edges, a limit of N passes exactly N requests:
signed URLs per client address and transforms per month.

When Redis goes away, cached files are still served, every edge and control report the counters
degraded, and each worker process counts alone (the documented fallback); when it is back, health
recovers and limits are shared again, without a restart.

The tests on the Redis cluster share it: each publishes its picture in its own zone, counts signed URLs
from its own client addresses and starts with an empty Redis (the transforms' monthly count is one for the
whole installation).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import aiohttp
import pytest
import pyvips

from assetcdn.shared.signing import signed_url
from tests.integration.harness import ACCESS, ACCOUNT, KEYS, METRICS, RunningCdn, start_cdn
from tests.support.redis.server import RedisServer, start_redis

pytestmark = pytest.mark.integration

ZONE = "limits"
FALLBACK_ZONE = "fallback"
LIMIT = 20
SECRET = KEYS["ASSETCDN_SIGNED_URL_SECRET"]
WAIT_S = 60.0
RETRY_S = 0.5  # [counters] retry_s: a process that saw the store fail asks it again after this long  # bounded waits for pushes and health changes on a loaded machine


def counter_env(**extra: str) -> dict[str, str]:
    return {"ASSETCDN_COUNTERS_SIGNED_RATE_LIMIT": str(LIMIT), "ASSETCDN_TRANSFORM_MONTHLY_LIMIT": str(LIMIT),
            "ASSETCDN_COUNTERS_RETRY_S": str(RETRY_S), "ASSETCDN_CONTROL_PUSH_WAIT_MS": "10000", **extra}


def square_png() -> bytes:
    return pyvips.Image.black(32, 32, bands=3).draw_rect([200, 40, 40], 8, 8, 16, 16, fill=True).pngsave_buffer()


@pytest.fixture(scope="module")
def redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = start_redis(tmp_path_factory.mktemp("redis"))
    yield server
    server.stop()


@pytest.fixture(scope="module", params=["redis", "embedded"])
def cdn(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningCdn]:
    env = counter_env()
    if request.param == "redis":
        server: RedisServer = request.getfixturevalue("redis")
        env.update(ASSETCDN_COUNTERS_BACKEND="redis", ASSETCDN_COUNTERS_REDIS_URL=server.url)
    running = start_cdn(tmp_path_factory.mktemp(f"counters-{request.param}"), edges=2, workers=2, env_extra=env)
    yield running
    assert running.stop() == 0


def fresh_connections(local_ip: str = "127.0.0.1") -> aiohttp.ClientSession:
    """A new connection per request, so SO_REUSEPORT spreads them over both workers of an edge."""
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True, local_addr=(local_ip, 0)))


def picture_of(zone: str) -> str:
    return f"{zone}/v1/banners/square.png"


async def publish_picture(cdn: RunningCdn, zone: str) -> str:
    """The test picture in a new zone, returned (its path) once every edge serves it."""
    picture = picture_of(zone)
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{cdn.control_url}/api/core/zones", json={"Name": zone}, headers=ACCOUNT) as resp:
            assert resp.status == 201, await resp.text()
        async with session.put(f"{cdn.control_url}/api/storage/{picture}", data=square_png(), headers=ACCESS) as resp:
            assert resp.status == 201, await resp.text()
        for edge in cdn.edge_urls:
            deadline = time.monotonic() + WAIT_S
            while True:
                async with session.get(f"{edge}/{picture}") as resp:
                    if resp.status == 200:
                        break
                assert time.monotonic() < deadline, f"{picture} never reached {edge}"
                await asyncio.sleep(0.2)
    return picture


async def statuses(session: aiohttp.ClientSession, urls: list[str]) -> list[tuple[int, dict[str, str], dict]]:
    async def one(url: str) -> tuple[int, dict[str, str], dict]:
        async with session.get(url) as resp:
            body = await resp.json(content_type=None) if resp.status != 200 else {}
            return resp.status, dict(resp.headers), body
    return list(await asyncio.gather(*(one(url) for url in urls)))


async def test_a_limit_passes_exactly_n_across_two_edges_of_two_workers(cdn: RunningCdn,
                                                                       request: pytest.FixtureRequest) -> None:
    if request.node.callspec.params["cdn"] == "redis":
        request.getfixturevalue("redis").flush()  # the transforms' monthly count is the installation's
    picture = await publish_picture(cdn, ZONE)
    async with fresh_connections() as session:
        # Signed URLs: 80 at once, spread over both edges (and their workers), from one client address.
        urls = [signed_url(cdn.edge_urls[i % 2], SECRET, f"/{picture}", 600) for i in range(4 * LIMIT)]
        answers = await statuses(session, urls)
        assert sorted(status for status, _, _ in answers) == [200] * LIMIT + [429] * (3 * LIMIT)
        for status, headers, body in answers:
            assert headers["X-RateLimit-Limit"] == str(LIMIT)
            if status == 429:
                assert body["error"] == "Rate limit exceeded" and body["HttpCode"] == 429  # legacy envelope
                assert 1 <= int(headers["Retry-After"]) <= 60 and headers["X-RateLimit-Remaining"] == "0"
        remaining = sorted(int(headers["X-RateLimit-Remaining"]) for status, headers, _ in answers if status == 200)
        assert remaining == list(range(LIMIT))  # every count was given out once

        # Transforms per month: 2N different variants at once over both edges, N made.
        urls = [f"{cdn.edge_urls[w % 2]}/api/transform?url=/{picture}&w={w}&format=png" for w in range(1, 2 * LIMIT + 1)]
        answers = await statuses(session, urls)
        assert sorted(status for status, _, _ in answers) == [200] * LIMIT + [429] * LIMIT
        refused = [body for status, _, body in answers if status == 429]
        assert all(body["error"] == "limit_reached" for body in refused)


async def health(session: aiohttp.ClientSession, url: str) -> tuple[int, dict]:
    async with session.get(f"{url}/api/health?deep=1", headers=METRICS) as resp:
        return resp.status, await resp.json()


def counters_check(body: dict) -> dict:
    return next(check for check in body["checks"] if check["name"] == "counters")


async def wait_health(session: aiohttp.ClientSession, urls: list[str], healthy: bool) -> None:
    deadline = time.monotonic() + WAIT_S
    while True:
        checks = [counters_check((await health(session, url))[1]) for url in urls]
        if all(check["healthy"] is healthy for check in checks):
            return
        assert time.monotonic() < deadline, checks
        await asyncio.sleep(0.2)


@pytest.mark.parametrize("cdn", ["redis"], indirect=True)
async def test_without_redis_edges_serve_hits_count_per_process_and_recover(
        cdn: RunningCdn, redis: RedisServer) -> None:
    redis.flush()
    picture = await publish_picture(cdn, FALLBACK_ZONE)
    transform = f"/api/transform?url=/{picture}&w=16&format=png"
    try:
        await fallback_and_recovery(cdn, redis, picture, transform)
    finally:
        if redis.process is None:  # the cluster's other test finds its Redis however this one ended
            redis.start()


async def fallback_and_recovery(cdn: RunningCdn, redis: RedisServer, picture: str, transform: str) -> None:
    async with aiohttp.ClientSession() as session:
        for edge in cdn.edge_urls:  # made on each edge while Redis counts
            async with session.get(edge + transform) as resp:
                assert resp.status == 200, (edge, await resp.text())
        redis.stop()
        for edge in cdn.edge_urls:  # cached files and variants are still served
            for path in (f"/{picture}", transform):
                async with session.get(edge + path) as resp:
                    assert resp.status == 200 and resp.headers["X-Cache"] == "HIT", (edge, path)
        await wait_health(session, [*cdn.edge_urls, cdn.control_url], healthy=False)
        status, body = await health(session, cdn.edge_urls[0])
        assert status == 503 and body["status"] == "degraded"
        assert counters_check(body)["fallback"] == "per-process"

    # One connection reaches one worker: alone, it allows a new address exactly N.
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(local_addr=("127.0.0.2", 0))) as one:
        url = signed_url(cdn.edge_urls[0], SECRET, f"/{picture}", 600)
        alone = []
        for _ in range(2 * LIMIT):
            async with one.get(url) as resp:
                await resp.read()
                alone.append(resp.status)
        assert alone == [200] * LIMIT + [429] * LIMIT

    redis.start()  # same port: the stores reconnect by themselves
    async with aiohttp.ClientSession() as session:
        await wait_health(session, [*cdn.edge_urls, cdn.control_url], healthy=True)
    # Health reached one worker per edge; every other process that saw the store fail uses it again
    # on its first hit once retry_s has passed since its last failure (the documented bound).
    await asyncio.sleep(2 * RETRY_S)
    async with fresh_connections("127.0.0.3") as session:
        urls = [signed_url(cdn.edge_urls[i % 2], SECRET, f"/{picture}", 600) for i in range(3 * LIMIT)]
        answers = await statuses(session, urls)
        assert sorted(status for status, _, _ in answers) == [200] * LIMIT + [429] * (2 * LIMIT), \
            [(status, headers.get("X-RateLimit-Remaining")) for status, headers, _ in answers]
