"""Bounded request bodies for control's handlers: the shared reader (size, coding and deadline
checks in assetcdn/shared/request_body.py) with each route's own limit and envelope from the one table
the edge forwards by (`route_body`), plus JSON parsing."""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

from assetcdn.control.app_keys import SETTINGS
from assetcdn.shared import request_body
from assetcdn.shared.errors import bad_request
from assetcdn.shared.request_body import MB, RouteBody, in_route_envelope, route_body, size_text

__all__ = ["MB", "body_limit", "read_body", "read_json", "size_text"]


def body_limit(request: web.Request) -> RouteBody:
    return route_body(request.method, request.path, int(request.app[SETTINGS].get("control", "max_upload_bytes")))


async def read_body(request: web.Request) -> bytes:
    """The decoded body, refused (413, 415, 400) in the route's envelope past the route's limit."""
    body = body_limit(request)
    with in_route_envelope(body):
        return await request_body.read_body(request, body.limit)


async def read_json(request: web.Request) -> Any:
    raw = await read_body(request)
    if not raw.strip():
        raise bad_request("The request body is empty; send a JSON object.", code="InvalidJson")
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise bad_request("The request body contains invalid JSON and could not be parsed. "
                          "Verify the payload is well-formed JSON.", code="InvalidJson") from None
