"""receive: what a delivery request names, worked out here only, for the application's delivery route
(assetcdn/edge/routes/delivery.py) and the hit path (assetcdn/edge/fastpath/prepared.py) alike: a
`_redirects` redirect to answer, a pull zone's path (its origin's, assetcdn/edge/states/pull.py), or the CDN
path, after a rewrite (a 200 rule) and the tenant host's zone (assetcdn/edge/site_config.py), validated (a
clear error on bad input)."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import unquote

from aiohttp import web

from assetcdn.edge.site_config import EdgeConfig, PullZone, serves_on_host, tenant_path
from assetcdn.shared.edge_rules import Redirect
from assetcdn.shared.errors import ApiError
from assetcdn.shared.paths import InvalidPath, parse_cdn_path
from assetcdn.shared.purge_targets import PurgeTarget, unsafe_path, zone_path_prefix

REDIRECTS: dict[int, type[web.HTTPMove]] = {
    301: web.HTTPMovedPermanently, 302: web.HTTPFound, 303: web.HTTPSeeOther,
    307: web.HTTPTemporaryRedirect, 308: web.HTTPPermanentRedirect,
}


@dataclass(frozen=True, slots=True)
class PullPath:
    """A pull zone's path: `path` is what its origin is asked for (percent-encoded, from `/`), `prefix` what
    comes before it in the request path (`/<zone>` on the default host, nothing on the zone's own hosts)."""

    zone: PullZone
    path: str
    prefix: str


def resolve(config: EdgeConfig, host_zone: str | None, path: str, path_qs: str, raw_path: str | None = None,
            *, redirects: bool = True, rewrites: bool | None = None) -> Redirect | PullPath | str:
    """The redirect a request path answers with, the pull zone path it names, or the CDN path (no leading
    slash) it names; InvalidPath if it is none of them. `_redirects` match the request as sent (`path_qs`: its
    query string goes to the location; `redirects` False: no redirect answers this request, `rewrites` False:
    nor does a rewrite apply, as `redirects` by default); `host_zone` is the tenant zone of the request's host
    (None: the default host); `raw_path` the path as sent, percent-encoded (the form an origin is asked for;
    default `path`)."""
    raw = path if raw_path is None else raw_path
    rewrites = redirects if rewrites is None else rewrites
    redirect = config.rules.redirects.match(path_qs) if redirects or rewrites else None
    if redirect is not None:
        if not redirect.is_rewrite:
            if redirects:
                return redirect
        elif rewrites:
            path = raw = redirect.location.split("?", 1)[0]
    pull = config.pull_target(host_zone, raw)
    if pull is not None:
        zone, origin_path, prefix = pull
        return PullPath(zone, origin_path_checked(origin_path), prefix)
    return parse_cdn_path(tenant_path(host_zone, path))


def origin_path_checked(raw: str) -> str:
    """A pull zone's path, refused when a dot segment (`..`, also percent-encoded) could take it outside the
    zone's path prefix at the origin, or a control character could split the origin request. Origins that
    decode before they resolve dot segments read `..%2f` and `..%5c` as one too (`\\` separates on some), and
    those that drop path parameters first read `..;x` as `..`."""
    if unsafe_path(raw):
        raise InvalidPath("dot segments and control characters are not allowed.")
    return raw


def purge_named(config: EdgeConfig, target: PurgeTarget) -> list[PullPath | str]:
    """What a purge URL names, resolved as a request for it would be (its host's zone, a rewrite, a pull zone's
    path as sent, a CDN path decoded), and the path itself when a `_redirects` rule (a redirect, or a rewrite to
    another path) answers it: the copies kept there before the rule came, which its requests get again once the
    rule goes. Empty when it names nothing that is cached (a bad path, another zone's file on a tenant host, which
    its requests are refused as not found)."""
    host_zone = config.zone_for_host(target.host) if target.host is not None else None
    path = unquote(target.path)
    named: list[PullPath | str] = []
    for redirects in (True, False):
        try:
            # `_redirects` match its path as sent, as a request's (`request.path_qs` is percent-encoded): decoded,
            # `%2F` would read as `/` and `%3F` start a query, and a rewrite name another path than its requests'.
            found = resolve(config, host_zone, path, target.path, target.path, redirects=redirects)
        except (InvalidPath, ApiError):  # ApiError: its rule cannot map it (400 to a request): nothing kept there
            continue
        if isinstance(found, Redirect) or found in named:
            pass
        elif isinstance(found, PullPath) or serves_on_host(found, host_zone):  # never another zone's on its host
            named.append(found)
        if not config.rules.redirects.rules:  # no rule: the path as it is, found already
            break
    return named


def purge_prefix_named(config: EdgeConfig, target: PurgeTarget) -> tuple[str, str, bool] | None:
    """(zone, path prefix from `/`, whether a pull zone's) of a purge prefix, its host read as `resolve` reads
    a request's: a tenant host's or custom domain's zone (whose `/v1/...` is its files', and `/<zone>/...` and
    `/stocks/...` too, as `tenant_path` and `serves_on_host` read them), else `/<zone>/...`. None when it names no
    zone."""
    host_zone = config.zone_for_host(target.host) if target.host is not None else None
    pull = config.pull_target(host_zone, target.path)
    if pull is not None:
        zone, path, _ = pull
        return zone.name, path, True
    if host_zone is not None:
        path = unquote(target.path)
        name, slash, rest = path[1:].partition("/")
        if slash and tenant_path(host_zone, path) == path and serves_on_host(name, host_zone):
            return name, "/" + rest, False
        return host_zone, path, False
    if not zone_path_prefix(target.path):
        return None
    name, _, rest = target.path[1:].partition("/")
    return name, "/" + unquote(rest), False


def receive(request: web.Request, config: EdgeConfig, host_zone: str | None) -> PullPath | str:
    """`resolve` for the application: the pull zone path or CDN path, else its redirect raised, or 400
    InvalidPath. Only a pull zone's paths take other methods than GET and HEAD (405 otherwise), but OPTIONS, a page's
    CORS preflight, which the delivery route answers for a stored file's path. A redirect answers
    GET and HEAD only (a client may follow a 301 or 302 with a GET); a rewrite (200) applies to every method, so that
    a URL's unsafe requests reach the origin path its reads come from, and their success invalidates that copy."""
    safe = request.method in ("GET", "HEAD")
    try:
        named = resolve(config, host_zone, request.path, request.path_qs, request.rel_url.raw_path, redirects=safe,
                        rewrites=True)
    except InvalidPath as exc:
        raise ApiError(400, "InvalidPath", f"Invalid asset path: {exc}", target="path") from None
    if not safe and not isinstance(named, PullPath) and request.method != "OPTIONS":
        raise web.HTTPMethodNotAllowed(request.method, ["GET", "HEAD", "OPTIONS"])
    if isinstance(named, Redirect):
        raise REDIRECTS[named.status](named.location)
    return named
