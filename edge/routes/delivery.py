"""GET/HEAD of CDN paths (`/<zone>/v1/<category>/<file>`, `/stocks/...`): receive, look up, fetch, deliver.

On a tenant host (edge/rules.py) `/v1/...` names the host's zone, and only that zone's files and
the stock pool are served (edge/access.py).
"""

from __future__ import annotations

from aiohttp import web

from edge.access import SourceRefused, public_source
from edge.delivery_log import DELIVERED_PATH
from edge.rules import tenant_path
from edge.state import NODE
from edge.states.deliver import deliver
from edge.states.fetch import OriginUnavailable, cached_asset
from edge.states.recv import receive
from shared.edge_rules import Redirect
from shared.errors import ApiError

REDIRECTS: dict[int, type[web.HTTPRedirection]] = {
    301: web.HTTPMovedPermanently, 302: web.HTTPFound, 303: web.HTTPSeeOther,
    307: web.HTTPTemporaryRedirect, 308: web.HTTPPermanentRedirect,
}


def _redirect(redirect: Redirect) -> web.HTTPRedirection:
    return REDIRECTS[redirect.status](redirect.location)


async def serve_asset(request: web.Request) -> web.StreamResponse:
    node = request.app[NODE]
    config = node.config
    # receive: _redirects are answered before any cache lookup; a 200 rule rewrites internally.
    host_zone = config.zone_for_host(request.host)
    path = tenant_path(host_zone, request.path)
    redirect = config.rules.redirects.match(request.path_qs)
    if redirect is not None:
        if not redirect.is_rewrite:
            raise _redirect(redirect)
        path = tenant_path(host_zone, redirect.location.split("?", 1)[0])
    wanted = receive(request, path)
    request[DELIVERED_PATH] = wanted.path
    try:
        entry = public_source(node, wanted.path, host_zone)
    except SourceRefused as exc:
        raise ApiError(exc.status, exc.code, exc.message, target="path") from None
    for attempt in range(2):  # a second pass only when the body was purged during delivery
        try:
            obj, status, head = await cached_asset(node, entry)
        except OriginUnavailable:
            raise ApiError(503, "OriginUnreachable", f"'/{wanted.path}' is not cached on this edge and the "
                           "control plane cannot be reached. Retry shortly.") from None
        try:
            response = await deliver(request, obj, cache_status=status, cache_control=node.asset_cache_control,
                                     head=head)
            break
        except FileNotFoundError:
            if attempt:
                raise ApiError(503, "PurgedDuringDelivery", "The asset was purged while it was being "
                               "delivered. Retry.") from None
    if response.status in (200, 206) and request.method == "GET":
        node.metrics.bytes_served_here.inc(response.content_length or 0)
    return response
