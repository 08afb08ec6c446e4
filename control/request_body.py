"""Bounded request bodies: sizes are checked before buffering when Content-Length says so."""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

from shared.errors import bad_request, payload_too_large

MB = 1024 * 1024


def size_text(size: int) -> str:
    """Sizes in messages: MB for the usual limits, bytes when a small limit would round to '0 MB'."""
    return f"{size / MB:.1f} MB" if size >= MB else f"{size} bytes"


def _too_large(limit: int, size: int | None = None) -> Exception:
    shown = size_text(size) if size is not None else "The body"
    return payload_too_large(f"Payload too large: {shown} exceeds the {size_text(limit)} limit.", limit)


async def read_body(request: web.Request, limit: int) -> bytes:
    if request.content_length is not None and request.content_length > limit:
        raise _too_large(limit, request.content_length)
    chunks: list[bytes] = []
    total = 0
    async for chunk in request.content.iter_chunked(256 * 1024):
        total += len(chunk)
        if total > limit:
            raise _too_large(limit)
        chunks.append(chunk)
    return b"".join(chunks)


async def read_json(request: web.Request, limit: int = MB) -> Any:
    raw = await read_body(request, limit)
    if not raw.strip():
        raise bad_request("The request body is empty; send a JSON object.", code="InvalidJson")
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise bad_request("The request body contains invalid JSON and could not be parsed. "
                          "Verify the payload is well-formed JSON.", code="InvalidJson") from None
