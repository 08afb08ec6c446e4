"""Alt text from offline signals: an SVG's own words, Tesseract's reading, faces, file name, colours."""

from __future__ import annotations

from typing import Any

from aiohttp.test_utils import TestClient

from assetcdn.control.ai.alt_text import subject_words
from tests.support.control import ACCESS, MakeControl
from tests.support.photos import astronaut_jpeg, require_tesseract, text_banner, upload

LOGO_SVG = (b'<svg xmlns="http://www.w3.org/2000/svg" width="200" height="100"><title>Akande Studio</title>'
            b'<desc>A blue wave over the word akande</desc><rect width="200" height="100" fill="#1040c0"/>'
            b'<text x="20" y="60" fill="white">akande</text></svg>')
TEXT_SVG = (b'<svg xmlns="http://www.w3.org/2000/svg" width="300" height="100"><rect width="300" height="100" '
            b'fill="#ffffff"/><text x="10" y="50" fill="black">Grand <tspan>Opening</tspan></text></svg>')


async def alt_of(client: TestClient, path: str, data: bytes) -> dict[str, Any]:
    await upload(client, path, data)
    resp = await client.get("/api/ai/alt-text", params={"url": path}, headers=ACCESS)
    body = await resp.json()
    assert resp.status == 200, body
    assert 0 < len(body["alt"]) <= 160 and body["engine"] == "local" and body["source"] == "ai"
    return body


async def test_an_svg_title_and_description_are_the_alt_text(make_control: MakeControl) -> None:
    body = await alt_of(await make_control(), "akande/v1/logos/akande.svg", LOGO_SVG)
    assert body["alt"] == "Akande Studio: A blue wave over the word akande."
    assert body["signals"] == ["svg-title"]


async def test_svg_text_is_quoted(make_control: MakeControl) -> None:
    body = await alt_of(await make_control(), "akande/v1/banners/opening-day.svg", TEXT_SVG)
    assert body["alt"].startswith("Opening day banner") and "“Grand Opening”" in body["alt"]
    assert "svg-text" in body["signals"] and "file-name" in body["signals"]


async def test_text_in_a_raster_is_read_by_tesseract(make_control: MakeControl) -> None:
    require_tesseract()
    # Tesseract's bound and the analysis's made room for a loaded machine: what is under test is the text read,
    # not how fast (the default 5 s OCR bound passed once beside a second test run, and no text was read).
    control = await make_control(ASSETCDN_AI_VISION_OCR_TIMEOUT_S="60", ASSETCDN_AI_VISION_TIME_BUDGET_S="120")
    body = await alt_of(control, "akande/v1/banners/promo_banner@2x.png", text_banner("Summer Sale 2026"))
    assert "“Summer Sale 2026”" in body["alt"], body
    assert body["alt"].startswith("Promo banner")
    assert "ocr" in body["signals"] and "tesseract-" in body["model"]
    assert "red" in body["alt"]


async def test_people_and_colours_are_described(make_control: MakeControl) -> None:
    body = await alt_of(await make_control(), "akande/v1/photos/astronaut-portrait.jpg", astronaut_jpeg())
    assert body["alt"].startswith("Astronaut portrait, a square photo of one person"), body
    assert {"file-name", "faces", "colours"} <= set(body["signals"])


async def test_a_long_title_is_cut_to_160_characters(make_control: MakeControl) -> None:
    title = ("word " * 60).strip().encode()
    svg = b'<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"><title>' + title + b"</title></svg>"
    body = await alt_of(await make_control(), "akande/v1/icons/long.svg", svg)
    assert len(body["alt"]) <= 160 and body["alt"].endswith("…")


def test_file_names_give_their_subject_words() -> None:
    assert subject_words("akande/v1/photos/ferrari-488.jpg") == "ferrari 488"
    assert subject_words("akande/v1/photos/IMG_20240101_123456.jpg") == ""
    assert subject_words("akande/v1/logos/redSportsCar_v2@2x.png") == "red Sports Car"
    assert subject_words("stocks/images/hero_banner-1920x1080.webp") == "hero banner"


async def test_an_svg_behind_a_long_run_of_whitespace_is_sanitised_before_it_is_rendered(
        make_control: MakeControl) -> None:
    """libvips reads bytes as an SVG after any run of whitespace: such an asset is still sanitised before librsvg
    renders it (here, refused for its DOCTYPE), as one that starts with its document is."""
    client = await make_control()
    hostile = b" " * 600 + b'<!DOCTYPE svg [<!ENTITY c "#1040c0">]>' + LOGO_SVG.replace(b"#1040c0", b"&c;")
    await upload(client, "akande/v1/logos/padded.svg", hostile)
    resp = await client.get("/api/ai/alt-text", params={"url": "akande/v1/logos/padded.svg"}, headers=ACCESS)
    body = await resp.json()
    assert resp.status == 422, body
    assert "DOCTYPE or ENTITY declaration" in str(body), body
