"""Passkeys and their pending ceremony challenges, in the control plane's SQLite.

A passkey record keeps the credential's COSE public key and sign counter; neither ever leaves
control (`Passkey.public` is what the API shows). Challenges are single-use (consumed by a DELETE
that must remove exactly one live row) and expire after five minutes; a client IP may hold at most
`MAX_LIVE_CHALLENGES_PER_IP` live ones, and all clients together `MAX_LIVE_CHALLENGES`, so the
public `auth/begin` cannot grow the table without bound.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from typing import Any

import aiosqlite
import orjson
from webauthn.helpers import bytes_to_base64url

from assetcdn.shared.errors import utc_now_iso

MAX_PASSKEYS = 20
CHALLENGE_TTL_S = 300
CHALLENGE_BYTES = 32
MAX_LIVE_CHALLENGES_PER_IP = 20
MAX_LIVE_CHALLENGES = 1000
ALGORITHM_NAMES = {-7: "ES256", -8: "EdDSA", -35: "ES384", -36: "ES512", -257: "RS256", -258: "RS384",
                   -259: "RS512", -37: "PS256", -38: "PS384", -39: "PS512"}


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
    def __init__(self, db: aiosqlite.Connection) -> None:
        self.db = db

    async def list(self) -> list[Passkey]:
        async with self.db.execute(f"SELECT {COLUMNS} FROM passkeys ORDER BY created_at, id") as cur:
            return [_row(r) for r in await cur.fetchall()]

    async def get(self, passkey_id: str) -> Passkey | None:
        async with self.db.execute(f"SELECT {COLUMNS} FROM passkeys WHERE id = ?", (passkey_id,)) as cur:
            row = await cur.fetchone()
        return _row(row) if row else None

    async def add(self, passkey: Passkey) -> None:
        """Store a new passkey: at most MAX_PASSKEYS, each credential once (checked in one statement)."""
        cursor = await self.db.execute(
            f"INSERT INTO passkeys ({COLUMNS}) SELECT ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ? "
            "WHERE (SELECT COUNT(*) FROM passkeys) < ? AND NOT EXISTS (SELECT 1 FROM passkeys WHERE id = ?)",
            (passkey.id, passkey.name, passkey.public_key, passkey.algorithm, passkey.sign_count,
             orjson.dumps(list(passkey.transports)).decode(), passkey.device_type, int(passkey.backed_up),
             passkey.aaguid, passkey.created_at, passkey.last_used_at, MAX_PASSKEYS, passkey.id))
        await self.db.commit()
        if cursor.rowcount != 1:
            if await self.get(passkey.id) is not None:
                raise DuplicatePasskey(passkey.id)
            raise TooManyPasskeys()

    async def delete(self, passkey_id: str) -> bool:
        cursor = await self.db.execute("DELETE FROM passkeys WHERE id = ?", (passkey_id,))
        await self.db.commit()
        return cursor.rowcount == 1

    async def rename(self, passkey_id: str, name: str) -> Passkey | None:
        cursor = await self.db.execute("UPDATE passkeys SET name = ? WHERE id = ?", (name, passkey_id))
        await self.db.commit()
        return await self.get(passkey_id) if cursor.rowcount == 1 else None

    async def record_use(self, passkey: Passkey, new_sign_count: int) -> bool:
        """Move the counter on from the value the assertion was checked against; False when another
        sign-in moved it first (two assertions with the same counter: one is a replay or a clone)."""
        cursor = await self.db.execute(
            "UPDATE passkeys SET sign_count = ?, last_used_at = ? WHERE id = ? AND sign_count = ?",
            (new_sign_count, utc_now_iso(), passkey.id, passkey.sign_count))
        await self.db.commit()
        return cursor.rowcount == 1


class ChallengeStore:
    def __init__(self, db: aiosqlite.Connection, ttl_s: float = CHALLENGE_TTL_S) -> None:
        self.db, self.ttl_s = db, ttl_s

    async def issue(self, purpose: str, ip: str, now: float | None = None) -> bytes | None:
        """A fresh challenge remembered for `ttl_s`, or None when too many are pending."""
        moment = time.time() if now is None else now
        challenge = secrets.token_bytes(CHALLENGE_BYTES)
        await self.db.execute("DELETE FROM webauthn_challenges WHERE expires <= ?", (moment,))
        cursor = await self.db.execute(
            "INSERT INTO webauthn_challenges (challenge, purpose, ip, expires) SELECT ?, ?, ?, ? "
            "WHERE (SELECT COUNT(*) FROM webauthn_challenges WHERE ip = ?) < ? "
            "AND (SELECT COUNT(*) FROM webauthn_challenges) < ?",
            (bytes_to_base64url(challenge), purpose, ip, moment + self.ttl_s, ip, MAX_LIVE_CHALLENGES_PER_IP,
             MAX_LIVE_CHALLENGES))
        await self.db.commit()
        return challenge if cursor.rowcount == 1 else None

    async def consume(self, challenge: str, purpose: str, now: float | None = None) -> bool:
        """True once for a live challenge issued for `purpose`; it is gone afterwards, whatever follows."""
        moment = time.time() if now is None else now
        cursor = await self.db.execute(
            "DELETE FROM webauthn_challenges WHERE challenge = ? AND purpose = ? AND expires > ?",
            (challenge, purpose, moment))
        await self.db.commit()
        return cursor.rowcount == 1
