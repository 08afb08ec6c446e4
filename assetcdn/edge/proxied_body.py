"""A forwarded request's body, received whole before control is asked.

Control sees a forwarded call only once its body is complete, so a client that sends slowly holds
one of this edge's connections, never one of the few to control (assetcdn/edge/proxy.py). Small bodies stay
in memory; larger ones wait in an unlinked temporary file. The body is decoded (gzip, deflate) and
bounded by its route's own limit (`route_body`, the table control reads its bodies by), in size and
time, on the way in (assetcdn/shared/request_body.py): aiohttp decodes in bounded steps as the body is
read, so decoding stops where the route's limit is passed. All the temporary files of one edge process
together hold at most `[edge] proxy_body_disk_mb`: past it a body is refused with 503 and Retry-After.
"""

from __future__ import annotations

import asyncio
import tempfile
from typing import BinaryIO

from aiohttp import web

from assetcdn.shared.errors import ApiError
from assetcdn.shared.metrics import Metrics
from assetcdn.shared.request_body import body_chunks, size_text

SPOOL_FULL_RETRY_S = 5


class ForwardSpool:
    """The bytes this process's forwarded bodies hold in temporary files, against a budget; `report_to` puts
    the bytes in use, the most held at once and the refusals on /metrics."""

    def __init__(self, budget_bytes: int) -> None:
        self.budget = budget_bytes
        self.used = 0
        self.peak = 0
        self.refused = 0  # bodies refused since the last report

    def take(self, size: int) -> None:
        if self.used + size > self.budget:
            self.refused += 1
            raise ApiError(503, "ServiceUnavailable", "This edge is receiving too many large request bodies at once "
                           f"(their {size_text(self.budget)} of temporary space is in use); retry shortly.",
                           headers={"Retry-After": str(SPOOL_FULL_RETRY_S)})
        self.used += size
        self.peak = max(self.peak, self.used)

    def report_to(self, metrics: Metrics) -> None:
        """Copy the counts into `metrics` on each of its flushes (every second, and as /metrics is answered)."""
        in_use = metrics.body_spool_bytes.labels(metrics.kind)
        peak = metrics.body_spool_peak_bytes.labels(metrics.kind)
        refusals = metrics.body_spool_refusals.labels(metrics.kind)
        metrics.body_spool_budget_bytes.labels(metrics.kind).set(self.budget)

        def collect() -> None:
            in_use.set(self.used)
            peak.set(self.peak)
            if self.refused:
                refusals.inc(self.refused)
                self.refused = 0

        collect()
        metrics.add_source(collect)

    def give_back(self, size: int) -> None:
        self.used = max(self.used - size, 0)


class ProxiedBody:
    def __init__(self, memory_limit: int, spool: ForwardSpool) -> None:
        self._memory_limit = memory_limit
        self._spool = spool
        self._chunks: list[bytes] = []
        self._file: BinaryIO | None = None
        self._spooled = 0  # bytes counted against the spool
        self.size = 0

    async def add(self, chunk: bytes) -> None:
        self.size += len(chunk)
        if self._file is None and self.size <= self._memory_limit:
            self._chunks.append(chunk)
            return
        pending, self._chunks = [*self._chunks, chunk], []
        growth = sum(map(len, pending))
        self._spool.take(growth)  # before the file grows: a refusal leaves nothing written
        self._spooled += growth
        if self._file is None:
            self._file = await asyncio.to_thread(tempfile.TemporaryFile)
        await asyncio.to_thread(self._file.writelines, pending)

    def payload(self) -> bytes | BinaryIO:
        """What aiohttp sends: the bytes, or the file from its start (read in a thread as it is sent)."""
        if self._file is None:
            return b"".join(self._chunks)
        self._file.flush()
        self._file.seek(0)
        return self._file

    def close(self) -> None:
        self._chunks = []
        if self._file is not None:
            self._file.close()
            self._file = None
        self._spool.give_back(self._spooled)
        self._spooled = 0


async def receive_body(request: web.Request, limit: int, memory_limit: int, spool: ForwardSpool) -> ProxiedBody:
    body = ProxiedBody(memory_limit, spool)
    try:
        async for chunk in body_chunks(request, limit):
            await body.add(chunk)
    except BaseException:
        body.close()
        raise
    return body
