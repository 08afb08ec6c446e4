"""Rasterising steps of the pipeline: one sanitised SVG in, PNG/WebP/AVIF bytes out (pyvips).

Every raster is rendered from the vector at its final size (``thumbnail_buffer`` picks the SVG
scale), never upscaled from a smaller bitmap.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

import numpy as np
import pyvips

TRANSPARENT = [0, 0, 0, 0]
AVIF_EFFORT = 2           # 0-9; low keeps an ingest to well under a second per file
AVIF_QUALITY = 60
WEBP_QUALITY = 90
PNG_COMPRESSION = 6
FALLBACK_COLOUR = (128, 128, 128)
COLOUR_SAMPLE_SIZE = 64   # dominant_colour renders the logo to fit this square
# Of a banner or social card, the logo may fill this share of the width and of the height.
BANNER_LOGO_WIDTH = 0.7
BANNER_LOGO_HEIGHT = 0.6


def natural_size(svg: bytes) -> tuple[int, int]:
    """The SVG's own size in pixels; raises ``pyvips.Error`` when librsvg cannot read it."""
    image = pyvips.Image.svgload_buffer(svg)
    return image.width, image.height


def render_fit(svg: bytes, width: int, height: int) -> pyvips.Image:
    """The SVG rendered to fit inside width x height (aspect kept), as 8-bit sRGB with alpha."""
    image = pyvips.Image.thumbnail_buffer(svg, width, height=height, size="both")
    if image.interpretation != "srgb":
        image = image.colourspace("srgb")
    if not image.hasalpha():
        image = image.bandjoin(255)
    return image.cast("uchar")


def render_square(svg: bytes, size: int) -> pyvips.Image:
    """The SVG fitted and centred in a transparent size x size square."""
    return render_fit(svg, size, size).gravity("centre", size, size, extend="background", background=TRANSPARENT)


def png(image: pyvips.Image) -> bytes:
    return image.pngsave_buffer(compression=PNG_COMPRESSION, strip=True)


def webp(image: pyvips.Image) -> bytes:
    return image.webpsave_buffer(Q=WEBP_QUALITY, strip=True)


def avif(image: pyvips.Image) -> bytes:
    return image.heifsave_buffer(compression="av1", effort=AVIF_EFFORT, Q=AVIF_QUALITY, strip=True)


def dominant_colour(svg: bytes) -> tuple[int, int, int]:
    """The most common colour of the logo's opaque pixels (4 bits per channel buckets, averaged)."""
    pixels = render_fit(svg, COLOUR_SAMPLE_SIZE, COLOUR_SAMPLE_SIZE).numpy().reshape(-1, 4)
    opaque = pixels[pixels[:, 3] >= 128][:, :3].astype(np.int64)
    if len(opaque) == 0:
        return FALLBACK_COLOUR
    buckets = (opaque[:, 0] >> 4) << 8 | (opaque[:, 1] >> 4) << 4 | (opaque[:, 2] >> 4)
    winner = np.bincount(buckets).argmax()
    mean = opaque[buckets == winner].mean(axis=0)
    return int(round(mean[0])), int(round(mean[1])), int(round(mean[2]))


def background_for(colour: tuple[int, int, int]) -> tuple[int, int, int]:
    """A backdrop in the logo's hue that the logo stays visible on: a light tint of a dark colour,
    a dark shade of a light one."""
    red, green, blue = colour
    luminance = (0.2126 * red + 0.7152 * green + 0.0722 * blue) / 255
    if luminance < 0.5:
        return tuple(round(c + (255 - c) * 0.85) for c in colour)  # type: ignore[return-value]
    return tuple(round(c * 0.2) for c in colour)  # type: ignore[return-value]


def render_card(svg: bytes, width: int, height: int, background: tuple[int, int, int]) -> pyvips.Image:
    """The logo centred on a solid width x height card (banner, social card), without alpha."""
    card = (pyvips.Image.black(width, height, bands=3) + list(background)).cast("uchar").copy(interpretation="srgb")
    logo = render_fit(svg, max(1, int(width * BANNER_LOGO_WIDTH)), max(1, int(height * BANNER_LOGO_HEIGHT)))
    left, top = (width - logo.width) // 2, (height - logo.height) // 2
    composed = card.composite2(logo, "over", x=left, y=top)
    return composed.flatten(background=list(background)).cast("uchar") if composed.hasalpha() else composed


def square_svg(svg: bytes, size: int) -> bytes:
    """The SVG with a size x size viewport; its viewBox keeps the drawing centred and unstretched."""
    root = ET.fromstring(svg)
    if root.get("viewBox") is None:
        width, height = _user_units(root.get("width")), _user_units(root.get("height"))
        if width is None or height is None:
            width, height = natural_size(svg)
        root.set("viewBox", f"0 0 {width:g} {height:g}")
    root.set("width", str(size))
    root.set("height", str(size))
    root.set("preserveAspectRatio", "xMidYMid meet")
    return ET.tostring(root, encoding="utf-8", xml_declaration=True)


def _user_units(length: str | None) -> float | None:
    """A width or height in user units when it is a plain number or px, else None."""
    if length is None:
        return None
    text = length.strip().removesuffix("px")
    try:
        value = float(text)
    except ValueError:
        return None
    return value if value > 0 else None
