"""A pull zone whose origin leads back to the edges (assetcdn/edge/cdn_loop.py): what a client gets on the hit
path's port and on the application's, and what the origin is sent in CDN-Loop (RFC 8586).

One hit-path edge in front of a scripted origin (zone ORIGINAL), with more zones whose origin is the edge's own
plain site: SELF asks its own CDN path (a loop), CHAINED asks ORIGINAL's (no loop), the others the image routes.
The origin's first-byte time is long: an undetected loop would wait for its own fill until then, and the client's
read would time out (tests/support/hit_cdn.py) rather than get the 508 asserted."""

from __future__ import annotations

from collections.abc import AsyncIterator

import orjson
import pytest
import pytest_asyncio

from assetcdn.edge.app_keys import SECRETS
from assetcdn.edge.cdn_loop import fleet_id, loop_token
from tests.support.control import ACCOUNT
from tests.support.hit_cdn import HitCdn, RawConnection
from tests.support.origins import LONG, ScriptedOrigin, pull_zone_on_hit_cdn
from tests.support.wait import wait_until

pytestmark = pytest.mark.asyncio(loop_scope="module")

ORIGINAL = "loop-origin"
SELF = "loop-self"
CHAINED = "loop-chained"
THROUGH_AUTO = "loop-auto"  # its origin is the edge's auto-format conversion of its own images
VIA_IMAGES = "loop-via-images"  # its origin is the conversion of IMAGES_BACK's images, whose origin is this zone
IMAGES_BACK = "loop-images-back"
BODY = b"from the origin"
HEADERS = {"Content-Type": "text/plain", **LONG}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def edge(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[tuple[HitCdn, ScriptedOrigin]]:
    async with pull_zone_on_hit_cdn(tmp_path_factory.mktemp("pull-loops"), ORIGINAL,
                                    ASSETCDN_ORIGIN_FIRST_BYTE_TIMEOUT_S="60") as (cdn, origin):
        for name, through in ((SELF, SELF), (CHAINED, ORIGINAL), (THROUGH_AUTO, f"api/auto/{THROUGH_AUTO}"),
                              (VIA_IMAGES, f"api/auto/{IMAGES_BACK}"), (IMAGES_BACK, VIA_IMAGES)):
            resp = await cdn.control.post("/api/core/zones", headers=ACCOUNT, json={
                "Name": name, "Origin": {"Url": f"http://127.0.0.1:{cdn.plain_port}/{through}"}})
            assert resp.status == 201, await resp.text()

        async def arrived() -> bool:
            return {SELF, CHAINED, THROUGH_AUTO, VIA_IMAGES, IMAGES_BACK} <= set(cdn.node.config.pull_zones)

        await wait_until(arrived, "the zones reaching the edge")
        yield cdn, origin


async def both_ports(cdn: HitCdn) -> list[RawConnection]:
    """A connection to the hit path's site (whose misses it fills itself) and one to the application's."""
    return [await cdn.connect(), await cdn.plain()]


def error_code(body: bytes) -> str:
    code: str = orjson.loads(body)["error"]["code"]
    return code


async def test_a_zone_whose_origin_is_its_own_path_is_refused_with_508_not_left_waiting_for_itself(
        edge: tuple[HitCdn, ScriptedOrigin]) -> None:
    cdn, _ = edge
    for conn in await both_ports(cdn):
        for attempt in range(2):  # nothing of it is kept: the second is refused as the first
            resp = await conn.request(f"/{SELF}/page-{attempt}.txt")
            assert resp.status == 508, resp.body
            assert error_code(resp.body) == "LoopDetected"
            assert resp.header("Cache-Control") == "no-store"
        posted = await conn.request(f"/{SELF}/form", "POST", Content_Length="0")
        assert (posted.status, error_code(posted.body)) == (508, "LoopDetected")


async def test_a_zone_whose_origin_is_another_zone_of_the_same_edges_is_served_and_each_zone_is_named(
        edge: tuple[HitCdn, ScriptedOrigin]) -> None:
    cdn, origin = edge
    origin.answer("/chained.txt", BODY, headers=HEADERS)
    conn = await cdn.connect()
    resp = await conn.request(f"/{CHAINED}/chained.txt")
    assert (resp.status, resp.body) == (200, BODY)
    fleet = cdn.node.fleet
    assert fleet == fleet_id(cdn.app[SECRETS].cluster_secret) and fleet.startswith("assetcdn-")
    assert cdn.app[SECRETS].cluster_secret not in fleet
    [seen] = origin.requests("/chained.txt")
    assert seen.headers.getall("CDN-Loop") == [loop_token(fleet, CHAINED), loop_token(fleet, ORIGINAL)]


async def test_a_clients_cdn_loop_reaches_the_origin_before_the_edges_own(
        edge: tuple[HitCdn, ScriptedOrigin]) -> None:
    cdn, origin = edge
    origin.answer("/relayed.txt", BODY, headers=HEADERS)
    resp = await (await cdn.connect()).request(f"/{ORIGINAL}/relayed.txt", CDN_Loop='other-cdn; x="1"')
    assert (resp.status, resp.body) == (200, BODY)
    [seen] = origin.requests("/relayed.txt")
    assert seen.headers.getall("CDN-Loop") == ['other-cdn; x="1"', loop_token(cdn.node.fleet, ORIGINAL)]


@pytest.mark.parametrize("port", [0, 1])
async def test_a_client_naming_this_zone_in_cdn_loop_only_has_its_own_request_refused(
        edge: tuple[HitCdn, ScriptedOrigin], port: int) -> None:
    cdn, origin = edge
    name = f"/spoofed-{port}.txt"
    origin.answer(name, BODY, headers=HEADERS)
    conn = (await both_ports(cdn))[port]
    fleet = cdn.node.fleet
    refused = await conn.request(f"/{ORIGINAL}{name}", CDN_Loop=f"other-cdn, {fleet.upper()} ; zone={ORIGINAL}")
    assert (refused.status, error_code(refused.body)) == (508, "LoopDetected")
    assert origin.count(name) == 0
    # Another zone of this fleet, or this zone's name from another fleet: no loop of this zone's.
    for value in (loop_token(fleet, CHAINED), loop_token("assetcdn-0123456789ab", ORIGINAL)):
        resp = await conn.request(f"/{ORIGINAL}{name}", CDN_Loop=value)
        assert (resp.status, resp.body) == (200, BODY)
    assert (await conn.request(f"/{ORIGINAL}{name}")).header("X-Cache") == "HIT"
    assert origin.count(name) == 1


async def test_a_miss_behind_another_cdn_is_still_filled_on_the_hit_path(edge: tuple[HitCdn, ScriptedOrigin]) -> None:
    """Another CDN in front names itself in CDN-Loop on every request: only this zone's own mark sends a miss to the
    application, which refuses it."""
    cdn, origin = edge
    assert cdn.site.hits is not None
    fills = cdn.site.hits.fills
    origin.answer("/behind.txt", BODY, headers=HEADERS)
    started = fills.started
    resp = await (await cdn.connect()).request(f"/{ORIGINAL}/behind.txt", CDN_Loop="other-cdn, another; x=1")
    assert (resp.status, resp.body) == (200, BODY)
    assert fills.started == started + 1
    [seen] = origin.requests("/behind.txt")
    assert seen.headers.getall("CDN-Loop") == ["other-cdn, another; x=1", loop_token(cdn.node.fleet, ORIGINAL)]


async def test_a_zone_whose_origin_converts_its_own_images_is_refused_with_508_not_left_waiting_for_itself(
        edge: tuple[HitCdn, ScriptedOrigin]) -> None:
    """The looped request asks for the zone's image as a conversion's source, which would wait for the fill of
    that image: the fill that sent it."""
    cdn, origin = edge
    for conn in await both_ports(cdn):
        resp = await conn.request(f"/{THROUGH_AUTO}/photo-{conn.writer.get_extra_info('sockname')[1]}.png")
        assert resp.status == 508, resp.body
    # A client naming a zone's mark in its own request for a conversion: refused, the origin never asked.
    resp = await (await cdn.plain()).request(f"/api/auto/{ORIGINAL}/own.png",
                                             CDN_Loop=loop_token(cdn.node.fleet, ORIGINAL))
    assert resp.status == 508, resp.body
    assert origin.count("/own.png") == 0


async def test_a_cycle_through_another_zones_images_is_found_where_it_comes_back_not_left_waiting_for_itself(
        edge: tuple[HitCdn, ScriptedOrigin]) -> None:
    """VIA_IMAGES asks for IMAGES_BACK's conversion, whose source IMAGES_BACK asks of VIA_IMAGES: the same URL as
    the fill under way. The source's request carries the CDN-Loop it was asked with, so VIA_IMAGES finds its own
    mark and refuses it (508): the conversion answers that its origin failed, and VIA_IMAGES passes that on."""
    cdn, _ = edge
    for conn in await both_ports(cdn):
        resp = await conn.request(f"/{VIA_IMAGES}/cycle-{conn.writer.get_extra_info('sockname')[1]}.png")
        assert resp.status == 502, resp.body
        assert b"answered 508" in resp.body
