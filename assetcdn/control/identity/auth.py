"""One auth module for every scheme of the API (docs/api-guide.md "Auth and errors"); each route declares what it accepts.

Schemes: AccessKey header, AccountKey header, `x-api-key` (purge key or analytics key, by route),
`Authorization: Bearer cdnsk_...` tokens (scoped, stored as SHA-256), and the `cdn_session` cookie
(`assetcdn.control.identity.session`: signed, expiring, ended at sign-out). All secret comparisons are constant-time.

The session is the one scheme a browser sends by itself, so a route that accepts it is protected
against cross-site request forgery twice: the cookie is SameSite=Strict, and a state-changing method
(anything but GET, HEAD, OPTIONS) authenticated by the session must come from one of the dashboard's
configured origins (`Origin` header, and `Sec-Fetch-Site: same-origin` when the browser sends it),
else 403. The cookie is honoured only on the dashboard's own listener (assetcdn/control/identity/dashboard_origin.py):
browsers send it to every port of the host, the edges' too. Opening a management route to the dashboard is then a matter of adding `session=True` to
its entry in the route table.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import Enum

from aiohttp import web
from aiohttp.typedefs import Handler

from assetcdn.control.identity.dashboard_config import DashboardConfig
from assetcdn.control.identity.dashboard_origin import on_dashboard_listener
from assetcdn.control.identity.session import SESSION_COOKIE, SessionBook

# Re-exported for callers of this module; assetcdn.control.identity.session is their one implementation.
from assetcdn.control.identity.session import SESSION_TTL_S as SESSION_TTL_S
from assetcdn.control.identity.session import session_cookie_value as session_cookie_value
from assetcdn.control.identity.session import session_valid as session_valid
from assetcdn.shared.errors import ApiError, LegacyError, unauthorized
from assetcdn.shared.middleware import uses_legacy_envelope
from assetcdn.shared.secrets import Secrets, secret_matches

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


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


def credentials(*keys: Key, scope: str | None = None, session: bool = False) -> Access:
    """What a route accepts: any of `keys`, a token with `scope`, and the dashboard session when `session`."""
    return Access(frozenset(keys), scope, session)


@dataclass(frozen=True)
class Principal:
    kind: str                  # "key", "token" or "session"
    name: str                  # key name, token id, or "session"


ROUTE_ACCESS: web.AppKey[dict[web.AbstractRoute, Access]] = web.AppKey("route_access")
TokenLookup = Callable[[str], Awaitable["TokenGrant | None"]]


@dataclass(frozen=True)
class TokenGrant:
    id: str
    scopes: frozenset[str]


def cross_origin_refusal(request: web.Request, config: DashboardConfig) -> ApiError | None:
    """The 403 for a browser request that does not come from the dashboard's own origins, else None.

    `Origin` is required and must be one of `[dashboard] origins`; `Sec-Fetch-Site`, when sent, must
    be `same-origin` (a page on a sibling host of the same site is refused even with the cookie)."""
    origin = request.headers.get("Origin")
    fetch_site = request.headers.get("Sec-Fetch-Site")
    if config.allows_origin(origin) and fetch_site in (None, "same-origin"):
        return None
    allowed = ", ".join(config.origins)
    seen = f"Origin {origin!r}" if origin else "no Origin header"
    return ApiError(403, "Forbidden", f"Cross-origin request refused ({seen}"
                    + (f", Sec-Fetch-Site {fetch_site!r}" if fetch_site else "")
                    + f"). From a browser, {request.method} {request.path} is accepted only on the dashboard's "
                    f"origins ({allowed}); set [dashboard] origins if the dashboard is served elsewhere. API "
                    "clients send a key or a Bearer token instead of the cookie.")


class Authenticator:
    def __init__(self, secrets: Secrets, lookup_token: TokenLookup, sessions: SessionBook,
                 dashboard: DashboardConfig) -> None:
        self._keys = {Key.ACCESS: secrets.access_key, Key.ACCOUNT: secrets.account_key,
                      Key.PURGE: secrets.purge_key, Key.ANALYTICS: secrets.analytics_key}
        self._lookup_token = lookup_token
        self._sessions = sessions
        self._dashboard = dashboard

    async def authenticate(self, request: web.Request, access: Access) -> Principal | None:
        """The caller, None when no accepted credential is present; ApiError 403 for a forged session use."""
        headers = request.headers
        for key in access.keys:
            if key is Key.ACCESS:
                supplied = headers.get("AccessKey")
            elif key is Key.ACCOUNT:
                supplied = headers.get("AccountKey")
            else:
                supplied = headers.get("x-api-key")
            if secret_matches(supplied, self._keys[key]):
                return Principal("key", key.value)
        if access.scope:
            auth = headers.get("Authorization", "")
            if auth[:7].lower() == "bearer ":
                grant = await self._lookup_token(auth[7:].strip())
                if grant is not None and access.scope in grant.scopes:
                    return Principal("token", grant.id)
        if (access.session and on_dashboard_listener(request)
                and await self._sessions.verify(request.cookies.get(SESSION_COOKIE)) is not None):
            if request.method not in SAFE_METHODS:
                refusal = cross_origin_refusal(request, self._dashboard)
                if refusal is not None:
                    raise refusal
            return Principal("session", "session")
        return None


PRINCIPAL = web.RequestKey("principal", Principal)
AUTHENTICATOR = web.AppKey("authenticator", Authenticator)


async def keyed_answers_unshared(request: web.Request, response: web.StreamResponse) -> None:
    """Every answer of a route that asks for a credential, its 401 too, says `Cache-Control: no-store` unless its
    handler says otherwise: the keys travel in headers of their own (AccessKey, AccountKey, x-api-key), not
    Authorization, so nothing else keeps a shared cache in front of the API (RFC 9111 3.5) from storing them and
    giving them to anyone. A dictionary look-up per answer of control."""
    if "Cache-Control" not in response.headers and request.match_info.route in request.app[ROUTE_ACCESS]:
        response.headers["Cache-Control"] = "no-store"


@web.middleware
async def auth_middleware(request: web.Request,
                          handler: Handler) -> web.StreamResponse:
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
