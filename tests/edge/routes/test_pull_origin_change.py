"""An edge worker taking a config that changes a pull zone's origin (assetcdn/edge/node.py): what it cached of the
old origin goes then, whether or not control's purge of the zone, which runs once per edge, reached it after.

Control publishes the change, then purges the zone's tag; on an edge with several workers that purge runs once, on
whichever worker takes it first, and a worker that took the config change later may have stored an answer of the
old origin in the shared disk tier meanwhile. Here the change is given to the worker without control's purge, as
such a late worker takes it."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass

import orjson
import pytest
from aiohttp import web

from assetcdn.shared.pull_origin import parse_origin
from tests.support.cdn import Cdn, CdnFactory
from tests.support.control import ACCOUNT
from tests.support.origins import (
    LONG,
    PREFIX,
    ScriptedOrigin,
    add_pull_zone,
    serve_origin,
    stored_url,
)
from tests.support.wait import WAIT_S, wait_until


async def take_config(cdn: Cdn, monkeypatch: pytest.MonkeyPatch, origin: Mapping[str, object]) -> None:
    """The edge worker takes control's config with the zone `moving`'s origin replaced by `origin` (nothing else
    of control's: no purge)."""
    node = cdn.node
    published = await node.control.config()
    changed = dataclasses.replace(published, origins={**published.origins, "moving": parse_origin(dict(origin))},
                                  version=published.version + "-changed")

    async def config() -> object:
        return changed

    monkeypatch.setattr(node.control, "config", config)
    await node._refresh_config(changed.version)
    assert node.config.version == changed.version


@dataclass
class Moving:
    cdn: Cdn
    url: str        # the zone's origin URL
    port: int       # the origin's port


@asynccontextmanager
async def moving_zone(make_cdn: CdnFactory, **fields: object) -> AsyncIterator[Moving]:
    """A CDN with the pull zone `moving` (its origin `fields` beside the Url) in front of an origin answering
    /kept.txt (max-age=600); the origin stopped at the end."""
    origin = ScriptedOrigin()
    origin.answer("/kept.txt", b"old origin", headers=LONG)
    origin.answer("/cookie.txt", b"a session of its own", headers={**LONG, "Set-Cookie": "session=first-client"})
    server = await serve_origin(origin)
    try:
        cdn = await make_cdn(ASSETCDN_ORIGIN_ALLOW_LOOPBACK="true")
        port = server.port
        assert port is not None
        url = f"http://127.0.0.1:{port}{PREFIX}"
        await add_pull_zone(cdn, "moving", {"Url": url, **fields})
        yield Moving(cdn, url, port)
    finally:
        await server.close()


@pytest.mark.parametrize("change", ["url", "host_header"])
async def test_a_worker_taking_an_origin_change_drops_what_it_cached_of_the_old_origin(
        make_cdn: CdnFactory, monkeypatch: pytest.MonkeyPatch, change: str) -> None:
    async with moving_zone(make_cdn) as run:
        cdn = run.cdn
        assert (await cdn.edge.get("/moving/kept.txt")).headers["X-Cache"] == "MISS"
        assert stored_url(cdn.node, "moving", "/kept.txt") is not None
        moved = {"Url": f"http://127.0.0.1:{run.port}/elsewhere"} if change == "url" else \
            {"Url": run.url, "HostHeader": "another-site.localhost"}
        await take_config(cdn, monkeypatch, moved)
        assert stored_url(cdn.node, "moving", "/kept.txt") is None


async def test_a_change_of_the_origins_request_headers_alone_keeps_what_is_cached(
        make_cdn: CdnFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same origin, with other fields added to its requests (a rotated secret): its answers stay, as control
    keeps them (it purges for another URL or Host header, or StoreSetCookie turned off, only)."""
    async with moving_zone(make_cdn, RequestHeaders={"X-Origin-Secret": "one"}) as run:
        cdn = run.cdn
        assert (await cdn.edge.get("/moving/kept.txt")).headers["X-Cache"] == "MISS"
        await take_config(cdn, monkeypatch, {"Url": run.url, "RequestHeaders": {"X-Origin-Secret": "two"}})
        assert stored_url(cdn.node, "moving", "/kept.txt") is not None
        assert (await cdn.edge.get("/moving/kept.txt")).headers["X-Cache"] == "HIT"


async def test_turning_store_set_cookie_off_drops_the_answers_that_set_cookies(make_cdn: CdnFactory) -> None:
    """An answer with Set-Cookie kept while the zone allowed it is not served to other clients once it no longer
    does: control purges the zone, as for another origin, and a worker taking the config drops it too."""
    async with moving_zone(make_cdn, StoreSetCookie=True) as run:
        cdn = run.cdn
        assert (await cdn.edge.get("/moving/cookie.txt")).headers["X-Cache"] == "MISS"
        hit = await cdn.edge.get("/moving/cookie.txt")
        assert (hit.headers["X-Cache"], hit.headers["Set-Cookie"]) == ("HIT", "session=first-client")
        resp = await cdn.control.put("/api/core/zones/moving/origin", json={"Url": run.url}, headers=ACCOUNT)
        assert resp.status == 200, await resp.text()

        async def taken() -> bool:
            return not cdn.node.config.pull_zones["moving"].store_set_cookie

        await wait_until(taken, "the origin without StoreSetCookie reaching the edge")
        assert stored_url(cdn.node, "moving", "/cookie.txt") is None
        again = await cdn.edge.get("/moving/cookie.txt")
        assert again.headers["X-Cache"] != "HIT"
        assert stored_url(cdn.node, "moving", "/cookie.txt") is None  # passed on, no longer kept


async def test_a_worker_taking_store_set_cookie_off_drops_what_it_cached(
        make_cdn: CdnFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    async with moving_zone(make_cdn, StoreSetCookie=True) as run:
        cdn = run.cdn
        assert (await cdn.edge.get("/moving/cookie.txt")).headers["X-Cache"] == "MISS"
        assert stored_url(cdn.node, "moving", "/cookie.txt") is not None
        await take_config(cdn, monkeypatch, {"Url": run.url})
        assert stored_url(cdn.node, "moving", "/cookie.txt") is None


async def test_a_worker_whose_purge_fails_keeps_the_old_config_on_disk_for_its_next_start(
        make_cdn: CdnFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """The config is saved only once the zone is purged: a worker stopped (or failing) in between finds the old one
    when it starts again, compares it with control's and purges then."""
    async with moving_zone(make_cdn) as run:
        saved = run.cdn.node.config_file.read_bytes()

        def failing(_tags: object) -> int:
            raise OSError("the disk tier is gone")

        monkeypatch.setattr(run.cdn.node.cache, "purge_tags", failing)
        with pytest.raises(OSError):
            await take_config(run.cdn, monkeypatch, {"Url": f"http://127.0.0.1:{run.port}/elsewhere"})
        assert run.cdn.node.config_file.read_bytes() == saved


async def test_a_purge_that_failed_as_the_origin_changed_is_made_again_at_the_next_catch_up(
        make_cdn: CdnFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker takes an origin change at once (no fill keeps the old origin's answers from then on), then purges what
    it kept of the old origin and saves the config. When that purge failed (the disk tier failing for a while), the
    next catch-up, with control still at the changed config's version, saw nothing to take: the old origin's copies
    stayed, HITs for every client, until the worker was started again. It now purges then, and saves."""
    async with moving_zone(make_cdn) as run:
        cdn = run.cdn
        assert (await cdn.edge.get("/moving/kept.txt")).headers["X-Cache"] == "MISS"
        purge_tags = cdn.node.cache.purge_tags

        def failing(_tags: object) -> int:
            raise OSError("the disk tier is gone")

        monkeypatch.setattr(cdn.node.cache, "purge_tags", failing)
        with pytest.raises(OSError):
            await take_config(cdn, monkeypatch, {"Url": f"http://127.0.0.1:{run.port}/elsewhere"})
        monkeypatch.setattr(cdn.node.cache, "purge_tags", purge_tags)  # the disk tier works again
        async with cdn.node._sync_lock:  # as a catch-up answering control's version (the changed config's) runs
            await cdn.node._refresh_config(cdn.node.config.version)
        assert stored_url(cdn.node, "moving", "/kept.txt") is None
        assert orjson.loads(cdn.node.config_file.read_bytes())["version"] == cdn.node.config.version


@pytest.mark.parametrize("hit_path", [True, False])
async def test_a_request_after_an_origin_change_never_waits_for_the_old_origins_fill(
        make_cdn: CdnFactory, hit_path: bool) -> None:
    """A zone moved off an origin that hangs (the reason to move it): a request made under the new origin does not
    join the fill of the same URL still waiting for the old origin, to get that origin's timeout or failure; it
    asks the new origin at once. The request under way gets the old origin's answer, which is not kept. The fills
    of the hit path (assetcdn/edge/fastpath/pull_fill.py) and of the application alike."""
    old, new = ScriptedOrigin(), ScriptedOrigin()
    release = asyncio.Event()

    async def hung(_request: web.Request) -> web.StreamResponse:
        await release.wait()
        return web.Response(body=b"old origin", headers={"Content-Type": "text/plain", **LONG})

    old.route("/stuck.txt", hung)
    new.answer("/stuck.txt", b"new origin", headers={"Content-Type": "text/plain", **LONG})
    old_server, new_server = await serve_origin(old), await serve_origin(new)
    try:
        cdn = await make_cdn(hit_path=hit_path, ASSETCDN_ORIGIN_ALLOW_LOOPBACK="true",
                             ASSETCDN_ORIGIN_FIRST_BYTE_TIMEOUT_S="120")
        await add_pull_zone(cdn, "moving", {"Url": f"http://127.0.0.1:{old_server.port}{PREFIX}"})
        first = asyncio.ensure_future(cdn.edge.get("/moving/stuck.txt"))

        async def asked() -> bool:
            return old.count("/stuck.txt") == 1

        await wait_until(asked, "the first request waiting for the old origin")
        resp = await cdn.control.put("/api/core/zones/moving/origin", headers=ACCOUNT,
                                     json={"Url": f"http://127.0.0.1:{new_server.port}{PREFIX}"})
        assert resp.status == 200, await resp.text()

        async def moved() -> bool:
            return cdn.node.config.pull_zones["moving"].origin.url.port == new_server.port

        await wait_until(moved, "the new origin reaching the edge")
        second = asyncio.ensure_future(cdn.edge.get("/moving/stuck.txt"))
        done, _ = await asyncio.wait([second], timeout=WAIT_S)
        assert done, "the request made under the new origin waited for the old origin's fill"
        answer = await second
        assert (answer.status, await answer.read()) == (200, b"new origin")
        release.set()
        assert await (await first).read() == b"old origin"  # its client's, not kept
        again = await cdn.edge.get("/moving/stuck.txt")
        assert (await again.read(), again.headers["X-Cache"]) == (b"new origin", "HIT")
        assert (old.count("/stuck.txt"), new.count("/stuck.txt")) == (1, 1)
    finally:
        release.set()
        await old_server.close()
        await new_server.close()
