"""trim on real images: what is cut, what the resize then sizes, and the pixel budget after it."""

from __future__ import annotations

import pytest
import pyvips

from assetcdn.edge.transform.budgets import TransformLimits
from assetcdn.edge.transform.options import parse_transform_options
from assetcdn.edge.transform.steps import TransformResult, run_transform
from assetcdn.shared.errors import LegacyError
from tests.support.transform_images import load

DARK = [20, 60, 120]
# A 400x300 white canvas with a dark 100x80 picture at (50, 60).
BOX = (50, 60, 100, 80)


def bordered(background: list[int] | None = None) -> pyvips.Image:
    canvas = pyvips.Image.black(400, 300).new_from_image(background or [255, 255, 255])
    return canvas.copy(interpretation="srgb").cast("uchar").draw_rect(DARK, *BOX, fill=True)


def transform(source: bytes, source_format: str = "png", output: str = "png", *, max_pixels: int = 50_000_000,
              **query: str) -> TransformResult:
    opts = parse_transform_options({"url": "akande/v1/banners/x.png", **query})
    return run_transform(source, source_format, opts, output, TransformLimits(max_pixels=max_pixels, time_budget_s=30))


def test_the_border_is_cut_away() -> None:
    result = transform(bordered().pngsave_buffer(), trim="10")
    assert (result.width, result.height) == (100, 80)
    image = load(result.body)
    assert image.getpoint(0, 0) == DARK and image.getpoint(99, 79) == DARK


def test_the_border_is_the_top_left_colour_not_white() -> None:
    result = transform(bordered([200, 30, 30]).pngsave_buffer(), trim="10")
    assert (result.width, result.height) == (100, 80)


def test_w_sizes_what_is_left() -> None:
    result = transform(bordered().pngsave_buffer(), trim="10", w="50")
    assert (result.width, result.height) == (50, 40)
    cover = transform(bordered().pngsave_buffer(), trim="10", w="40", h="40")
    assert (cover.width, cover.height) == (40, 40)


def test_a_jpeg_border_with_noise_is_cut_with_a_higher_threshold() -> None:
    noisy = (bordered() + pyvips.Image.gaussnoise(400, 300, sigma=3)).cast("uchar").copy(interpretation="srgb")
    result = transform(noisy.jpegsave_buffer(Q=85), "jpeg", "jpeg", trim="40")
    assert abs(result.width - 100) <= 2 and abs(result.height - 80) <= 2


def test_a_transparent_margin_is_cut_whatever_colour_it_hides() -> None:
    alpha = pyvips.Image.black(400, 300).draw_rect(255, *BOX, fill=True)
    # Under the transparent margin: noise, as editors leave it.
    colour = pyvips.Image.gaussnoise(400, 300, mean=128, sigma=60).cast("uchar").bandjoin(
        [pyvips.Image.black(400, 300), pyvips.Image.black(400, 300)])
    source = colour.bandjoin(alpha).cast("uchar").copy(interpretation="srgb").pngsave_buffer()
    result = transform(source, trim="10")
    assert (result.width, result.height) == (100, 80)
    assert load(result.body).getpoint(50, 40)[3] == 255


def test_an_image_that_is_all_border_is_left_as_it_is() -> None:
    flat = pyvips.Image.black(120, 90).new_from_image([255, 255, 255]).copy(interpretation="srgb").cast("uchar")
    result = transform(flat.pngsave_buffer(), trim="10")
    assert (result.width, result.height) == (120, 90)


@pytest.mark.parametrize(("size", "band", "trimmed"), [
    ((2, 60), (0, 20, 2, 20), (2, 20)),      # narrower than find_trim's 3x3 median window
    ((60, 1), (10, 0, 30, 1), (30, 1)),      # one row
    ((1, 1), None, (1, 1)),                  # a spacer pixel: all border
])
def test_an_image_narrower_than_three_pixels_is_trimmed_not_refused(
        size: tuple[int, int], band: tuple[int, int, int, int] | None, trimmed: tuple[int, int]) -> None:
    """libvips' find_trim refuses an image less than 3 pixels wide or high ("rank: window too large"): `trim` of a
    spacer or a thin rule was 422 where any other image is cut, or left as it is."""
    image = pyvips.Image.black(*size).new_from_image([255, 255, 255]).copy(interpretation="srgb").cast("uchar")
    if band is not None:
        image = image.draw_rect(DARK, *band, fill=True)
    result = transform(image.pngsave_buffer(), trim="10")
    assert (result.width, result.height) == trimmed


def test_an_animation_keeps_what_any_frame_shows() -> None:
    frames = []
    for left in (20, 200):        # the picture moves right: the trim keeps both places
        frames.append(pyvips.Image.black(300, 100).new_from_image([255, 255, 255]).copy(interpretation="srgb")
                      .cast("uchar").draw_rect(DARK, left, 30, 50, 40, fill=True))
    strip = pyvips.Image.arrayjoin(frames, across=1).copy()
    strip.set_type(pyvips.GValue.gint_type, "page-height", 100)
    result = transform(strip.gifsave_buffer(), "gif", "gif", trim="10")
    decoded = load(result.body)
    assert result.pages == 2
    assert (decoded.width, decoded.get_page_height()) == (230, 40)


def test_the_resize_after_a_trim_is_held_to_the_pixel_budget() -> None:
    # Trimmed to a 10x100 strip, a 500x500 cover first scales it to 500x5000: 2.5 MP, over a 1 MP budget.
    strip = pyvips.Image.black(300, 300).new_from_image([255, 255, 255]).copy(interpretation="srgb").cast("uchar")
    source = strip.draw_rect(DARK, 100, 100, 10, 100, fill=True).pngsave_buffer()
    with pytest.raises(LegacyError) as caught:
        transform(source, max_pixels=1_000_000, trim="10", w="500", h="500")
    assert caught.value.status == 422
    assert "size fit=cover scales to before its 500x500 crop is too large: 500x5000" in caught.value.error
    assert (transform(source, max_pixels=1_000_000, trim="10", w="50", h="50").width) == 50


@pytest.mark.parametrize("bad", ["0", "256", "x", "-5"])
def test_threshold_out_of_range_is_refused(bad: str) -> None:
    with pytest.raises(LegacyError) as caught:
        parse_transform_options({"url": "a/v1/x.png", "trim": bad})
    assert caught.value.status == 400
    assert caught.value.error == f"Invalid parameter 'trim': '{bad}'. Must be an integer from 1 to 255."


def test_cache_key() -> None:
    opts = parse_transform_options({"url": "a/v1/x.png", "trim": "12", "w": "10", "rotate": "180"})
    assert opts.cache_key("b", "webp") == "tf1/b/rot180-trim12-w10.webp"
