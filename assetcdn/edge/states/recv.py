"""receive: what a delivery request names, worked out here only, for the application's delivery route
(assetcdn/edge/routes/delivery.py) and the hit path (assetcdn/edge/fastpath/prepared.py) alike: a
`_redirects` redirect to answer, or the CDN path, after a rewrite (a 200 rule) and the tenant host's zone
(assetcdn/edge/site_config.py), validated (a clear error on bad input)."""

from __future__ import annotations

from aiohttp import web

from assetcdn.edge.site_config import EdgeConfig, tenant_path
from assetcdn.shared.edge_rules import Redirect
from assetcdn.shared.errors import ApiError
from assetcdn.shared.paths import InvalidPath, parse_cdn_path

REDIRECTS: dict[int, type[web.HTTPMove]] = {
    301: web.HTTPMovedPermanently, 302: web.HTTPFound, 303: web.HTTPSeeOther,
    307: web.HTTPTemporaryRedirect, 308: web.HTTPPermanentRedirect,
}


def resolve(config: EdgeConfig, host_zone: str | None, path: str, path_qs: str) -> Redirect | str:
    """The redirect a request path answers with, or the CDN path (no leading slash) it names; InvalidPath
    if that is no CDN path. `_redirects` match the request as sent (`path_qs`: its query string goes to
    the location); `host_zone` is the tenant zone of the request's host (None: the default host)."""
    redirect = config.rules.redirects.match(path_qs)
    if redirect is not None:
        if not redirect.is_rewrite:
            return redirect
        path = redirect.location.split("?", 1)[0]
    return parse_cdn_path(tenant_path(host_zone, path))


def receive(request: web.Request, config: EdgeConfig, host_zone: str | None) -> str:
    """`resolve` for the application: the CDN path, else its redirect raised, or 400 InvalidPath."""
    try:
        named = resolve(config, host_zone, request.path, request.path_qs)
    except InvalidPath as exc:
        raise ApiError(400, "InvalidPath", f"Invalid asset path: {exc}", target="path") from None
    if isinstance(named, Redirect):
        raise REDIRECTS[named.status](named.location)
    return named
