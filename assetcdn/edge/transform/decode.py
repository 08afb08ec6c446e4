"""Decode step: load the source straight at the planned size (shrink-on-load).

`thumbnail_buffer` lets JPEG decode at 1/2, 1/4 or 1/8 scale, WebP and SVG render at the
target size, and never materialises the full-size image when a smaller one will do. Only
with no target size is the source loaded as it is. The image stays as it is stored: the
rotate option (assetcdn/edge/transform/options/rotate.py) applies its EXIF orientation. Animated sources keep all frames
(`n=-1`) when the output format can carry them, and load only the first frame otherwise.
"""

from __future__ import annotations

import pyvips

from assetcdn.edge.transform.context import TransformContext
from assetcdn.edge.transform.source import decode_heif, undecodable

# Interpretations every later step and encoder accepts as they are.
_READY = frozenset({"srgb", "b-w"})


def decode(ctx: TransformContext) -> None:
    source = ctx.source
    if source.format == "heic":
        image = decode_heif(source.data)
    else:
        options = "n=-1" if ctx.keep_animation else ""
        try:
            if ctx.decode_size is not None:
                width, height = ctx.decode_size
                image = pyvips.Image.thumbnail_buffer(source.data, width, height=height, size="force",
                                                      no_rotate=True, option_string=options)
            else:
                image = pyvips.Image.new_from_buffer(source.data, options, access="sequential")
        except pyvips.Error as exc:
            raise undecodable(source.format, str(exc).splitlines()[0]) from exc
    if image.interpretation == "multiband":
        image = image.copy(interpretation="srgb" if image.bands >= 3 else "b-w")
    if image.interpretation not in _READY:
        # CMYK, 16-bit, multiband and the like: every encoder below wants 8-bit sRGB.
        image = image.colourspace("srgb")
    if image.format != "uchar":
        image = image.cast("uchar")
    ctx.image = image
