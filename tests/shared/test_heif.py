"""HEIC goes to pillow-heif and AVIF to libvips on the edge and on control alike: told apart by the `ftyp`
brands, and decoded once for both."""

from __future__ import annotations

import io

import pillow_heif
import pyvips

from assetcdn.shared.heif import decode_heif, is_heif_not_avif


def _image() -> pyvips.Image:
    return pyvips.Image.black(16, 16, bands=3) + 128


def _heic(image: pyvips.Image) -> bytes:
    out = io.BytesIO()
    pillow_heif.from_bytes(mode="RGB", size=(image.width, image.height), data=image.cast("uchar").write_to_memory()
                           ).save(out, quality=80)
    return out.getvalue()


def test_a_heic_file_is_heif_and_decodes_to_its_pixels() -> None:
    data = _heic(_image())
    assert is_heif_not_avif(data)
    decoded = decode_heif(data)
    assert (decoded.width, decoded.height, decoded.bands, decoded.interpretation) == (16, 16, 3, "srgb")
    assert abs(decoded.avg() - 128) < 3


def test_avif_and_other_formats_are_not() -> None:
    image = _image()
    assert not is_heif_not_avif(image.heifsave_buffer(compression="av1", effort=0))
    assert not is_heif_not_avif(image.cast("uchar").pngsave_buffer())
    assert not is_heif_not_avif(b"")
