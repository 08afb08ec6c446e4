"""The edge's copy of the configuration control publishes (assetcdn/control/storage/edge_config_store.py
builds it as the typed assetcdn/shared/published_config.py): the
`_headers` / `_redirects` rules (parsed by assetcdn/shared/edge_rules.py) and the custom domains, and how a
request's host and path map to a CDN path. Applied by every delivery response, never by forwarded
API calls."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field

from aiohttp import web
from aiohttp.typedefs import Handler
from multidict import CIMultiDict
from yarl import URL

from assetcdn.edge.cdn_loop import loop_token
from assetcdn.edge.origin_client import Origin
from assetcdn.shared.cdn_cookies import CookieHost, domains_holding
from assetcdn.shared.content_security import keep_sandbox
from assetcdn.shared.edge_rules import EMPTY_RULES, RESERVED_HEADERS, HeaderChanges, RuleSet
from assetcdn.shared.errors import ApiError
from assetcdn.shared.paths import STOCK_ROOT, ZONE_NAME
from assetcdn.shared.published_config import PublishedConfig
from assetcdn.shared.pull_origin import PullOrigin

FORWARDED = web.RequestKey("forwarded_to_control", bool)
REQUEST_HOST = web.RequestKey("request_host", str)
# The paths the edge answers itself on every host (its API, /metrics, the dashboard, the cluster protocol, ACME
# HTTP-01 challenges), after their leading `/`: never a zone's path, not even on a pull zone's own host, whose
# other paths are all its origin's. assetcdn/edge/app.py's delivery route leaves them out, and the hit path
# (assetcdn/edge/fastpath/prepared.py) hands them to the application.
EDGE_PATHS = r"api/|metrics$|_cluster/|dashboard(?:/|$)|\.well-known/acme-challenge/"
_EDGE_PATH = re.compile("/(?:" + EDGE_PATHS + ")")


def is_edge_path(path: str) -> bool:
    """Whether a request path (decoded, without its query) is one of the edge's own routes' (`EDGE_PATHS`)."""
    return _EDGE_PATH.match(path) is not None


@dataclass(frozen=True, slots=True)
class PullZone:
    """A zone whose paths come from an origin (assetcdn/edge/states/pull.py serves them)."""

    name: str
    origin: Origin
    store_set_cookie: bool = False
    fleet: str = ""  # the edges' pseudonym in CDN-Loop (assetcdn/edge/cdn_loop.py): "" detects no loop
    # What names this config of the zone in its fills' flights beside the URL (assetcdn/edge/states/pull.py
    # `flight_key`): a digest of every field `replaced` compares, so that a request under another config of the zone
    # (another origin, the zone deleted and made again) never waits for a fill of the former one. Made once per
    # config, short (a fill hashes it with its URL's key), and naming no request field's value (a secret).
    flight: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        origin = self.origin
        basis = "\n".join(map(repr, (str(origin.url), origin.host_header, origin.request_headers, origin.loop_token,
                                     self.store_set_cookie, self.fleet)))
        object.__setattr__(self, "flight", "flight\n" + hashlib.sha256(basis.encode("utf-8", "surrogateescape"))
                           .hexdigest()[:32])


@dataclass(frozen=True)
class EdgeConfig:
    version: str | None = None
    rules: RuleSet = EMPTY_RULES
    domains: dict[str, str] = field(default_factory=dict)
    base_domain: str = ""
    pull_zones: dict[str, PullZone] = field(default_factory=dict)   # zone -> where its paths come from
    # The CDN's own hosts under the base domain (`PublishedConfig.own_hosts`): the default host, not a tenant's.
    own_hosts: frozenset[str] = frozenset()
    # The `_headers` and `_redirects` texts `rules` was parsed from: what `zones_changed` compares.
    rule_texts: tuple[str | None, str | None] = (None, None)
    # The base domain and the domains above it (`domains_holding`): what a custom domain's cookies may not name
    # (`cookie_host`). Made once per config.
    base_and_above: frozenset[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "base_and_above", domains_holding(self.base_domain))

    @staticmethod
    def from_published(published: PublishedConfig, fleet: str = "") -> EdgeConfig:
        """`fleet`: the edges' pseudonym in CDN-Loop (assetcdn/edge/cdn_loop.py); "" sends none."""
        return EdgeConfig(version=published.version,
                          rules=RuleSet.from_texts(published.headers, published.redirects, strict=False),
                          domains={h.lower(): z for h, z in published.domains.items()},
                          # Compared with `canonical_host`'s form (no trailing dot), as control's check of custom
                          # domains reads it: `cdn.example.com.` is the DNS name `cdn.example.com`.
                          base_domain=published.base_domain.lower().strip("."),
                          own_hosts=frozenset(canonical_host(host) for host in published.own_hosts),
                          pull_zones={zone: pull_zone(zone, origin, fleet)
                                      for zone, origin in published.origins.items()},
                          rule_texts=(published.headers, published.redirects))

    def zones_changed(self, before: EdgeConfig | None) -> set[str] | None:
        """The zones whose paths this config may answer otherwise than `before`: those whose pull origin came, went
        or changed. None when more than zones changed (the rules, the hosts' zones): any path may answer otherwise.
        Lets the hit path keep the prepared heads of the other zones (an installation of thousands of pull zones
        changes one at a time)."""
        if before is None or (self.rule_texts, self.domains, self.base_domain, self.own_hosts) != (
                before.rule_texts, before.domains, before.base_domain, before.own_hosts):
            return None
        old, new = before.pull_zones, self.pull_zones
        return {name for name in old.keys() | new.keys() if old.get(name) != new.get(name)}

    def pull_target(self, host_zone: str | None, path: str) -> tuple[PullZone, str, str] | None:
        """(zone, path at the origin, what comes before it) when a request path names a pull zone's path:
        every path of a pull zone's own hosts, `/<zone>/...` on the others. None for stored zones."""
        if not self.pull_zones:
            return None
        if host_zone is not None:
            zone = self.pull_zones.get(host_zone)
            return (zone, path, "") if zone is not None else None
        name, slash, rest = path[1:].partition("/")
        zone = self.pull_zones.get(name)
        if zone is None:
            return None
        return zone, "/" + rest if slash else "/", "/" + name

    def zone_for_host(self, host: str) -> str | None:
        """The tenant zone a host names (a custom domain, or `<zone>.<base domain>` but the CDN's own hosts, which
        are the default host); `host` as :func:`canonical_host` gives it (normalised again here, so no caller can get
        it wrong). Any other `<label>.<base domain>` is a tenant host even before its zone exists (the edge does not
        know a stored zone without files): it serves that zone's paths only, 404 until they come."""
        name = canonical_host(host)
        if name in self.domains:
            return self.domains[name]
        suffix = "." + self.base_domain
        if self.base_domain and name.endswith(suffix) and name not in self.own_hosts:
            zone = name[: -len(suffix)]
            if ZONE_NAME.match(zone):
                return zone
        return None

    def cookie_host(self, host: str, shared_host: bool) -> CookieHost:
        """What a pull zone's origin may name in a cookie's Domain on a request for `host` (as :func:`canonical_host`
        gives it; `shared_host`: the edges' default host, `/<zone>/...`), which `pull.client_headers` keeps every
        other Domain's cookie from (`cdn_cookies.may_set`): on a zone's custom domain, whose cookies are its origin's
        choice, any domain but the base domain and those above it (`base_and_above`; any at all with no base
        domain): a custom domain beside or above the base domain (`shop.example.com`, `example.com` for
        `cdn.example.com`) would otherwise set `Domain=example.com`, which reaches every zone's tenant host; `host`
        alone on a zone's tenant host (`<zone>.<base domain>`), since `Domain=<base domain>` would reach every
        zone's tenant host; "" (none) on the default host, every zone's, where even `Domain=<host>` reaches every
        host below it (the tenant hosts, when it is the base domain)."""
        if shared_host:
            return ""
        if host in self.domains:
            return self.base_and_above or None
        return host


def canonical_host(host: str) -> str:
    """The one form of a request's host every decision uses (tenant zone, `_headers` host patterns,
    prepared hits): lower case, without the port and without trailing dots. `zone1.cdn.example.` and
    `ZONE1.cdn.example:443` are the DNS name `zone1.cdn.example`; left as sent they would match no
    tenant and be served as the default host, which serves every zone."""
    name = host.strip().lower()
    if name.startswith("["):  # an IPv6 literal, perhaps with a port
        end = name.find("]")
        return name[: end + 1] if end > 0 else name
    if name.count(":") == 1:
        name = name.split(":", 1)[0]
    return name.rstrip(".")


# host [":" port] (RFC 9110 section 7.2): a bracketed IP literal or a name of letters, digits, "-", "_"
# and dots (a trailing dot included), and an optional numeric port.
_HOST = re.compile(r"(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]*)(?::[0-9]*)?")


def is_valid_host(host: str) -> bool:
    """Whether a Host value names a host at all. Anything else (userinfo, a list, an escape, two ports)
    names no tenant and would be served as the default host, which serves every zone, so it is 400."""
    return _HOST.fullmatch(host) is not None


@web.middleware
async def host_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    if not is_valid_host(request.host):
        raise ApiError(400, "InvalidHost", "The Host header must be a host name or an IP address, with an "
                                           "optional port.", target="Host")
    return await handler(request)


def request_host(request: web.Request) -> str:
    """`canonical_host` of the request's host, worked out once per request. aiohttp's `request.host` is
    the absolute-form request-target's authority when there is one (it wins over Host, RFC 9112
    section 3.2.2), else the Host header."""
    found = request.get(REQUEST_HOST)
    if found is None:
        found = request[REQUEST_HOST] = canonical_host(request.host)
    return found


def tenant_path(host_zone: str | None, path: str) -> str:
    """The CDN path of a request path on the tenant host of `host_zone` (None: the default host).
    Which paths such a host may serve at all is `serves_on_host`'s."""
    if host_zone and path.startswith("/v1/"):
        return f"/{host_zone}{path}"
    return path


def serves_on_host(cdn_path: str, host_zone: str | None) -> bool:
    """Whether a request on the tenant host of `host_zone` (None: the default host) may read `cdn_path` (no leading
    slash): its zone's files and the stock pool (assetcdn/edge/access.py refuses the others as not found)."""
    if host_zone is None:
        return True
    first = cdn_path.split("/", 1)[0]
    return first == host_zone or first == STOCK_ROOT


def apply_rule_changes(changes: HeaderChanges, headers: CIMultiDict[str],
                       kept: frozenset[str] = frozenset()) -> None:
    """The `_headers` changes of one request path and host applied to a delivery response's headers
    (also used by the hit path, assetcdn/edge/fastpath/prepared.py, to build its header block once). `kept`: more
    lower-case names than RESERVED_HEADERS that the rules may neither set nor remove on this answer."""
    if not changes:
        return
    reserved = RESERVED_HEADERS | kept if kept else RESERVED_HEADERS
    for name in list(headers):
        if name.lower() in changes.remove and name.lower() not in reserved:
            del headers[name]
    for name, value in changes.set.items():
        if name.lower() not in reserved:
            headers[name] = value
    keep_sandbox(headers)


def pull_zone(name: str, origin: PullOrigin, fleet: str = "") -> PullZone:
    return PullZone(name, Origin(URL(origin.url), origin.host_header, tuple(origin.request_headers.items()),
                                 loop_token(fleet, name) if fleet else ""),
                    origin.store_set_cookie, fleet)
