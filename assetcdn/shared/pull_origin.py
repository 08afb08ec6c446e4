"""A pull zone's origin, as control checks it and every edge reads it.

A zone with an origin is a pull zone: its CDN paths (``/<zone>/<path>``, its tenant host and its custom
domains) are fetched from ``<Url>/<path>`` by the edges and cached by the origin's own headers (RFC 9111),
instead of being read from control's storage. The origin is set through the zone API in the client form
below (PascalCase fields) and travels to the edges inside the published config (assetcdn/shared/published_config.py)
in the same form.

    {"Url": "https://origin.example.com/assets", "HostHeader": "www.example.com",
     "RequestHeaders": {"X-Origin-Secret": "..."}, "StoreSetCookie": false}

``parse_origin`` is the one check of that form (types, URL shape, header names and values, sizes) as control
stores it and the edges read it; ``parse_new_origin``, what the zones API takes, adds the checks made since
(an origin accepted before them is still read). The address an origin's name resolves to is checked by the edge
when it connects (assetcdn/shared/address_guard.py).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from yarl import URL

MAX_URL_LENGTH = 2048
MAX_REQUEST_HEADERS = 20
MAX_HEADER_VALUE = 1024
MAX_HOST_NAME = 253  # a DNS name's longest text form (RFC 1035 2.3.4), without the root's trailing dot
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,64}")
_FORBIDDEN_VALUE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
_NAME = r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)*[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOST_NAME = re.compile(_NAME + r"\.?")
# A Host field (RFC 9110 7.2): a URI's host (RFC 3986 3.2.2: a registered name, an absolute one's trailing dot
# included, an IPv4 address, or an IP literal, of which an IPv6 address in brackets) and an optional port.
_REG_NAME = r"(?:[A-Za-z0-9._~!$&'()*+,;=-]|%[0-9A-Fa-f]{2})+"
_HOST_FIELD = re.compile(r"(?P<host>" + _REG_NAME + r"|\[(?P<ipv6>[0-9A-Fa-f:.]+)\])(?::(?P<port>[0-9]{1,5}))?")
# Fields a zone may not set on its origin requests: the edge owns framing, the connection and the Host.
RESERVED_REQUEST_HEADERS = frozenset((
    "host", "connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade",
    "content-length", "expect", "via", "x-forwarded-for", "x-forwarded-proto", "forwarded", "range",
    "if-none-match", "if-modified-since", "if-match", "if-unmodified-since", "if-range"))


URL_HOST_FORM = "'Origin.Url' needs a host name or an IP address as its host."
HOST_HEADER_FORM = (f"'Origin.HostHeader' must be a Host field: a host name of at most {MAX_HOST_NAME} characters "
                    "(and a trailing dot), an IP address (IPv6 in brackets), optionally with a port (1-65535).")

# Fields the edge took over after origins were first stored (refused in a new origin, read in a stored one):
# CDN-Loop carries the client's values and the edge's loop mark (RFC 8586), which a zone's own value would drop;
# Surrogate-Capability names this cache to the origin, and the edge's own value replaced a zone's (never sent);
# the hop-by-hop fields the edge never passes on from a client (assetcdn/edge/origin_client.py HOP_BY_HOP: they
# concern a connection to a proxy, and the edge is the one connected to the origin); and Request-Range, the old
# spelling of Range that Apache httpd still honours, which the edge leaves out of a fill as it does Range (its 206,
# or a 416 the origin lets caches keep, would be every client's answer).
EDGE_OWNED_SINCE = frozenset(("cdn-loop", "surrogate-capability", "proxy-authorization", "proxy-authenticate",
                              "proxy-authentication-info", "http2-settings", "request-range"))


class OriginProblem(ValueError):
    """What is wrong with an origin, with the field it concerns (for the API's error envelope)."""

    def __init__(self, message: str, target: str) -> None:
        super().__init__(message)
        self.target = target


SHOWN_VALUE = "(set)"  # what answers show in place of a request field's value (it may be a secret)


@dataclass(frozen=True, slots=True)
class PullOrigin:
    url: str                                          # http(s)://host[:port][/path prefix], no query
    host_header: str | None = None                    # the Host sent to the origin (default: the URL's)
    request_headers: Mapping[str, str] = field(default_factory=dict)  # added to every origin request
    store_set_cookie: bool = False                    # cache responses that set cookies (off: never stored)

    def to_json(self) -> dict[str, Any]:
        return {"Url": self.url, "HostHeader": self.host_header, "RequestHeaders": dict(self.request_headers),
                "StoreSetCookie": self.store_set_cookie}

    def public_json(self) -> dict[str, Any]:
        """What the API shows: header values may be secrets the origin checks, so only their names."""
        return {"Url": self.url, "HostHeader": self.host_header,
                "RequestHeaders": {name: SHOWN_VALUE for name in self.request_headers},
                "StoreSetCookie": self.store_set_cookie}


def valid_host(host: str) -> bool:
    """A URL's host (as `urlsplit` gives it: no brackets) is an IPv6 address, or a host name (an IDN in its
    ASCII form), IPv4 in whatever spelling being one of those names."""
    if ":" in host:
        try:
            ipaddress.IPv6Address(host.split("%", 1)[0])
        except ValueError:
            return False
        return True
    try:
        ascii_host = host.encode("idna").decode("ascii")
    except UnicodeError:
        return False
    return bool(_HOST_NAME.fullmatch(ascii_host))


def host_field(value: object) -> re.Match[str] | None:
    """`value` read as a Host field's (RFC 9110 7.2), its `host` and `port` (None: none) apart; None when it is
    none: no white space or control characters, and in brackets an IPv6 address (without a zone id)."""
    found = _HOST_FIELD.fullmatch(value) if isinstance(value, str) else None
    if found is not None and found["ipv6"] is not None:
        try:
            ipaddress.IPv6Address(found["ipv6"])
        except ValueError:
            return None
    return found


def parse_origin(data: object) -> PullOrigin:
    """The origin of a zone from its client form; OriginProblem when it is not one."""
    if not isinstance(data, dict):
        raise OriginProblem("'Origin' must be an object: {\"Url\": \"https://origin.example.com\"}.", "Origin")
    unknown = set(data) - {"Url", "HostHeader", "RequestHeaders", "StoreSetCookie"}
    if unknown:
        raise OriginProblem(f"Unknown field(s) in 'Origin': {', '.join(sorted(unknown))}.", "Origin")
    url = data.get("Url")
    if not isinstance(url, str) or not url:
        raise OriginProblem("'Origin.Url' is required: the http or https URL the zone's paths are fetched from.",
                            "Origin.Url")
    if len(url) > MAX_URL_LENGTH or _FORBIDDEN_VALUE.search(url) or " " in url:
        raise OriginProblem("'Origin.Url' is not a valid URL.", "Origin.Url")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise OriginProblem("'Origin.Url' is not a valid URL.", "Origin.Url") from None
    if parts.scheme not in ("http", "https"):
        raise OriginProblem("'Origin.Url' must be an http or https URL.", "Origin.Url")
    if not parts.hostname or parts.username is not None or parts.password is not None:
        raise OriginProblem("'Origin.Url' needs a host, and may not carry a user name or password "
                            "(send credentials with 'Origin.RequestHeaders').", "Origin.Url")
    if not valid_host(parts.hostname):
        raise OriginProblem(URL_HOST_FORM, "Origin.Url")
    if parts.query or parts.fragment or url.endswith(("?", "#")):
        raise OriginProblem("'Origin.Url' may have a path prefix but no query or fragment.", "Origin.Url")
    if port == 0:
        raise OriginProblem("'Origin.Url' has no valid port.", "Origin.Url")
    host_header = data.get("HostHeader")
    if host_header is not None and host_field(host_header) is None:
        raise OriginProblem(HOST_HEADER_FORM, "Origin.HostHeader")
    headers = data.get("RequestHeaders")
    if headers is None:  # null is none; [], "" or false are not an object of fields
        headers = {}
    if not isinstance(headers, dict) or len(headers) > MAX_REQUEST_HEADERS:
        raise OriginProblem(f"'Origin.RequestHeaders' must be an object of at most {MAX_REQUEST_HEADERS} "
                            "header names and values.", "Origin.RequestHeaders")
    for name, value in headers.items():
        if not isinstance(name, str) or not _TOKEN.fullmatch(name) or name.lower() in RESERVED_REQUEST_HEADERS:
            raise OriginProblem(not_sendable(name), "Origin.RequestHeaders")
        if not isinstance(value, str) or len(value) > MAX_HEADER_VALUE or _FORBIDDEN_VALUE.search(value):
            raise OriginProblem(f"The value of '{name}' must be text of at most {MAX_HEADER_VALUE} characters "
                                "without control characters.", "Origin.RequestHeaders")
    store_set_cookie = data.get("StoreSetCookie", False)
    if not isinstance(store_set_cookie, bool):
        raise OriginProblem("'Origin.StoreSetCookie' must be true or false.", "Origin.StoreSetCookie")
    normalised = f"{parts.scheme}://{parts.netloc.lower()}{parts.path.rstrip('/')}"
    return PullOrigin(url=normalised, host_header=host_header, request_headers=dict(headers),
                      store_set_cookie=store_set_cookie)


def parse_new_origin(data: object) -> PullOrigin:
    """`parse_origin` of an origin a client sets now (the zones API), with the checks added since origins were
    first stored: an origin control stored, or published to the edges, before them is still read by
    `parse_origin` as it was accepted, so that one refused now cannot stop control from listing or publishing
    every zone's config, nor the edges from taking it."""
    origin = parse_origin(data)
    try:  # the form stored and published (its host in lower case), as control and the edges read it back
        stored: PullOrigin | None = parse_origin(origin.to_json())
    except OriginProblem:
        stored = None
    if stored != origin:  # `İ` is two characters in lower case: a URL of 2048 could become one no reader takes
        raise OriginProblem(f"'Origin.Url' must be at most {MAX_URL_LENGTH} characters with its host in lower case.",
                            "Origin.Url")
    given = data.get("Url") if isinstance(data, dict) else None  # a text, as parse_origin took it
    if isinstance(given, str) and "\t" in given:  # urlsplit drops tabs (WHATWG): another URL would be stored
        raise OriginProblem("'Origin.Url' may not contain a tab or other white space.", "Origin.Url")
    parts = urlsplit(origin.url)
    if "%" in (parts.hostname or ""):  # `[::1%25eth0]`: an interface of the edge the origin is reached through
        raise OriginProblem("'Origin.Url' may not name an IPv6 zone (`%25...` after the address): an origin is "
                            "reached by its address alone.", "Origin.Url")
    # In brackets only an IPv6 address (not an IPvFuture literal such as `[v1.x]`, read as the name `v1.x`).
    if parts.netloc.startswith("[") != (":" in (parts.hostname or "")):
        raise OriginProblem(URL_HOST_FORM, "Origin.Url")
    try:  # the URL as the edges read it: a name Python's IDNA codec maps (a soft hyphen dropped) yarl refuses
        URL(origin.url)
    except ValueError:
        raise OriginProblem(URL_HOST_FORM, "Origin.Url") from None
    if len((URL(origin.url).raw_host or "").rstrip(".")) > MAX_HOST_NAME:  # no resolver looks such a name up
        raise OriginProblem(f"The host of 'Origin.Url' is longer than a host name may be ({MAX_HOST_NAME} "
                            "characters).", "Origin.Url")
    host = host_field(origin.host_header)
    if host is not None and (not 0 < int(host["port"] or 80) < 65536
                             or len(host["host"].removesuffix(".")) > MAX_HOST_NAME):
        raise OriginProblem(HOST_HEADER_FORM, "Origin.HostHeader")
    named: set[str] = set()
    for name in origin.request_headers:
        # Compared as the edge compares them (assetcdn/edge/origin_client.py): without case and with `_` read as
        # `-`, as servers that pass fields as CGI variables read them (`If_None_Match` is HTTP_IF_NONE_MATCH).
        spelled = name.lower().replace("_", "-")
        if not _TOKEN.fullmatch(spelled) or spelled in RESERVED_REQUEST_HEADERS or spelled in EDGE_OWNED_SINCE:
            raise OriginProblem(not_sendable(name), "Origin.RequestHeaders")
        if spelled in named:
            raise OriginProblem(f"'{name}' is named twice in 'Origin.RequestHeaders' (names are compared without "
                                "case, '_' read as '-').", "Origin.RequestHeaders")
        named.add(spelled)
        if origin.request_headers[name] == SHOWN_VALUE:  # an answer's origin sent back as it was shown
            raise OriginProblem(f"The value of '{name}' is '{SHOWN_VALUE}', what answers show in place of a value: "
                                "send the field's value itself (a PUT replaces the whole origin).",
                                "Origin.RequestHeaders")
    return origin


def not_sendable(name: object) -> str:
    return (f"'{name}' cannot be sent to an origin by a zone (not a header name, or one the edge sets "
            "itself).")
