"""Typed application state of the control plane (aiohttp AppKeys), set up by `assetcdn.control.app`."""

from __future__ import annotations

from pathlib import Path

from aiohttp import web

from assetcdn.control.acme.issuer import CertificateIssuer
from assetcdn.control.analytics.ingest import SeenBatches
from assetcdn.control.analytics.store import AnalyticsStore
from assetcdn.control.chat.concierge import Concierge
from assetcdn.control.chat.quota import ChatQuota
from assetcdn.control.identity.dashboard_config import DashboardConfig
from assetcdn.control.identity.passkeys.ceremony import PasskeyCeremonies
from assetcdn.control.identity.rate_limit import RateLimiter
from assetcdn.control.identity.session import SessionBook
from assetcdn.control.identity.signin import SignIn
from assetcdn.control.identity.tokens import TokenStore
from assetcdn.control.publishing.edge_registry import EdgeRegistry
from assetcdn.control.publishing.publisher import Publisher
from assetcdn.control.records.audit import AuditLog
from assetcdn.control.records.request_log import RequestLog
from assetcdn.control.search.engine import SearchEngine
from assetcdn.control.search.index import SearchIndex
from assetcdn.control.storage.database import Database
from assetcdn.control.storage.edge_config_store import EdgeConfigStore
from assetcdn.control.storage.git_store import GitStore
from assetcdn.control.storage.manifest_store import ManifestStore
from assetcdn.control.storage.zones_store import ZoneStore
from assetcdn.control.video.ingest import VideoIngester
from assetcdn.shared.config import Settings
from assetcdn.shared.counter_store import Counters
from assetcdn.shared.secrets import Secrets

SETTINGS = web.AppKey("settings", Settings)
SECRETS = web.AppKey("secrets", Secrets)
DATA_DIR = web.AppKey("data_dir", Path)
DEMO = web.AppKey("demo", bool)
GIT = web.AppKey("git", GitStore)
DB = web.AppKey("db", Database)
MANIFEST = web.AppKey("manifest", ManifestStore)
TOKENS = web.AppKey("tokens", TokenStore)
ZONES = web.AppKey("zones", ZoneStore)
VIDEO_INGEST = web.AppKey("video_ingest", VideoIngester)
REGISTRY = web.AppKey("registry", EdgeRegistry)
PUBLISHER = web.AppKey("publisher", Publisher)
EDGE_CONFIG = web.AppKey("edge_config", EdgeConfigStore)
COUNTERS = web.AppKey("counters", Counters)  # every limit control enforces (assetcdn/shared/counter_store.py)
ANALYTICS = web.AppKey("analytics", AnalyticsStore)
ANALYTICS_BATCHES = web.AppKey("analytics_batches", SeenBatches)
TRACK_LIMITER = web.AppKey("track_limiter", RateLimiter)  # POST /api/analytics, per client
AUDIT = web.AppKey("audit", AuditLog)
REQUEST_LOG = web.AppKey("request_log", RequestLog)
DASHBOARD = web.AppKey("dashboard", DashboardConfig)
SESSIONS = web.AppKey("sessions", SessionBook)
# The token scopes every one of whose routes accepts the session: what a dashboard session may grant.
SESSION_SCOPES: web.AppKey[frozenset[str]] = web.AppKey("session_scopes")
SIGN_IN = web.AppKey("sign_in", SignIn)
PASSKEYS = web.AppKey("passkeys", PasskeyCeremonies)
SEARCH_LIMITER = web.AppKey("search_limiter", RateLimiter)  # GET /api/search, per client
CHAT_LIMITER = web.AppKey("chat_limiter", RateLimiter)      # POST /api/chat, per client
SEARCH_INDEX = web.AppKey("search_index", SearchIndex)
SEARCH = web.AppKey("search", SearchEngine)
CHAT = web.AppKey("chat", Concierge)
CHAT_QUOTA = web.AppKey("chat_quota", ChatQuota)
CERTIFICATES = web.AppKey("certificates", CertificateIssuer)  # ACME orders and the TLS state edges get


def public_url(app: web.Application) -> str:
    return public_url_of(app[SETTINGS])


def public_url_of(settings: Settings) -> str:
    """server.public_url, else http://<host>:<edge_port> (where `assetcdn up` serves)."""
    configured = settings.get("server", "public_url")
    if configured:
        return configured.rstrip("/")
    return f"http://{settings.get('server', 'host')}:{settings.get('server', 'edge_port')}"
