"""Prometheus metrics for one process kind (control or edge), exposed at /metrics.

Worker processes of one edge node share PROMETHEUS_MULTIPROC_DIR, so /metrics on any worker
reports the node as a whole.

Counting is batched: a request adds to plain integers in this process (``Tally``), and the sums
reach the Prometheus metrics (a lock and, with several workers, an mmap write per value) once per
label set when /metrics is rendered here and every ``FLUSH_INTERVAL_S`` (``Metrics.flush_forever``),
never once per request. /metrics on a worker is therefore exact for its own requests and at most
``FLUSH_INTERVAL_S`` behind for its sibling workers'.

/metrics (and deep health) need the metrics key as ``Authorization: Bearer <key>``, the form
Prometheus sends with ``authorization: {credentials: ...}`` in a scrape config. A process without a
metrics key answers 401 to everyone.
"""

from __future__ import annotations

import asyncio
import os
import time
from bisect import bisect_left
from collections.abc import Callable, Sequence
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler
from aiohttp.web_urldispatcher import AbstractResource
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)

from assetcdn.shared.errors import ApiError
from assetcdn.shared.middleware import PREPARED
from assetcdn.shared.secrets import secret_matches

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
FLUSH_INTERVAL_S = 1.0


def multiprocess_dir() -> str | None:
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR") or None


class Metrics:
    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.registry = CollectorRegistry(auto_describe=True)
        reg = None if multiprocess_dir() else self.registry
        self.requests = Counter("assetcdn_requests_total", "HTTP requests by route and status",
                                ["process", "route", "method", "status"], registry=reg)
        self.request_seconds = Histogram("assetcdn_request_seconds", "HTTP request latency by route",
                                         ["process", "route"], buckets=LATENCY_BUCKETS, registry=reg)
        self.cache = Counter("assetcdn_edge_cache_total",
                             "Edge cache lookups by result (HIT, MISS, STALE; PASS: a pull zone's answer that may "
                             "not be stored, or a method not cached; a copy the origin confirmed counts as HIT)",
                             ["result"], registry=reg)
        # A shield's lookups for other edges' requests (assetcdn/edge/routes/shield.py): apart from its clients', which
        # the asking edge counted already in its own `cache`, so that the fleet's sum of `cache` is one per request.
        self.shield_cache = Counter("assetcdn_edge_shield_cache_total",
                                    "Lookups this edge made as a pull zone URL's shield for other edges' requests, by "
                                    "result (HIT, MISS, STALE, PASS; not in assetcdn_edge_cache_total)",
                                    ["result"], registry=reg)
        # Counted by the edge's delivery log as it records each delivery with what was sent of its body
        # (assetcdn/edge/delivery_log.py `DeliveryLog.sent`, followed with `follow_counts`).
        self.bytes_served = Counter("assetcdn_bytes_served_total",
                                    "Response body bytes served: deliveries' bodies as sent (the statistics' bytes)",
                                    ["process"], registry=reg)
        self.origin_fetch_seconds = Histogram("assetcdn_origin_fetch_seconds", "Edge fetches from control",
                                              ["kind"], buckets=LATENCY_BUCKETS, registry=reg)
        self.propagation_seconds = Histogram("assetcdn_propagation_seconds",
                                             "Time from control sending a push or purge to the edge's ack",
                                             ["kind", "edge"], buckets=LATENCY_BUCKETS, registry=reg)
        # The generation the node's running workers hold: an ended worker's goes as the edge reaps it
        # (assetcdn/edge/server.py `forget_live_gauges`), since the numbers start again when control's history is lost.
        self.manifest_generation = Gauge("assetcdn_manifest_generation", "Manifest generation held",
                                         ["process"], registry=reg, multiprocess_mode="livemax")
        self.transforms = Counter("assetcdn_transforms_total", "Image transforms run (cache misses)",
                                  ["format"], registry=reg)
        # The temporary space of the bodies an edge forwards to control (assetcdn/edge/proxied_body.py): in use now
        # (summed over the node's workers), the most one worker held at once (its ended workers' too) and its budget,
        # and the refusals.
        self.body_spool_bytes = Gauge("assetcdn_edge_body_spool_bytes",
                                      "Temporary space the forwarded request bodies hold now (bytes)",
                                      ["process"], registry=reg, multiprocess_mode="livesum")
        self.body_spool_peak_bytes = Gauge("assetcdn_edge_body_spool_peak_bytes",
                                           "The most temporary space one edge process's forwarded bodies held at "
                                           "once since the edge started, its ended workers' included (bytes)",
                                           ["process"], registry=reg, multiprocess_mode="max")
        self.body_spool_budget_bytes = Gauge("assetcdn_edge_body_spool_budget_bytes",
                                             "Temporary space one edge process's forwarded bodies may hold at once "
                                             "(edge.proxy_body_disk_mb, bytes)",
                                             ["process"], registry=reg, multiprocess_mode="max")
        self.body_spool_refusals = Counter("assetcdn_edge_body_spool_refusals_total",
                                           "Forwarded request bodies refused with 503 for want of temporary space",
                                           ["process"], registry=reg)
        # Edge connections closed at their PROXY protocol header (assetcdn/edge/fastpath/proxy_protocol.py).
        self.proxy_header_refusals = Counter("assetcdn_edge_proxy_header_refusals_total",
                                             "Connections closed at their PROXY protocol header, by reason "
                                             "(untrusted, malformed, timeout, missing)", ["reason"], registry=reg)
        # The edge's disk tier (assetcdn/edge/cache/disk.py): writes that found the filesystem full, and entries
        # not stored because the database refused their write through every attempt.
        self.disk_full = Counter("assetcdn_edge_disk_full_total",
                                 "Edge disk tier writes that found the filesystem full", ["process"], registry=reg)
        self.disk_dropped_writes = Counter("assetcdn_edge_disk_dropped_writes_total",
                                           "Entries the edge disk tier did not store: its database refused the "
                                           "write through every attempt (served all the same)", ["process"],
                                           registry=reg)
        # A one-worker edge's fills held in memory only (assetcdn/edge/cache/memory.py) that an eviction let go
        # unwritten: read by nobody since their fill (unread), or past the victims' share (writer_behind).
        self.memory_unwritten_evictions = Counter("assetcdn_edge_memory_unwritten_evictions_total",
                                                  "Cache fills held in memory only that an eviction let go without "
                                                  "writing them to the disk tier, by reason (unread, writer_behind)",
                                                  ["process", "reason"], registry=reg)

        # Pull zones' requests to their origins and to shield edges (assetcdn/edge/origin_client.py): by target
        # (origin, shield) and outcome (the answer's status class, or why there was none), and the time to the head.
        self.origin_requests = Counter("assetcdn_edge_origin_requests_total",
                                       "Requests to pull zones' origins and to shield edges, by target (origin, "
                                       "shield) and outcome (1xx-5xx: the answer's status class; timeout, refused, "
                                       "failed: no answer)", ["process", "target", "outcome"], registry=reg)
        self.origin_first_byte_seconds = Histogram("assetcdn_edge_origin_first_byte_seconds",
                                                   "Time from a request to a pull zone's origin or a shield edge to "
                                                   "its answer's head", ["process", "target"],
                                                   buckets=LATENCY_BUCKETS, registry=reg)
        # Requests for a pull zone URL that waited for another request's origin request (assetcdn/edge/states/
        # pull.py `Flights`) rather than asking the origin themselves.
        self.fill_waiters = Counter("assetcdn_edge_fill_waiters_total",
                                    "Pull zone requests that waited for another request's origin request for the "
                                    "same URL (collapsed) instead of making their own", ["process"], registry=reg)

        self.tally = Tally()
        self._cache_counters: dict[str, TallyCounter] = {}
        self._shield_counters: dict[str, TallyCounter] = {}
        self._sources: list[Callable[[], None]] = []

    def add_source(self, collect: Callable[[], None]) -> None:
        """``collect`` runs first on every flush: a hot path that keeps its own plain counters (the
        edge's hit path, assetcdn/edge/fastpath/hit_server.py) moves them into the tally there."""
        self._sources.append(collect)

    def follow_counts(self, counts: Sequence[tuple[Any, Callable[[], int]]]) -> None:
        """Each (counter, read) pair: the counter follows `read()`, a count its owner only ever raises (another
        thread may): what it grew by since the last flush is added on each flush."""
        reported = [0] * len(counts)

        def collect() -> None:
            for at, (counter, read) in enumerate(counts):
                now = read()
                if now > reported[at]:
                    counter.inc(now - reported[at])
                    reported[at] = now

        self.add_source(collect)

    def remove_source(self, collect: Callable[[], None]) -> None:
        if collect in self._sources:
            self._sources.remove(collect)

    def add_requests(self, route: str, method: str, status: str, count: int) -> None:
        """``count`` answered requests, as ``count_request`` counts one (latencies: ``add_latencies``)."""
        key = (route, method, status)
        self.tally.requests[key] = self.tally.requests.get(key, 0) + count

    def add_latencies(self, route: str, observations: list[float]) -> None:
        """Latencies of requests counted with ``add_requests``: per bucket of LATENCY_BUCKETS, then
        +Inf, then the sum of seconds (the shape of ``Tally.latency``)."""
        tally = self.tally
        mine = tally.latency.get(route)
        if mine is None:
            mine = tally.latency[route] = [0] * (len(LATENCY_BUCKETS) + 2)
        for index, value in enumerate(observations):
            mine[index] += value

    def count_request(self, route: str, method: str, status: str, seconds: float) -> None:
        """One answered request: counted here, exported on the next flush."""
        tally = self.tally
        key = (route, method, status)
        tally.requests[key] = tally.requests.get(key, 0) + 1
        observations = tally.latency.get(route)
        if observations is None:
            observations = tally.latency[route] = [0] * (len(LATENCY_BUCKETS) + 2)
        observations[bisect_left(LATENCY_BUCKETS, seconds)] += 1
        observations[-1] += seconds

    def cache_result(self, result: str) -> TallyCounter:
        counter = self._cache_counters.get(result)
        if counter is None:
            counter = self._cache_counters[result] = TallyCounter(self.tally.cache, result)
        return counter

    def shield_cache_result(self, result: str) -> TallyCounter:
        """`cache_result` of a lookup made for another edge's shield request."""
        counter = self._shield_counters.get(result)
        if counter is None:
            counter = self._shield_counters[result] = TallyCounter(self.tally.shield_cache, result)
        return counter

    def flush(self) -> None:
        """Add what was counted since the last flush to the Prometheus metrics."""
        for collect in self._sources:
            collect()
        tally = self.tally
        if tally.requests:
            requests, tally.requests = tally.requests, {}
            for (route, method, status), count in requests.items():
                self.requests.labels(self.kind, route, method, status).inc(count)
        if tally.latency:
            latency, tally.latency = tally.latency, {}
            for route, observations in latency.items():
                add_observations(self.request_seconds.labels(self.kind, route), observations)
        # These two dicts are shared with their TallyCounters: emptied in place, never replaced.
        for result, count in _drain(tally.cache):
            self.cache.labels(result).inc(count)
        for result, count in _drain(tally.shield_cache):
            self.shield_cache.labels(result).inc(count)

    async def flush_forever(self, interval_s: float = FLUSH_INTERVAL_S) -> None:
        """Flush on a timer, so sibling workers' /metrics see this worker's counts (until cancelled)."""
        while True:
            await asyncio.sleep(interval_s)
            self.flush()

    def render(self) -> bytes:
        self.flush()
        if multiprocess_dir():
            registry = CollectorRegistry()
            multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]  # untyped in prometheus_client
            return generate_latest(registry)
        return generate_latest(self.registry)


class Tally:
    """What one process counted since its last flush, in plain ints (no lock, no mmap write)."""

    __slots__ = ("requests", "latency", "cache", "shield_cache")

    def __init__(self) -> None:
        self.requests: dict[tuple[str, str, str], int] = {}
        # route -> [count per bucket (LATENCY_BUCKETS, then +Inf)..., sum of seconds]
        self.latency: dict[str, list[float]] = {}
        self.cache: dict[str, int] = {}
        self.shield_cache: dict[str, int] = {}


class TallyCounter:
    """A counter child that counts into a ``Tally`` dict (``inc`` like prometheus_client's)."""

    __slots__ = ("_counts", "_label")

    def __init__(self, counts: dict[str, int], label: str) -> None:
        self._counts = counts
        self._label = label

    def inc(self, amount: int = 1) -> None:
        self._counts[self._label] = self._counts.get(self._label, 0) + amount


def _drain(counts: dict[str, int]) -> list[tuple[str, int]]:
    items = [(label, count) for label, count in counts.items() if count]
    counts.clear()
    return items


def add_observations(child: Any, observations: list[float]) -> None:
    """Add a batch of observations to a histogram child: bucket counts and the sum in one step each (the
    observations: a count per bucket of the histogram's, then +Inf, then the sum).
    prometheus_client has no batch API; its child keeps one value per bucket and one for the sum."""
    buckets = getattr(child, "_buckets", None)
    total = getattr(child, "_sum", None)
    if buckets is None or total is None or len(buckets) != len(observations) - 1:
        raise RuntimeError("unsupported prometheus_client Histogram layout")
    for value, count in zip(buckets, observations[:-1], strict=True):
        if count:
            value.inc(count)
    total.inc(observations[-1])


METRICS = web.AppKey("metrics", Metrics)
METRICS_KEY = web.AppKey("metrics_key", str)
REQUEST_STARTED = web.RequestKey("request_started", float)  # perf_counter() when the request reached the app


def metrics_key_presented(request: web.Request) -> bool:
    """True when the request carries this process's metrics key as a Bearer credential."""
    expected = request.app.get(METRICS_KEY, "")
    scheme, _, supplied = request.headers.get("Authorization", "").partition(" ")
    return scheme.lower() == "bearer" and secret_matches(supplied.strip(), expected)


def require_metrics_key(request: web.Request, what: str) -> None:
    if not metrics_key_presented(request):
        raise ApiError(401, "Unauthorized",
                       f"{what} needs the metrics key: send 'Authorization: Bearer <ASSETCDN_METRICS_KEY>'.",
                       headers={"WWW-Authenticate": 'Bearer realm="assetcdn"'})


def route_name(resource: AbstractResource | None) -> str:
    """The route label of requests a resource answered (the edge's hit path counts its hits under it too)."""
    return resource.canonical if resource is not None else "unmatched"


def _route_name(request: web.Request) -> str:
    # match_info is a dict of path parameters: test the route, not the (often empty) mapping.
    return route_name(request.match_info.route.resource)


@web.middleware
async def metrics_middleware(request: web.Request,
                             handler: Handler) -> web.StreamResponse:
    metrics = request.app[METRICS]
    started = request[REQUEST_STARTED] = time.perf_counter()
    status = 500
    try:
        response = await handler(request)
        status = response.status
        return response
    except web.HTTPException as exc:
        status = exc.status
        raise
    except BaseException:
        prepared = request.get(PREPARED)
        if prepared is not None:  # its head went out: the status its client got, however its body ended
            status = prepared.status
        raise
    finally:
        metrics.count_request(_route_name(request), request.method, str(status), time.perf_counter() - started)


async def metrics_handler(request: web.Request) -> web.Response:
    require_metrics_key(request, "/metrics")
    return web.Response(body=request.app[METRICS].render(), headers={"Content-Type": CONTENT_TYPE_LATEST})
