"""Pipeline: body validation (codes and targets) and the generated files, decoded with pyvips."""

from __future__ import annotations

import base64
from typing import Any

import pytest
import pyvips

from assetcdn.control.svg_kit.generate import (
    ICON_SIZES,
    MAX_SVG_BYTES,
    PipelineRequest,
    generate,
    generate_files,
    parse_pipeline_request,
)
from assetcdn.control.svg_kit.render import background_for, dominant_colour
from assetcdn.shared.errors import ApiError

# A wide logo: a blue field with a yellow disc, plus what the sanitiser must remove.
LOGO_SVG = (
    b'<svg xmlns="http://www.w3.org/2000/svg" width="200" height="100" viewBox="0 0 200 100" onload="alert(1)">'
    b'<rect width="200" height="100" fill="#336699"/><circle cx="100" cy="50" r="30" fill="#ffcc00"/>'
    b"<script>alert(2)</script></svg>"
)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def body(**fields: Any) -> dict[str, Any]:
    return {"mode": "client", "name": "newbrand", "svg": b64(LOGO_SVG), **fields}


def decode(data: bytes) -> pyvips.Image:
    return pyvips.Image.new_from_buffer(data, "")


def loader(image: pyvips.Image) -> str:
    return image.get("vips-loader")


class TestParse:
    def test_client_defaults(self) -> None:
        request = parse_pipeline_request(body())
        assert (request.mode, request.name, request.zone) == ("client", "newbrand", "newbrand")
        assert (request.icons, request.banners, request.favicon) == (True, True, True)
        assert b"<script" not in request.svg and b"onload" not in request.svg

    def test_stock_names(self) -> None:
        assert parse_pipeline_request({"mode": "stock", "svg": b64(LOGO_SVG)}).name == "asset"
        request = parse_pipeline_request({"mode": "stock", "stockName": "wave_2", "name": "x", "svg": b64(LOGO_SVG)})
        assert (request.name, request.zone) == ("wave_2", None)
        assert parse_pipeline_request({"mode": "stock", "name": "hill", "svg": b64(LOGO_SVG)}).name == "hill"

    def test_flags_and_data_uri(self) -> None:
        request = parse_pipeline_request(body(svg="data:image/svg+xml;base64," + b64(LOGO_SVG),
                                              generateIcons=False, generateBanners=False, generateFavicon=False))
        assert (request.icons, request.banners, request.favicon) == (False, False, False)

    @pytest.mark.parametrize(("payload", "code", "target"), [
        ([], "InvalidBody", "body"),
        ({"name": "a1", "svg": b64(LOGO_SVG)}, "InvalidMode", "mode"),
        (body(mode="zone"), "InvalidMode", "mode"),
        (body(name=None), "MissingName", "name"),
        (body(name=""), "MissingName", "name"),
        (body(name="Bad_Name"), "InvalidName", "name"),
        (body(name="a"), "InvalidName", "name"),
        (body(name="-ab"), "InvalidName", "name"),
        (body(name="ab-"), "InvalidName", "name"),
        (body(name="a" * 65), "InvalidName", "name"),
        (body(name=12), "InvalidName", "name"),
        (body(name="stocks"), "InvalidName", "name"),
        (body(name="api"), "InvalidName", "name"),
        ({"mode": "stock", "stockName": "../x", "svg": b64(LOGO_SVG)}, "InvalidName", "stockName"),
        ({"mode": "stock", "stockName": "a.svg", "svg": b64(LOGO_SVG)}, "InvalidName", "stockName"),
        (body(svg=None), "MissingSvg", "svg"),
        (body(svg=""), "MissingSvg", "svg"),
        (body(svg="not base64!"), "InvalidBase64", "svg"),
        (body(svg=["x"]), "InvalidBase64", "svg"),
        (body(svg=b64(b"<html>hello</html>")), "InvalidSvg", "svg"),
        (body(svg=b64(b"<svg xmlns='http://www.w3.org/2000/svg'><rect")), "InvalidSvg", "svg"),
        (body(svg=b64(b"<!DOCTYPE svg [<!ENTITY x 'y'>]><svg xmlns='http://www.w3.org/2000/svg'/>")),
         "InvalidSvg", "svg"),
        (body(svg=b64(b"<svg xmlns='http://www.w3.org/2000/svg' width='0' height='0'/>")), "InvalidSvg", "svg"),
        (body(svg=b64(LOGO_SVG[:-6] + b"<!--" + b"x" * MAX_SVG_BYTES + b"--></svg>")), "InvalidSvg", "svg"),
        (body(generateIcons="yes"), "InvalidBody", "generateIcons"),
        (body(generateFavicon=None), "InvalidBody", "generateFavicon"),
    ])
    def test_bad_bodies(self, payload: Any, code: str, target: str) -> None:
        with pytest.raises(ApiError) as caught:
            parse_pipeline_request(payload)
        assert (caught.value.status, caught.value.code, caught.value.target) == (400, code, target)
        assert caught.value.message


@pytest.fixture(scope="module")
def files() -> dict[str, bytes]:
    return generate_files(parse_pipeline_request(body()))


class TestClientFiles:
    def test_file_list(self, files: dict[str, bytes]) -> None:
        prefix = "clients/newbrand/v1/"
        expected = {f"{prefix}logos/newbrand.{ext}" for ext in ("svg", "png", "webp", "avif")}
        expected |= {f"{prefix}icons/icon-{s}x{s}.png" for s in ICON_SIZES}
        expected |= {f"{prefix}icons/{s}x{s}.svg" for s in (180, 192, 512)}
        expected |= {f"{prefix}banners/newbrand-banner.png", f"{prefix}github/newbrand-social.png",
                     "clients/newbrand/favicon.svg", f"{prefix}titles/.gitkeep"}
        assert set(files) == expected
        assert files[f"{prefix}titles/.gitkeep"] == b""

    def test_logo_rasters(self, files: dict[str, bytes]) -> None:
        for ext, expected_loader in (("png", "pngload_buffer"), ("webp", "webpload_buffer"),
                                     ("avif", "heifload_buffer")):
            image = decode(files[f"clients/newbrand/v1/logos/newbrand.{ext}"])
            assert loader(image) == expected_loader
            assert (image.width, image.height) == (512, 256)
        # The logo is opaque; WebP and AVIF encoders may drop an all-opaque alpha, PNG keeps it.
        assert decode(files["clients/newbrand/v1/logos/newbrand.png"]).hasalpha()

    def test_logo_svg_is_sanitised(self, files: dict[str, bytes]) -> None:
        svg = files["clients/newbrand/v1/logos/newbrand.svg"]
        assert b"<script" not in svg and b"onload" not in svg
        assert pyvips.Image.svgload_buffer(svg).width == 200

    def test_icons_are_square_pngs_centred(self, files: dict[str, bytes]) -> None:
        for size in ICON_SIZES:
            image = decode(files[f"clients/newbrand/v1/icons/icon-{size}x{size}.png"])
            assert loader(image) == "pngload_buffer"
            assert (image.width, image.height, image.bands) == (size, size, 4)
        big = decode(files["clients/newbrand/v1/icons/icon-512x512.png"])
        assert big(256, 10)[3] == 0          # transparent letterbox above the wide logo
        assert big(256, 256)[:3] == [255, 204, 0]   # the disc in the centre

    def test_svg_icons_and_favicon(self, files: dict[str, bytes]) -> None:
        for size in (180, 192, 512):
            svg = files[f"clients/newbrand/v1/icons/{size}x{size}.svg"]
            image = pyvips.Image.svgload_buffer(svg)
            assert (image.width, image.height) == (size, size)
            assert b"<script" not in svg
        favicon = pyvips.Image.svgload_buffer(files["clients/newbrand/favicon.svg"])
        assert (favicon.width, favicon.height) == (32, 32)

    def test_banner_and_social_card(self, files: dict[str, bytes]) -> None:
        backdrop = list(background_for((0x33, 0x66, 0x99)))
        for path, size in (("banners/newbrand-banner.png", (1500, 500)), ("github/newbrand-social.png", (1280, 640))):
            image = decode(files[f"clients/newbrand/v1/{path}"])
            assert loader(image) == "pngload_buffer"
            assert (image.width, image.height, image.bands) == (*size, 3)
            assert image(5, 5) == backdrop
            assert image(size[0] // 2, size[1] // 2) == [255, 204, 0]


def test_optional_parts_off_leave_gitkeeps() -> None:
    files = generate_files(parse_pipeline_request(body(generateIcons=False, generateBanners=False,
                                                       generateFavicon=False)))
    prefix = "clients/newbrand/v1/"
    assert set(files) == {f"{prefix}logos/newbrand.{ext}" for ext in ("svg", "png", "webp", "avif")} | {
        f"{prefix}{category}/.gitkeep" for category in ("banners", "github", "icons", "titles")}


async def test_stock_files() -> None:
    files = await generate(parse_pipeline_request({"mode": "stock", "stockName": "wave", "svg": b64(LOGO_SVG),
                                                   "generateBanners": True}))
    expected = {f"stocks/images/wave.{ext}" for ext in ("svg", "png", "webp", "avif")}
    expected |= {f"stocks/images/icons/wave/icon-{s}x{s}.png" for s in ICON_SIZES}
    expected |= {f"stocks/images/icons/wave/{s}x{s}.svg" for s in (180, 192, 512)}
    expected |= {"stocks/favicon.svg"}
    assert set(files) == expected
    assert loader(decode(files["stocks/images/wave.avif"])) == "heifload_buffer"
    assert decode(files["stocks/images/icons/wave/icon-16x16.png"]).width == 16


def test_svg_without_viewbox_and_tall_shape() -> None:
    svg = b'<svg xmlns="http://www.w3.org/2000/svg" width="50px" height="200"><rect width="50" height="200" fill="#000"/></svg>'
    request = PipelineRequest(mode="client", name="tall", svg=svg, banners=False)
    files = generate_files(request)
    logo = decode(files["clients/tall/v1/logos/tall.png"])
    assert (logo.width, logo.height) == (128, 512)
    icon = pyvips.Image.svgload_buffer(files["clients/tall/v1/icons/192x192.svg"])
    assert (icon.width, icon.height) == (192, 192)
    assert icon(96, 96)[:3] == [0, 0, 0] and icon(5, 96)[3] == 0


def test_dominant_colour_and_backdrop() -> None:
    assert dominant_colour(LOGO_SVG) == (0x33, 0x66, 0x99)
    dark = background_for((0x33, 0x66, 0x99))
    assert all(channel > 200 for channel in dark)          # light tint behind a dark logo
    assert all(channel < 60 for channel in background_for((250, 240, 200)))
    empty = b'<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"/>'
    assert dominant_colour(empty) == (128, 128, 128)
