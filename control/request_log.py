"""The recent request log of the control plane: an in-memory ring buffer that live readers subscribe to.

Every request (the signed ``/_cluster`` traffic aside: edge heartbeats would drown the rest) becomes,
through ``control.recording``, one entry ``{id, timestamp, level, code, message, method, path, status, durationMs, requestId, ip}``.
The query string is never logged (it may carry ids or signatures). Level: ``error`` for 5xx,
``warn`` for 4xx, else ``info``. Subscribers get each new entry on their own bounded queue; a reader
too slow to keep up loses its oldest undelivered entries, never blocks a request.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import deque
from datetime import UTC, datetime
from typing import Any

CAPACITY = 5000
SUBSCRIBER_QUEUE = 1000
LEVELS = ("info", "warn", "error")

Entry = dict[str, Any]


def level_of(status: int) -> str:
    return "error" if status >= 500 else "warn" if status >= 400 else "info"


class RequestLog:
    def __init__(self, capacity: int = CAPACITY) -> None:
        self._entries: deque[Entry] = deque(maxlen=capacity)
        self._ids = itertools.count(1)
        self._subscribers: set[asyncio.Queue[Entry | None]] = set()

    def append(self, entry: Entry) -> Entry:
        entry = {"id": next(self._ids), **entry}
        self._entries.append(entry)
        for queue in self._subscribers:
            if queue.full():
                queue.get_nowait()
            queue.put_nowait(entry)
        return entry

    def page(self, *, limit: int, before: int | None = None, since: str | None = None,
             level: str | None = None) -> list[Entry]:
        """Newest first: at most ``limit`` entries older than id ``before``, newer than ``since`` (ISO)."""
        found: list[Entry] = []
        for entry in reversed(self._entries):
            if before is not None and entry["id"] >= before:
                continue
            if since is not None and entry["timestamp"] <= since:
                break
            if level is not None and entry["level"] != level:
                continue
            found.append(entry)
            if len(found) == limit:
                break
        return found

    def after(self, since: str) -> list[Entry]:
        """Entries newer than ``since`` (ISO), oldest first: the backlog of a stream that names one."""
        return [e for e in self._entries if e["timestamp"] > since]

    def subscribe(self) -> asyncio.Queue[Entry | None]:
        queue: asyncio.Queue[Entry | None] = asyncio.Queue(maxsize=SUBSCRIBER_QUEUE)
        self._subscribers.add(queue)
        return queue

    def unsubscribe(self, queue: asyncio.Queue[Entry | None]) -> None:
        self._subscribers.discard(queue)

    @property
    def subscribers(self) -> int:
        return len(self._subscribers)

    def close(self) -> None:
        """End every live stream (``None`` is the end-of-stream marker)."""
        for queue in self._subscribers:
            if queue.full():
                queue.get_nowait()
            queue.put_nowait(None)


def iso_now(now: float | None = None) -> str:
    moment = datetime.fromtimestamp(time.time() if now is None else now, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")
