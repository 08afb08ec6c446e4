"""/api/auto and /api/auto/{path}: chains, opt-in formats, Save-Data/ECT, files served as they are,
missing best formats converted from the best source, Vary and Cache-Control."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pillow_heif
import pytest
import pytest_asyncio
import pyvips

from assetcdn.edge.transform.encode import ENCODERS
from tests.support.cdn import ZONE, Cdn, shared_cdn_apps
from tests.support.images import FRAMES, LOGO_SVG, animated_gif, decode, frames, loader, solid_png

BASE = f"{ZONE}/v1/banners/hero"
QUERY_VARY = "Accept, Save-Data, Sec-CH-Effective-Connection-Type"
IMMUTABLE = "public, max-age=31536000, immutable"


def _image(rgb: tuple[int, int, int]) -> pyvips.Image:
    return pyvips.Image.black(90, 60).new_from_image(list(rgb)).cast("uchar").copy(interpretation="srgb")


FILES = {
    "png": solid_png(90, 60, (200, 30, 30)),
    "webp": _image((30, 200, 30)).webpsave_buffer(Q=90),
    "avif": _image((30, 30, 200)).heifsave_buffer(compression="av1", Q=60, effort=0),
    "svg": LOGO_SVG,
}


# Every test adds and reads its own files (its own base name), so the module shares one CDN: one control
# and edge app and one image worker instead of one each per test.
pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cdn(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Cdn]:
    async with shared_cdn_apps(tmp_path_factory.mktemp("auto")) as shared:
        yield shared


async def upload_hero(cdn: Cdn, base: str) -> None:
    for ext, data in FILES.items():
        await cdn.upload(f"{base}.{ext}", data)


QUERY_CASES = [
    # (request headers, expected format, X-Network-Aware)
    ({"Accept": "image/avif,image/webp,*/*"}, "avif", None),
    ({"Accept": "image/webp,*/*"}, "webp", None),
    ({"Accept": "*/*"}, "webp", None),
    ({"Accept": "image/*"}, "webp", None),
    ({"Accept": "image/png"}, "png", None),
    ({"Accept": ""}, "png", None),   # the test client would send */* by default
    ({"Accept": "image/avif,image/webp;q=0"}, "avif", None),
    ({"Accept": "image/avif,image/webp", "Save-Data": "on"}, "webp", "slow"),
    ({"Accept": "image/avif,image/webp", "Sec-CH-Effective-Connection-Type": "2g"}, "webp", "slow"),
    ({"Accept": "image/avif,image/webp", "Sec-CH-Effective-Connection-Type": "slow-2g"}, "webp", "slow"),
    ({"Accept": "image/avif,image/webp", "Sec-CH-Effective-Connection-Type": "3g"}, "webp", "slow"),
    ({"Accept": "image/avif,image/webp", "Sec-CH-Effective-Connection-Type": "4g"}, "avif", None),
    ({"Accept": "image/avif", "Save-Data": "on"}, "png", "slow"),
]
MIME = {"avif": "image/avif", "webp": "image/webp", "png": "image/png", "svg": "image/svg+xml"}


async def test_query_route_serves_each_chains_first_existing_file_as_is(cdn: Cdn) -> None:
    await upload_hero(cdn, BASE)
    for headers, fmt, network in QUERY_CASES:
        resp = await cdn.edge.get("/api/auto", params={"path": "/" + BASE}, headers=headers)
        assert resp.status == 200, (headers, await resp.text())
        assert await resp.read() == FILES[fmt], (headers, fmt, resp.headers["Content-Type"])
        assert resp.headers["Content-Type"] == MIME[fmt]
        assert resp.headers["Vary"] == QUERY_VARY
        assert resp.headers["Cache-Control"] == IMMUTABLE
        assert resp.headers.get("X-Network-Aware") == network, headers
    head = await cdn.edge.head(f"/api/auto?path=/{BASE}", headers={"Accept": "image/webp"})
    assert head.status == 200 and int(head.headers["Content-Length"]) == len(FILES["webp"])


async def test_path_route_uses_avif_webp_png_svg_and_varies_on_accept_only(cdn: Cdn) -> None:
    base = f"{ZONE}/v1/banners/hero-path"
    await upload_hero(cdn, base)
    cases = [({"Accept": "image/avif,image/webp"}, "avif"), ({"Accept": "image/avif", "Save-Data": "on"}, "avif"),
             ({"Accept": "image/webp"}, "webp"), ({"Accept": "text/html"}, "png")]
    for headers, fmt in cases:
        resp = await cdn.edge.get(f"/api/auto/{base}", headers=headers)
        assert resp.status == 200, await resp.text()
        assert await resp.read() == FILES[fmt]
        assert resp.headers["Vary"] == "Accept"
        assert resp.headers["Cache-Control"] == IMMUTABLE
        assert "X-Network-Aware" not in resp.headers
    svg_only = f"{ZONE}/v1/logos/mark"
    await cdn.upload(f"{svg_only}.svg", LOGO_SVG)
    resp = await cdn.edge.get(f"/api/auto/{svg_only}", headers={"Accept": "image/avif,image/webp"})
    assert resp.headers["Content-Type"] == "image/svg+xml" and await resp.read() == LOGO_SVG  # never rasterised


async def test_a_missing_best_format_is_converted_from_the_best_source(cdn: Cdn) -> None:
    base = f"{ZONE}/v1/banners/only"
    await cdn.upload(f"{base}.png", solid_png(90, 60, (200, 30, 30)))
    for accept, load in (("image/avif,image/webp", "heifload"), ("image/webp", "webpload")):
        first = await cdn.edge.get(f"/api/auto?path=/{base}", headers={"Accept": accept})
        assert first.status == 200, await first.text()
        assert first.headers["X-Cache"] == "MISS"
        image = decode(await first.read())
        assert loader(image).startswith(load) and (image.width, image.height) == (90, 60)
        assert first.headers["Cache-Tag"] == f"project-{ZONE},type-banners,format-png,all-assets"
        second = await cdn.edge.get(f"/api/auto?path=/{base}", headers={"Accept": accept})
        assert second.headers["X-Cache"] == "HIT"
    plain = await cdn.edge.get(f"/api/auto?path=/{base}", headers={"Accept": "image/png"})
    assert await plain.read() == solid_png(90, 60, (200, 30, 30))   # the file itself
    # The conversion shares its cache entry with the equivalent /api/transform request.
    same = await cdn.edge.get(f"/api/transform?url=/{base}.png&format=webp")
    assert same.headers["X-Cache"] == "HIT"
    # An overwrite of the source drops the converted variant.
    await cdn.upload(f"{base}.png", solid_png(90, 60, (10, 10, 250)))
    again = await cdn.edge.get(f"/api/auto?path=/{base}", headers={"Accept": "image/webp"})
    assert again.headers["X-Cache"] == "MISS"
    assert [round(v) for v in decode(await again.read())(45, 30)][2] > 200


@pytest.mark.skipif("jxl" not in ENCODERS, reason="imagecodecs with JPEG XL is not installed")
async def test_jxl_is_opt_in_and_converted(cdn: Cdn) -> None:
    base = f"{ZONE}/v1/banners/j"
    await cdn.upload(f"{base}.png", solid_png(40, 30, (1, 2, 3)))
    resp = await cdn.edge.get(f"/api/auto?path=/{base}", headers={"Accept": "image/jxl,image/avif"})
    assert resp.headers["Content-Type"] == "image/jxl"
    body = await resp.read()
    assert body[:2] == b"\xff\x0a" or body[:12] == b"\x00\x00\x00\x0cJXL \r\n\x87\n"
    resp = await cdn.edge.get(f"/api/auto?path=/{base}", headers={"Accept": "image/jxl", "Save-Data": "on"})
    assert resp.headers["Content-Type"] == "image/png"   # slow networks drop jxl


async def test_animated_chain(cdn: Cdn) -> None:
    base = f"{ZONE}/v1/banners/spin"
    gif = animated_gif()
    await cdn.upload(f"{base}.gif", gif)
    resp = await cdn.edge.get(f"/api/auto?path=/{base}&anim=1", headers={"Accept": "image/gif"})
    assert resp.headers["Content-Type"] == "image/gif" and await resp.read() == gif
    resp = await cdn.edge.get(f"/api/auto?path=/{base}&anim=1", headers={"Accept": "image/webp,image/*"})
    assert resp.status == 200 and resp.headers["Content-Type"] == "image/webp"
    image = decode(await resp.read())
    assert loader(image).startswith("webpload") and frames(image) == FRAMES   # animation kept
    assert resp.headers["Vary"] == QUERY_VARY
    # Without anim=1 the still chain answers: png converted from the gif is a single frame.
    resp = await cdn.edge.get(f"/api/auto?path=/{base}", headers={"Accept": "image/png"})
    assert resp.headers["Content-Type"] == "image/png" and frames(decode(await resp.read())) == 1


async def test_auto_errors(cdn: Cdn) -> None:
    for url, status, message in [
        ("/api/auto", 400, "Missing required parameter: path"),
        ("/api/auto?path=", 400, "Missing required parameter: path"),
        ("/api/auto/", 400, "Missing required parameter: path"),  # no segments to stand for the path
        ("/api/auto?path=/pics/v1/../secret", 400, "Invalid path: contains disallowed sequences."),
        ("/api/auto?path=/pics//v1/x", 400, "Invalid path: contains disallowed sequences."),
        (f"/api/auto?path=/{ZONE}/v1/banners/nothing", 404, "No suitable format found for the given path"),
        (f"/api/auto/{ZONE}/v1/banners/nothing", 404, "No suitable format found for the given path"),
    ]:
        resp = await cdn.edge.get(url)
        assert resp.status == status, (url, await resp.text())
        body = await resp.json()
        assert body["error"] == message and body["HttpCode"] == status


async def test_a_private_base_is_refused_as_its_files_are_on_their_own_paths(cdn: Cdn) -> None:
    """The sources /api/auto may read are the ones every delivery route may (`find_source`): a private file
    is refused (403), a private base with no file is as missing as any other (404)."""
    private = f"{ZONE}/v1/private/auto-secret"
    await cdn.upload(f"{private}.png", solid_png(8, 8, (1, 2, 3)))
    for base, status in ((private, 403), (f"{ZONE}/v1/private/none", 404)):
        assert (await cdn.edge.get(f"/{base}.png")).status == status, base
        for url in (f"/api/auto?path=/{base}", f"/api/auto/{base}"):
            resp = await cdn.edge.get(url, headers={"Accept": "image/avif,image/webp"})
            assert resp.status == status, (url, await resp.text())
            assert (await resp.json())["HttpCode"] == status


async def test_heic_is_opt_in_and_converted_with_pillow_heif(cdn: Cdn) -> None:
    base = f"{ZONE}/v1/banners/h"
    await cdn.upload(f"{base}.png", solid_png(40, 30, (90, 120, 150)))
    resp = await cdn.edge.get(f"/api/auto?path=/{base}", headers={"Accept": "image/heic,image/webp"})
    assert resp.status == 200 and resp.headers["Content-Type"] == "image/heic"
    heif = pillow_heif.open_heif(await resp.read())
    assert heif.size == (40, 30)
    resp = await cdn.edge.get(f"/api/auto?path=/{base}", headers={"Accept": "image/heif,image/webp"})
    assert resp.headers["Content-Type"] == "image/webp"   # no heif encoder: the next format in the chain


async def test_a_picture_too_long_for_avif_and_webp_is_converted_to_a_format_that_holds_it(cdn: Cdn) -> None:
    """A long page screenshot stored as JPEG only (20x20000): AVIF and WebP hold at most 16384 and 16383 pixels a
    side, so a browser taking them gets the chain's next format an encoder here writes (PNG), as a missing best format
    is converted, not 404 because the first conversion failed; with a PNG of its own, that file as it is."""
    base = f"{ZONE}/v1/banners/tall-page"
    tall = pyvips.Image.black(20, 20000).new_from_image([30, 120, 200]).cast("uchar").copy(interpretation="srgb")
    await cdn.upload(f"{base}.jpg", tall.jpegsave_buffer(Q=80))
    for target in (f"/api/auto?path=/{base}", f"/api/auto/{base}"):
        resp = await cdn.edge.get(target, headers={"Accept": "image/avif,image/webp,*/*"})
        assert resp.status == 200, await resp.text()
        picture = decode(await resp.read())
        assert resp.headers["Content-Type"] == "image/png" and (picture.width, picture.height) == (20, 20000)
    png = tall.pngsave_buffer()
    await cdn.upload(f"{base}.png", png)
    resp = await cdn.edge.get(f"/api/auto?path=/{base}", headers={"Accept": "image/avif,image/webp,*/*"})
    assert (resp.status, await resp.read()) == (200, png)


async def test_a_page_on_another_origin_can_read_auto_answers_and_their_errors(cdn: Cdn) -> None:
    # As /api/transform's: a page drawing the best format into a canvas, or fetch()ing it, reads it (and its 404).
    base = f"{ZONE}/v1/banners/cross-origin"
    await cdn.upload(f"{base}.png", FILES["png"])
    page = {"Origin": "https://shop.example", "Accept": "image/webp,*/*"}
    for url, status in ((f"/api/auto?path=/{base}", 200), (f"/api/auto?path=/{base}", 200), (f"/api/auto/{base}", 200),
                        (f"/api/auto?path=/{ZONE}/v1/banners/none", 404), ("/api/auto", 400), ("/api/auto/", 400)):
        resp = await cdn.edge.get(url, headers=page)
        assert resp.status == status, (url, await resp.text())
        assert resp.headers.get("Access-Control-Allow-Origin") == "*", (url, status)
    for url in (f"/api/auto?path=/{base}", f"/api/auto/{base}"):
        preflight = await cdn.edge.options(url, headers={**page, "Access-Control-Request-Method": "GET"})
        assert (preflight.status, preflight.headers.get("Access-Control-Allow-Origin")) == (204, "*"), url


async def test_anim_is_0_or_1_and_anything_else_is_400(cdn: Cdn) -> None:
    # `anim=true`, `anim=yes` or `anim=%201` were answered with the still chain as if anim were absent: a page that
    # asked for the animation got the first frame without a word, under a URL of its own.
    base = f"{ZONE}/v1/banners/anim-values"
    await cdn.upload(f"{base}.gif", animated_gif())
    for value in ("true", "yes", "%201", "1%20", "2", ""):
        resp = await cdn.edge.get(f"/api/auto?path=/{base}&anim={value}")
        body = await resp.json()
        assert resp.status == 400 and body["HttpCode"] == 400, (value, body)
        assert body["error"].startswith("Invalid parameter 'anim': ") and body["error"].endswith(
            "Allowed values: 0, 1."), body
    animated = await cdn.edge.get(f"/api/auto?path=/{base}&anim=1", headers={"Accept": "image/gif"})
    still = await cdn.edge.get(f"/api/auto?path=/{base}&anim=0", headers={"Accept": "image/gif"})
    assert (animated.status, still.status) == (200, 200)
    assert frames(decode(await animated.read())) == FRAMES


async def test_a_path_is_read_as_given_not_trimmed(cdn: Cdn) -> None:
    # A file's name may end with a space (`trail .png`): `path=.../trail%20` was trimmed to `.../trail` and answered
    # with another file, and `path=%20/...` with the file of the path without the space, where /api/transform refuses
    # `url=%20/...` (400). The path is read as given.
    base = f"{ZONE}/v1/banners/trail"
    await cdn.upload(f"{base}.png", solid_png(20, 10, (200, 30, 30)))
    await cdn.upload(f"{base} .png", solid_png(20, 10, (30, 30, 200)))
    page = {"Accept": "image/png"}
    for url in (f"/api/auto?path=/{base}%20", f"/api/auto/{base}%20"):
        resp = await cdn.edge.get(url, headers=page)
        assert resp.status == 200, (url, await resp.text())
        assert decode(await resp.read())(0, 0)[:3] == [30, 30, 200], url   # the file named with the space
    for url in (f"/api/auto?path=%20/{base}", f"/api/auto?path=%09/{base}"):
        resp = await cdn.edge.get(url, headers=page)
        body = await resp.json()
        assert (resp.status, body["error"]) == (400, "Invalid path: contains disallowed sequences."), url
