"""CDN paths (`/<zone>/v1/<category>/<file>`, `/stocks/...`, any path of a pull zone): receive (redirects,
tenant hosts, pull zones), then the serve sequence (assetcdn/edge/states/serve.py) with the file as it is, or,
for a pull zone, its origin's (assetcdn/edge/states/pull.py).

On a tenant host (assetcdn/edge/site_config.py) `/v1/...` names the host's zone, and only that zone's files and
the stock pool are served (assetcdn/edge/access.py); every path of a pull zone's own host is the zone's.
Methods other than GET and HEAD go to a pull zone's origin; a stored zone's paths answer them 405.
"""

from __future__ import annotations

from aiohttp import web

from assetcdn.edge.app_keys import NODE
from assetcdn.edge.delivery_log import DELIVERED_PATH
from assetcdn.edge.site_config import request_host, tenant_path
from assetcdn.edge.states.fetch import AS_IS
from assetcdn.edge.states.pull import serve_pull
from assetcdn.edge.states.recv import checked_origin_path, receive
from assetcdn.edge.states.serve import Refusals, ServePolicy, serve, source_for
from assetcdn.shared.edge_rules import Redirect
from assetcdn.shared.errors import ApiError
from assetcdn.shared.manifest import ManifestEntry

REDIRECTS: dict[int, type[web.HTTPMove]] = {
    301: web.HTTPMovedPermanently, 302: web.HTTPFound, 303: web.HTTPSeeOther,
    307: web.HTTPTemporaryRedirect, 308: web.HTTPPermanentRedirect,
}


def _unreachable(entry: ManifestEntry) -> ApiError:
    return ApiError(503, "OriginUnreachable", f"'/{entry.path}' is not cached on this edge and the control plane "
                    "cannot be reached. Retry shortly.")


REFUSALS = Refusals(
    source=lambda exc: ApiError(exc.status, exc.code, exc.message, target="path"),
    unreachable=_unreachable,
    purged=lambda: ApiError(503, "PurgedDuringDelivery", "The asset was purged while it was being delivered. Retry."),
)


def _redirect(redirect: Redirect) -> web.HTTPMove:
    return REDIRECTS[redirect.status](redirect.location)


async def serve_asset(request: web.Request) -> web.StreamResponse:
    node = request.app[NODE]
    config = node.config
    # receive: _redirects are answered before any cache lookup; a 200 rule rewrites internally.
    host_zone = config.zone_for_host(request_host(request))
    path, raw_path = request.path, request.rel_url.raw_path
    if request.method in ("GET", "HEAD"):
        redirect = config.rules.redirects.match(request.path_qs)
        if redirect is not None:
            if not redirect.is_rewrite:
                raise _redirect(redirect)
            path = raw_path = redirect.location.split("?", 1)[0]
    pull = config.pull_target(host_zone, raw_path)
    if pull is not None:
        zone, origin_path, prefix = pull
        request[DELIVERED_PATH] = f"{zone.name}{origin_path}"
        return await serve_pull(request, zone, checked_origin_path(origin_path), prefix)
    if request.method not in ("GET", "HEAD"):
        raise web.HTTPMethodNotAllowed(request.method, ["GET", "HEAD"])
    cdn_path = receive(request, tenant_path(host_zone, path))
    request[DELIVERED_PATH] = cdn_path
    entry = source_for(node, cdn_path, host_zone, REFUSALS)
    return await serve(request, entry, AS_IS, ServePolicy(node.asset_cache_control, REFUSALS))
