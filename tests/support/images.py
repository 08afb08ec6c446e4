"""Real images made with pyvips for the in-process CDN tests (tests/support/cdn.py), and what a test reads
back from a response's image."""

from __future__ import annotations

import pyvips

FRAMES = 4


def photo_jpeg(width: int = 640, height: int = 400) -> bytes:
    """A photo-like JPEG: colour gradients plus noise."""
    xyz = pyvips.Image.xyz(width, height)
    red = xyz[0] * (255 / width)
    green = xyz[1] * (255 / height)
    blue = (xyz[0] + xyz[1]) * (255 / (width + height))
    noise = pyvips.Image.gaussnoise(width, height, sigma=12, mean=0)
    image = (red.bandjoin([green, blue]) + noise).cast("uchar").copy(interpretation="srgb")
    return image.jpegsave_buffer(Q=90)


def solid_png(width: int, height: int, rgb: tuple[int, int, int]) -> bytes:
    image = pyvips.Image.black(width, height).new_from_image(list(rgb)).cast("uchar")
    return image.copy(interpretation="srgb").pngsave_buffer()


def black_png(width: int, height: int) -> bytes:
    return pyvips.Image.black(width, height).cast("uchar").pngsave_buffer(compression=9)


def animation(width: int = 120, height: int = 80) -> pyvips.Image:
    """FRAMES solid frames of `width` x `height`, 100 ms each, looping: an animated picture's pages."""
    frames = [pyvips.Image.black(width, height).new_from_image([i * 60, 255 - i * 60, 100])
              .cast("uchar").copy(interpretation="srgb") for i in range(FRAMES)]
    strip = pyvips.Image.arrayjoin(frames, across=1).copy()
    strip.set_type(pyvips.GValue.gint_type, "page-height", height)
    strip.set_type(pyvips.GValue.array_int_type, "delay", [100] * FRAMES)
    strip.set_type(pyvips.GValue.gint_type, "loop", 0)
    return strip


def animated_gif(width: int = 120, height: int = 80) -> bytes:
    return animation(width, height).gifsave_buffer()


def animated_webp(width: int = 120, height: int = 80) -> bytes:
    return animation(width, height).webpsave_buffer()


LOGO_SVG = (b'<svg xmlns="http://www.w3.org/2000/svg" width="200" height="100" viewBox="0 0 200 100">'
            b'<script>alert(1)</script><rect width="200" height="100" fill="#2050d0"/>'
            b'<circle cx="100" cy="50" r="40" fill="#ffffff"/></svg>')


def decode(body: bytes) -> pyvips.Image:
    """Decode a response body with libvips, every frame (n=-1)."""
    try:
        return pyvips.Image.new_from_buffer(body, "", n=-1)
    except pyvips.Error:
        return pyvips.Image.new_from_buffer(body, "")


def loader(image: pyvips.Image) -> str:
    return str(image.get("vips-loader"))


def frames(image: pyvips.Image) -> int:
    return image.get_n_pages() if image.get_typeof("n-pages") else 1
