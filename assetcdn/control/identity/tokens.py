"""Scoped API tokens: `cdnsk_` + 40 hex, shown once, stored as SHA-256; revoked or expired = unknown."""

from __future__ import annotations

import hashlib
import logging
import secrets
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson

from assetcdn.control.identity.auth import TokenGrant
from assetcdn.control.identity.labels import checked_label
from assetcdn.control.storage.database import Database
from assetcdn.shared.errors import ApiError, bad_request
from assetcdn.shared.secrets import TOKEN_PREFIX
from assetcdn.shared.timestamps import utc_now_iso

# The tokens' table (created at start by the identity package, assetcdn/control/identity/service.py).
SCHEMA = """
CREATE TABLE IF NOT EXISTS tokens (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    prefix TEXT NOT NULL,
    hash TEXT NOT NULL UNIQUE,
    scopes TEXT NOT NULL,
    created_at TEXT NOT NULL,
    expires_at TEXT,
    last_used_at TEXT,
    revoked_at TEXT
);
"""

log = logging.getLogger(__name__)

SCOPES = ("storage:read", "storage:write", "assets:read", "insights:read", "zones:read", "zones:write",
          "purge:write", "pipeline:write", "webhooks:read", "webhooks:write", "ai:read")
MAX_ACTIVE_TOKENS = 50
MAX_LIFETIME_DAYS = 365
CLOCK_SKEW = timedelta(minutes=5)  # a client's "365 days from now" may be computed on a clock ahead of ours
PREFIX_LENGTH = 8  # the token's first characters, shown to identify it (`cdnsk_` and two hex digits)


def _minute_ago() -> str:
    return _iso(datetime.now(UTC) - timedelta(minutes=1))


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _iso(dt: datetime) -> str:
    return dt.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(frozen=True)
class TokenRequest:
    name: str
    scopes: tuple[str, ...]
    expires_at: str | None


def parse_expires_at(raw: Any, now: datetime) -> datetime:
    """An RFC 3339 date-time with an offset, in the future and at most ``MAX_LIFETIME_DAYS`` ahead.

    A value without an offset is refused rather than guessed (UTC or the server's zone). The range is
    checked before converting to UTC, so values that leave years 1-9999 once their offset is applied
    (``9999-12-31T23:59:59-05:00``) are a 400 like any other out-of-range value.
    """
    expected = ("'expiresAt' must be an RFC 3339 date-time with a time zone, e.g. 2030-01-31T12:00:00Z "
                "or 2030-01-31T12:00:00+01:00.")
    if not isinstance(raw, str) or not raw.isascii() or len(raw) > 64:
        raise bad_request(expected, target="expiresAt")
    try:
        parsed = datetime.fromisoformat(raw.replace("z", "Z"))
    except ValueError:
        raise bad_request(expected, target="expiresAt") from None
    if parsed.utcoffset() is None:
        raise bad_request("'expiresAt' has no time zone: add 'Z' for UTC or an offset such as +01:00.",
                          target="expiresAt")
    if parsed <= now:  # aware datetimes compare without a conversion that could overflow
        raise bad_request("'expiresAt' must be in the future.", target="expiresAt")
    if parsed > now + timedelta(days=MAX_LIFETIME_DAYS) + CLOCK_SKEW:
        raise bad_request(f"'expiresAt' must be at most {MAX_LIFETIME_DAYS} days ahead (the longest token "
                          "lifetime, as for 'expiresInDays').", target="expiresAt")
    return parsed.astimezone(UTC)


def parse_token_request(body: Any, *, now: datetime | None = None) -> TokenRequest:
    now = now or datetime.now(UTC)
    if not isinstance(body, dict):
        raise bad_request("The body must be a JSON object with 'name' and 'scopes'.", code="InvalidBody")
    name = body.get("name")
    if name is None or (isinstance(name, str) and not name.strip()):
        raise bad_request("'name' is required: a label for the token.", target="name", code="MissingName")
    if not isinstance(name, str):  # a name sent, of another type: invalid, not missing
        raise bad_request("'name' must be a string: a label for the token.", target="name", code="InvalidName")
    name = checked_label(name)
    scopes = body.get("scopes")
    if not isinstance(scopes, list) or not scopes or not all(isinstance(s, str) for s in scopes):
        raise bad_request("scopes must be a non-empty array of allowed scope strings: " + ", ".join(SCOPES) + ".",
                          target="scopes", code="InvalidScopes")
    unknown = [s for s in scopes if s not in SCOPES]
    if unknown:
        raise bad_request(f"Unknown scopes: {', '.join(unknown)}. Allowed: {', '.join(SCOPES)}.",
                          target="scopes", code="InvalidScopes", invalid=unknown)
    expires_at: datetime | None
    if body.get("expiresAt") is not None and body.get("expiresInDays") is not None:
        raise bad_request("Send 'expiresAt' or 'expiresInDays', not both: they can name different expiry dates.",
                          target="expiresInDays")
    if body.get("expiresAt") is not None:
        expires_at = parse_expires_at(body["expiresAt"], now)
    elif body.get("expiresInDays") is not None:
        days = body["expiresInDays"]
        if not isinstance(days, int) or isinstance(days, bool) or not 1 <= days <= MAX_LIFETIME_DAYS:
            raise bad_request(f"'expiresInDays' must be an integer from 1 to {MAX_LIFETIME_DAYS}.",
                              target="expiresInDays")
        expires_at = now + timedelta(days=days)
    else:
        expires_at = now + timedelta(days=MAX_LIFETIME_DAYS)
    return TokenRequest(name, tuple(dict.fromkeys(scopes)), _iso(expires_at) if expires_at else None)


class TokenStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def create(self, request: TokenRequest) -> tuple[str, dict[str, Any]]:
        """Mint a token; returns (plaintext secret, public record). The secret is not kept."""
        secret = TOKEN_PREFIX + secrets.token_hex(20)
        record = {"id": str(uuid.uuid4()), "name": request.name, "prefix": secret[:PREFIX_LENGTH],
                  "scopes": list(request.scopes), "createdAt": utc_now_iso(),
                  "expiresAt": request.expires_at, "lastUsedAt": None}
        async with self.db.transaction() as tx:  # counted and inserted in one turn: two creates cannot pass one cap
            ((active,),) = await tx.fetch(
                "SELECT COUNT(*) FROM tokens WHERE revoked_at IS NULL AND (expires_at IS NULL OR expires_at > ?)",
                (utc_now_iso(),))
            if active >= MAX_ACTIVE_TOKENS:
                raise ApiError(400, "TooManyTokens", f"Maximum {MAX_ACTIVE_TOKENS} tokens allowed. Revoke one first.")
            await tx.execute(
                "INSERT INTO tokens (id, name, prefix, hash, scopes, created_at, expires_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (record["id"], request.name, record["prefix"], token_hash(secret), orjson.dumps(record["scopes"]),
                 record["createdAt"], request.expires_at))
        return secret, record

    async def list(self) -> list[dict[str, Any]]:
        rows = await self.db.fetch(
            "SELECT id, name, prefix, scopes, created_at, expires_at, last_used_at FROM tokens "
            "WHERE revoked_at IS NULL ORDER BY created_at")
        # Tokens minted before the prefix was shortened stored 14 characters: show the same 8.
        return [{"id": r[0], "name": r[1], "prefix": r[2][:PREFIX_LENGTH], "scopes": orjson.loads(r[3]),
                 "createdAt": r[4], "expiresAt": r[5], "lastUsedAt": r[6]} for r in rows]

    async def revoke(self, token_id: str) -> bool:
        return await self.db.write("UPDATE tokens SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL",
                                   (utc_now_iso(), token_id)) > 0

    async def lookup(self, secret: str) -> TokenGrant | None:
        """The grant of a live token, or None (unknown, revoked or expired: all treated as no credential)."""
        if not (secret.startswith(TOKEN_PREFIX) and len(secret) == len(TOKEN_PREFIX) + 40 and secret.isascii()):
            return None  # a field's bytes that are not UTF-8 come as surrogates, which no secret holds
        digest = token_hash(secret)
        row = await self.db.fetch_one(
            "SELECT id, hash, scopes, expires_at, revoked_at, last_used_at FROM tokens WHERE hash = ?", (digest,))
        if row is None or row[4] is not None:  # looked up by its SHA-256: the secret itself is never compared
            return None
        now = utc_now_iso()
        if row[3] is not None and row[3] <= now:
            return None
        if row[5] is None or row[5] < _minute_ago():  # lastUsedAt to the minute: no write per request
            try:
                await self.db.write("UPDATE tokens SET last_used_at = ? WHERE id = ?", (now, row[0]))
            except Exception:  # bookkeeping: the request it authenticates goes on without it
                log.warning("could not record the use of token %s", row[0], exc_info=True)
        return TokenGrant(row[0], frozenset(orjson.loads(row[2])))
