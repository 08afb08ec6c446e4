"""The control plane application: built by a factory from a table of routes, each declaring its access."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace
from pathlib import Path

from aiohttp import web
from aiohttp.typedefs import Handler

from assetcdn.control.acme.service import acme_context
from assetcdn.control.ai.service import ai_context
from assetcdn.control.analytics.service import TRACK_LIMITER, analytics_context
from assetcdn.control.app_keys import (
    COUNTERS,
    DASHBOARD,
    DATA_DIR,
    DEMO,
    SECRETS,
    SETTINGS,
)
from assetcdn.control.chat.service import CHAT_LIMITER, chat_context
from assetcdn.control.identity.auth import (
    ROUTE_ACCESS,
    Access,
    Key,
    auth_middleware,
    credentials,
    keyed_answers_unshared,
)
from assetcdn.control.identity.dashboard_config import DashboardConfig
from assetcdn.control.identity.dashboard_origin import (
    DASHBOARD_PORTS,
    DASHBOARD_URL,
    dashboard_origin_middleware,
    stored_bytes_inert,
)
from assetcdn.control.identity.rate_limit import SharedRateLimiter
from assetcdn.control.identity.service import SESSION_SCOPES, identity_context
from assetcdn.control.publishing.service import publishing_context
from assetcdn.control.records.client_ip import TRUSTED_PROXIES, trusted_proxies
from assetcdn.control.records.recording import ROUTE_AUDIT, audit_middleware, request_log_middleware
from assetcdn.control.records.request_log import RequestLog
from assetcdn.control.records.service import REQUEST_LOG, records_context
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
from assetcdn.control.search.service import SEARCH_LIMITER, search_context
from assetcdn.control.storage.service import storage_context
from assetcdn.control.video.service import video_context
from assetcdn.control.webhooks.service import webhooks_context
from assetcdn.shared.cluster import PREFIX, ReplayGuard
from assetcdn.shared.config import Settings
from assetcdn.shared.cors import cross_origin
from assetcdn.shared.counter_store import counters_from_settings
from assetcdn.shared.dashboard_url import dashboard_url
from assetcdn.shared.http_server import HANDLER_ARGS
from assetcdn.shared.limits import (
    analytics_track_per_client,
    chat_per_client,
    search_per_client,
)
from assetcdn.shared.metrics import (
    METRICS,
    METRICS_KEY,
    Metrics,
    metrics_handler,
    metrics_middleware,
)
from assetcdn.shared.middleware import install_envelopes, no_such_method
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
    Route("OPTIONS", "/api/search", search.search_preflight),
    Route("POST", "/api/chat", chat.chat),
    Route("GET", "/api/health", health.health),
    Route("GET", "/api/logs", logs.logs, ACCOUNT),
    Route("GET", "/metrics", metrics_handler),
    Route("GET", "/api/openapi.json", openapi_document),
    Route("GET", "/api/docs", api_docs),
    Route("POST", PREFIX + "/register", cluster.register),
    Route("POST", PREFIX + "/heartbeat", cluster.heartbeat),
    Route("POST", PREFIX + "/leave", cluster.leave),
    Route("GET", PREFIX + "/changes", cluster.changes),
    Route("GET", PREFIX + "/blobs/{blob_id}", cluster.blob),
    Route("GET", PREFIX + "/config", cluster.config),
    Route("GET", PREFIX + TLS_STATE_PATH, cluster.tls_state),
    Route("POST", PREFIX + "/analytics", analytics.ingest_batch),
)


def with_heads(routes: tuple[Route, ...]) -> list[Route]:
    """`routes`, each GET route followed by its HEAD (RFC 9110 9.3.2: HEAD is allowed wherever GET is), with the
    GET's handler and credentials, where the table lists no HEAD for its path (aiohttp leaves out the body); the
    cluster protocol's routes as listed."""
    listed = {route.path for route in routes if route.method == "HEAD"}
    found: list[Route] = []
    for route in routes:
        found.append(route)
        if route.method == "GET" and route.path not in listed and not route.path.startswith(PREFIX + "/"):
            found.append(replace(route, method="HEAD"))
    return found


def session_scopes(routes: tuple[Route, ...]) -> frozenset[str]:
    """Scopes a session may put on a token: those whose every route the session itself may call, so a
    token minted in the dashboard never reaches further than the dashboard (pipeline, AI)."""
    scoped = [route.access for route in routes if route.access is not None and route.access.scope]
    return frozenset(a.scope for a in scoped if a.scope and all(o.session for o in scoped if o.scope == a.scope))


# Each package's context, in the order they open (each needs what those before it opened); they close
# in reverse, and a failing start or close still closes the rest: an aiosqlite connection left open keeps
# a non-daemon thread that would hold the process alive after it was told to stop.
PACKAGES: tuple[Callable[[web.Application], contextlib.AbstractAsyncContextManager[None]], ...] = (
    storage_context, publishing_context, records_context, identity_context, acme_context, video_context,
    analytics_context, ai_context, search_context, chat_context, webhooks_context,
)


async def _resources(app: web.Application) -> AsyncIterator[None]:
    async with contextlib.AsyncExitStack() as opened:
        # Closed last, after every package that counts with it: its store's thread would otherwise hold the
        # process for a second after it was told to stop.
        opened.push_async_callback(app[COUNTERS].close)
        for package in PACKAGES:
            await opened.enter_async_context(package(app))
        yield


async def _end_log_streams(app: web.Application) -> None:
    app[REQUEST_LOG].end_streams()


def create_app(settings: Settings, secrets: Secrets, data_dir: Path, *, demo: bool = False) -> web.Application:
    max_upload = settings.get("control", "max_upload_bytes")
    app = web.Application(client_max_size=max_upload + 1024 * 1024,
                          handler_args=HANDLER_ARGS)  # aiohttp's head limits (assetcdn/shared/http_server.py)
    app[REQUEST_LOG] = RequestLog(max_records=settings.get("logs", "max_records"),
                                  retention_days=settings.get("logs", "retention_days"))
    app.middlewares.append(request_log_middleware)  # outermost: sees every final status
    app.middlewares.append(metrics_middleware)  # outside the envelopes: counts the status clients get
    install_envelopes(app)
    app.middlewares.append(dashboard_origin_middleware)  # /dashboard only on its own listener
    app.on_response_prepare.append(stored_bytes_inert)
    app.on_response_prepare.append(keyed_answers_unshared)
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
    for route in with_heads(ROUTES):
        registered = app.router.add_route(route.method, route.path, route.handler)
        if route.access is not None:
            route_access[registered] = route.access
        if route.audit is not None:
            route_audit[registered] = route.audit
    app[ROUTE_ACCESS], app[ROUTE_AUDIT] = route_access, route_audit
    app[SESSION_SCOPES] = session_scopes(ROUTES)
    # Unknown /api/... paths: 404 in the standard envelope (the envelope middleware renders it); a method the path's
    # routes do not take: 405 with Allow.
    # /api/search's is readable from any origin, as its other answers (assetcdn/shared/cors.py).
    app.router.add_route("*", "/api/search", cross_origin(no_such_method))
    app.router.add_route("*", "/api/{tail:.*}", no_such_method)
    app.cleanup_ctx.append(_resources)
    app.on_shutdown.append(_end_log_streams)
    return app
