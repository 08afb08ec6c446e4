"""What a purge's URLs and prefixes name, in the form both sides compare: control checks them
(assetcdn/control/routes/purge.py), each edge maps them to its cache tags (assetcdn/edge/node.py).

A purge item is an absolute http(s) URL (its host is read by the edge as a request's Host: a zone's tenant
host or custom domain names that zone) or a path from `/` on the default host (`/<zone>/...`). Paths are
compared in one spelling of their percent-encoding (`normal_path`), the one a pull zone's stored responses
are tagged with (assetcdn/edge/states/pull.py), so `/a%7eb`, `/a~b` and `/a%7Eb` name the same file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import quote, unquote, urlsplit

MAX_ITEM_LENGTH = 2048
# urlsplit drops tabs and newlines anywhere in a URL (WHATWG): refuse them rather than purge another URL.
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_ESCAPE = re.compile(r"%([0-9A-Fa-f]{2})")
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
# RFC 3986 pchar besides unreserved and percent-encodings, plus the separator: kept as they are.
_PATH_SAFE = "/!$&'()*+,;=:@"
# A path of these characters only is in its one spelling already (`normal_path` leaves it as it is).
_PLAIN_PATH = re.compile("[" + re.escape("".join(sorted(_UNRESERVED)) + _PATH_SAFE) + "]*")


@dataclass(frozen=True, slots=True)
class PurgeTarget:
    """A purge URL or prefix taken apart: `host` (None for a path) and its path as sent, from `/`."""

    host: str | None
    path: str


def split_target(item: object) -> PurgeTarget | None:
    """The host and path of a purge URL or prefix; None when it is neither an absolute http(s) URL nor a
    path from `/`, is too long, or holds a control character (as sent or percent-encoded)."""
    if not isinstance(item, str) or not item or len(item) > MAX_ITEM_LENGTH or _CONTROL.search(item):
        return None
    try:
        item.encode("utf-8")  # a lone surrogate names no URL
        if "://" in item:
            parts = urlsplit(item)
            host: str | None = parts.hostname  # a malformed IPv6 literal raises here (a port is not read)
            if parts.scheme not in ("http", "https") or not host:
                return None
            path = parts.path or "/"
        elif item.startswith("/") and not item.startswith("//"):
            host, path = None, item.split("?", 1)[0].split("#", 1)[0]
        else:
            return None
    except ValueError:
        return None
    if unsafe_path(path):
        return None
    return PurgeTarget(host, path)


def unsafe_path(raw: str) -> bool:
    """Whether a path (percent-encoded) holds a dot segment (`..`, also percent-encoded, split by `\\`, which
    some origins read as a separator, or followed by path parameters, `..;x`, which Tomcat, Jetty and Spring
    drop before they resolve dot segments) or a character that could split a request (NUL, CR, LF), as the
    edge refuses it in a pull zone's request path (assetcdn/edge/states/recv.py)."""
    if "%" not in raw and "\\" not in raw:  # nothing to decode: the segments are as written
        if "\x00" in raw or "\r" in raw or "\n" in raw:
            return True
        if "." not in raw:
            return False
        if ";" in raw:
            return any(_dot_segment(segment) for segment in raw.split("/"))
        segments = raw.split("/")
        return "." in segments or ".." in segments
    return unsafe_segments(raw)


def unsafe_segments(raw: str) -> bool:
    """`unsafe_path` read segment by segment, each percent-decoded (what its quick answer must agree with)."""
    for segment in raw.split("/"):
        decoded = unquote(segment)
        if (any(_dot_segment(part) for part in decoded.replace("\\", "/").split("/"))
                or any(char in decoded for char in "\x00\r\n")):
            return True
    return False


def _dot_segment(segment: str) -> bool:
    """Whether a segment is `.` or `..` once its path parameters (from the first `;`) are left out."""
    return segment.partition(";")[0] in (".", "..")


def normal_path(raw: str) -> str:
    """One spelling of a path's percent-encoding (RFC 3986 6.2.2): escapes of unreserved characters
    decoded, the others in upper case, and what may not stand in a path as it is (a space, a non-ASCII
    character, a `%` that starts no escape) escaped as UTF-8. Reserved characters keep their form:
    `%2F` is not `/`."""
    if _PLAIN_PATH.fullmatch(raw):
        return raw
    out: list[str] = []
    at = 0
    for match in _ESCAPE.finditer(raw):
        out.append(quote(raw[at:match.start()], safe=_PATH_SAFE))
        char = chr(int(match.group(1), 16))
        out.append(char if char in _UNRESERVED else "%" + match.group(1).upper())
        at = match.end()
    out.append(quote(raw[at:], safe=_PATH_SAFE))
    return "".join(out)


def zone_path_prefix(path: str) -> bool:
    """Whether a default-host prefix names a zone: `/<zone>/` and what follows, not a part of a zone name."""
    zone, slash, _ = path[1:].partition("/")
    return bool(zone) and bool(slash)
