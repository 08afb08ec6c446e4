"""Signing in to the dashboard, with the password or with a passkey, and signing out.

Every attempt takes a slot from the per-IP limiter before its credential is checked (5 failures per
15 minutes by default, `[dashboard] login_*`); a success gives the slot back. Outcomes are written to
the audit log (`login.success`, `login.failure`, `login.logout`: `?action=login` lists them all);
refusals by the limiter are not, so a flood cannot fill it. The password is the dashboard secret from secrets.env: compared in constant
time (SHA-256 digests of both sides, so not even its length shows), never logged.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from dataclasses import dataclass
from typing import Any

from assetcdn.control.identity.login_attempts import Attempt, AttemptLimiter, Refused
from assetcdn.control.identity.passkeys.ceremony import PasskeyCeremonies, PasskeyRejected
from assetcdn.control.identity.passkeys.store import Passkey
from assetcdn.control.identity.session import SessionBook
from assetcdn.control.records.audit import AuditLog
from assetcdn.shared.counter_store import client_key

log = logging.getLogger(__name__)

MAX_PASSWORD_LENGTH = 1024


@dataclass(frozen=True)
class Caller:
    ip: str
    user_agent: str
    request_id: str | None


@dataclass(frozen=True)
class Granted:
    cookie_value: str
    passkey: Passkey | None = None


@dataclass(frozen=True)
class Denied:
    reason: str


def _digest(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()


class SignIn:
    def __init__(self, password: str, limiter: AttemptLimiter, sessions: SessionBook,
                 ceremonies: PasskeyCeremonies, audit: AuditLog) -> None:
        self._password_digest = _digest(password) if password else None
        self.limiter, self.sessions, self.ceremonies, self.audit = limiter, sessions, ceremonies, audit

    @staticmethod
    def limit_key(ip: str) -> str:
        """The limiter's subject: the caller's address (IPv6: its /64); counted as `login:<subject>`."""
        return client_key(ip)

    async def with_password(self, caller: Caller, supplied: str | None) -> Granted | Denied | Refused:
        attempt = await self.limiter.acquire(self.limit_key(caller.ip))
        if isinstance(attempt, Refused):
            return attempt
        if self._password_digest is None:
            reason = "password sign-in is not configured (no dashboard secret)"
        elif not supplied or len(supplied) > MAX_PASSWORD_LENGTH:
            reason = "no password" if not supplied else "wrong password"
        elif hmac.compare_digest(_digest(supplied), self._password_digest):
            return await self._grant(caller, attempt, {"method": "password"})
        else:
            reason = "wrong password"
        await self._record(caller, "login.failure", {"method": "password", "reason": reason})
        return Denied(reason)

    async def with_passkey(self, caller: Caller, body: Any) -> Granted | Denied | Refused:
        attempt = await self.limiter.acquire(self.limit_key(caller.ip))
        if isinstance(attempt, Refused):
            return attempt
        try:
            passkey = await self.ceremonies.authenticate(body)
        except PasskeyRejected as rejected:
            await self._record(caller, "login.failure", {"method": "passkey", "reason": rejected.reason})
            return Denied(rejected.reason)
        granted = await self._grant(caller, attempt, {"method": "passkey", "id": passkey.id, "name": passkey.name})
        return Granted(granted.cookie_value, passkey)

    async def sign_out(self, caller: Caller, cookie_value: str | None) -> None:
        session = await self.sessions.verify(cookie_value)
        if session is not None:
            await self.sessions.end(session)
            await self._record(caller, "login.logout", {})

    async def _grant(self, caller: Caller, attempt: Attempt, meta: dict[str, Any]) -> Granted:
        await self.limiter.release(attempt)
        await self._record(caller, "login.success", meta)
        return Granted(self.sessions.issue())

    async def _record(self, caller: Caller, action: str, meta: dict[str, Any]) -> None:
        try:
            await self.audit.append(action, ip=caller.ip, user_agent=caller.user_agent,
                                    request_id=caller.request_id, meta=meta)
        except Exception:  # the sign-in's outcome stands; a failed audit write is logged, not fatal
            log.exception("audit entry %s (request %s) could not be written", action, caller.request_id)
