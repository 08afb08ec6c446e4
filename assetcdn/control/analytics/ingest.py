"""The edges' analytics batches (POST /_cluster/analytics): validation of each row, and de-duplication.

Version 2 (what edges send): the deliveries counted at the edge since its last batch, rolled up, and
a sample of them for the request log (``assetcdn/edge/delivery_log.py``)::

    {"v": 2, "batch": "<id>", "node": "<edge worker>",
     "zones":     [[hour, zone, cache, requests, bytes], ...],
     "paths":     [[hour, zone, path, status, requests, bytes], ...],   # path null: "other" paths
     "countries": [[hour, zone, country, requests], ...],
     "log":       [[timestamp, method, path, status, cache, requestId, ip, sampleRate], ...]}

``hour`` is the unix time the hour starts; ``status`` is exact for errors (>= 400), else a class:
200 for deliveries of a file (2xx, 304), 300 for the rest; every list holds at most MAX_BATCH_ROWS rows.
A path row whose path is null counts the paths the edge did not name (its cap per zone and hour); zone
"" counts what the edge found in no zone. Control checks zones itself (``assetcdn/control/analytics/zones.py``).
Version 1 (an edge of an earlier release): one item per delivery, ``{"v": 1, "batch", "node",
"hits": [{timestamp, path, zone, status, bytes, cache, country[, method, requestId, ip]}, ...]}``,
each also logged.

Delivery is at-least-once, so a batch id is counted (and logged) once: both stores remember the ids
they took in SQLite, in the same transaction, so a retry is recognised even across a control
restart. A row that does not validate is skipped (and reported as rejected) rather than losing the
whole batch; nothing in a batch can make it fail as a whole (an edge would retry it forever).
"""

from __future__ import annotations

import ipaddress
import re
from collections import OrderedDict
from typing import Any

from assetcdn.control.analytics.daily_counts import DailyCounts
from assetcdn.control.analytics.hits import (
    CACHE_STATUSES,
    COUNTRY,
    MAX_HIT_BYTES,
    Hit,
    is_valid_path,
)
from assetcdn.control.analytics.tables import RETENTION_DAYS, utc_day
from assetcdn.control.records.request_log import Entry, delivery_entry
from assetcdn.shared.analytics_keys import UNKNOWN_COUNTRY, zone_of

BATCH_VERSIONS = (1, 2)
MAX_BATCH_HITS = 10_000
MAX_BATCH_ROWS = 10_000     # per list of a version 2 batch
HOUR_S = 3600
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
        zone = zone_of(path)
    return Hit(timestamp=float(timestamp), path=path, zone=zone, status=status, bytes=size,
               cache=cache.upper(), country=country.upper())  # type: ignore[arg-type]


def _address(ip: Any) -> str:
    try:
        return str(ipaddress.ip_address(ip)) if isinstance(ip, str) and len(ip) <= 64 else "unknown"
    except ValueError:
        return "unknown"


class Rollups:
    """A version 2 batch checked row by row and folded into daily counts (``counts``), with its
    request-log entries (``entries``) and the number of rows skipped (``rejected``)."""

    def __init__(self, message: dict[str, Any], node: str, now: float) -> None:
        self.counts = DailyCounts()
        self.entries: list[Entry] = []
        self.rows = 0
        self.rejected = 0
        self._now = now
        self._days: dict[int, str | None] = {}
        self._zones: dict[str, bool] = {}
        self._addresses: dict[str, str] = {}
        day_of, zone_ok, rejected = self._day, self._zone_ok, 0
        # Per row: type() is int (not isinstance) also refuses booleans; one batch holds thousands of rows.
        add_zone = self.counts.add_zone
        for hour, zone, cache, requests, size in self._rows(message, "zones", 5):
            day = day_of(hour)
            if (day is not None and zone_ok(zone) and type(cache) is str and cache in CACHE_STATUSES
                    and type(requests) is int and 0 <= requests <= MAX_HIT_BYTES
                    and type(size) is int and 0 <= size <= MAX_HIT_BYTES):
                add_zone(day, zone, cache, requests, size)
            else:
                rejected += 1
        add_path = self.counts.add_path
        for hour, zone, path, status, requests, size in self._rows(message, "paths", 6):
            day = day_of(hour)
            if (day is not None and zone_ok(zone) and type(status) is int and 100 <= status <= 599
                    and type(requests) is int and 0 <= requests <= MAX_HIT_BYTES
                    and type(size) is int and 0 <= size <= MAX_HIT_BYTES and (path is None or is_valid_path(path))):
                add_path(day, zone, None if path is None else path.lstrip("/"), status, requests, size)
            else:
                rejected += 1
        add_country = self.counts.add_country
        for hour, zone, country, requests in self._rows(message, "countries", 4):
            day = day_of(hour)
            if day is not None and zone_ok(zone) and type(requests) is int and 0 <= requests <= MAX_HIT_BYTES:
                add_country(day, zone, country if type(country) is str and COUNTRY.fullmatch(country)
                            else UNKNOWN_COUNTRY, requests)
            else:
                rejected += 1
        for row in self._rows(message, "log", 8):
            entry = self._entry(row, node)
            if entry is None:
                rejected += 1
            else:
                self.entries.append(entry)
        self.rejected += rejected

    def _zone_ok(self, zone: Any) -> bool:
        if type(zone) is not str:
            return False
        known = self._zones.get(zone)
        if known is None:
            # What a version 1 hit's zone could be: a zone name, or the first segment of its path.
            known = _ZONE.fullmatch(zone) is not None or ("/" not in zone and is_valid_path(zone))
            if len(self._zones) < 1024:
                self._zones[zone] = known
        return known

    def _address(self, ip: Any) -> str:
        if type(ip) is not str:
            return "unknown"
        address = self._addresses.get(ip)
        if address is None:
            address = _address(ip)
            if len(self._addresses) < 1024:
                self._addresses[ip] = address
        return address

    def _rows(self, message: dict[str, Any], name: str, width: int) -> list[list[Any]]:
        rows = message.get(name) or []
        if not isinstance(rows, list):
            return []
        good = [row for row in rows if isinstance(row, list) and len(row) == width]
        self.rows += len(rows)
        self.rejected += len(rows) - len(good)
        return good

    def _day(self, hour: Any) -> str | None:
        """The UTC date of an hour's start, or None when it is not one inside the retention."""
        if type(hour) is not int:
            return None
        if hour in self._days:
            return self._days[hour]
        start = hour
        day = None
        if (start % HOUR_S == 0
                and self._now - RETENTION_DAYS * 86400 - HOUR_S <= start <= self._now + FUTURE_SLACK_S):
            day = utc_day(start).isoformat()
        if len(self._days) < 1024:
            self._days[hour] = day
        return day

    def _entry(self, row: list[Any], node: str) -> Entry | None:
        timestamp, method, path, status, cache, request_id, ip, rate = row
        if (isinstance(timestamp, bool) or not isinstance(timestamp, int | float)
                or not self._now - RETENTION_DAYS * 86400 <= timestamp <= self._now + FUTURE_SLACK_S):
            return None
        status = _int(status)
        if not is_valid_path(path) or status is None or not 100 <= status <= 599:
            return None
        if not isinstance(cache, str) or cache not in CACHE_STATUSES:
            return None
        if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 < rate <= 1:
            return None
        if not isinstance(method, str) or not _METHOD.fullmatch(method):
            method = "GET"
        if not isinstance(request_id, str) or not _REQUEST_ID.fullmatch(request_id):
            request_id = None
        return delivery_entry(timestamp=float(timestamp), method=method, path=path.lstrip("/"), status=status,
                              cache=cache, request_id=request_id, ip=self._address(ip), node=node,
                              sample_rate=float(rate))


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
    return delivery_entry(timestamp=hit.timestamp, method=method, path=hit.path, status=hit.status,
                          cache=hit.cache, request_id=request_id, ip=_address(ip), node=node)


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
