"""Format negotiation: every header combination the auto-format rules distinguish."""

from __future__ import annotations

import pytest

from assetcdn.edge.negotiate import (
    FORMAT_MIME,
    PATH_ROUTE_CHAIN,
    VARY_PATH_ROUTE,
    VARY_QUERY_ROUTE,
    accepts,
    animated_chain,
    best_transform_format,
    is_slow_network,
    parse_accept,
    path_route_chain,
    still_chain,
)

CHROME = "image/avif,image/webp,image/apng,image/svg+xml,image/*,*/*;q=0.8"
SAFARI = "image/webp,image/avif,image/jxl,image/heic,image/heic-sequence,video/*;q=0.8,image/png,image/svg+xml,image/*;q=0.8,*/*;q=0.5"
FIREFOX = "image/avif,image/webp,image/png,image/svg+xml,image/*;q=0.8,*/*;q=0.5"


def test_vary_constants() -> None:
    assert VARY_QUERY_ROUTE == "Accept, Save-Data, Sec-CH-Effective-Connection-Type"
    assert VARY_PATH_ROUTE == "Accept"
    assert PATH_ROUTE_CHAIN == ("avif", "webp", "png", "svg")


@pytest.mark.parametrize(("accept", "expected"), [
    ("", ["png", "svg"]),
    (None, ["png", "svg"]),
    ("*/*", ["webp", "png", "svg"]),
    ("image/*", ["webp", "png", "svg"]),
    ("image/webp", ["webp", "png", "svg"]),
    ("image/avif", ["avif", "png", "svg"]),
    ("image/jxl", ["jxl", "png", "svg"]),
    ("image/heic", ["heic", "png", "svg"]),
    ("image/heif", ["heif", "png", "svg"]),
    ("image/jxl,image/avif,image/heic,image/heif,image/webp", ["jxl", "avif", "heic", "heif", "webp", "png", "svg"]),
    ("text/html", ["png", "svg"]),
    (CHROME, ["avif", "webp", "png", "svg"]),
    (SAFARI, ["jxl", "avif", "heic", "webp", "png", "svg"]),
    (FIREFOX, ["avif", "webp", "png", "svg"]),
    ("IMAGE/AVIF, Image/WebP", ["avif", "webp", "png", "svg"]),
])
def test_still_chain_gated_by_accept(accept: str | None, expected: list[str]) -> None:
    assert still_chain(accept) == expected


def test_wildcards_do_not_opt_into_explicit_only_formats() -> None:
    assert "avif" not in still_chain("*/*")
    assert "jxl" not in still_chain("image/*")
    assert "heic" not in still_chain("image/*,*/*")


def test_q_zero_refuses_even_under_a_wildcard() -> None:
    assert still_chain("image/webp;q=0,*/*") == ["png", "svg"]
    assert still_chain("image/avif;q=0,image/webp") == ["webp", "png", "svg"]
    assert still_chain("image/*;q=0,*/*") == ["png", "svg"]
    assert still_chain("image/avif;q=0.1") == ["avif", "png", "svg"]


def test_malformed_accept_parts_are_skipped() -> None:
    assert parse_accept("garbage, image/webp;q=abc, ;;, image/avif;q=2")[0].type == "image/webp"
    assert still_chain("garbage, image/webp;q=abc") == ["webp", "png", "svg"]
    assert [r.q for r in parse_accept("image/avif;q=2,image/png;q=-1")] == [1.0, 0.0]


@pytest.mark.parametrize(("save_data", "ect", "slow"), [
    (None, None, False),
    ("on", None, True),
    ("On ", None, True),
    ("off", None, False),
    (None, "slow-2g", True),
    (None, "2g", True),
    (None, "3G", True),
    (None, "4g", False),
    ("off", "4g", False),
    ("on", "4g", True),
])
def test_slow_network(save_data: str | None, ect: str | None, slow: bool) -> None:
    assert is_slow_network(save_data, ect) is slow
    chain = still_chain(SAFARI, save_data, ect)
    if slow:
        assert chain == ["heic", "webp", "png", "svg"]
    else:
        assert chain == ["jxl", "avif", "heic", "webp", "png", "svg"]


@pytest.mark.parametrize(("accept", "expected"), [
    ("", ["gif"]),
    ("*/*", ["webp", "gif"]),
    ("image/avif", ["avifs", "gif"]),
    ("image/avif-sequence", ["avifs", "gif"]),
    ("image/apng", ["apng", "gif"]),
    ("image/*", ["webp", "gif"]),
    (CHROME, ["avifs", "webp", "apng", "gif"]),
    (FIREFOX, ["avifs", "webp", "gif"]),
    ("image/avif;q=0,image/avif-sequence", ["avifs", "gif"]),
])
def test_animated_chain(accept: str, expected: list[str]) -> None:
    assert animated_chain(accept) == expected


def test_animated_chain_drops_avifs_on_slow_networks() -> None:
    assert animated_chain(CHROME, "on", None) == ["webp", "apng", "gif"]
    assert animated_chain(CHROME, None, "2g") == ["webp", "apng", "gif"]


@pytest.mark.parametrize(("accept", "expected"), [
    ("", ["png", "svg"]),
    ("*/*", ["webp", "png", "svg"]),
    (CHROME, ["avif", "webp", "png", "svg"]),
    (SAFARI, ["avif", "webp", "png", "svg"]),
    ("image/jxl,image/heic", ["png", "svg"]),
])
def test_path_route_chain(accept: str, expected: list[str]) -> None:
    assert path_route_chain(accept) == expected


@pytest.mark.parametrize(("accept", "source", "slow", "expected"), [
    (CHROME, "jpeg", False, "avif"),
    (CHROME, "png", False, "avif"),
    (CHROME, "jpeg", True, "webp"),
    (CHROME, "gif", False, "webp"),
    (CHROME, "webp", False, "webp"),
    ("*/*", "jpeg", False, "webp"),
    ("", "jpeg", False, "jpeg"),
    ("", "jpg", False, "jpeg"),
    ("", "png", False, "png"),
    ("", "svg", False, "png"),
    ("", "gif", False, "gif"),
    ("text/html", "webp", False, "png"),
    ("image/avif", "gif", False, "gif"),
])
def test_best_transform_format(accept: str, source: str, slow: bool, expected: str) -> None:
    assert best_transform_format(accept, source, slow=slow) == expected


def test_accepts_and_mime_map() -> None:
    assert accepts("*/*", "image/webp")
    assert not accepts("*/*", "image/webp", wildcards=False)
    assert accepts("image/webp", "image/webp", wildcards=False)
    for fmt in ("jxl", "avif", "avifs", "heic", "heif", "webp", "png", "svg", "apng", "gif", "jpeg"):
        assert FORMAT_MIME[fmt].startswith("image/")
