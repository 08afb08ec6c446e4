"""Pull zones through a real `assetcdn up` with two edge workers: the origin setting reaches them from the
environment, both workers share what one of them stored (a transform of an origin's image too), and an unsafe
request answered by one worker invalidates the URL for the other too. The serve sequence itself is tested in-process
(tests/edge/routes/test_pull_zones.py)."""

from __future__ import annotations

import asyncio
import io
import os
from collections import Counter
from collections.abc import Iterator

import aiohttp
import orjson
import pytest
from aiohttp import web
from PIL import Image

from tests.integration.harness import ACCOUNT, PURGE, RunningCdn, start_cdn
from tests.support.origins import origin_app

pytestmark = pytest.mark.integration

WORKERS = 2
CONNECTIONS = 8      # requests on connections of their own: the kernel spreads them over both workers
WAIT_S = 30.0        # upper bound of waits for the config to arrive (never asserted as a duration)


@pytest.fixture(scope="module")
def cdn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningCdn]:
    running = start_cdn(tmp_path_factory.mktemp("pull-zones"), workers=WORKERS,
                        env_extra={"ASSETCDN_ORIGIN_ALLOW_LOOPBACK": "true"})
    yield running
    running.stop()


async def pull_zone(cdn: RunningCdn, name: str, url: str) -> None:
    """A pull zone, returned once every worker of the edge has the config that names it."""
    async with aiohttp.ClientSession() as session, session.post(
            f"{cdn.control_url}/api/core/zones", json={"Name": name, "Origin": {"Url": url}}, headers=ACCOUNT) as resp:
        assert resp.status == 201, await resp.text()

    def workers_with_it() -> int:
        count = 0
        for config in cdn.data_dir.rglob("edge-config-*.json"):
            try:
                count += name in (orjson.loads(config.read_bytes()).get("origins") or {})
            except (OSError, ValueError):
                continue   # being replaced
        return count

    deadline = asyncio.get_running_loop().time() + WAIT_S
    while workers_with_it() < WORKERS:
        assert asyncio.get_running_loop().time() < deadline, "the pull zone never reached both workers"
        await asyncio.sleep(0.1)


async def each_on_its_own_connection(url: str, method: str = "GET", count: int = CONNECTIONS,
                                     **kwargs: object) -> list[tuple[int, str, bytes]]:
    """(status, X-Cache, body) of `count` requests, one after the other, each on a new connection."""
    answers = []
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as session:
        for _ in range(count):
            async with session.request(method, url, **kwargs) as resp:  # type: ignore[arg-type]
                answers.append((resp.status, resp.headers.get("X-Cache", ""), await resp.read()))
    return answers


async def stored(url: str) -> None:
    """Returns once every worker of the edge holds `url`: a worker answers a client once it has the whole body,
    keeps it in its memory tier just after and on the shared disk tier in its next write-behind batch, so a
    request on another worker in between is a miss of its own. `only-if-cached` never asks the origin; the
    kernel spreads new connections over the workers, so 2 x CONNECTIONS answers in a row come from both."""
    deadline = asyncio.get_running_loop().time() + WAIT_S
    in_a_row = 0
    while in_a_row < 2 * CONNECTIONS:
        answered = await each_on_its_own_connection(url, count=1, headers={"Cache-Control": "only-if-cached"})
        in_a_row = in_a_row + 1 if answered[0][0] == 200 else 0
        if not in_a_row:
            assert asyncio.get_running_loop().time() < deadline, f"{url} never stored"
            await asyncio.sleep(0.05)


async def test_both_workers_serve_what_one_stored(cdn: RunningCdn) -> None:
    body = os.urandom(5 * 1024 * 1024)
    asked = Counter[str]()

    async def handler(request: web.Request) -> web.StreamResponse:
        asked[request.path] += 1
        return web.Response(body=body, headers={"Cache-Control": "max-age=600"})

    app = web.Application()
    app.router.add_get("/{tail:.*}", handler)
    async with origin_app(app) as url:
        await pull_zone(cdn, "bigpull", url)
        target = f"{cdn.edge_urls[0]}/bigpull/big.bin"
        (first,) = await each_on_its_own_connection(target, count=1)
        assert first == (200, "MISS", body)
        await stored(target)
        answers = await each_on_its_own_connection(target)
    assert [(status, x_cache) for status, x_cache, _ in answers] == [(200, "HIT")] * CONNECTIONS
    assert all(received == body for _, _, received in answers)
    assert asked == {"/big.bin": 1}


async def test_an_unsafe_request_on_one_worker_invalidates_the_url_on_every_worker(cdn: RunningCdn) -> None:
    version = 1
    gets = 0

    async def resource(request: web.Request) -> web.StreamResponse:
        nonlocal version, gets
        if request.method == "POST":
            version += 1
            return web.Response(status=204)
        gets += 1
        return web.Response(body=f"v{version}".encode(), headers={"Cache-Control": "max-age=600"})

    app = web.Application()
    app.router.add_route("*", "/items", resource)
    async with origin_app(app) as url:
        await pull_zone(cdn, "changing", url)
        target = f"{cdn.edge_urls[0]}/changing/items"
        assert await each_on_its_own_connection(target, count=1) == [(200, "MISS", b"v1")]
        await stored(target)
        # Both workers answer from the stored response (and keep it in their memory tier).
        assert await each_on_its_own_connection(target) == [(200, "HIT", b"v1")] * CONNECTIONS
        (posted,) = await each_on_its_own_connection(target, "POST", count=1, data=b"new")
        assert posted[:2] == (204, "PASS")
        # Whichever worker answers, the old response is gone.
        gone = await each_on_its_own_connection(target, headers={"Cache-Control": "only-if-cached"})
        assert [status for status, _, _ in gone] == [504] * CONNECTIONS
        assert await each_on_its_own_connection(target, count=1) == [(200, "MISS", b"v2")]
        await stored(target)
        after = await each_on_its_own_connection(target)
    assert after == [(200, "HIT", b"v2")] * CONNECTIONS
    assert gets == 2


async def test_the_first_request_of_each_new_url_is_a_miss_whichever_worker_shields_it(cdn: RunningCdn) -> None:
    """Each worker is the shield of some URLs: a miss on the other worker is fetched through it (which stores the
    response) and is still answered as the miss it is, from the one origin request."""
    asked = Counter[str]()

    async def handler(request: web.Request) -> web.StreamResponse:
        asked[request.path] += 1
        return web.Response(body=request.path.encode(), headers={"Cache-Control": "max-age=600"})

    app = web.Application()
    app.router.add_get("/{tail:.*}", handler)
    names = [f"/new/{n}" for n in range(40)]
    async with origin_app(app) as url:
        await pull_zone(cdn, "firsts", url)
        answers = [(await each_on_its_own_connection(f"{cdn.edge_urls[0]}/firsts{name}", count=1))[0]
                   for name in names]
    assert answers == [(200, "MISS", name.encode()) for name in names]
    assert asked == dict.fromkeys(names, 1)


async def test_a_soft_prefix_purge_is_revalidated_once_whichever_worker_answers(cdn: RunningCdn) -> None:
    """Both workers hold the response in their memory tier; after the purge the first request (on either worker)
    asks the origin to confirm it, the 304 keeps the body, and every request after it is a hit again."""
    asked: list[str | None] = []

    async def resource(request: web.Request) -> web.StreamResponse:
        asked.append(request.headers.get("If-None-Match"))
        headers = {"Cache-Control": "max-age=600", "ETag": '"e1"'}
        if request.headers.get("If-None-Match") == '"e1"':
            return web.Response(status=304, headers=headers)
        return web.Response(body=b"kept body", headers=headers)

    app = web.Application()
    app.router.add_get("/soft/{tail:.*}", resource)
    async with origin_app(app) as url:
        await pull_zone(cdn, "softly", url)
        target = f"{cdn.edge_urls[0]}/softly/soft/a.txt"
        assert await each_on_its_own_connection(target, count=1) == [(200, "MISS", b"kept body")]
        await stored(target)
        assert await each_on_its_own_connection(target) == [(200, "HIT", b"kept body")] * CONNECTIONS
        async with aiohttp.ClientSession() as session, session.post(
                f"{cdn.control_url}/api/purge", json={"prefixes": ["/softly/soft/"], "soft": True},
                headers=PURGE) as resp:
            body = await resp.json()
            assert resp.status == 200 and body["edges"]["pending"] == [], body
        answers = await each_on_its_own_connection(target)
    assert answers == [(200, "REVALIDATED", b"kept body")] + [(200, "HIT", b"kept body")] * (CONNECTIONS - 1)
    assert asked == [None, '"e1"']
async def test_a_transform_of_an_origins_image_made_by_one_worker_is_a_hit_on_every_worker(cdn: RunningCdn) -> None:
    png = io.BytesIO()
    Image.new("RGB", (240, 120), (200, 40, 40)).save(png, "PNG")
    asked = Counter[str]()

    async def handler(request: web.Request) -> web.StreamResponse:
        asked[request.path] += 1
        return web.Response(body=png.getvalue(), content_type="image/png",
                            headers={"Cache-Control": "max-age=600", "ETag": '"photo-1"'})

    app = web.Application()
    app.router.add_get("/{tail:.*}", handler)
    async with origin_app(app) as url:
        await pull_zone(cdn, "pullimages", url)
        target = f"{cdn.edge_urls[0]}/api/transform?url=/pullimages/photo.png&w=60&format=webp"
        (first,) = await each_on_its_own_connection(target, count=1)
        assert first[:2] == (200, "MISS")
        answers = await each_on_its_own_connection(target)
    assert answers == [(200, "HIT", first[2])] * CONNECTIONS
    assert Image.open(io.BytesIO(first[2])).size == (60, 30)
    assert asked == {"/photo.png": 1}
