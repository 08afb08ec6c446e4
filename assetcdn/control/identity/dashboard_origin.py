"""The dashboard's own origin: control listens on `server.dashboard_port` beside its API port, and the
two listeners are told apart by the local port a request arrived on.

- The dashboard (`/dashboard/...`) and its session live only on the dashboard listener. Cookies ignore
  ports, so the browser also sends `cdn_session` to the edges (and they forward it here); it is honoured
  only on the dashboard listener (assetcdn/control/identity/auth.py), so a script that ever ran on the edges'
  origin, where stored files are served, could not act with it. The API listener answers `/dashboard`
  with a redirect to the dashboard's URL.
- The dashboard listener never serves stored bytes as something a browser runs: storage downloads
  there are `application/octet-stream`, `Content-Disposition: attachment`, nosniff and the sandbox, so
  no uploaded `.js` or `.html` counts as the dashboard's `'self'` (a `<script src>` refuses a non-script
  type under nosniff; a navigation downloads). Delivery paths are the edges' alone; the cluster
  routes are not served there. Its root, `/`, sends to the dashboard.
"""

from __future__ import annotations

from aiohttp import web
from aiohttp.typedefs import Handler

from assetcdn.shared.content_security import CSP_HEADER, SANDBOX_CSP
from assetcdn.shared.errors import ApiError

DASHBOARD_PORTS: web.AppKey[set[int]] = web.AppKey("dashboard_ports")  # local ports of the dashboard listener(s)
DASHBOARD_URL = web.AppKey("dashboard_url", str)        # where the API listener sends /dashboard
STORAGE_PREFIX = "/api/storage/"
CLUSTER_PREFIX = "/_cluster"
HOME_PATH = "/dashboard/"  # the dashboard's page (assetcdn/control/routes/dashboard.py)


def on_dashboard_listener(request: web.Request) -> bool:
    transport = request.transport
    sockname = transport.get_extra_info("sockname") if transport is not None else None
    return isinstance(sockname, tuple) and len(sockname) >= 2 and sockname[1] in request.app[DASHBOARD_PORTS]


def is_dashboard_path(path: str) -> bool:
    return path == "/dashboard" or path.startswith("/dashboard/")


@web.middleware
async def dashboard_origin_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    if on_dashboard_listener(request):
        if request.path.startswith(CLUSTER_PREFIX):
            raise web.HTTPNotFound()
        if request.path == "/" and request.method in ("GET", "HEAD"):  # the port opened without a path
            return web.Response(status=302, headers={"Location": HOME_PATH, "Cache-Control": "no-store"})
        return await handler(request)
    if is_dashboard_path(request.path):
        if request.method in ("GET", "HEAD"):
            location = request.app[DASHBOARD_URL] + request.path_qs
            return web.Response(status=302, headers={"Location": location, "Cache-Control": "no-store"})
        raise ApiError(404, "NotFound", f"The dashboard is served on its own origin, {request.app[DASHBOARD_URL]}.")
    return await handler(request)


async def stored_bytes_inert(request: web.Request, response: web.StreamResponse) -> None:
    """On the dashboard listener, a storage download is data, never a document or a script."""
    if (request.method in ("GET", "HEAD") and request.path.startswith(STORAGE_PREFIX)
            and not request.path.endswith("/") and response.status < 300 and on_dashboard_listener(request)):
        response.headers["Content-Type"] = "application/octet-stream"
        response.headers["Content-Disposition"] = "attachment"
        response.headers[CSP_HEADER] = SANDBOX_CSP
