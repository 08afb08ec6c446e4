"""What HTTPS changes for every request: ACME HTTP-01 answers, the redirect of plain HTTP, HSTS.

- ``GET /.well-known/acme-challenge/<token>`` answers the key authorization control published for the
  token (text/plain), on the plain and the https port alike, and 404 for any other token: a CA's
  validation request may reach any edge, and every edge holds the same TLS state.
- ``[tls] redirect_http``: a request on the plain port is redirected to https (301 for GET and HEAD,
  308 otherwise, so a method and body are kept), except ACME challenges, which a CA fetches over http,
  and ``/api/health`` and ``/metrics``, which load balancers, ``assetcdn up`` and scrapers ask over http.
  The hit path hands every request to the application then (assetcdn/edge/fastpath/hit_server.py), so a
  cached file is redirected like the rest.
- ``[tls] hsts_max_age_s`` above 0: every answer over https carries Strict-Transport-Security.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.typedefs import Middleware

from assetcdn.edge.app_keys import NODE
from assetcdn.shared.config import Settings
from assetcdn.shared.deliveries import ACME_CHALLENGE_PREFIX
from assetcdn.shared.errors import ApiError

CHALLENGE_PREFIX = ACME_CHALLENGE_PREFIX
CHALLENGE_ROUTE = CHALLENGE_PREFIX + "{token}"
NOT_REDIRECTED = ("/api/health", "/metrics")
_TOKEN = re.compile(r"[A-Za-z0-9_-]{1,256}")  # RFC 8555 8.3: base64url, no padding
_HOST = re.compile(r"[A-Za-z0-9.-]{1,253}|\[[0-9A-Fa-f:.]{2,45}\]")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


async def acme_challenge(request: web.Request) -> web.Response:
    token = request.match_info["token"]
    answer = request.app[NODE].tls.challenge(token) if _TOKEN.fullmatch(token) else None
    if answer is None:
        # Not kept by a cache on the way either (a 404 is heuristically cacheable, RFC 9110 15.1): the token may be
        # published the next moment, and the CA's validation must get it then.
        raise ApiError(404, "NotFound", "No ACME challenge is pending for this token.",
                       headers={"Cache-Control": "no-store"})
    return web.Response(text=answer, content_type="text/plain", headers={"Cache-Control": "no-store"})


HSTS_HEADER = "Strict-Transport-Security"


def hsts_value(settings: Settings, *, secure: bool) -> str | None:
    """The Strict-Transport-Security an answer carries: over https only, when configured. The hit path
    (assetcdn/edge/fastpath/hit_server.py) and the application's hook both ask this."""
    max_age = int(settings.get("tls", "hsts_max_age_s"))
    if not secure or max_age <= 0:
        return None
    return f"max-age={max_age}" + ("; includeSubDomains" if settings.get("tls", "hsts_include_subdomains") else "")


def redirects_plain_http(settings: Settings) -> bool:
    """Whether requests on the plain port are redirected to https (then the application answers every
    one of them, hits included: the hit path asks this too)."""
    return bool(int(settings.get("tls", "https_port")) and settings.get("tls", "redirect_http"))


def https_location(request: web.Request, https_port: int) -> str | None:
    """Where a plain request goes over https: the same host (without its port) on the https port
    (left out when it is 443), the same path and query; None for a Host that is not a host name, and for a
    request of no path (``OPTIONS *``: no URL names it)."""
    host = request.host.rsplit(":", 1)[0] if not request.host.endswith("]") else request.host
    path = request.rel_url.raw_path_qs
    if not _HOST.fullmatch(host) or not path.startswith("/"):
        return None
    port = "" if https_port == 443 else f":{https_port}"
    return f"https://{host}{port}{path}"


def redirect_middleware(https_port: int) -> Middleware:
    @web.middleware
    async def redirect_to_https(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.secure or request.path.startswith(CHALLENGE_PREFIX) or request.path in NOT_REDIRECTED:
            return await handler(request)
        location = https_location(request, https_port)
        if location is None:
            return await handler(request)
        status = 301 if request.method in ("GET", "HEAD") else 308
        return web.Response(status=status, headers={"Location": location, "Cache-Control": "no-store"})
    return redirect_to_https


def hsts_on_prepare(over_https: str) -> Callable[[web.Request, web.StreamResponse], Awaitable[None]]:
    """The response hook adding `over_https` (`hsts_value(settings, secure=True)`) to secure answers."""
    async def add_hsts(request: web.Request, response: web.StreamResponse) -> None:
        if request.secure:
            response.headers[HSTS_HEADER] = over_https
    return add_hsts
