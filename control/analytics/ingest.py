"""The edges' analytics batches (POST /_cluster/analytics): validation of each hit, and de-duplication.

Batch: ``{"v": 1, "batch": "<id, optional>", "hits": [{timestamp, path, zone, status, bytes, cache,
country}, ...]}``. Delivery is at-least-once, so a batch id acknowledged recently is not counted
again. A hit that does not validate is skipped (and reported as rejected) rather than losing the
whole batch.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from typing import Any

from control.analytics.hits import (
    CACHE_STATUSES,
    MAX_HIT_BYTES,
    MAX_PATH_LENGTH,
    UNKNOWN_COUNTRY,
    Hit,
    zone_of_path,
)
from control.analytics.store import RETENTION_DAYS

BATCH_VERSION = 1
MAX_BATCH_HITS = 10_000
REMEMBERED_BATCHES = 10_000
FUTURE_SLACK_S = 300            # edge clocks may run a little ahead
_COUNTRY = re.compile(r"^[A-Za-z]{2}$")
_ZONE = re.compile(r"^[a-z0-9._-]{1,64}$")


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def hit_from_batch_item(item: Any, now: float) -> Hit | None:
    """One hit of an edge batch, or None when it does not validate (or is outside the retention)."""
    if not isinstance(item, dict):
        return None
    timestamp = item.get("timestamp")
    path = item.get("path")
    status, size = _int(item.get("status")), _int(item.get("bytes"))
    cache, country, zone = item.get("cache"), item.get("country", UNKNOWN_COUNTRY), item.get("zone")
    if isinstance(timestamp, bool) or not isinstance(timestamp, int | float):
        return None
    if not now - RETENTION_DAYS * 86400 <= timestamp <= now + FUTURE_SLACK_S:
        return None
    if not isinstance(path, str) or len(path) > MAX_PATH_LENGTH or "\x00" in path:
        return None
    if status is None or not 100 <= status <= 599 or size is None or not 0 <= size <= MAX_HIT_BYTES:
        return None
    if not isinstance(cache, str) or cache.upper() not in CACHE_STATUSES:
        return None
    if not isinstance(country, str) or not _COUNTRY.match(country):
        country = UNKNOWN_COUNTRY
    path = path.lstrip("/")
    if not isinstance(zone, str) or not _ZONE.match(zone):
        zone = zone_of_path(path)
    return Hit(timestamp=float(timestamp), path=path, zone=zone, status=status, bytes=size,
               cache=cache.upper(), country=country.upper())  # type: ignore[arg-type]


class SeenBatches:
    """Batch ids acknowledged recently (in memory, bounded): a retried batch is not counted twice.

    Held in memory only: a retry that straddles a control restart can count twice.
    """

    def __init__(self, capacity: int = REMEMBERED_BATCHES) -> None:
        self._ids: OrderedDict[str, None] = OrderedDict()
        self._capacity = capacity

    def __contains__(self, batch_id: object) -> bool:
        return batch_id in self._ids

    def discard(self, batch_id: str) -> None:
        self._ids.pop(batch_id, None)

    def add(self, batch_id: str) -> None:
        self._ids[batch_id] = None
        while len(self._ids) > self._capacity:
            self._ids.popitem(last=False)
