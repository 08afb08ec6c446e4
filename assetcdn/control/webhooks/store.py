"""Registered webhooks: kept in SQLite and in memory (the worker reads the in-memory copy at delivery
time, so a deleted webhook gets no further delivery). Signing secrets are stored encrypted
(``secret_box``) and shown once, when the webhook is registered."""

from __future__ import annotations

import secrets
import uuid
from dataclasses import dataclass
from typing import Any

import orjson

from assetcdn.control.storage.database import Database
from assetcdn.control.webhooks.secret_box import SecretBox, SecretUnavailable
from assetcdn.shared.errors import ApiError
from assetcdn.shared.timestamps import as_iso_utc, utc_now_iso

# Registered webhooks (created at start by assetcdn/control/webhooks/service.py).
SCHEMA = """
CREATE TABLE IF NOT EXISTS webhooks (
    id TEXT PRIMARY KEY,
    url TEXT NOT NULL,
    events TEXT NOT NULL,
    created_at TEXT NOT NULL,
    secret_ciphertext BLOB NOT NULL,  -- AES-GCM under a key derived from ASSETCDN_WEBHOOK_SECRET_KEY
    secret_nonce BLOB NOT NULL,
    secret_last_four TEXT NOT NULL,
    after_seq INTEGER NOT NULL        -- receives the events recorded after it was registered
);
"""

SECRET_PREFIX = "whsec_"
SECRET_VERSION = 1


@dataclass(frozen=True)
class Webhook:
    id: str
    url: str
    events: tuple[str, ...]
    created_at: str
    secret_nonce: bytes
    secret_ciphertext: bytes
    secret_last_four: str
    after_seq: int  # gets the events recorded after its registration (outbox sequence numbers above this)

    def wants(self, event: str, seq: int) -> bool:
        return event in self.events and seq > self.after_seq

    def to_json(self) -> dict[str, Any]:
        """The public record (never the secret)."""
        return {"id": self.id, "url": self.url, "events": list(self.events), "createdAt": as_iso_utc(self.created_at),
                "active": True, "secretVersion": SECRET_VERSION, "secretLastFour": self.secret_last_four,
                "hasSecret": True}


def new_secret() -> str:
    return SECRET_PREFIX + secrets.token_hex(32)


class WebhookStore:
    def __init__(self, db: Database, box: SecretBox | None) -> None:
        self.db = db
        self._box = box
        self._hooks: dict[str, Webhook] = {}

    async def load(self) -> None:
        rows = await self.db.fetch(
            "SELECT id, url, events, created_at, secret_nonce, secret_ciphertext, secret_last_four, after_seq "
            "FROM webhooks ORDER BY created_at, id")
        self._hooks = {r[0]: Webhook(r[0], r[1], tuple(orjson.loads(r[2])), r[3], bytes(r[4]), bytes(r[5]), r[6], r[7])
                       for r in rows}

    def get(self, webhook_id: str) -> Webhook | None:
        return self._hooks.get(webhook_id)

    def all(self) -> list[Webhook]:
        return list(self._hooks.values())

    def secret(self, hook: Webhook) -> str:
        if self._box is None:
            raise SecretUnavailable("ASSETCDN_WEBHOOK_SECRET_KEY is not set: signing secrets cannot be decrypted")
        return self._box.open(hook.secret_nonce, hook.secret_ciphertext, hook.id)

    async def create(self, url: str, events: tuple[str, ...], secret: str | None,
                     max_webhooks: int) -> tuple[str, Webhook]:
        """Register a webhook; returns (its signing secret, the record). The secret is stored encrypted."""
        if self._box is None:
            raise ApiError(503, "NotConfigured", "Webhook secret encryption is not configured: set "
                           "ASSETCDN_WEBHOOK_SECRET_KEY (it is generated into secrets.env on first start).")
        if len(self._hooks) >= max_webhooks:
            raise ApiError(400, "TooManyWebhooks", f"Maximum {max_webhooks} webhooks allowed. Delete one first.")
        secret = secret or new_secret()
        webhook_id = str(uuid.uuid4())
        nonce, ciphertext = self._box.seal(secret, webhook_id)
        async with self.db.transaction() as tx:  # no event can be recorded between reading MAX(seq) and the insert
            ((after_seq,),) = await tx.fetch("SELECT COALESCE(MAX(seq), 0) FROM webhook_events")
            hook = Webhook(webhook_id, url, events, utc_now_iso(), nonce, ciphertext, secret[-4:], after_seq)
            await tx.execute(
                "INSERT INTO webhooks (id, url, events, created_at, secret_nonce, secret_ciphertext, "
                "secret_last_four, after_seq) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (hook.id, url, orjson.dumps(list(events)).decode(), hook.created_at, nonce, ciphertext,
                 hook.secret_last_four, after_seq))
        self._hooks[hook.id] = hook
        return secret, hook

    async def delete(self, webhook_id: str) -> bool:
        """Remove a webhook and its deliveries. It leaves the in-memory copy first: from this moment no
        delivery to it starts (the worker checks at delivery time)."""
        hook = self._hooks.pop(webhook_id, None)
        if hook is None:
            return False
        try:
            async with self.db.transaction() as tx:
                await tx.execute("DELETE FROM webhook_deliveries WHERE webhook_id = ?", (webhook_id,))
                await tx.execute("DELETE FROM webhooks WHERE id = ?", (webhook_id,))
        except BaseException:
            self._hooks[webhook_id] = hook
            raise
        return True
