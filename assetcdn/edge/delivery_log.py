"""What the edge tells control about its deliveries: counts for analytics, a sample for the request log.

Every delivery the edge answers is counted here, per (hour, zone, path, country, status, cache
result) with its bytes, one dictionary update per hit. The bytes are those sent: a delivery is
recorded once its body was handed to the kernel, or with what was when the client went away first
(``aborted``); the connection decides when (assetcdn/edge/fastpath/protocol.py), or, on a connection the
application holds alone, the end of its answer (``record``). Each flush ships the counts rolled up into
what statistics and insights store (``rollups``: per zone and cache result, per path and status
class, per country), so control's work per flush grows with the distinct keys, not with the hits. The request
log gets a sample: per second, a uniform sample of at most ``log_deliveries_per_s`` deliveries, and
every error (4xx/5xx) up to ``log_errors_per_s`` (past that, a flood, errors are sampled too); each
entry carries the fraction of its second's deliveries it stands for (``sampleRate``), so counts can
be estimated from the log. While someone watches control's live tail, control says so in its reply
and the budget becomes ``log_tail_per_s``. Every delivery, unsampled, can also go to an access log
(``assetcdn.edge.access_log``).

A batch keeps its id until control acknowledges it, so a retry after a lost reply (or a control
restart) is counted once; what is served meanwhile is counted into the next batch.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from functools import partial
from random import random
from typing import Any

from aiohttp import web

from assetcdn.edge.access_log import AccessLog
from assetcdn.edge.control_client import ControlClient, ControlUnavailable, NotFoundAtControl
from assetcdn.edge.fastpath.protocol import HandoffTransport
from assetcdn.edge.site_config import FORWARDED, NOT_DELIVERY, request_host
from assetcdn.shared.cluster import PREFIX
from assetcdn.shared.metrics import REQUEST_STARTED
from assetcdn.shared.middleware import REQUEST_ID

log = logging.getLogger(__name__)
DELIVERED_PATH = web.RequestKey("delivered_path", str)  # the CDN path a delivery handler resolved
RECORDED = web.RequestKey("delivery_recorded", bool)    # a request is one delivery, however many answers it starts
BATCH_VERSION = 2
HOUR_S = 3600
MAX_KEYS = 100_000          # distinct counting keys held between flushes; past it, new paths are counted without path
MAX_BATCH_ROWS = 10_000     # rows per rollup in one batch (control's limit); more go in the next batch
MAX_LOG_HELD = 20_000       # sampled entries held while control is away (the oldest go first)
MAX_LOG_BUDGET = 10_000     # a per-second budget from the configuration is clamped to this
UNKNOWN_COUNTRY = "XX"
CACHE_RESULTS = frozenset({"HIT", "MISS", "STALE", "BYPASS"})
DELIVERED, NOT_DELIVERED = 200, 300  # the status classes of answers below 400 (status_class)

Key = tuple[int, str, str, str, int, str]   # hour, zone, path, country, status, cache result
LogEntry = tuple[float, str, str, int, str, "str | bytes | None", "str | None"]  # time, method, path, status, cache, id, ip
# `delivered`'s arguments for a delivery recorded once its bytes are out: time, host, method, path, zone,
# status, body bytes it has to send (-1: not known before its end), cache, country, request id, ip, duration.
Pending = tuple[float, str, str, str, str, int, int, str, str, "str | bytes | None", "str | None", float]


def country_code(header: str) -> str:
    """The analytics country of a request's country header: two letters, upper case, else "XX"."""
    text = header.strip().upper()
    return text if len(text) == 2 and text.isalpha() else UNKNOWN_COUNTRY


def zone_of(path: str) -> str:
    """The zone a delivery of ``path`` (no leading slash) is counted under, as control's zone_of_path:
    "api" for /api/transform and the like."""
    return path.split("/", 1)[0]


def body_sent(head_only: bool, status: int, length: int) -> int:
    """The body bytes a delivery of ``length`` bytes sends: none for HEAD and 304."""
    return 0 if head_only or status == 304 else length


class BodyCounter:
    """The body bytes an application answer wrote (its StreamWriter's ``on_body_write``) and, of them,
    how many its transport no longer held after the last write: those reached the kernel."""

    __slots__ = ("transport", "written", "handed")

    def __init__(self, transport: Any) -> None:
        self.transport = transport
        self.written = 0
        self.handed = 0

    def __call__(self, size: int, _output_size: int) -> None:
        self.written += size
        transport = self.transport
        if transport is not None:
            self.handed = max(self.handed, self.written - transport.get_write_buffer_size())


class Sample:
    """A uniform sample (reservoir) of at most ``budget`` entries per second. A second's entries are
    released when it is over, each with the fraction of that second's offers it stands for."""

    __slots__ = ("budget", "second", "seen", "kept", "closed")

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.second = 0
        self.seen = 0
        self.kept: list[LogEntry] = []
        self.closed: list[tuple[LogEntry, float]] = []

    def slot(self, second: int) -> int:
        """Where an entry offered now goes in this second's sample: an index (``len(kept)`` to add it),
        or -1 when it is not kept. The caller builds the entry only when it is."""
        if second != self.second:
            self.close()
            self.second = second
        self.seen = seen = self.seen + 1
        budget = self.budget
        if seen <= budget:
            return seen - 1
        chosen = int(random() * seen)
        return chosen if chosen < budget else -1

    def keep(self, slot: int, entry: LogEntry) -> None:
        kept = self.kept
        if slot < len(kept):
            kept[slot] = entry
        else:
            kept.append(entry)

    def close(self) -> None:
        """Release the current second's sample (at a new second, or before a final flush)."""
        kept = self.kept
        if kept:
            rate = len(kept) / self.seen
            closed = self.closed
            closed.extend((entry, rate) for entry in kept)
            if len(closed) > MAX_LOG_HELD:
                del closed[: len(closed) - MAX_LOG_HELD]
            self.kept = []
        self.seen = 0

    def take(self, now: float, limit: int) -> list[tuple[LogEntry, float]]:
        """Released entries, oldest first, at most ``limit``; a second that is over is released first."""
        if int(now) != self.second:
            self.close()
        taken, self.closed = self.closed[:limit], self.closed[limit:]
        return taken


def status_class(status: int) -> int:
    """What control keeps of a status: errors exactly (they are reported per status), the rest as
    200 (a delivery of the file: 2xx, 304) or 300 (not one: 1xx, the other 3xx)."""
    if status >= 400:
        return status
    return DELIVERED if 200 <= status < 300 or status == 304 else NOT_DELIVERED


def rollups(counts: dict[Key, list[int]]) -> tuple[list[list[Any]], list[list[Any]], list[list[Any]]]:
    """The counts as control stores them: per (hour, zone, cache) requests and bytes; per (hour, zone,
    path, status class) requests and bytes; per (hour, zone, country) requests."""
    zones: dict[tuple[int, str, str], list[Any]] = {}
    paths: dict[tuple[int, str, str, int], list[Any]] = {}
    countries: dict[tuple[int, str, str], list[Any]] = {}
    for (hour, zone, path, country, exact, cache), (requests, sent) in counts.items():
        start = hour * HOUR_S
        status = status_class(exact)
        row = zones.get((hour, zone, cache))
        if row is None:
            zones[(hour, zone, cache)] = [start, zone, cache, requests, sent]
        else:
            row[3] += requests
            row[4] += sent
        row = paths.get((hour, zone, path, status))
        if row is None:
            paths[(hour, zone, path, status)] = [start, zone, path, status, requests, sent]
        else:
            row[4] += requests
            row[5] += sent
        row = countries.get((hour, zone, country))
        if row is None:
            countries[(hour, zone, country)] = [start, zone, country, requests]
        else:
            row[3] += requests
    return list(zones.values()), list(paths.values()), list(countries.values())


def log_item(entry: LogEntry, rate: float) -> list[Any]:
    timestamp, method, path, status, cache, request_id, ip = entry
    if isinstance(request_id, bytes):
        request_id = request_id.decode("ascii", "replace")
    # Cut to the millisecond, never rounded: 44.9996 rounded would be 45.000, an entry of second 44's sample
    # shown in second 45 (which then lists more than its budget).
    return [int(timestamp * 1000) / 1000, method, path, status, cache, request_id, ip, rate]


class DeliveryLog:
    def __init__(self, country_header: str, node: str = "", *, log_per_s: int = 20, errors_per_s: int = 500,
                 tail_per_s: int = 200, access: AccessLog | None = None) -> None:
        self.country_header = country_header
        self.node = node
        self.counts: dict[Key, list[int]] = {}
        self.log_per_s = min(max(int(log_per_s), 0), MAX_LOG_BUDGET)
        self.tail_per_s = min(max(int(tail_per_s), self.log_per_s), MAX_LOG_BUDGET)
        self.deliveries = Sample(self.log_per_s)
        self.errors = Sample(min(max(int(errors_per_s), 0), MAX_LOG_BUDGET))
        self.access = access
        self._made: list[dict[str, Any]] = []          # batches made from the counts, not yet sent
        # The batch sent and not yet acknowledged: it keeps its id until control takes it.
        self._unacknowledged: dict[str, Any] | None = None
        self._shipping = asyncio.Lock()  # the timer's flush and the final one at shutdown take turns

    def delivered(self, now: float, host: str, method: str, path: str, zone: str, status: int, sent: int,
                  cache: str, country: str, request_id: str | bytes | None, ip: str | None,
                  duration_s: float, aborted: bool = False) -> None:
        """Count one delivery (and offer it to the request-log sample and the access log). ``path`` is
        the CDN path without its leading slash, ``sent`` the body bytes sent, ``aborted`` when the client
        went away before the whole body was."""
        counts = self.counts
        key = (int(now) // HOUR_S, zone, path, country, status, cache)
        counted = counts.get(key)
        if counted is not None:
            counted[0] += 1
            counted[1] += sent
        elif len(counts) < MAX_KEYS:
            counts[key] = [1, sent]
        else:  # a scan of distinct paths: zone, country, status and bytes stay exact
            key = (key[0], zone, "", country, status, cache)
            counted = counts.get(key)
            if counted is None:
                counts[key] = [1, sent]
            else:
                counted[0] += 1
                counted[1] += sent
        sample = self.errors if status >= 400 else self.deliveries
        slot = sample.slot(int(now))
        if slot >= 0:
            sample.keep(slot, (now, method, path, status, cache, request_id, ip))
        if self.access is not None:
            self.access.write(now, host, method, path, status, sent, cache, duration_s, ip, country, request_id,
                              aborted)

    def settle(self, pending: Pending, sent: int, aborted: bool) -> None:
        """Record a delivery once its bytes are known: ``sent`` body bytes reached the kernel; ``aborted``
        when the connection (or stream) ended first. Never more than the delivery had to send."""
        now, host, method, path, zone, status, size, cache, country, request_id, ip, duration_s = pending
        if 0 <= size < sent:
            sent = size
        self.delivered(now, host, method, path, zone, status, sent, cache, country, request_id, ip, duration_s,
                       aborted or sent < size)

    def record(self, request: web.Request, response: web.StreamResponse) -> None:
        """A delivery the application is answering, as its head goes out (the hit path records its own
        with the same derivations: `zone_of`, `body_sent`, `country_code`, assetcdn/edge/fastpath/hit_server.py).
        Its body bytes are counted as they are written, and the delivery recorded once they are out:
        by the hit path's connection when the request came through it (``HandoffTransport``), else when
        the application has finished the answer."""
        if request.get(FORWARDED) or request.path in NOT_DELIVERY or request.path.startswith(PREFIX) \
                or request.get(RECORDED):  # an error page for an answer cut short: the client never gets it
            return
        request[RECORDED] = True
        path = request.get(DELIVERED_PATH) or request.path.lstrip("/")
        length = response.content_length
        size = body_sent(request.method == "HEAD", response.status, length if length is not None else -1)
        started = request.get(REQUEST_STARTED)
        cache = response.headers.get("X-Cache", "BYPASS")
        pending: Pending = (
            time.time(), request_host(request), request.method, path, zone_of(path), response.status, size,
            cache if cache in CACHE_RESULTS else "BYPASS", country_code(request.headers.get(self.country_header) or ""),
            request.get(REQUEST_ID), request.remote, time.perf_counter() - started if started is not None else 0.0)
        transport = request.transport
        counter = BodyCounter(transport)
        request.writer.on_body_write = counter
        if isinstance(transport, HandoffTransport):
            transport.deliver(pending, counter)
            return
        task = asyncio.current_task()
        if task is None:
            self.settle(pending, 0, True)
        else:
            task.add_done_callback(partial(self._answered, pending, counter))

    def _answered(self, pending: Pending, counter: BodyCounter, _task: object) -> None:
        """The application finished an answer on a connection it holds alone: a body written whole counts
        whole (the transport holds at most its high-water mark of it); one cut short, what had left the
        transport by its last write."""
        size = pending[6]
        whole = counter.written if size < 0 else size
        self.settle(pending, counter.written if counter.written >= whole else counter.handed, False)

    def watched(self, watching: bool) -> None:
        """Control's live tail has a reader (or no longer has): the delivery sample's budget follows."""
        self.deliveries.budget = self.tail_per_s if watching else self.log_per_s

    def take(self, now: float | None = None) -> dict[str, Any] | None:
        """The next batch (``v`` 2) without its id: counts rolled up, and released log entries; None
        when there is nothing to send."""
        now = time.time() if now is None else now
        if not self._made:
            self._made = self._batches(now)
        return self._made.pop(0) if self._made else None

    def _batches(self, now: float) -> list[dict[str, Any]]:
        counts, self.counts = self.counts, {}
        zones, paths, countries = rollups(counts)
        entries = self.errors.take(now, MAX_BATCH_ROWS) + self.deliveries.take(now, MAX_BATCH_ROWS)
        entries.sort(key=lambda pair: pair[0][0])
        items = [log_item(entry, rate) for entry, rate in entries]
        batches = []
        for start in range(0, max(len(zones), len(paths), len(countries), len(items)), MAX_BATCH_ROWS):
            end = start + MAX_BATCH_ROWS
            batches.append({"v": BATCH_VERSION, "node": self.node, "zones": zones[start:end],
                            "paths": paths[start:end], "countries": countries[start:end], "log": items[start:end]})
        return batches

    async def ship_forever(self, control: ControlClient, interval_s: float) -> None:
        while True:
            await asyncio.sleep(interval_s)
            await self.ship(control)
            if self.access is not None:
                await self.access.flush()

    async def ship(self, control: ControlClient, *, final: bool = False) -> int:
        """Send what was counted, a batch at a time, until nothing is left or control is away.
        Returns the number of batches control took. ``final``: the current second's sample too."""
        if final:
            self.errors.close()
            self.deliveries.close()
        shipped = 0
        async with self._shipping:
            while True:
                if self._unacknowledged is None:
                    batch = self.take()
                    if batch is None:
                        return shipped
                    self._unacknowledged = {**batch, "batch": uuid.uuid4().hex}
                try:
                    reply = await control.send("/analytics", self._unacknowledged)
                except (ControlUnavailable, NotFoundAtControl):  # control down, or not yet able to take analytics
                    return shipped  # the same batch, same id, on the next attempt
                self._unacknowledged = None
                self.watched(bool(reply.get("tail")))
                shipped += 1
