"""The control app's configuration as typed state (aiohttp AppKeys), set by `assetcdn.control.app`.

Each package owns the keys of its services and the context that opens them (its ``service.py``:
storage, publishing, records, identity, acme, video, analytics, ai, search, chat, webhooks); this
module holds only what every package reads: settings, secrets, the data directory, the counters.
"""

from __future__ import annotations

from pathlib import Path

from aiohttp import web

from assetcdn.control.identity.dashboard_config import DashboardConfig
from assetcdn.shared.config import Settings
from assetcdn.shared.counter_store import Counters
from assetcdn.shared.host_url import host_url
from assetcdn.shared.secrets import Secrets

SETTINGS = web.AppKey("settings", Settings)
SECRETS = web.AppKey("secrets", Secrets)
DATA_DIR = web.AppKey("data_dir", Path)
DEMO = web.AppKey("demo", bool)
COUNTERS = web.AppKey("counters", Counters)  # every limit control enforces (assetcdn/shared/counter_store.py)
DASHBOARD = web.AppKey("dashboard", DashboardConfig)  # the dashboard's settings (a bad value stops start-up)


def public_url(app: web.Application) -> str:
    return public_url_of(app[SETTINGS])


def public_url_of(settings: Settings) -> str:
    """server.public_url, else http://<host>:<edge_port> (where `assetcdn up` serves)."""
    configured = settings.get("server", "public_url")
    if configured:
        return configured.rstrip("/")
    return host_url(settings.get('server', 'host'), settings.get('server', 'edge_port'))
