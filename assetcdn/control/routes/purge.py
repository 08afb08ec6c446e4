"""POST /api/purge: exactly one of `urls` (max 30), `tags` (max 30), `prefixes` (max 30) or
`purge_everything: true`, and `soft: true` to mark what it names stale instead of dropping it. `zone` beside
`tags` scopes them to one zone: the copies that carry a tag and the zone's own (assetcdn/shared/manifest.py
`zone_tag`); a zone that does not exist is 404, so that a typo does not purge nothing in silence.

A purge becomes a manifest generation, pushed to every edge; the response says which edges
acknowledged it, how many entries they dropped and how long each edge worker took to acknowledge
(`edges.latencyMs`). Errors use the legacy envelope. Purges per UTC day are limited (`[purge] daily_limit`,
counted in the shared counter store; 429 with Retry-After past it); the list sizes are validation. When another
process holds control.sqlite3's lock past the busy timeout, the purge is not recorded and is 503 `Retry-After: 1`
without using the quota; one recorded is answered and counted whatever happens after.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

import orjson
from aiohttp import web

from assetcdn.control.app_keys import COUNTERS, SETTINGS
from assetcdn.control.publishing.publisher import (
    PurgeMadeCancelled,
    purge_acknowledgements,
    purge_mode,
)
from assetcdn.control.publishing.service import PUBLISHER
from assetcdn.control.records.recording import AUDIT_META
from assetcdn.control.request_body import read_body
from assetcdn.control.storage.edge_config_store import zone_names
from assetcdn.control.storage.service import GIT
from assetcdn.shared.errors import LegacyError
from assetcdn.shared.limits import purges_per_day
from assetcdn.shared.middleware import json_response
from assetcdn.shared.paths import ZONE_NAME
from assetcdn.shared.purge_targets import MAX_ITEM_LENGTH, split_target, zone_path_prefix
from assetcdn.shared.timestamps import utc_now_iso

MAX_ITEMS = 30
MODES = ("urls", "tags", "prefixes", "purge_everything")
TAG = re.compile(r"[a-zA-Z0-9-]+")  # used with fullmatch: '$' would let "tag\n" through
NO_MODE = 'Request must include "urls" array, "tags" array, "prefixes" array, or "purge_everything": true'
NOUNS = {"urls": "URLs", "tags": "tags", "prefixes": "prefixes"}
ZONE_WITH_TAGS_ONLY = '"zone" scopes "tags" only'
NO_ZONE_NAME = '"zone" must be a zone name (^[a-z0-9-]{2,64}$)'


def _valid_url(url: Any) -> bool:
    return split_target(url) is not None and _plain_authority(url)


def _plain_authority(item: str) -> bool:
    """Whether an absolute URL has no user name or password, and a port (if any) that is a number within
    0-65535: no request carries userinfo (RFC 9110 4.2.4 forbids it in http(s) URIs), the item is echoed in
    the answer, the audit log and webhook events, and a host with a malformed port (`host:abc`) would be read
    as the bare host. (Checked here, not in split_target: the edges read stored purges with it.)"""
    if "://" not in item:
        return True
    parts = urlsplit(item)
    try:
        parts.port  # noqa: B018 - raises ValueError for a port that is no number or out of range
    except ValueError:
        return False
    return "@" not in parts.netloc


def _valid_prefix(prefix: Any) -> bool:
    """A prefix names a zone: any path of a URL (its host may be the zone's own), `/<zone>/...` as a path.
    A query or fragment is refused: the edge reads a prefix's path only, so `/<zone>/?v=2` would purge the
    whole zone where its sender meant far less. (Checked here, not in split_target: the edges read stored
    purges with it.)"""
    target = split_target(prefix)
    return (target is not None and "?" not in prefix and "#" not in prefix and _plain_authority(prefix)
            and (target.host is not None or zone_path_prefix(target.path)))


def parse_purge(body: Any) -> dict[str, Any]:
    """The purge command a request body asks for (the form the manifest generation records and
    assetcdn/shared/generation_push.py sends): one mode, `soft` when asked and `zone` when a tag purge names one
    (whether it exists is the caller's to check); LegacyError 400 otherwise."""
    if not isinstance(body, dict):
        raise LegacyError(400, NO_MODE)
    modes = [k for k in MODES if k in body]
    if len(modes) > 1:
        raise LegacyError(400, "Only one of purge_everything, urls, tags, or prefixes may be specified per request")
    if not modes:
        raise LegacyError(400, NO_MODE)
    soft = body.get("soft", False)
    if not isinstance(soft, bool):
        raise LegacyError(400, '"soft" must be true or false')
    extra: dict[str, Any] = {"soft": True} if soft else {}
    mode = modes[0]
    value = body[mode]
    if "zone" in body:
        # The other modes name what they purge already (a URL or prefix names its zone); everything is every zone's.
        if mode != "tags":
            raise LegacyError(400, ZONE_WITH_TAGS_ONLY)
        zone = body["zone"]
        if not isinstance(zone, str) or not ZONE_NAME.fullmatch(zone):  # fullmatch: "$" lets "zone\n" through
            raise LegacyError(400, NO_ZONE_NAME)
        extra["zone"] = zone
    if mode == "purge_everything":
        if value is not True:
            raise LegacyError(400, '"purge_everything" must be true')
        return {"everything": True, **extra}
    if not isinstance(value, list):
        raise LegacyError(400, f'"{mode}" must be an array')
    if not value:
        raise LegacyError(400, f"{mode} array is empty")
    if len(value) > MAX_ITEMS:
        raise LegacyError(400, f"Too many {NOUNS[mode]}: max {MAX_ITEMS} per request")
    if mode == "tags":
        invalid = [t for t in value if not isinstance(t, str) or not TAG.fullmatch(t)]
        if invalid:
            raise LegacyError(400, "Tags must be alphanumeric with hyphens only", extra={"invalid": invalid})
    elif mode == "urls":
        invalid = [u for u in value if not _valid_url(u)]
        if invalid:
            raise LegacyError(400, "URLs must be absolute http(s) URLs or paths on this CDN (/<zone>/...) of at "
                              f"most {MAX_ITEM_LENGTH} characters, without a user name or password, a malformed "
                              "port, dot segments or control characters",
                              extra={"invalid": invalid})
    else:
        invalid = [p for p in value if not _valid_prefix(p)]
        if invalid:
            raise LegacyError(400, "Prefixes must be absolute http(s) URLs or paths naming a zone (/<zone>/...) "
                              f"of at most {MAX_ITEM_LENGTH} characters, without a user name or password, a "
                              "malformed port, a query, a fragment, dot segments or control characters",
                              extra={"invalid": invalid})
    return {mode: list(dict.fromkeys(value)), **extra}


async def purge(request: web.Request) -> web.Response:
    raw = await read_body(request)
    try:
        body = orjson.loads(raw) if raw.strip() else None
    except orjson.JSONDecodeError:
        raise LegacyError(400, "Invalid JSON body") from None
    command = parse_purge(body)
    zone = command.get("zone")
    if zone is not None and zone not in await zone_names(request.app[GIT]):
        raise LegacyError(404, f"Zone '{zone}' does not exist")
    counters, limit = request.app[COUNTERS], purges_per_day(request.app[SETTINGS])
    quota = await counters.hit(limit)
    if not quota.allowed:
        raise LegacyError(429, f"Rate limit exceeded: max {limit.limit} purges per day",
                          headers=quota.refusal_headers())
    publisher = request.app[PUBLISHER]
    try:
        recorded = await publisher.record_purge(command)
    except PurgeMadeCancelled:  # control stopping: the purge was recorded all the same, so made, and counted
        raise
    except BaseException:
        await counters.refund(quota)  # a purge that was not recorded does not use the day's quota
        raise
    # Recorded, the purge is made (every edge applies it) and counted: nothing after this gives the quota back or
    # fails the answer, so a client never retries a purge that was made thinking it was not.
    generation, fan_out = recorded.generation, await publisher.send_purge(recorded)
    mode = purge_mode(command)
    purged: Any = "everything" if mode == "everything" else command[mode]
    soft = bool(command.get("soft"))
    scope = {"zone": zone} if zone is not None else {}  # an unscoped purge's answer is as it was before zones
    request[AUDIT_META] = {"purgeMode": mode, "soft": soft, **scope}
    _, pending = fan_out.nodes()
    # The day's purges left; none with the limit switched off (`purge.daily_limit = 0`), which leaves no count.
    remaining = {"remaining_today": quota.remaining} if quota.limit else {}
    return json_response({
        "success": True, "purged": purged, "mode": mode, "soft": soft, **scope, **remaining,
        "generation": generation.generation,
        # The facts purge.completed carries to webhooks, and how long each edge worker took to acknowledge.
        "edges": {**purge_acknowledgements(fan_out), "latencyMs": fan_out.latencies_ms},
        "note": ("Purged on every edge." if not pending else
                 f"Not yet acknowledged by {', '.join(pending)}; they apply it when they catch up."),
        "dateCreated": utc_now_iso(),
    }, headers=quota.headers())
