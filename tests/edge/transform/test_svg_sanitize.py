"""shared.svg_sanitize: what an SVG keeps and loses before it is rasterised or served.

It lives here, beside the transform tests, because the edge's SVG sources are its first user.
"""

from __future__ import annotations

import pytest
import pyvips

from assetcdn.shared.svg_sanitize import MAX_FILTER_PRIMITIVES, filter_primitives, sanitize_svg

HOSTILE = b"""<?xml version="1.0"?>
<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink"
     width="120" height="80" onload="alert(1)">
  <script>alert('x')</script>
  <script xlink:href="https://evil.example/x.js"/>
  <style>@import url(https://evil.example/a.css); rect { fill: url(https://evil.example/p.svg#g); stroke: url(#grad); }</style>
  <defs><linearGradient id="grad"><stop offset="0" stop-color="red"/></linearGradient></defs>
  <rect id="r" width="120" height="80" fill="url(#grad)" onclick="steal()" style="background: url('http://evil.example/t.png')"/>
  <image href="https://evil.example/tracker.png" width="1" height="1"/>
  <image xlink:href="data:image/png;base64,iVBORw0KGgo=" width="1" height="1"/>
  <image href="data:image/svg+xml;base64,PHN2Zz48L3N2Zz4=" width="1" height="1"/>
  <use xlink:href="#r"/>
  <use href="other.svg#r"/>
  <a href="javascript:alert(1)"><text>link</text></a>
  <a href=" java&#10;script:alert(1)"><text>link2</text></a>
  <foreignObject width="10" height="10"><div xmlns="http://www.w3.org/1999/xhtml">hi</div></foreignObject>
  <set attributeName="href" to="javascript:alert(1)"/>
  <animate attributeName="fill" from="red" to="blue" dur="1s"/>
  <iframe src="https://evil.example"/>
</svg>"""


def test_hostile_content_is_removed() -> None:
    clean = sanitize_svg(HOSTILE).decode()
    lowered = clean.lower()
    assert "<script" not in lowered and ":script" not in lowered
    assert "alert" not in lowered and "steal" not in lowered
    assert "onload" not in lowered and "onclick" not in lowered
    assert "evil.example" not in lowered
    assert "@import" not in lowered
    assert "foreignobject" not in lowered and "iframe" not in lowered
    assert "other.svg" not in lowered
    assert "image/svg+xml" not in lowered
    assert "javascript" not in lowered


def test_safe_content_is_kept() -> None:
    clean = sanitize_svg(HOSTILE).decode()
    assert 'fill="url(#grad)"' in clean
    assert "url(#grad)" in clean.split("<style>")[1]
    assert "#r" in clean
    assert "data:image/png;base64" in clean
    assert 'attributeName="fill"' in clean
    assert 'width="120"' in clean


def test_clean_svg_still_renders() -> None:
    image = pyvips.Image.svgload_buffer(sanitize_svg(HOSTILE))
    assert (image.width, image.height) == (120, 80)


@pytest.mark.parametrize("data", [
    b"not xml at all",
    b"<html><body/></html>",
    b"<svg xmlns='http://www.w3.org/2000/svg'><rect></svg>",
    b"",
])
def test_non_svg_or_unparseable_is_refused(data: bytes) -> None:
    with pytest.raises(ValueError):
        sanitize_svg(data)


@pytest.mark.parametrize("data", [
    b'<?xml version="1.0"?><!DOCTYPE svg [<!ENTITY lol "lol">]><svg xmlns="http://www.w3.org/2000/svg">&lol;</svg>',
    b'<!DOCTYPE svg PUBLIC "-//W3C//DTD SVG 1.1//EN" "http://www.w3.org/Graphics/SVG/1.1/DTD/svg11.dtd"><svg/>',
    b'<!ENTITY xxe SYSTEM "file:///etc/passwd"><svg/>',
])
def test_doctype_and_entities_are_refused(data: bytes) -> None:
    with pytest.raises(ValueError, match="DOCTYPE or ENTITY"):
        sanitize_svg(data)


def test_css_escapes_cannot_hide_an_import() -> None:
    svg = (b'<svg xmlns="http://www.w3.org/2000/svg"><style>@\\69mport "https://evil.example/a.css";'
           b' rect { fill: u\\72l(https://evil.example/x) }</style></svg>')
    clean = sanitize_svg(svg).decode()
    assert "evil.example" not in clean


def test_default_namespace_is_kept_without_prefixes() -> None:
    clean = sanitize_svg(b'<svg xmlns="http://www.w3.org/2000/svg" width="4" height="4"><rect width="4" height="4"/></svg>')
    assert clean.decode().split("?>", 1)[1].lstrip().startswith("<svg ")
    assert "ns0:" not in clean.decode()


BLUR = '<feGaussianBlur stdDeviation="1"/>'


def _filtered(primitives: int, style: str = "") -> bytes:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"><filter id="f">{BLUR * primitives}'
            f'</filter><rect width="10" height="10" filter="url(#f)" style="{style}"/></svg>').encode()


def test_filter_primitives_are_counted_for_the_rasteriser() -> None:
    assert filter_primitives(sanitize_svg(_filtered(3))) == 3
    assert filter_primitives(sanitize_svg(_filtered(1, "filter: blur(4px)"))) == 2   # CSS filter functions too
    plain = b'<svg xmlns="http://www.w3.org/2000/svg" width="4" height="4"><rect width="4" height="4"/></svg>'
    assert filter_primitives(sanitize_svg(plain)) == 0


def test_a_document_with_too_many_filter_primitives_is_refused() -> None:
    sanitize_svg(_filtered(MAX_FILTER_PRIMITIVES))
    with pytest.raises(ValueError, match="filter primitives"):
        sanitize_svg(_filtered(MAX_FILTER_PRIMITIVES + 1))
