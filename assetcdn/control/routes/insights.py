"""Statistics and insights: GET /api/core/statistics and GET /api/insights/* (standard envelope).

All read the daily counters the edges' analytics batches fill (``control.analytics.reports``).
``days`` (1-90, default 7) and ``limit`` (1-100, default 20) are clamped as the API reference
does; ``zone`` filters to one zone (``all`` or absent: every zone).
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from assetcdn.control.analytics.params import parse_days, parse_limit
from assetcdn.control.analytics.service import ANALYTICS
from assetcdn.shared.errors import ApiError, bad_request
from assetcdn.shared.middleware import json_response
from assetcdn.shared.paths import ZONE_NAME
from assetcdn.shared.timestamps import utc_now_iso

MAX_ASSET_PATH = 2048


def _zone(request: web.Request) -> str | None:
    zone = request.query.get("zone")
    if zone in (None, "", "all"):
        return None
    if not ZONE_NAME.fullmatch(zone):  # fullmatch: "$" would let a trailing newline through
        raise bad_request("'zone' must be a zone name (^[a-z0-9-]{2,64}$) or 'all'.", target="zone")
    return zone


def _days(request: web.Request) -> int:
    return parse_days(request.query.get("days"))


def _fetched(report: dict[str, Any]) -> web.Response:
    return json_response({**report, "DateFetched": utc_now_iso()})


async def statistics(request: web.Request) -> web.Response:
    return _fetched(await request.app[ANALYTICS].reports.statistics(_days(request), _zone(request)))


async def summary(request: web.Request) -> web.Response:
    return _fetched(await request.app[ANALYTICS].reports.insights_summary(_days(request), _zone(request)))


async def top_assets(request: web.Request) -> web.Response:
    limit = parse_limit(request.query.get("limit"))
    return _fetched(await request.app[ANALYTICS].reports.top_assets(_days(request), limit, _zone(request)))


async def geography(request: web.Request) -> web.Response:
    return _fetched(await request.app[ANALYTICS].reports.geography(_days(request), _zone(request)))


async def errors(request: web.Request) -> web.Response:
    return _fetched(await request.app[ANALYTICS].reports.errors(_days(request), _zone(request)))


async def asset(request: web.Request) -> web.Response:
    path = request.query.get("path", "").strip()
    if not path or path == "/":
        raise ApiError(400, "MissingPath", "Missing required query parameter: path (the asset path, "
                       "e.g. /akande/v1/logos/logo.svg).", target="path")
    if len(path) > MAX_ASSET_PATH:
        raise ApiError(400, "PathTooLong", f"'path' is longer than {MAX_ASSET_PATH} characters.", target="path")
    if "\x00" in path or ".." in path.split("/"):
        raise ApiError(400, "InvalidPath", "'path' may not contain NUL bytes or '..' segments.", target="path")
    return _fetched(await request.app[ANALYTICS].reports.asset_report(path.split("?", 1)[0], _days(request)))
