"""Analysis results kept 24 hours per asset path, in control's SQLite file.

A row is keyed by the analysis (kind and engine) and the CDN path, and remembers the git blob id it
was computed from: once the path holds other bytes, the row no longer matches and the next request
computes afresh (and replaces it). Expired rows are dropped as new ones are written.
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from assetcdn.control.storage.database import Database

SCHEMA = """
CREATE TABLE IF NOT EXISTS ai_results (
    kind TEXT NOT NULL,
    path TEXT NOT NULL,
    blob_id TEXT NOT NULL,
    created REAL NOT NULL,
    body BLOB NOT NULL,
    PRIMARY KEY (kind, path)
);
CREATE INDEX IF NOT EXISTS ai_results_created ON ai_results (created);
"""


class ResultsCache:
    def __init__(self, db: Database, ttl_s: float) -> None:
        self.db, self.ttl_s = db, ttl_s

    async def open(self) -> None:
        await self.db.script(SCHEMA)

    async def get(self, kind: str, path: str, blob_id: str) -> dict[str, Any] | None:
        row = await self.db.fetch_one("SELECT body FROM ai_results WHERE kind = ? AND path = ? AND blob_id = ? "
                                      "AND created > ?", (kind, path, blob_id, time.time() - self.ttl_s))
        return orjson.loads(row[0]) if row else None

    async def alt_texts(self) -> dict[str, tuple[str, str]]:
        """Every kept alt text: CDN path -> (blob id, alt), whichever engine made it (newest wins)."""
        found: dict[str, tuple[str, str]] = {}
        for path, blob_id, body in await self.db.fetch(
                "SELECT path, blob_id, body FROM ai_results WHERE kind LIKE 'alt-text:%' AND created > ? "
                "ORDER BY created", (time.time() - self.ttl_s,)):
            alt = orjson.loads(body).get("alt")
            if isinstance(alt, str):
                found[path] = (blob_id, alt)
        return found

    async def put(self, kind: str, path: str, blob_id: str, body: dict[str, Any]) -> None:
        now = time.time()
        async with self.db.transaction() as tx:
            await tx.execute("INSERT OR REPLACE INTO ai_results (kind, path, blob_id, created, body) "
                             "VALUES (?, ?, ?, ?, ?)", (kind, path, blob_id, now, orjson.dumps(body)))
            await tx.execute("DELETE FROM ai_results WHERE created <= ?", (now - self.ttl_s,))
