"""The control plane application: built by a factory from a table of routes, each declaring its access."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

from control.analytics.ingest import SeenBatches
from control.analytics.store import AnalyticsStore
from control.audit import AuditLog
from control.auth import (
    AUTHENTICATOR,
    ROUTE_ACCESS,
    Access,
    Authenticator,
    Key,
    accepts,
    auth_middleware,
)
from control.chat.setup import open_chat
from control.cluster.registry import EdgeRegistry
from control.database import open_database
from control.demo import install_demo
from control.edge_config import EdgeConfigStore
from control.manifest_store import ManifestStore
from control.publish import Publisher
from control.quota import DailyQuota
from control.rate_limit import MemoryWindowCounter
from control.recording import ROUTE_AUDIT, audit_middleware, request_log_middleware
from control.request_log import RequestLog
from control.retention import prune_forever
from control.routes import (
    analytics,
    assets,
    audit_logs,
    chat,
    cluster,
    domains,
    health,
    insights,
    logs,
    pipeline,
    purge,
    rules,
    search,
    storage,
    tokens,
    zones,
)
from control.search.setup import open_search
from control.state import (
    ANALYTICS,
    ANALYTICS_BATCHES,
    AUDIT,
    CHAT,
    CHAT_QUOTA,
    DATA_DIR,
    DB,
    DEMO,
    EDGE_CONFIG,
    GIT,
    MANIFEST,
    PUBLISHER,
    PURGE_QUOTA,
    RATE_COUNTER,
    REGISTRY,
    REQUEST_LOG,
    SEARCH,
    SEARCH_INDEX,
    SECRETS,
    SETTINGS,
    TOKENS,
    VIDEO_INGEST,
    ZONES,
)
from control.storage.git_store import GitStore
from control.tokens import TokenStore
from control.video.ingest import VideoIngester
from control.zones_store import ZoneStore
from shared.cluster import PREFIX, ReplayGuard
from shared.config import Settings
from shared.metrics import METRICS, METRICS_KEY, Metrics, metrics_handler, metrics_middleware
from shared.middleware import install_envelopes
from shared.secrets import Secrets

log = logging.getLogger(__name__)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True)
class Route:
    method: str
    path: str
    handler: Handler
    access: Access | None = None  # None: public (or cluster-signed under /_cluster)
    audit: str | None = None      # the audit action a successful call records (mutations)


STORAGE_READ = accepts(Key.ACCESS, scope="storage:read", session=True)
STORAGE_HEAD = accepts(Key.ACCESS, scope="storage:read")
STORAGE_WRITE = accepts(Key.ACCESS, scope="storage:write")
ASSETS_READ = accepts(Key.ACCESS, scope="assets:read")
ACCOUNT = accepts(Key.ACCOUNT)
ZONES_READ = accepts(Key.ACCOUNT, scope="zones:read")
ZONES_WRITE = accepts(Key.ACCOUNT, scope="zones:write")
INSIGHTS_READ = accepts(Key.ACCOUNT, Key.ACCESS, scope="insights:read")
# Any character, newlines included: '.*' would stop at a newline and answer 404 instead of the
# handler's 400 for a path with control characters.
STORAGE_PATH = r"/api/storage/{path:[\s\S]*}"

ROUTES: tuple[Route, ...] = (
    Route("POST", "/api/storage/batch", storage.batch_upload, STORAGE_WRITE, "storage.batch"),
    Route("PUT", STORAGE_PATH, storage.put_file, STORAGE_WRITE, "storage.upload"),
    Route("GET", STORAGE_PATH, storage.get_file, STORAGE_READ),
    Route("HEAD", STORAGE_PATH, storage.head_file, STORAGE_HEAD),
    Route("DELETE", STORAGE_PATH, storage.delete_file, STORAGE_WRITE, "storage.delete"),
    Route("GET", "/api/assets", assets.list_assets, ASSETS_READ),
    Route("GET", "/api/assets/metadata", assets.asset_metadata, ASSETS_READ),
    Route("GET", "/api/core/zones", zones.list_zones, ZONES_READ),
    Route("POST", "/api/core/zones", zones.create_zone, ZONES_WRITE, "zone.create"),
    Route("GET", "/api/core/zones/{id}", zones.get_zone, ZONES_READ),
    Route("DELETE", "/api/core/zones/{id}", zones.delete_zone, ZONES_WRITE, "zone.delete"),
    Route("POST", "/api/core/zones/{id}/domains", domains.add_domain, ZONES_WRITE, "domain.add"),
    Route("GET", "/api/core/zones/{id}/domains", domains.list_domains, ZONES_READ),
    Route("DELETE", "/api/core/zones/{id}/domains", domains.remove_domain, ZONES_WRITE, "domain.remove"),
    Route("DELETE", "/api/core/zones/{id}/domains/{hostname}", domains.remove_domain, ZONES_WRITE, "domain.remove"),
    Route("GET", "/api/core/rules", rules.get_rules, ACCOUNT),
    Route("POST", "/api/core/rules", rules.update_rules, ACCOUNT, "rules.update"),
    Route("GET", "/api/core/audit-logs", audit_logs.audit_logs, ACCOUNT),
    Route("GET", "/api/core/statistics", insights.statistics, ACCOUNT),
    Route("GET", "/api/insights/summary", insights.summary, INSIGHTS_READ),
    Route("GET", "/api/insights/top-assets", insights.top_assets, INSIGHTS_READ),
    Route("GET", "/api/insights/geography", insights.geography, INSIGHTS_READ),
    Route("GET", "/api/insights/errors", insights.errors, INSIGHTS_READ),
    Route("GET", "/api/insights/asset", insights.asset, INSIGHTS_READ),
    Route("GET", "/api/analytics", analytics.get_analytics, accepts(Key.ANALYTICS)),
    Route("POST", "/api/analytics", analytics.track_hit),
    Route("POST", "/api/tokens", tokens.create_token, ACCOUNT, "token.create"),
    Route("GET", "/api/tokens", tokens.list_tokens, ACCOUNT),
    Route("DELETE", "/api/tokens", tokens.revoke_token, ACCOUNT, "token.revoke"),
    Route("POST", "/api/purge", purge.purge, accepts(Key.PURGE, scope="purge:write"), "purge.execute"),
    Route("POST", "/api/pipeline", pipeline.run_pipeline, accepts(Key.ACCOUNT, scope="pipeline:write"),
          "pipeline.run"),
    Route("GET", "/api/search", search.search),
    Route("POST", "/api/chat", chat.chat),
    Route("GET", "/api/health", health.health),
    Route("GET", "/api/logs", logs.logs, ACCOUNT),
    Route("GET", "/metrics", metrics_handler),
    Route("POST", PREFIX + "/register", cluster.register),
    Route("POST", PREFIX + "/heartbeat", cluster.heartbeat),
    Route("GET", PREFIX + "/changes", cluster.changes),
    Route("GET", PREFIX + "/blobs/{blob_id}", cluster.blob),
    Route("GET", PREFIX + "/config", cluster.config),
    Route("POST", PREFIX + "/analytics", analytics.ingest_batch),
)


async def _not_found(request: web.Request) -> web.StreamResponse:
    raise web.HTTPNotFound()


async def _resources(app: web.Application) -> AsyncIterator[None]:
    """Open what the control plane holds (git, SQLite, stores, edge registry) and close it on shutdown."""
    data_dir = app[DATA_DIR]
    settings = app[SETTINGS]
    git = GitStore(data_dir / "repo.git")
    db = await open_database(data_dir / "control.sqlite3")
    manifest = ManifestStore(git, db)
    await manifest.load()
    metrics = app[METRICS]
    registry = EdgeRegistry(
        app[SECRETS].cluster_secret, settings.get("control", "edge_timeout_s"),
        observe=lambda kind, edge, seconds: metrics.propagation_seconds.labels(kind, edge).observe(seconds))
    await registry.start()
    app[GIT], app[DB], app[MANIFEST], app[REGISTRY] = git, db, manifest, registry
    app[TOKENS] = TokenStore(db)
    app[ZONES] = ZoneStore(db)
    app[PURGE_QUOTA] = DailyQuota(db, "purge", settings.get("purge", "daily_limit"))
    app[AUTHENTICATOR] = Authenticator(app[SECRETS], app[TOKENS].lookup)
    app[EDGE_CONFIG] = EdgeConfigStore(git, db, settings.get("domains", "base_domain"))
    app[PUBLISHER] = Publisher(git, manifest, registry, app[EDGE_CONFIG],
                               settings.get("control", "push_wait_ms") / 1000)
    ingester = VideoIngester(git, app[PUBLISHER], data_dir / "video-work")
    app[PUBLISHER].listeners.append(ingester.on_commit)
    app[VIDEO_INGEST] = ingester
    if app[DEMO] and manifest.commit_id is None:
        await install_demo(app[PUBLISHER], app[ZONES])
        ingester.install_demo(data_dir / "video-cache")
    metrics.manifest_generation.labels("control").set(manifest.generation)
    analytics_store = AnalyticsStore(data_dir / "control.sqlite3")
    await analytics_store.open()
    app[ANALYTICS], app[ANALYTICS_BATCHES] = analytics_store, SeenBatches()
    app[AUDIT] = AuditLog(db)
    await app[AUDIT].open()
    pruning = asyncio.create_task(prune_forever([("analytics", analytics_store.prune),
                                                 ("audit", app[AUDIT].prune)]))
    app[RATE_COUNTER] = MemoryWindowCounter()
    app[SEARCH_INDEX], app[SEARCH] = await open_search(settings, data_dir, manifest, app[PUBLISHER])
    app[CHAT_QUOTA], app[CHAT], chat_session = open_chat(settings, db, app[SEARCH])
    yield
    await chat_session.close()
    app[SEARCH].close()
    await app[SEARCH_INDEX].close()
    pruning.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await pruning
    await analytics_store.close()
    await ingester.close()
    await registry.close()
    await db.close()
    git.close()


async def _end_log_streams(app: web.Application) -> None:
    app[REQUEST_LOG].close()


def create_app(settings: Settings, secrets: Secrets, data_dir: Path, *, demo: bool = False) -> web.Application:
    max_upload = settings.get("control", "max_upload_bytes")
    app = web.Application(client_max_size=max_upload + 1024 * 1024)
    app[REQUEST_LOG] = RequestLog()
    app.middlewares.append(request_log_middleware)  # outermost: sees every final status
    app.middlewares.append(metrics_middleware)  # outside the envelopes: counts the status clients get
    install_envelopes(app)
    app[METRICS] = Metrics("control")
    app[METRICS_KEY] = secrets.metrics_key
    app.middlewares.append(cluster.cluster_auth_middleware)
    app[cluster.REPLAY_GUARD] = ReplayGuard()
    app.middlewares.append(auth_middleware)
    app.middlewares.append(audit_middleware)
    app[SETTINGS], app[SECRETS], app[DATA_DIR] = settings, secrets, Path(data_dir)
    app[DEMO] = demo
    route_access: dict[web.AbstractRoute, Access] = {}
    route_audit: dict[web.AbstractRoute, str] = {}
    for route in ROUTES:
        registered = app.router.add_route(route.method, route.path, route.handler)
        if route.access is not None:
            route_access[registered] = route.access
        if route.audit is not None:
            route_audit[registered] = route.audit
    app[ROUTE_ACCESS], app[ROUTE_AUDIT] = route_access, route_audit
    # Unknown /api/... paths: 404 in the standard envelope (the envelope middleware renders it).
    app.router.add_route("*", "/api/{tail:.*}", _not_found)
    app.cleanup_ctx.append(_resources)
    app.on_shutdown.append(_end_log_streams)
    return app
