"""GET/HEAD of CDN paths (`/<zone>/v1/<category>/<file>`, `/stocks/...`): receive, look up, fetch, deliver."""

from __future__ import annotations

from aiohttp import web

from edge.access import is_private
from edge.delivery_log import DELIVERED_PATH
from edge.state import NODE
from edge.states.deliver import deliver
from edge.states.fetch import OriginUnavailable, fetch_asset
from edge.states.lookup import asset_key, lookup
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
    path = config.cdn_path(request.host, request.path)
    redirect = config.rules.redirects.match(request.path_qs)
    if redirect is not None:
        if not redirect.is_rewrite:
            raise _redirect(redirect)
        path = config.cdn_path(request.host, redirect.location.split("?", 1)[0])
    wanted = receive(request, path)
    request[DELIVERED_PATH] = wanted.path
    entry = node.replica.get(wanted.path)
    if entry is None:
        if not node.replica.loaded:
            raise ApiError(503, "EdgeNotReady", "This edge has not loaded the manifest yet and control is unreachable.")
        raise ApiError(404, "AssetNotFound", f"No asset at '/{wanted.path}'.", target="path")
    if is_private(entry):
        raise ApiError(403, "Forbidden", f"'/{wanted.path}' is in the private category: it is served only "
                       "through a signed URL (/api/signed).", target="path")
    key = asset_key(entry)
    obj = lookup(node, key)
    status = "HIT" if obj is not None else "MISS"
    if obj is not None and not node.control_reachable():
        status = "STALE"  # we cannot confirm this is still the current version
    if obj is None:
        try:
            obj = await fetch_asset(node, entry)
        except OriginUnavailable:
            raise ApiError(503, "OriginUnreachable", f"'/{wanted.path}' is not cached on this edge and the "
                           "control plane cannot be reached. Retry shortly.") from None
    node.metrics.cache_result(status).inc()
    max_age = node.settings.get("edge", "asset_max_age_s")
    try:
        response = await deliver(request, obj, cache_status=status, cache_control=f"public, max-age={max_age}",
                                 tags=(*entry.tags,))
    except FileNotFoundError:
        obj = await fetch_asset(node, entry)  # purged between look-up and delivery
        response = await deliver(request, obj, cache_status="MISS", cache_control=f"public, max-age={max_age}",
                                 tags=(*entry.tags,))
    if response.status in (200, 206) and request.method == "GET":
        node.metrics.bytes_served_here.inc(response.content_length or 0)
    return response
