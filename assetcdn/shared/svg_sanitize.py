"""Make an uploaded or fetched SVG safe to rasterise or serve.

Used by the edge before librsvg renders a source and by the control-plane pipeline before
it commits one. It removes what can run code or reach outside the document:
<script>, <foreignObject> and other embedding elements, on* event attributes, animations
that rewrite href or event attributes, hrefs that are not '#fragment' or an inline raster
`data:image/...` (an inline SVG data URI could carry script, so it goes too), and CSS that
imports or points at external url()s. DOCTYPE and ENTITY declarations are refused outright
(entity expansion and external entities are the classic XML attacks).

Filter effects are what makes an SVG expensive to draw: librsvg runs every primitive
(feGaussianBlur, feMorphology...) over every pixel of its region, so one blur of a large
canvas takes many seconds (benchmarks/transform_budget_bench.py). A document with more than MAX_FILTER_PRIMITIVES of them is refused;
`filter_primitives` counts them so a renderer can bound primitives x pixels before drawing (by
`transform.max_svg_filter_pixels`, MAX_FILTER_WORK by default: the edge's transforms per raster, the
pipeline over all the rasters of one ingest).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

SVG_NS = "http://www.w3.org/2000/svg"
XLINK_NS = "http://www.w3.org/1999/xlink"
MAX_SVG_BYTES = 10 * 1024 * 1024
MAX_FILTER_PRIMITIVES = 100
MAX_FILTER_WORK = 8_000_000    # filter primitives x rasterised pixels ([transform] max_svg_filter_pixels' default)

# Prefixes kept on output so a cleaned file still reads as the tools that wrote it intended.
_NAMESPACES = {
    "": SVG_NS, "xlink": XLINK_NS,
    "inkscape": "http://www.inkscape.org/namespaces/inkscape",
    "sodipodi": "http://sodipodi.sourceforge.net/DTD/sodipodi-0.dtd",
    "rdf": "http://www.w3.org/1999/02/22-rdf-syntax-ns#",
    "cc": "http://creativecommons.org/ns#", "dc": "http://purl.org/dc/elements/1.1/",
}
for _prefix, _uri in _NAMESPACES.items():
    ET.register_namespace(_prefix, _uri)

FORBIDDEN_ELEMENTS = frozenset({
    "script", "foreignobject", "iframe", "embed", "object", "audio", "video", "canvas",
    "handler", "listener", "base", "meta", "link",
})
ANIMATION_ELEMENTS = frozenset({"set", "animate", "animatemotion", "animatetransform", "discard"})
HREF_ATTRIBUTES = frozenset({"href", "src", "action", "formaction"})
SAFE_DATA_URI = re.compile(r"^data:image/(png|jpeg|jpg|gif|webp|avif);", re.IGNORECASE)
_DECLARATION = re.compile(rb"<!\s*(DOCTYPE|ENTITY)", re.IGNORECASE)
_CSS_URL = re.compile(r"url\(\s*(['\"]?)(.*?)\1\s*\)", re.IGNORECASE | re.DOTALL)
_CSS_IMPORT = re.compile(r"@import[^;]*;?", re.IGNORECASE)
_CSS_ESCAPE = re.compile(r"\\([0-9a-fA-F]{1,6})\s?|\\(.)", re.DOTALL)
# In a sanitised document (serialised by ElementTree): a filter primitive element, or a CSS
# filter function (`filter: blur(4px)`), each of which librsvg runs over the whole region.
_PRIMITIVE_ELEMENT = re.compile(rb"<(?:[\w.-]+:)?fe[A-Z]")
_CSS_FILTER_FUNCTION = re.compile(rb"filter\s*:\s*[a-z-]+\(", re.IGNORECASE)


def _local(name: str) -> str:
    """Tag or attribute name without its namespace, lower-cased."""
    return name.rsplit("}", 1)[-1].lower()


def _safe_reference(value: str) -> bool:
    ref = "".join(value.split())  # browsers ignore whitespace inside URLs ("java\nscript:")
    return ref.startswith("#") or bool(SAFE_DATA_URI.match(ref))


def _unescape(match: re.Match[str]) -> str:
    if match.group(1):
        code = int(match.group(1), 16)
        return chr(code) if 0 < code <= 0x10FFFF and not 0xD800 <= code <= 0xDFFF else "\ufffd"
    return match.group(2)


def _clean_css(css: str) -> str:
    """Drop @import and every url() that is not a fragment or an inline raster."""
    if "\\" in css:
        # CSS escapes can spell "url" or "@import" in ways the patterns below would not see:
        # decode them first, so what is checked is what a CSS engine would read.
        css = _CSS_ESCAPE.sub(_unescape, css)
    css = _CSS_IMPORT.sub("", css)
    return _CSS_URL.sub(lambda m: m.group(0) if _safe_reference(m.group(2)) else "none", css)


def _clean_element(element: ET.Element) -> None:
    for child in list(element):
        if not isinstance(child.tag, str):  # comments and processing instructions
            element.remove(child)
            continue
        tag = _local(child.tag)
        if tag in FORBIDDEN_ELEMENTS:
            element.remove(child)
            continue
        if tag in ANIMATION_ELEMENTS:
            target = child.get("attributeName", "").lower()
            if target.endswith("href") or target.startswith("on") or target in HREF_ATTRIBUTES:
                element.remove(child)
                continue
        _clean_element(child)
    for name in list(element.attrib):
        local = _local(name)
        value = element.attrib[name]
        if local.startswith("on"):
            del element.attrib[name]
        elif local in HREF_ATTRIBUTES and not _safe_reference(value):
            del element.attrib[name]
        elif local == "style" or "url(" in value.lower() or "\\" in value:
            element.attrib[name] = _clean_css(value)
    if _local(element.tag) == "style" and element.text:
        element.text = _clean_css(element.text)


# What libvips' SVG loader may take for an SVG: '<' after any run of whitespace (of any length: libvips 8.18 skips it
# all) and a BOM; or, as its older rule has it, plain text first with '<svg' in its first kilobyte (looked for
# further here). Matched, not stripped: no copy of a large source is made to look at its start.
SVG_START = re.compile(rb"[\xef\xbb\xbf \t\r\n]*<")
SVG_SNIFF_BYTES = 4096
UTF8_BOM = b"\xef\xbb\xbf"


def looks_like_svg(data: bytes) -> bool:
    """Whether the bytes are, or libvips could read them as, an SVG, which must then pass the sanitiser before
    librsvg sees them, whatever the whitespace or text before the document."""
    if SVG_START.match(data):
        return True
    text = data[len(UTF8_BOM):] if data.startswith(UTF8_BOM) else data
    return all(9 <= byte < 128 for byte in text[:24]) and b"<svg" in text[:SVG_SNIFF_BYTES].lower()


def sanitize_svg(data: bytes) -> bytes:
    """Return a cleaned copy of an SVG document; ValueError when it is not a safe-to-parse SVG."""
    if len(data) > MAX_SVG_BYTES:
        raise ValueError(f"The SVG is larger than {MAX_SVG_BYTES} bytes.")
    if _DECLARATION.search(data):
        raise ValueError("The SVG contains a DOCTYPE or ENTITY declaration, which is not allowed.")
    try:
        root = ET.fromstring(data)
    except ET.ParseError as exc:
        raise ValueError(f"The SVG is not well-formed XML: {exc}.") from exc
    if _local(root.tag) != "svg":
        raise ValueError("The document's root element is not <svg>.")
    primitives = sum(1 for element in root.iter() if isinstance(element.tag, str) and _local(element.tag).startswith("fe"))
    if primitives > MAX_FILTER_PRIMITIVES:
        raise ValueError(f"The SVG has {primitives} filter primitives; at most {MAX_FILTER_PRIMITIVES} are allowed "
                         "(each one is run over every pixel it covers).")
    _clean_element(root)
    cleaned: bytes = ET.tostring(root, encoding="utf-8", xml_declaration=True)
    return cleaned


def filter_primitives(clean: bytes) -> int:
    """How many filter operations a sanitised SVG asks for (elements plus CSS filter functions).

    A conservative count for budgeting the rasterisation: 0 means no filter effect at all.
    """
    return len(_PRIMITIVE_ELEMENT.findall(clean)) + len(_CSS_FILTER_FUNCTION.findall(clean))
