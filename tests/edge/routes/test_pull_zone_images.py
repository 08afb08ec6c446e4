"""Transforms, auto-format and placeholders of pull zones' images (assetcdn/edge/states/pull_source.py and
pull_variant.py), through a real control and edge app and an origin the tests script on 127.0.0.1
(`ScriptedOrigin`, tests/support/origins.py) serving images made with Pillow: what a client sees
(status, image, X-Cache, Cache-Control, Vary, envelopes) and how often the origin was asked.

One CDN and one origin serve the module; each test uses paths of its own. A source that must go stale has
max-age=1, and a test waits for the edge's answer to change rather than sleeping."""

from __future__ import annotations

import asyncio
import base64
import gzip
import io
import os
import time
import zlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from email.utils import formatdate
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from aiohttp import ClientResponse, web
from PIL import Image

from assetcdn.edge.app_keys import IMAGE_POOL
from assetcdn.edge.cache.entry import CachedObject
from assetcdn.edge.cache.tags import pull_variants_tag
from assetcdn.edge.states import pull_source
from assetcdn.edge.states.keys import pull_key, pull_variants_made_key
from assetcdn.edge.states.pull import FLIGHTS, flight_key
from tests.control.expect import expect_error
from tests.support.cdn import PURGE, Cdn, shared_cdn_apps
from tests.support.control import METRICS
from tests.support.edge_cache import writer_held
from tests.support.metrics_text import metric
from tests.support.origins import (
    PREFIX,
    ScriptedOrigin,
    add_pull_zone,
    serve_origin,
    stored_url,
    wait_stale,
)
from tests.support.wait import wait_until

pytestmark = pytest.mark.asyncio(loop_scope="module")

ZONE = "pullpics"
MAX_SOURCE_BYTES = 300_000           # what control accepts of a stored file, so of a pull zone's image too
MAX_SOURCE_PIXELS = 1_000_000
LONG = {"Cache-Control": "max-age=600"}


def image(colour: tuple[int, int, int], size: tuple[int, int] = (200, 100), fmt: str = "PNG") -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, colour).save(out, fmt)
    return out.getvalue()


def noise_png(side: int) -> bytes:
    """A PNG that does not compress: about 3 bytes a pixel."""
    out = io.BytesIO()
    Image.frombytes("RGB", (side, side), os.urandom(side * side * 3)).save(out, "PNG")
    return out.getvalue()


def opened(body: bytes) -> Image.Image:
    picture = Image.open(io.BytesIO(body))
    picture.load()
    return picture


def centre(body: bytes) -> tuple[int, ...]:
    picture = opened(body).convert("RGB")
    pixel = picture.getpixel((picture.width // 2, picture.height // 2))
    assert isinstance(pixel, tuple)
    return pixel


def close_to(actual: tuple[int, ...], expected: tuple[int, int, int]) -> bool:
    return all(abs(a - e) <= 8 for a, e in zip(actual, expected, strict=True))


RED, BLUE = (220, 30, 30), (30, 30, 220)


@dataclass
class Pics:
    cdn: Cdn
    origin: ScriptedOrigin

    async def get(self, target: str, **kwargs: Any) -> ClientResponse:
        resp = await self.cdn.edge.get(target, **kwargs)
        await resp.read()
        return resp

    async def transform(self, name: str, query: str = "w=100&format=png", **kwargs: Any) -> ClientResponse:
        return await self.get(f"/api/transform?url=/{ZONE}{name}&{query}", **kwargs)


@asynccontextmanager
async def pull_pictures(directory: Path, **env: str) -> AsyncIterator[Pics]:
    """The pull zone ZONE of an edge and control (`env`: their settings) in front of an origin the test scripts."""
    origin = ScriptedOrigin()
    server = await serve_origin(origin)
    try:
        async with shared_cdn_apps(directory, ASSETCDN_ORIGIN_ALLOW_LOOPBACK="true", **env) as cdn:
            await add_pull_zone(cdn, ZONE, {"Url": f"http://127.0.0.1:{server.port}{PREFIX}"})
            yield Pics(cdn, origin)
    finally:
        await server.close()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def pics(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Pics]:
    async with pull_pictures(tmp_path_factory.mktemp("pull-images"),
                             ASSETCDN_CONTROL_MAX_UPLOAD_BYTES=str(MAX_SOURCE_BYTES),
                             ASSETCDN_TRANSFORM_MAX_SOURCE_PIXELS=str(MAX_SOURCE_PIXELS)) as pictures:
        yield pictures


def max_age(resp: ClientResponse) -> int:
    directives = dict(part.strip().partition("=")[::2] for part in resp.headers["Cache-Control"].split(","))
    assert "immutable" not in directives and "public" in directives, resp.headers["Cache-Control"]
    return int(directives["max-age"])


# --- each kind of variant ------------------------------------------------------------------------------------


async def test_a_transform_of_a_pull_image_is_made_once_then_a_hit_without_the_origin(pics: Pics) -> None:
    pics.origin.answer("/photo.jpg", image(RED, fmt="JPEG"),
                       headers={**LONG, "ETag": '"one"', "Content-Type": "image/jpeg", "Cache-Tag": "holiday"})
    first = await pics.transform("/photo.jpg", "w=100&format=webp")
    assert first.status == 200, await first.text()
    assert (first.headers["X-Cache"], first.headers["Content-Type"]) == ("MISS", "image/webp")
    assert opened(await first.read()).size == (100, 50)
    assert close_to(centre(await first.read()), RED)
    assert 590 <= max_age(first) <= 600          # what is left of the source's freshness, never a year
    # The edge's own tag only: the origin's (`holiday`) tag the variant, a purge of it drops it, but they are the
    # origin's word to the CDN, never shown to clients (they were, beside the zone's).
    assert first.headers["Cache-Tag"] == "project-pullpics"
    second = await pics.transform("/photo.jpg", "format=webp&w=100")
    assert (second.status, second.headers["X-Cache"]) == (200, "HIT")
    assert await second.read() == await first.read() and second.headers["ETag"] == first.headers["ETag"]
    revalidated = await pics.transform("/photo.jpg", "format=webp&w=100",
                                       headers={"If-None-Match": first.headers["ETag"]})
    assert revalidated.status == 304
    # The source the transform fetched is the URL's own cache entry: its delivery is a hit too.
    delivered = await pics.get(f"/{ZONE}/photo.jpg")
    assert (delivered.status, delivered.headers["X-Cache"]) == (200, "HIT")
    assert pics.origin.count("/photo.jpg") == 1


async def test_a_transform_of_an_image_already_delivered_asks_the_origin_nothing(pics: Pics) -> None:
    pics.origin.answer("/delivered.png", image(BLUE), headers={**LONG, "Last-Modified": "Mon, 01 Jun 2026 10:00:00 GMT"})
    assert (await pics.get(f"/{ZONE}/delivered.png")).headers["X-Cache"] == "MISS"
    resp = await pics.transform("/delivered.png")
    assert (resp.status, resp.headers["X-Cache"], resp.headers["Content-Type"]) == (200, "MISS", "image/png")
    assert pics.origin.count("/delivered.png") == 1


async def test_an_image_without_validators_is_hashed_as_it_is_stored_not_at_each_variant_request(
        pics: Pics, monkeypatch: pytest.MonkeyPatch) -> None:
    """Named by its body's SHA-256 (no ETag, no Last-Modified): the hash is kept with the stored response, so
    a variant's hit reads nothing of the source."""
    pics.origin.answer("/plain.png", image(RED), headers=LONG)
    assert (await pics.get(f"/{ZONE}/plain.png")).headers["X-Cache"] == "MISS"
    reads: list[str] = []
    real = pull_source.stored_body

    async def counted(obj: CachedObject) -> bytes:
        reads.append(obj.key)
        return await real(obj)

    monkeypatch.setattr(pull_source, "stored_body", counted)
    first = await pics.transform("/plain.png")
    assert (first.status, first.headers["X-Cache"]) == (200, "MISS"), await first.text()
    assert len(reads) == 1                         # the variant is made from the stored bytes
    for _ in range(3):
        hit = await pics.transform("/plain.png")
        assert (hit.status, hit.headers["X-Cache"], await hit.read()) == (200, "HIT", await first.read())
    assert len(reads) == 1
    assert pics.origin.count("/plain.png") == 1


async def test_auto_converts_a_pull_image_to_the_best_accepted_format(pics: Pics) -> None:
    pics.origin.answer("/auto.png", image(BLUE), headers={**LONG, "ETag": '"auto"'})
    query = await pics.get(f"/api/auto?path=/{ZONE}/auto.png", headers={"Accept": "image/webp,*/*"})
    assert query.status == 200, await query.text()
    assert (query.headers["Content-Type"], query.headers["X-Cache"]) == ("image/webp", "MISS")
    assert query.headers["Vary"] == "Accept, Save-Data, Sec-CH-Effective-Connection-Type"
    assert opened(await query.read()).format == "WEBP" and 590 <= max_age(query) <= 600
    path = await pics.get(f"/api/auto/{ZONE}/auto.png", headers={"Accept": "image/webp"})
    assert (path.status, path.headers["Vary"], path.headers["X-Cache"]) == (200, "Accept", "HIT")
    plain = await pics.get(f"/api/auto?path=/{ZONE}/auto.png", headers={"Accept": "image/png"})
    assert (plain.headers["Content-Type"], opened(await plain.read()).format) == ("image/png", "PNG")
    assert pics.origin.count("/auto.png") == 1


async def test_auto_sends_a_pull_image_already_in_the_best_accepted_format_as_it_is(pics: Pics) -> None:
    """A WebP to a browser that takes WebP (and no better format) is the origin's own bytes, as a stored zone's file
    is sent as it is: not encoded again, which loses a little quality each time. Its answer is an auto answer of a
    pull image's (Content-Type, Vary, a lifetime from the image's freshness, X-Cache), with an ETag of its own."""
    webp = image(BLUE, fmt="WEBP")
    pics.origin.answer("/as-is.webp", webp, headers={**LONG, "ETag": '"as-is"', "Content-Type": "image/webp"})
    query = await pics.get(f"/api/auto?path=/{ZONE}/as-is.webp", headers={"Accept": "image/webp,*/*"})
    assert query.status == 200, await query.text()
    assert await query.read() == webp
    assert (query.headers["Content-Type"], query.headers["X-Cache"]) == ("image/webp", "MISS")
    assert query.headers["Vary"] == "Accept, Save-Data, Sec-CH-Effective-Connection-Type"
    assert 590 <= max_age(query) <= 600 and query.headers["ETag"] not in ('"as-is"', "")
    again = await pics.get(f"/api/auto?path=/{ZONE}/as-is.webp", headers={"Accept": "image/webp,*/*"})
    assert (await again.read(), again.headers["X-Cache"], again.headers["ETag"]) == (webp, "HIT", query.headers["ETag"])
    revalidated = await pics.get(f"/api/auto?path=/{ZONE}/as-is.webp",
                                 headers={"Accept": "image/webp,*/*", "If-None-Match": query.headers["ETag"]})
    assert revalidated.status == 304
    path = await pics.get(f"/api/auto/{ZONE}/as-is.webp", headers={"Accept": "image/webp"})
    assert (await path.read(), path.headers["Vary"], path.headers["Content-Type"]) == (webp, "Accept", "image/webp")
    # A client that does not take WebP gets a PNG made of it, as before; one that takes AVIF an AVIF.
    plain = await pics.get(f"/api/auto?path=/{ZONE}/as-is.webp", headers={"Accept": "image/png"})
    assert (plain.headers["Content-Type"], opened(await plain.read()).format) == ("image/png", "PNG")
    avif = await pics.get(f"/api/auto?path=/{ZONE}/as-is.webp", headers={"Accept": "image/avif,image/webp"})
    assert avif.headers["Content-Type"] == "image/avif" and await avif.read() != webp
    assert pics.origin.count("/as-is.webp") == 1


async def test_an_image_sent_as_it_is_and_then_changed_and_purged_is_sent_as_it_is_now(pics: Pics) -> None:
    """What an auto answer sends as it is goes with the image: after a purge of its URL the origin's new image (a new
    ETag) is sent, under a new ETag, never the old bytes; an image with only Last-Modified gets a weak ETag."""
    old, new = image(RED, fmt="WEBP"), image(BLUE, fmt="WEBP")
    pics.origin.answer("/changed.webp", old, headers={**LONG, "ETag": '"v1"', "Content-Type": "image/webp"})
    target = f"/api/auto?path=/{ZONE}/changed.webp"
    first = await pics.get(target, headers={"Accept": "image/webp"})
    assert await first.read() == old
    pics.origin.answer("/changed.webp", new, headers={**LONG, "ETag": '"v2"', "Content-Type": "image/webp"})
    resp = await pics.cdn.control.post("/api/purge", json={"urls": [f"/{ZONE}/changed.webp"]}, headers=PURGE)
    assert resp.status == 200, await resp.text()
    second = await pics.get(target, headers={"Accept": "image/webp", "If-None-Match": first.headers["ETag"]})
    assert (second.status, await second.read(), second.headers["X-Cache"]) == (200, new, "MISS")
    assert second.headers["ETag"] != first.headers["ETag"] and not second.headers["ETag"].startswith("W/")
    pics.origin.answer("/dated.webp", old, headers={**LONG, "Last-Modified": "Mon, 07 Dec 2026 00:00:00 GMT",
                                                    "Content-Type": "image/webp"})
    dated = await pics.get(f"/api/auto?path=/{ZONE}/dated.webp", headers={"Accept": "image/webp"})
    assert await dated.read() == old and dated.headers["ETag"].startswith('W/"')


async def test_auto_still_converts_a_pull_jpeg_for_a_browser_taking_avif_or_webp(pics: Pics) -> None:
    jpeg = image(RED, fmt="JPEG")
    pics.origin.answer("/photo.jpg", jpeg, headers={**LONG, "Content-Type": "image/jpeg"})
    for accept, fmt in (("image/avif,image/webp,*/*", "image/avif"), ("image/webp,*/*", "image/webp")):
        resp = await pics.get(f"/api/auto?path=/{ZONE}/photo.jpg", headers={"Accept": accept})
        assert (resp.status, resp.headers["Content-Type"]) == (200, fmt), await resp.text()
        assert await resp.read() != jpeg and close_to(centre(await resp.read()), RED)


async def test_format_auto_of_a_pull_image_too_long_for_avif_and_webp_answers_a_format_that_holds_it(
        pics: Pics) -> None:
    """As for a stored picture: a 20x20000 page screenshot, format=auto for a browser taking AVIF, is a PNG (AVIF and
    WebP hold at most 16384 and 16383 pixels a side), from the one image the origin was asked for."""
    pics.origin.answer("/tall-page.png", image(BLUE, (20, 20000)), headers={**LONG, "ETag": '"tall"'})
    for _ in range(2):
        resp = await pics.transform("/tall-page.png", "format=auto", headers={"Accept": "image/avif,image/webp,*/*"})
        assert resp.status == 200, await resp.text()
        assert resp.headers["Content-Type"] == "image/png" and opened(await resp.read()).size == (20, 20000)
        assert 590 <= max_age(resp) <= 600
    assert pics.origin.count("/tall-page.png") == 1


async def test_auto_sends_a_pull_image_too_long_for_avif_and_webp_as_it_is(pics: Pics) -> None:
    """/api/auto, as for a stored base: the next format of the chain that holds the image, the image itself sent as
    it is when that is its format (the origin's PNG), not 422; a JPEG, which no still chain holds, converted to it."""
    tall = image(BLUE, (20, 20000))
    pics.origin.answer("/tall-auto.png", tall, headers={**LONG, "ETag": '"tall-auto"', "Content-Type": "image/png"})
    for target in (f"/api/auto?path=/{ZONE}/tall-auto.png", f"/api/auto/{ZONE}/tall-auto.png"):
        resp = await pics.get(target, headers={"Accept": "image/avif,image/webp,*/*"})
        assert resp.status == 200, await resp.text()
        assert (resp.headers["Content-Type"], await resp.read()) == ("image/png", tall)
    pics.origin.answer("/tall-auto.jpg", image(BLUE, (20, 20000), "JPEG"),
                       headers={**LONG, "Content-Type": "image/jpeg"})
    resp = await pics.get(f"/api/auto?path=/{ZONE}/tall-auto.jpg", headers={"Accept": "image/avif,image/webp,*/*"})
    assert resp.status == 200, await resp.text()
    assert resp.headers["Content-Type"] == "image/png" and opened(await resp.read()).size == (20, 20000)


async def test_auto_sends_a_pull_svg_as_it_is_never_rasterised(pics: Pics) -> None:
    """As a stored base's SVG is: a vector image is sent as it is (the chain ends with svg), however large it says it
    is, not a raster made of it at its own size (blurred on a dense screen); under the sandbox policy any SVG gets.
    With anim=1, whose chain holds no svg, there is nothing to send (404), as for a stored base."""
    huge = SVG.replace('width="200" height="100"', 'width="20000" height="10000"').encode()
    for name, body in (("/vector.svg", SVG.encode()), ("/vector-huge.svg", huge)):
        pics.origin.answer(name, body, headers={**LONG, "Content-Type": "image/svg+xml"})
        for target in (f"/api/auto?path=/{ZONE}{name}", f"/api/auto/{ZONE}{name}"):
            resp = await pics.get(target, headers={"Accept": "image/avif,image/webp,*/*"})
            assert resp.status == 200, await resp.text()
            assert (resp.headers["Content-Type"], await resp.read()) == ("image/svg+xml", body)
            assert "sandbox" in resp.headers["Content-Security-Policy"]
        animated = await pics.get(f"/api/auto?path=/{ZONE}{name}&anim=1", headers={"Accept": "image/webp"})
        assert animated.status == 404, await animated.text()


async def test_auto_sends_as_it_is_only_what_its_bytes_are(pics: Pics) -> None:
    """An origin's label is not taken at its word: a JPEG it calls a WebP is converted to a WebP (never sent as
    `image/webp`); a WebP it sends gzip-coded is converted from what the coding holds (its stored bytes are the
    coding's, not a WebP); and a WebP over the pixel bound is refused as its conversion was (422), not sent."""
    jpeg = image(RED, fmt="JPEG")
    pics.origin.answer("/labelled.webp", jpeg, headers={**LONG, "Content-Type": "image/webp"})
    coded = gzip.compress(image(RED, fmt="WEBP"))
    pics.origin.answer("/coded.webp", coded, headers={**LONG, "Content-Type": "image/webp",
                                                      "Content-Encoding": "gzip"})
    for name in ("/labelled.webp", "/coded.webp"):
        resp = await pics.get(f"/api/auto?path=/{ZONE}{name}", headers={"Accept": "image/webp"},
                              auto_decompress=False)
        assert (resp.status, resp.headers["Content-Type"]) == (200, "image/webp"), await resp.text()
        assert "Content-Encoding" not in resp.headers and opened(await resp.read()).format == "WEBP"
    pics.origin.answer("/huge.webp", image(RED, (1200, 1000), "WEBP"), headers={**LONG, "Content-Type": "image/webp"})
    for _ in range(2):  # checked, then the check's failure remembered
        resp = await pics.get(f"/api/auto?path=/{ZONE}/huge.webp", headers={"Accept": "image/webp"})
        body = await resp.json()
        assert resp.status == 422 and "exceeds this edge's limit of 1,000,000 pixels" in body["error"], body


@pytest.mark.parametrize("kind", ["lqip", "blurhash"])
async def test_placeholders_of_a_pull_image(pics: Pics, kind: str) -> None:
    name = f"/placeholder-{kind}.jpg"
    pics.origin.answer(name, image(RED, (320, 160), "JPEG"), headers={**LONG, "ETag": '"p"'})
    first = await pics.get(f"/api/{kind}?url=/{ZONE}{name}&size=16")
    assert (first.status, first.headers["X-Cache"]) == (200, "MISS"), await first.text()
    assert (await first.json())["width"] == 16 and 590 <= max_age(first) <= 600
    second = await pics.get(f"/api/{kind}?url=/{ZONE}{name}&size=16")
    assert (second.status, second.headers["X-Cache"]) == (200, "HIT")
    assert pics.origin.count(name) == 1


async def test_a_placeholder_is_kept_by_clients_at_most_a_day(pics: Pics) -> None:
    pics.origin.answer("/week.jpg", image(RED, fmt="JPEG"), headers={"Cache-Control": "max-age=604800"})
    resp = await pics.get(f"/api/lqip?url=/{ZONE}/week.jpg")
    assert resp.status == 200 and max_age(resp) == 86400


@pytest.mark.parametrize(("name", "headers", "low", "high"), [
    ("/browser-shorter.png", {"Cache-Control": "max-age=60", "CDN-Cache-Control": "max-age=600"}, 50, 60),
    ("/cdn-only.png", {"CDN-Cache-Control": "max-age=600"}, 0, 0),
    ("/shared-only.png", {"Cache-Control": "s-maxage=600"}, 0, 0),
])
async def test_a_variant_is_kept_by_clients_no_longer_than_a_browser_may_keep_its_source(
        pics: Pics, name: str, headers: dict[str, str], low: int, high: int) -> None:
    pics.origin.answer(name, image(RED), headers=headers)
    for _ in range(2):  # made, then from the cache
        resp = await pics.transform(name)
        assert resp.status == 200 and low <= max_age(resp) <= high, resp.headers["Cache-Control"]
    assert pics.origin.count(name) == 1


@pytest.mark.parametrize(("name", "browser", "expected"), [
    ("/private-to-browsers.png", "private, max-age=60", "private, max-age=60"),
    ("/no-store-for-browsers.png", "no-store", "no-store"),
])
async def test_a_variant_keeps_what_the_source_forbids_caches_past_this_edge(
        pics: Pics, name: str, browser: str, expected: str) -> None:
    """CDN-Cache-Control lets this edge keep an image that Cache-Control keeps from every other cache (`private`)
    or from every cache (`no-store`): its variants say so too, never `public`, as the image's own deliveries do."""
    pics.origin.answer(name, image(RED), headers={"Cache-Control": browser, "CDN-Cache-Control": "max-age=600"})
    fetched = time.time()

    def as_expected(value: str) -> bool:
        """`expected`, its max-age less what has gone of the image's lifetime since it was fetched: whole seconds,
        counted from the origin's Date (truncated to its second) and rounded up, so up to two more than elapsed."""
        if "max-age=" not in expected:
            return value == expected
        prefix, _, seconds = value.rpartition("=")
        return prefix == expected.rpartition("=")[0] and 60 - (time.time() - fetched) - 2 <= int(seconds) <= 60

    delivered = await pics.get(f"/{ZONE}{name}")
    assert delivered.headers["Cache-Control"] == browser
    for _ in range(2):  # made, then from the cache
        resp = await pics.transform(name)
        assert resp.status == 200, await resp.text()
        assert as_expected(resp.headers["Cache-Control"]), resp.headers["Cache-Control"]
    placeholder = await pics.get(f"/api/lqip?url=/{ZONE}{name}")
    assert as_expected(placeholder.headers["Cache-Control"]), placeholder.headers["Cache-Control"]
    assert pics.origin.count(name) == 1


async def test_a_variant_of_a_source_with_expires_is_kept_until_then(pics: Pics) -> None:
    now = time.time()
    pics.origin.answer("/expires.png", image(RED), headers={"Date": formatdate(now, usegmt=True),
                                                            "Expires": formatdate(now + 120, usegmt=True)})
    resp = await pics.transform("/expires.png")
    assert resp.status == 200 and 100 <= max_age(resp) <= 120, resp.headers["Cache-Control"]


async def test_a_source_to_validate_before_each_use_makes_variants_to_validate_too(pics: Pics) -> None:
    pics.origin.answer("/no-cache.png", image(RED), headers={"Cache-Control": "no-cache", "ETag": '"nc"'})
    resp = await pics.transform("/no-cache.png")
    assert (resp.status, resp.headers["Cache-Control"]) == (200, "public, no-cache")


@pytest.mark.parametrize(("cache_control", "validated_first"), [
    ('max-age=600, no-cache="Cache-Tag"', False),      # only that field is to be validated before it is sent
    ('max-age=600, no-cache="Cache-Tag", no-cache', True),
    ('max-age=600, no-cache="Content-Encoding"', True),   # the stored bytes' own field: read unqualified
])
async def test_a_source_naming_fields_in_no_cache_makes_variants_kept_as_its_max_age_says(
        pics: Pics, cache_control: str, validated_first: bool) -> None:
    name = f"/field-no-cache-{len(cache_control)}.png"
    pics.origin.answer(name, image(RED), headers={"Cache-Control": cache_control, "ETag": '"fnc"', "Cache-Tag": "fnc"})
    resp = await pics.transform(name)
    assert resp.status == 200, await resp.text()
    if validated_first:
        assert resp.headers["Cache-Control"] == "public, no-cache"
    else:
        assert 500 < max_age(resp) <= 600
        assert (await pics.get(f"/{ZONE}{name}")).headers["X-Cache"] == "HIT"   # as the edge keeps the image
        assert pics.origin.count(name) == 1


# --- the source changing, purged, failing ---------------------------------------------------------------------


async def test_a_new_etag_on_revalidation_makes_new_variants_and_retires_the_old(pics: Pics) -> None:
    version = {"etag": '"red"', "body": image(RED)}

    async def changing(request: web.Request) -> web.StreamResponse:
        if request.headers.get("If-None-Match") == version["etag"]:
            return web.Response(status=304, headers={"ETag": str(version["etag"]), "Cache-Control": "max-age=1"})
        return web.Response(body=version["body"], headers={"ETag": str(version["etag"]), "Cache-Control": "max-age=1",
                                                            "Content-Type": "image/png"})

    pics.origin.route("/changing.png", changing)
    first = await pics.transform("/changing.png")
    assert close_to(centre(await first.read()), RED) and max_age(first) <= 1

    async def confirmed() -> bool:  # stale, revalidated with a 304: the variant made from it still answers
        resp = await pics.transform("/changing.png")
        return pics.origin.count("/changing.png") > 1 and resp.headers["X-Cache"] == "HIT"

    await wait_until(confirmed, "the source revalidated with a 304")
    assert pics.origin.requests("/changing.png")[1].headers["If-None-Match"] == '"red"'
    url_key = pull_key(ZONE, "/changing.png", "")
    variants_before = tagged(pics, url_key)
    assert variants_before
    version.update(etag='"blue"', body=image(BLUE))
    changed: list[ClientResponse] = []

    async def blue() -> bool:
        resp = await pics.transform("/changing.png")
        changed[:] = [resp]
        return close_to(centre(await resp.read()), BLUE)

    await wait_until(blue, "the variant made again from the changed image")
    assert changed[0].headers["X-Cache"] == "MISS" and changed[0].headers["ETag"] != first.headers["ETag"]
    assert not variants_before & tagged(pics, url_key)   # the red variants are gone
    again = await pics.transform("/changing.png")   # the blue one was kept as it was made
    assert (again.headers["X-Cache"], again.headers["ETag"]) == ("HIT", changed[0].headers["ETag"])


async def test_a_new_weak_etag_makes_new_variants_even_with_the_same_last_modified_and_length(pics: Pics) -> None:
    """An origin that names its image by a weak ETag and a Last-Modified of one-second resolution (a static file
    server's), the image replaced within that second by one of the same length: only the weak ETag changed, and
    the variant is made from the new image, not the old one's answered for it."""
    modified = formatdate(time.time() - 3600, usegmt=True)
    version = {"etag": 'W/"red"', "body": image(RED)}
    assert len(image(RED)) == len(image(BLUE))

    async def replaced(request: web.Request) -> web.StreamResponse:
        fields = {"ETag": str(version["etag"]), "Last-Modified": modified, "Cache-Control": "max-age=1"}
        if request.headers.get("If-None-Match") == version["etag"]:
            return web.Response(status=304, headers=fields)
        return web.Response(body=version["body"], headers={**fields, "Content-Type": "image/png"})

    pics.origin.route("/replaced.png", replaced)
    first = await pics.transform("/replaced.png")
    assert close_to(centre(await first.read()), RED)
    version.update(etag='W/"blue"', body=image(BLUE))

    async def asked_again() -> bool:
        resp = await pics.transform("/replaced.png")
        return resp.status == 200 and pics.origin.count("/replaced.png") > 1

    await wait_until(asked_again, "the stale image fetched again")
    resp = await pics.transform("/replaced.png")
    assert close_to(centre(await resp.read()), BLUE), resp.headers["X-Cache"]


def tagged(pics: Pics, url_key: str) -> set[str]:
    """The keys of the variants of `url_key` in this edge's cache: its variants' tag, less the note of the
    validator they were made from."""
    keys = pics.cdn.node.cache.disk.keys_for_tags([pull_variants_tag(url_key)])
    return set(keys) - {pull_variants_made_key(url_key)}


@pytest.mark.parametrize(("at_origin", "in_url", "purged_as"), [
    ("/caf%C3%A9.png", "/caf%C3%A9.png", "/caf\u00e9.png"),   # a name outside ASCII, sent decoded or not
    ("/a&b.png", "/a%26b.png", "/a&b.png"),                   # a reserved character, as a delivery names it
    ("/100%25.png", "/100%25.png", "/100%25.png"),             # a '%' of the name itself
])
async def test_an_image_whose_name_a_stored_file_could_not_have_is_a_source_as_its_delivery_is(
        pics: Pics, at_origin: str, in_url: str, purged_as: str) -> None:
    pics.origin.answer(at_origin, image(RED), headers={**LONG, "ETag": '"odd"', "Content-Type": "image/png"})
    delivered = await pics.get(f"/{ZONE}{at_origin}")
    assert delivered.status == 200
    for _ in range(2):
        made = await pics.transform(in_url, "w=50&format=png")
        assert made.status == 200, await made.text()
        assert close_to(centre(await made.read()), RED)
        placeholder = await pics.get(f"/api/lqip?url=/{ZONE}{in_url}")
        assert placeholder.status == 200, await placeholder.text()
    auto = await pics.get(f"/api/auto?path=/{ZONE}{in_url}", headers={"Accept": "image/webp"})
    assert auto.status == 200 and auto.headers["Content-Type"] == "image/webp", await auto.text()
    assert pics.origin.count(at_origin) == 1       # one image, the delivery's, for every variant
    resp = await pics.cdn.control.post("/api/purge", json={"urls": [f"/{ZONE}{purged_as}"]}, headers=PURGE)
    assert resp.status == 200, await resp.text()
    assert (await pics.transform(in_url, "w=50&format=png")).headers["X-Cache"] == "MISS"
    assert pics.origin.count(at_origin) == 2


async def test_a_stored_zones_source_keeps_the_stored_names_rules(pics: Pics) -> None:
    """Only a pull zone's path may bear any name; one with a query, a dot segment or a control character is none."""
    resp = await pics.get("/api/transform?url=/nozone/v1/logos/caf%C3%A9.png&w=50")
    assert resp.status == 400 and "not allowed" in await resp.text()
    resp = await pics.get("/api/lqip?url=/nozone/v1/logos/a%26b.png")
    assert resp.status == 400 and (await resp.json())["error"]["code"] == "InvalidUrl"
    resp = await pics.get("/api/auto?path=/nozone/v1/logos/caf%C3%A9.png")
    assert resp.status == 400 and (await resp.json())["error"] == "Invalid path: contains disallowed sequences."
    for query in ("url=/pullpics/x%3Fy.png", "url=/pullpics/a/../b.png", "url=/pullpics/a%0Ab.png"):
        resp = await pics.get(f"/api/transform?{query}&w=50")
        assert resp.status == 400, (query, resp.status)


async def test_a_purge_of_the_source_url_drops_its_variants(pics: Pics) -> None:
    pics.origin.answer("/purged.png", image(RED), headers={**LONG, "ETag": '"purged"'})
    for query in ("w=100&format=png", "w=50&format=webp"):
        assert (await pics.transform("/purged.png", query)).headers["X-Cache"] == "MISS"
    placeholder = await pics.get(f"/api/lqip?url=/{ZONE}/purged.png")
    assert placeholder.headers["X-Cache"] == "MISS"
    resp = await pics.cdn.control.post("/api/purge", json={"urls": [f"/{ZONE}/purged.png"]}, headers=PURGE)
    assert resp.status == 200, await resp.text()
    # The image and its three variants: what the edge notes of them (which validator they were made from) is no copy.
    assert (await resp.json())["edges"]["entriesRemoved"] == {"edge-t/0": 4}
    for query in ("w=100&format=png", "w=50&format=webp"):
        assert (await pics.transform("/purged.png", query)).headers["X-Cache"] == "MISS"
    assert (await pics.get(f"/api/lqip?url=/{ZONE}/purged.png")).headers["X-Cache"] == "MISS"
    assert pics.origin.count("/purged.png") == 2


async def test_a_tag_purge_drops_the_variants_of_an_image_whose_origin_withholds_the_tag_from_clients(
        pics: Pics) -> None:
    """`no-cache="Cache-Tag"`: the stored image's head lacks the field (clients never see it), yet the image is
    tagged, and so are its variants: a purge of the tag drops them too, and the next one is made from the image
    fetched again. Tagged from the head alone, the variant outlived the purge (a HIT of the image as it was)."""
    head = {"Cache-Control": 'max-age=600, no-cache="Cache-Tag"', "ETag": '"same"', "Content-Type": "image/png"}
    pics.origin.answer("/withheld.png", image(RED), headers={**head, "Cache-Tag": "pics-withheld"})
    first = await pics.transform("/withheld.png", "w=100&format=png")
    assert (first.status, first.headers["X-Cache"]) == (200, "MISS"), await first.text()
    assert close_to(centre(await first.read()), RED)
    assert first.headers["Cache-Tag"] == f"project-{ZONE}"  # what the image's head shows: not the withheld tag
    assert (await pics.transform("/withheld.png", "w=100&format=png")).headers["X-Cache"] == "HIT"
    pics.origin.answer("/withheld.png", image(BLUE), headers={**head, "Cache-Tag": "pics-withheld"})  # same ETag
    resp = await pics.cdn.control.post("/api/purge", json={"tags": ["pics-withheld"]}, headers=PURGE)
    assert resp.status == 200, await resp.text()
    again = await pics.transform("/withheld.png", "w=100&format=png")
    assert (again.status, again.headers["X-Cache"]) == (200, "MISS")
    assert close_to(centre(await again.read()), BLUE)
    assert pics.origin.count("/withheld.png") == 2


@pytest.mark.parametrize("route", ["transform", "lqip"])
async def test_a_purge_of_an_image_changed_under_the_same_etag_makes_variants_of_the_new_bytes(
        pics: Pics, route: str) -> None:
    """An origin that changed an image's bytes and kept its ETag: a purge of the image is how its variants are made
    again, and they are made from the bytes fetched after it, not from the old ones an image worker keeps."""
    name = f"/same-etag-{route}.png"
    version = {"body": image(RED)}

    async def origin(request: web.Request) -> web.StreamResponse:   # one ETag, whatever the bytes
        return web.Response(body=version["body"], headers={**LONG, "ETag": '"same"', "Content-Type": "image/png"})

    pics.origin.route(name, origin)

    async def made() -> tuple[int, ...]:
        if route == "transform":
            resp = await pics.transform(name)
            assert (resp.status, resp.headers["X-Cache"]) == (200, "MISS"), await resp.text()
            return centre(await resp.read())
        resp = await pics.get(f"/api/lqip?url=/{ZONE}{name}")
        assert (resp.status, resp.headers["X-Cache"]) == (200, "MISS"), await resp.text()
        data_uri = (await resp.json())["lqip"]
        return centre(base64.b64decode(data_uri.split(",", 1)[1]))

    assert close_to(await made(), RED)
    version["body"] = image(BLUE)
    resp = await pics.cdn.control.post("/api/purge", json={"urls": [f"/{ZONE}{name}"]}, headers=PURGE)
    assert resp.status == 200, await resp.text()
    assert close_to(await made(), BLUE)
    assert pics.origin.count(name) == 2


@pytest.mark.parametrize("route", ["transform", "lqip"])
async def test_a_variant_that_failed_is_made_again_from_the_image_fetched_after_a_purge(
        pics: Pics, route: str) -> None:
    """The origin sent bytes that do not decode, then the image, under one ETag: the failure is remembered (the
    image pool is not run again on every request for it) until a purge of the image, after which the variant is
    made from the bytes fetched again, not answered with the failure of the old ones."""
    name = f"/fixed-{route}.png"
    version = {"body": b"\x89PNG\r\n\x1a\n" + bytes(200)}

    async def origin(request: web.Request) -> web.StreamResponse:   # one ETag, whatever the bytes
        return web.Response(body=version["body"], headers={**LONG, "ETag": '"fixed"', "Content-Type": "image/png"})

    pics.origin.route(name, origin)
    target = f"/api/transform?url=/{ZONE}{name}&w=100&format=png" if route == "transform" else \
        f"/api/lqip?url=/{ZONE}{name}"
    failed = [await pics.get(target) for _ in range(2)]
    assert [(resp.status, resp.headers["X-Cache"]) for resp in failed] == [(422, "MISS"), (422, "HIT")]
    version["body"] = image(BLUE)
    resp = await pics.cdn.control.post("/api/purge", json={"urls": [f"/{ZONE}{name}"]}, headers=PURGE)
    assert resp.status == 200, await resp.text()
    made = await pics.get(target)
    assert (made.status, made.headers["X-Cache"]) == (200, "MISS"), await made.text()
    assert pics.origin.count(name) == 2


@pytest.mark.parametrize("soft", [False, True])
async def test_a_purge_of_a_tag_the_origin_gave_its_image_after_a_variant_was_made_drops_that_variant(
        pics: Pics, soft: bool) -> None:
    """The origin began tagging an image (its 304 to a revalidation carries the Cache-Tag; its ETag is the same)
    after a variant of it was made: a purge of that tag names the image, so it drops, or marks stale, that
    variant too, and the next one is made from the image fetched after it (here, new bytes under the same ETag),
    not the one made before the tag came answered as a HIT."""
    name, tag = f"/tagged-later-{'soft' if soft else 'hard'}.png", f"tagged-later-{'soft' if soft else 'hard'}"
    version: dict[str, Any] = {"body": image(RED), "fields": {}}

    async def origin(request: web.Request) -> web.StreamResponse:
        fields = {"ETag": '"same"', "Cache-Control": "max-age=1", **version["fields"]}
        if request.headers.get("If-None-Match") == '"same"':
            return web.Response(status=304, headers=fields)
        return web.Response(body=version["body"], headers={**fields, "Content-Type": "image/png"})

    pics.origin.route(name, origin)
    first = await pics.transform(name)
    assert (first.status, first.headers["X-Cache"]) == (200, "MISS") and close_to(centre(await first.read()), RED)
    version["fields"] = {"Cache-Tag": tag}

    async def tagged_by_its_revalidation() -> bool:
        resp = await pics.transform(name)
        assert tag not in resp.headers.get("Cache-Tag", "")  # the origin's tags tag the variant, never shown
        stored = stored_url(pics.cdn.node, ZONE, name)
        return pics.origin.count(name) > 1 and stored is not None and tag in stored.obj.tags

    await wait_until(tagged_by_its_revalidation, "the source revalidated with a 304 that tags it")
    version["body"] = image(BLUE)
    resp = await pics.cdn.control.post("/api/purge", json={"tags": [tag], "soft": soft}, headers=PURGE)
    assert resp.status == 200, await resp.text()
    if soft:  # the origin confirms the image's ETag once more, then sends the new bytes once asked without it
        version["fields"] = {"Cache-Tag": tag, "Cache-Control": "max-age=600"}
    after = await pics.transform(name)
    assert (after.status, after.headers["X-Cache"]) == (200, "MISS"), (after.status, after.headers.get("X-Cache"))
    if not soft:
        assert close_to(centre(await after.read()), BLUE)


@pytest.mark.parametrize("purged", ["url", "tag"])
async def test_a_source_purged_while_its_body_is_read_makes_this_transform_but_is_not_kept(
        pics: Pics, purged: str) -> None:
    """The origin sends the image's head, then holds its body until a purge naming the source (by URL or by
    its tag) is made: the transform waiting for it is still made from those bytes, but neither the source nor
    that variant is kept, so the next transform asks the origin again (a new image by then)."""
    name, tag = f"/held-{purged}.png", f"held-{purged}"
    old = image(RED)
    release = pics.origin.hold(name, old, {**LONG, "ETag": '"held"', "Content-Type": "image/png",
                                           "Cache-Tag": tag}, first=10)
    first = asyncio.create_task(pics.transform(name))

    async def source_asked() -> bool:
        return pics.origin.count(name) == 1

    await wait_until(source_asked, "the source's fill under way")
    resp = await pics.cdn.control.post("/api/purge", json={"urls": [f"/{ZONE}{name}"]} if purged == "url"
                                       else {"tags": [tag]}, headers=PURGE)
    assert resp.status == 200, await resp.text()
    # Another URL's look-up takes in the purge now, before the held source is stored.
    pics.origin.answer("/other-traffic.png", image(BLUE), headers=LONG)
    assert (await pics.get(f"/{ZONE}/other-traffic.png")).status == 200
    pics.origin.answer(name, image(BLUE), headers={**LONG, "ETag": '"new"', "Content-Type": "image/png"})
    release.set()
    answer = await first
    assert (answer.status, answer.headers.get("X-Cache")) == (200, "MISS"), (await answer.read())[:200]
    assert close_to(centre(await answer.read()), RED)
    again = await pics.transform(name)
    assert (again.status, again.headers.get("X-Cache")) == (200, "MISS"), (await again.read())[:200]
    assert close_to(centre(await again.read()), BLUE), pics.origin.count(name)
    assert pics.origin.count(name) == 2


async def test_a_delivery_of_another_vary_variant_does_not_wait_for_the_body_of_a_sources_fill(pics: Pics) -> None:
    """The origin negotiates the image (`Vary: Accept`: WebP for a client that accepts it). A transform's source
    fill (sent without Accept) has its head in and its body held; a browser's delivery of the URL with
    `Accept: image/webp` waits for the URL's flight, and learns from that head that the answer being kept is
    another variant: it asks for its own at once, instead of waiting for the source's whole body first."""
    name = "/negotiated-held.png"
    png, webp = image(RED), image(BLUE, fmt="WEBP")
    release = asyncio.Event()

    async def negotiated(request: web.Request) -> web.StreamResponse:
        headers = {**LONG, "Vary": "Accept"}
        if "image/webp" in request.headers.get("Accept", ""):
            return web.Response(body=webp, headers={**headers, "Content-Type": "image/webp"})
        response = web.StreamResponse(headers={**headers, "Content-Type": "image/png"})
        response.content_length = len(png)
        await response.prepare(request)
        await response.write(png[:10])
        await release.wait()
        await response.write(png[10:])
        return response

    pics.origin.route(name, negotiated)
    transformed = asyncio.create_task(pics.transform(name))
    flights = pics.cdn.edge.app[FLIGHTS]
    key = flight_key(pull_key(ZONE, name, ""), pics.cdn.node.config.pull_zones[ZONE])

    async def source_asked() -> bool:
        return pics.origin.count(name) == 1

    await wait_until(source_asked, "the source's fill under way")
    delivery = asyncio.create_task(pics.get(f"/{ZONE}{name}", headers={"Accept": "image/webp,*/*"}))
    try:
        async def joined() -> bool:
            return flights.joined(key) == 1

        async def answered() -> bool:
            return delivery.done()

        await wait_until(joined, "the delivery waiting for the URL's flight")
        await wait_until(answered, "the delivery answered while the source's body is held")
        resp = delivery.result()
        assert (resp.status, resp.headers["X-Cache"], await resp.read()) == (200, "MISS", webp)
        assert not transformed.done()
    finally:
        release.set()
    made = await transformed
    assert made.status == 200, await made.text()
    assert close_to(centre(await made.read()), RED)
    assert pics.origin.count(name) == 2


@pytest.mark.parametrize("purged", ["url", "tag", "soft"])
async def test_a_variant_being_made_when_its_source_is_purged_is_not_kept(
        pics: Pics, purged: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The image pool holds a transform of a cached image while a purge names the image: the transform is answered
    from what it read, but that variant is not kept, so the next request makes it from the image as the origin
    has it now, even an origin that changed the bytes and kept the ETag (what a purge is for)."""
    name, tag = f"/making-{purged}.png", f"making-{purged}"
    version = {"body": image(RED)}

    async def origin(request: web.Request) -> web.StreamResponse:   # one ETag, whatever the bytes
        return web.Response(body=version["body"], headers={**LONG, "ETag": '"same"', "Content-Type": "image/png",
                                                            "Cache-Tag": tag})

    pics.origin.route(name, origin)
    assert (await pics.get(f"/{ZONE}{name}")).status == 200   # the image cached as it is
    pool = pics.cdn.edge.app[IMAGE_POOL]
    run, started, release = pool.run, asyncio.Event(), asyncio.Event()

    async def held(*args: Any, **kwargs: Any) -> Any:
        started.set()
        await release.wait()
        return await run(*args, **kwargs)

    monkeypatch.setattr(pool, "run", held)
    first = asyncio.create_task(pics.transform(name))
    await asyncio.wait_for(started.wait(), 10)
    purge = {"url": {"urls": [f"/{ZONE}{name}"]}, "tag": {"tags": [tag]},
             "soft": {"urls": [f"/{ZONE}{name}"], "soft": True}}[purged]
    resp = await pics.cdn.control.post("/api/purge", json=purge, headers=PURGE)
    assert resp.status == 200, await resp.text()
    version["body"] = image(BLUE)
    monkeypatch.setattr(pool, "run", run)
    release.set()
    answer = await first
    assert (answer.status, answer.headers["X-Cache"]) == (200, "MISS")
    assert close_to(centre(await answer.read()), RED)   # made from the bytes it read before the purge
    again = await pics.transform(name)
    assert (again.status, again.headers["X-Cache"]) == (200, "MISS")
    assert close_to(centre(await again.read()), BLUE), pics.origin.count(name)
    assert pics.origin.count(name) == 2


async def test_a_304_the_origin_sends_unasked_does_not_keep_an_image_without_validators(pics: Pics) -> None:
    """An image without ETag or Last-Modified is asked for again without conditions when stale: a 304 then answers
    nothing (RFC 9110 15.4.5), so its variants are not answered fresh from the old image for the 304's lifetime;
    it is the origin's error, with the stale image where stale-if-error allows it (as a delivery takes it)."""
    for name, lifetime in (("/unasked.png", "max-age=1"), ("/unasked-sie.png", "max-age=1, stale-if-error=600")):
        answers = 0

        async def origin(request: web.Request, lifetime: str = lifetime) -> web.StreamResponse:
            nonlocal answers
            answers += 1
            if answers > 1:
                return web.Response(status=304, headers={"Cache-Control": "max-age=600"})
            return web.Response(body=image(RED), headers={"Cache-Control": lifetime, "Content-Type": "image/png"})

        pics.origin.route(name, origin)
        assert (await pics.transform(name)).status == 200
        await asyncio.sleep(1.2)  # stale
        again = await pics.transform(name)
        assert [seen.headers.get("If-None-Match") for seen in pics.origin.requests(name)] == [None, None]
        if name == "/unasked.png":
            assert again.status == 502, again.headers.get("Cache-Control")
            assert "The origin answered 304" in (await again.json())["error"]
        else:
            assert (again.status, max_age(again)) == (200, 0)   # the stale image, not one made fresh by the 304


async def test_a_412_to_a_sources_revalidation_asks_for_the_image_again_whole(pics: Pics) -> None:
    """An origin that answers the edge's revalidation of a stale image (its If-None-Match) with 412 rather than 304
    (not conforming: RFC 9110 13.1.2): the 412 answers the edge's own validators, not the image, so the image is
    asked for again without them, as a delivery's revalidation does, and its variant made (the transform was 502,
    the 412 taken for the image's answer)."""
    async def refusing(request: web.Request) -> web.StreamResponse:
        if request.headers.get("If-None-Match") is not None:
            return web.Response(status=412, headers={"Cache-Control": "max-age=600"})
        return web.Response(body=image(RED), headers={"ETag": '"red"', "Cache-Control": "max-age=1",
                                                      "Content-Type": "image/png"})

    pics.origin.route("/refused-412.png", refusing)
    assert (await pics.transform("/refused-412.png")).status == 200

    async def stale() -> bool:
        found = stored_url(pics.cdn.node, ZONE, "/refused-412.png")
        return found is not None and found.freshness.lifetime <= found.freshness.age(time.time())

    await wait_until(stale, "the image stale")
    again = await pics.transform("/refused-412.png", "w=90&format=png")
    assert again.status == 200, await again.text()
    assert close_to(centre(await again.read()), RED)
    assert [seen.headers.get("If-None-Match") for seen in pics.origin.requests("/refused-412.png")] == [
        None, '"red"', None]


async def test_an_origin_down_serves_the_stale_source_or_the_error_envelope(pics: Pics) -> None:
    down = ScriptedOrigin()
    down.answer("/kept.png", image(RED), headers={"Cache-Control": "max-age=1, stale-if-error=600", "ETag": '"k"'})
    down.answer("/lost.png", image(RED), headers={"Cache-Control": "max-age=1", "ETag": '"l"'})
    server = await serve_origin(down)
    await add_pull_zone(pics.cdn, "downpics", {"Url": f"http://127.0.0.1:{server.port}{PREFIX}"})
    try:
        for name in ("/kept.png", "/lost.png"):
            assert (await pics.get(f"/api/transform?url=/downpics{name}&w=100")).headers["X-Cache"] == "MISS"
    finally:
        await server.close()

    async def refused() -> bool:
        return (await pics.get("/api/transform?url=/downpics/lost.png&w=100")).status != 200

    await wait_until(refused, "the source without stale-if-error given up")
    lost = await pics.get("/api/transform?url=/downpics/lost.png&w=100")
    body = await lost.json()
    assert (lost.status, body["HttpCode"]) == (502, 502) and "origin could not be reached" in body["error"]
    await expect_error(await pics.get("/api/lqip?url=/downpics/lost.png"), 502, "OriginUnreachable")
    kept = await pics.get("/api/transform?url=/downpics/kept.png&w=100")
    assert (kept.status, kept.headers["X-Cache"], max_age(kept)) == (200, "STALE", 0)  # stale: not kept by clients
    assert (down.count("/kept.png"), down.count("/lost.png")) == (1, 1)


async def test_a_source_whose_revalidation_body_the_origin_cuts_answers_stale_and_so_do_the_requests_waiting(
        pics: Pics) -> None:
    """A stale source's revalidation, for a transform, gets a new image's head and then its body is cut: the
    transform is made from the stale source (stale-if-error), not refused 502, and the deliveries of the URL that
    waited for that fill answer with the stale image too, rather than each asking the failing origin itself."""
    name = "/source-body-cut.png"
    red, blue = image(RED), image(BLUE)
    waiting = 3
    go = asyncio.Event()

    async def cut_after_the_first(request: web.Request) -> web.StreamResponse:
        if pics.origin.count(name) == 1:
            return web.Response(body=red, headers={"Content-Type": "image/png",
                                                   "Cache-Control": "max-age=1, stale-if-error=600"})
        await go.wait()
        response = web.StreamResponse(headers={**LONG, "Content-Type": "image/png"})
        response.content_length = len(blue)
        await response.prepare(request)
        await response.write(blue[:10])
        assert request.transport is not None
        request.transport.close()
        return response

    pics.origin.route(name, cut_after_the_first)
    assert (await pics.get(f"/{ZONE}{name}")).headers["X-Cache"] == "MISS"
    await wait_stale(pics.cdn.node, ZONE, name)
    flights = pics.cdn.edge.app[FLIGHTS]
    key = flight_key(pull_key(ZONE, name, ""), pics.cdn.node.config.pull_zones[ZONE])
    transformed = asyncio.create_task(pics.transform(name))

    async def revalidating() -> bool:
        return pics.origin.count(name) == 2

    await wait_until(revalidating, "the source's revalidation")
    deliveries = [asyncio.create_task(pics.get(f"/{ZONE}{name}")) for _ in range(waiting)]

    async def all_joined() -> bool:
        return flights.joined(key) == waiting

    await wait_until(all_joined, "the deliveries waiting for the source's fill")
    go.set()
    made = await transformed
    assert made.status == 200, made.headers
    assert (close_to(centre(await made.read()), RED), max_age(made)) == (True, 0)  # of the stale source: not kept
    answers = await asyncio.gather(*deliveries)
    assert [(resp.status, await resp.read(), resp.headers["X-Cache"]) for resp in answers] == [
        (200, red, "STALE")] * waiting
    assert pics.origin.count(name) == 2


# --- the limits a stored file has -----------------------------------------------------------------------------


async def test_a_source_over_the_pixel_bound_is_422_before_it_is_decoded(pics: Pics) -> None:
    pics.origin.answer("/huge.png", image(RED, (1200, 1000)), headers=LONG)
    resp = await pics.transform("/huge.png")
    body = await resp.json()
    assert resp.status == 422 and "exceeds this edge's limit of 1,000,000 pixels" in body["error"]


async def test_a_source_over_the_byte_limit_is_422_whether_declared_or_cached(pics: Pics) -> None:
    data = noise_png(400)
    assert len(data) > MAX_SOURCE_BYTES
    pics.origin.answer("/heavy.png", data, headers=LONG)
    for _ in range(2):
        resp = await pics.transform("/heavy.png")
        body = await resp.json()
        assert resp.status == 422 and f"limit of {MAX_SOURCE_BYTES:,} bytes" in body["error"], body
    await expect_error(await pics.get(f"/api/blurhash?url=/{ZONE}/heavy.png"), 422, "SourceTooLarge")
    # Delivered as it is, it is stored (the object limit is far larger), and still refused as a source.
    assert (await pics.get(f"/{ZONE}/heavy.png")).status == 200
    resp = await pics.transform("/heavy.png")
    assert resp.status == 422
    # The first refusal asked the origin; the next ones were remembered (no head, nor a chunked body read up to the
    # limit, per variant a client asks for), then the delivery's own request.
    assert pics.origin.count("/heavy.png") == 2


@pytest.mark.parametrize("declared", [True, False])
async def test_variant_requests_waiting_for_a_source_too_large_are_refused_without_asking_the_origin_each(
        pics: Pics, declared: bool) -> None:
    """Variant requests arrive while the source's fill is under way: that of an image whose declared length is over
    the limit (its head held), or one sent chunked (its first bytes held). The refusal the fill ends with is theirs
    too: each of them asked the origin again once it ended, reading a chunked body up to the limit once more."""
    name = f"/too-large-{'declared' if declared else 'chunked'}.png"
    data = noise_png(400)
    assert len(data) > MAX_SOURCE_BYTES
    release = asyncio.Event()

    async def held(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={**LONG, "Content-Type": "image/png"})
        if declared:
            response.content_length = len(data)
            await release.wait()
            await response.prepare(request)
        else:
            response.enable_chunked_encoding()
            await response.prepare(request)
            await response.write(data[:100])
            await release.wait()
        await response.write(data[100:] if not declared else data)
        return response

    pics.origin.route(name, held)
    key = flight_key(pull_key(ZONE, name, ""), pics.cdn.node.config.pull_zones[ZONE])
    flights = pics.cdn.edge.app[FLIGHTS]
    first = asyncio.create_task(pics.transform(name, "w=100&format=png"))
    try:
        async def asked() -> bool:
            return pics.origin.count(name) == 1

        await wait_until(asked, "the source's fill under way")
        others = [asyncio.create_task(pics.transform(name, f"w={width}&format=png")) for width in (101, 102, 103)]

        async def joined() -> bool:
            return flights.joined(key) == len(others)

        await wait_until(joined, "the other variant requests waiting for the source's fill")
    finally:
        release.set()
    answers = [await first, *[await other for other in others]]
    assert [answer.status for answer in answers] == [422] * 4
    for answer in answers:
        assert "is too large" in (await answer.json())["error"]
    assert pics.origin.count(name) == 1


async def test_a_refusal_for_size_is_remembered_only_until_a_purge(pics: Pics) -> None:
    """The image shrunk at the origin and its URL purged: the next transform asks the origin again and is made."""
    pics.origin.answer("/shrinks.png", noise_png(400), headers=LONG)
    for width in (100, 101):
        assert (await pics.transform("/shrinks.png", f"w={width}&format=png")).status == 422
    assert pics.origin.count("/shrinks.png") == 1
    pics.origin.answer("/shrinks.png", image(RED), headers=LONG)
    resp = await pics.cdn.control.post("/api/purge", json={"urls": [f"/{ZONE}/shrinks.png"]}, headers=PURGE)
    assert resp.status == 200, await resp.text()
    assert (await pics.transform("/shrinks.png")).status == 200
    assert pics.origin.count("/shrinks.png") == 2


async def test_a_webp_of_a_panorama_wider_than_webp_holds_is_422_not_an_internal_error(pics: Pics) -> None:
    """A 17000-pixel-wide strip (within the pixel bound) asked for as WebP, as a browser's `format=auto` asks: libwebp
    refuses a side over 16383 pixels, and the image worker's crash on it was answered 500 "internal error". Asked for
    with `format=auto`, it is answered in a format that holds it (a PNG here)."""
    pics.origin.answer("/panorama.png", image(RED, (17000, 4)), headers={**LONG, "Content-Type": "image/png"})
    resp = await pics.transform("/panorama.png", "format=webp", headers={"Accept": "image/webp,*/*"})
    assert resp.status == 422 and "WebP holds at most 16383 pixels a side" in (await resp.json())["error"]
    auto = await pics.transform("/panorama.png", "format=auto", headers={"Accept": "image/webp,*/*"})
    assert (auto.status, auto.headers["Content-Type"], opened(await auto.read()).size) == (200, "image/png", (17000, 4))
    made = await pics.transform("/panorama.png", "format=webp&w=1000")
    assert (made.status, opened(await made.read()).size) == (200, (1000, 1))


async def test_a_source_that_is_not_an_image_or_not_there_is_refused_as_a_stored_one_is(pics: Pics) -> None:
    pics.origin.answer("/notes.txt", b"just text", headers={**LONG, "Content-Type": "text/plain"})
    resp = await pics.transform("/notes.txt", "w=100")
    assert resp.status == 415 and "Cannot transform a 'txt' source" in (await resp.json())["error"]
    resp = await pics.transform("/notes.txt", "w=100&format=png")
    assert resp.status in (415, 422)
    missing = await pics.transform("/missing.png")
    assert missing.status == 404
    await expect_error(await pics.get(f"/api/lqip?url=/{ZONE}/missing.png"), 404, "AssetNotFound")
    assert (await pics.get(f"/api/auto?path=/{ZONE}/missing.png")).status == 404


async def test_an_origin_404_is_kept_as_a_delivery_keeps_it_so_variant_requests_do_not_each_ask(pics: Pics) -> None:
    """A missing image's 404 the origin lets caches keep is stored by the first variant request, as a delivery
    stores it: the requests for it meanwhile and after are 404 from the cache, not one origin request each."""
    pics.origin.answer("/gone.png", b"no such image", status=404, headers=LONG)
    answers = await asyncio.gather(*(pics.transform("/gone.png", f"w={width}") for width in range(50, 55)))
    answers.append(await pics.transform("/gone.png", "w=60"))
    assert [answer.status for answer in answers] == [404] * 6
    await expect_error(await pics.get(f"/api/blurhash?url=/{ZONE}/gone.png"), 404, "AssetNotFound")
    assert (await pics.get(f"/api/auto?path=/{ZONE}/gone.png")).status == 404
    delivered = await pics.get(f"/{ZONE}/gone.png")
    assert (delivered.status, delivered.headers["X-Cache"]) == (404, "HIT")
    assert pics.origin.count("/gone.png") == 1


SVG = ('<svg xmlns="http://www.w3.org/2000/svg" width="200" height="100">'
       '<rect width="200" height="100" fill="rgb(220,30,30)"/></svg>')


async def test_a_gzip_compressed_svg_is_sanitised_as_a_plain_one_is(pics: Pics) -> None:
    """librsvg inflates a gzip-compressed SVG (svgz) itself: the edge inflates it first, so what it renders has
    passed the sanitiser and its bounds (here, the DOCTYPE refusal), whatever the origin calls it."""
    hostile = ('<!DOCTYPE svg [<!ENTITY red "rgb(220,30,30)">]>' + SVG.replace("rgb(220,30,30)", "&red;"))
    pics.origin.answer("/entity.png", gzip.compress(hostile.encode()), headers={**LONG, "Content-Type": "image/png"})
    refused = await pics.transform("/entity.png")
    assert refused.status == 422, (refused.status, refused.headers.get("Content-Type"))
    assert "DOCTYPE or ENTITY declaration" in (await refused.json())["error"]
    await expect_error(await pics.get(f"/api/lqip?url=/{ZONE}/entity.png"), 422, "UndecodableImage")
    pics.origin.answer("/plain.svgz", gzip.compress(SVG.encode()), headers={**LONG, "Content-Type": "image/svg+xml"})
    clean = await pics.transform("/plain.svgz")
    assert (clean.status, clean.headers["Content-Type"]) == (200, "image/png"), await clean.text()
    assert close_to(centre(await clean.read()), RED)


@pytest.mark.parametrize("coding", ["gzip", "x-gzip", "deflate", "deflate-raw"])
async def test_an_image_the_origin_sends_content_coded_is_transformed_from_what_the_coding_holds(
        pics: Pics, coding: str) -> None:
    """A source's request asks for no coding, which RFC 9110 12.5.3 lets an origin take for any (an S3 object
    stored gzip-coded is sent so to every request): the PNG came as gzip bytes, which the pipeline took for the
    image (422, "its gzip data holds no SVG"). It is decoded first; a delivery of the URL still gets it coded."""
    name = f"/coded-{coding}.png"
    plain = image(RED)
    if coding == "deflate-raw":  # as some servers send deflate: without zlib's wrapper
        squeezer = zlib.compressobj(wbits=-zlib.MAX_WBITS)
        coded, field = squeezer.compress(plain) + squeezer.flush(), "deflate"
    else:
        coded, field = (zlib.compress(plain), coding) if coding == "deflate" else (gzip.compress(plain), coding)
    pics.origin.answer(name, coded, headers={**LONG, "Content-Type": "image/png", "Content-Encoding": field})
    made = await pics.transform(name)
    assert (made.status, made.headers["Content-Type"]) == (200, "image/png"), await made.text()
    assert "Content-Encoding" not in made.headers
    assert opened(await made.read()).size == (100, 50) and close_to(centre(await made.read()), RED)
    delivered = await pics.get(f"/{ZONE}{name}", auto_decompress=False)
    assert (delivered.headers["Content-Encoding"], await delivered.read()) == (field, coded)
    assert pics.origin.count(name) == 1


async def test_an_image_under_a_coding_the_edge_does_not_decode_is_refused_saying_so(pics: Pics) -> None:
    pics.origin.answer("/coded.br.png", b"\x1b\x03\x00", headers={**LONG, "Content-Type": "image/png",
                                                                   "Content-Encoding": "br"})
    refused = await pics.transform("/coded.br.png")
    assert refused.status == 502, await refused.text()
    assert "content coding br" in (await refused.json())["error"]
    pics.origin.answer("/broken.gz.png", gzip.compress(image(RED))[:40],
                       headers={**LONG, "Content-Type": "image/png", "Content-Encoding": "gzip"})
    broken = await pics.transform("/broken.gz.png")
    assert broken.status == 502 and "do not decode" in (await broken.json())["error"], await broken.text()


@pytest.mark.parametrize("before", ["spaces", "newlines", "bom-and-spaces", "a-long-run"])
async def test_an_svg_after_a_long_run_of_whitespace_is_sanitised_as_any_svg_is(pics: Pics, before: str) -> None:
    """libvips takes bytes for an SVG after any run of whitespace: an origin's SVG behind 600 bytes of whitespace,
    or 100,000, is still one, and what librsvg renders of it has passed the sanitiser (here, its DOCTYPE refusal),
    as an SVG without them has, whatever its name and Content-Type."""
    padding = {"spaces": b" " * 600, "newlines": b"\r\n" * 300, "bom-and-spaces": b"\xef\xbb\xbf" + b" " * 600,
               "a-long-run": b"\n" * 100_000}[before]
    hostile = ('<!DOCTYPE svg [<!ENTITY red "rgb(220,30,30)">]>' + SVG.replace("rgb(220,30,30)", "&red;")).encode()
    name = f"/padded-{before}.png"
    pics.origin.answer(name, padding + hostile, headers={**LONG, "Content-Type": "image/png"})
    refused = await pics.transform(name)
    assert refused.status == 422, (refused.status, refused.headers.get("Content-Type"))
    assert "DOCTYPE or ENTITY declaration" in (await refused.json())["error"]
    await expect_error(await pics.get(f"/api/lqip?url=/{ZONE}{name}"), 422, "UndecodableImage")
    pics.origin.answer(f"/padded-clean-{before}.svg", padding + SVG.encode(),
                       headers={**LONG, "Content-Type": "image/svg+xml"})
    clean = await pics.transform(f"/padded-clean-{before}.svg")
    assert (clean.status, clean.headers["Content-Type"]) == (200, "image/png"), await clean.text()
    assert close_to(centre(await clean.read()), RED)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def quick_pics(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Pics]:
    """A pull zone whose requests wait at most 1 s for a flight to land (the origin's first-byte time)."""
    async with pull_pictures(tmp_path_factory.mktemp("pull-images-quick"),
                             ASSETCDN_ORIGIN_FIRST_BYTE_TIMEOUT_S="1") as pictures:
        yield pictures


@pytest.mark.parametrize("first", ["transform", "delivery"])
async def test_a_request_waiting_for_a_sources_background_revalidation_gets_its_new_body(
        quick_pics: Pics, first: str) -> None:
    """A stale source (stale-while-revalidate) is revalidated in the background, by a transform or by a delivery;
    a reload meanwhile waits for that flight. It learns that the answer is being kept as soon as the origin's head
    comes, and gets the new body when it is stored, however long after the first-byte time that is."""
    name = f"/swr-{first}.png"
    fields = {"Content-Type": "image/png", "Cache-Control": "max-age=1, stale-while-revalidate=60"}
    quick_pics.origin.answer(name, image(RED), headers={**fields, "ETag": '"red"'})
    assert (await quick_pics.get(f"/{ZONE}{name}")).status == 200
    await asyncio.sleep(2.1)  # stale (max-age=1), within stale-while-revalidate
    release = quick_pics.origin.hold(name, image(BLUE), {**fields, "ETag": '"blue"'}, first=100)
    started = await (quick_pics.transform(name) if first == "transform" else quick_pics.get(f"/{ZONE}{name}"))
    assert started.status == 200  # the stale one, revalidated in the background

    async def asked_again() -> bool:
        return quick_pics.origin.count(name) == 2

    await wait_until(asked_again, "the background revalidation's request")
    reload = asyncio.create_task(quick_pics.get(f"/{ZONE}{name}", headers={"Cache-Control": "no-cache"}))
    await asyncio.sleep(1.5)  # past the first-byte time: the head came long ago, the body has not
    release.set()
    answer = await reload
    assert answer.status == 200, await answer.text()
    assert close_to(centre(await answer.read()), BLUE)


async def test_a_source_gone_stale_before_its_fill_reached_the_disk_tier_is_revalidated_for_a_transform(
        pics: Pics) -> None:
    """The source's fill answers from the memory tier while its disk batch is still to be written (the writer busy:
    a loaded disk), and the source is stale by then (max-age=1): a transform made from the stale source still
    revalidates it in the background, rather than taking that fill, which brought this very source and waits for
    its disk write only, for a revalidation under way."""
    name = "/stale-before-written.png"
    pics.origin.answer(name, image(RED), headers={"Content-Type": "image/png", "ETag": '"red"',
                                                  "Cache-Control": "max-age=1, stale-while-revalidate=600"})
    with writer_held(pics.cdn.node):  # no disk batch is written meanwhile
        # Answered before it is stored; its connection closed, as the fill holds it until its disk write is done.
        assert (await pics.get(f"/{ZONE}{name}", headers={"Connection": "close"})).status == 200
        await wait_stale(pics.cdn.node, ZONE, name)
        transformed = asyncio.ensure_future(pics.transform(name))  # its variant is stored once the writer is free

        async def revalidating() -> bool:
            return pics.origin.count(name) == 2

        await wait_until(revalidating, "the stale source's background revalidation")
    resp = await transformed
    assert (resp.status, resp.headers["Content-Type"]) == (200, "image/png"), await resp.text()
    assert pics.origin.requests(name)[1].headers.get("If-None-Match") == '"red"'


@pytest.mark.parametrize("route", ["transform", "auto"])
async def test_a_soft_purge_of_the_source_makes_its_variants_again_never_answers_a_mark(
        pics: Pics, route: str) -> None:
    """A soft purge names the source's variants too (they carry its tags): they are made again from the source as
    its revalidation leaves it, and no answer carries the cache's own `:soft-purged` mark."""
    name = f"/soft-{route}.png"

    async def origin(request: web.Request) -> web.StreamResponse:
        fields = {**LONG, "ETag": '"soft"', "Content-Type": "image/png"}
        if request.headers.get("If-None-Match") == '"soft"':
            return web.Response(status=304, headers=fields)
        return web.Response(body=image(RED), headers=fields)

    pics.origin.route(name, origin)
    target = (f"/api/transform?url=/{ZONE}{name}&w=100&format=png" if route == "transform"
              else f"/api/auto?path=/{ZONE}{name}")
    first = await pics.get(target)
    assert first.status == 200
    purged = await pics.cdn.control.post("/api/purge", json={"urls": [f"/{ZONE}{name}"], "soft": True},
                                         headers=PURGE)
    assert purged.status == 200, await purged.text()

    async def made_again() -> bool:
        answer = await pics.get(target)
        return answer.status == 200 and answer.headers["X-Cache"] == "MISS"

    await wait_until(made_again, "the variant made again after the soft purge")
    again = await pics.get(target)
    assert (again.status, again.headers["X-Cache"]) == (200, "HIT")
    assert not any(field.startswith(":") for field in again.headers)
    assert close_to(centre(await again.read()), RED) if route == "transform" else True
    assert [seen.headers.get("If-None-Match") for seen in pics.origin.requests(name)] == [None, '"soft"']


async def test_a_source_a_304_makes_private_is_made_into_no_variant(pics: Pics) -> None:
    name = "/turns-private.png"
    private = False

    async def origin(request: web.Request) -> web.StreamResponse:
        fields = {"Cache-Control": "private, max-age=600" if private else "max-age=1", "ETag": '"tp"'}
        if request.headers.get("If-None-Match") == '"tp"':
            return web.Response(status=304, headers=fields)
        return web.Response(body=image(RED), headers={**fields, "Content-Type": "image/png"})

    pics.origin.route(name, origin)
    assert (await pics.transform(name, "w=100&format=png")).status == 200
    await asyncio.sleep(1.2)  # stale
    private = True
    for _ in range(2):
        refused = await pics.transform(name, "w=60&format=png")
        assert refused.status == 502, await refused.text()
        assert "may not be kept by a shared cache (private)" in (await refused.json())["error"]  # /api/transform's


async def test_sources_read_at_once_are_bounded_per_worker_and_past_it_a_request_is_503(tmp_path: Path) -> None:
    """Image sources are read whole from origins before they are kept: a worker reads at most
    `[origin] source_reads_mb` of them at once. A transform whose source does not fit beside one being read is
    answered 503 EdgeBusy with Retry-After, asking nothing more of its origin than what it read; once the other
    source is read, it is made."""
    async with pull_pictures(tmp_path, ASSETCDN_ORIGIN_SOURCE_READS_MB=str(4096 / (1024 * 1024))) as budgeted:
        held, refused = noise_png(30), noise_png(30)
        assert 4096 - 2500 < len(refused) < 4096 < 2500 + len(refused)
        release = budgeted.origin.hold("/held-read.png", held, {**LONG, "Content-Type": "image/png"}, first=2500)
        budgeted.origin.answer("/second-read.png", refused, headers={**LONG, "Content-Type": "image/png"})
        first = asyncio.create_task(budgeted.transform("/held-read.png"))

        async def reading() -> bool:
            return budgeted.cdn.node.origins.source_reads.held >= 2500

        await wait_until(reading, "the first source's body being read")
        busy = await budgeted.transform("/second-read.png")
        assert busy.status == 503, await busy.read()
        refusal = await busy.json()  # the transform route's envelope
        assert refusal["HttpCode"] == 503 and "reading as many image sources" in refusal["error"], refusal
        assert busy.headers.get("Retry-After") == "1"  # as a delivery's EdgeBusy says when to come back
        release.set()
        assert (await first).status == 200
        assert budgeted.cdn.node.origins.source_reads.held == 0
        made = await budgeted.transform("/second-read.png")
        assert (made.status, made.headers.get("X-Cache")) == (200, "MISS")
        assert budgeted.cdn.node.origins.source_reads.held == 0


@pytest.mark.parametrize("revalidation", ["background", "foreground"])
async def test_a_sources_revalidation_answered_with_what_may_not_be_kept_drops_the_old_source(
        pics: Pics, revalidation: str) -> None:
    """The origin replaced the image with one a shared cache may not keep (`no-store`): that full answer says the
    stored source is not the origin's current image (RFC 9111 4.3.3), so the source goes, as a delivery's
    revalidation drops the URL's copy. Left, the old image went on being transformed: within
    stale-while-revalidate (each transform answering from it and asking again in the background), or under
    stale-if-error once the origin failed."""
    name = f"/replaced-unkept-{revalidation}.png"
    lasting = "stale-while-revalidate=600" if revalidation == "background" else "stale-if-error=600"
    pics.origin.answer(name, image(RED), headers={"Cache-Control": f"max-age=1, {lasting}", "ETag": '"old"',
                                                  "Content-Type": "image/png"})
    first = await pics.transform(name)
    assert (first.status, first.headers["X-Cache"]) == (200, "MISS"), await first.text()
    await asyncio.sleep(1.2)  # stale
    pics.origin.answer(name, image(BLUE), headers={"Cache-Control": "no-store", "Content-Type": "image/png"})
    if revalidation == "background":
        stale = await pics.transform(name)  # the stale source, revalidated in the background
        assert stale.status == 200 and close_to(centre(await stale.read()), RED)

        async def revalidated() -> bool:  # the background revalidation done with the stored source
            return pics.origin.count(name) == 2 and pics.cdn.node.cache.get(pull_key(ZONE, name, "")) is None

        await wait_until(revalidated, "the background revalidation's end")
    else:
        refused = await pics.transform(name)  # the origin's new image may not be kept: no variant of it
        assert refused.status == 502, await refused.text()
        pics.origin.answer(name, b"down", status=500)  # and then the origin fails
    after = await pics.transform(name)
    assert after.status == 502, (after.status, after.headers.get("X-Cache"))  # never the old image
    assert pics.origin.count(name) == 3


async def test_a_source_purged_while_its_revalidation_waits_for_a_failing_origin_makes_no_variant(pics: Pics) -> None:
    """The stale source (within stale-if-error) is being revalidated for a transform when a purge of its URL is
    acknowledged; then the origin answers 503. The transform was made from the purged image, as a delivery's answer
    was the purged copy (assetcdn/edge/states/pull.py `unpurged`): it is refused as with no copy."""
    name = "/purged-while-failing.png"
    go = asyncio.Event()
    go.set()

    async def handle(request: web.Request) -> web.StreamResponse:
        if pics.origin.count(name) == 1:
            return web.Response(body=image(RED), headers={
                "Cache-Control": "max-age=1, stale-if-error=600", "ETag": '"s"', "Content-Type": "image/png"})
        await go.wait()
        return web.Response(status=503, body=b"down")

    pics.origin.route(name, handle)
    assert (await pics.transform(name)).headers["X-Cache"] == "MISS"

    await wait_stale(pics.cdn.node, ZONE, name, "the stored source stale")
    go.clear()
    transforming = asyncio.ensure_future(pics.transform(name))

    async def asked_again() -> bool:
        return pics.origin.count(name) == 2

    await wait_until(asked_again, "the source's revalidation under way")
    try:
        resp = await pics.cdn.control.post("/api/purge", json={"urls": [f"/{ZONE}{name}"]}, headers=PURGE)
        assert resp.status == 200, await resp.text()
    finally:
        go.set()
    answer = await transforming
    assert answer.status != 200, answer.headers.get("X-Cache")


@pytest.mark.parametrize("stale_by", ["stale-while-revalidate", "stale-if-error"])
async def test_a_variant_answered_from_a_source_used_stale_is_stale(pics: Pics, stale_by: str) -> None:
    """A variant is used exactly while its source may be: one answered while its source is used past its freshness
    (stale-while-revalidate, or stale-if-error with the origin failing) is `X-Cache: STALE`, and counted so in
    `assetcdn_edge_cache_total` and the statistics, as a delivery of the image itself is and as a stored file's
    variant is while control cannot confirm it; it was HIT, as if the image were fresh."""
    async def stale_results() -> float:
        text = await (await pics.cdn.edge.get("/metrics", headers=METRICS)).text()
        return metric(text, "assetcdn_edge_cache_total", result="STALE")

    name = f"/used-stale-{stale_by}.png"
    # Three seconds: the origin's Date is in whole seconds, so the copy may be up to one second old when stored
    # (RFC 9111 4.2.3's apparent age) and fresh for two only; with max-age=1 the HIT below could come stale.
    pics.origin.answer(name, image(RED), headers={"Cache-Control": f"max-age=3, {stale_by}=600", "ETag": '"s"',
                                                  "Content-Type": "image/png"})
    assert (await pics.transform(name)).headers["X-Cache"] == "MISS"
    assert (await pics.transform(name)).headers["X-Cache"] == "HIT"
    await asyncio.sleep(3.2)  # stale, however old it was when stored
    if stale_by == "stale-if-error":
        pics.origin.answer(name, b"down", status=500)
    before = await stale_results()
    stale = await pics.transform(name)
    assert (stale.status, stale.headers["X-Cache"]) == (200, "STALE"), (stale.status, stale.headers.get("X-Cache"))
    assert close_to(centre(await stale.read()), RED) and max_age(stale) == 0
    assert await stale_results() == before + 1
    if stale_by == "stale-if-error":  # (within stale-while-revalidate, the transform's revalidation refreshed it)
        delivered = await pics.get(f"/{ZONE}{name}")
        assert delivered.headers["X-Cache"] == "STALE"  # the image itself, answered the same way


async def test_a_source_does_not_wait_for_another_vary_variants_body(tmp_path: Path) -> None:
    """An origin that negotiates an image (`Vary: Accept`) is filling a browser's variant (`Accept: image/webp`)
    when a transform asks for the image: the edge's own request (no Accept) selects another variant, so the
    transform asks the origin for its own at once, as a delivery of another variant does. It waited for the whole
    body of the browser's variant first (up to the origin's body timeout), then asked anyway. The origin's idle
    timeout is long here: the held body is not cut off while the transform is waited for."""
    async with pull_pictures(tmp_path, ASSETCDN_ORIGIN_IDLE_TIMEOUT_S="300") as pictures:
        release = asyncio.Event()
        body = image(RED)

        async def negotiated(request: web.Request) -> web.StreamResponse:
            fields = {**LONG, "Vary": "Accept", "Content-Type": "image/png", "ETag": '"neg"'}
            if "image/webp" not in request.headers.get("Accept", ""):
                return web.Response(body=body, headers=fields)
            held = web.StreamResponse(headers={**fields, "Content-Length": str(len(body))})
            await held.prepare(request)
            await held.write(body[:100])
            await release.wait()
            await held.write(body[100:])
            return held

        pictures.origin.route("/negotiated.png", negotiated)
        delivery = asyncio.create_task(pictures.get(f"/{ZONE}/negotiated.png", headers={"Accept": "image/webp"}))
        transform: asyncio.Task[ClientResponse] | None = None
        try:
            async def filling() -> bool:
                return pictures.origin.count("/negotiated.png") == 1

            await wait_until(filling, "the browser's variant being filled")
            transform = asyncio.create_task(pictures.transform("/negotiated.png"))

            async def answered() -> bool:
                return transform.done()

            await wait_until(answered, "the transform answered while the other variant's body is held")
            made = transform.result()
            assert (made.status, made.headers["X-Cache"]) == (200, "MISS"), made.status
            assert close_to(centre(await made.read()), RED)
            seen = pictures.origin.requests("/negotiated.png")
            assert [request.headers.get("Accept") for request in seen] == ["image/webp", None]
        finally:
            release.set()
            await asyncio.gather(delivery, *([transform] if transform is not None else []), return_exceptions=True)


async def test_a_dead_origin_of_image_sources_is_logged_once_per_interval(
        pics: Pics, caplog: pytest.LogCaptureFixture) -> None:
    """Transforms of a zone whose origin is down all fail (502), but the edge logs one line for them per interval,
    not one per request."""
    down = ScriptedOrigin()
    server = await serve_origin(down)
    await add_pull_zone(pics.cdn, "deadpics", {"Url": f"http://127.0.0.1:{server.port}{PREFIX}"})
    await server.close()
    caplog.set_level("INFO", logger="assetcdn.edge.states.pull_source")
    for index in range(12):
        assert (await pics.get(f"/api/transform?url=/deadpics/gone-{index}.png&w=100")).status == 502
    lines = [record.getMessage() for record in caplog.records
             if record.getMessage().startswith("pull zone deadpics: the origin failed for the source")]
    assert len(lines) == 1, lines
