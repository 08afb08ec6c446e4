"""Passkeys, in the control plane's SQLite, and the challenges of ceremonies in progress, in memory.

A passkey record keeps the credential's COSE public key and sign counter; neither ever leaves
control (`Passkey.public` is what the API shows).

Challenges are single-use and expire after five minutes. They are kept in this process's memory, not
written to the database: `auth/begin` is public, and a stranger repeating it must cost no write (a
restart only makes a ceremony in progress start again). At most `MAX_LIVE_CHALLENGES` are pending,
each client (an address, or its /64 for IPv6, as the sign-in limit counts) holding at most
`MAX_LIVE_CHALLENGES_PER_CLIENT`. Neither bound ever refuses a ceremony: a client at its share loses
its own oldest challenge, and a full table loses the oldest challenge of the client holding the most,
so many addresses together cannot lock out one that has a single ceremony pending.
"""

from __future__ import annotations

import base64
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from assetcdn.control.storage.database import Database
from assetcdn.shared.counter_store import client_key
from assetcdn.shared.timestamps import utc_now_iso

# Registered passkeys (created at start by assetcdn/control/identity/service.py).
SCHEMA = """
CREATE TABLE IF NOT EXISTS passkeys (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    public_key BLOB NOT NULL,
    algorithm INTEGER NOT NULL,
    sign_count INTEGER NOT NULL,
    transports TEXT NOT NULL,
    device_type TEXT,
    backed_up INTEGER NOT NULL DEFAULT 0,
    aaguid TEXT,
    created_at TEXT NOT NULL,
    last_used_at TEXT
);
-- Pending passkey challenges are kept in memory (assetcdn/control/identity/passkeys/store.py).
DROP TABLE IF EXISTS webauthn_challenges;
"""

MAX_PASSKEYS = 20
CHALLENGE_TTL_S = 300
CHALLENGE_BYTES = 32
MAX_LIVE_CHALLENGES_PER_CLIENT = 20
MAX_LIVE_CHALLENGES = 1000
ALGORITHM_NAMES = {-7: "ES256", -8: "EdDSA", -35: "ES384", -36: "ES512", -257: "RS256", -258: "RS384",
                   -259: "RS512", -37: "PS256", -38: "PS384", -39: "PS512"}


def base64url_encode(data: bytes) -> str:
    """Base64url without padding, as WebAuthn writes credential ids and challenges."""
    return base64.urlsafe_b64encode(data).decode("ascii").rstrip("=")


def base64url_decode(text: str) -> bytes:
    """The bytes of base64url text, padded or not (extra padding is ignored); ValueError when it is not."""
    return base64.urlsafe_b64decode(f"{text}===")


@dataclass(frozen=True)
class Passkey:
    id: str                    # the credential id, base64url (the WebAuthn API exposes it)
    name: str
    public_key: bytes          # COSE_Key: never shown
    algorithm: int             # COSE algorithm identifier
    sign_count: int
    transports: tuple[str, ...]
    device_type: str | None    # single_device | multi_device
    backed_up: bool
    aaguid: str | None
    created_at: str
    last_used_at: str | None

    def public(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "createdAt": self.created_at, "lastUsedAt": self.last_used_at,
                "deviceType": self.device_type, "backedUp": self.backed_up,
                "algorithm": ALGORITHM_NAMES.get(self.algorithm, str(self.algorithm)),
                "transports": list(self.transports)}


COLUMNS = ("id, name, public_key, algorithm, sign_count, transports, device_type, backed_up, aaguid, "
           "created_at, last_used_at")


def _row(row: Any) -> Passkey:
    return Passkey(row[0], row[1], bytes(row[2]), row[3], row[4], tuple(orjson.loads(row[5])), row[6], bool(row[7]),
                   row[8], row[9], row[10])


class TooManyPasskeys(Exception):
    pass


class DuplicatePasskey(Exception):
    pass


class PasskeyStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def list(self) -> list[Passkey]:
        return [_row(r) for r in await self.db.fetch(f"SELECT {COLUMNS} FROM passkeys ORDER BY created_at, id")]

    async def get(self, passkey_id: str) -> Passkey | None:
        row = await self.db.fetch_one(f"SELECT {COLUMNS} FROM passkeys WHERE id = ?", (passkey_id,))
        return _row(row) if row else None

    async def add(self, passkey: Passkey) -> None:
        """Store a new passkey: at most MAX_PASSKEYS, each credential once (checked in one statement)."""
        added = await self.db.write(
            f"INSERT INTO passkeys ({COLUMNS}) SELECT ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ? "
            "WHERE (SELECT COUNT(*) FROM passkeys) < ? AND NOT EXISTS (SELECT 1 FROM passkeys WHERE id = ?)",
            (passkey.id, passkey.name, passkey.public_key, passkey.algorithm, passkey.sign_count,
             orjson.dumps(list(passkey.transports)).decode(), passkey.device_type, int(passkey.backed_up),
             passkey.aaguid, passkey.created_at, passkey.last_used_at, MAX_PASSKEYS, passkey.id))
        if added != 1:
            if await self.get(passkey.id) is not None:
                raise DuplicatePasskey(passkey.id)
            raise TooManyPasskeys()

    async def delete(self, passkey_id: str) -> bool:
        return await self.db.write("DELETE FROM passkeys WHERE id = ?", (passkey_id,)) == 1

    async def rename(self, passkey_id: str, name: str) -> Passkey | None:
        renamed = await self.db.write("UPDATE passkeys SET name = ? WHERE id = ?", (name, passkey_id))
        return await self.get(passkey_id) if renamed == 1 else None

    async def record_use(self, passkey: Passkey, new_sign_count: int) -> bool:
        """Move the counter on from the value the assertion was checked against; False when another
        sign-in moved it first (two assertions with the same counter: one is a replay or a clone)."""
        return await self.db.write(
            "UPDATE passkeys SET sign_count = ?, last_used_at = ? WHERE id = ? AND sign_count = ?",
            (new_sign_count, utc_now_iso(), passkey.id, passkey.sign_count)) == 1


@dataclass(frozen=True)
class _Pending:
    purpose: str
    client: str
    expires: float


class PendingChallenges:
    """The challenges issued and not yet used (see the module's docstring for the bounds)."""

    def __init__(self, ttl_s: float = CHALLENGE_TTL_S, *, capacity: int = MAX_LIVE_CHALLENGES,
                 per_client: int = MAX_LIVE_CHALLENGES_PER_CLIENT,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl_s, self.capacity, self.per_client, self.clock = ttl_s, capacity, per_client, clock
        self._pending: OrderedDict[str, _Pending] = OrderedDict()         # oldest first
        self._by_client: dict[str, OrderedDict[str, None]] = {}            # each client's, oldest first

    def __len__(self) -> int:
        return len(self._pending)

    def issue(self, purpose: str, ip: str) -> bytes:
        """A fresh challenge, remembered for `ttl_s`."""
        now = self.clock()
        self._expire(now)
        client = client_key(ip)
        mine = self._by_client.get(client)
        if mine is not None and len(mine) >= self.per_client:
            self._drop(next(iter(mine)))
        if len(self._pending) >= self.capacity:
            heaviest = max(self._by_client.values(), key=len)
            self._drop(next(iter(heaviest)))
        challenge = secrets.token_bytes(CHALLENGE_BYTES)
        key = base64url_encode(challenge)
        self._pending[key] = _Pending(purpose, client, now + self.ttl_s)
        self._by_client.setdefault(client, OrderedDict())[key] = None
        return challenge

    def consume(self, challenge: str, purpose: str) -> bool:
        """True once for a live challenge issued for `purpose`; it is gone afterwards, whatever follows."""
        self._expire(self.clock())
        pending = self._pending.get(challenge)
        if pending is None:
            return False
        self._drop(challenge)
        return pending.purpose == purpose

    def _expire(self, now: float) -> None:
        # Every challenge lives ttl_s: the oldest issued is the first to expire.
        while self._pending:
            key, pending = next(iter(self._pending.items()))
            if pending.expires > now:
                return
            self._drop(key)

    def _drop(self, key: str) -> None:
        pending = self._pending.pop(key)
        held = self._by_client[pending.client]
        del held[key]
        if not held:
            del self._by_client[pending.client]
