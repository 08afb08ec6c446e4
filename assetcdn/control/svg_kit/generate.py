"""POST /api/pipeline: validate the body, then turn one SVG into the files of a zone or a stock asset.

Body (API reference, POST /api/pipeline): ``mode`` (``client`` | ``stock``, required), ``name`` (zone, required for
client), ``svg`` (base64, required), ``generateIcons`` / ``generateBanners`` / ``generateFavicon``
(booleans, default true), ``stockName`` (stock file name, default ``asset``; ``name`` is used when
``stockName`` is absent, as the original service called ``name`` the "asset slug" in stock mode).

Files of mode ``client`` (zone N, prefix ``clients/N/v1/``):
  logos/N.svg (sanitised), logos/N.png, logos/N.webp, logos/N.avif (longer side 512 px);
  icons/icon-<s>x<s>.png for every PWA size, icons/{180x180,192x192,512x512}.svg;
  banners/N-banner.png (1500x500) and github/N-social.png (1280x640) on a backdrop of the logo's
  dominant colour; clients/N/favicon.svg; ``.gitkeep`` in each of the five category directories
  that would otherwise be empty (titles/ always).
Files of mode ``stock`` (asset S, prefix ``stocks/images/``):
  S.svg, S.png, S.webp, S.avif; icons/S/icon-<s>x<s>.png and icons/S/{180x180,...}.svg (one
  directory per asset, so two stock assets do not overwrite each other's icons); stocks/favicon.svg.
Filter effects are run over every pixel of every raster: an SVG whose filter primitives x the pixels of all the
rasters the request asks for pass ``max_filter_work`` (``transform.max_svg_filter_pixels``, the bound of one
transform on an edge) is refused as ``InvalidSvg`` before any rendering.
Rendering is CPU-bound and blocking: call ``generate_files`` through ``asyncio.to_thread`` (or
``await generate``).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import re
from dataclasses import dataclass
from typing import Any, Literal

import pyvips

from assetcdn.control.svg_kit import render
from assetcdn.shared.errors import ApiError
from assetcdn.shared.paths import RESERVED_ZONE_NAMES, ZONE_CATEGORIES
from assetcdn.shared.svg_sanitize import MAX_FILTER_WORK, filter_primitives, sanitize_svg

PipelineMode = Literal["client", "stock"]
CLIENT_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}[a-z0-9]\Z")  # \Z: "$" passes "name\n"
STOCK_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}\Z")
DEFAULT_STOCK_NAME = "asset"
MAX_SVG_BYTES = 1024 * 1024
ICON_SIZES = (16, 32, 48, 72, 96, 128, 144, 152, 180, 192, 384, 512)
SVG_ICON_SIZES = (180, 192, 512)
LOGO_SIZE = 512
BANNER_SIZE = (1500, 500)
SOCIAL_CARD_SIZE = (1280, 640)
FAVICON_SIZE = 32
FLAGS = (("generateIcons", "icons"), ("generateBanners", "banners"), ("generateFavicon", "favicon"))


@dataclass(frozen=True, slots=True)
class PipelineRequest:
    mode: PipelineMode
    name: str                 # the zone (client) or the stock file name (stock)
    svg: bytes                # sanitised
    icons: bool = True
    banners: bool = True
    favicon: bool = True

    @property
    def zone(self) -> str | None:
        return self.name if self.mode == "client" else None


def _invalid(code: str, message: str, target: str) -> ApiError:
    return ApiError(400, code, message, target=target)


def _decode_svg(value: Any) -> tuple[bytes, tuple[int, int]]:
    if value is None or value == "":
        raise _invalid("MissingSvg", "Missing required field: svg (the SVG, base64-encoded).", "svg")
    if not isinstance(value, str):
        raise _invalid("InvalidBase64", "'svg' must be a base64-encoded string.", "svg")
    text = value.strip()
    if text.startswith("data:"):
        header, _, text = text.partition(",")
        if not header.endswith(";base64"):
            raise _invalid("InvalidBase64", "A data URI in 'svg' must be base64-encoded (';base64,').", "svg")
    text = "".join(text.split())
    if len(text) > (MAX_SVG_BYTES + 2) // 3 * 4:
        raise _invalid("InvalidSvg", f"The SVG is larger than {MAX_SVG_BYTES} bytes.", "svg")
    try:
        data = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise _invalid("InvalidBase64", "'svg' is not valid base64.", "svg") from None
    if not data:
        raise _invalid("MissingSvg", "Missing required field: svg (the SVG, base64-encoded).", "svg")
    if len(data) > MAX_SVG_BYTES:
        raise _invalid("InvalidSvg", f"The SVG is larger than {MAX_SVG_BYTES} bytes.", "svg")
    if b"<svg" not in data:
        raise _invalid("InvalidSvg", "The decoded 'svg' does not contain an <svg> element.", "svg")
    try:
        clean = sanitize_svg(data)
    except ValueError as exc:
        raise _invalid("InvalidSvg", str(exc), "svg") from None
    try:
        size = render.natural_size(clean)
    except pyvips.Error:
        raise _invalid("InvalidSvg", "The SVG cannot be rendered (check its width, height and viewBox).",
                       "svg") from None
    return clean, size


def _fitted_pixels(natural: tuple[int, int], box: tuple[int, int]) -> int:
    """Pixels of the SVG rendered to fit inside `box` (as ``render.render_fit``)."""
    width, height = max(1, natural[0]), max(1, natural[1])
    scale = min(box[0] / width, box[1] / height)
    return max(1, round(width * scale)) * max(1, round(height * scale))


def rendered_pixels(mode: PipelineMode, natural: tuple[int, int], icons: bool, banners: bool) -> int:
    """The pixels ``generate_files`` rasterises the SVG to, over all its rasters."""
    boxes = [(LOGO_SIZE, LOGO_SIZE)]
    if icons:
        boxes += [(size, size) for size in ICON_SIZES]
    if banners and mode == "client":
        boxes += [(render.COLOUR_SAMPLE_SIZE, render.COLOUR_SAMPLE_SIZE)]
        boxes += [(max(1, int(width * render.BANNER_LOGO_WIDTH)), max(1, int(height * render.BANNER_LOGO_HEIGHT)))
                  for width, height in (BANNER_SIZE, SOCIAL_CARD_SIZE)]
    return sum(_fitted_pixels(natural, box) for box in boxes)


def parse_pipeline_request(body: Any, max_filter_work: int = MAX_FILTER_WORK) -> PipelineRequest:
    """Validate a POST /api/pipeline body; raises ``ApiError`` 400 with the field as ``target``.
    `max_filter_work`: ``transform.max_svg_filter_pixels`` (see the module doc)."""
    if not isinstance(body, dict):
        raise _invalid("InvalidBody", "The request body must be a JSON object.", "body")
    mode = body.get("mode")
    if mode not in ("client", "stock"):
        raise _invalid("InvalidMode", "'mode' is required and must be 'client' or 'stock'.", "mode")
    if mode == "client":
        name = body.get("name")
        if name is None or name == "":
            raise _invalid("MissingName", "Missing required field: name (the zone to create).", "name")
        if not isinstance(name, str) or not CLIENT_NAME.match(name):
            raise _invalid("InvalidName", "'name' must match ^[a-z0-9][a-z0-9-]{0,62}[a-z0-9]$ "
                           "(lower-case letters, digits and inner hyphens, 2 to 64 characters).", "name")
        if name in RESERVED_ZONE_NAMES:
            raise _invalid("InvalidName", f"Zone name '{name}' is reserved. Reserved names: "
                           f"{', '.join(sorted(RESERVED_ZONE_NAMES))}.", "name")
    else:
        field = "stockName" if body.get("stockName") not in (None, "") else "name"
        name = body.get(field) or DEFAULT_STOCK_NAME
        if not isinstance(name, str) or not STOCK_NAME.match(name):
            raise _invalid("InvalidName", f"'{field}' must match ^[a-z0-9][a-z0-9_-]{{0,63}}$ "
                           "(a file name without extension).", field)
    svg, natural = _decode_svg(body.get("svg"))
    flags: dict[str, bool] = {}
    for key, attribute in FLAGS:
        value = body.get(key, True)
        if not isinstance(value, bool):
            raise _invalid("InvalidBody", f"'{key}' must be true or false.", key)
        flags[attribute] = value
    primitives = filter_primitives(svg)
    if primitives:
        pixels = rendered_pixels(mode, natural, flags["icons"], flags["banners"])
        if primitives * pixels > max_filter_work:
            raise _invalid("InvalidSvg", f"The SVG's filter effects ({primitives} primitives) over the {pixels:,} "
                           f"pixels of its rasters exceed this CDN's limit of {max_filter_work:,} pixel operations. "
                           "Use fewer filters, or turn off generateIcons or generateBanners.", "svg")
    return PipelineRequest(mode=mode, name=name, svg=svg, **flags)


def _icon_files(svg: bytes, directory: str) -> dict[str, bytes]:
    files = {f"{directory}icon-{size}x{size}.png": render.png(render.render_square(svg, size))
             for size in ICON_SIZES}
    files.update({f"{directory}{size}x{size}.svg": render.square_svg(svg, size) for size in SVG_ICON_SIZES})
    return files


def _logo_files(svg: bytes, stem: str) -> dict[str, bytes]:
    logo = render.render_fit(svg, LOGO_SIZE, LOGO_SIZE)
    return {f"{stem}.svg": svg, f"{stem}.png": render.png(logo), f"{stem}.webp": render.webp(logo),
            f"{stem}.avif": render.avif(logo)}


def generate_files(request: PipelineRequest) -> dict[str, bytes]:
    """Every file of the ingest as ``{repository path: bytes}`` (blocking; see module doc)."""
    svg = request.svg
    if request.mode == "stock":
        files = _logo_files(svg, f"stocks/images/{request.name}")
        if request.icons:
            files.update(_icon_files(svg, f"stocks/images/icons/{request.name}/"))
        if request.favicon:
            files["stocks/favicon.svg"] = render.square_svg(svg, FAVICON_SIZE)
        return files

    zone = request.name
    prefix = f"clients/{zone}/v1/"
    files = _logo_files(svg, f"{prefix}logos/{zone}")
    if request.icons:
        files.update(_icon_files(svg, f"{prefix}icons/"))
    if request.banners:
        backdrop = render.background_for(render.dominant_colour(svg))
        files[f"{prefix}banners/{zone}-banner.png"] = render.png(render.render_card(svg, *BANNER_SIZE, backdrop))
        files[f"{prefix}github/{zone}-social.png"] = render.png(render.render_card(svg, *SOCIAL_CARD_SIZE, backdrop))
    if request.favicon:
        files[f"clients/{zone}/favicon.svg"] = render.square_svg(svg, FAVICON_SIZE)
    for category in ZONE_CATEGORIES:
        if not any(path.startswith(f"{prefix}{category}/") for path in files):
            files[f"{prefix}{category}/.gitkeep"] = b""
    return files


async def generate(request: PipelineRequest) -> dict[str, bytes]:
    """``generate_files`` off the event loop (libvips releases the GIL while it renders)."""
    return await asyncio.to_thread(generate_files, request)
