"""The audit log: one entry per successful mutating control-plane call, kept 90 days in SQLite.

Entry (docs/api-guide.md "Audit and request logs"): ``{timestamp, action, ip, userAgent (<= 256 chars), requestId, meta}``.
Routes declare their action in the route table (``control.app``); ``control.records.recording`` appends
the entries.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson

from assetcdn.control.storage.database import Database
from assetcdn.shared.middleware import as_sent, text_as_sent

RETENTION_DAYS = 90
USER_AGENT_MAX = 256
DAYS_DEFAULT, DAYS_MAXIMUM = 7, 90
LIMIT_DEFAULT, LIMIT_MAXIMUM = 500, 5000

SCHEMA = """
CREATE TABLE IF NOT EXISTS audit_log (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    timestamp TEXT NOT NULL,
    action TEXT NOT NULL,
    ip TEXT NOT NULL,
    user_agent TEXT NOT NULL,
    request_id TEXT,
    meta TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS audit_log_by_time ON audit_log (timestamp);
CREATE INDEX IF NOT EXISTS audit_log_by_action ON audit_log (action, timestamp);
"""


def _iso(moment: datetime) -> str:
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class AuditLog:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def open(self) -> None:
        await self.db.script(SCHEMA)

    async def append(self, action: str, *, ip: str, user_agent: str, request_id: str | None,
                     meta: dict[str, Any], now: float | None = None) -> dict[str, Any]:
        # A request's bytes that are not UTF-8 (a User-Agent, a query value) are kept escaped: SQLite and JSON refuse
        # them as read, and the entry of a change must be written whatever its caller sent.
        entry = {"timestamp": _iso(datetime.fromtimestamp(time.time() if now is None else now, UTC)),
                 "action": action, "ip": ip, "userAgent": text_as_sent(user_agent[:USER_AGENT_MAX]),
                 "requestId": request_id, "meta": as_sent(meta)}
        await self.db.write(
            "INSERT INTO audit_log (timestamp, action, ip, user_agent, request_id, meta) VALUES (?, ?, ?, ?, ?, ?)",
            (entry["timestamp"], action, ip, entry["userAgent"], request_id, orjson.dumps(entry["meta"]).decode()))
        return entry

    async def entries(self, *, days: int, action: str | None, limit: int,
                      now: float | None = None) -> list[dict[str, Any]]:
        """Newest first. ``action`` is an exact name (``zone.create``) or a family (``zone``, ``zone.origin``):
        the actions it names whole or that begin with it and a dot."""
        since = _iso(datetime.fromtimestamp(time.time() if now is None else now, UTC) - timedelta(days=days))
        query = "SELECT timestamp, action, ip, user_agent, request_id, meta FROM audit_log WHERE timestamp >= ?"
        args: list[Any] = [since]
        if action:
            query += " AND (action = ? OR action LIKE ? ESCAPE '\\')"
            args += [action, action.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + ".%"]
        query += " ORDER BY id DESC LIMIT ?"
        args.append(limit)
        rows = await self.db.fetch(query, args)
        return [{"timestamp": r[0], "action": r[1], "ip": r[2], "userAgent": r[3], "requestId": r[4],
                 "meta": orjson.loads(r[5])} for r in rows]

    async def prune(self, now: float | None = None) -> int:
        cutoff = _iso(datetime.fromtimestamp(time.time() if now is None else now, UTC)
                      - timedelta(days=RETENTION_DAYS))
        return await self.db.write("DELETE FROM audit_log WHERE timestamp < ?", (cutoff,))
