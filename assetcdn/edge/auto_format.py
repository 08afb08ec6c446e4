"""/api/auto's choice: which file (or generated variant) answers a negotiated chain.

The chain (assetcdn/edge/negotiate.py) lists acceptable formats, best first. Walking the chain, a
format is answered by its own file, sent as it is, when one exists; when it does not, by a variant
converted from the conversion source instead of falling back to a worse format (`decide`, the one
decision for both kinds of source). A stored zone's candidates are the manifest's files `<base>.<ext>`,
its conversion source the best raster one of them (kept for a year like any transform, `choices`); a pull
zone's image is its only file, and its own source (`single_file_choices`: the edge cannot list the origin's).
Formats no encoder here writes (svg, heif, apng, animated AVIF; jxl without imagecodecs)
are answered only by their own files, and an SVG is never a conversion source: a vector
logo is better served as SVG, which every still chain ends with.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from assetcdn.edge.transform.options import TransformOptions
from assetcdn.shared.manifest import ManifestEntry

# Best conversion sources first: lossless and wide-gamut before lossy; for anim=1 the formats
# that carry animation first (a gif or webp source keeps its frames in webp and gif output).
STILL_SOURCES = ("png", "tiff", "tif", "webp", "jpg", "jpeg", "avif", "heic", "heif", "gif")
ANIMATED_SOURCES = ("gif", "webp", "png", "tiff", "tif", "jpg", "jpeg", "avif", "heic", "heif")


File = TypeVar("File")   # a stored zone's ManifestEntry, or a pull zone's image (assetcdn/edge/routes/auto.py)


@dataclass(frozen=True, slots=True)
class AutoChoice(Generic[File]):
    format: str            # the chain entry answered; Content-Type is FORMAT_MIME[format]
    entry: File            # the file served as is, or the source of the conversion
    convert: bool          # True: a variant converted from `entry` into `format`


@functools.cache
def _convertible() -> frozenset[str]:
    # Read at the first negotiation, not as the edge starts: the encoders load numpy, Pillow and the codecs,
    # which otherwise only the image workers need. Cached: negotiation asks for every answer.
    from assetcdn.edge.transform.encode import ENCODERS  # noqa: PLC0415

    return frozenset(ENCODERS)


def can_convert_to(fmt: str) -> bool:
    return fmt in _convertible()


def decide(chain: list[str], own: Callable[[str], File | None], source: File | None) -> list[AutoChoice[File]]:
    """Every way to answer, best first (the caller falls back along it if a conversion fails): each format of
    the chain by `own(format)`, its own file, as it is; else converted from `source` when an encoder here writes
    that format."""
    found: list[AutoChoice[File]] = []
    for fmt in chain:
        entry = own(fmt)
        if entry is not None:
            found.append(AutoChoice(fmt, entry, convert=False))
        elif source is not None and can_convert_to(fmt):
            found.append(AutoChoice(fmt, source, convert=True))
    return found


def choices(chain: list[str], base: str, get: Callable[[str], ManifestEntry | None], *,
            animated: bool = False) -> list[AutoChoice[ManifestEntry]]:
    """A stored zone's base: its files `<base>.<ext>`, converted from the best raster one of them."""
    order = ANIMATED_SOURCES if animated else STILL_SOURCES
    source = next((e for e in (get(f"{base}.{ext}") for ext in order) if e is not None), None)
    return decide(chain, lambda fmt: get(f"{base}.{fmt}"), source)


# Chain entries one file answers as it is: HEIF and HEIC are one container (assetcdn/edge/transform/source.py
# reads both as heic).
SAME_FORMATS = {"heic": frozenset({"heic", "heif"}), "heif": frozenset({"heic", "heif"})}


def same_format(fmt: str, other: str) -> bool:
    return other in SAME_FORMATS.get(fmt, (fmt,))


def single_file_choices(chain: list[str], file: File, fmt: str | None) -> list[AutoChoice[File]]:
    """A file whose format is `fmt` (None: not one to send as it is) as the only candidate and the conversion
    source: sent as it is where its format comes in the chain before any this edge converts to (a WebP to a
    client taking WebP but not AVIF), else converted. An SVG sent as it is is never converted, as a stored
    base's never is: the chain's svg (every still chain ends with it) answers."""
    return decide(chain, lambda wanted: file if fmt is not None and same_format(fmt, wanted) else None,
                  None if fmt == "svg" else file)


def conversion_options(source: ManifestEntry) -> TransformOptions:
    """A plain conversion (no resize): its cache key equals /api/transform?url=<source>&format=<fmt>'s."""
    return TransformOptions(url=source.path)
