"""/api/auto's choice: which file (or generated variant) answers a negotiated chain for one base path.

The chain (assetcdn/edge/negotiate.py) lists acceptable formats, best first. Candidates are the
manifest's files `<base>.<ext>`. Walking the chain, a format is answered by its own file
when one exists; when it does not, by a variant converted from the best raster source of the
same base (kept for a year like any transform) instead of falling back to a worse format.
Formats no encoder here writes (svg, heif, apng, animated AVIF; jxl without imagecodecs)
are answered only by their own files, and an SVG is never a conversion source: a vector
logo is better served as SVG, which every still chain ends with.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

from assetcdn.edge.transform.options import TransformOptions
from assetcdn.shared.manifest import ManifestEntry

# Best conversion sources first: lossless and wide-gamut before lossy; for anim=1 the formats
# that carry animation first (a gif or webp source keeps its frames in webp and gif output).
STILL_SOURCES = ("png", "tiff", "tif", "webp", "jpg", "jpeg", "avif", "heic", "heif", "gif")
ANIMATED_SOURCES = ("gif", "webp", "png", "tiff", "tif", "jpg", "jpeg", "avif", "heic", "heif")


@dataclass(frozen=True, slots=True)
class AutoChoice:
    format: str            # the chain entry answered; Content-Type is FORMAT_MIME[format]
    entry: ManifestEntry   # the file served as is, or the source of the conversion
    convert: bool          # True: a variant converted from `entry` into `format`


@functools.cache
def _convertible() -> frozenset[str]:
    # Read at the first negotiation, not as the edge starts: the encoders load numpy, Pillow and the codecs,
    # which otherwise only the image workers need. Cached: negotiation asks for every answer.
    from assetcdn.edge.transform.encode import ENCODERS  # noqa: PLC0415

    return frozenset(ENCODERS)


def can_convert_to(fmt: str) -> bool:
    return fmt in _convertible()


def choices(chain: list[str], base: str, get: Callable[[str], ManifestEntry | None], *,
            animated: bool = False) -> list[AutoChoice]:
    """Every way to answer, best first (the caller falls back along it if a conversion fails)."""
    order = ANIMATED_SOURCES if animated else STILL_SOURCES
    source = next((e for e in (get(f"{base}.{ext}") for ext in order) if e is not None), None)
    found: list[AutoChoice] = []
    for fmt in chain:
        entry = get(f"{base}.{fmt}")
        if entry is not None:
            found.append(AutoChoice(fmt, entry, convert=False))
        elif source is not None and can_convert_to(fmt):
            found.append(AutoChoice(fmt, source, convert=True))
    return found


def conversion_options(source: ManifestEntry) -> TransformOptions:
    """A plain conversion (no resize): its cache key equals /api/transform?url=<source>&format=<fmt>'s."""
    return TransformOptions(url=source.path)
