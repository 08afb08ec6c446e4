"""HEIC goes to pillow-heif and AVIF to libvips on the edge and on control alike: told apart by the `ftyp` brands."""

from __future__ import annotations

import io

import pillow_heif
import pyvips

from assetcdn.shared.heif_brands import is_heif_not_avif


def _image() -> pyvips.Image:
    return pyvips.Image.black(16, 16, bands=3) + 128


def test_a_heic_file_is_heif() -> None:
    out = io.BytesIO()
    image = _image()
    pillow_heif.from_bytes(mode="RGB", size=(image.width, image.height), data=image.cast("uchar").write_to_memory()
                           ).save(out, quality=80)
    assert is_heif_not_avif(out.getvalue())


def test_avif_and_other_formats_are_not() -> None:
    image = _image()
    assert not is_heif_not_avif(image.heifsave_buffer(compression="av1", effort=0))
    assert not is_heif_not_avif(image.cast("uchar").pngsave_buffer())
    assert not is_heif_not_avif(b"")
