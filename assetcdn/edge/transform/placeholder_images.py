"""Placeholders for /api/lqip and /api/blurhash: tiny blurred WebPs, and a real BlurHash.

As the API reference (assetcdn/shared/openapi.json) describes them: lqip is `size` px wide, quality 30, blur `blur`; blurhash is `size` px wide,
quality 35, blur 50, and its `hash` is the 40-hex SHA-256 prefix of the WebP bytes (the
caller computes it). The original service called that hash "BlurHash"; we also return a
real BlurHash string (blurha.sh), computed from a small unblurred RGB copy.

Their query is read by assetcdn/edge/transform/placeholder_params.py.
"""

from __future__ import annotations

import blurhash
import numpy as np
import pyvips

from assetcdn.edge.transform.budgets import DEFAULT_MAX_PIXELS, TransformLimits
from assetcdn.edge.transform.encode import MAX_SIDE, encode_image
from assetcdn.edge.transform.options.blur import gaussian_blur
from assetcdn.edge.transform.placeholder_params import BLUR_RANGE
from assetcdn.edge.transform.source import (
    SourceImage,
    check_pixels,
    check_svg_filters,
    read_source,
)
from assetcdn.shared.errors import LegacyError
from assetcdn.shared.heif import decode_heif

LQIP_QUALITY = 30
BLURHASH_QUALITY = 35
BLURHASH_BLUR = 50
BLURHASH_SAMPLE = 32      # long side of the RGB array BlurHash is computed on


# How tall a placeholder may be: the most a WebP holds. A picture taller than that for its `size` (a strip 16383 / 64
# times taller than wide) fits that height, narrower than `size`.
MAX_HEIGHT = MAX_SIDE["webp"][1]


MAX_SVG_FILTER_PIXELS = TransformLimits().max_svg_filter_pixels   # the transforms' default bound


def _small_copy(source: bytes, source_format: str, width: int, max_pixels: int,
                max_svg_filter_pixels: int = MAX_SVG_FILTER_PIXELS) -> pyvips.Image:
    """First frame of the source, `width` px wide (its height follows, upright, up to MAX_HEIGHT), 8-bit sRGB (or
    grey), shrunk on load. libvips' thumbnail fits a `width` x `width` square unless given a height: a portrait
    picture's came out narrower than `width`."""
    image_source: SourceImage = read_source(source, source_format)
    if image_source.format != "svg":  # an SVG is drawn at the placeholder's size: its canvas costs nothing
        check_pixels("source image", image_source.width, image_source.height, 1, max_pixels)
    upright = (image_source.height, image_source.width) if image_source.orientation in range(5, 9) else (
        image_source.width, image_source.height)
    height = min(-(-width * upright[1] // max(upright[0], 1)), MAX_HEIGHT)
    check_pixels("placeholder", width, height, 1, max_pixels)
    if image_source.filter_primitives:
        check_svg_filters(image_source, width, height, max_svg_filter_pixels)
    try:
        if image_source.format == "heic":
            image = decode_heif(image_source.data).thumbnail_image(width, height=MAX_HEIGHT)
        else:
            image = pyvips.Image.thumbnail_buffer(image_source.data, width, height=MAX_HEIGHT)
        if image.interpretation not in ("srgb", "b-w"):
            image = image.colourspace("srgb")
        return image.cast("uchar").copy_memory()
    except pyvips.Error as exc:
        raise LegacyError(422, f"The source image could not be decoded: {str(exc).splitlines()[0]}") from exc


def make_lqip(source: bytes, source_format: str, size: int, blur: int, *, max_pixels: int = DEFAULT_MAX_PIXELS,
              max_svg_filter_pixels: int = MAX_SVG_FILTER_PIXELS) -> tuple[bytes, int]:
    """(WebP bytes, width) of a `size`-px-wide placeholder blurred by `blur`, quality 30."""
    image = _small_copy(source, source_format, size, max_pixels, max_svg_filter_pixels)
    return encode_image(gaussian_blur(image, min(blur, BLUR_RANGE[1])), "webp", LQIP_QUALITY), image.width


def blurhash_of(image: pyvips.Image) -> str:
    """BlurHash (4x3 components, 3x4 for portrait) of an 8-bit image."""
    scale = min(1.0, BLURHASH_SAMPLE / max(image.width, image.height))
    small = image.resize(scale) if scale < 1.0 else image
    if small.hasalpha():
        small = small.flatten(background=[255] * (small.bands - 1))
    if small.bands == 1:
        small = small.colourspace("srgb")
    pixels = np.asarray(small.cast("uchar").numpy(), dtype=np.float64)
    x_components, y_components = (4, 3) if image.width >= image.height else (3, 4)
    encoded: str = blurhash.encode(pixels.tolist(), components_x=x_components, components_y=y_components)
    return encoded


def make_blurhash_placeholder(source: bytes, source_format: str, size: int, *, max_pixels: int = DEFAULT_MAX_PIXELS,
                              max_svg_filter_pixels: int = MAX_SVG_FILTER_PIXELS) -> tuple[bytes, int, str]:
    """(WebP bytes at quality 35 blur 50, width, BlurHash string)."""
    image = _small_copy(source, source_format, size, max_pixels, max_svg_filter_pixels)
    webp = encode_image(gaussian_blur(image, BLURHASH_BLUR), "webp", BLURHASH_QUALITY)
    return webp, image.width, blurhash_of(image)
