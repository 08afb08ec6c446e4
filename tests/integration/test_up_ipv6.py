"""`assetcdn up --host ::1`: control, the edge and its cluster site on IPv6 loopback, with a pull zone whose
origin is named by an IPv6 literal (`http://[::1]:port`)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import aiohttp
import pytest
from aiohttp import web

from tests.integration.harness import ACCOUNT, PURGE, RunningCdn, start_cdn
from tests.prerequisites import ipv6_loopback

pytestmark = pytest.mark.integration

ZONE = "sixzone"


@pytest.fixture(scope="module")
def cdn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningCdn]:
    ipv6_loopback()
    running = start_cdn(tmp_path_factory.mktemp("up-ipv6"), host="::1",
                        env_extra={"ASSETCDN_ORIGIN_ALLOW_LOOPBACK": "true"})
    yield running
    running.stop()


async def test_up_on_ipv6_loopback_serves_and_purges_a_pull_zone(cdn: RunningCdn) -> None:
    assert cdn.edge_urls[0].startswith("http://[::1]:")
    seen: list[dict[str, str]] = []
    body = [b"first"]

    async def answer(request: web.Request) -> web.Response:
        seen.append(dict(request.headers))
        return web.Response(body=body[0], headers={"Cache-Control": "max-age=600"})

    app = web.Application()
    app.router.add_get("/a.txt", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "::1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        async with aiohttp.ClientSession() as session:
            async with session.post(f"{cdn.control_url}/api/core/zones", headers=ACCOUNT,
                                    json={"Name": ZONE, "Origin": {"Url": f"http://[::1]:{port}"}}) as resp:
                assert resp.status == 201, await resp.text()
            url = f"{cdn.edge_urls[0]}/{ZONE}/a.txt"
            for _ in range(300):  # until the edge has the zone (its config arrives at the next catch-up)
                async with session.get(url) as resp:
                    if resp.status == 200:
                        assert await resp.read() == b"first"
                        break
                await asyncio.sleep(0.1)
            else:
                raise AssertionError("the pull zone never reached the edge")
            async with session.get(url) as resp:
                assert (resp.status, resp.headers["X-Cache"], await resp.read()) == (200, "HIT", b"first")
            assert len(seen) == 1
            assert seen[0]["Host"] == f"[::1]:{port}"
            assert seen[0]["X-Forwarded-For"] == "::1"
            # The purge reaches the edge's cluster site (registered as http://[::1]:port) and is applied there.
            body[0] = b"second"
            async with session.post(f"{cdn.control_url}/api/purge", headers=PURGE,
                                    json={"urls": [f"/{ZONE}/a.txt"]}) as resp:
                answer_json = await resp.json()
                assert resp.status == 200, answer_json
                assert answer_json["edges"]["pending"] == [], answer_json
            async with session.get(url) as resp:
                assert (resp.status, await resp.read()) == (200, b"second")
            assert len(seen) == 2
    finally:
        await runner.cleanup()
