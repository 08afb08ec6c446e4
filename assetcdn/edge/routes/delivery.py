"""GET/HEAD of CDN paths (`/<zone>/v1/<category>/<file>`, `/stocks/...`): receive (redirects, tenant
hosts), then the serve sequence (assetcdn/edge/states/serve.py) with the file as it is.

On a tenant host (assetcdn/edge/site_config.py) `/v1/...` names the host's zone, and only that zone's files and
the stock pool are served (assetcdn/edge/access.py).
"""

from __future__ import annotations

from aiohttp import web

from assetcdn.edge.app_keys import NODE
from assetcdn.edge.delivery_log import DELIVERED_PATH
from assetcdn.edge.site_config import request_host, tenant_path
from assetcdn.edge.states.fetch import AS_IS
from assetcdn.edge.states.recv import receive
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
    path = tenant_path(host_zone, request.path)
    redirect = config.rules.redirects.match(request.path_qs)
    if redirect is not None:
        if not redirect.is_rewrite:
            raise _redirect(redirect)
        path = tenant_path(host_zone, redirect.location.split("?", 1)[0])
    cdn_path = receive(request, path)
    request[DELIVERED_PATH] = cdn_path
    entry = source_for(node, cdn_path, host_zone, REFUSALS)
    return await serve(request, entry, AS_IS, ServePolicy(node.asset_cache_control, REFUSALS))
