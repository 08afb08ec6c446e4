"""/api/transform over HTTP on a real edge in front of a real control plane."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest
import pytest_asyncio
import pyvips
from aiohttp import ClientResponse

from assetcdn.edge.app_keys import COUNTERS, IMAGE_POOL
from assetcdn.edge.states.keys import variant_key
from assetcdn.edge.transform.options import parse_transform_options
from assetcdn.shared.counter_store import Limit
from tests.support.cdn import ZONE, Cdn, CdnFactory, shared_cdn_apps
from tests.support.control import METRICS
from tests.support.images import (
    FRAMES,
    LOGO_SVG,
    animated_gif,
    animated_webp,
    black_png,
    decode,
    frames,
    loader,
    photo_jpeg,
    solid_png,
)

PHOTO = f"{ZONE}/v1/banners/photo.jpg"
IMMUTABLE = "public, max-age=31536000, immutable"


def banner(name: str) -> str:
    """A photo path of one test's own: the tests on the module's shared CDN never see each other's assets."""
    return f"{ZONE}/v1/banners/{name}.jpg"


# Tests that only upload and read their own assets share one CDN (one control and edge app and one image
# worker for the module); a test that changes settings, limits or the pool starts its own with `make_cdn`.
SHARED = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def shared_cdn(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Cdn]:
    async with shared_cdn_apps(tmp_path_factory.mktemp("transform")) as cdn:
        yield cdn


def transform_url(path: str, **params: object) -> str:
    query = "&".join(f"{k}={v}" for k, v in {"url": "/" + path, **params}.items())
    return f"/api/transform?{query}"


@SHARED
async def test_resize_format_and_cache_headers(shared_cdn: Cdn) -> None:
    cdn, photo = shared_cdn, banner("resize")
    await cdn.upload(photo, photo_jpeg(640, 400))
    resp = await cdn.edge.get(transform_url(photo, w=320, format="webp"))
    assert resp.status == 200, await resp.text()
    assert resp.headers["Content-Type"] == "image/webp"
    assert resp.headers["Cache-Control"] == IMMUTABLE
    assert resp.headers["X-Cache"] == "MISS"
    assert resp.headers["Cache-Tag"] == f"project-{ZONE},type-banners,format-jpg,all-assets"
    assert "Vary" not in resp.headers  # an explicit format does not depend on Accept
    image = decode(await resp.read())
    assert loader(image).startswith("webpload")
    assert (image.width, image.height) == (320, 200)

    again = await cdn.edge.get(transform_url(photo, format="webp", w=320))  # same options, other order
    assert again.headers["X-Cache"] == "HIT"
    assert again.headers["ETag"] == resp.headers["ETag"]
    assert (await cdn.edge.get(transform_url(photo, w=320, format="webp"),
                               headers={"If-None-Match": resp.headers["ETag"]})).status == 304
    head = await cdn.edge.head(transform_url(photo, w=320, format="webp"))
    assert head.status == 200 and head.headers["Content-Length"] == resp.headers["Content-Length"]

    # No format: the source's own (jpeg), no Vary.
    resp = await cdn.edge.get(transform_url(photo, h=100))
    image = decode(await resp.read())
    assert loader(image).startswith("jpegload") and (image.width, image.height) == (160, 100)
    assert "Vary" not in resp.headers


@pytest.mark.parametrize(("fit", "size"), [("cover", (200, 200)), ("contain", (200, 125)), ("fill", (200, 200))])
@SHARED
async def test_fit_semantics(shared_cdn: Cdn, fit: str, size: tuple[int, int]) -> None:
    cdn, photo = shared_cdn, banner(f"fit-{fit}")
    await cdn.upload(photo, photo_jpeg(640, 400))
    resp = await cdn.edge.get(transform_url(photo, w=200, h=200, fit=fit, format="png"))
    assert resp.status == 200, await resp.text()
    image = decode(await resp.read())
    assert loader(image).startswith("pngload")
    assert (image.width, image.height) == size


@SHARED
async def test_published_fits_and_compass_gravities_are_accepted(shared_cdn: Cdn) -> None:
    cdn, photo = shared_cdn, banner("gravities")
    await cdn.upload(photo, photo_jpeg(640, 400))
    for params, size in [({"fit": "inside"}, (200, 125)), ({"fit": "outside"}, (320, 200)),
                         ({"gravity": "north"}, (200, 200)), ({"gravity": "southwest"}, (200, 200)),
                         ({"gravity": "auto"}, (200, 200)), ({"gravity": "face"}, (200, 200))]:
        resp = await cdn.edge.get(transform_url(photo, w=200, h=200, format="png", **params))
        assert resp.status == 200, (params, await resp.text())
        image = decode(await resp.read())
        assert (image.width, image.height) == size, params
    # The photo's red grows left to right: west keeps the left edge, east the right one.
    west = decode(await (await cdn.edge.get(transform_url(photo, w=100, h=400, gravity="west", format="png"))).read())
    east = decode(await (await cdn.edge.get(transform_url(photo, w=100, h=400, gravity="east", format="png"))).read())
    assert west[0].avg() < 60 < 190 < east[0].avg()


@SHARED
async def test_every_output_format_decodes(shared_cdn: Cdn) -> None:
    cdn, photo = shared_cdn, banner("formats")
    await cdn.upload(photo, photo_jpeg(640, 400))
    for fmt, load in (("webp", "webpload"), ("avif", "heifload"), ("png", "pngload"), ("jpeg", "jpegload")):
        resp = await cdn.edge.get(transform_url(photo, w=64, format=fmt, q=50))
        assert resp.status == 200, await resp.text()
        image = decode(await resp.read())
        assert loader(image).startswith(load), (fmt, loader(image))
        assert image.width == 64


@SHARED
async def test_format_auto_negotiates_from_accept(shared_cdn: Cdn) -> None:
    cdn, photo = shared_cdn, banner("auto")
    await cdn.upload(photo, photo_jpeg(640, 400))
    cases = [("image/avif,image/webp,*/*", {}, "heifload", None),
             ("image/webp,*/*", {}, "webpload", None),
             ("image/png", {}, "jpegload", None),   # jpeg source, no webp: jpeg
             ("image/avif,image/webp", {"Save-Data": "on"}, "webpload", "slow"),
             ("image/avif,image/webp", {"Sec-CH-Effective-Connection-Type": "3g"}, "webpload", "slow"),
             ("image/avif,image/webp", {"Sec-CH-Effective-Connection-Type": "4g"}, "heifload", None)]
    for accept, extra, load, network in cases:
        resp = await cdn.edge.get(transform_url(photo, w=100, format="auto"), headers={"Accept": accept, **extra})
        assert resp.status == 200, await resp.text()
        assert resp.headers["Vary"] == "Accept, Save-Data, Sec-CH-Effective-Connection-Type"
        assert resp.headers.get("X-Network-Aware") == network
        assert loader(decode(await resp.read())).startswith(load), (accept, extra)


@SHARED
async def test_format_auto_answers_a_picture_too_long_for_avif_and_webp_in_a_format_that_holds_it(
        shared_cdn: Cdn) -> None:
    """A long page screenshot (20x20000) asked for with format=auto by a browser taking AVIF: AVIF and WebP hold at
    most 16384 and 16383 pixels a side, and a page cannot ask again for another format, so the answer is the format
    auto picks for a browser that takes neither (PNG here, the source may have alpha), not a 422 telling it to. Asked
    for by name, AVIF is still refused (422), before or after the auto request."""
    cdn, tall = shared_cdn, f"{ZONE}/v1/banners/tall-page.png"
    await cdn.upload(tall, solid_png(20, 20000, (30, 120, 200)))
    explicit = await cdn.edge.get(transform_url(tall, format="avif"))
    assert explicit.status == 422 and "AVIF holds at most 16384" in (await explicit.json())["error"]
    for accept in ("image/avif,image/webp,*/*", "image/webp,*/*", "image/avif,image/webp,*/*"):
        resp = await cdn.edge.get(transform_url(tall, format="auto"), headers={"Accept": accept})
        assert resp.status == 200, await resp.text()
        assert (resp.headers["Content-Type"], resp.headers["Vary"]) == (
            "image/png", "Accept, Save-Data, Sec-CH-Effective-Connection-Type")
        picture = decode(await resp.read())
        assert loader(picture).startswith("pngload") and (picture.width, picture.height) == (20, 20000)
    assert (await cdn.edge.get(transform_url(tall, format="avif"))).status == 422
    fits = await cdn.edge.get(transform_url(tall, format="auto", h=8000), headers={"Accept": "image/avif"})
    assert (fits.status, fits.headers["Content-Type"]) == (200, "image/avif")


@SHARED
async def test_animation_is_kept_in_gif_and_webp(shared_cdn: Cdn) -> None:
    cdn = shared_cdn
    await cdn.upload(f"{ZONE}/v1/banners/anim.gif", animated_gif())
    await cdn.upload(f"{ZONE}/v1/banners/anim.webp", animated_webp())
    for source in ("anim.gif", "anim.webp"):
        for fmt in ("gif", None, "webp"):
            params: dict[str, object] = {"w": 60}
            if fmt == "webp":
                params["format"] = "webp"
            resp = await cdn.edge.get(transform_url(f"{ZONE}/v1/banners/{source}", **params))
            assert resp.status == 200, await resp.text()
            image = decode(await resp.read())
            assert frames(image) == FRAMES, (source, fmt)
            assert image.width == 60 and image.get_page_height() == 40
    # AVIF output keeps one frame (documented): still a valid image.
    resp = await cdn.edge.get(transform_url(f"{ZONE}/v1/banners/anim.gif", w=60, format="avif"))
    assert frames(decode(await resp.read())) == 1


@SHARED
async def test_svg_source_is_rasterised_and_sanitised(shared_cdn: Cdn) -> None:
    cdn = shared_cdn
    await cdn.upload(f"{ZONE}/v1/logos/logo.svg", LOGO_SVG)
    resp = await cdn.edge.get(transform_url(f"{ZONE}/v1/logos/logo.svg", w=400))
    assert resp.status == 200, await resp.text()
    assert resp.headers["Content-Type"] == "image/png"
    image = decode(await resp.read())
    assert loader(image).startswith("pngload") and (image.width, image.height) == (400, 200)


BAD_PARAMETERS = [
    ({"w": "0"}, "w"), ({"w": "8193"}, "w"), ({"h": "abc"}, "h"), ({"h": "0"}, "h"),
    ({"fit": "stretch"}, "fit"), ({"format": "bmp"}, "format"), ({"q": "0"}, "q"), ({"q": "101"}, "q"),
    ({"blur": "0"}, "blur"), ({"blur": "251"}, "blur"), ({"sharpen": "0"}, "sharpen"),
    ({"sharpen": "11"}, "sharpen"), ({"gravity": "left"}, "gravity"),
]


@SHARED
async def test_every_bad_parameter_is_a_400_naming_it(shared_cdn: Cdn) -> None:
    cdn, photo = shared_cdn, banner("bad-parameters")
    await cdn.upload(photo, photo_jpeg(64, 40))
    for params, name in BAD_PARAMETERS:
        resp = await cdn.edge.get(transform_url(photo, **params))
        assert resp.status == 400, (params, await resp.text())
        body = await resp.json()
        assert isinstance(body["error"], str) and f"'{name}'" in body["error"], body
        assert body["HttpCode"] == 400 and body["Message"] == body["error"]
        assert resp.headers["X-API-Version"] and resp.headers["X-Request-ID"] == body["requestId"]
    resp = await cdn.edge.get("/api/transform?w=10")
    assert resp.status == 400
    assert (await resp.json())["error"] == "Missing required parameter: url"
    for absolute in ("https://example.com/a.png", "//example.com/a.png"):
        resp = await cdn.edge.get("/api/transform", params={"url": absolute})
        assert resp.status == 400 and "absolute URL" in (await resp.json())["error"]
    resp = await cdn.edge.get(transform_url(f"{ZONE}/v1/banners/missing.jpg", w=10))
    assert resp.status == 404 and isinstance((await resp.json())["error"], str)


async def test_a_decompression_bomb_is_refused(make_cdn: CdnFactory) -> None:
    cdn = await make_cdn(ASSETCDN_TRANSFORM_MAX_SOURCE_PIXELS="1000000")
    await cdn.upload(f"{ZONE}/v1/banners/bomb.png", black_png(2000, 2000))
    resp = await cdn.edge.get(transform_url(f"{ZONE}/v1/banners/bomb.png", w=100, format="webp"))
    assert resp.status == 422
    body = await resp.json()
    assert "exceeds" in body["error"] and "4,000,000" in body["error"]
    assert body["HttpCode"] == 422


async def test_a_cache_hit_is_not_a_transform_and_the_month_runs_out(make_cdn: CdnFactory) -> None:
    cdn = await make_cdn(ASSETCDN_TRANSFORM_MONTHLY_LIMIT="3")
    await cdn.upload(PHOTO, photo_jpeg(64, 40))
    for width in (10, 20, 30):
        first = await cdn.edge.get(transform_url(PHOTO, w=width))
        assert (first.status, first.headers["X-Cache"]) == (200, "MISS")
        second = await cdn.edge.get(transform_url(PHOTO, w=width))
        assert (second.status, second.headers["X-Cache"]) == (200, "HIT")
    resp = await cdn.edge.get(transform_url(PHOTO, w=40))
    assert resp.status == 429
    body = await resp.json()
    assert body["error"] == "limit_reached" and "Monthly transform limit" in body["message"]
    assert int(resp.headers["Retry-After"]) > 0 and resp.headers["X-RateLimit-Remaining"] == "0"
    assert (await cdn.edge.get(transform_url(PHOTO, w=20))).headers["X-Cache"] == "HIT"  # hits still served


async def test_one_client_makes_at_most_its_day_of_variants_and_a_failure_keeps_the_month(
        make_cdn: CdnFactory) -> None:
    cdn = await make_cdn(ASSETCDN_TRANSFORM_CLIENT_MISSES_PER_MINUTE="0", ASSETCDN_TRANSFORM_CLIENT_MISSES_PER_DAY="2",
                         ASSETCDN_TRANSFORM_MONTHLY_LIMIT="10")
    await cdn.upload(PHOTO, photo_jpeg(64, 40))
    for width, left in ((10, "9"), (20, "8")):
        resp = await cdn.edge.get(transform_url(PHOTO, w=width))
        assert (resp.status, resp.headers["X-RateLimit-Remaining"]) == (200, left)
    resp = await cdn.edge.get(transform_url(PHOTO, w=30))
    body = await resp.json()
    assert resp.status == 429 and body["error"] == "rate_limit_exceeded" and "day (UTC)" in body["Message"]
    assert resp.headers["X-RateLimit-Limit"] == "2" and 1 <= int(resp.headers["Retry-After"]) <= 86400
    # Refused by the client's limit: the month's quota was not spent on it.
    assert (await cdn.edge.get(transform_url(PHOTO, w=10))).headers["X-RateLimit-Remaining"] == "8"


async def test_a_client_past_its_minute_of_variants_is_told_the_window_in_plain_words(make_cdn: CdnFactory) -> None:
    cdn = await make_cdn(ASSETCDN_TRANSFORM_CLIENT_MISSES_PER_MINUTE="1")
    await cdn.upload(PHOTO, photo_jpeg(64, 40))
    assert (await cdn.edge.get(transform_url(PHOTO, w=10))).status == 200
    resp = await cdn.edge.get(transform_url(PHOTO, w=20))
    body = await resp.json()
    assert resp.status == 429 and body["error"] == "rate_limit_exceeded"
    assert body["Message"].startswith("At most 1 new variants per client in 60 s; cached ones are still served."), body


async def test_every_transform_response_reports_the_monthly_quota(make_cdn: CdnFactory) -> None:
    cdn = await make_cdn(ASSETCDN_TRANSFORM_MONTHLY_LIMIT="2")
    await cdn.upload(PHOTO, photo_jpeg(64, 40))
    now = datetime.now(UTC)
    next_month = datetime(now.year + (now.month == 12), now.month % 12 + 1, 1, tzinfo=UTC)

    def quota(resp: ClientResponse) -> tuple[str, str]:
        assert resp.headers["X-RateLimit-Limit"] == "2"
        assert int(resp.headers["X-RateLimit-Reset"]) == int(next_month.timestamp())
        return resp.status, resp.headers["X-RateLimit-Remaining"]

    miss = await cdn.edge.get(transform_url(PHOTO, w=10))
    assert (miss.headers["X-Cache"], quota(miss)) == ("MISS", (200, "1"))
    hit = await cdn.edge.get(transform_url(PHOTO, w=10))
    assert (hit.headers["X-Cache"], quota(hit)) == ("HIT", (200, "1"))
    assert quota(await cdn.edge.get(transform_url(PHOTO, w=10), headers={"If-None-Match": hit.headers["ETag"]})) \
        == (304, "1")
    assert quota(await cdn.edge.head(transform_url(PHOTO, w=10))) == (200, "1")
    assert quota(await cdn.edge.get(transform_url(PHOTO, w=0))) == (400, "1")
    assert quota(await cdn.edge.get(transform_url(f"{ZONE}/v1/banners/missing.jpg", w=10))) == (404, "1")
    assert quota(await cdn.edge.get(transform_url(PHOTO, w=20))) == (200, "0")
    assert quota(await cdn.edge.get(transform_url(PHOTO, w=30))) == (429, "0")
    assert quota(await cdn.edge.get(transform_url(PHOTO, w=20))) == (200, "0")     # a hit still answers


async def test_concurrent_identical_misses_transform_once(make_cdn: CdnFactory) -> None:
    cdn = await make_cdn(ASSETCDN_TRANSFORM_MONTHLY_LIMIT="100")
    await cdn.upload(PHOTO, photo_jpeg(1600, 1000))
    url = transform_url(PHOTO, w=500, format="avif", sharpen=2)
    responses = await asyncio.gather(*(cdn.edge.get(url) for _ in range(8)))
    bodies = {await r.read() for r in responses}
    assert [r.status for r in responses] == [200] * 8
    assert len(bodies) == 1
    registry = cdn.node.metrics.registry
    assert registry.get_sample_value("assetcdn_transforms_total", {"format": "avif"}) == 1
    assert (await cdn.edge.app[COUNTERS].peek(Limit("transforms", 100, period="month"))).remaining == 99


@SHARED
async def test_overwrite_and_purge_of_the_source_remove_its_transforms(shared_cdn: Cdn) -> None:
    cdn = shared_cdn
    path = f"{ZONE}/v1/banners/swatch.png"
    await cdn.upload(path, solid_png(80, 60, (250, 10, 10)))
    url = transform_url(path, w=40, format="png")

    async def pixel() -> tuple[str, list[float]]:
        resp = await cdn.edge.get(url)
        assert resp.status == 200, await resp.text()
        return resp.headers["X-Cache"], [round(v) for v in decode(await resp.read())(20, 15)]

    assert await pixel() == ("MISS", [250, 10, 10])
    assert await pixel() == ("HIT", [250, 10, 10])
    source = cdn.node.replica.get(path)
    old_key = variant_key(source, parse_transform_options({"url": path, "w": "40"}).cache_key(source.blob_id, "png"))
    assert cdn.node.cache.get(old_key) is not None
    await cdn.upload(path, solid_png(80, 60, (10, 10, 250)))   # overwrite: new content id, old variants purged
    assert cdn.node.cache.get(old_key) is None
    assert await pixel() == ("MISS", [10, 10, 250])
    assert await pixel() == ("HIT", [10, 10, 250])
    body = await cdn.purge_urls(f"/{path}")
    assert body["success"] is True
    assert await pixel() == ("MISS", [10, 10, 250])



@SHARED
async def test_two_pictures_of_one_size_never_share_a_kept_decode(shared_cdn: Cdn) -> None:
    # The image worker keys its kept decodes by the SHA-256 the edge sends with each job: each
    # picture's variants come from its own pixels whatever order its widths are asked in.
    cdn = shared_cdn
    colours = {"kept-red": (250, 10, 10), "kept-blue": (10, 10, 250)}
    for name, rgb in colours.items():
        swatch = pyvips.Image.black(800, 600).new_from_image(list(rgb)).cast("uchar").copy(interpretation="srgb")
        await cdn.upload(banner(name), swatch.jpegsave_buffer(Q=95))
    for width in (320, 640, 160):
        for name, rgb in colours.items():
            resp = await cdn.edge.get(transform_url(banner(name), w=width, format="webp"))
            assert (resp.status, resp.headers["X-Cache"]) == (200, "MISS"), await resp.text()
            image = decode(await resp.read())
            assert image.width == width
            assert [abs(round(v) - c) <= 6 for v, c in zip(image(width // 2, image.height // 2), rgb, strict=True)] == [True] * 3


async def test_unsupported_sources_and_the_time_budget(make_cdn: CdnFactory) -> None:
    cdn = await make_cdn(ASSETCDN_TRANSFORM_TIME_BUDGET_S="0.000001")
    await cdn.upload(f"{ZONE}/v1/banners/notes.txt", b"plain text, not an image")
    await cdn.upload(PHOTO, photo_jpeg(64, 40))
    resp = await cdn.edge.get(transform_url(f"{ZONE}/v1/banners/notes.txt", w=10))
    assert resp.status == 415 and "Cannot transform a 'txt' source" in (await resp.json())["error"]
    resp = await cdn.edge.get(transform_url(f"{ZONE}/v1/banners/notes.txt", w=10, format="png"))
    assert resp.status == 422 and "could not be decoded" in (await resp.json())["error"]
    resp = await cdn.edge.get(transform_url(PHOTO, w=10))
    assert resp.status == 503 and "time budget" in (await resp.json())["error"]


def _slow_svg(primitives: int = 60, size: int = 2000) -> bytes:
    """An SVG that librsvg needs about half a minute to draw (filter primitives over a large canvas)."""
    blurs = '<feGaussianBlur stdDeviation="3"/>' * primitives
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{size}" height="{size}"><filter id="f">{blurs}'
            f'</filter><rect width="{size}" height="{size}" fill="red" filter="url(#f)"/></svg>').encode()


async def test_an_overrunning_transform_is_stopped_answers_503_and_is_remembered(make_cdn: CdnFactory) -> None:
    # The budget is far above what the small transforms need and far below the SVG's drawing time.
    cdn = await make_cdn(ASSETCDN_TRANSFORM_TIME_BUDGET_S="2", ASSETCDN_TRANSFORM_MONTHLY_LIMIT="10",
                         ASSETCDN_TRANSFORM_MAX_SVG_FILTER_PIXELS="1000000000")
    slow = f"{ZONE}/v1/logos/slow.svg"
    await cdn.upload(slow, _slow_svg())
    await cdn.upload(PHOTO, photo_jpeg(64, 40))
    pool = cdn.edge.app[IMAGE_POOL]
    assert (await cdn.edge.get(transform_url(PHOTO, w=10))).status == 200
    workers = pool.worker_pids

    first = await cdn.edge.get(transform_url(slow, w=2000))
    assert first.status == 503, await first.text()
    assert "time budget of 2 s and was stopped" in (await first.json())["error"]
    assert first.headers["X-Cache"] == "MISS" and first.headers["Retry-After"] == "1"
    assert first.headers["X-RateLimit-Remaining"] == "9"           # the failure cost no quota
    assert pool.worker_pids != workers                              # its worker was killed and replaced

    workers = pool.worker_pids
    again = await cdn.edge.get(transform_url(slow, w=2000))
    assert (again.status, again.headers["X-Cache"]) == (503, "HIT")  # answered from memory, not run again
    assert (await again.json())["error"] == (await first.json())["error"]
    assert again.headers["X-RateLimit-Remaining"] == "9" and pool.worker_pids == workers

    after = await cdn.edge.get(transform_url(PHOTO, w=20))        # the pool still works
    assert (after.status, after.headers["X-RateLimit-Remaining"]) == (200, "8")


async def test_a_transform_over_the_memory_budget_answers_503(make_cdn: CdnFactory) -> None:
    cdn = await make_cdn(ASSETCDN_TRANSFORM_WORKER_MEMORY_MB="150")
    await cdn.upload(PHOTO, photo_jpeg(64, 40))
    # Upscaled to 8192x5120 and held in memory for the attention analysis: about 225 MB at its peak.
    resp = await cdn.edge.get(transform_url(PHOTO, w=8192, h=5000, gravity="auto", format="png"))
    assert resp.status == 503, await resp.text()
    assert "memory budget of 150 MB" in (await resp.json())["error"]
    assert (await cdn.edge.get(transform_url(PHOTO, w=30))).status == 200


async def test_animations_over_the_frame_bound_are_refused(make_cdn: CdnFactory) -> None:
    cdn = await make_cdn(ASSETCDN_TRANSFORM_MAX_ANIMATION_FRAMES="3", ASSETCDN_TRANSFORM_MONTHLY_LIMIT="10")
    path = f"{ZONE}/v1/banners/anim.gif"
    await cdn.upload(path, animated_gif())
    resp = await cdn.edge.get(transform_url(path, w=60))
    assert resp.status == 422
    assert f"{FRAMES} frames" in (await resp.json())["error"] and resp.headers["X-RateLimit-Remaining"] == "10"
    still = await cdn.edge.get(transform_url(path, w=60, format="png"))   # its first frame is fine
    assert still.status == 200 and frames(decode(await still.read())) == 1


async def test_a_cached_transform_does_not_touch_the_pool(make_cdn: CdnFactory) -> None:
    cdn = await make_cdn()
    await cdn.upload(PHOTO, photo_jpeg(64, 40))
    assert (await cdn.edge.get(transform_url(PHOTO, w=10))).headers["X-Cache"] == "MISS"
    await cdn.edge.app[IMAGE_POOL].close()
    hit = await cdn.edge.get(transform_url(PHOTO, w=10))
    assert (hit.status, hit.headers["X-Cache"]) == (200, "HIT")
    assert (await cdn.edge.get(transform_url(PHOTO, w=11))).status == 503    # a miss needs the pool


async def test_a_variant_the_busy_pool_refused_takes_no_slot_of_the_clients_minute(make_cdn: CdnFactory) -> None:
    # The 503 says "retry shortly": a client doing so must not spend its minute of new variants on refusals.
    cdn = await make_cdn(ASSETCDN_TRANSFORM_CLIENT_MISSES_PER_MINUTE="1",
                         ASSETCDN_TRANSFORM_CLIENT_PLACEHOLDERS_PER_MINUTE="1")
    await cdn.upload(PHOTO, photo_jpeg(64, 40))
    pool = cdn.edge.app[IMAGE_POOL]
    queued, pool.max_queued = pool.max_queued, 0  # every job is refused as if the queue were full
    for target in (transform_url(PHOTO, w=10), f"/api/lqip?url=/{PHOTO}", f"/api/blurhash?url=/{PHOTO}"):
        for _ in range(2):
            refused = await cdn.edge.get(target)
            assert refused.status == 503 and refused.headers["Retry-After"] == "1", await refused.text()
    pool.max_queued = queued
    for target in (transform_url(PHOTO, w=10), f"/api/lqip?url=/{PHOTO}"):
        assert (await cdn.edge.get(target)).status == 200, target


def _origin_fetches(metrics: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
               if line.startswith("assetcdn_origin_fetch_seconds_count{") and 'kind="asset"' in line)


@SHARED
async def test_a_srcset_of_misses_reads_the_source_from_control_once(shared_cdn: Cdn) -> None:
    cdn = shared_cdn
    path = f"{ZONE}/v1/banners/srcset.jpg"
    await cdn.upload(path, photo_jpeg(1600, 1000))

    async def fetches() -> float:
        return _origin_fetches(await (await cdn.edge.get("/metrics", headers=METRICS)).text())

    before = await fetches()
    # A page with responsive images: every width at once, all misses; the source is read once.
    first = await asyncio.gather(*(cdn.edge.get(f"/api/transform?url=/{path}&w={w}&format=webp")
                                   for w in (320, 480, 640, 960)))
    assert [(r.status, r.headers["X-Cache"]) for r in first] == [(200, "MISS")] * 4
    assert await fetches() == before + 1
    # Later variants of a source the edge holds never wait for control.
    later = await asyncio.gather(*(cdn.edge.get(f"/api/transform?url=/{path}&w={w}&format={fmt}")
                                   for w in (320, 1280) for fmt in ("jpeg", "avif")))
    assert [(r.status, r.headers["X-Cache"]) for r in later] == [(200, "MISS")] * 4
    assert await fetches() == before + 1


@SHARED
async def test_a_page_on_another_origin_can_read_transforms_and_their_errors(shared_cdn: Cdn) -> None:
    # A page that draws a transformed image into a canvas or fetch()es it needs Access-Control-Allow-Origin, or it
    # gets a tainted canvas or a network error (on an error too, instead of the 4xx). The answer depends on no key
    # or cookie: `*`.
    cdn, photo = shared_cdn, banner("cross-origin")
    await cdn.upload(photo, photo_jpeg(64, 40))
    page = {"Origin": "https://shop.example"}
    made = await cdn.edge.get(transform_url(photo, w=16, format="webp"), headers=page)
    etag = made.headers["ETag"]
    for url, headers, status in ((transform_url(photo, w=16, format="webp"), page, 200),   # a hit
                                 (transform_url(photo, w=16, format="webp"), {**page, "If-None-Match": etag}, 304),
                                 (transform_url(photo, w=0), page, 400),
                                 (transform_url(f"{ZONE}/v1/banners/none.jpg", w=16), page, 404),
                                 ("/api/transform", page, 400)):
        resp = await cdn.edge.get(url, headers=headers)
        assert resp.status == status, (url, await resp.text())
        assert resp.headers.get("Access-Control-Allow-Origin") == "*", (url, status)
        # The quota every answer carries, and a 429's Retry-After, are no fields a page reads unless exposed.
        exposed = {name.strip().lower() for name in resp.headers.get("Access-Control-Expose-Headers", "").split(",")}
        assert exposed >= {"x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset", "retry-after"}, url
    assert (made.status, made.headers["X-Cache"], made.headers.get("Access-Control-Allow-Origin")) == (200, "MISS", "*")
    # A page sending a header of its own (Range, If-None-Match) asks first: the preflight allows GET and HEAD.
    preflight = await cdn.edge.options(transform_url(photo, w=16), headers={
        **page, "Access-Control-Request-Method": "GET", "Access-Control-Request-Headers": "range"})
    assert preflight.status == 204
    assert preflight.headers["Access-Control-Allow-Origin"] == "*"
    assert {m.strip() for m in preflight.headers["Access-Control-Allow-Methods"].split(",")} >= {"GET", "HEAD"}
    assert "range" in preflight.headers["Access-Control-Allow-Headers"].lower()


@SHARED
async def test_a_text_option_with_spaces_is_400_and_every_documented_spelling_is_served(shared_cdn: Cdn) -> None:
    # `fit=%20cover` was served as fit=cover: a URL of its own for the same bytes, as `w=%205` would be (400).
    cdn, photo = shared_cdn, banner("spaced")
    await cdn.upload(photo, photo_jpeg(64, 40))
    for query, shown in (("fit=%20cover&w=8&h=8", " cover"), ("format=png%20", "png "),
                         ("gravity=%09north&w=8&h=8", "\tnorth"), ("rotate=+90", " 90")):
        resp = await cdn.edge.get(f"/api/transform?url=/{photo}&{query}")
        body = await resp.json()
        assert resp.status == 400 and body["HttpCode"] == 400, (query, body)
        name = query.partition("=")[0]
        assert body["error"] == body["Message"] and body["error"].startswith(f"Invalid parameter '{name}': '{shown}'.")
    for query in ("fit=cover&w=8&h=8", "fit=INSIDE&w=8&h=8", "format=jpg", "format=WebP", "gravity=NorthEast&w=8&h=8",
                  "rotate=90"):
        resp = await cdn.edge.get(f"/api/transform?url=/{photo}&{query}")
        assert resp.status == 200, (query, await resp.text())
