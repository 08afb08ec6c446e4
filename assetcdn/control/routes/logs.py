"""Operations: GET /api/logs (AccountKey), the request log buffered in storage: the control plane's
requests and the deliveries every edge served (``control.records.request_log``; ``node`` and ``cache`` tell
them apart).

JSON page (the API reference's shape): ``{records[], count, cursor}``, newest first. Query: ``limit`` (1-500, default
100, clamped), ``since`` (ISO date-time: only newer entries), ``level`` (info|warn|error), ``cursor``
(the ``cursor`` of the previous page: older entries). ``cursor`` is null on the last page.

``stream=1`` (or the original service's ``tail=true``): Server-Sent Events. ``event: connected`` once,
then ``event: log`` with ``data: <entry>`` for each new entry as it arrives (after the backlog newer
than ``since``, when given: at most its newest 1000 entries), and a ``: heartbeat <iso>`` comment every 15 s. The stream stays open
until the client goes away or control shuts down.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from datetime import UTC, datetime

import orjson
from aiohttp import web

from assetcdn.control.analytics.params import parse_limit
from assetcdn.control.records.request_log import LEVELS, iso_now
from assetcdn.control.records.service import REQUEST_LOG
from assetcdn.shared.decimal_fields import bounded_decimal
from assetcdn.shared.errors import bad_request
from assetcdn.shared.middleware import json_response

LIMIT_DEFAULT, LIMIT_MAXIMUM = 100, 500
HEARTBEAT_S = 15.0
DISCONNECT_CHECK_S = 1.0
STREAM_VALUES = ("1", "true", "yes", "on")


def _since(request: web.Request) -> str | None:
    raw = request.query.get("since")
    if not raw:
        return None
    try:
        moment = datetime.fromisoformat(raw.replace("Z", "+00:00").replace(" ", "+"))
    except ValueError:
        raise bad_request("'since' must be an ISO 8601 date-time, e.g. 2026-04-01T12:00:00Z.",
                          target="since") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return iso_now(moment.timestamp())


def _level(request: web.Request) -> str | None:
    level = request.query.get("level") or None
    if level is not None and level not in LEVELS:
        raise bad_request(f"'level' must be one of {', '.join(LEVELS)}.", target="level")
    return level


def _wants_stream(request: web.Request) -> bool:
    return any(request.query.get(name, "").lower() in STREAM_VALUES for name in ("stream", "tail"))


async def logs(request: web.Request) -> web.StreamResponse:
    since, level = _since(request), _level(request)
    if _wants_stream(request):
        return await _stream(request, since, level)
    limit = parse_limit(request.query.get("limit"), default=LIMIT_DEFAULT, maximum=LIMIT_MAXIMUM)
    cursor = request.query.get("cursor")
    before = None
    if cursor:
        # isdigit() alone accepts "²", which int() refuses; an id is one of SQLite's integers (64 bits).
        if not (cursor.isascii() and cursor.isdigit()) or (before := bounded_decimal(cursor, 2**63)) == 2**63:
            raise bad_request("'cursor' must be the cursor of a previous page.", target="cursor")
    log = request.app[REQUEST_LOG]
    records = await log.page(limit=limit + 1, before=before, since=since, level=level)
    more = len(records) > limit
    records = records[:limit]
    return json_response({"records": records, "count": len(records),
                          "cursor": str(records[-1]["id"]) if more else None})


def _frame(event: str, entry: object) -> bytes:
    return b"event: " + event.encode() + b"\ndata: " + orjson.dumps(entry) + b"\n\n"


def _client_gone(request: web.Request) -> bool:
    transport = request.transport
    return transport is None or transport.is_closing()


async def _stream(request: web.Request, since: str | None, level: str | None) -> web.StreamResponse:
    log = request.app[REQUEST_LOG]
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache, no-store",
                                           "X-Accel-Buffering": "no"})
    if request.method == "HEAD":  # the stream's head alone: aiohttp sends what a streamed answer writes, HEAD or not
        await response.prepare(request)
        return response
    queue = log.subscribe()  # before anything is sent: no entry falls between 'connected' and the first read
    try:
        await response.prepare(request)
        await response.write(_frame("connected", {"timestamp": iso_now(), "heartbeatSeconds": HEARTBEAT_S,
                                                  "level": level}))
        backlog = await log.after(since, level) if since else []
        for entry in backlog:
            await response.write(_frame("log", entry))
        last_sent = backlog[-1]["id"] if backlog else 0
        quiet_since = time.monotonic()
        while True:
            try:
                # Entries arrive on the queue as they happen; the timeout only bounds how late a
                # vanished client or a due heartbeat is noticed.
                entry = await asyncio.wait_for(queue.get(), min(DISCONNECT_CHECK_S, HEARTBEAT_S))
            except TimeoutError:
                if _client_gone(request):
                    break
                if time.monotonic() - quiet_since >= HEARTBEAT_S:
                    await response.write(f": heartbeat {iso_now()}\n\n".encode())
                    quiet_since = time.monotonic()
                continue
            if entry is None:  # control is shutting down
                break
            if entry["id"] <= last_sent or (level is not None and entry["level"] != level):
                continue
            await response.write(_frame("log", entry))
            quiet_since = time.monotonic()
    except ConnectionResetError:
        return response  # the client went away mid-write: nobody is left to answer
    finally:
        log.unsubscribe(queue)
    with contextlib.suppress(ConnectionResetError):
        await response.write_eof()
    return response
