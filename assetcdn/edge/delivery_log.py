"""Every delivery the edge answers is recorded (path, zone, status, bytes, cache status, country, and
for the request log method, request id and client address) and shipped to control in batches, so
statistics and insights count what the edges really served and GET /api/logs lists it. A batch names
the worker that served it (``node``)."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import deque
from typing import Any

from aiohttp import web

from assetcdn.edge.control_client import ControlClient, ControlUnavailable, NotFoundAtControl
from assetcdn.edge.edge_config import FORWARDED, NOT_DELIVERY
from assetcdn.shared.cluster import PREFIX
from assetcdn.shared.middleware import REQUEST_ID

log = logging.getLogger(__name__)
DELIVERED_PATH = web.RequestKey("delivered_path", str)  # the CDN path a delivery handler resolved
MAX_BUFFERED = 100_000
BATCH = 5_000
HIT_FIELDS = ("timestamp", "path", "zone", "status", "bytes", "cache", "country", "method", "requestId", "ip")


def country_code(header: str) -> str:
    """The analytics country of a request's country header: two letters, upper case, else "XX"."""
    text = header.strip().upper()
    return text if len(text) == 2 and text.isalpha() else "XX"


class DeliveryLog:
    def __init__(self, country_header: str, node: str = "") -> None:
        self.country_header = country_header
        self.node = node
        self.buffer: deque[tuple[Any, ...]] = deque(maxlen=MAX_BUFFERED)  # oldest dropped if control is away long
        # A batch keeps its id until control acknowledges it, so a retry after a lost reply is not counted twice.
        self._unacknowledged: tuple[str, list[dict[str, Any]]] | None = None

    def record(self, request: web.Request, response: web.StreamResponse) -> None:
        if request.get(FORWARDED) or request.path in NOT_DELIVERY or request.path.startswith(PREFIX):
            return
        path = request.get(DELIVERED_PATH) or request.path.lstrip("/")
        zone = path.split("/", 1)[0] if not path.startswith("api/") else ""
        country = country_code(request.headers.get(self.country_header) or "")
        sent = 0 if request.method == "HEAD" or response.status == 304 else (response.content_length or 0)
        # A tuple per hit on the hot path; the JSON shape is built when a batch is shipped.
        self.buffer.append((time.time(), path, zone, response.status, sent,
                            response.headers.get("X-Cache", "BYPASS"), country, request.method,
                            request.get(REQUEST_ID), request.remote))

    def take(self) -> list[dict[str, Any]]:
        buffer = self.buffer
        popleft = buffer.popleft
        # A dict display with HIT_FIELDS' names, in order: half the cost of dict(zip(...)) per entry,
        # which counts at tens of thousands of hits a second (benchmarks/README.md).
        return [{"timestamp": timestamp, "path": path, "zone": zone, "status": status, "bytes": sent,
                 "cache": cache, "country": country, "method": method, "requestId": request_id, "ip": ip}
                for timestamp, path, zone, status, sent, cache, country, method, request_id, ip
                in (popleft() for _ in range(min(len(buffer), BATCH)))]

    async def ship_forever(self, control: ControlClient, interval_s: float) -> None:
        while True:
            await asyncio.sleep(interval_s)
            await self.ship(control)

    async def ship(self, control: ControlClient) -> int:
        shipped = 0
        while True:
            if self._unacknowledged is None:
                batch = self.take()
                if not batch:
                    return shipped
                self._unacknowledged = (uuid.uuid4().hex, batch)
            batch_id, batch = self._unacknowledged
            try:
                await control.send("/analytics", {"batch": batch_id, "node": self.node, "hits": batch})
            except (ControlUnavailable, NotFoundAtControl):  # control down, or not yet able to take analytics
                return shipped  # the same batch, same id, on the next attempt
            self._unacknowledged = None
            shipped += len(batch)
