"""One auth module for every scheme of the spec; each route declares what it accepts.

Schemes: AccessKey header, AccountKey header, `x-api-key` (purge key or analytics key, by route),
`Authorization: Bearer cdnsk_...` tokens (scoped, stored as SHA-256), and the `cdn_session` cookie.
All secret comparisons are constant-time.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import Enum

from aiohttp import web

from shared.errors import ApiError, LegacyError, unauthorized
from shared.middleware import uses_legacy_envelope
from shared.secrets import Secrets

SESSION_COOKIE = "cdn_session"
SESSION_TTL_S = 7 * 24 * 3600


class Key(Enum):
    ACCESS = "AccessKey"
    ACCOUNT = "AccountKey"
    PURGE = "PurgeKey"
    ANALYTICS = "AnalyticsKey"


@dataclass(frozen=True)
class Access:
    """What a route accepts: any of `keys`, a Bearer token holding `scope`, or (if `session`) the cookie."""

    keys: frozenset[Key] = frozenset()
    scope: str | None = None
    session: bool = False

    def describe(self) -> str:
        parts = [k.value for k in sorted(self.keys, key=lambda k: k.value)]
        if self.scope:
            parts.append(f"a Bearer token with scope '{self.scope}'")
        if self.session:
            parts.append("a valid cdn_session cookie")
        return " or ".join(parts)


def accepts(*keys: Key, scope: str | None = None, session: bool = False) -> Access:
    return Access(frozenset(keys), scope, session)


@dataclass(frozen=True)
class Principal:
    kind: str                  # "key", "token" or "session"
    name: str                  # key name, token id, or "session"


ROUTE_ACCESS = web.AppKey("route_access", dict)
TokenLookup = Callable[[str], Awaitable["TokenGrant | None"]]


@dataclass(frozen=True)
class TokenGrant:
    id: str
    scopes: frozenset[str]


def _equal(supplied: str | None, expected: str) -> bool:
    if not supplied:
        return False
    return hmac.compare_digest(supplied.encode(), expected.encode())


def session_cookie_value(secret: str, *, ttl: int = SESSION_TTL_S, nonce: str, now: float | None = None) -> str:
    token = f"{int((now or time.time()) + ttl)}.{nonce}"
    return f"{token}.{hmac.new(secret.encode(), token.encode(), hashlib.sha256).hexdigest()}"


def session_valid(secret: str, value: str | None, *, now: float | None = None) -> bool:
    """`<expiresUnix>.<nonce>.<hmacHex>`: split at the last dot; valid if the HMAC matches and not expired."""
    if not value or value.count(".") < 2:
        return False
    token, _, sig = value.rpartition(".")
    expected = hmac.new(secret.encode(), token.encode(), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, sig):
        return False
    expires = token.split(".", 1)[0]
    return expires.isascii() and expires.isdigit() and int(expires) > (now or time.time())


class Authenticator:
    def __init__(self, secrets: Secrets, lookup_token: TokenLookup) -> None:
        self._keys = {Key.ACCESS: secrets.access_key, Key.ACCOUNT: secrets.account_key,
                      Key.PURGE: secrets.purge_key, Key.ANALYTICS: secrets.analytics_key}
        self._session_secret = secrets.session_secret
        self._lookup_token = lookup_token

    async def authenticate(self, request: web.Request, access: Access) -> Principal | None:
        headers = request.headers
        for key in access.keys:
            if key is Key.ACCESS:
                supplied = headers.get("AccessKey")
            elif key is Key.ACCOUNT:
                supplied = headers.get("AccountKey")
            else:
                supplied = headers.get("x-api-key")
            if _equal(supplied, self._keys[key]):
                return Principal("key", key.value)
        if access.scope:
            auth = headers.get("Authorization", "")
            if auth[:7].lower() == "bearer ":
                grant = await self._lookup_token(auth[7:].strip())
                if grant is not None and access.scope in grant.scopes:
                    return Principal("token", grant.id)
        if access.session and session_valid(self._session_secret, request.cookies.get(SESSION_COOKIE)):
            return Principal("session", "session")
        return None


PRINCIPAL = web.RequestKey("principal", Principal)
AUTHENTICATOR = web.AppKey("authenticator", Authenticator)


@web.middleware
async def auth_middleware(request: web.Request,
                          handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
    route = request.match_info.route
    access: Access | None = request.app[ROUTE_ACCESS].get(route)
    if access is None:
        return await handler(request)
    principal = await request.app[AUTHENTICATOR].authenticate(request, access)
    if principal is None:
        message = f"Missing or invalid credentials. {request.method} {request.path} accepts {access.describe()}."
        if uses_legacy_envelope(request.path):
            raise LegacyError(401, "Unauthorized", message)
        error: ApiError = unauthorized(message)
        raise error
    request[PRINCIPAL] = principal
    return await handler(request)
