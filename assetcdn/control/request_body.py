"""Bounded request bodies for control's handlers: the shared reader (size, coding and deadline
checks in assetcdn/shared/request_body.py) plus JSON parsing."""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

from assetcdn.shared.errors import bad_request
from assetcdn.shared.request_body import MB, read_body, size_text

__all__ = ["MB", "read_body", "read_json", "size_text"]


async def read_json(request: web.Request, limit: int = MB) -> Any:
    raw = await read_body(request, limit)
    if not raw.strip():
        raise bad_request("The request body is empty; send a JSON object.", code="InvalidJson")
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise bad_request("The request body contains invalid JSON and could not be parsed. "
                          "Verify the payload is well-formed JSON.", code="InvalidJson") from None
