"""Server-Sent Events frames of POST /api/chat: ``event: <name>\\ndata: <json>\\n\\n``."""

from __future__ import annotations

from typing import Any

import orjson

EVENTS = ("metadata", "token", "done", "error")
HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache, no-store", "Connection": "keep-alive",
           "X-Accel-Buffering": "no"}  # the last: proxies in front of us must not buffer the stream either


def frame(event: str, data: dict[str, Any]) -> bytes:
    assert event in EVENTS
    return b"event: " + event.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"
