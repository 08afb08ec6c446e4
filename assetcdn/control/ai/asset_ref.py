"""The asset an AI request names, from its `url` field: a CDN path, a storage path, or a URL on one of
this CDN's own hosts. Nothing is ever fetched: the answer is a path in the control plane's own store,
and any other URL (another site, a private address, a metadata service) is refused with 400.

Accepted forms:
- `/<zone>/v1/<category>/<file>` or `/stocks/...` (CDN path; the leading `/` is optional);
- `clients/<zone>/v1/...` or `/clients/<zone>/v1/...` (storage path);
- `http(s)://<host>/<zone>/v1/...` where <host> is the configured public URL's or a registered
  edge's (host and port), or a tenant host (a zone's custom domain or `<zone>.<base domain>`),
  where `/v1/...` names that zone and only its files and the stock pool may be named.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from assetcdn.shared.errors import ApiError, bad_request, not_found
from assetcdn.shared.paths import (
    STOCK_ROOT,
    ZONE_NAME,
    InvalidPath,
    cdn_path_of,
    parse_cdn_path,
    parse_storage_path,
)

MAX_URL_LENGTH = 2048
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True)
class OwnHosts:
    """The hosts whose URLs name this CDN's assets."""

    origins: frozenset[tuple[str, int]]   # (lower-case host name, port): public URL and edges
    tenant_domains: Mapping[str, str]     # custom domain -> zone
    base_domain: str
    # The CDN's own hosts under the base domain: the default host, as the edges read them (no tenant's).
    default_hosts: frozenset[str] = frozenset()

    @staticmethod
    def build(origin_urls: Iterable[str], tenant_domains: Mapping[str, str], base_domain: str,
              default_hosts: Iterable[str] = ()) -> OwnHosts:
        origins = set()
        for url in origin_urls:
            parts = urlsplit(url)
            if parts.hostname and parts.scheme in DEFAULT_PORTS:
                origins.add((parts.hostname.lower(), parts.port or DEFAULT_PORTS[parts.scheme]))
        return OwnHosts(frozenset(origins), {h.lower(): z for h, z in tenant_domains.items()},
                        base_domain.lower().strip("."), frozenset(h.lower() for h in default_hosts))

    def tenant_zone(self, host: str) -> str | None:
        if host in self.tenant_domains:
            return self.tenant_domains[host]
        suffix = "." + self.base_domain
        if self.base_domain and host.endswith(suffix) and host not in self.default_hosts:
            zone = host[: -len(suffix)]
            if ZONE_NAME.match(zone):
                return zone
        return None


def _invalid(message: str) -> ApiError:
    return bad_request(message, target="url", code="InvalidUrl")


def _foreign(raw: str) -> ApiError:
    return bad_request("Parameter 'url' must name an asset of this CDN: a path such as /<zone>/v1/logos/logo.png "
                       "or clients/<zone>/v1/..., or a URL on this CDN's own hosts. Other URLs (other sites, "
                       "private addresses) are refused: this service never fetches on a caller's behalf.",
                       target="url", code="AbsoluteUrlForbidden")


def is_absolute(raw: str) -> bool:
    return raw.startswith("//") or bool(_SCHEME.match(raw))


def cdn_path_of_url(raw: object, hosts: OwnHosts | None = None) -> str:
    """The CDN path (no leading '/') the `url` value names; ApiError 400 (or 404 for another zone's path on
    a tenant host). `hosts` is needed only for absolute URLs."""
    if raw is None or (isinstance(raw, str) and raw.strip() == ""):
        raise bad_request("Missing required parameter: url (the asset path, e.g. /<zone>/v1/logos/logo.png).",
                          target="url", code="MissingUrl")
    if not isinstance(raw, str):
        raise _invalid("Parameter 'url' must be a string.")
    if len(raw) > MAX_URL_LENGTH:
        raise bad_request(f"Parameter 'url' is longer than {MAX_URL_LENGTH} characters.", target="url",
                          code="UrlTooLong")
    if is_absolute(raw):
        return _absolute(raw, hosts)
    path = raw[1:] if raw.startswith("/") else raw
    if path.split("/", 1)[0] == "api":
        raise _invalid("Parameter 'url' must name an asset, not an API endpoint.")
    try:
        return cdn_path_of(parse_storage_path(path).repo_path)
    except InvalidPath as exc:
        raise _invalid(f"Parameter 'url' is not a valid asset path: {exc}") from None


def _absolute(raw: str, hosts: OwnHosts | None) -> str:
    try:
        parts = urlsplit(raw)
        port = parts.port
    except ValueError:
        raise _foreign(raw) from None
    scheme = parts.scheme.lower() or "https"
    host = (parts.hostname or "").lower()
    if hosts is None or scheme not in DEFAULT_PORTS or not host or parts.username is not None \
            or parts.password is not None:
        raise _foreign(raw)
    zone = hosts.tenant_zone(host)
    if zone is None and (host, port or DEFAULT_PORTS[scheme]) not in hosts.origins:
        raise _foreign(raw)
    path = unquote(parts.path)  # once, as the edge's router does; what still decodes is refused below
    if zone is not None and path.startswith("/v1/"):
        path = f"/{zone}{path}"
    try:
        cdn_path = parse_cdn_path(path)
    except InvalidPath as exc:
        raise _invalid(f"The URL's path is not an asset path of this CDN: {exc}") from None
    if cdn_path.split("/", 1)[0] == "api":
        raise _invalid("Parameter 'url' must name an asset, not an API endpoint.")
    if zone is not None and cdn_path.split("/", 1)[0] not in (zone, STOCK_ROOT):
        # A tenant host serves its own zone and the stock pool only: like a path that does not exist.
        raise not_found(f"No asset at '{raw}'.", target="url", code="AssetNotFound")
    return cdn_path
