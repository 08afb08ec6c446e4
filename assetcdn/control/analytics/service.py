"""Analytics on the control app: the daily counters edges' batches fill, the batches already taken,
the per-client limit of POST /api/analytics; the context that opens the store and prunes it."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from aiohttp import web

from assetcdn.control.analytics.ingest import SeenBatches
from assetcdn.control.analytics.store import AnalyticsStore
from assetcdn.control.analytics.zones import known_zones
from assetcdn.control.app_keys import SETTINGS
from assetcdn.control.identity.rate_limit import RateLimiter
from assetcdn.control.records.retention import pruning
from assetcdn.control.storage.service import DB, GIT, MANIFEST

ANALYTICS = web.AppKey("analytics", AnalyticsStore)
ANALYTICS_BATCHES = web.AppKey("analytics_batches", SeenBatches)
TRACK_LIMITER = web.AppKey("track_limiter", RateLimiter)  # POST /api/analytics, per client


@contextlib.asynccontextmanager
async def analytics_context(app: web.Application) -> AsyncIterator[None]:
    settings = app[SETTINGS]
    store = AnalyticsStore(app[DB], write_interval_s=float(settings.get("analytics", "write_interval_s")),
                           zones=known_zones(app[GIT], app[MANIFEST]),
                           paths_per_day=int(settings.get("analytics", "paths_per_zone_day")))
    await store.open()
    app[ANALYTICS], app[ANALYTICS_BATCHES] = store, SeenBatches()
    try:
        async with pruning([("analytics", store.prune)]):
            yield
    finally:
        await store.close()
