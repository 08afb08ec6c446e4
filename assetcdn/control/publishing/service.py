"""Publishing on the control app: the registry of edges and the publisher that commits, records and
pushes each manifest generation to them; the context that starts and stops them."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from aiohttp import web

from assetcdn.control.app_keys import DATA_DIR, SECRETS, SETTINGS
from assetcdn.control.publishing.edge_registry import EdgeRegistry
from assetcdn.control.publishing.publisher import Publisher
from assetcdn.control.storage.service import EDGE_CONFIG, GIT, MANIFEST
from assetcdn.shared.metrics import METRICS

REGISTRY = web.AppKey("registry", EdgeRegistry)
PUBLISHER = web.AppKey("publisher", Publisher)
EDGES_FILE = "edges.json"  # the edges control knows, kept across its restarts (assetcdn/control/publishing/edge_registry.py)


@contextlib.asynccontextmanager
async def publishing_context(app: web.Application) -> AsyncIterator[None]:
    settings = app[SETTINGS]
    metrics = app[METRICS]
    registry = EdgeRegistry(
        app[SECRETS].cluster_secret, settings.get("control", "edge_timeout_s"),
        observe=lambda kind, edge, seconds: metrics.propagation_seconds.labels(kind, edge).observe(seconds),
        path=app[DATA_DIR] / EDGES_FILE)
    await registry.start()
    try:
        publisher = Publisher(app[GIT], app[MANIFEST], registry, app[EDGE_CONFIG],
                              settings.get("control", "push_wait_ms") / 1000)
        await publisher.outbox.open()
        app[REGISTRY], app[PUBLISHER] = registry, publisher
        yield
    finally:
        await registry.close()
