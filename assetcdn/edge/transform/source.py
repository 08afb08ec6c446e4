"""The source image before any pixel is decoded: sniff, sanitise, read the header, check size.

What the bytes are is decided from the bytes, not from the file name: an SVG behind a `.png`
name is still sanitised, so is a gzip-compressed one (svgz, which librsvg would inflate itself,
past the sanitiser: it is inflated here first, within the sanitiser's size bound), and only the
loaders below may read a source (libvips can also load CSV, matrix and its own formats, none of
which a CDN asset should be). HEIC/HEIF is read
with pillow-heif, since libvips here is built without HEVC.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

from assetcdn.shared.errors import LegacyError
from assetcdn.shared.heif import is_heif_not_avif
from assetcdn.shared.svg_sanitize import (
    MAX_SVG_BYTES,
    filter_primitives,
    looks_like_svg,
    sanitize_svg,
)

# libvips loader -> format name used across the transform.
VIPS_LOADERS = {
    "jpegload_buffer": "jpeg", "pngload_buffer": "png", "webpload_buffer": "webp",
    "gifload_buffer": "gif", "heifload_buffer": "avif", "tiffload_buffer": "tiff",
    "svgload_buffer": "svg",
}
ANIMATED_FORMATS = frozenset({"gif", "webp"})
GZIP_MAGIC = b"\x1f\x8b"   # what libvips' SVG loader takes as a compressed SVG; no other loader reads it


@dataclass(frozen=True, slots=True)
class SourceImage:
    """A source whose header has been read: bytes ready to load, and what they hold."""

    data: bytes           # sanitised for SVG, else the original bytes
    format: str           # jpeg, png, webp, gif, avif, tiff, svg or heic
    width: int
    height: int           # one page (frame) high
    pages: int
    has_alpha: bool
    filter_primitives: int = 0     # SVG only: filter operations librsvg runs per pixel
    orientation: int = 1           # EXIF orientation (1-8) of the stored pixels; 1 = upright

    @property
    def animated(self) -> bool:
        return self.pages > 1 and self.format in ANIMATED_FORMATS


def undecodable(source_format: str, reason: str) -> LegacyError:
    return LegacyError(422, f"The source image ({source_format}) could not be decoded: {reason}")


def _inflated_svg(data: bytes, source_format: str) -> bytes:
    """The document of a gzip-compressed SVG, inflated here (never by librsvg, which would render it unsanitised):
    one whole gzip member of at most MAX_SVG_BYTES once inflated, holding an SVG; else 422."""
    inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        document = inflater.decompress(data, MAX_SVG_BYTES + 1)
    except zlib.error as exc:
        raise undecodable(source_format, f"its gzip data is broken ({exc}).") from exc
    if len(document) > MAX_SVG_BYTES:
        raise undecodable(source_format, f"the SVG it compresses is larger than {MAX_SVG_BYTES} bytes.")
    if not inflater.eof or inflater.unused_data:
        raise undecodable(source_format, "its gzip data is not one whole compressed document.")
    if not looks_like_svg(document):
        raise undecodable(source_format, "its gzip data holds no SVG.")
    return document


def read_source(data: bytes, source_format: str) -> SourceImage:
    """Identify the bytes and read their header only; LegacyError 415/422 when they cannot be used."""
    if not data:
        raise undecodable(source_format, "it is empty.")
    primitives = 0
    if data.startswith(GZIP_MAGIC):
        data = _inflated_svg(data, source_format)
    if looks_like_svg(data):
        try:
            data = sanitize_svg(data)
        except ValueError as exc:
            raise undecodable(source_format, str(exc)) from exc
        primitives = filter_primitives(data)
    elif is_heif_not_avif(data):
        return _read_heif(data, source_format)
    import pyvips  # noqa: PLC0415 (the edge's own process loads this module, never libvips: see image_pool.py)

    try:
        header = pyvips.Image.new_from_buffer(data, "", access="sequential")
        loader = header.get("vips-loader")
    except pyvips.Error as exc:
        raise undecodable(source_format, str(exc).splitlines()[0]) from exc
    fmt = VIPS_LOADERS.get(loader)
    if fmt is None:
        raise LegacyError(415, f"Cannot transform this source: its content ({loader}) is not a "
                          f"supported image format ({', '.join(sorted(set(VIPS_LOADERS.values())))}, heic).")
    pages = header.get_n_pages() if fmt in ANIMATED_FORMATS else 1
    orientation = header.get("orientation") if header.get_typeof("orientation") else 1
    return SourceImage(data=data, format=fmt, width=header.width, height=header.get_page_height(),
                       pages=max(pages, 1), has_alpha=header.hasalpha(),
                       filter_primitives=primitives if fmt == "svg" else 0,
                       orientation=orientation if orientation in range(1, 9) else 1)


def _read_heif(data: bytes, source_format: str) -> SourceImage:
    import pillow_heif  # noqa: PLC0415 (HEIF only: the edge process reads options from here, never pixels)

    try:
        heif = pillow_heif.open_heif(data, convert_hdr_to_8bit=True)
        width, height = heif.size
        has_alpha = bool(heif.has_alpha)
    except (ValueError, RuntimeError, OSError) as exc:
        raise undecodable(source_format, str(exc)) from exc
    return SourceImage(data=data, format="heic", width=width, height=height, pages=1, has_alpha=has_alpha)


def check_pixels(what: str, width: int, height: int, pages: int, max_pixels: int) -> None:
    """Refuse work over the pixel budget before any memory is spent on it (decompression bombs)."""
    pixels = width * height * pages
    if pixels > max_pixels:
        frames = f" x {pages} frames" if pages > 1 else ""
        raise LegacyError(422, f"The {what} is too large: {width}x{height}{frames} = {pixels:,} pixels "
                          f"exceeds this edge's limit of {max_pixels:,} pixels.")


def check_animation(source: SourceImage, max_frames: int, max_pixels: int) -> None:
    """Refuse an animated output whose source has too many frames or pixels in all (header values only)."""
    pixels = source.width * source.height * source.pages
    if source.pages > max_frames or pixels > max_pixels:
        raise LegacyError(422, f"The animation is too large: {source.pages} frames of {source.width}x{source.height} "
                          f"= {pixels:,} pixels; this edge makes animations of at most {max_frames:,} frames and "
                          f"{max_pixels:,} pixels. Ask for format=png, jpeg or avif to get its first frame.")


def check_svg_filters(source: SourceImage, width: int, height: int, max_work: int) -> None:
    """Refuse to rasterise an SVG whose filter effects over `width` x `height` would cost too much."""
    work = width * height * source.filter_primitives
    if work > max_work:
        raise LegacyError(422, f"The SVG's filter effects ({source.filter_primitives} primitives) over {width}x{height} "
                          f"pixels exceed this edge's limit of {max_work:,} pixel operations. Ask for a smaller w or h.")


