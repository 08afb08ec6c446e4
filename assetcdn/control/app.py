"""The control plane application: built by a factory from a table of routes, each declaring its access."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web
from aiohttp.typedefs import Handler

from assetcdn.control.acme.issuer import open_issuer
from assetcdn.control.ai.analysis import AiVisionSettings, ImageAnalysis
from assetcdn.control.analytics.ingest import SeenBatches
from assetcdn.control.analytics.store import AnalyticsStore
from assetcdn.control.analytics.zones import known_zones
from assetcdn.control.app_keys import (
    ANALYTICS,
    ANALYTICS_BATCHES,
    AUDIT,
    CERTIFICATES,
    CHAT,
    CHAT_LIMITER,
    CHAT_QUOTA,
    COUNTERS,
    DASHBOARD,
    DATA_DIR,
    DB,
    DEMO,
    EDGE_CONFIG,
    GIT,
    MANIFEST,
    PASSKEYS,
    PUBLISHER,
    REGISTRY,
    REQUEST_LOG,
    SEARCH,
    SEARCH_INDEX,
    SEARCH_LIMITER,
    SECRETS,
    SESSION_SCOPES,
    SESSIONS,
    SETTINGS,
    SIGN_IN,
    TOKENS,
    TRACK_LIMITER,
    VIDEO_INGEST,
    ZONES,
    public_url_of,
)
from assetcdn.control.chat.setup import open_chat
from assetcdn.control.identity.auth import (
    AUTHENTICATOR,
    ROUTE_ACCESS,
    Access,
    Authenticator,
    Key,
    auth_middleware,
    credentials,
)
from assetcdn.control.identity.dashboard_config import DashboardConfig
from assetcdn.control.identity.dashboard_origin import (
    DASHBOARD_PORTS,
    DASHBOARD_URL,
    dashboard_origin_middleware,
    stored_bytes_inert,
)
from assetcdn.control.identity.login_attempts import CounterAttemptLimiter
from assetcdn.control.identity.passkeys.ceremony import PasskeyCeremonies, user_handle
from assetcdn.control.identity.passkeys.store import PasskeyStore, PendingChallenges
from assetcdn.control.identity.rate_limit import SharedRateLimiter
from assetcdn.control.identity.session import SessionBook
from assetcdn.control.identity.signin import SignIn
from assetcdn.control.identity.tokens import TokenStore
from assetcdn.control.publishing.demo import install_demo
from assetcdn.control.publishing.edge_registry import EdgeRegistry
from assetcdn.control.publishing.publisher import Publisher
from assetcdn.control.records.audit import AuditLog
from assetcdn.control.records.client_ip import TRUSTED_PROXIES, trusted_proxies
from assetcdn.control.records.recording import ROUTE_AUDIT, audit_middleware, request_log_middleware
from assetcdn.control.records.request_log import RequestLog
from assetcdn.control.records.retention import prune_forever
from assetcdn.control.routes import (
    ai,
    analytics,
    assets,
    audit_logs,
    chat,
    cluster,
    dashboard,
    dashboard_login,
    domains,
    health,
    insights,
    logs,
    passkeys,
    pipeline,
    purge,
    rules,
    search,
    storage,
    tokens,
    webhooks,
    zones,
)
from assetcdn.control.search.setup import open_search
from assetcdn.control.storage.database import Database, open_database
from assetcdn.control.storage.edge_config_store import EdgeConfigStore
from assetcdn.control.storage.git_store import GitStore
from assetcdn.control.storage.manifest_store import ManifestStore
from assetcdn.control.storage.zones_store import ZoneStore
from assetcdn.control.video.ingest import DEMO_VIDEO_CACHE, VideoIngester
from assetcdn.control.webhooks.service import webhooks_context
from assetcdn.shared.cluster import PREFIX, ReplayGuard
from assetcdn.shared.config import Settings
from assetcdn.shared.counter_store import counters_from_settings
from assetcdn.shared.dashboard_url import dashboard_url
from assetcdn.shared.hls import VIDEOS
from assetcdn.shared.limits import (
    analytics_track_per_client,
    chat_per_client,
    login_failures_per_client,
    search_per_client,
)
from assetcdn.shared.metrics import (
    METRICS,
    METRICS_KEY,
    Metrics,
    metrics_handler,
    metrics_middleware,
)
from assetcdn.shared.middleware import install_envelopes
from assetcdn.shared.openapi import api_docs, openapi_document
from assetcdn.shared.request_body import body_deadline_middleware
from assetcdn.shared.secrets import Secrets
from assetcdn.shared.tls_state import TLS_STATE_PATH

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Route:
    method: str
    path: str
    handler: Handler
    access: Access | None = None  # None: public (or cluster-signed under /_cluster)
    audit: str | None = None      # the audit action a successful call records (mutations)


# The dashboard's session (`session=True`) is accepted on the routes the dashboard uses: storage, zones,
# domains, rules, statistics and insights, tokens, purge, webhooks, logs and its status. A state-changing call
# with it must come from the dashboard's origin (assetcdn.control.identity.auth), so other sites cannot forge one.
STORAGE_READ = credentials(Key.ACCESS, scope="storage:read", session=True)
STORAGE_HEAD = credentials(Key.ACCESS, scope="storage:read", session=True)
STORAGE_WRITE = credentials(Key.ACCESS, scope="storage:write", session=True)
ASSETS_READ = credentials(Key.ACCESS, scope="assets:read", session=True)
ACCOUNT = credentials(Key.ACCOUNT, session=True)
ZONES_READ = credentials(Key.ACCOUNT, scope="zones:read", session=True)
ZONES_WRITE = credentials(Key.ACCOUNT, scope="zones:write", session=True)
INSIGHTS_READ = credentials(Key.ACCOUNT, Key.ACCESS, scope="insights:read", session=True)
PURGE = credentials(Key.PURGE, scope="purge:write", session=True)
WEBHOOKS_READ = credentials(Key.ACCOUNT, scope="webhooks:read", session=True)
WEBHOOKS_WRITE = credentials(Key.ACCOUNT, scope="webhooks:write", session=True)
PASSKEYS_MANAGE = credentials(Key.ACCOUNT, session=True)  # the admin key too: register, list or remove without the dashboard
AI_READ = credentials(Key.ACCOUNT, Key.ACCESS, scope="ai:read")
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
    Route("GET", "/api/core/zones/{id}/origin", zones.get_origin, ZONES_READ),
    Route("PUT", "/api/core/zones/{id}/origin", zones.put_origin, ZONES_WRITE, "zone.origin.set"),
    Route("DELETE", "/api/core/zones/{id}/origin", zones.delete_origin, ZONES_WRITE, "zone.origin.remove"),
    Route("POST", "/api/core/zones/{id}/domains", domains.add_domain, ZONES_WRITE, "domain.add"),
    Route("GET", "/api/core/zones/{id}/domains", domains.list_domains, ZONES_READ),
    Route("DELETE", "/api/core/zones/{id}/domains", domains.remove_domain, ZONES_WRITE, "domain.remove"),
    Route("GET", "/api/core/zones/{id}/domains/{hostname}", domains.get_domain, ZONES_READ),
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
    Route("GET", "/api/analytics", analytics.get_analytics, credentials(Key.ANALYTICS)),
    Route("POST", "/api/analytics", analytics.track_hit),
    Route("POST", "/api/tokens", tokens.create_token, ACCOUNT, "token.create"),
    Route("GET", "/api/tokens", tokens.list_tokens, ACCOUNT),
    Route("DELETE", "/api/tokens", tokens.revoke_token, ACCOUNT, "token.revoke"),
    Route("GET", "/api/webhooks", webhooks.list_webhooks, WEBHOOKS_READ),
    Route("POST", "/api/webhooks", webhooks.register_webhook, WEBHOOKS_WRITE, "webhook.create"),
    Route("DELETE", "/api/webhooks", webhooks.delete_webhook, WEBHOOKS_WRITE, "webhook.delete"),
    Route("GET", "/api/webhooks/deliveries", webhooks.list_deliveries, WEBHOOKS_READ),
    Route("GET", "/api/webhooks/dead-letters", webhooks.list_dead_letters, WEBHOOKS_READ),
    Route("POST", "/api/webhooks/replay", webhooks.replay_delivery, WEBHOOKS_WRITE, "webhook.replay"),
    Route("POST", "/api/purge", purge.purge, PURGE, "purge.execute"),
    Route("POST", "/api/pipeline", pipeline.run_pipeline, credentials(Key.ACCOUNT, scope="pipeline:write"),
          "pipeline.run"),
    Route("GET", "/api/passkeys", passkeys.list_passkeys, PASSKEYS_MANAGE),
    Route("PATCH", "/api/passkeys", passkeys.rename_passkey, PASSKEYS_MANAGE, "passkey.rename"),
    Route("DELETE", "/api/passkeys", passkeys.delete_passkey, PASSKEYS_MANAGE, "passkey.delete"),
    Route("POST", "/api/passkeys/register/begin", passkeys.register_begin, PASSKEYS_MANAGE),
    Route("POST", "/api/passkeys/register/complete", passkeys.register_complete, PASSKEYS_MANAGE, "passkey.register"),
    Route("POST", "/api/passkeys/auth/begin", passkeys.auth_begin),
    Route("POST", "/api/passkeys/auth/complete", passkeys.auth_complete),
    Route("GET", "/dashboard/login", dashboard_login.login_page),
    Route("POST", "/dashboard/login", dashboard_login.login),
    Route("GET", "/dashboard/logout", dashboard_login.logout),
    Route("POST", "/dashboard/logout", dashboard_login.logout),
    Route("GET", "/dashboard/setup-passkey", dashboard_login.passkeys_page),
    Route("GET", r"/dashboard/{name:login\.(?:js|css)}", dashboard_login.asset),
    Route("GET", "/dashboard", dashboard.to_home),
    Route("GET", "/dashboard/", dashboard.page),
    Route("GET", r"/dashboard/static/{path:[A-Za-z0-9._/-]+}", dashboard.static),
    Route("GET", "/api/dashboard/status", dashboard.status, ACCOUNT),
    Route("GET", "/api/ai/alt-text", ai.alt_text, AI_READ),
    Route("POST", "/api/ai/alt-text", ai.alt_text, AI_READ),
    Route("GET", "/api/ai/moderate", ai.moderate, AI_READ),
    Route("POST", "/api/ai/moderate", ai.moderate, AI_READ),
    Route("GET", "/api/ai/smart-crop", ai.smart_crop, AI_READ),
    Route("POST", "/api/ai/smart-crop", ai.smart_crop, AI_READ),
    Route("GET", "/api/ai/background-remove", ai.background_remove, AI_READ),
    Route("POST", "/api/ai/background-remove", ai.background_remove, AI_READ),
    Route("GET", "/api/search", search.search),
    Route("POST", "/api/chat", chat.chat),
    Route("GET", "/api/health", health.health),
    Route("GET", "/api/logs", logs.logs, ACCOUNT),
    Route("GET", "/metrics", metrics_handler),
    Route("GET", "/api/openapi.json", openapi_document),
    Route("GET", "/api/docs", api_docs),
    Route("POST", PREFIX + "/register", cluster.register),
    Route("POST", PREFIX + "/heartbeat", cluster.heartbeat),
    Route("GET", PREFIX + "/changes", cluster.changes),
    Route("GET", PREFIX + "/blobs/{blob_id}", cluster.blob),
    Route("GET", PREFIX + "/config", cluster.config),
    Route("GET", PREFIX + TLS_STATE_PATH, cluster.tls_state),
    Route("POST", PREFIX + "/analytics", analytics.ingest_batch),
)


def session_scopes(routes: tuple[Route, ...]) -> frozenset[str]:
    """Scopes a session may put on a token: those whose every route the session itself may call, so a
    token minted in the dashboard never reaches further than the dashboard (pipeline, AI)."""
    scoped = [route.access for route in routes if route.access is not None and route.access.scope]
    return frozenset(a.scope for a in scoped if a.scope and all(o.session for o in scoped if o.scope == a.scope))


async def _not_found(request: web.Request) -> web.StreamResponse:
    raise web.HTTPNotFound()


async def _open_resources(app: web.Application, opened: contextlib.AsyncExitStack) -> None:
    """Open what the control plane holds (git, SQLite, stores, edge registry, background tasks),
    registering each one's closing on `opened` as soon as it is open."""
    data_dir = app[DATA_DIR]
    settings = app[SETTINGS]
    opened.push_async_callback(app[COUNTERS].close)
    git = GitStore(data_dir / "repo.git")
    opened.callback(git.close)
    db = await open_database(data_dir / "control.sqlite3",
                             busy_timeout_ms=settings.get("control", "sqlite_busy_timeout_ms"))
    opened.push_async_callback(db.close)
    await _restore_damaged_branch(git, db)
    manifest = ManifestStore(git, db)
    await manifest.load()
    metrics = app[METRICS]
    registry = EdgeRegistry(
        app[SECRETS].cluster_secret, settings.get("control", "edge_timeout_s"),
        observe=lambda kind, edge, seconds: metrics.propagation_seconds.labels(kind, edge).observe(seconds))
    await registry.start()
    opened.push_async_callback(registry.close)
    app[GIT], app[DB], app[MANIFEST], app[REGISTRY] = git, db, manifest, registry
    app[TOKENS] = TokenStore(db)
    app[ZONES] = ZoneStore(db)
    dashboard = app[DASHBOARD]
    app[SESSIONS] = SessionBook(db, app[SECRETS].session_secret, dashboard.session_ttl_s)
    app[AUTHENTICATOR] = Authenticator(app[SECRETS], app[TOKENS].lookup, app[SESSIONS], dashboard)
    app[EDGE_CONFIG] = EdgeConfigStore(git, db, settings.get("domains", "base_domain"),
                                       frozenset(domains.own_hosts(settings, dashboard.origins)))
    app[PUBLISHER] = Publisher(git, manifest, registry, app[EDGE_CONFIG],
                               settings.get("control", "push_wait_ms") / 1000)
    app[CERTIFICATES] = await open_issuer(settings, public_url_of(settings), data_dir, db, registry,
                                          app[EDGE_CONFIG], app[SECRETS].cluster_secret)
    opened.push_async_callback(app[CERTIFICATES].close)
    ingester = VideoIngester(git, app[PUBLISHER], data_dir / "video-work")
    opened.push_async_callback(ingester.close)
    app[PUBLISHER].listeners.append(ingester.on_commit)
    app[VIDEO_INGEST] = ingester
    demo_videos = data_dir / DEMO_VIDEO_CACHE
    if app[DEMO] and manifest.commit_id is None:
        await install_demo(app[PUBLISHER], app[ZONES])
        ingester.install_demo(demo_videos)
    elif demo_videos.is_dir() and not all(f"stocks/videos/{v}/hls/index.json" in manifest.entries for v in VIDEOS):
        ingester.install_demo(demo_videos)  # a first start stopped before its demo videos were committed
    metrics.manifest_generation.labels("control").set(manifest.generation)
    analytics_store = AnalyticsStore(db, write_interval_s=float(settings.get("analytics", "write_interval_s")),
                                     zones=known_zones(git, manifest),
                                     paths_per_day=int(settings.get("analytics", "paths_per_zone_day")))
    await analytics_store.open()
    opened.push_async_callback(analytics_store.close)
    app[ANALYTICS], app[ANALYTICS_BATCHES] = analytics_store, SeenBatches()
    app[AUDIT] = AuditLog(db)
    await app[AUDIT].open()
    image_analysis = ImageAnalysis(git, lambda: manifest.entries, db,
                                   AiVisionSettings.from_section(settings.section("ai_vision")), app[COUNTERS])
    await image_analysis.open()
    opened.push_async_callback(image_analysis.close)
    app[ai.IMAGE_ANALYSIS] = image_analysis
    request_log = app[REQUEST_LOG]
    await request_log.open(db)
    opened.push_async_callback(request_log.close)
    app[PASSKEYS] = PasskeyCeremonies(dashboard, PasskeyStore(db), PendingChallenges(),
                                      user_handle(app[SECRETS].session_secret))
    app[SIGN_IN] = SignIn(app[SECRETS].dashboard_secret,
                          CounterAttemptLimiter(app[COUNTERS], login_failures_per_client(settings)),
                          app[SESSIONS], app[PASSKEYS], app[AUDIT])
    pruning = asyncio.create_task(prune_forever([("analytics", analytics_store.prune),
                                                 ("audit", app[AUDIT].prune),
                                                 ("request log", request_log.prune)]))
    opened.push_async_callback(_cancel, pruning)
    app[SEARCH_INDEX], app[SEARCH] = await open_search(settings, db, manifest, app[PUBLISHER],
                                                       alt_text=image_analysis.alt_text_for)
    image_analysis.alt_text_listeners.append(lambda path: app[SEARCH_INDEX].refresh([path]))
    opened.push_async_callback(app[SEARCH_INDEX].close)
    opened.callback(app[SEARCH].close)
    app[CHAT_QUOTA], app[CHAT], chat_session = open_chat(settings, app[COUNTERS], app[SEARCH])
    opened.push_async_callback(chat_session.close)
    app[CHAT].retriever.start()  # the documentation vectors, in the background (health says when ready)
    opened.push_async_callback(app[CHAT].retriever.close)


async def _restore_damaged_branch(git: GitStore, db: Database) -> None:
    """A `main` that names no readable commit goes back to the newest commit a manifest generation
    recorded: every acknowledged write has one (assetcdn/control/publishing/publisher.py records it before answering)."""
    if not await git.run(git.branch_damaged):
        return
    rows = await db.fetch("SELECT commit_id FROM manifest_generations WHERE commit_id != '' ORDER BY generation DESC")
    known = list(dict.fromkeys(row[0] for row in rows))
    await git.run(git.restore_branch, known)


async def _cancel(task: asyncio.Task[None]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def _resources(app: web.Application) -> AsyncIterator[None]:
    """Everything `_open_resources` opened is closed on shutdown, in reverse order, and a failing start
    or close still closes the rest: an aiosqlite connection left open keeps a non-daemon thread that
    would hold the process alive after it was told to stop."""
    async with contextlib.AsyncExitStack() as opened:
        await _open_resources(app, opened)
        yield


async def _end_log_streams(app: web.Application) -> None:
    app[REQUEST_LOG].end_streams()


def create_app(settings: Settings, secrets: Secrets, data_dir: Path, *, demo: bool = False) -> web.Application:
    max_upload = settings.get("control", "max_upload_bytes")
    app = web.Application(client_max_size=max_upload + 1024 * 1024)
    app[REQUEST_LOG] = RequestLog(max_records=settings.get("logs", "max_records"),
                                  retention_days=settings.get("logs", "retention_days"))
    app.middlewares.append(request_log_middleware)  # outermost: sees every final status
    app.middlewares.append(metrics_middleware)  # outside the envelopes: counts the status clients get
    install_envelopes(app)
    app.middlewares.append(dashboard_origin_middleware)  # /dashboard only on its own listener
    app.on_response_prepare.append(stored_bytes_inert)
    app.middlewares.append(body_deadline_middleware(settings))
    app[METRICS] = Metrics("control")
    app[METRICS_KEY] = secrets.metrics_key
    app.middlewares.append(cluster.cluster_auth_middleware)
    app[cluster.EDGE_REPLAY_GUARD] = ReplayGuard()
    app.middlewares.append(auth_middleware)
    app.middlewares.append(audit_middleware)
    app[SETTINGS], app[SECRETS], app[DATA_DIR] = settings, secrets, Path(data_dir)
    app[DEMO] = demo
    # Every limit is counted in one store: the machine's counters.sqlite3 (shared with the edges), or Redis.
    app[COUNTERS] = counters_from_settings(settings.section("counters"), Path(data_dir))
    app[TRACK_LIMITER] = SharedRateLimiter(app[COUNTERS], analytics_track_per_client(settings))
    app[SEARCH_LIMITER] = SharedRateLimiter(app[COUNTERS], search_per_client(settings))
    app[CHAT_LIMITER] = SharedRateLimiter(app[COUNTERS], chat_per_client(settings))
    app[DASHBOARD] = DashboardConfig.from_settings(settings, dashboard_url(settings))  # a bad value stops start-up
    app[DASHBOARD_URL] = dashboard_url(settings)
    app[TRUSTED_PROXIES] = trusted_proxies(settings.get("control", "trusted_proxies"))  # a bad entry stops start-up
    app[DASHBOARD_PORTS] = {settings.get("server", "dashboard_port")}
    route_access: dict[web.AbstractRoute, Access] = {}
    route_audit: dict[web.AbstractRoute, str] = {}
    for route in ROUTES:
        registered = app.router.add_route(route.method, route.path, route.handler)
        if route.access is not None:
            route_access[registered] = route.access
        if route.audit is not None:
            route_audit[registered] = route.audit
    app[ROUTE_ACCESS], app[ROUTE_AUDIT] = route_access, route_audit
    app[SESSION_SCOPES] = session_scopes(ROUTES)
    # Unknown /api/... paths: 404 in the standard envelope (the envelope middleware renders it).
    app.router.add_route("*", "/api/{tail:.*}", _not_found)
    app.cleanup_ctx.append(_resources)
    app.cleanup_ctx.append(webhooks_context)  # after _resources: it needs the database and the publisher
    app.on_shutdown.append(_end_log_streams)
    return app
