"""Kept decodes (assetcdn/edge/transform/decoded.py) and what must not change with them: the output's
quality against a reference resize, the cache's bound, and the guards (budgets, orientation, colour,
metadata), each through run_transform with a cache as an image worker runs it."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator

import numpy as np
import pytest
import pyvips

from assetcdn.edge.transform import decode, steps
from assetcdn.edge.transform.budgets import TransformLimits
from assetcdn.edge.transform.decode import profile_description
from assetcdn.edge.transform.decoded import DecodedSources, image_bytes, level_for
from assetcdn.edge.transform.options import parse_transform_options
from assetcdn.edge.transform.steps import TransformResult, run_transform
from assetcdn.shared.errors import LegacyError
from tests.support.transform_images import load

MB = 1024 * 1024
WIDTHS = (320, 480, 640, 960, 1280, 1920)
FORMATS = ("jpeg", "webp", "avif")


@pytest.fixture(autouse=True)
def no_operation_cache() -> Iterator[None]:
    """As in an image worker: kept decodes replace libvips' operation cache (the decode step keeps
    nothing while that cache is on)."""
    operations = pyvips.cache_get_max()
    pyvips.cache_set_max(0)
    yield
    pyvips.cache_set_max(operations)


def transform(source: bytes, source_format: str, output: str, decoded: DecodedSources | None, *,
              budget: float = 30.0, max_pixels: int = 50_000_000, **query: str) -> TransformResult:
    opts = parse_transform_options({"url": "akande/v1/banners/x." + source_format, **query})
    return run_transform(source, source_format, opts, output,
                         TransformLimits(max_pixels=max_pixels, time_budget_s=budget), decoded)


def detailed_photo(width: int = 2400, height: int = 1600) -> pyvips.Image:
    """Colour gradients, hard-edged discs and fine noise: detail a bad resize or encoder would lose."""
    xyz = pyvips.Image.xyz(width, height)
    image = (xyz[0] * (255 / width)).bandjoin([xyz[1] * (255 / height), (xyz[0] + xyz[1]) * (127 / width)])
    for disc in range(12):
        image = image.draw_circle([(disc * 67) % 256, 255 - (disc * 31) % 256, (disc * 97) % 256],
                                  (disc * 389) % width, (disc * 211) % height, 40 + disc * 9, fill=True)
    noise = pyvips.Image.gaussnoise(width, height, sigma=6, seed=3)
    return (image + noise).cast("uchar").copy(interpretation="srgb")


@pytest.fixture(scope="module")
def photo() -> bytes:
    data: bytes = detailed_photo().jpegsave_buffer(Q=92)
    return data


class References:
    """The original resized (lanczos3) to each size asked, as float32 pixels: made once per size for the
    module, whichever output format is compared with it."""

    def __init__(self, source: bytes) -> None:
        self.source = source
        self.original = pyvips.Image.new_from_buffer(source, "")
        self.pixels: dict[tuple[int, int], np.ndarray] = {}

    def of(self, width: int, height: int) -> np.ndarray:
        if (width, height) not in self.pixels:
            reference = self.original.resize(width / self.original.width, vscale=height / self.original.height,
                                             kernel="lanczos3")
            self.pixels[width, height] = float_pixels(reference.crop(0, 0, width, height))
        return self.pixels[width, height]


def float_pixels(image: pyvips.Image) -> np.ndarray:
    # In float32: half the CPU of skimage's float64 default, the same SSIM to within 1e-5.
    return np.asarray(image.numpy())[:, :, :3].astype(np.float32)


@pytest.fixture(scope="module")
def references(photo: bytes) -> References:
    return References(photo)


def ssim_against_reference(references: References, output: bytes) -> float:
    """SSIM of a decoded output against the original resized (lanczos3) to exactly its size."""
    # Imported here: scipy's filters load in a few tenths of a second, which every xdist worker would pay
    # collecting this file, not only the one that runs it.
    from skimage.metrics import structural_similarity  # noqa: PLC0415

    out = load(output)
    pixels = (references.of(out.width, out.height), float_pixels(out.crop(0, 0, out.width, out.height)))
    return float(structural_similarity(pixels[0], pixels[1], channel_axis=2, data_range=255))


@pytest.mark.parametrize("output", FORMATS)
def test_every_width_keeps_the_quality_of_a_reference_resize(references: References, output: str) -> None:
    photo = references.source
    decoded = DecodedSources(256 * MB)
    for width in WIDTHS:
        kept = transform(photo, "jpeg", output, decoded, w=str(width))
        direct = transform(photo, "jpeg", output, None, w=str(width))
        assert (kept.width, kept.height) == (direct.width, direct.height) == (width, round(1600 * width / 2400))
        # Widths asked smallest first: each is made from a kept decode at the level a decode for it alone
        # would use, so a client gets the very bytes it would without the cache, as close to the reference.
        assert kept.body == direct.body, width
        kept_ssim = ssim_against_reference(references, kept.body)
        assert kept_ssim > 0.85, (width, kept_ssim)


def test_six_widths_and_three_formats_decode_the_source_once_per_level(photo: bytes) -> None:
    decoded = DecodedSources(256 * MB)
    for width in reversed(WIDTHS):   # the largest first: its full-size decode serves every smaller one
        for output in FORMATS:
            transform(photo, "jpeg", output, decoded, w=str(width))
    assert (decoded.misses, decoded.hits, len(decoded)) == (1, 17, 1)


def test_a_small_variant_first_decodes_a_shrunk_level_then_a_large_one_replaces_it_with_the_full_size(
        photo: bytes) -> None:
    decoded = DecodedSources(256 * MB)
    transform(photo, "jpeg", "webp", decoded, w="320")     # 2400 / 320 = 7.5: a 1/2-scale JPEG decode
    assert len(decoded) == 1 and decoded.held_bytes == 1200 * 800 * 3
    transform(photo, "jpeg", "webp", decoded, w="480")     # served by the kept 1200 px decode
    transform(photo, "jpeg", "webp", decoded, w="1920")    # needs the full size, which serves every width
    assert (decoded.misses, decoded.hits, len(decoded), decoded.held_bytes) == (2, 1, 1, 2400 * 1600 * 3)


def test_a_second_larger_level_decodes_the_whole_picture_so_no_third_decode_follows(photo: bytes) -> None:
    decoded = DecodedSources(256 * MB)
    transform(photo, "jpeg", "jpeg", decoded, w="150")     # 2400 / 150 = 16: a 1/8-scale decode
    assert decoded.held_bytes == 300 * 200 * 3
    transform(photo, "jpeg", "jpeg", decoded, w="480")     # needs 1/2 scale: decoded whole instead
    assert (len(decoded), decoded.held_bytes) == (1, 2400 * 1600 * 3)
    for width in ("960", "1920", "640"):
        transform(photo, "jpeg", "jpeg", decoded, w=width)
    assert (decoded.misses, decoded.hits) == (2, 3)


def test_a_digest_sent_with_the_job_keys_the_decode_without_hashing_the_bytes_again(
        photo: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    digest = hashlib.sha256(photo).digest()
    limits = TransformLimits(max_pixels=50_000_000, time_budget_s=30)
    decoded = DecodedSources(256 * MB)

    def no_hashing(_data: bytes) -> object:
        raise AssertionError("the worker hashed a source whose digest it was given")

    monkeypatch.setattr("assetcdn.edge.transform.decode.hashlib.sha256", no_hashing)
    opts = parse_transform_options({"url": "akande/v1/banners/x.jpg", "w": "640"})
    first = run_transform(photo, "jpeg", opts, "webp", limits, decoded, digest)
    again = run_transform(photo, "jpeg", opts, "webp", limits, decoded, digest)
    assert (decoded.misses, decoded.hits) == (1, 1) and first.body == again.body
    # Bytes of another length under that digest (a cut-short copy) never take its decode: the length is in the key.
    run_transform(photo + b"\0", "jpeg", opts, "webp", limits, decoded, digest)
    assert (decoded.misses, decoded.hits) == (2, 1)


def test_the_cache_never_holds_more_than_its_bound() -> None:
    bound = 3 * 800 * 600 * 3              # three 800x600 decodes
    decoded = DecodedSources(bound)
    sources = [detailed_photo(800, 600).draw_rect([index * 20] * 3, 0, 0, 10, 10, fill=True).pngsave_buffer()
               for index in range(5)]
    for source in sources:
        transform(source, "png", "jpeg", decoded, w="200")
        assert decoded.held_bytes <= bound
    assert len(decoded) == 3 and decoded.held_bytes == bound
    # Least recently used first: the two oldest are gone, the newest three are kept.
    before = decoded.misses
    transform(sources[4], "png", "jpeg", decoded, w="300")
    transform(sources[0], "png", "jpeg", decoded, w="300")
    assert decoded.misses == before + 1 and decoded.held_bytes <= bound


def test_a_source_whose_decode_exceeds_the_bound_is_decoded_per_variant(photo: bytes) -> None:
    decoded = DecodedSources(1 * MB)
    result = transform(photo, "jpeg", "webp", decoded, w="1280")
    assert load(result.body).width == 1280 and len(decoded) == 0 and decoded.held_bytes == 0


def test_different_bytes_never_share_a_decode() -> None:
    red = pyvips.Image.black(400, 300).new_from_image([220, 20, 20]).cast("uchar").copy(interpretation="srgb")
    blue = red.new_from_image([20, 20, 220]).cast("uchar").copy(interpretation="srgb")
    decoded = DecodedSources(64 * MB)
    outputs = [load(transform(image.pngsave_buffer(), "png", "png", decoded, w="100").body) for image in (red, blue)]
    assert outputs[0].getpoint(50, 30)[0] > 200 and outputs[1].getpoint(50, 30)[2] > 200


def test_levels_leave_a_factor_of_two_for_the_resize() -> None:
    assert level_for("jpeg", (4000, 3000), (320, 240)) == 4     # 12.5x: decode 1000 px, then resize
    assert level_for("jpeg", (4000, 3000), (1920, 1440)) == 1
    assert level_for("webp", (4000, 3000), (240, 180)) == 8     # 16.7x
    assert level_for("png", (4000, 3000), (320, 240)) == 1      # no scaled decode
    assert level_for("jpeg", (4000, 3000), None) == 1
    assert image_bytes(pyvips.Image.black(10, 10, bands=4)) == 400


def test_the_pixel_budget_is_checked_before_anything_is_decoded(bomb_png: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_decode(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("the pipeline decoded pixels of an image over the pixel budget")

    monkeypatch.setattr(decode, "_load_level", no_decode)
    monkeypatch.setattr(decode, "_decode_direct", no_decode)
    decoded = DecodedSources(256 * MB)
    with pytest.raises(LegacyError) as caught:
        transform(bomb_png, "png", "webp", decoded, w="100")
    assert caught.value.status == 422 and "900,000,000 pixels" in caught.value.error
    assert len(decoded) == 0


def test_the_time_budget_stops_a_decode_into_the_cache(photo: bytes) -> None:
    with pytest.raises(LegacyError) as caught:
        transform(photo, "jpeg", "webp", DecodedSources(256 * MB), w="1900", budget=0.0)
    assert caught.value.status == 503 and "time budget" in caught.value.error


def test_a_libvips_failure_during_a_kept_decode_past_the_deadline_is_the_budgets_503(
        photo: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    real = pyvips.Image.copy_memory

    def slow_copy(image: pyvips.Image) -> pyvips.Image:
        spent = time.process_time() + 0.3
        while time.process_time() < spent:   # the budget counts CPU time: spend it
            pass
        real(image)
        raise pyvips.Error("unable to write to memory")

    monkeypatch.setattr(pyvips.Image, "copy_memory", slow_copy)
    with pytest.raises(LegacyError) as caught:
        transform(photo, "jpeg", "webp", DecodedSources(256 * MB), w="500", budget=0.1)
    assert caught.value.status == 503


@pytest.mark.parametrize("orientation", range(1, 9))
def test_exif_orientation_is_applied_to_variants_from_kept_decodes(orientation: int) -> None:
    # A red landscape with a blue mark at the top-left of the upright picture, stored per the tag.
    upright = (pyvips.Image.black(1600, 1200).new_from_image([200, 30, 30]).cast("uchar").copy(interpretation="srgb")
               .draw_rect([30, 30, 220], 0, 0, 300, 300, fill=True))
    stored = {1: upright, 2: upright.fliphor(), 3: upright.rot180(), 4: upright.flipver(),
              5: upright.rot90().fliphor(), 6: upright.rot270(), 7: upright.rot270().fliphor(),
              8: upright.rot90()}[orientation].copy()
    stored.set_type(pyvips.GValue.gint_type, "orientation", orientation)
    data = stored.jpegsave_buffer(Q=90)
    decoded = DecodedSources(64 * MB)
    for width in ("800", "400", "200"):   # the largest first: the smaller ones come from its decode
        out = load(transform(data, "jpeg", "png", decoded, w=width).body)
        assert out.width == int(width) and out.height == int(width) * 3 // 4
        assert out.getpoint(5, 5)[2] > 150 and out.getpoint(out.width - 6, out.height - 6)[0] > 150
    assert decoded.hits == 2


def _p3_source() -> tuple[bytes, list[float]]:
    """A JPEG whose pixels are Display P3 (profile embedded), and the sRGB colour they show."""
    srgb = pyvips.Image.black(1200, 800).new_from_image([200, 40, 40]).cast("uchar").copy(interpretation="srgb")
    p3 = srgb.icc_transform("p3")
    assert "P3" in profile_description(p3.get("icc-profile-data"))
    return p3.jpegsave_buffer(Q=95), [200, 40, 40]


@pytest.mark.parametrize("kept", [True, False])
@pytest.mark.parametrize("output", FORMATS)
def test_a_wide_gamut_source_comes_out_in_srgb_without_its_profile(output: str, kept: bool) -> None:
    data, shown = _p3_source()
    decoded = DecodedSources(64 * MB) if kept else None
    out = load(transform(data, "jpeg", output, decoded, w="300").body)
    assert not out.get_typeof("icc-profile-data") and not out.get_typeof("exif-data")
    pixel = out.getpoint(150, 100)
    # Read as sRGB (browsers do with no profile), the output shows what the P3 source showed.
    assert all(abs(got - want) <= 8 for got, want in zip(pixel[:3], shown, strict=True)), pixel


@pytest.mark.parametrize("kept", [True, False])
def test_a_cmyk_source_comes_out_in_srgb(kept: bool) -> None:
    srgb = pyvips.Image.black(1000, 800).new_from_image([40, 90, 200]).cast("uchar").copy(interpretation="srgb")
    data = srgb.icc_export(output_profile="cmyk").jpegsave_buffer(Q=95)
    shown = pyvips.Image.new_from_buffer(data, "").icc_transform("srgb", embedded=True).getpoint(10, 10)
    out = load(transform(data, "jpeg", "webp", DecodedSources(64 * MB) if kept else None, w="200").body)
    assert out.interpretation == "srgb" and out.bands == 3
    assert all(abs(got - want) <= 6 for got, want in zip(out.getpoint(100, 80), shown, strict=True))


def test_metadata_is_stripped_from_variants_of_kept_decodes() -> None:
    image = detailed_photo(1200, 800).copy()
    image.set_type(pyvips.GValue.blob_type, "xmp-data", b'<x:xmpmeta xmlns:x="adobe:ns:meta/">someone@example.com</x:xmpmeta>')
    data = image.jpegsave_buffer(Q=90, keep="all")
    assert b"someone@example.com" in data
    decoded = DecodedSources(64 * MB)
    for output in FORMATS:
        body = transform(data, "jpeg", output, decoded, w="600").body
        assert b"someone@example.com" not in body and b"Exif" not in body


def test_animation_kept_whole_bypasses_the_cache(animated_gif: bytes) -> None:
    decoded = DecodedSources(64 * MB)
    result = transform(animated_gif, "gif", "webp", decoded, w="150")
    assert result.pages > 1 and len(decoded) == 0
    still = transform(animated_gif, "gif", "jpeg", decoded, w="150")     # the first frame is kept
    assert still.pages == 1 and len(decoded) == 1


def test_nothing_is_kept_while_libvips_operation_cache_is_on(photo: bytes) -> None:
    pyvips.cache_set_max(50)
    decoded = DecodedSources(256 * MB)
    for output in FORMATS:
        transform(photo, "jpeg", output, decoded, w="640")
    assert len(decoded) == 0 and decoded.misses == 0


def test_the_pipeline_steps_see_the_kept_decode_as_a_fresh_image(photo: bytes,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # A kept decode must never carry a job's deadline watch: a later job's kill would poison it.
    decoded = DecodedSources(256 * MB)
    transform(photo, "jpeg", "jpeg", decoded, w="2400")      # the full size: the kept image itself fits
    with pytest.raises(LegacyError):
        transform(photo, "jpeg", "png", decoded, blur="250", budget=0.05)
    again = transform(photo, "jpeg", "jpeg", decoded, w="2400")
    assert load(again.body).width == 2400
    assert steps.STEPS[0][0] == "decode"
