"""One served request as analytics sees it, and the POST /api/analytics body that describes one."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from assetcdn.shared import deliveries
from assetcdn.shared.analytics_keys import MAX_PATH_LENGTH, UNKNOWN_COUNTRY, zone_of
from assetcdn.shared.cache_results import COUNTED
from assetcdn.shared.errors import LegacyError
from assetcdn.shared.paths import STOCK_ROOT

CacheStatus = Literal["HIT", "MISS", "STALE", "BYPASS"]  # the counters of assetcdn/shared/cache_results.py
CACHE_STATUSES: frozenset[str] = frozenset(result.value for result in COUNTED)
# Counts of deliveries outside every zone (a path's first segment that names none) go to this one
# bucket: no zone is named "", and a report's zone filter cannot name it.
UNKNOWN_ZONE = ""
# Zones that are not in clients/: the stock pool, and "api" (/api/transform, /api/stream).
BUILT_IN_ZONES = frozenset({STOCK_ROOT, "api"})
# One response of at most 1 TiB: far above any file this service stores, far below what could make a
# day's counters overflow (they saturate at COUNTER_MAX in any case).
MAX_HIT_BYTES = 2**40
# Every counter and every reported total saturates here: the largest integer a JSON client written in
# JavaScript reads exactly, and far from SQLite's 64-bit limit.
COUNTER_MAX = 2**53 - 1
COUNTRY = re.compile(r"[A-Za-z]{2}")          # used with fullmatch: no trailing newline slips through
_CONTROL_CHARACTER = re.compile(r"[\x00-\x1f\x7f]")


@dataclass(frozen=True, slots=True)
class Hit:
    timestamp: float        # unix seconds; the UTC date of it is the day counted
    path: str               # CDN path without the leading slash, e.g. "akande/v1/logos/logo.svg"
    zone: str
    status: int
    bytes: int
    cache: CacheStatus
    country: str            # ISO 3166-1 alpha-2, "XX" when unknown


def is_asset_delivery(hit: Hit) -> bool:
    """A hit the top-asset lists count (assetcdn/shared/deliveries.py)."""
    return deliveries.is_asset_delivery(hit.status, hit.path)


def is_valid_path(value: object) -> bool:
    """A path a hit may name: a string of at most MAX_PATH_LENGTH characters, no control characters."""
    return isinstance(value, str) and len(value) <= MAX_PATH_LENGTH and not _CONTROL_CHARACTER.search(value)


def hit_from_track_body(body: Any, *, now: float) -> Hit:
    """Build a hit from a POST /api/analytics body ``{path, bytes, country, cache[, status]}``.

    Defaults as the API reference: path ``/``, bytes 0, country ``XX``, cache ``MISS``; status
    (our addition, for error reports) 200. Raises a legacy-envelope 400 for a wrong type.
    """
    if not isinstance(body, dict):
        raise LegacyError(400, "Invalid JSON body")
    path = body.get("path", "/")
    size = body.get("bytes", 0)
    country = body.get("country", UNKNOWN_COUNTRY)
    cache = body.get("cache", "MISS")
    status = body.get("status", 200)
    if not is_valid_path(path):
        raise LegacyError(400, f"'path' must be a string of at most {MAX_PATH_LENGTH} characters, without "
                          "control characters.")
    if isinstance(size, bool) or not isinstance(size, int) or not 0 <= size <= MAX_HIT_BYTES:
        raise LegacyError(400, f"'bytes' must be an integer from 0 to {MAX_HIT_BYTES}.")
    if not isinstance(country, str) or not COUNTRY.fullmatch(country):
        raise LegacyError(400, "'country' must be a two-letter ISO 3166-1 code (XX when unknown).")
    if not isinstance(cache, str) or cache.upper() not in CACHE_STATUSES:
        raise LegacyError(400, "'cache' must be HIT or MISS (STALE and BYPASS are also accepted).")
    if isinstance(status, bool) or not isinstance(status, int) or not 100 <= status <= 599:
        raise LegacyError(400, "'status' must be an HTTP status code (100-599).")
    cdn_path = path.lstrip("/")
    return Hit(timestamp=now, path=cdn_path, zone=zone_of(cdn_path), status=status,
               bytes=size, cache=cache.upper(), country=country.upper())  # type: ignore[arg-type]
