"""Real photographs shipped by scikit-image (and matplotlib), pictures with words on them, and their upload
into a control plane, for the AI tests; Tesseract, which reading the words needs, or a skip."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest
import pyvips
import skimage.data
from aiohttp.test_utils import TestClient

from tests.support.control import ACCESS


def jpeg(pixels: np.ndarray) -> bytes:
    return pyvips.Image.new_from_array(np.ascontiguousarray(pixels)).jpegsave_buffer(Q=90)


def png(image: pyvips.Image) -> bytes:
    return image.write_to_buffer(".png")


def astronaut_jpeg() -> bytes:
    return jpeg(skimage.data.astronaut())


def coffee_jpeg() -> bytes:
    return jpeg(skimage.data.coffee())


def face_on_plain_background(background: int = 255) -> tuple[bytes, tuple[int, int, int, int]]:
    """The astronaut's head, small, near the top right of a mostly plain 960x640 picture: the case a
    detector that equalises the whole histogram first misses. Returns the PNG and the head's box."""
    head = np.ascontiguousarray(skimage.data.astronaut()[30:210, 150:300])
    canvas = np.full((640, 960, 3), background, np.uint8)
    x, y = 760, 40
    canvas[y:y + head.shape[0], x:x + head.shape[1]] = head
    return png(pyvips.Image.new_from_array(canvas)), (x, y, head.shape[1], head.shape[0])


def text_banner(text: str) -> bytes:
    """White words on a red 1200x400 banner (rendered by libvips' own text renderer)."""
    words = pyvips.Image.text(f'<span foreground="white">{text}</span>', dpi=300, font="sans bold", rgba=True)
    canvas = pyvips.Image.black(1200, 400, bands=3).new_from_image([200, 30, 40]).copy(interpretation="srgb")
    return png(canvas.composite2(words, "over", x=80, y=120).flatten())


def require_tesseract() -> None:
    """Skip without Tesseract, except under CI=true, where `make setup` must have installed it."""
    if shutil.which("tesseract") is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("CI=true and tesseract is not installed: `make setup` installs tesseract-ocr")
        pytest.skip("tesseract is not installed (make setup installs Debian's tesseract-ocr)")


async def upload(client: TestClient, path: str, data: bytes) -> None:
    resp = await client.put(f"/api/storage/{path}", data=data, headers=ACCESS)
    assert resp.status in (200, 201), await resp.text()
