"""Prometheus metrics for one process kind (control or edge), exposed at /metrics.

Worker processes of one edge node share PROMETHEUS_MULTIPROC_DIR, so /metrics on any worker
reports the node as a whole.

/metrics (and deep health) need the metrics key as ``Authorization: Bearer <key>``, the form
Prometheus sends with ``authorization: {credentials: ...}`` in a scrape config. A process without a
metrics key answers 401 to everyone.
"""

from __future__ import annotations

import hmac
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)

from shared.errors import ApiError

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


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
        self.cache = Counter("assetcdn_edge_cache_total", "Edge cache lookups by result (HIT, MISS, STALE)",
                             ["result"], registry=reg)
        self.bytes_served = Counter("assetcdn_bytes_served_total", "Response body bytes served", ["process"],
                                    registry=reg)
        self.origin_fetch_seconds = Histogram("assetcdn_origin_fetch_seconds", "Edge fetches from control",
                                              ["kind"], buckets=LATENCY_BUCKETS, registry=reg)
        self.propagation_seconds = Histogram("assetcdn_propagation_seconds",
                                             "Time from control sending a push or purge to the edge's ack",
                                             ["kind", "edge"], buckets=LATENCY_BUCKETS, registry=reg)
        self.manifest_generation = Gauge("assetcdn_manifest_generation", "Manifest generation held",
                                         ["process"], registry=reg, multiprocess_mode="max")
        self.transforms = Counter("assetcdn_transforms_total", "Image transforms run (cache misses)",
                                  ["format"], registry=reg)

        self.bytes_served_here = self.bytes_served.labels(kind)
        self._children: dict[tuple[str, ...], tuple[Any, Any]] = {}
        self._cache_children: dict[str, Any] = {}

    def request_children(self, route: str, method: str, status: str) -> tuple[Any, Any]:
        """(request counter, latency histogram) for one label set; label look-ups take a lock each."""
        key = (route, method, status)
        children = self._children.get(key)
        if children is None:
            children = (self.requests.labels(self.kind, route, method, status),
                        self.request_seconds.labels(self.kind, route))
            self._children[key] = children
        return children

    def cache_result(self, result: str) -> Any:
        child = self._cache_children.get(result)
        if child is None:
            child = self._cache_children[result] = self.cache.labels(result)
        return child

    def render(self) -> bytes:
        if multiprocess_dir():
            registry = CollectorRegistry()
            multiprocess.MultiProcessCollector(registry)
            return generate_latest(registry)
        return generate_latest(self.registry)


METRICS = web.AppKey("metrics", Metrics)
METRICS_KEY = web.AppKey("metrics_key", str)


def metrics_key_presented(request: web.Request) -> bool:
    """True when the request carries this process's metrics key as a Bearer credential."""
    expected = request.app.get(METRICS_KEY, "")
    scheme, _, supplied = request.headers.get("Authorization", "").partition(" ")
    return bool(expected) and scheme.lower() == "bearer" and \
        hmac.compare_digest(supplied.strip().encode(), expected.encode())


def require_metrics_key(request: web.Request, what: str) -> None:
    if not metrics_key_presented(request):
        raise ApiError(401, "Unauthorized",
                       f"{what} needs the metrics key: send 'Authorization: Bearer <ASSETCDN_METRICS_KEY>'.",
                       headers={"WWW-Authenticate": 'Bearer realm="assetcdn"'})


def _route_name(request: web.Request) -> str:
    # match_info is a dict of path parameters: test the route, not the (often empty) mapping.
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else "unmatched"


@web.middleware
async def metrics_middleware(request: web.Request,
                             handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
    metrics = request.app[METRICS]
    started = time.perf_counter()
    status = 500
    try:
        response = await handler(request)
        status = response.status
        return response
    except web.HTTPException as exc:
        status = exc.status
        raise
    finally:
        counter, latency = metrics.request_children(_route_name(request), request.method, str(status))
        counter.inc()
        latency.observe(time.perf_counter() - started)


async def metrics_handler(request: web.Request) -> web.Response:
    require_metrics_key(request, "/metrics")
    return web.Response(body=request.app[METRICS].render(), headers={"Content-Type": CONTENT_TYPE_LATEST})
