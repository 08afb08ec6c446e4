"""Every limit of the CDN, named once, with its value from the configuration (assetcdn/shared/default.toml).

Each is counted by the shared counter store (assetcdn/shared/counter_store.py) under a key named after the
original service's: `transforms:YYYY-MM`, `purge:count:YYYY-MM-DD`, `rl:signed:<ip>`, `login:<ip>`...
Purge list sizes (30 URLs or tags) are request validation, not counters (assetcdn/control/routes/purge.py).
"""

from __future__ import annotations

from assetcdn.shared.config import Settings
from assetcdn.shared.counter_store import Limit


def transforms_per_month(settings: Settings) -> Limit:
    return Limit("transforms", int(settings.get("transform", "monthly_limit")), period="month")


def transform_misses_per_client(settings: Settings) -> Limit:
    """Variants one client address (IPv6: its /64) may have made a minute (`[transform]
    client_misses_per_minute`): a burst of distinct URLs cannot keep the image pool for itself."""
    return Limit("rl:transform", int(settings.get("transform", "client_misses_per_minute")), 60.0)


def transform_misses_per_client_day(settings: Settings) -> Limit:
    """Variants one client address may have made a UTC day (`[transform] client_misses_per_day`): one
    stranger cannot spend the installation's monthly quota."""
    return Limit("rl:transform-day", int(settings.get("transform", "client_misses_per_day")), period="day")


def placeholders_per_client(settings: Settings) -> Limit:
    """LQIP and BlurHash placeholders one client address may have made a minute (`[transform]
    client_placeholders_per_minute`); cached ones are not counted."""
    return Limit("rl:placeholder", int(settings.get("transform", "client_placeholders_per_minute")), 60.0)


def purges_per_day(settings: Settings) -> Limit:
    return Limit("purge:count", int(settings.get("purge", "daily_limit")), period="day")


def signed_per_client(settings: Settings) -> Limit:
    section = settings.section("counters")
    return Limit("rl:signed", int(section["signed_rate_limit"]), float(section["signed_rate_window_s"]))


def login_failures_per_client(settings: Settings) -> Limit:
    section = settings.section("dashboard")
    return Limit("login", int(section["login_max_failures"]), float(section["login_window_s"]))


def ai_vision_per_day(daily_budget: int) -> Limit:
    """`[ai_vision] daily_budget` analyses per UTC day (there, 0 switches the analyses off)."""
    return Limit("ai:vision", daily_budget, period="day")


def analytics_track_per_client(settings: Settings) -> Limit:
    section = settings.section("analytics")
    return Limit("rl:analytics", int(section["track_rate_limit"]), float(section["track_rate_window_s"]))


def search_per_client(settings: Settings) -> Limit:
    """GET /api/search per client address a minute (`[search] rate_limit_per_minute`)."""
    return Limit("rl", int(settings.get("search", "rate_limit_per_minute")), 60.0)


def chat_per_client(settings: Settings) -> Limit:
    """POST /api/chat per client address a minute (`[ai] chat_rate_limit_per_minute`)."""
    return Limit("rl", int(settings.get("ai", "chat_rate_limit_per_minute")), 60.0)
