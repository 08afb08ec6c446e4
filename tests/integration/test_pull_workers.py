"""The workers of one edge, each its own process under a real `assetcdn up`, take turns at a URL's fill
(assetcdn/edge/cache/fill_lock.py): new URLs asked of the edge on several connections at once, which the
kernel spreads over its two workers, each cost the origin one request, and no worker asks the other for one
over the cluster protocol (no shield member in Cache-Status)."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import Iterator

import aiohttp
import pytest
from aiohttp import web

from tests.integration.harness import ACCOUNT, RunningCdn, start_cdn
from tests.support.origins import CountingOrigin, held_answer, origin_app

pytestmark = pytest.mark.integration

OBJECTS = 120
AT_ONCE = 4          # connections asking for each object together
WAIT_S = 60.0        # bound of the wait for the zone to reach both workers (never asserted as a duration)


@pytest.fixture(scope="module")
def cdn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningCdn]:
    running = start_cdn(tmp_path_factory.mktemp("pull-workers"), workers=2,
                        env_extra={"ASSETCDN_ORIGIN_ALLOW_LOOPBACK": "true"})
    yield running
    running.stop()


async def zone_on_every_worker(session: aiohttp.ClientSession, cdn: RunningCdn, name: str, url: str) -> None:
    async with session.post(f"{cdn.control_url}/api/core/zones", json={"Name": name, "Origin": {"Url": url}},
                            headers=ACCOUNT) as resp:
        assert resp.status == 201, await resp.text()
    deadline = asyncio.get_running_loop().time() + WAIT_S
    while sum(f'"{name}"'.encode() in config.read_bytes() for config in cdn.data_dir.rglob("edge-config-*.json")) < 2:
        assert asyncio.get_running_loop().time() < deadline, "the zone never reached both workers"
        await asyncio.sleep(0.1)


async def test_a_new_url_asked_of_both_workers_at_once_costs_the_origin_one_request(cdn: RunningCdn) -> None:
    origin = CountingOrigin(delay_s=0.05)
    paths = [f"/objects/{i}.txt" for i in range(OBJECTS)]
    edge = cdn.edge_urls[0]
    # A connection each (no pooling between them): the kernel hands each new connection to one of the workers.
    sessions = [aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) for _ in range(AT_ONCE)]
    try:
        async with origin_app(origin.app) as url:
            await zone_on_every_worker(sessions[0], cdn, "turns", url)

            async def fetch(session: aiohttp.ClientSession, path: str) -> tuple[int, bytes, str]:
                async with session.get(f"{edge}/turns{path}") as resp:
                    return resp.status, await resp.read(), ",".join(resp.headers.getall("Cache-Status", []))

            answers = []
            for path in paths:
                answers += await asyncio.gather(*(fetch(session, path) for session in sessions))
    finally:
        for session in sessions:
            await session.close()
    assert [(status, body) for status, body, _ in answers] == [
        (200, f"body of {path}".encode()) for path in paths for _ in sessions]
    assert origin.asked == Counter(paths)  # once each, for both workers
    assert not [status for _, _, status in answers if "assetcdn-shield" in status]


LARGE = bytes(range(256)) * (8 * 1024)  # 2 MB: past the 1 MB a fill holds in memory, its waiters streamed
HELD = len(LARGE) * 3 // 4
CLIENTS = 8           # the kernel hands all of them to one worker in about one run of a hundred
STREAMED_S = 30.0     # bounds only a client that waits for the whole body (never asserted as a duration)


async def test_a_large_new_url_asked_of_both_workers_at_once_reaches_every_client_as_it_is_read(
        cdn: RunningCdn) -> None:
    """The origin sends 1.5 MB of a 2 MB body, then holds the rest: every client of eight asking for it at once, on
    either worker, is sent those 1.5 MB meanwhile, from the one fill of the worker that took the URL's turn (the other
    worker's clients from the file that fill publishes, assetcdn/edge/states/growing.py), then the rest. The origin
    is asked once, and no published file is left once the fill is over."""
    asked = Counter[str]()
    release = asyncio.Event()

    answer = held_answer(LARGE, {"Cache-Control": "max-age=600", "Content-Type": "video/mp4"}, HELD, release)

    async def held(request: web.Request) -> web.StreamResponse:
        asked[request.path] += 1
        return await answer(request)

    app = web.Application()
    app.router.add_get("/{tail:.*}", held)
    edge = cdn.edge_urls[0]
    sessions = [aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) for _ in range(CLIENTS)]
    try:
        async with origin_app(app) as url, contextlib.AsyncExitStack() as stack:
            await zone_on_every_worker(sessions[0], cdn, "largefill", url)

            async def first_part(session: aiohttp.ClientSession) -> tuple[aiohttp.ClientResponse, bytes]:
                resp = await stack.enter_async_context(session.get(f"{edge}/largefill/video.mp4"))
                return resp, await resp.content.readexactly(HELD)

            parts = await asyncio.wait_for(asyncio.gather(*(first_part(session) for session in sessions)), STREAMED_S)
            assert [(resp.status, part) for resp, part in parts] == [(200, LARGE[:HELD])] * CLIENTS
            release.set()
            assert [await resp.read() for resp, _ in parts] == [LARGE[HELD:]] * CLIENTS
    finally:
        release.set()
        for session in sessions:
            await session.close()
    assert asked == Counter({"/video.mp4": 1})
    deadline = asyncio.get_running_loop().time() + WAIT_S
    while any(path.is_file() for path in cdn.data_dir.rglob("growing/*")):
        assert asyncio.get_running_loop().time() < deadline, "a published fill's files were left"
        await asyncio.sleep(0.1)
