"""Encoders: one small function per output format, all taking an 8-bit sRGB or grey image.

Settings were chosen by measurement against thumbor's (Pillow) output of the same pictures at
the same quality: bytes, SSIM against a reference resize, and encoder CPU (benchmarks/ARCHIVE.md,
"Transforms beside thumbor", has each lever's figures; benchmarks/encoder_bench.py measures them).
AVIF effort 1 (aom cpu-used 8): far less CPU than effort 3 for about the same bytes, SSIM still
above thumbor's; effort 2 is no smaller than 1, and higher efforts take seconds. libvips and
Pillow's libavif map the nominal quality onto the same quantiser and both use aom's `tune=iq`,
so the same Q means the same thing on both sides.
JPEG is baseline with the standard Huffman tables and mozjpeg's quantisation table 3: progressive
scans and optimised Huffman tables each cost a multiple of the encode for a few percent of bytes
(lossless, so no SSIM), and table 3 alone keeps the output smaller than thumbor's optimised
progressive JPEG; trellis quantisation costs several times the encode for a lower SSIM.
A still WebP goes through Pillow's libwebp: at the same settings it writes byte for byte what
libvips' saver writes, with less CPU (measured on the srcset pictures); animated WebP
stays with libvips, which writes the frames. libwebp's method 4: lower methods, and
smart_subsample, grow the bytes.
Metadata (EXIF, XMP, ICC) is stripped: pixels are sRGB already.

Animation survives in webp and gif (libvips writes every 'page-height' frame). AVIF output
of an animated source is its first frame: libvips' heifsave writes pages as separate still
items, not an AV1 image sequence, so the pipeline loads one frame for it. JPEG XL goes
through imagecodecs (libjxl) and HEIC through pillow-heif (x265), since this libvips has
neither; both take the first frame.
"""

from __future__ import annotations

import io
from collections.abc import Callable

import numpy as np
import pillow_heif
import pyvips
from PIL import Image as PillowImage

from assetcdn.edge.transform.frames import first_frame
from assetcdn.edge.transform.options.format import side_too_long
from assetcdn.shared.errors import LegacyError

try:  # JPEG XL needs imagecodecs (libjxl); without it the jxl encoder is simply not offered.
    import imagecodecs
except ImportError:  # pragma: no cover - depends on the installation
    imagecodecs = None  # type: ignore[assignment]  # the module, or None when it is not installed

AVIF_EFFORT = 1
# mozjpeg's table 3 (ImageMagick's, cjpeg's default): 4% fewer bytes than the JPEG standard's at a
# higher SSIM than thumbor's output at the same q, and less encode time.
JPEG_QUANT_TABLE = 3
WEBP_EFFORT = 4
JXL_EFFORT = 3
PNG_COMPRESSION = 6
DEFAULT_QUALITY = {"jpeg": 80, "webp": 80, "avif": 55, "jxl": 80, "heic": 60}
ANIMATED_OUTPUTS = frozenset({"webp", "gif"})
CONTENT_TYPES = {
    "jpeg": "image/jpeg", "png": "image/png", "webp": "image/webp", "avif": "image/avif",
    "gif": "image/gif", "jxl": "image/jxl", "heic": "image/heic",
}
# JPEG has no alpha: transparent areas become white, as a page background usually is.
FLATTEN_BACKGROUND = [255, 255, 255]
# The longest side each of these encoders writes (libwebp's format limit; the AV1 encoder behind libvips' heifsave;
# JPEG's and GIF's 16-bit dimensions).
MAX_SIDE = {"webp": ("WebP", 16383), "avif": ("AVIF", 16384), "jpeg": ("JPEG", 65535), "gif": ("GIF", 65535)}


def _jpeg(image: pyvips.Image, quality: int) -> bytes:
    image = first_frame(image)
    if image.hasalpha():
        image = image.flatten(background=FLATTEN_BACKGROUND[: image.bands - 1])
    encoded: bytes = image.jpegsave_buffer(Q=quality, quant_table=JPEG_QUANT_TABLE, keep="none")
    return encoded


def _png(image: pyvips.Image, quality: int) -> bytes:
    encoded: bytes = first_frame(image).pngsave_buffer(compression=PNG_COMPRESSION, keep="none")
    return encoded


def _webp(image: pyvips.Image, quality: int) -> bytes:
    if image.get_page_height() < image.height:  # animated: libvips writes every frame
        encoded: bytes = image.webpsave_buffer(Q=quality, effort=WEBP_EFFORT, keep="none")
        return encoded
    if image.bands < 3:  # grey (with or without alpha) as RGB, as libvips' saver would write it
        image = image.colourspace("srgb")
    out = io.BytesIO()
    # No ICC or EXIF is passed, so none is written: the pixels are sRGB already.
    _pillow_picture(image).save(out, format="WEBP", quality=quality, method=WEBP_EFFORT)
    return out.getvalue()


def _pillow_picture(image: pyvips.Image) -> PillowImage.Image:
    """The first frame as a Pillow image. Pillow holds RGB as four bytes a pixel, so RGB goes over as
    RGBX, which it uses in place (as RGBA) instead of copying every pixel once more."""
    frame = first_frame(image)
    if frame.bands == 3:
        padded = frame.bandjoin_const([255])
        return PillowImage.frombuffer("RGBX", (padded.width, padded.height), padded.write_to_memory(),
                                      "raw", "RGBX", 0, 1)
    return PillowImage.fromarray(_pixels(frame))


def _avif(image: pyvips.Image, quality: int) -> bytes:
    encoded: bytes = first_frame(image).heifsave_buffer(compression="av1", Q=quality, effort=AVIF_EFFORT, keep="none")
    return encoded


def _gif(image: pyvips.Image, quality: int) -> bytes:
    encoded: bytes = image.gifsave_buffer(keep="none")
    return encoded


def _pixels(image: pyvips.Image) -> np.ndarray:
    """H x W x bands uint8 array of the first frame (evaluates the pipeline)."""
    array: np.ndarray = first_frame(image).numpy()
    return array if array.ndim == 3 else array[:, :, np.newaxis]


def _jxl(image: pyvips.Image, quality: int) -> bytes:
    pixels = _pixels(image)
    if pixels.shape[2] == 1:
        pixels = pixels[:, :, 0]
    return bytes(imagecodecs.jpegxl_encode(pixels, level=quality, effort=JXL_EFFORT))


def _heic(image: pyvips.Image, quality: int) -> bytes:
    image = first_frame(image)
    if image.bands < 3:
        image = image.colourspace("srgb")
    pixels = _pixels(image)
    mode = "RGBA" if pixels.shape[2] == 4 else "RGB"
    heif = pillow_heif.from_bytes(mode=mode, size=(pixels.shape[1], pixels.shape[0]), data=pixels.tobytes())
    out = io.BytesIO()
    heif.save(out, quality=quality)
    return out.getvalue()


ENCODERS: dict[str, Callable[[pyvips.Image, int], bytes]] = {
    "jpeg": _jpeg, "png": _png, "webp": _webp, "avif": _avif, "gif": _gif, "heic": _heic,
}
if imagecodecs is not None and imagecodecs.JPEGXL.available:
    ENCODERS["jxl"] = _jxl


def encode_image(image: pyvips.Image, output_format: str, quality: int | None = None) -> bytes:
    """Encode with the format's encoder; quality None means the format's default. LegacyError 422 when the format
    cannot hold the image (too long a side), or its encoder refuses it otherwise: Pillow's, pillow-heif's and
    imagecodecs' encoders raise ValueError or RuntimeError (libvips' own savers a pyvips.Error, for the caller)."""
    named = MAX_SIDE.get(output_format)
    width, height = image.width, image.get_page_height()
    if named is not None and max(width, height) > named[1]:
        raise side_too_long(named[0], named[1], width, height)
    encoder = ENCODERS[output_format]
    try:
        return encoder(image, quality if quality is not None else DEFAULT_QUALITY.get(output_format, 80))
    except (ValueError, RuntimeError) as exc:
        raise LegacyError(422, f"The {width}x{height} output could not be written as {output_format}: "
                          f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}.") from exc
