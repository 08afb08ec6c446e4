"""What the edge tells control about its deliveries: counts for analytics, a sample for the request log.

Every delivery the edge answers is counted here, per (hour, zone, path, country, status, cache
result) with its bytes, one dictionary update per hit. The bytes are those sent: a delivery is
recorded once its body was handed to the kernel, or with what was when the client went away first
(``aborted``); the connection decides when (assetcdn/edge/fastpath/protocol.py), or, on a connection the
application holds alone, the end of its answer (``record``). Each flush ships the counts rolled up into
what statistics and insights store (``rollups``: per zone and cache result, per path and status
class, per country), so control's work per flush grows with the distinct keys, not with the hits.
Rows name only zones this edge's manifest holds (the rest go to one bucket, ``UNKNOWN_ZONE``) and, per
zone and hour, at most ``paths_per_hour`` paths at a time (``PathBudget``); every other path's counts
go in one "other" row per status (path ``None``), so a scan of distinct paths ships a bounded number
of rows while every total stays exact. The request log gets a sample: per second, a uniform sample of
at most ``log_deliveries_per_s`` deliveries, and every error (4xx/5xx) up to ``log_errors_per_s``
(past that, a flood, errors are sampled too); each entry carries the fraction of its second's deliveries it stands for (``sampleRate``), so counts can
be estimated from the log. While someone watches control's live tail, control says so in its reply
and the budget becomes ``log_tail_per_s``. Every delivery, unsampled, can also go to an access log
(``assetcdn.edge.access_log``).

A batch keeps its id until control acknowledges it, so a retry after a lost reply (or a control
restart) is counted once; what is served meanwhile is counted into the next batch.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
import uuid
from collections.abc import Callable, Container
from functools import partial
from heapq import heapify, heapreplace, nlargest
from random import random
from typing import Any

from aiohttp import web

from assetcdn.edge.access_log import AccessLog
from assetcdn.edge.control_client import ControlClient, ControlUnavailable, NotFoundAtControl
from assetcdn.edge.fastpath.protocol import HandoffTransport
from assetcdn.edge.site_config import FORWARDED, request_host
from assetcdn.shared.analytics_keys import MAX_PATH_LENGTH, UNKNOWN_COUNTRY, zone_of
from assetcdn.shared.cache_results import COUNTED_AS, CacheResult
from assetcdn.shared.deliveries import is_delivery
from assetcdn.shared.metrics import REQUEST_STARTED
from assetcdn.shared.middleware import REQUEST_ID

log = logging.getLogger(__name__)
DELIVERED_PATH = web.RequestKey("delivered_path", str)  # the CDN path a delivery handler resolved
RECORDED = web.RequestKey("delivery_recorded", bool)    # a request is one delivery, however many answers it starts
BATCH_VERSION = 2
HOUR_S = 3600
MAX_KEYS = 100_000          # distinct counting keys held between flushes; past it, new paths are counted as "other"
MAX_BATCH_ROWS = 10_000     # rows per rollup in one batch (control's limit); more go in the next batch
MAX_LOG_HELD = 20_000       # sampled entries held while control is away (the oldest go first)
MAX_LOG_BUDGET = 10_000     # a per-second budget from the configuration is clamped to this
NEVER = 2 ** 62             # Sample: an offer number no second reaches
UNKNOWN_ZONE = ""           # the bucket of deliveries outside every zone: no zone is named ""
API_ZONE = "api"            # /api/transform, /api/stream: what zone_of names them, known to every edge
PATHS_PER_HOUR = 500        # paths named per zone and hour at a time ([analytics] paths_per_zone_hour)
CACHE_RESULTS = frozenset(result.value for result in CacheResult)
DELIVERED, NOT_DELIVERED = 200, 300  # the status classes of answers below 400 (status_class)

Key = tuple[int, str, str | None, str, int, str]   # hour, zone, path (None: "other"), country, status, cache result
LogEntry = tuple[float, str, str, int, str, "str | bytes | None", "str | None"]  # time, method, path, status, cache, id, ip
# `delivered`'s arguments for a delivery recorded once its bytes are out: time, host, method, path, zone,
# status, body bytes it has to send (-1: not known before its end), cache, country, request id, ip, duration.
Pending = tuple[float, str, str, str, str, int, int, str, str, "str | bytes | None", "str | None", float]


def country_code(header: str) -> str:
    """The analytics country of a request's country header: two ASCII letters, upper case, else "XX" (as control
    takes them). Any other letters would be countries without end, which the counts past MAX_KEYS still keep apart;
    and they are judged before upper-casing, which makes two letters of some single ones (`ß` is `SS`)."""
    text = header.strip()
    return text.upper() if len(text) == 2 and text.isascii() and text.isalpha() else UNKNOWN_COUNTRY


def body_sent(head_only: bool, status: int, length: int) -> int:
    """The body bytes a delivery of ``length`` bytes sends: none for HEAD and 304."""
    return 0 if head_only or status == 304 else length


class BodyCounter:
    """The body bytes an application answer wrote (its StreamWriter's ``on_body_write``) and, of them,
    how many its transport no longer held after the last write: those reached the kernel. `beneath`: under
    TLS, the socket's transport beneath it, which holds the sealed records the kernel did not take
    (assetcdn/edge/fastpath/sendfile.py ``Drain.held``)."""

    __slots__ = ("transport", "beneath", "written", "handed")

    def __init__(self, transport: Any, beneath: Any = None) -> None:
        self.transport = transport
        self.beneath = beneath
        self.written = 0
        self.handed = 0

    def __call__(self, size: int, _output_size: int) -> None:
        self.written += size
        transport = self.transport
        if transport is not None:
            held = transport.get_write_buffer_size()
            beneath = self.beneath
            if beneath is not None:
                held += beneath.get_write_buffer_size()
            self.handed = max(self.handed, self.written - held)


class Sample:
    """A uniform sample (reservoir) of at most ``budget`` entries per second. A second's entries are
    released when it is over, each with the fraction of that second's offers it stands for. Once the
    budget is full, the number of offers to pass over before the next one kept is drawn in advance
    (Li's "Algorithm L", the same uniform sample as drawing per offer): an offer passed over costs a
    count and a comparison, no random number."""

    __slots__ = ("budget", "second", "seen", "kept", "closed", "_next", "_weight")

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.second = 0
        self.seen = 0
        self.kept: list[LogEntry] = []
        self.closed: list[tuple[LogEntry, float]] = []
        self._next = budget     # the offer of the second (counted from 1) that is drawn next
        self._weight = 1.0      # Algorithm L's W

    def set_budget(self, budget: int) -> None:
        """A new budget, from the next offer on."""
        self.budget = budget
        self._next = min(self._next, max(budget, self.seen + 1))

    def slot(self, second: int) -> int:
        """Where an entry offered now goes in this second's sample: an index (``len(kept)`` to add it),
        or -1 when it is not kept. The caller builds the entry only when it is."""
        if second != self.second:
            self.close()
            self.second = second
        self.seen = seen = self.seen + 1
        if seen < self._next:
            return seen - 1 if seen <= self.budget else -1
        return self._draw(seen)

    def _draw(self, seen: int) -> int:
        """The offer ``seen`` fills the budget's last place or is the one drawn: its index; and the
        next offer drawn."""
        budget = self.budget
        if budget <= 0:
            self._next = NEVER
            return -1
        if seen < budget:  # a budget raised within the second: its places fill first
            self._next = budget
            return seen - 1
        if seen == budget:
            chosen, weight = seen - 1, 1.0
        else:
            chosen, weight = int(random() * budget), self._weight
        weight *= math.exp(math.log(1.0 - random()) / budget)
        self._weight = weight
        if weight >= 1.0:
            gap = 0.0
        elif weight > 0.0:
            gap = math.log(1.0 - random()) / math.log1p(-weight)  # offers passed over before the next drawn
        else:
            gap = NEVER
        self._next = seen + 1 + (int(gap) if gap < NEVER else NEVER)
        return chosen

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
        self._next = self.budget
        self._weight = 1.0

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


class PathBudget:
    """Which paths of one zone and hour ship under their own name: the heaviest, at most ``capacity``
    at a time, by their requests in the hour so far (a Space-Saving summary fed once per flush with
    each path's requests in it). A path not held takes the place of the least-counted one only when it
    has more requests in one flush than that one in the whole hour, at most ``capacity`` times an
    hour; so an hour names at most twice ``capacity`` paths however many are requested."""

    __slots__ = ("capacity", "counts", "replacements")

    def __init__(self, capacity: int) -> None:
        self.capacity = max(int(capacity), 0)
        self.counts: dict[str, int] = {}        # path -> requests in the hour since it was taken in
        self.replacements = self.capacity

    def named(self, weights: dict[str, int]) -> set[str]:
        """The paths of ``weights`` (path -> requests in this flush) that ship under their name."""
        counts = self.counts
        named = set()
        newcomers = []
        for path, requests in weights.items():
            if path in counts:
                counts[path] += requests
                named.add(path)
            else:
                newcomers.append((requests, path))
        room = self.capacity - len(counts)
        if not newcomers or room + self.replacements <= 0:
            return named
        least: list[tuple[int, str]] | None = None
        for requests, path in nlargest(room + self.replacements, newcomers):
            if room > 0:
                room -= 1
            else:
                if least is None:
                    least = [(count, held) for held, count in counts.items()]
                    heapify(least)
                # Newcomers come heaviest first and the least count only grows: none after this one wins.
                if requests <= least[0][0]:
                    break
                del counts[heapreplace(least, (requests, path))[1]]
                self.replacements -= 1
            counts[path] = requests
            named.add(path)
        return named


def rollups(counts: dict[Key, list[int]], zones: Container[str] | None = None,
            budget: Callable[[int, str], PathBudget] | None = None,
            ) -> tuple[list[list[Any]], list[list[Any]], list[list[Any]]]:
    """The counts as control stores them: per (hour, zone, cache) requests and bytes; per (hour, zone,
    path, status class) requests and bytes; per (hour, zone, country) requests. With ``zones``, a
    zone not in it (nor ``API_ZONE``) is ``UNKNOWN_ZONE``, whose paths are all "other" (``None``); with
    ``budget``, the paths of a zone and hour it does not name are "other" too, and with either, a path longer
    than control names (``MAX_PATH_LENGTH``)."""
    zone_rows: dict[tuple[int, str, str], list[Any]] = {}
    path_rows: dict[tuple[int, str, str | None, int], list[Any]] = {}
    countries: dict[tuple[int, str, str], list[Any]] = {}
    known: dict[str, str] = {}
    for (hour, zone, path, country, exact, cache), (requests, sent) in counts.items():
        if zones is not None:
            counted = known.get(zone)
            if counted is None:
                counted = known[zone] = zone if zone in zones or zone == API_ZONE else UNKNOWN_ZONE
            zone = counted
        start = hour * HOUR_S
        status = status_class(exact)
        row = zone_rows.get((hour, zone, cache))
        if row is None:
            zone_rows[(hour, zone, cache)] = [start, zone, cache, requests, sent]
        else:
            row[3] += requests
            row[4] += sent
        row = path_rows.get((hour, zone, path, status))
        if row is None:
            path_rows[(hour, zone, path, status)] = [start, zone, path, status, requests, sent]
        else:
            row[4] += requests
            row[5] += sent
        row = countries.get((hour, zone, country))
        if row is None:
            countries[(hour, zone, country)] = [start, zone, country, requests]
        else:
            row[3] += requests
    if zones is None and budget is None:
        return list(zone_rows.values()), list(path_rows.values()), list(countries.values())
    return list(zone_rows.values()), _fold_paths(path_rows, budget), list(countries.values())


def _fold_paths(rows: dict[tuple[int, str, str | None, int], list[Any]],
                budget: Callable[[int, str], PathBudget] | None) -> list[list[Any]]:
    """The path rows with those of ``UNKNOWN_ZONE``, those longer than control names and those a budget does
    not name, folded into one row per (hour, zone, status) whose path is None: "other"."""
    named: dict[tuple[int, str], set[str]] = {}
    if budget is not None:
        weights: dict[tuple[int, str], dict[str, int]] = {}
        for (hour, zone, path, _), row in rows.items():
            if path is not None and zone != UNKNOWN_ZONE and len(path) <= MAX_PATH_LENGTH:
                per_path = weights.setdefault((hour, zone), {})
                per_path[path] = per_path.get(path, 0) + row[4]
        named = {key: budget(*key).named(per_path) for key, per_path in weights.items()}
    shipped: list[list[Any]] = []
    other: dict[tuple[int, str, int], list[Any]] = {}
    for (hour, zone, path, status), row in rows.items():
        if path is not None and zone != UNKNOWN_ZONE and len(path) <= MAX_PATH_LENGTH and (
                budget is None or path in named[(hour, zone)]):
            shipped.append(row)
            continue
        folded = other.get((hour, zone, status))
        if folded is None:
            other[(hour, zone, status)] = [row[0], zone, None, status, row[4], row[5]]
        else:
            folded[4] += row[4]
            folded[5] += row[5]
    shipped.extend(other.values())
    return shipped


def log_item(entry: LogEntry, rate: float) -> list[Any]:
    timestamp, method, path, status, cache, request_id, ip = entry
    if isinstance(request_id, bytes):
        request_id = request_id.decode("ascii", "replace")
    # Cut to the millisecond, never rounded: 44.9996 rounded would be 45.000, an entry of second 44's sample
    # shown in second 45 (which then lists more than its budget).
    # A path longer than control takes is cut to what it takes: the entry is kept, as its count is (as "other").
    return [int(timestamp * 1000) / 1000, method, path[:MAX_PATH_LENGTH], status, cache, request_id, ip, rate]


class DeliveryLog:
    def __init__(self, country_header: str, node: str = "", *, log_per_s: int = 20, errors_per_s: int = 500,
                 tail_per_s: int = 200, access: AccessLog | None = None,
                 zones: Callable[[], Container[str]] | None = None, paths_per_hour: int = PATHS_PER_HOUR) -> None:
        """``zones``: the zones rows may name (the manifest's), asked at each flush; None names every
        zone a path starts with."""
        self.country_header = country_header
        self.node = node
        self.counts: dict[Key, list[int]] = {}
        # The body bytes of every delivery recorded, as sent (only ever raised): `assetcdn_bytes_served_total`
        # follows it (assetcdn/edge/app.py), so it counts what the statistics count, a body cut short as it went.
        self.sent = 0
        self.zones = zones
        self.paths_per_hour = paths_per_hour
        self._budgets: dict[tuple[int, str], PathBudget] = {}  # per (hour, zone): the paths named
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
        went away before the whole body was. ``cache`` is the answer's X-Cache: the access log keeps it, the
        counts and the sample take the analytics counter it adds to (assetcdn/shared/cache_results.py)."""
        self.record_pending((now, host, method, path, zone, status, sent, cache, country, request_id, ip, duration_s),
                            aborted)

    def record_pending(self, pending: Pending, aborted: bool = False) -> None:
        """`delivered` with its fields as a `Pending` holds them, ``sent`` in the place of the bytes to send:
        the hit path records its answers sent whole with the tuple it made, unpacked once here."""
        now, host, method, path, zone, status, sent, cache, country, request_id, ip, duration_s = pending
        self.sent += sent
        counts = self.counts
        try:
            counted_as = COUNTED_AS[cache]
        except KeyError:  # not an X-Cache value this service sends
            counted_as = CacheResult.BYPASS
        second = int(now)
        key: Key = (second // HOUR_S, zone, path, country, status, counted_as)
        counted = counts.get(key)
        if counted is not None:
            counted[0] += 1
            counted[1] += sent
        elif len(counts) < MAX_KEYS:
            counts[key] = [1, sent]
        else:  # a scan of distinct paths: zone, country, status and bytes stay exact
            if self.zones is not None and zone != API_ZONE and zone not in self.zones():
                # A path's first segment names no zone (a scan of those too): counted where `rollups` puts it.
                zone = UNKNOWN_ZONE
            # In the zone's "other" row (path None), never under a path: "" is the root's own path, and shipped
            # under it the scan's counts would be reported as requests for "/" (and take a named path's place).
            key = (key[0], zone, None, country, status, counted_as)
            counted = counts.get(key)
            if counted is None:
                counts[key] = [1, sent]
            else:
                counted[0] += 1
                counted[1] += sent
        sample = self.errors if status >= 400 else self.deliveries
        slot = sample.slot(second)
        if slot >= 0:
            sample.keep(slot, (now, method, path, status, counted_as, request_id, ip))
        if self.access is not None:
            self.access.write(now, host, method, path, status, sent, cache, duration_s, ip, country, request_id,
                              aborted)

    def settle(self, pending: Pending, sent: int, aborted: bool) -> None:
        """Record a delivery once its bytes are known: ``sent`` body bytes reached the kernel; ``aborted``
        when the connection (or stream) ended first. Never more than the delivery had to send."""
        now, host, method, path, zone, status, size, cache, country, request_id, ip, duration_s = pending
        if 0 <= size < sent:
            sent = size
        self.record_pending((now, host, method, path, zone, status, sent, cache, country, request_id, ip, duration_s),
                            aborted or sent < size)

    def record(self, request: web.Request, response: web.StreamResponse) -> None:
        """A delivery the application is answering, as its head goes out (the hit path records its own
        with the same derivations: `zone_of`, `body_sent`, `country_code`, assetcdn/edge/fastpath/hit_server.py).
        Its body bytes are counted as they are written, and the delivery recorded once they are out:
        by the hit path's connection when the request came through it (``HandoffTransport``), else when
        the application has finished the answer."""
        if not is_delivery(request.path, forwarded=bool(request.get(FORWARDED))) \
                or request.get(RECORDED):  # an error page for an answer cut short: the client never gets it
            return
        request[RECORDED] = True
        # Without a resolved path (an answer given before it was worked out: a path refused 400), the path as sent:
        # decoded, its `%0a` or `%1b` would be control characters, which control refuses in a log entry or count row.
        path = request.get(DELIVERED_PATH) or request.rel_url.raw_path.lstrip("/")
        length = response.content_length
        size = body_sent(request.method == "HEAD", response.status, length if length is not None else -1)
        transport = request.transport
        started = request.get(REQUEST_STARTED)
        if isinstance(transport, HandoffTransport) and transport.started is not None:
            started = transport.started  # a fill the hit path began: its client waited for the origin there
        cache = response.headers.get("X-Cache", "BYPASS")
        pending: Pending = (
            time.time(), request_host(request), request.method, path, zone_of(path), response.status, size,
            cache if cache in CACHE_RESULTS else "BYPASS", country_code(request.headers.get(self.country_header) or ""),
            request.get(REQUEST_ID), request.remote, time.perf_counter() - started if started is not None else 0.0)
        if isinstance(transport, HandoffTransport):
            counter = BodyCounter(transport, transport.beneath)
            request.writer.on_body_write = counter
            transport.deliver(pending, counter)
            return
        counter = BodyCounter(transport)
        request.writer.on_body_write = counter
        task = asyncio.current_task()
        if task is None:
            self.settle(pending, 0, True)
        else:
            task.add_done_callback(partial(self._answered, pending, counter, request.protocol))

    def _answered(self, pending: Pending, counter: BodyCounter, connection: Any, _task: object) -> None:
        """The application finished an answer on a connection it holds alone (its protocol: `connection`): a body
        written whole to a connection still open counts whole (it goes on leaving the transport, which may hold it
        all: a body written in one piece); one cut short, or on a connection lost by then (the client left, or was cut
        off), what had left the transport by its last write: the rest was dropped with the connection."""
        size = pending[6]
        whole = counter.written if size < 0 else size
        gone = connection.transport is None  # lost (a close this answer asked for comes after this callback)
        self.settle(pending, counter.written if counter.written >= whole and not gone else counter.handed, gone)

    def watched(self, watching: bool) -> None:
        """Control's live tail has a reader (or no longer has): the delivery sample's budget follows."""
        self.deliveries.set_budget(self.tail_per_s if watching else self.log_per_s)

    def take(self, now: float | None = None) -> dict[str, Any] | None:
        """The next batch (``v`` 2) without its id: counts rolled up, and released log entries; None
        when there is nothing to send."""
        now = time.time() if now is None else now
        if not self._made:
            self._made = self._batches(now)
        return self._made.pop(0) if self._made else None

    def _batches(self, now: float) -> list[dict[str, Any]]:
        counts, self.counts = self.counts, {}
        hour = int(now) // HOUR_S
        # The hour before stays: its last deliveries are counted into the first flush after it.
        for key in [key for key in self._budgets if key[0] < hour - 1]:
            del self._budgets[key]
        zones, paths, countries = rollups(counts, None if self.zones is None else self.zones(), self._budget)
        entries = self.errors.take(now, MAX_BATCH_ROWS) + self.deliveries.take(now, MAX_BATCH_ROWS)
        entries.sort(key=lambda pair: pair[0][0])
        items = [log_item(entry, rate) for entry, rate in entries]
        batches = []
        for start in range(0, max(len(zones), len(paths), len(countries), len(items)), MAX_BATCH_ROWS):
            end = start + MAX_BATCH_ROWS
            batches.append({"v": BATCH_VERSION, "node": self.node, "zones": zones[start:end],
                            "paths": paths[start:end], "countries": countries[start:end], "log": items[start:end]})
        return batches

    def _budget(self, hour: int, zone: str) -> PathBudget:
        budget = self._budgets.get((hour, zone))
        if budget is None:
            budget = self._budgets[(hour, zone)] = PathBudget(self.paths_per_hour)
        return budget

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
