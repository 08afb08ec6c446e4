"""receive: route a delivery request to a CDN path and validate it (a clear error on bad input)."""

from __future__ import annotations

from dataclasses import dataclass

from aiohttp import web

from shared.errors import ApiError
from shared.paths import InvalidPath, parse_cdn_path


@dataclass(frozen=True, slots=True)
class DeliveryRequest:
    path: str                 # CDN path, no leading slash
    head: bool
    if_none_match: str | None
    range: str | None


def receive(request: web.Request, raw_path: str | None = None) -> DeliveryRequest:
    raw = raw_path if raw_path is not None else request.match_info.get("path", "")
    try:
        path = parse_cdn_path(raw)
    except InvalidPath as exc:
        raise ApiError(400, "InvalidPath", f"Invalid asset path: {exc}", target="path") from None
    headers = request.headers
    return DeliveryRequest(path, request.method == "HEAD", headers.get("If-None-Match"), headers.get("Range"))
