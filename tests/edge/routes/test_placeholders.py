"""/api/lqip and /api/blurhash: JSON shapes, decodable tiny WebPs, 24 h caching, standard-envelope errors."""

from __future__ import annotations

import base64
import hashlib
import re
import time
from collections.abc import AsyncIterator
from types import SimpleNamespace

import blurhash
import pytest
import pytest_asyncio

from tests.support.cdn import ZONE, Cdn, CdnFactory, shared_cdn_apps
from tests.support.control import SECRETS
from tests.support.images import decode, loader, photo_jpeg
from tests.support.wait import wait_until

PHOTO = f"{ZONE}/v1/banners/photo.jpg"
DATA_URI = re.compile(r"^data:image/webp;base64,(.+)$")


# The tests that only add and read their own photo share one CDN; the one that stops control has its own.
SHARED = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def shared_cdn(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Cdn]:
    async with shared_cdn_apps(tmp_path_factory.mktemp("placeholders")) as cdn:
        yield cdn


def _webp(uri: str) -> bytes:
    match = DATA_URI.match(uri)
    assert match, uri[:40]
    return base64.b64decode(match.group(1))


@SHARED
async def test_lqip(shared_cdn: Cdn) -> None:
    cdn, photo = shared_cdn, f"{ZONE}/v1/banners/lqip.jpg"
    await cdn.upload(photo, photo_jpeg(640, 400))
    resp = await cdn.edge.get(f"/api/lqip?url=/{photo}&size=16&blur=10")
    assert resp.status == 200, await resp.text()
    assert resp.headers["Cache-Control"] == "public, max-age=86400"
    body = await resp.json()
    assert set(body) == {"lqip", "bytes", "width", "dateGenerated"}
    webp = _webp(body["lqip"])
    image = decode(webp)
    assert loader(image).startswith("webpload") and (image.width, image.height) == (16, 10)
    assert body["bytes"] == len(webp) and body["width"] == 16
    again = await cdn.edge.get(f"/api/lqip?url=/{photo}&blur=10&size=16")
    assert again.headers["X-Cache"] == "HIT" and await again.json() == body
    default = await (await cdn.edge.get(f"/api/lqip?url=/{photo}")).json()
    assert default["width"] == 32


@SHARED
async def test_blurhash_returns_the_content_hash_and_a_real_blurhash(shared_cdn: Cdn) -> None:
    cdn, photo = shared_cdn, f"{ZONE}/v1/banners/blurhash.jpg"
    await cdn.upload(photo, photo_jpeg(640, 400))
    resp = await cdn.edge.get(f"/api/blurhash?url=/{photo}&size=24")
    assert resp.status == 200, await resp.text()
    assert resp.headers["Cache-Control"] == "public, max-age=86400"
    body = await resp.json()
    assert set(body) == {"url", "hash", "dataUri", "width", "bytes", "dateGenerated", "source", "blurhash"}
    webp = _webp(body["dataUri"])
    assert body["hash"] == hashlib.sha256(webp).hexdigest()[:40]
    assert (body["url"], body["width"], body["bytes"], body["source"]) == (f"/{photo}", 24, len(webp), "fresh")
    assert decode(webp).width == 24
    assert blurhash.components(body["blurhash"]) == (4, 3)   # landscape: 4x3 components
    cached = await (await cdn.edge.get(f"/api/blurhash?url=/{photo}&size=24")).json()
    assert cached["source"] == "cached" and cached["hash"] == body["hash"]


@SHARED
async def test_placeholders_expire_after_24_hours(shared_cdn: Cdn, monkeypatch: pytest.MonkeyPatch) -> None:
    cdn, photo = shared_cdn, f"{ZONE}/v1/banners/expiring.jpg"
    await cdn.upload(photo, photo_jpeg(64, 40))
    first = await (await cdn.edge.get(f"/api/blurhash?url=/{photo}")).json()
    assert (await (await cdn.edge.get(f"/api/blurhash?url=/{photo}")).json())["source"] == "cached"
    monkeypatch.setattr("assetcdn.edge.states.variant.time", SimpleNamespace(time=lambda: time.time() + 86400 + 1))
    later = await (await cdn.edge.get(f"/api/blurhash?url=/{photo}")).json()
    assert later["source"] == "fresh" and later["hash"] == first["hash"]


@SHARED
async def test_placeholder_errors_use_the_standard_envelope(shared_cdn: Cdn) -> None:
    cdn, photo = shared_cdn, f"{ZONE}/v1/banners/errors.jpg"
    await cdn.upload(photo, photo_jpeg(64, 40))
    await cdn.upload(f"{ZONE}/v1/banners/notes.txt", b"not an image")
    cases = [
        ("/api/lqip", 400, "MissingUrl"),
        ("/api/lqip?url=https://example.com/a.png", 400, "AbsoluteUrlForbidden"),
        ("/api/blurhash?url=//example.com/a.png", 400, "AbsoluteUrlForbidden"),
        ("/api/lqip?url=/pics/v1/../x.png", 400, "InvalidUrl"),
        (f"/api/lqip?url=/{photo}&size=7", 400, "InvalidParameter"),
        (f"/api/lqip?url=/{photo}&size=65", 400, "InvalidParameter"),
        (f"/api/lqip?url=/{photo}&blur=0", 400, "InvalidParameter"),
        (f"/api/lqip?url=/{photo}&size={'9' * 5000}", 400, "InvalidParameter"),  # past int()'s 4,300 digits
        (f"/api/blurhash?url=/{photo}&size={'9' * 5000}", 400, "InvalidParameter"),
        (f"/api/lqip?url=/{photo}&blur={'9' * 5000}", 400, "InvalidParameter"),
        (f"/api/blurhash?url=/{ZONE}/v1/banners/none.png", 404, "AssetNotFound"),
        (f"/api/lqip?url=/{ZONE}/v1/banners/notes.txt", 422, "UndecodableImage"),
    ]
    for url, status, code in cases:
        resp = await cdn.edge.get(url)
        assert resp.status == status, (url, await resp.text())
        body = await resp.json()
        assert body["error"]["code"] == code, (url, body)
        assert body["HttpCode"] == status and body["Message"] == body["error"]["message"]


@SHARED
async def test_a_page_on_another_origin_can_read_placeholders_and_search_errors_too(shared_cdn: Cdn) -> None:
    # Placeholders are made for pages, which fetch() them: without Access-Control-Allow-Origin a page on another
    # origin gets a network error, not the JSON (nor the error). Nothing here depends on a key or a cookie.
    cdn, photo = shared_cdn, f"{ZONE}/v1/banners/cross-origin.jpg"
    await cdn.upload(photo, photo_jpeg(64, 40))
    page = {"Origin": "https://shop.example"}
    for url, status in ((f"/api/lqip?url=/{photo}", 200), (f"/api/lqip?url=/{photo}", 200),   # made, then a hit
                        (f"/api/blurhash?url=/{photo}", 200), ("/api/search?q=banner", 200),
                        ("/api/lqip", 400), (f"/api/blurhash?url=/{ZONE}/v1/banners/none.png", 404),
                        (f"/api/lqip?url=/{photo}&size=7", 400), ("/api/search?q=", 400)):
        resp = await cdn.edge.get(url, headers=page)
        assert resp.status == status, (url, await resp.text())
        assert resp.headers.get("Access-Control-Allow-Origin") == "*", url
        # a 429's Retry-After is read too (search's through the edge, as control answers it)
        assert "retry-after" in resp.headers.get("Access-Control-Expose-Headers", "").lower(), url
    # A page sending a header of its own (If-None-Match) asks first, as for /api/transform: 204, not 405.
    for url in (f"/api/lqip?url=/{photo}", f"/api/blurhash?url=/{photo}"):
        preflight = await cdn.edge.options(url, headers={**page, "Access-Control-Request-Method": "GET",
                                                          "Access-Control-Request-Headers": "if-none-match"})
        assert (preflight.status, preflight.headers.get("Access-Control-Allow-Origin")) == (204, "*"), url
        assert "if-none-match" in preflight.headers["Access-Control-Allow-Headers"].lower()
    # Never anything behind a key: the edge's answers for control's managed routes carry no CORS.
    resp = await cdn.edge.get("/api/core/zones", headers=page)
    assert resp.status == 401 and "Access-Control-Allow-Origin" not in resp.headers


def _bytes_served(metrics: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
               if line.startswith("assetcdn_bytes_served_total{") and 'process="edge"' in line)


async def test_placeholders_are_served_like_every_delivery_route(make_cdn: CdnFactory) -> None:
    # The serve sequence answers them: their bytes are counted, and what was never made while control is
    # unreachable is a 503 (as on every route), not a 502.
    cdn = await make_cdn(ASSETCDN_ANALYTICS_FLUSH_INTERVAL_S="0.1")
    await cdn.upload(PHOTO, photo_jpeg(64, 40))
    never_read = f"{ZONE}/v1/banners/never-read.jpg"
    await cdn.upload(never_read, photo_jpeg(48, 30))
    metrics = {"Authorization": f"Bearer {SECRETS.metrics_key}"}
    before = _bytes_served(await (await cdn.edge.get("/metrics", headers=metrics)).text())
    sent = 0
    for url in (f"/api/lqip?url=/{PHOTO}", f"/api/blurhash?url=/{PHOTO}", f"/api/lqip?url=/{PHOTO}"):
        resp = await cdn.edge.get(url)
        assert resp.status == 200, await resp.text()
        sent += len(await resp.read())

    async def counted() -> bool:
        return _bytes_served(await (await cdn.edge.get("/metrics", headers=metrics)).text()) - before >= sent

    await wait_until(counted, "the placeholders' bytes in assetcdn_bytes_served_total")
    assert _bytes_served(await (await cdn.edge.get("/metrics", headers=metrics)).text()) - before == sent

    await cdn.control.close()

    async def unreachable() -> bool:
        return not cdn.node.control_reachable()

    await wait_until(unreachable, "the edge noticing control is gone")
    resp = await cdn.edge.get(f"/api/lqip?url=/{never_read}")
    body = await resp.json()
    assert (resp.status, body["error"]["code"]) == (503, "OriginUnreachable"), body
    cached = await cdn.edge.get(f"/api/lqip?url=/{PHOTO}")
    assert (cached.status, cached.headers["X-Cache"]) == (200, "STALE")
