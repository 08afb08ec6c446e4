"""The dashboard web UI: GET /dashboard/ (the page, signed-in operators only: anyone else is sent to
/dashboard/login), GET /dashboard/static/<file> (its scripts, style sheet and vendored hls.js; public,
they hold no data) and GET /api/dashboard/status (session or AccountKey: the health of control and
every edge).

The page and its modules come from `assetcdn/control/dashboard/`; they call the management API with the
session cookie, which the route table accepts on the routes the dashboard uses (CSRF: SameSite=Strict
cookie and the Origin check of `assetcdn.control.identity.auth`). The page's Content-Security-Policy allows only its
own files: no inline script, nothing from another origin.
"""

from __future__ import annotations

import functools
import hashlib
import html
import mimetypes
import string
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

from assetcdn.control.app_keys import DASHBOARD, public_url
from assetcdn.control.dashboard.status import status_report
from assetcdn.control.identity.dashboard_config import canonical_origin
from assetcdn.control.identity.dashboard_origin import HOME_PATH, on_dashboard_listener
from assetcdn.control.identity.service import SESSIONS
from assetcdn.control.identity.session import SESSION_COOKIE
from assetcdn.shared.middleware import json_response

ROOT = Path(__file__).resolve().parent.parent / "dashboard"
STATIC = ROOT / "static"
LOGIN_PATH = "/dashboard/login"
CONTENT_TYPES = {".js": "text/javascript", ".mjs": "text/javascript", ".css": "text/css", ".svg": "image/svg+xml",
                 ".txt": "text/plain", ".png": "image/png", ".ico": "image/x-icon"}
# media-src blob: is what hls.js needs (its MediaSource URLs; it runs without a worker here). Previews
# of public files and HLS streams come from the edges' public origin (the dashboard's own serves no
# stored file as itself, assetcdn/control/identity/dashboard_origin.py): images, media and fetches only, never scripts.
PAGE_CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'{edges}; "
            "img-src 'self' data: blob:{edges}; media-src 'self' blob:{edges}; form-action 'self'; "
            "frame-ancestors 'none'; base-uri 'none'")
PAGE_HEADERS = {"X-Frame-Options": "DENY", "Referrer-Policy": "same-origin", "Cache-Control": "no-store"}


@functools.cache
def page_csp(edge_url: str) -> str:
    """The pages' policy, allowing the edges' public origin (`server.public_url`) for previews."""
    origin = canonical_origin(edge_url)
    return PAGE_CSP.format(edges=f" {origin}" if origin else "")


@dataclass(frozen=True)
class StaticFile:
    body: bytes
    content_type: str
    etag: str


@functools.cache
def static_files() -> dict[str, StaticFile]:
    """Every file under static/, by its relative path: a request can only name one of these."""
    files: dict[str, StaticFile] = {}
    for path in sorted(STATIC.rglob("*")):
        if not path.is_file() or path.name.startswith("."):
            continue
        body = path.read_bytes()
        content_type = CONTENT_TYPES.get(path.suffix) or mimetypes.guess_type(path.name)[0] or "application/octet-stream"
        files[path.relative_to(STATIC).as_posix()] = StaticFile(body, content_type,
                                                                 f'"{hashlib.sha256(body).hexdigest()[:32]}"')
    return files


@functools.cache
def _shell() -> string.Template:
    return string.Template((ROOT / "index.html").read_text())


async def _signed_in(request: web.Request) -> bool:
    return on_dashboard_listener(request) and await request.app[SESSIONS].verify(request.cookies.get(SESSION_COOKIE)) is not None


def _redirect(location: str) -> web.Response:
    return web.Response(status=302, headers={"Location": location, "Cache-Control": "no-store"})


async def to_home(request: web.Request) -> web.Response:
    return _redirect(HOME_PATH if await _signed_in(request) else LOGIN_PATH)


async def page(request: web.Request) -> web.Response:
    if not await _signed_in(request):
        return _redirect(LOGIN_PATH)
    config = request.app[DASHBOARD]
    text = _shell().substitute(rp_id=html.escape(config.rp_id),
                               passkey_origin=html.escape(config.passkey_origins[0] if config.passkey_origins else ""))
    return web.Response(text=text, content_type="text/html", charset="utf-8",
                        headers={**PAGE_HEADERS, "Content-Security-Policy": page_csp(public_url(request.app))})


async def static(request: web.Request) -> web.Response:
    found = static_files().get(request.match_info["path"])
    if found is None:
        raise web.HTTPNotFound()
    headers = {"ETag": found.etag, "Cache-Control": "no-cache",
               "Content-Security-Policy": page_csp(public_url(request.app))}
    if found.etag in request.headers.get("If-None-Match", ""):
        return web.Response(status=304, headers=headers)
    charset = "utf-8" if found.content_type.startswith("text/") else None
    return web.Response(body=found.body, content_type=found.content_type, charset=charset, headers=headers)


async def status(request: web.Request) -> web.Response:
    return json_response(await status_report(request.app), headers={"Cache-Control": "no-store"})
