"""POST /api/purge: exactly one of `urls` (max 30), `tags` (max 30) or `purge_everything: true`.

A purge becomes a manifest generation, pushed to every edge; the response says which edges
acknowledged it, how many entries they dropped and how long each edge worker took to acknowledge
(`edges.latencyMs`). Errors use the legacy envelope. Purges per UTC day are limited (`[purge] daily_limit`,
counted in the shared counter store; 429 with Retry-After past it); the list sizes are validation.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

import orjson
from aiohttp import web

from assetcdn.control.app_keys import COUNTERS, SETTINGS
from assetcdn.control.publishing.publisher import purge_acknowledgements
from assetcdn.control.publishing.service import PUBLISHER
from assetcdn.control.request_body import read_body
from assetcdn.shared.errors import LegacyError
from assetcdn.shared.limits import purges_per_day
from assetcdn.shared.middleware import json_response
from assetcdn.shared.paths import InvalidPath, parse_cdn_path
from assetcdn.shared.timestamps import utc_now_iso

MAX_ITEMS = 30
TAG = re.compile(r"[a-zA-Z0-9-]+")  # used with fullmatch: '$' would let "tag\n" through
# urlsplit drops tabs and newlines anywhere in a URL (WHATWG): refuse them rather than purge another URL.
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _url_path(url: Any) -> str | None:
    if not isinstance(url, str) or not url or len(url) > 2048 or _CONTROL.search(url):
        return None
    if "://" in url:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            return None
        path = parts.path
    elif url.startswith("/"):
        path = url.split("?", 1)[0]
    else:
        return None
    try:
        return parse_cdn_path(path)
    except InvalidPath:
        return None


def parse_purge(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise LegacyError(400, 'Request must include "urls" array, "tags" array, or "purge_everything": true')
    modes = [k for k in ("urls", "tags", "purge_everything") if k in body]
    if len(modes) > 1:
        raise LegacyError(400, "Only one of purge_everything, urls, or tags may be specified per request")
    if not modes:
        raise LegacyError(400, 'Request must include "urls" array, "tags" array, or "purge_everything": true')
    mode = modes[0]
    value = body[mode]
    if mode == "purge_everything":
        if value is not True:
            raise LegacyError(400, '"purge_everything" must be true')
        return {"everything": True}
    if not isinstance(value, list):
        raise LegacyError(400, f'"{mode}" must be an array')
    if not value:
        raise LegacyError(400, f"{mode} array is empty")
    if len(value) > MAX_ITEMS:
        raise LegacyError(400, f"Too many {'URLs' if mode == 'urls' else 'tags'}: max {MAX_ITEMS} per request")
    if mode == "tags":
        invalid = [t for t in value if not isinstance(t, str) or not TAG.fullmatch(t)]
        if invalid:
            raise LegacyError(400, "Tags must be alphanumeric with hyphens only", extra={"invalid": invalid})
        return {"tags": list(dict.fromkeys(value))}
    invalid = [u for u in value if _url_path(u) is None]
    if invalid:
        raise LegacyError(400, "URLs must be absolute http(s) URLs or paths of assets on this CDN "
                          "(/<zone>/v1/<category>/<file> or /stocks/...)", extra={"invalid": invalid})
    return {"urls": list(dict.fromkeys(value))}


async def purge(request: web.Request) -> web.Response:
    raw = await read_body(request)
    try:
        body = orjson.loads(raw) if raw.strip() else None
    except orjson.JSONDecodeError:
        raise LegacyError(400, "Invalid JSON body") from None
    command = parse_purge(body)
    counters, limit = request.app[COUNTERS], purges_per_day(request.app[SETTINGS])
    quota = await counters.hit(limit)
    if not quota.allowed:
        raise LegacyError(429, f"Rate limit exceeded: max {limit.limit} purges per day",
                          headers=quota.refusal_headers())
    try:
        generation, fan_out = await request.app[PUBLISHER].purge(command)
    except BaseException:
        await counters.refund(quota)  # a purge that was not recorded does not use the day's quota
        raise
    purged: Any = "everything" if command.get("everything") else command.get("urls") or command.get("tags")
    _, pending = fan_out.nodes()
    return json_response({
        "success": True, "purged": purged, "remaining_today": quota.remaining, "generation": generation.generation,
        # The facts purge.completed carries to webhooks, and how long each edge worker took to acknowledge.
        "edges": {**purge_acknowledgements(fan_out), "latencyMs": fan_out.latencies_ms},
        "note": ("Purged on every edge." if not pending else
                 f"Not yet acknowledged by {', '.join(pending)}; they apply it when they catch up."),
        "dateCreated": utc_now_iso(),
    }, headers=quota.headers())
