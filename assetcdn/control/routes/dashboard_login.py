"""The dashboard's sign-in pages, served by control on the dashboard's own listener (assetcdn/control/identity/dashboard_origin.py).

GET /dashboard/login (the page), POST /dashboard/login (form field `password`: 302 with the session
cookies, 401 page when wrong, 429 page with Retry-After when the IP has too many failures),
GET|POST /dashboard/logout (ends the session, 302 to the login page), GET /dashboard/setup-passkey
(where a signed-in operator adds, renames and removes passkeys) and, until the dashboard UI takes the
path over, a placeholder GET /dashboard/. Pages load only their own script and style sheet (CSP).
"""

from __future__ import annotations

import functools
import html
import string
from pathlib import Path
from urllib.parse import parse_qs

from aiohttp import web
from multidict import CIMultiDict

from assetcdn.control.app_keys import DASHBOARD
from assetcdn.control.identity.auth import cross_origin_refusal
from assetcdn.control.identity.dashboard_config import DashboardConfig
from assetcdn.control.identity.dashboard_origin import HOME_PATH
from assetcdn.control.identity.login_attempts import Refused
from assetcdn.control.identity.service import PASSKEYS, SESSIONS, SIGN_IN
from assetcdn.control.identity.session import SESSION_COOKIE, clearing_cookies, issuing_cookies
from assetcdn.control.identity.signin import Caller, Denied, Granted
from assetcdn.control.records.client_ip import request_ip
from assetcdn.control.request_body import read_body
from assetcdn.shared.middleware import REQUEST_ID

PAGES = Path(__file__).resolve().parent.parent / "signin_page"
ASSETS = {"login.js": "text/javascript", "login.css": "text/css"}
LOGIN_PATH = "/dashboard/login"
PASSKEYS_PATH = "/dashboard/setup-passkey"
PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
                               "img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Frame-Options": "DENY",
    # Not no-referrer: with it, browsers send `Origin: null` on form posts and the origin check fails.
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


def caller_of(request: web.Request) -> Caller:
    return Caller(request_ip(request), request.headers.get("User-Agent", ""), request.get(REQUEST_ID))


@functools.cache
def _template(name: str) -> string.Template:
    return string.Template((PAGES / name).read_text())


def _passkey_origin(config: DashboardConfig) -> str:
    """Where passkeys work (shown on a page opened elsewhere, e.g. on the IP address)."""
    return config.passkey_origins[0] if config.passkey_origins else ""


def _page(request: web.Request, name: str, *, status: int = 200, notice: str | None = None,
          extra: list[tuple[str, str]] | None = None) -> web.Response:
    config = request.app[DASHBOARD]
    text = _template(name).substitute(
        rp_id=html.escape(config.rp_id), passkey_origin=html.escape(_passkey_origin(config)),
        notice=f'<p class="notice" role="alert">{html.escape(notice)}</p>' if notice else "")
    headers = CIMultiDict(PAGE_HEADERS)
    for key, value in extra or []:
        headers.add(key, value)
    return web.Response(text=text, status=status, content_type="text/html", charset="utf-8", headers=headers)


def _redirect(location: str, cookies: list[str]) -> web.Response:
    headers = CIMultiDict({"Location": location, "Cache-Control": "no-store"})
    for cookie in cookies:
        headers.add("Set-Cookie", cookie)
    return web.Response(status=302, headers=headers)


def too_many_attempts_headers(refused: Refused, limit: int) -> dict[str, str]:
    return {"Retry-After": str(refused.retry_after), "X-RateLimit-Limit": str(limit), "X-RateLimit-Remaining": "0"}


async def _signed_in(request: web.Request) -> bool:
    return await request.app[SESSIONS].verify(request.cookies.get(SESSION_COOKIE)) is not None


async def login_page(request: web.Request) -> web.Response:
    return _page(request, "login.html")


def _form_password(raw: bytes) -> str | None:
    try:
        fields = parse_qs(raw.decode("utf-8"), keep_blank_values=True, max_num_fields=16, strict_parsing=False)
    except (UnicodeDecodeError, ValueError):
        return None
    values = fields.get("password")
    return values[0] if values else None


async def login(request: web.Request) -> web.Response:
    config = request.app[DASHBOARD]
    # A browser's cross-site form post is refused before anything is counted; clients without an
    # Origin header (curl, scripts) are not browsers and carry no ambient credential to abuse.
    if "Origin" in request.headers or "Sec-Fetch-Site" in request.headers:
        refusal = cross_origin_refusal(request, config)
        if refusal is not None:
            return _page(request, "login.html", status=403, notice=refusal.message)
        origin = request.headers.get("Origin")
        if origin is not None and config.cookie_dropped_on(origin):  # a sign-in the browser would silently undo
            return _page(request, "login.html", status=403, notice=(
                f"Signing in on {origin} cannot work: the session cookie is Secure, and browsers keep a Secure "
                "cookie only over HTTPS or on localhost. Open the dashboard over HTTPS, or set [dashboard] "
                "secure_cookies = false (not recommended)."))
    password = _form_password(await read_body(request))
    outcome = await request.app[SIGN_IN].with_password(caller_of(request), password)
    if isinstance(outcome, Refused):
        minutes = max(round(outcome.retry_after / 60), 1)
        return _page(request, "login.html", status=429,
                     notice=f"Too many failed sign-ins from your address. Try again in about {minutes} minute"
                            f"{'s' if minutes != 1 else ''}.",
                     extra=list(too_many_attempts_headers(outcome, config.login_max_failures).items()))
    if isinstance(outcome, Denied):
        return _page(request, "login.html", status=401, notice="Wrong password.")
    assert isinstance(outcome, Granted)
    has_passkeys = bool(await request.app[PASSKEYS].store.list())
    return _redirect(HOME_PATH if has_passkeys else PASSKEYS_PATH,
                     issuing_cookies(outcome.cookie_value, ttl=config.session_ttl_s, secure=config.secure_cookies))


async def logout(request: web.Request) -> web.Response:
    # A link or form on another site (or on the edges' origin, same-site): the browser sends no SameSite=Strict cookie
    # with it but would apply the clearing cookies, so any page could sign the operator out. It changes nothing.
    if request.headers.get("Sec-Fetch-Site") in ("cross-site", "same-site"):
        return _redirect(HOME_PATH, [])
    await request.app[SIGN_IN].sign_out(caller_of(request), request.cookies.get(SESSION_COOKIE))
    return _redirect(LOGIN_PATH, clearing_cookies(secure=request.app[DASHBOARD].secure_cookies))


async def passkeys_page(request: web.Request) -> web.Response:
    if not await _signed_in(request):
        return _redirect(LOGIN_PATH, [])
    return _page(request, "passkeys.html")


async def asset(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    content_type = ASSETS.get(name)
    if content_type is None:
        raise web.HTTPNotFound()
    headers = {**PAGE_HEADERS, "Cache-Control": "no-cache"}
    return web.Response(body=_asset_bytes(name), content_type=content_type, charset="utf-8", headers=headers)


@functools.cache
def _asset_bytes(name: str) -> bytes:
    return (PAGES / name).read_bytes()
