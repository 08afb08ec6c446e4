"""receive: route a delivery request to a CDN path and validate it (a clear error on bad input)."""

from __future__ import annotations

from urllib.parse import unquote

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


def checked_origin_path(raw: str) -> str:
    """A pull zone's path as its origin will be asked for it (percent-encoded, from `/`), refused when a dot
    segment (`..`, also encoded) could take it outside the zone's path prefix at the origin. Origins that decode
    before they resolve dot segments read `..%2f` and `..%5c` as one too (`\\` separates on some servers)."""
    for segment in raw.split("/"):
        decoded = unquote(segment)
        if (any(part in (".", "..") for part in decoded.replace("\\", "/").split("/"))
                or any(char in decoded for char in "\x00\r\n")):
            raise ApiError(400, "InvalidPath", "Invalid path: dot segments and control characters are not allowed.",
                           target="path")
    return raw
