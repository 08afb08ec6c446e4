"""receive: route a delivery request to a CDN path and validate it (a clear error on bad input)."""

from __future__ import annotations

from aiohttp import web

from assetcdn.shared.errors import ApiError
from assetcdn.shared.paths import InvalidPath, parse_cdn_path


def receive(request: web.Request, raw_path: str | None = None) -> str:
    """The CDN path (no leading slash) a request names: `raw_path` after redirects, else its path."""
    raw = raw_path if raw_path is not None else request.match_info.get("path", "")
    try:
        return parse_cdn_path(raw)
    except InvalidPath as exc:
        raise ApiError(400, "InvalidPath", f"Invalid asset path: {exc}", target="path") from None
