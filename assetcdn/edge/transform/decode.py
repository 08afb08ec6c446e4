"""Decode step: load the source straight at the planned size (shrink-on-load), in sRGB.

`thumbnail_buffer` lets JPEG decode at 1/2, 1/4 or 1/8 scale, WebP and SVG render at the
target size, and never materialises the full-size image when a smaller one will do. Only
with no target size is the source loaded as it is. The image stays as it is stored: the
rotate option (assetcdn/edge/transform/options/rotate.py) applies its EXIF orientation. Animated sources keep all frames
(`n=-1`) when the output format can carry them, and load only the first frame otherwise.

In an image worker the decoded source is kept for the picture's other variants
(assetcdn/edge/transform/decoded.py): the step then decodes at a shrink-on-load level into memory
once and resizes from there. Sources whose decode would not fit the cache, SVGs (rendered at
each size) and animations kept whole are decoded per variant as above.

Colour: every encoder gets 8-bit sRGB pixels and metadata is stripped, so a source with a
non-sRGB ICC profile (Display P3, Adobe RGB) is converted with it here, and CMYK through its
profile (libvips' CMYK profile when it has none).
"""

from __future__ import annotations

import hashlib

import pyvips

from assetcdn.edge.transform.budgets import budget_clock
from assetcdn.edge.transform.context import TransformContext
from assetcdn.edge.transform.decoded import level_for
from assetcdn.edge.transform.source import SourceImage, undecodable
from assetcdn.shared.heif import decode_heif

# Interpretations every later step and encoder accepts as they are.
_READY = frozenset({"srgb", "b-w"})
_RGB = frozenset({"srgb", "rgb16", "rgb"})
ICC = "icc-profile-data"


def profile_description(profile: bytes) -> str:
    """The 'desc' tag of an ICC profile (v2 'desc' or v4 'mluc'); "" when it has none."""
    if len(profile) < 132:
        return ""
    count = int.from_bytes(profile[128:132], "big")
    for index in range(min(count, 64)):
        entry = profile[132 + 12 * index:144 + 12 * index]
        if entry[:4] != b"desc":
            continue
        offset, size = int.from_bytes(entry[4:8], "big"), int.from_bytes(entry[8:12], "big")
        body = profile[offset:offset + size]
        if body[:4] == b"desc":
            length = int.from_bytes(body[8:12], "big")
            return body[12:12 + length].split(b"\0")[0].decode("latin-1")
        if body[:4] == b"mluc" and int.from_bytes(body[8:12], "big") > 0:
            length, start = int.from_bytes(body[20:24], "big"), int.from_bytes(body[24:28], "big")
            return body[start:start + length].decode("utf-16-be", "replace")
    return ""


def _wide_gamut(image: pyvips.Image) -> bool:
    """An RGB image whose embedded profile is not sRGB (whose pixels would look wrong read as sRGB)."""
    if image.interpretation not in _RGB or not image.get_typeof(ICC):
        return False
    description = profile_description(image.get(ICC)).lower().replace(" ", "")
    return "srgb" not in description


def standard(image: pyvips.Image) -> pyvips.Image:
    """8-bit sRGB (or grey), colour-managed, without the profile that no longer applies."""
    if image.interpretation == "multiband":
        image = image.copy(interpretation="srgb" if image.bands >= 3 else "b-w")
    if _wide_gamut(image):
        image = image.icc_transform("srgb", embedded=True, intent="perceptual")
    if image.interpretation not in _READY:
        # CMYK, 16-bit, multiband and the like: every encoder below wants 8-bit sRGB.
        image = image.colourspace("srgb")
    if image.format != "uchar":
        image = image.cast("uchar")
    if image.get_typeof(ICC):
        image = image.copy()
        image.remove(ICC)   # the pixels are sRGB now; a later resize must not convert them again
    return image


def _decode_direct(ctx: TransformContext) -> pyvips.Image:
    source = ctx.source
    if source.format == "heic":
        return decode_heif(source.data)
    options = "n=-1" if ctx.keep_animation else ""
    if ctx.decode_size is not None:
        width, height = ctx.decode_size
        return pyvips.Image.thumbnail_buffer(source.data, width, height=height, size="force",
                                             no_rotate=True, option_string=options)
    return pyvips.Image.new_from_buffer(source.data, options, access="sequential")


def _load_level(source: SourceImage, level: int) -> pyvips.Image:
    if source.format == "heic":
        return decode_heif(source.data)
    if level > 1 and source.format == "jpeg":
        return pyvips.Image.new_from_buffer(source.data, "", shrink=level)
    if level > 1 and source.format == "webp":
        return pyvips.Image.new_from_buffer(source.data, "", scale=1 / level)
    return pyvips.Image.new_from_buffer(source.data, "")


def _fits(ctx: TransformContext, level: int) -> bool:
    assert ctx.decoded is not None
    bands = 4 if ctx.source.has_alpha else 3
    return (ctx.source.width // level) * (ctx.source.height // level) * bands <= ctx.decoded.max_bytes


def _cacheable(ctx: TransformContext, level: int) -> bool:
    source = ctx.source
    if ctx.decoded is None or not ctx.decoded.enabled or source.format == "svg" or ctx.keep_animation:
        return False
    if pyvips.cache_get_max() > 0:
        # libvips' operation cache would hand a later job the very image an earlier job's deadline
        # watch is connected to; image workers run without it (assetcdn/edge/image_pool.py).
        return False
    return _fits(ctx, level)


def _decode_kept(ctx: TransformContext, level: int) -> pyvips.Image:
    """The source at `ctx.decode_size` made from a kept decode, decoding (and keeping) it first if needed."""
    decoded = ctx.decoded
    assert decoded is not None
    # The edge verified the bytes against the manifest's SHA-256 when it fetched them and sends it along;
    # the length joins the key so bytes that do not match it in size never share a decode.
    digest = (ctx.source_digest or hashlib.sha256(ctx.source.data).digest()) + len(ctx.source.data).to_bytes(8, "big")
    found = decoded.get(digest, level)
    if found is None:
        if level > 1 and decoded.holds_smaller(digest, level) and _fits(ctx, 1):
            # A second, larger size of one picture: its srcset asks for more; decode it whole once.
            level = 1
        # No deadline watch here: libvips hands an image's progress signal on to the images made from
        # it, so the kept one would call this job's handler after it is gone. The decode is bounded by
        # the cache's size; the image pool kills a worker whose job overruns regardless.
        kept = standard(_load_level(ctx.source, level)).copy_memory()
        decoded.put(digest, level, kept)
        ctx.check_deadline("decode")
    else:
        kept = found[0]
    if ctx.decode_size is None or (kept.width, kept.height) == ctx.decode_size:
        return kept.copy()   # a new image: the encode step's deadline watch must not attach to the kept one
    width, height = ctx.decode_size
    # no_rotate: the rotate step applies the EXIF orientation (the kept decode still carries it).
    return kept.thumbnail_image(width, height=height, size="force", no_rotate=True)


def decode(ctx: TransformContext) -> None:
    source = ctx.source
    size = (source.width, source.height)
    level = level_for(source.format, size, ctx.decode_size)
    try:
        if _cacheable(ctx, level):
            image = _decode_kept(ctx, level)
        else:
            image = standard(_decode_direct(ctx))
    except pyvips.Error as exc:
        if ctx.killed or budget_clock() > ctx.deadline:
            raise   # the pipeline answers the budget's 503
        raise undecodable(source.format, str(exc).splitlines()[0]) from exc
    ctx.image = image

