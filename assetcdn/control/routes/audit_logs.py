"""Core plane: GET /api/core/audit-logs (AccountKey). Query: ``days`` (1-90, default 7), ``action``
(exact, e.g. ``zone.create``, or a family, e.g. ``zone``), ``limit`` (1-5000, default 500); values
out of range are clamped, as the API reference says."""

from __future__ import annotations

from aiohttp import web

from assetcdn.control.analytics.params import parse_days, parse_limit
from assetcdn.control.records.audit import DAYS_DEFAULT, DAYS_MAXIMUM, LIMIT_DEFAULT, LIMIT_MAXIMUM
from assetcdn.control.records.service import AUDIT
from assetcdn.shared.errors import bad_request
from assetcdn.shared.middleware import json_response
from assetcdn.shared.timestamps import utc_now_iso

MAX_ACTION_LENGTH = 64


async def audit_logs(request: web.Request) -> web.Response:
    days = parse_days(request.query.get("days"), default=DAYS_DEFAULT, maximum=DAYS_MAXIMUM)
    limit = parse_limit(request.query.get("limit"), default=LIMIT_DEFAULT, maximum=LIMIT_MAXIMUM)
    action = request.query.get("action") or None
    if action is not None and len(action) > MAX_ACTION_LENGTH:
        raise bad_request(f"'action' is at most {MAX_ACTION_LENGTH} characters.", target="action")
    entries = await request.app[AUDIT].entries(days=days, action=action, limit=limit)
    return json_response({"Period": {"Days": days, "Action": action, "Limit": limit}, "Entries": entries,
                          "Count": len(entries), "DateFetched": utc_now_iso()})
