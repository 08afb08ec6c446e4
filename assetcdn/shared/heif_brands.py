"""HEIC/HEIF told from AVIF by the brands of the ISO-BMFF `ftyp` box, before anything is decoded.

Both containers start alike; libvips here reads AVIF but not HEVC, so HEIF goes to pillow-heif
(assetcdn/edge/transform/source.py for a transform, assetcdn/control/ai/image_input.py for analysis).
"""

from __future__ import annotations

HEIF_BRANDS = frozenset({b"heic", b"heix", b"heim", b"heis", b"hevc", b"hevx", b"mif1", b"msf1"})
AVIF_BRANDS = frozenset({b"avif", b"avis"})
_BRANDS_END = 64  # the compatible brands looked at: a real `ftyp` box lists a handful


def is_heif_not_avif(data: bytes) -> bool:
    """An `ftyp` box whose major brand is not AVIF's and whose brands name a HEIF one."""
    if data[4:8] != b"ftyp":
        return False
    brands = {data[8:12]} | {data[i:i + 4] for i in range(16, min(len(data), _BRANDS_END), 4)}
    return data[8:12] not in AVIF_BRANDS and bool(brands & HEIF_BRANDS)
