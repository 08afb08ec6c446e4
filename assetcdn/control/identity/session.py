"""The dashboard session: the `cdn_session` cookie, the one implementation of issuing, checking and
ending it.

Value: `<expiresUnix>.<nonce32hex>.<hmacHex>`, HMAC-SHA256 with the session secret over
`<expiresUnix>.<nonce>` (split at the last dot). Valid while the signature matches, the expiry is in
the future (and no further ahead than the configured lifetime) and the nonce has not been signed out:
sign-out records the nonce until the cookie would have expired, so a copied cookie dies with it.

Cookies set at sign-in (all SameSite=Strict, Secure unless `[dashboard] secure_cookies = false`):
`cdn_session` (HttpOnly, Path=/), `cdn_logged_in=1` (readable by scripts: "a session exists", no
secret), and a `cdn_session` cleared at Path=/dashboard so that an older cookie scoped there cannot
shadow the new one.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass

from assetcdn.control.storage.database import Database
from assetcdn.shared.cdn_cookies import LOGGED_IN_COOKIE, SESSION_COOKIE

# Sessions signed out before they expire (created at start by assetcdn/control/identity/service.py).
SCHEMA = """
DROP TABLE IF EXISTS login_attempts;
CREATE TABLE IF NOT EXISTS ended_sessions (
    nonce TEXT PRIMARY KEY,
    expires INTEGER NOT NULL
);
"""

SESSION_TTL_S = 7 * 24 * 3600
CLOCK_SKEW_S = 60
MAX_COOKIE_LENGTH = 256
EXPIRED = "Thu, 01 Jan 1970 00:00:00 GMT"


@dataclass(frozen=True)
class Session:
    nonce: str
    expires: int  # Unix seconds


def _signature(secret: str, token: str) -> str:
    return hmac.new(secret.encode(), token.encode(), hashlib.sha256).hexdigest()


def session_cookie_value(secret: str, *, ttl: int = SESSION_TTL_S, nonce: str | None = None,
                         now: float | None = None) -> str:
    """A signed cookie value; a fresh 32-hex-digit nonce unless one is given."""
    token = f"{int((time.time() if now is None else now) + ttl)}.{nonce or secrets.token_hex(16)}"
    return f"{token}.{_signature(secret, token)}"


def parse_session(secret: str, value: str | None, *, now: float | None = None,
                  max_ttl: int = SESSION_TTL_S) -> Session | None:
    """The session a cookie value carries if its signature and expiry hold (revocation not checked)."""
    if not value or len(value) > MAX_COOKIE_LENGTH or not value.isascii() or value.count(".") < 2:
        return None
    token, _, signature = value.rpartition(".")
    if not secret or not hmac.compare_digest(_signature(secret, token), signature):
        return None
    expires_text, _, nonce = token.partition(".")
    if not expires_text.isdigit() or not nonce or len(expires_text) > 12:
        return None
    moment = time.time() if now is None else now
    expires = int(expires_text)
    if expires <= moment or expires > moment + max_ttl + CLOCK_SKEW_S:
        return None
    return Session(nonce, expires)


def session_valid(secret: str, value: str | None, *, now: float | None = None) -> bool:
    """Signature and expiry only; `SessionBook.verify` also honours sign-outs."""
    return parse_session(secret, value, now=now) is not None


def _cookie(name: str, value: str, *, max_age: int, http_only: bool, secure: bool, path: str = "/") -> str:
    parts = [f"{name}={value}", f"Path={path}"]
    if http_only:
        parts.append("HttpOnly")
    if secure:
        parts.append("Secure")
    parts.append("SameSite=Strict")
    parts.append(f"Max-Age={max_age}")
    if max_age <= 0:
        parts.append(f"Expires={EXPIRED}")
    return "; ".join(parts)


def issuing_cookies(value: str, *, ttl: int, secure: bool) -> list[str]:
    """Set-Cookie values for a new session."""
    return [_cookie(SESSION_COOKIE, value, max_age=ttl, http_only=True, secure=secure),
            _cookie(LOGGED_IN_COOKIE, "1", max_age=ttl, http_only=False, secure=secure),
            _cookie(SESSION_COOKIE, "", max_age=0, http_only=True, secure=secure, path="/dashboard")]


def clearing_cookies(*, secure: bool) -> list[str]:
    """Set-Cookie values that end the session in the browser."""
    return [_cookie(SESSION_COOKIE, "", max_age=0, http_only=True, secure=secure),
            _cookie(LOGGED_IN_COOKIE, "", max_age=0, http_only=False, secure=secure),
            _cookie(SESSION_COOKIE, "", max_age=0, http_only=True, secure=secure, path="/dashboard")]


class SessionBook:
    """Issues and checks sessions; remembers the ones signed out (table `ended_sessions`)."""

    def __init__(self, db: Database, secret: str, ttl: int = SESSION_TTL_S) -> None:
        self.db, self._secret, self.ttl = db, secret, ttl

    def issue(self, now: float | None = None) -> str:
        return session_cookie_value(self._secret, ttl=self.ttl, now=now)

    async def verify(self, value: str | None, now: float | None = None) -> Session | None:
        session = parse_session(self._secret, value, now=now, max_ttl=self.ttl)
        if session is None:
            return None
        if await self.db.fetch_one("SELECT 1 FROM ended_sessions WHERE nonce = ?", (session.nonce,)) is not None:
            return None
        return session

    async def end(self, session: Session, now: float | None = None) -> None:
        moment = time.time() if now is None else now
        async with self.db.transaction() as tx:
            await tx.execute("DELETE FROM ended_sessions WHERE expires < ?", (int(moment),))
            await tx.execute("INSERT OR IGNORE INTO ended_sessions (nonce, expires) VALUES (?, ?)",
                             (session.nonce, session.expires))
