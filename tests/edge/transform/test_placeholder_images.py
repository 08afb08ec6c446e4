"""LQIP and BlurHash placeholders, and their query validation (standard envelope)."""

from __future__ import annotations

import io

import blurhash
import pillow_heif
import pytest
import pyvips

from assetcdn.edge.transform.placeholder_images import make_blurhash_placeholder, make_lqip
from assetcdn.edge.transform.placeholder_params import PlaceholderParams, parse_placeholder_params
from assetcdn.shared.errors import ApiError, LegacyError
from tests.support.transform_images import load

URL = "/akande/v1/banners/hero.jpg"


@pytest.mark.parametrize("size", [8, 32, 64])
def test_lqip_is_a_tiny_blurred_webp(photo_jpeg: bytes, size: int) -> None:
    webp, width = make_lqip(photo_jpeg, "jpeg", size, 30)
    decoded = load(webp)
    assert decoded.get("vips-loader") == "webpload_buffer"
    assert decoded.width == width == size
    assert abs(decoded.height - size * 1333 / 2000) <= 1
    assert len(webp) < 1500


def test_lqip_blur_changes_the_bytes(photo_jpeg: bytes) -> None:
    assert make_lqip(photo_jpeg, "jpeg", 32, 1)[0] != make_lqip(photo_jpeg, "jpeg", 32, 250)[0]


@pytest.mark.parametrize(("fixture", "fmt"), [("alpha_png", "png"), ("animated_gif", "gif"),
                                              ("logo_svg", "svg"), ("face_jpeg", "jpeg")])
def test_placeholders_from_every_kind_of_source(request: pytest.FixtureRequest, fixture: str, fmt: str) -> None:
    source = request.getfixturevalue(fixture)
    webp, width = make_lqip(source, fmt, 24, 10)
    assert load(webp).width == width == 24
    assert load(webp).get_n_pages() == 1
    webp, width, hash_ = make_blurhash_placeholder(source, fmt, 24)
    assert load(webp).width == width == 24
    assert len(blurhash.components(hash_)) == 2


def test_blurhash_is_a_real_blurhash(photo_jpeg: bytes) -> None:
    webp, width, hash_ = make_blurhash_placeholder(photo_jpeg, "jpeg", 32)
    assert width == 32 and load(webp).get("vips-loader") == "webpload_buffer"
    assert blurhash.components(hash_) == (4, 3)            # landscape: 4 x 3 components
    assert len(hash_) == 4 + 2 * 4 * 3
    # Decoding it gives back the photo's colour layout: red grows left to right.
    pixels = blurhash.decode(hash_, 8, 6)
    assert pixels[3][7][0] > pixels[3][0][0] + 60


def test_blurhash_portrait_uses_3_by_4(photo_jpeg: bytes) -> None:
    portrait = pyvips.Image.new_from_buffer(photo_jpeg, "").rot90().jpegsave_buffer()
    assert blurhash.components(make_blurhash_placeholder(portrait, "jpeg", 16)[2]) == (3, 4)


@pytest.mark.parametrize("fmt", ["jpeg", "heic"])
def test_a_portrait_placeholder_is_size_pixels_wide_too(photo_jpeg: bytes, fmt: str) -> None:
    """`size` is the placeholder's width (its height follows the picture): a portrait photo's was made to fit a
    `size` x `size` square, half as wide as asked and with half the detail a client sized its box for."""
    portrait = pyvips.Image.new_from_buffer(photo_jpeg, "").rot90()
    if fmt == "heic":  # a quarter of the photo's size: x265 takes some 9 s of a core for the whole of it
        portrait = portrait.resize(0.25)
    source = portrait.jpegsave_buffer()
    if fmt == "heic":
        heif = pillow_heif.from_bytes(mode="RGB", size=(portrait.width, portrait.height),
                                      data=portrait.write_to_memory())
        out = io.BytesIO()
        heif.save(out, quality=80)
        source = out.getvalue()
    webp, width = make_lqip(source, fmt, 32, 30)
    assert load(webp).width == width == 32
    assert abs(load(webp).height - 32 * portrait.height / portrait.width) <= 1  # 2000 x 1333 turned: 48
    webp, width, hash_ = make_blurhash_placeholder(source, fmt, 32)
    assert load(webp).width == width == 32
    assert blurhash.components(hash_) == (3, 4)


def test_a_huge_svg_canvas_has_placeholders_as_it_has_transforms() -> None:
    """An SVG is drawn straight at the placeholder's size (as `/api/transform?w=` draws it): the size its canvas
    declares is no pixel a placeholder spends, and a 100000 x 50000 one was refused (422, 'too large') where a
    transform of it at any width was made."""
    svg = (b'<svg xmlns="http://www.w3.org/2000/svg" width="100000" height="50000">'
           b'<rect width="100000" height="50000" fill="red"/></svg>')
    webp, width = make_lqip(svg, "svg", 32, 30, max_pixels=1_000_000)
    assert (load(webp).width, load(webp).height) == (width, 16) == (32, 16)
    assert make_blurhash_placeholder(svg, "svg", 32, max_pixels=1_000_000)[1] == 32
    tall = svg.replace(b'height="50000"', b'height="100000000"')
    with pytest.raises(LegacyError) as caught:   # its placeholder itself over the bound: 32 x 16383 pixels
        make_lqip(tall, "svg", 32, 30, max_pixels=100_000)
    assert caught.value.status == 422


def test_an_svgs_filter_work_is_bounded_at_the_placeholders_size() -> None:
    """A placeholder is drawn `size` wide, and as tall as the picture then is: an SVG strip's filter effects over that
    many pixels are held to the same bound as a transform's (`max_svg_filter_pixels`)."""
    svg = (b'<svg xmlns="http://www.w3.org/2000/svg" width="10" height="5000"><filter id="f">'
           b'<feGaussianBlur stdDeviation="40"/></filter><rect width="10" height="5000" fill="red" '
           b'filter="url(#f)"/></svg>')
    with pytest.raises(LegacyError) as caught:   # 32 x 16000 pixels x 1 primitive
        make_lqip(svg, "svg", 32, 30, max_svg_filter_pixels=32 * 16000 - 1)
    assert caught.value.status == 422 and "filter effects (1 primitives)" in caught.value.error
    with pytest.raises(LegacyError):
        make_blurhash_placeholder(svg, "svg", 32, max_svg_filter_pixels=32 * 16000 - 1)
    assert make_lqip(svg, "svg", 32, 30, max_svg_filter_pixels=32 * 16000)[1] == 32


def test_placeholders_refuse_bombs(bomb_png: bytes) -> None:
    with pytest.raises(LegacyError) as caught:
        make_lqip(bomb_png, "png", 32, 30)
    assert caught.value.status == 422


def test_params_defaults() -> None:
    assert parse_placeholder_params({"url": URL}, with_blur=True) == PlaceholderParams("akande/v1/banners/hero.jpg", 32, 30)
    assert parse_placeholder_params({"url": URL, "blur": "999"}, with_blur=False) == PlaceholderParams(
        "akande/v1/banners/hero.jpg", 32, None)


def test_params_in_range() -> None:
    params = parse_placeholder_params({"url": URL, "size": "64", "blur": "250"}, with_blur=True)
    assert (params.size, params.blur) == (64, 250)
    assert parse_placeholder_params({"url": URL, "size": "8", "blur": "1"}, with_blur=True).blur == 1


def _api_error(query: dict[str, str], with_blur: bool = True) -> ApiError:
    with pytest.raises(ApiError) as caught:
        parse_placeholder_params(query, with_blur=with_blur)
    assert caught.value.status == 400
    return caught.value


@pytest.mark.parametrize(("query", "code"), [
    ({}, "MissingUrl"),
    ({"url": ""}, "MissingUrl"),
    ({"url": "https://evil.example/x.png"}, "AbsoluteUrlForbidden"),
    ({"url": "//evil.example/x.png"}, "AbsoluteUrlForbidden"),
    ({"url": "/akande/../x.png"}, "InvalidUrl"),
    ({"url": "akande/v1/a\x00.png"}, "InvalidUrl"),
    ({"url": "akande//v1/a.png"}, "InvalidUrl"),
    ({"url": "a" * 3000}, "UrlTooLong"),
])
def test_url_errors(query: dict[str, str], code: str) -> None:
    error = _api_error(query)
    assert (error.code, error.target) == (code, "url")


@pytest.mark.parametrize(("name", "value"), [("size", "7"), ("size", "65"), ("size", "abc"), ("size", "-8"),
                                             ("blur", "0"), ("blur", "251"), ("blur", "1.5")])
def test_size_and_blur_out_of_range(name: str, value: str) -> None:
    error = _api_error({"url": URL, name: value})
    assert (error.code, error.target) == ("InvalidParameter", name)
    assert f"Parameter '{name}' must be an integer" in error.message
