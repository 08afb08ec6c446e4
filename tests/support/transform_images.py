"""Real source images for the transform tests, built with pyvips (and OpenCV for the face); the session-scoped
fixtures of tests/edge/transform/conftest.py make each once. `load` decodes an output as a client would."""

from __future__ import annotations

import struct
import zlib

import cv2
import numpy as np
import pyvips

from tests.support import images

PHOTO_SIZE = (2000, 1333)
FACE_SIZE = (800, 600)
FACE_CENTER = (600, 300)     # where the drawn face sits in the face image
FRAMES = images.FRAMES


def photo_jpeg() -> bytes:
    """A 2000x1333 photo-like JPEG: colour gradients plus Gaussian noise."""
    width, height = PHOTO_SIZE
    xyz = pyvips.Image.xyz(width, height)
    red = xyz[0] * (255 / width)
    green = xyz[1] * (255 / height)
    blue = (xyz[0] + xyz[1]) * (255 / (width + height))
    noise = pyvips.Image.gaussnoise(width, height, sigma=18, mean=0)
    image = (red.bandjoin([green, blue]) + noise).cast("uchar").copy(interpretation="srgb")
    return image.jpegsave_buffer(Q=90)


def alpha_png() -> bytes:
    """A 640x480 RGBA PNG: a red disc on a fully transparent background."""
    disc = pyvips.Image.black(640, 480).draw_circle(255, 320, 240, 200, fill=True)
    rgb = disc.new_from_image([0, 0, 0]).copy(interpretation="srgb").draw_circle(
        [230, 20, 20], 320, 240, 200, fill=True)
    return rgb.bandjoin(disc).cast("uchar").copy(interpretation="srgb").pngsave_buffer()


def animated_gif() -> bytes:
    return images.animated_gif(300, 200)


def animated_webp() -> bytes:
    return images.animated_webp(300, 200)


def logo_svg() -> bytes:
    return (b'<svg xmlns="http://www.w3.org/2000/svg" width="200" height="100" viewBox="0 0 200 100">'
            b'<rect width="200" height="100" fill="#1d4ed8"/><circle cx="100" cy="50" r="40" fill="#facc15"/></svg>')


def hostile_svg() -> bytes:
    return (b'<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink" '
            b'width="120" height="80" onload="alert(1)"><script>alert(1)</script>'
            b'<rect width="120" height="80" fill="green"/>'
            b'<image xlink:href="https://evil.example/track.png" width="10" height="10"/>'
            b'<image href="file:///etc/passwd" width="10" height="10"/></svg>')


def face_jpeg() -> bytes:
    """800x600 JPEG with a drawn face right of centre that the Haar cascade detects."""
    width, height = FACE_SIZE
    cx, cy = FACE_CENTER
    pixels = np.empty((height, width, 3), np.uint8)
    pixels[:] = np.linspace(60, 160, width, dtype=np.uint8)[None, :, None]
    cv2.ellipse(pixels, (cx, cy), (70, 95), 0, 0, 360, (220, 180, 150), -1)
    for dx in (-28, 28):
        cv2.ellipse(pixels, (cx + dx, cy - 20), (14, 8), 0, 0, 360, (255, 255, 255), -1)
        cv2.circle(pixels, (cx + dx, cy - 20), 6, (20, 20, 30), -1)
        cv2.line(pixels, (cx + dx - 16, cy - 38), (cx + dx + 16, cy - 40), (30, 30, 40), 5)
    cv2.line(pixels, (cx, cy - 10), (cx - 6, cy + 22), (170, 120, 100), 3)
    cv2.ellipse(pixels, (cx, cy + 45), (28, 10), 0, 0, 180, (160, 60, 60), 5)
    cv2.ellipse(pixels, (cx, cy - 85), (72, 30), 0, 180, 360, (40, 30, 30), -1)
    return pyvips.Image.new_from_array(pixels).copy(interpretation="srgb").jpegsave_buffer(Q=92)


def bomb_png() -> bytes:
    """A real 30000x30000 black PNG (900 megapixels, 1 bit deep) of about 110 KB, written directly:
    libvips takes seconds of CPU to encode the same rows."""
    width = height = 30000
    rows = bytes(1 + (width + 7) // 8) * 1000      # filter byte 0, then the row's bits, all black
    deflate = zlib.compressobj(9)
    pixels = b"".join(deflate.compress(rows) for _ in range(height // 1000)) + deflate.flush()
    return (b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0))
            + _png_chunk(b"IDAT", pixels) + _png_chunk(b"IEND", b""))


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def load(data: bytes) -> pyvips.Image:
    """Decode an output with every frame, as a client would see it."""
    header = pyvips.Image.new_from_buffer(data, "")
    if header.get("vips-loader") in ("gifload_buffer", "webpload_buffer", "heifload_buffer"):
        return pyvips.Image.new_from_buffer(data, "", n=-1)
    return header
