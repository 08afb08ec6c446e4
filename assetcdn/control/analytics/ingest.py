"""The edges' analytics batches (POST /_cluster/analytics): validation of each hit, and de-duplication.

Batch: ``{"v": 1, "batch": "<id, optional>", "node": "<edge worker, optional>", "hits": [{timestamp,
path, zone, status, bytes, cache, country[, method, requestId, ip]}, ...]}``. The optional fields
feed the request log (``control.request_log``). Delivery is at-least-once, so a batch id is counted
(and logged) once: both stores remember the ids they took in SQLite, in the same transaction, so a
retry is recognised even across a control restart. A hit that does not validate is skipped (and reported as rejected)
rather than losing the whole batch; nothing in a batch can make it fail as a whole (an edge would
retry it forever).
"""

from __future__ import annotations

import ipaddress
import re
from collections import OrderedDict
from typing import Any

from assetcdn.control.analytics.hits import (
    CACHE_STATUSES,
    COUNTRY,
    MAX_HIT_BYTES,
    UNKNOWN_COUNTRY,
    Hit,
    is_valid_path,
    zone_of_path,
)
from assetcdn.control.analytics.store import RETENTION_DAYS
from assetcdn.control.request_log import Entry, delivery_entry

BATCH_VERSION = 1
MAX_BATCH_HITS = 10_000
REMEMBERED_BATCHES = 10_000
FUTURE_SLACK_S = 300            # edge clocks may run a little ahead
_ZONE = re.compile(r"[a-z0-9._-]{1,64}")  # patterns here are used with fullmatch
_BATCH_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
_NODE = re.compile(r"[A-Za-z0-9._:/-]{1,64}")
_METHOD = re.compile(r"[A-Z]{1,16}")
_REQUEST_ID = re.compile(r"[A-Za-z0-9-]{1,64}")
UNKNOWN_NODE = "edge"


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
    if not is_valid_path(path):
        return None
    if status is None or not 100 <= status <= 599 or size is None or not 0 <= size <= MAX_HIT_BYTES:
        return None
    if not isinstance(cache, str) or cache.upper() not in CACHE_STATUSES:
        return None
    if not isinstance(country, str) or not COUNTRY.fullmatch(country):
        country = UNKNOWN_COUNTRY
    path = path.lstrip("/")
    if not isinstance(zone, str) or not _ZONE.fullmatch(zone):
        zone = zone_of_path(path)
    return Hit(timestamp=float(timestamp), path=path, zone=zone, status=status, bytes=size,
               cache=cache.upper(), country=country.upper())  # type: ignore[arg-type]


def batch_id_of(message: dict[str, Any]) -> str | None:
    """The batch's id, or None when it has none usable (then it cannot be de-duplicated)."""
    batch_id = message.get("batch")
    return batch_id if isinstance(batch_id, str) and _BATCH_ID.fullmatch(batch_id) else None


def node_of(message: dict[str, Any]) -> str:
    """The edge worker that sent the batch, as the request log names it."""
    node = message.get("node")
    return node if isinstance(node, str) and _NODE.fullmatch(node) else UNKNOWN_NODE


def delivery_log_entry(hit: Hit, item: dict[str, Any], node: str) -> Entry:
    """The request-log entry of a validated hit. Method, request id and client address are checked;
    what is missing or malformed becomes GET, null and ``unknown``."""
    method, request_id, ip = item.get("method"), item.get("requestId"), item.get("ip")
    if not isinstance(method, str) or not _METHOD.fullmatch(method):
        method = "GET"
    if not isinstance(request_id, str) or not _REQUEST_ID.fullmatch(request_id):
        request_id = None
    try:
        address = str(ipaddress.ip_address(ip)) if isinstance(ip, str) and len(ip) <= 64 else "unknown"
    except ValueError:
        address = "unknown"
    return delivery_entry(timestamp=hit.timestamp, method=method, path=hit.path, status=hit.status,
                          cache=hit.cache, request_id=request_id, ip=address, node=node)


class SeenBatches:
    """Batch ids taken recently (in memory, bounded): a retry that arrives while the first attempt
    is still being written is a duplicate at once. The stores' own records of ids are the durable
    check."""

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
