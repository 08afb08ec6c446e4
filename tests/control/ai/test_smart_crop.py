"""Smart crop on real photographs: faces give `face` and their box; otherwise a compass gravity."""

from __future__ import annotations

import numpy as np
import pytest
import pyvips
import skimage.data

from assetcdn.control.ai.image_input import load_for_analysis
from assetcdn.control.ai.smart_crop import compass, smart_crop
from tests.support.control import ACCESS, MakeControl
from tests.support.photos import (
    astronaut_jpeg,
    coffee_jpeg,
    face_on_plain_background,
    jpeg,
    png,
    upload,
)


def analyse(data: bytes):  # type: ignore[no-untyped-def]
    return smart_crop(load_for_analysis(data, max_pixels=50_000_000, size=512))


def inside(point: tuple[int, int], box: tuple[int, int, int, int]) -> bool:
    x, y, w, h = box
    return x <= point[0] <= x + w and y <= point[1] <= y + h


async def test_the_astronauts_face_is_the_gravity(make_control: MakeControl) -> None:
    client = await make_control()
    await upload(client, "akande/v1/banners/astronaut.jpg", astronaut_jpeg())
    resp = await client.get("/api/ai/smart-crop", params={"url": "/akande/v1/banners/astronaut.jpg"}, headers=ACCESS)
    body = await resp.json()
    assert resp.status == 200, body
    assert (body["gravity"], body["confidence"], body["faces"]) == ("face", "high", 1)
    box = body["box"]
    # Her face is at about x 180-270, y 65-180 of the 512 x 512 photograph.
    assert 150 <= box["x"] <= 200 and 40 <= box["y"] <= 90 and 70 <= box["width"] <= 130
    assert (body["width"], body["height"]) == (512, 512)


async def test_a_photo_without_people_gets_a_compass_gravity(make_control: MakeControl) -> None:
    client = await make_control()
    await upload(client, "akande/v1/banners/coffee.jpg", coffee_jpeg())
    resp = await client.post("/api/ai/smart-crop", json={"url": "/akande/v1/banners/coffee.jpg"}, headers=ACCESS)
    body = await resp.json()
    assert resp.status == 200, body
    assert body["faces"] == 0 and body["gravity"] != "face"
    assert body["confidence"] in ("medium", "low")
    box = body["box"]
    assert box["x"] + box["width"] <= 600 and box["y"] + box["height"] <= 400


@pytest.mark.parametrize("background", [255, 128, 0])
def test_a_face_on_a_plain_background_is_found(background: int) -> None:
    data, head = face_on_plain_background(background)
    found = analyse(data)
    assert found.gravity == "face" and found.faces == 1
    assert inside(found.focus, head)


def test_faces_in_a_small_or_large_copy_map_back_to_the_original() -> None:
    big = pyvips.Image.new_from_array(skimage.data.astronaut()).resize(4)   # 2048 x 2048
    found = analyse(big.jpegsave_buffer(Q=85))
    assert found.gravity == "face" and inside(found.focus, (700, 250, 400, 470))


@pytest.mark.parametrize("col, row, expected", [(0, 0, "northwest"), (2, 0, "northeast"), (1, 1, "center"),
                                                (0, 2, "southwest"), (2, 2, "southeast"), (1, 2, "south")])
def test_a_subject_on_a_plain_background_sets_the_compass_gravity(col: int, row: int, expected: str) -> None:
    cup = np.ascontiguousarray(skimage.data.coffee()[30:380, 150:480])
    patch = pyvips.Image.new_from_array(cup).resize(0.5)
    canvas = pyvips.Image.black(960, 640, bands=3).new_from_image([245, 245, 245]).copy(interpretation="srgb")
    x = int((col + 0.5) * 320 - patch.width / 2)
    y = int((row + 0.5) * 640 / 3 - patch.height / 2)
    x, y = min(max(x, 0), 960 - patch.width), min(max(y, 0), 640 - patch.height)
    found = analyse(png(canvas.insert(patch.copy(interpretation="srgb"), x, y)))
    assert found.gravity == expected
    assert found.faces == 0 and found.confidence in ("medium", "low")


def test_a_flat_image_is_center_with_low_confidence() -> None:
    flat = np.full((300, 500, 3), 128, np.uint8)
    found = analyse(jpeg(flat))
    assert (found.gravity, found.confidence, found.box) == ("center", "low", (0, 0, 500, 300))


def test_compass_cells_are_thirds() -> None:
    assert compass(0.1, 0.1) == "northwest" and compass(0.5, 0.1) == "north" and compass(0.9, 0.5) == "east"
    assert compass(0.5, 0.5) == "center" and compass(0.2, 0.9) == "southwest" and compass(0.66, 0.66) == "center"


def _heic(pixels: np.ndarray) -> bytes:
    import io

    import pillow_heif
    heif = pillow_heif.from_bytes(mode="RGB", size=(pixels.shape[1], pixels.shape[0]), data=pixels.tobytes())
    out = io.BytesIO()
    heif.save(out, quality=80)
    return out.getvalue()


@pytest.mark.parametrize("encode", [
    lambda img: img.webpsave_buffer(Q=80),
    lambda img: img.heifsave_buffer(compression="av1", effort=0),
    lambda img: img.gifsave_buffer(),
    lambda img: img.tiffsave_buffer(),
    lambda img: img.bandjoin(255).pngsave_buffer(),                       # with alpha
    lambda img: img.colourspace("grey16").pngsave_buffer(),               # 16-bit greyscale
    lambda img: _heic(np.ascontiguousarray(img.numpy())),
], ids=["webp", "avif", "gif", "tiff", "png-alpha", "png-grey16", "heic"])
def test_every_supported_format_is_analysed(encode) -> None:  # type: ignore[no-untyped-def]
    image = pyvips.Image.new_from_array(skimage.data.astronaut()).copy(interpretation="srgb")
    found = analyse(encode(image))
    assert (found.gravity, found.faces) == ("face", 1)
    assert inside(found.focus, (170, 55, 110, 135))
