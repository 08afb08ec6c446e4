"""Deliveries: one row per (webhook, event), from the outbox to a receiver.

States: ``pending`` (due at ``next_attempt_at``), ``delivered``, ``dead`` (every retry failed: the
dead-letter list, from which a delivery can be replayed). A row stays pending while its attempt is
in flight, so a process killed mid-attempt sends it again after restart (at-least-once).

Its writes are transactions of control's one `Database` writer, taking turns with every other write;
its reads are fetched whole on the read-only connection.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from assetcdn.control.storage.database import Database
from assetcdn.control.webhooks.store import Webhook
from assetcdn.shared.timestamps import from_unix

# One row per event and webhook (created at start by assetcdn/control/webhooks/service.py).
SCHEMA = """
CREATE TABLE IF NOT EXISTS webhook_deliveries (
    id TEXT PRIMARY KEY,
    webhook_id TEXT NOT NULL,
    event_seq INTEGER NOT NULL,
    state TEXT NOT NULL,              -- pending, delivered or dead
    attempts INTEGER NOT NULL DEFAULT 0,
    next_attempt_at REAL NOT NULL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    delivered_at REAL,
    last_status INTEGER,
    last_error TEXT,
    UNIQUE (webhook_id, event_seq)
);
CREATE INDEX IF NOT EXISTS webhook_deliveries_due ON webhook_deliveries (webhook_id, state, next_attempt_at);
CREATE INDEX IF NOT EXISTS webhook_deliveries_by_state ON webhook_deliveries (state, updated_at);
"""

DISPATCH_BATCH = 500
LIST_DEFAULT, LIST_MAXIMUM = 100, 1000
STATES = ("pending", "delivered", "dead")
ERROR_MAX = 300
SELECT_DELIVERY = ("SELECT d.id, d.webhook_id, e.id, e.event, d.state, d.attempts, d.created_at, d.updated_at, "
                   "d.next_attempt_at, d.delivered_at, d.last_status, d.last_error, e.body FROM webhook_deliveries d "
                   "JOIN webhook_events e ON e.seq = d.event_seq")


@dataclass(frozen=True)
class DueDelivery:
    id: str
    webhook_id: str
    attempts: int
    event_id: str
    event: str
    body: bytes


class ReplayRefused(Exception):
    """The delivery exists but is not a dead letter."""

    def __init__(self, state: str) -> None:
        super().__init__(state)
        self.state = state


def _iso(value: float | None) -> str | None:
    return None if value is None else from_unix(value)


class WebhookDeliveries:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def dispatch(self, hooks: Sequence[Webhook], now: float | None = None) -> int:
        """Turn ready events into deliveries for the webhooks subscribed to them; returns the events taken."""
        now = time.time() if now is None else now
        taken = 0
        while True:
            rows = await self.db.fetch(
                "SELECT seq, event FROM webhook_events WHERE dispatched = 0 AND state = 'ready' ORDER BY seq "
                "LIMIT ?", (DISPATCH_BATCH,))
            if not rows:
                return taken
            deliveries = [(str(uuid.uuid4()), hook.id, seq, now, now, now)
                          for seq, event in rows for hook in hooks if hook.wants(event, seq)]
            async with self.db.transaction() as tx:
                # OR IGNORE: an event is never given two deliveries to one webhook.
                await tx.executemany(
                    "INSERT OR IGNORE INTO webhook_deliveries (id, webhook_id, event_seq, state, next_attempt_at, "
                    "created_at, updated_at) VALUES (?, ?, ?, 'pending', ?, ?, ?)", deliveries)
                await tx.executemany("UPDATE webhook_events SET dispatched = 1 WHERE seq = ?",
                                     [(seq,) for seq, _ in rows])
            taken += len(rows)
            if len(rows) < DISPATCH_BATCH:
                return taken

    async def due(self, webhook_id: str, now: float, limit: int) -> list[DueDelivery]:
        rows = await self.db.fetch(
            "SELECT d.id, d.attempts, e.id, e.event, e.body FROM webhook_deliveries d "
            "JOIN webhook_events e ON e.seq = d.event_seq "
            "WHERE d.webhook_id = ? AND d.state = 'pending' AND d.next_attempt_at <= ? "
            "ORDER BY d.next_attempt_at, d.event_seq LIMIT ?", (webhook_id, now, limit))
        return [DueDelivery(r[0], webhook_id, r[1], r[2], r[3], bytes(r[4])) for r in rows]

    async def next_due_after(self, now: float) -> float | None:
        rows = await self.db.fetch(
            "SELECT MIN(next_attempt_at) FROM webhook_deliveries WHERE state = 'pending' AND next_attempt_at > ?",
            (now,))
        return rows[0][0] if rows else None

    async def delivered(self, delivery_id: str, attempts: int, status: int, now: float) -> None:
        await self.db.write(
            "UPDATE webhook_deliveries SET state = 'delivered', attempts = ?, delivered_at = ?, updated_at = ?, "
            "last_status = ?, last_error = NULL WHERE id = ? AND state = 'pending'",
            (attempts, now, now, status, delivery_id))

    async def failed(self, delivery_id: str, attempts: int, status: int | None, error: str,
                     retry_at: float | None, now: float) -> None:
        """A failed attempt: pending again at `retry_at`, or dead when no retry is left."""
        state = "pending" if retry_at is not None else "dead"
        await self.db.write(
            "UPDATE webhook_deliveries SET state = ?, attempts = ?, next_attempt_at = ?, updated_at = ?, "
            "last_status = ?, last_error = ? WHERE id = ? AND state = 'pending'",
            (state, attempts, retry_at if retry_at is not None else now, now, status, error[:ERROR_MAX],
             delivery_id))

    async def drop(self, delivery_id: str) -> None:
        await self.db.write("DELETE FROM webhook_deliveries WHERE id = ?", (delivery_id,))

    async def drop_orphans(self, live: Sequence[str]) -> int:
        """Deliveries of webhooks deleted while a dispatch was writing them."""
        marks = ",".join("?" * len(live))
        query = "DELETE FROM webhook_deliveries" + (f" WHERE webhook_id NOT IN ({marks})" if live else "")
        return await self.db.write(query, list(live))

    async def list(self, *, webhook_id: str | None, state: str | None, limit: int) -> list[dict[str, Any]]:
        """Newest first."""
        query = SELECT_DELIVERY + " WHERE 1 = 1"
        args: list[Any] = []
        if webhook_id is not None:
            query += " AND d.webhook_id = ?"
            args.append(webhook_id)
        if state is not None:
            query += " AND d.state = ?"
            args.append(state)
        query += " ORDER BY d.updated_at DESC, d.event_seq DESC LIMIT ?"
        args.append(limit)
        return [self._record(r) for r in await self.db.fetch(query, args)]

    async def get(self, delivery_id: str) -> dict[str, Any] | None:
        rows = await self.db.fetch(SELECT_DELIVERY + " WHERE d.id = ?", (delivery_id,))
        return self._record(rows[0]) if rows else None

    @staticmethod
    def _record(r: Any) -> dict[str, Any]:
        return {"id": r[0], "webhookId": r[1], "eventId": r[2], "event": r[3], "state": r[4], "attempts": r[5],
                "createdAt": _iso(r[6]), "updatedAt": _iso(r[7]),
                "nextAttemptAt": _iso(r[8]) if r[4] == "pending" else None,
                "deliveredAt": _iso(r[9]), "lastStatus": r[10], "lastError": r[11], "payload": orjson.loads(r[12])}

    async def replay(self, delivery_id: str, now: float | None = None) -> dict[str, Any] | None:
        """A dead letter is due again now, with its retries anew. None when there is no such delivery."""
        now = time.time() if now is None else now
        replayed = await self.db.write(
            "UPDATE webhook_deliveries SET state = 'pending', attempts = 0, next_attempt_at = ?, updated_at = ? "
            "WHERE id = ? AND state = 'dead'", (now, now, delivery_id))
        record = await self.get(delivery_id)
        if record is not None and not replayed:
            raise ReplayRefused(record["state"])
        return record

    async def prune(self, retention_days: int, now: float | None = None) -> int:
        """Finished deliveries past the retention window, and the events nothing refers to any more."""
        cutoff = (time.time() if now is None else now) - retention_days * 86400
        async with self.db.transaction() as tx:
            removed = await tx.execute("DELETE FROM webhook_deliveries WHERE state IN ('delivered', 'dead') "
                                       "AND updated_at < ?", (cutoff,))
            removed += await tx.execute(
                "DELETE FROM webhook_events WHERE dispatched = 1 AND created_at < ? AND NOT EXISTS "
                "(SELECT 1 FROM webhook_deliveries d WHERE d.event_seq = webhook_events.seq)", (cutoff,))
        return removed
