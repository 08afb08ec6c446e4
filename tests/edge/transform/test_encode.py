"""The still-WebP encoder (Pillow's libwebp, assetcdn/edge/transform/encode.py) writes what libvips' own
saver writes at the same settings, for every band layout the pipeline hands it."""

from __future__ import annotations

import pytest
import pyvips

from assetcdn.edge.transform.encode import WEBP_EFFORT, encode_image


def _picture(bands: int) -> pyvips.Image:
    noise = pyvips.Image.gaussnoise(333, 211, sigma=40, mean=128, seed=7).cast("uchar")
    xyz = pyvips.Image.xyz(333, 211)
    layers = [noise, (xyz[0] * 0.7).cast("uchar"), (xyz[1] * 1.2).cast("uchar"), ((xyz[0] + xyz[1]) % 256).cast("uchar")]
    image = layers[0].bandjoin(layers[1:bands]) if bands > 1 else layers[0]
    return image.copy(interpretation="srgb" if bands >= 3 else "b-w")


@pytest.mark.parametrize("bands", [1, 2, 3, 4], ids=["grey", "grey+alpha", "rgb", "rgba"])
@pytest.mark.parametrize("quality", [50, 80])
def test_a_still_webp_is_byte_for_byte_what_libvips_writes(bands: int, quality: int) -> None:
    image = _picture(bands)
    expected = (image.colourspace("srgb") if bands < 3 else image).webpsave_buffer(
        Q=quality, effort=WEBP_EFFORT, keep="none")
    assert encode_image(image, "webp", quality) == expected
