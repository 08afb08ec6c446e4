"""Transform options: validation messages, url rules, normalisation and cache keys."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from assetcdn.edge.transform import options
from assetcdn.edge.transform.options import (
    KEY_ORDER,
    OPTIONS,
    AssetUrlError,
    TransformOptions,
    check_stored_source,
    parse_source_url,
    parse_transform_options,
    resolve_output_format,
)
from assetcdn.edge.transform.options.blur import BLUR
from assetcdn.edge.transform.options.format import FORMAT
from assetcdn.edge.transform.options.quality import QUALITY
from assetcdn.edge.transform.options.resize import RESIZE, Geometry
from assetcdn.edge.transform.options.sharpen import SHARPEN
from assetcdn.shared.errors import LegacyError

URL = "/akande/v1/logos/logo.svg"
# Each named option's values as its error message lists them ("Allowed values: ...").
FIT_NAMES = "cover, contain, fill, inside, outside"
FORMAT_NAMES = "webp, avif, png, jpeg, auto"
GRAVITY_NAMES = "center, north, south, east, west, northeast, northwest, southeast, southwest, face, auto"
ROTATIONS = "0, 90, 180, 270"


def _error(query: dict[str, str]) -> LegacyError:
    with pytest.raises(LegacyError) as caught:
        parse_transform_options(query)
    assert caught.value.status == 400
    return caught.value


def test_minimal_query_gets_defaults() -> None:
    opts = parse_transform_options({"url": URL})
    assert opts == TransformOptions(url="akande/v1/logos/logo.svg")
    assert opts.get(RESIZE) == Geometry(width=None, height=None, fit="cover", gravity="center")
    assert (opts.get(FORMAT), opts.get(QUALITY), opts.get(BLUR), opts.get(SHARPEN)) == (None, None, None, None)


def test_every_parameter_is_parsed() -> None:
    opts = parse_transform_options({"url": "stocks/images/a.jpg", "w": "400", "h": "300", "fit": "contain",
                                    "format": "AVIF", "q": "75", "blur": "12", "sharpen": "3", "gravity": "face"})
    assert opts.url == "stocks/images/a.jpg"
    assert opts.get(RESIZE) == Geometry(width=400, height=300, fit="contain", gravity="face")
    assert (opts.get(FORMAT), opts.get(QUALITY), opts.get(BLUR), opts.get(SHARPEN)) == ("avif", 75, 12, 3)


@pytest.mark.parametrize("fit", FIT_NAMES.split(", ") + ["INSIDE"])
def test_every_fit_of_the_published_api_is_accepted(fit: str) -> None:
    assert parse_transform_options({"url": URL, "fit": fit}).get(RESIZE).fit == fit.lower()


@pytest.mark.parametrize("gravity", GRAVITY_NAMES.split(", ") + ["NorthEast"])
def test_every_gravity_of_the_published_api_is_accepted(gravity: str) -> None:
    assert parse_transform_options({"url": URL, "gravity": gravity}).get(RESIZE).gravity == gravity.lower()


def test_inside_shares_contains_cache_entry_and_outside_does_not() -> None:
    base = {"url": URL, "w": "400", "h": "300"}
    inside = parse_transform_options({**base, "fit": "inside", "gravity": "north"}).cache_key("b", "png")
    assert inside == parse_transform_options({**base, "fit": "contain"}).cache_key("b", "png") == "tf1/b/w400-h300-contain.png"
    outside = parse_transform_options({**base, "fit": "outside", "gravity": "north"}).cache_key("b", "png")
    assert outside == "tf1/b/w400-h300-outside.png"
    north = parse_transform_options({**base, "gravity": "north"}).cache_key("b", "png")
    assert north == "tf1/b/w400-h300-cover-g-north.png"


def test_format_jpg_is_an_alias_of_jpeg() -> None:
    assert parse_transform_options({"url": URL, "format": "jpg"}).get(FORMAT) == "jpeg"


@pytest.mark.parametrize(("name", "low", "high"), [
    ("w", 1, 8192), ("h", 1, 8192), ("q", 1, 100), ("blur", 1, 250), ("sharpen", 1, 10),
])
@pytest.mark.parametrize("bad", ["0", "-1", "abc", "1.5", "", " ", "1e3", "0x10", "99999999", "+5", " 5", "5 ", "²"])
def test_integer_parameters_out_of_range_or_not_integers(name: str, low: int, high: int, bad: str) -> None:
    error = _error({"url": URL, name: bad})
    assert error.error == f"Invalid parameter '{name}': '{bad}'. Must be an integer from {low} to {high}."


@pytest.mark.parametrize(("name", "value"), [("w", "8193"), ("h", "8193"), ("q", "101"), ("blur", "251"), ("sharpen", "11")])
def test_integer_parameters_just_above_range(name: str, value: str) -> None:
    assert f"Invalid parameter '{name}'" in _error({"url": URL, name: value}).error


# How each integer parameter is read back from the parsed options.
INTEGER_VALUES: dict[str, Callable[[TransformOptions], int | None]] = {
    "w": lambda opts: opts.get(RESIZE).width, "h": lambda opts: opts.get(RESIZE).height,
    "q": lambda opts: opts.get(QUALITY), "blur": lambda opts: opts.get(BLUR), "sharpen": lambda opts: opts.get(SHARPEN),
}


@pytest.mark.parametrize(("name", "value"), [
    ("w", "8192"), ("w", "1"), ("h", "1"), ("h", "8192"), ("q", "100"), ("q", "1"), ("blur", "250"), ("blur", "1"),
    ("sharpen", "10"), ("sharpen", "1"),
])
def test_integer_parameters_at_the_edges_are_accepted(name: str, value: str) -> None:
    opts = parse_transform_options({"url": URL, name: value})
    assert INTEGER_VALUES[name](opts) == int(value)
    # Only that option moved off its default.
    assert [option.name for option in OPTIONS if opts.get(option) != option.default] == [
        "resize" if name in ("w", "h") else {"q": "quality"}.get(name, name)]


@pytest.mark.parametrize(("name", "value", "allowed"), [
    ("fit", "stretch", FIT_NAMES),
    ("fit", "", FIT_NAMES),
    ("format", "gif", FORMAT_NAMES),
    ("format", "jxl", FORMAT_NAMES),
    ("gravity", "top", GRAVITY_NAMES),
    ("gravity", "north-east", GRAVITY_NAMES),
])
def test_enum_parameters(name: str, value: str, allowed: str) -> None:
    error = _error({"url": URL, name: value})
    assert error.error == f"Invalid parameter '{name}': '{value}'. Allowed values: {allowed}."


@pytest.mark.parametrize(("name", "value", "allowed"), [
    ("fit", " cover", FIT_NAMES),
    ("fit", "contain ", FIT_NAMES),
    ("format", "\tpng", FORMAT_NAMES),
    ("format", " jpg", FORMAT_NAMES),
    ("gravity", "north\n", GRAVITY_NAMES),
    ("gravity", "\u00a0face", GRAVITY_NAMES),
    ("rotate", " 90", ROTATIONS),
    ("rotate", "90 ", ROTATIONS),
])
def test_text_parameters_with_surrounding_spaces_are_refused(name: str, value: str, allowed: str) -> None:
    # As a number's are (`w= 5`): `fit=%20cover` would be a variant URL of its own for `fit=cover`'s bytes.
    error = _error({"url": URL, name: value})
    assert error.error == f"Invalid parameter '{name}': '{value}'. Allowed values: {allowed}."


@pytest.mark.parametrize("query", [{}, {"url": ""}, {"url": "   "}, {"w": "10"}])
def test_missing_url(query: dict[str, str]) -> None:
    assert _error(query).error == "Missing required parameter: url"


@pytest.mark.parametrize("url", [
    "https://evil.example/a.png", "http://x/a.png", "//evil.example/a.png", "data:image/png;base64,AAAA",
    "javascript:alert(1)", "file:///etc/passwd", "HTTPS://x/y.png",
])
def test_absolute_urls_are_refused(url: str) -> None:
    assert "not an absolute URL" in _error({"url": url}).error


@pytest.mark.parametrize("url", [
    "/akande/../secret.png", "akande/v1/../../x.png", "akande/v1/a\x00.png", "akande\\v1\\a.png",
    "akande//v1/a.png", "akande/v1/%2e%2e/a.png", "akande/v1/a%2Fb.png", "akande/v1/a?b.png", "/", "a" * 3000,
])
def test_invalid_paths_are_refused(url: str) -> None:
    assert "Parameter 'url'" in _error({"url": url}).error


@pytest.mark.parametrize("url", ["/akande/v1/caf\u00e9.png", "akande/v1/a&b.png", "/clients/akande/v1/a.png"])
def test_a_name_only_a_pull_zones_image_may_bear_is_refused_for_a_stored_file(url: str) -> None:
    """Taken as a pull zone's path may be (any name of its origin's), and refused once it names no pull zone."""
    path = parse_transform_options({"url": url}).url
    with pytest.raises(AssetUrlError) as caught:
        check_stored_source(path)
    assert caught.value.kind == "invalid" and "Parameter 'url'" in caught.value.message


def test_url_is_normalised_without_leading_slash() -> None:
    assert parse_source_url("/akande/v1/logos/logo.svg") == "akande/v1/logos/logo.svg"
    assert parse_source_url("akande/v1/logos/logo.svg") == "akande/v1/logos/logo.svg"
    assert parse_source_url("stocks/images/x.jpg") == "stocks/images/x.jpg"


def test_cache_key_ignores_query_order_and_unknown_parameters() -> None:
    a = parse_transform_options({"url": URL, "w": "400", "q": "80", "format": "webp"})
    b = parse_transform_options({"format": "webp", "q": "80", "w": "0400", "utm": "x", "url": URL.lstrip("/")})
    assert a.cache_key("blob1", "webp") == b.cache_key("blob1", "webp") == "tf1/blob1/w400-q80.webp"


def test_cache_key_normalises_options_that_cannot_change_the_bytes() -> None:
    only_width = parse_transform_options({"url": URL, "w": "400", "fit": "fill", "gravity": "face"})
    assert only_width.cache_key("b", "png") == parse_transform_options({"url": URL, "w": "400"}).cache_key("b", "png")
    contain = parse_transform_options({"url": URL, "w": "4", "h": "3", "fit": "contain", "gravity": "face"})
    assert contain.cache_key("b", "png") == "tf1/b/w4-h3-contain.png"
    assert parse_transform_options({"url": URL, "q": "50"}).cache_key("b", "png") == "tf1/b/orig.png"


def test_cache_key_distinguishes_what_changes_the_output() -> None:
    base = {"url": URL, "w": "400", "h": "300"}
    keys = {
        parse_transform_options(base).cache_key("b", "webp"),
        parse_transform_options(base).cache_key("b", "avif"),
        parse_transform_options(base).cache_key("other", "webp"),
        parse_transform_options({**base, "gravity": "face"}).cache_key("b", "webp"),
        parse_transform_options({**base, "fit": "fill"}).cache_key("b", "webp"),
        parse_transform_options({**base, "q": "50"}).cache_key("b", "webp"),
        parse_transform_options({**base, "blur": "5"}).cache_key("b", "webp"),
        parse_transform_options({**base, "sharpen": "5"}).cache_key("b", "webp"),
        parse_transform_options({**base, "h": "301"}).cache_key("b", "webp"),
    }
    assert len(keys) == 9
    assert parse_transform_options(base).cache_key("b", "webp") == "tf1/b/w400-h300-cover-g-center.webp"


@pytest.mark.parametrize(("requested", "source", "accept", "expected"), [
    ("webp", "jpeg", "", "webp"),
    ("png", "svg", "image/avif", "png"),
    (None, "jpeg", "image/avif", "jpeg"),
    (None, "jpg", "", "jpeg"),
    (None, "svg", "image/avif", "png"),
    (None, "gif", "", "gif"),
    (None, "heic", "", "jpeg"),
    ("auto", "jpeg", "image/avif,image/webp", "avif"),
    ("auto", "png", "image/webp", "webp"),
    ("auto", "png", "", "png"),
    ("auto", "jpeg", "", "jpeg"),
])
def test_resolve_output_format(requested: str | None, source: str, accept: str, expected: str) -> None:
    assert resolve_output_format(requested, source, accept) == expected


def test_resolve_output_format_refuses_unknown_sources() -> None:
    with pytest.raises(LegacyError) as caught:
        resolve_output_format(None, "mp4", "")
    assert caught.value.status == 415


# Cache keys as the code before the option registry (one module per option) made them: a changed
# key would orphan every cached variant, so these must never change.
PINNED_CACHE_KEYS = [
    ({}, "webp", "tf1/b1/orig.webp"),
    ({"w": "400"}, "png", "tf1/b1/w400.png"),
    ({"h": "300"}, "gif", "tf1/b1/h300.gif"),
    ({"w": "400", "h": "300"}, "avif", "tf1/b1/w400-h300-cover-g-center.avif"),
    ({"w": "400", "h": "300", "fit": "inside", "gravity": "north"}, "jpeg", "tf1/b1/w400-h300-contain.jpeg"),
    ({"w": "400", "h": "300", "fit": "outside", "gravity": "face"}, "webp", "tf1/b1/w400-h300-outside.webp"),
    ({"w": "400", "h": "300", "gravity": "southeast", "q": "75"}, "webp", "tf1/b1/w400-h300-cover-g-southeast-q75.webp"),
    ({"w": "400", "h": "300", "gravity": "southeast", "q": "75"}, "png", "tf1/b1/w400-h300-cover-g-southeast.png"),
    ({"w": "0400", "q": "80", "format": "webp", "blur": "12", "sharpen": "3"}, "webp",
     "tf1/b1/w400-q80-blur12-sharpen3.webp"),
    ({"w": "0400", "q": "80", "format": "webp", "blur": "12", "sharpen": "3"}, "gif", "tf1/b1/w400-blur12-sharpen3.gif"),
    ({"h": "8192", "fit": "fill", "gravity": "auto", "blur": "250"}, "jpeg", "tf1/b1/h8192-blur250.jpeg"),
    ({"w": "640", "h": "480", "fit": "fill", "q": "100", "sharpen": "10"}, "avif",
     "tf1/b1/w640-h480-fill-q100-sharpen10.avif"),
    ({"q": "1", "format": "auto"}, "jpeg", "tf1/b1/q1.jpeg"),
    ({"q": "1", "format": "auto"}, "png", "tf1/b1/orig.png"),
    ({"w": "1", "h": "1", "fit": "cover", "gravity": "face", "q": "50", "blur": "1", "sharpen": "1"}, "webp",
     "tf1/b1/w1-h1-cover-g-face-q50-blur1-sharpen1.webp"),
    ({"rotate": "90"}, "png", "tf1/b1/rot90.png"),
    ({"trim": "10"}, "webp", "tf1/b1/trim10.webp"),
    ({"rotate": "0", "trim": "255"}, "gif", "tf1/b1/trim255.gif"),
    ({"rotate": "180", "w": "64", "q": "90"}, "png", "tf1/b1/rot180-w64.png"),
    ({"trim": "1", "h": "50", "sharpen": "7"}, "jpeg", "tf1/b1/trim1-h50-sharpen7.jpeg"),
    ({"rotate": "270", "trim": "40", "w": "300", "h": "200", "fit": "cover", "gravity": "face", "q": "60", "blur": "3",
      "sharpen": "2", "format": "avif"}, "avif", "tf1/b1/rot270-trim40-w300-h200-cover-g-face-q60-blur3-sharpen2.avif"),
]


@pytest.mark.parametrize(("query", "output_format", "key"), PINNED_CACHE_KEYS)
def test_cache_keys_of_existing_options_never_change(query: dict[str, str], output_format: str, key: str) -> None:
    assert parse_transform_options({"url": URL, **query}).cache_key("b1", output_format) == key


def test_reordering_the_steps_keeps_every_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """OPTIONS orders validation and the pipeline's steps; the key's parts have their own order, so moving
    a step (an option that must run before another) orphans no cached variant."""
    assert sorted(option.name for option in KEY_ORDER) == sorted(option.name for option in OPTIONS)
    monkeypatch.setattr(options, "OPTIONS", tuple(reversed(OPTIONS)))
    for query, output_format, key in PINNED_CACHE_KEYS:
        assert parse_transform_options({"url": URL, **query}).cache_key("b1", output_format) == key, query


def test_the_served_api_document_lists_every_option_parameter() -> None:
    document = json.loads((Path(__file__).parents[3] / "assetcdn" / "shared" / "openapi.json").read_text())
    expected = sorted(["url", *(param for option in OPTIONS for param in option.params)])
    for method, operation in document["paths"]["/api/transform"].items():
        if method == "options":
            continue  # a page's CORS preflight: no option is read
        assert sorted(p["name"] for p in operation["parameters"] if p["in"] == "query") == expected, method
