"""An asset's bytes turned into what the analyses read, within the same bounds as a transform.

What the bytes are is decided from the bytes: an SVG is sanitised (assetcdn/shared/svg_sanitize.py) before
librsvg sees it, and only the image loaders below may read a source. The pixel budget is checked
on the header, before any pixel is decoded; the decode itself shrinks on load where the format
allows (JPEG, WebP, SVG, HEIF), so a large photograph costs little more than a small one.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass

import numpy as np
import pillow_heif
import pyvips

from assetcdn.shared.faces import rgb_pixels, srgb_uchar
from assetcdn.shared.heif import decode_heif, is_heif_not_avif
from assetcdn.shared.svg_sanitize import looks_like_svg, sanitize_svg

LOADERS = {
    "jpegload_buffer": "jpeg", "pngload_buffer": "png", "webpload_buffer": "webp", "gifload_buffer": "gif",
    "heifload_buffer": "avif", "tiffload_buffer": "tiff", "svgload_buffer": "svg",
}
MAX_SVG_TEXT = 300
# Leading bytes of the raster formats above: a file that starts like one but does not load is broken
# (422); one that starts like none of them is not an image (415).
SIGNATURES = (b"\xff\xd8\xff", b"\x89PNG", b"GIF8", b"II*\x00", b"MM\x00*")


class ImageInputError(Exception):
    """Bytes that cannot be analysed: `status` 415 (not an image) or 422 (undecodable, too large)."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


@dataclass(frozen=True)
class SvgText:
    title: str
    desc: str
    label: str        # the root's aria-label
    text: str         # what <text> elements say

    @property
    def empty(self) -> bool:
        return not (self.title or self.desc or self.label or self.text)


@dataclass(frozen=True)
class AnalysisImage:
    """A source read for analysis: a small sRGB copy plus what is known about the original."""

    data: bytes          # the bytes to render again at another size (sanitised for SVG)
    format: str
    width: int           # the original's size (one frame)
    height: int
    pages: int
    has_alpha: bool
    image: pyvips.Image  # at most `size` pixels on its long side, sRGB, alpha flattened onto white
    svg: SvgText | None

    @property
    def pixels(self) -> np.ndarray:
        return rgb_pixels(self.image)

    @property
    def scale(self) -> float:
        """Original pixels per analysis pixel."""
        return self.width / self.image.width

    def render(self, size: int) -> pyvips.Image:
        """The source again at most `size` pixels on its long side (first frame), sRGB, no alpha."""
        return _flat(_thumbnail(self.data, self.format, size))


def _clean_text(value: str | None) -> str:
    return " ".join((value or "").split())


def _local(tag: object) -> str:
    return tag.rsplit("}", 1)[-1].lower() if isinstance(tag, str) else ""


def svg_text(data: bytes) -> SvgText:
    """The title, description, label and visible text of a sanitised SVG document."""
    root = ET.fromstring(data)
    title = desc = ""
    for child in root:
        if _local(child.tag) == "title" and not title:
            title = _clean_text("".join(child.itertext()))
        elif _local(child.tag) == "desc" and not desc:
            desc = _clean_text("".join(child.itertext()))
    words = [_clean_text("".join(el.itertext())) for el in root.iter() if _local(el.tag) == "text"]
    text = _clean_text(" ".join(w for w in words if w))[:MAX_SVG_TEXT]
    return SvgText(title[:MAX_SVG_TEXT], desc[:MAX_SVG_TEXT], _clean_text(root.get("aria-label"))[:MAX_SVG_TEXT],
                   text)


def _looks_like_image(data: bytes) -> bool:
    return data.startswith(SIGNATURES) or (data[:4] == b"RIFF" and data[8:12] == b"WEBP") or data[4:8] == b"ftyp"


def _flat(image: pyvips.Image) -> pyvips.Image:
    return srgb_uchar(image).copy_memory()


def _thumbnail(data: bytes, fmt: str, size: int) -> pyvips.Image:
    if fmt == "heic":
        return decode_heif(data).thumbnail_image(size, height=size, size="down")
    return pyvips.Image.thumbnail_buffer(data, size, height=size, size="down")


def load_for_analysis(data: bytes, *, max_pixels: int, size: int) -> AnalysisImage:
    """Identify, bound and decode `data` to an analysis copy; ImageInputError when it cannot be used."""
    if not data:
        raise ImageInputError(422, "UndecodableImage", "The asset is empty.")
    svg = None
    fmt: str | None = None
    if looks_like_svg(data):  # whatever libvips would hand librsvg (whitespace of any length before it too)
        try:
            data = sanitize_svg(data)
            svg = svg_text(data)
        except (ValueError, ET.ParseError) as exc:
            raise ImageInputError(422, "UndecodableImage", f"The SVG could not be read: {exc}") from None
    try:
        if is_heif_not_avif(data):
            fmt = "heic"
            heif = pillow_heif.open_heif(data, convert_hdr_to_8bit=True)
            (width, height), pages, has_alpha = heif.size, 1, bool(heif.has_alpha)
        else:
            header = pyvips.Image.new_from_buffer(data, "", access="sequential")
            fmt = LOADERS.get(header.get("vips-loader"))
            if fmt is None:
                raise ImageInputError(415, "UnsupportedMediaType", "The asset is not an image this service can "
                                      f"analyse (supported: {', '.join(sorted(set(LOADERS.values())))}, heic).")
            width, height = header.width, header.get_page_height()
            pages = max(header.get_n_pages(), 1) if fmt in ("gif", "webp") else 1
            has_alpha = header.hasalpha()
    except (pyvips.Error, ValueError, RuntimeError, OSError) as exc:
        if fmt is None and svg is None and not _looks_like_image(data):
            raise ImageInputError(415, "UnsupportedMediaType", "The asset is not an image this service can "
                                  "analyse.") from None
        raise ImageInputError(422, "UndecodableImage", f"The image could not be decoded: "
                              f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
    if width * height > max_pixels:
        raise ImageInputError(422, "ImageTooLarge", f"The image is too large to analyse: {width}x{height} = "
                              f"{width * height:,} pixels exceeds the limit of {max_pixels:,}.")
    try:
        image = _flat(_thumbnail(data, fmt, size))
    except (pyvips.Error, ValueError, RuntimeError, OSError) as exc:
        raise ImageInputError(422, "UndecodableImage", f"The image could not be decoded: "
                              f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
    return AnalysisImage(data=data, format=fmt, width=width, height=height, pages=pages, has_alpha=has_alpha,
                         image=image, svg=svg)
