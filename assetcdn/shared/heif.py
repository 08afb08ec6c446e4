"""HEIC/HEIF beside AVIF: told apart by the brands of the ISO-BMFF `ftyp` box, and decoded with pillow-heif.

Both containers start alike; libvips here reads AVIF but not HEVC, so HEIF goes to pillow-heif
(assetcdn/edge/transform/ for a transform, assetcdn/control/ai/image_input.py for analysis).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyvips

HEIF_BRANDS = frozenset({b"heic", b"heix", b"heim", b"heis", b"hevc", b"hevx", b"mif1", b"msf1"})
AVIF_BRANDS = frozenset({b"avif", b"avis"})
_BRANDS_END = 64  # the compatible brands looked at: a real `ftyp` box lists a handful


def is_heif_not_avif(data: bytes) -> bool:
    """An `ftyp` box whose major brand is not AVIF's and whose brands name a HEIF one."""
    if data[4:8] != b"ftyp":
        return False
    brands = {data[8:12]} | {data[i:i + 4] for i in range(16, min(len(data), _BRANDS_END), 4)}
    return data[8:12] not in AVIF_BRANDS and bool(brands & HEIF_BRANDS)


def decode_heif(data: bytes) -> pyvips.Image:
    """Full decode of a HEIC/HEIF (no shrink-on-load exists for it) into an sRGB libvips image."""
    # Imported on first use: the edge's own process imports this module and never decodes pixels (its
    # image workers do).
    import numpy as np  # noqa: PLC0415
    import pillow_heif  # noqa: PLC0415
    import pyvips  # noqa: PLC0415

    heif = pillow_heif.open_heif(data, convert_hdr_to_8bit=True)
    bands = 4 if heif.has_alpha else 3
    width, height = heif.size
    rows = np.frombuffer(heif.data, dtype=np.uint8).reshape(height, heif.stride)
    pixels = np.ascontiguousarray(rows[:, :width * bands]).reshape(height, width, bands)
    return pyvips.Image.new_from_array(pixels).copy(interpretation="srgb")
