"""Analytics: GET/POST /api/analytics (legacy envelope) and the edges' batches on POST /_cluster/analytics.

Edges count every delivery and ship the counts, rolled up, over the signed cluster protocol
(``control.analytics.ingest``); those are what statistics and insights count. A batch also carries
the edge's sample of its deliveries for the request log (GET /api/logs); the reply tells the edge
whether someone watches the live tail (``tail``), so it sends more. POST /api/analytics
records one hit. It is public, as the API reference says; an operator who wants the original service's
behaviour (the analytics key required on POST too) sets ``[analytics] track_requires_key = true``.
Being public, it is rate-limited per client address (``[analytics] track_rate_limit`` per
``track_rate_window_s``; 429 in the legacy envelope) unless the caller sends the analytics key; every
field is checked for type and range (``control.analytics.hits``) first, so only a valid hit is counted.
"""

from __future__ import annotations

import time

import orjson
from aiohttp import web

from assetcdn.control.analytics.daily_counts import DailyCounts
from assetcdn.control.analytics.hits import hit_from_track_body
from assetcdn.control.analytics.ingest import (
    BATCH_VERSIONS,
    MAX_BATCH_HITS,
    MAX_BATCH_ROWS,
    Rollups,
    batch_id_of,
    delivery_log_entry,
    hit_from_batch_item,
    node_of,
)
from assetcdn.control.analytics.params import ANALYTICS_DAYS_MAXIMUM, parse_days
from assetcdn.control.analytics.service import ANALYTICS, ANALYTICS_BATCHES, TRACK_LIMITER
from assetcdn.control.app_keys import SETTINGS
from assetcdn.control.identity.auth import AUTHENTICATOR, Key, credentials
from assetcdn.control.identity.rate_limit import Decision, client_key, rate_headers
from assetcdn.control.records.client_ip import request_ip
from assetcdn.control.records.service import REQUEST_LOG
from assetcdn.control.request_body import read_body
from assetcdn.shared.errors import LegacyError, bad_request
from assetcdn.shared.middleware import json_response
from assetcdn.shared.timestamps import utc_now_iso

from .cluster import CLUSTER_BODY

UNLIMITED = Decision(allowed=True, limit=0, remaining=0, reset_at=0.0, decided_at=0.0)
ANALYTICS_KEY = credentials(Key.ANALYTICS)


async def get_analytics(request: web.Request) -> web.Response:
    days = parse_days(request.query.get("days"), maximum=ANALYTICS_DAYS_MAXIMUM)
    report = await request.app[ANALYTICS].reports.analytics_report(days)
    return json_response({**report, "DateFetched": utc_now_iso()})


async def track_hit(request: web.Request) -> web.Response:
    # A caller with the analytics key (an operator's own middleware) is not limited; everyone else, a
    # wrong key included, is counted once the request is known to be valid: a refused one takes no slot.
    keyed = "x-api-key" in request.headers and \
        await request.app[AUTHENTICATOR].authenticate(request, ANALYTICS_KEY) is not None
    if not keyed and request.app[SETTINGS].section("analytics").get("track_requires_key", False):
        raise LegacyError(401, "Unauthorized", "POST /api/analytics requires the analytics key in x-api-key.")
    raw = await read_body(request)
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise LegacyError(400, "Invalid JSON body") from None
    hit = hit_from_track_body(body, now=time.time())
    decision = UNLIMITED
    if not keyed:
        decision = await request.app[TRACK_LIMITER].take("analytics:" + client_key(request_ip(request)))
    if not decision.allowed:
        raise LegacyError(429, "Rate limit exceeded",
                          f"At most {decision.limit} analytics hits per client in this window; "
                          f"retry in {decision.retry_after_s()} s.",
                          headers=rate_headers(decision))
    await request.app[ANALYTICS].record_hit(hit)
    return json_response({"ok": True}, headers=decision.headers())


async def ingest_batch(request: web.Request) -> web.Response:
    try:
        message = orjson.loads(request[CLUSTER_BODY] or b"{}")
    except orjson.JSONDecodeError:
        raise bad_request("Analytics batch is not JSON.", code="InvalidJson") from None
    if not isinstance(message, dict):
        raise bad_request('An analytics batch is {"v": 2, "zones": [...], "paths": [...], ...}.', code="InvalidBody")
    version = message.get("v", 1)
    if version not in BATCH_VERSIONS or isinstance(version, bool):
        raise bad_request(f"Unsupported analytics batch version; this control plane speaks "
                          f"v{' and v'.join(map(str, BATCH_VERSIONS))}.", code="InvalidVersion")
    if version == 1 and not isinstance(message.get("hits"), list):
        raise bad_request('A version 1 analytics batch is {"v": 1, "hits": [...]}.', code="InvalidBody")
    if version == 1 and len(message["hits"]) > MAX_BATCH_HITS:
        raise bad_request(f"At most {MAX_BATCH_HITS} hits per batch.", code="BatchTooLarge")
    if version == 2 and any(len(rows) > MAX_BATCH_ROWS for name in ("zones", "paths", "countries", "log")
                            if isinstance(rows := message.get(name), list)):
        raise bad_request(f"At most {MAX_BATCH_ROWS} rows per list of a batch.", code="BatchTooLarge")
    batch_id = batch_id_of(message)
    seen = request.app[ANALYTICS_BATCHES]
    request_log = request.app[REQUEST_LOG]
    # Version 2 replies say whether the live tail has a reader (the edge then samples more).
    tail = {"tail": request_log.subscribers > 0} if version == 2 else {}
    if batch_id is not None and batch_id in seen:
        return json_response({"recorded": 0, "rejected": 0, "duplicate": True, **tail})
    now, node = time.time(), node_of(message)
    if version == 1:
        items = message["hits"]
        accepted = [(hit, item) for item in items if (hit := hit_from_batch_item(item, now)) is not None]
        entries = [delivery_log_entry(hit, item, node) for hit, item in accepted]
        counts = DailyCounts()
        for hit, _ in accepted:
            counts.add_hit(hit)
        recorded, rejected = len(accepted), len(items) - len(accepted)
    else:
        rollups = Rollups(message, node, now)
        counts, entries = rollups.counts, rollups.entries
        recorded, rejected = rollups.rows - rollups.rejected, rollups.rejected
    if batch_id is not None:
        seen.add(batch_id)  # before the awaits: a concurrent retry of the same batch is a duplicate
    try:
        # Each store takes a batch id once and remembers it in SQLite: a retry after a failure of
        # the second write, or after a control restart, adds only what is missing. The counts
        # first: statistics do not wait for the request log's write.
        counted = await request.app[ANALYTICS].record(counts, batch_id, grouped=True)
        await request_log.ingest(batch_id, entries)
    except BaseException:
        if batch_id is not None:
            seen.discard(batch_id)
        raise
    if not counted:
        return json_response({"recorded": 0, "rejected": 0, "duplicate": True, **tail})
    return json_response({"recorded": recorded, "rejected": rejected, **tail})
