"""rotate and trim over HTTP: accepted, applied, cached under their own key, refused with the 400 envelope."""

from __future__ import annotations

import pyvips

from tests.support.cdn import ZONE, CdnFactory
from tests.support.images import decode, photo_jpeg

PHOTO = f"{ZONE}/v1/banners/photo.jpg"
FRAMED = f"{ZONE}/v1/banners/framed.png"


def framed_png() -> bytes:
    """A 300x200 white canvas with a dark 120x60 picture at (40, 50)."""
    canvas = pyvips.Image.black(300, 200).new_from_image([255, 255, 255]).copy(interpretation="srgb").cast("uchar")
    return canvas.draw_rect([20, 60, 120], 40, 50, 120, 60, fill=True).pngsave_buffer()


async def test_rotate_and_trim_are_applied_and_cached_per_value(make_cdn: CdnFactory) -> None:
    cdn = await make_cdn()
    await cdn.upload(PHOTO, photo_jpeg(640, 400))
    await cdn.upload(FRAMED, framed_png())

    rotated = await cdn.edge.get("/api/transform", params={"url": "/" + PHOTO, "rotate": "90", "w": "100"})
    assert rotated.status == 200, await rotated.text()
    assert rotated.headers["X-Cache"] == "MISS"
    image = decode(await rotated.read())
    assert (image.width, image.height) == (100, 160)
    again = await cdn.edge.get("/api/transform", params={"w": "100", "rotate": "90", "url": "/" + PHOTO})
    assert again.headers["X-Cache"] == "HIT" and again.headers["ETag"] == rotated.headers["ETag"]
    upright = await cdn.edge.get("/api/transform", params={"url": "/" + PHOTO, "w": "100"})
    assert upright.headers["X-Cache"] == "MISS"
    assert (decode(await upright.read()).width, decode(await upright.read()).height) == (100, 62)

    trimmed = await cdn.edge.get("/api/transform", params={"url": "/" + FRAMED, "trim": "10"})
    assert trimmed.status == 200, await trimmed.text()
    image = decode(await trimmed.read())
    assert (image.width, image.height) == (120, 60)


async def test_bad_rotate_and_trim_get_the_400_envelope(make_cdn: CdnFactory) -> None:
    cdn = await make_cdn()
    await cdn.upload(PHOTO, photo_jpeg(640, 400))
    for name, value, message in [
        ("rotate", "45", "Invalid parameter 'rotate': '45'. Allowed values: 0, 90, 180, 270."),
        ("trim", "0", "Invalid parameter 'trim': '0'. Must be an integer from 1 to 255."),
    ]:
        resp = await cdn.edge.get("/api/transform", params={"url": "/" + PHOTO, name: value})
        assert resp.status == 400
        body = await resp.json()
        assert body["error"] == message
        assert body["HttpCode"] == 400 and body["Message"] == message
