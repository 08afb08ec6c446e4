"""CDN paths (`/<zone>/v1/<category>/<file>`, `/stocks/...`, any path of a pull zone): receive (redirects,
tenant hosts, pull zones), then the serve sequence (assetcdn/edge/states/serve.py) with the file as it is, or,
for a pull zone, its origin's (assetcdn/edge/states/pull.py).

On a tenant host (assetcdn/edge/site_config.py) `/v1/...` names the host's zone, and only that zone's files and
the stock pool are served (assetcdn/edge/access.py); every path of a pull zone's own host is the zone's.
Methods other than GET and HEAD go to a pull zone's origin; a stored zone's paths answer OPTIONS as a CORS preflight
and the others 405.

A stored file is public: any origin may read it (a font, a canvas, a fetch()), and the edge's answers on its path
carry `Access-Control-Allow-Origin: *`, errors and redirects too (assetcdn/shared/cors.py; the hit path's
prepared heads hold it, assetcdn/edge/fastpath/prepared.py). A pull zone's origin decides its own: its answers come
as it sent them, and the edge adds none to its own on the zone's paths either. A `_headers` rule may set another
value or remove it, on both.
"""

from __future__ import annotations

from aiohttp import HttpVersion11, web

from assetcdn.edge.app_keys import NODE
from assetcdn.edge.delivery_log import DELIVERED_PATH
from assetcdn.edge.site_config import EdgeConfig, request_host
from assetcdn.edge.states.fetch import AS_IS
from assetcdn.edge.states.path_delivery import ASSET_HEADERS
from assetcdn.edge.states.pull import declared_refusal, serve_pull
from assetcdn.edge.states.recv import PullPath, receive
from assetcdn.edge.states.serve import Refusals, ServePolicy, serve, source_for
from assetcdn.shared.cors import preflight
from assetcdn.shared.errors import ApiError
from assetcdn.shared.manifest import ManifestEntry
from assetcdn.shared.metrics import route_name


def _unreachable(entry: ManifestEntry) -> ApiError:
    return ApiError(503, "OriginUnreachable", f"'/{entry.path}' is not cached on this edge and the control plane "
                    "cannot be reached. Retry shortly.")


REFUSALS = Refusals(
    source=lambda exc: ApiError(exc.status, exc.code, exc.message, target="path", headers=exc.headers),
    unreachable=_unreachable,
    purged=lambda: ApiError(503, "PurgedDuringDelivery", "The asset was purged while it was being delivered. Retry."),
)

# OPTIONS on a stored file's path: a page's preflight (a Range, a conditional of its own).
asset_preflight = preflight(ASSET_HEADERS)


async def serve_asset(request: web.Request) -> web.StreamResponse:
    node = request.app[NODE]
    config = node.config
    host_zone = config.zone_for_host(request_host(request))
    if request.path == "/" and host_zone not in config.pull_zones and not root_rule(request, config):
        # A pull zone's own host's `/` is its origin's, and a `_redirects` rule for `/` applies on any host:
        # elsewhere nothing is there, as for a path no route takes.
        raise web.HTTPNotFound()
    if host_zone in config.pull_zones:
        # Every path of a pull zone's own host is the zone's: an answer given before the path is worked out (a path
        # refused 400, a redirect) is the zone's delivery too, not one of the zone its first segment may name.
        request[DELIVERED_PATH] = f"{host_zone}{request.rel_url.raw_path}"
    try:
        named = receive(request, config, host_zone)  # _redirects are answered before any cache lookup
    except (ApiError, web.HTTPRedirection, web.HTTPMethodNotAllowed) as exc:
        if config.pull_target(host_zone, request.rel_url.raw_path) is None:  # not a pull zone's path: a stored one's
            _readable(exc)
        raise
    if isinstance(named, PullPath):
        request[DELIVERED_PATH] = f"{named.zone.name}{named.path}"
        return await serve_pull(request, named.zone, named.path, named.prefix)
    drop = getattr(request.transport, "drop_fetched", None)
    if drop is not None:  # an answer the hit path fetched for a pull zone this path no longer is: its origin
        drop()           # connection goes back, and its flight lands now, not once this answer is written
    cdn_path = named
    request[DELIVERED_PATH] = cdn_path
    if request.method == "OPTIONS":
        return await asset_preflight(request)
    try:
        entry = source_for(node, cdn_path, host_zone, REFUSALS)
        return await serve(request, entry, AS_IS, ServePolicy(node.asset_cache_control, REFUSALS, ASSET_HEADERS))
    except ApiError as exc:
        _readable(exc)
        raise


def _readable(exc: ApiError | web.HTTPRedirection | web.HTTPMethodNotAllowed) -> None:
    """`exc`, an answer on a stored file's path, with ASSET_HEADERS (a 405's envelope keeps them)."""
    if isinstance(exc, ApiError):
        exc.headers = {**exc.headers, **ASSET_HEADERS}
    else:
        exc.headers.update(ASSET_HEADERS)


def root_rule(request: web.Request, config: EdgeConfig) -> bool:
    """Whether a `_redirects` rule answers this request for `/`, as `receive` applies them: a redirect a GET or HEAD,
    a rewrite (200) any method."""
    if request.method in ("GET", "HEAD"):
        return config.rules.redirects.matches(request.path_qs)
    found = config.rules.redirects.match(request.path_qs)
    return found is not None and found.is_rewrite


async def expect_body(request: web.Request) -> None:
    """The answer to `Expect: 100-continue` (a pull zone's unsafe requests): 100 Continue, unless the declared
    body is more than the edge takes, or more than fits beside the bodies the worker holds for origins (its
    `forward_bodies` budget). Then none: the handler answers 413, or 503 EdgeBusy, before asking for it (RFC 9110
    10.1.1), through the middlewares that put it in the envelope. Other expectations are 417, as aiohttp answers
    them."""
    if request.version != HttpVersion11:
        return
    if request.headers.get("Expect", "").lower() != "100-continue":
        raise web.HTTPExpectationFailed(text=f"Unknown Expect: {request.headers.get('Expect', '')}")
    if declared_refusal(request, request.app[NODE].origins.forward_bodies) is not None:
        return
    await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    request.writer.output_size = 0  # the 100 is not the answer's


def delivery_route_name(app: web.Application) -> str:
    """The metrics route label of CDN-path deliveries, as the metrics middleware names it (the hit path
    counts its hits under it)."""
    for route in app.router.routes():
        if route.handler is serve_asset:
            return route_name(route.resource)
    raise LookupError("the application has no delivery route")
