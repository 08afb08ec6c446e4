"""Prepared hits: the response head of one (Host, path) worked out once, kept while it is valid.

A prepared hit holds the status line and every header that does not change from one request to
the next: the path's path delivery (Content-Type, ETag, Cache-Tag, nosniff, the sandbox CSP on
active types: assetcdn/edge/states/path_delivery.py), Cache-Control, X-Cache, Accept-Ranges, Access-Control-Allow-Origin
(`path_delivery.ASSET_HEADERS`), X-API-Version, the
`_headers` rules of that host and path (assetcdn/edge/site_config.py), `Server` and Content-Length. A request adds
`Date` (one string per second) and its `X-Request-ID`. The body is not kept here: a memory-tier
body is looked up by its cache key on every request (so an eviction or purge of the memory tier
takes effect at once and no evicted body stays alive here) and written from memory; a body kept on
disk only (larger than ``edge.memory_object_max_kb``) is the disk tier's file, opened per request
and sent with sendfile (a purge unlinks it: the open fails and the request goes to the full
application, which fetches it again). Writing a memory-tier body beats sendfile of its file on
throughput (hits_bench; the figures are in benchmarks/ARCHIVE.md), though sendfile costs less CPU per byte.

What makes a prepared hit stale, and how each is seen on the next request:

- a manifest change of the path (upload, overwrite, delete, new tags): the replica holds a new
  entry object (or none), checked by identity;
- new edge configuration: every prepared hit of the old configuration is dropped when its rules or domains
  changed, else those of the zones whose pull origin came, went or changed (`EdgeConfig.zones_changed`);
- a purge: the memory tier no longer has the key, or the file is gone; purges another worker of
  the node applied are replayed first (EdgeCache.sync_purges);
- control unreachable: the hit would be STALE, which the full application answers.

What is never prepared (the full application answers, assetcdn/edge/fastpath/protocol.py hands it over):
anything not in the manifest or not cached yet (a miss), private paths, tenant-host requests for
another zone, paths a `_redirects` rule redirects (a rewrite is served as the path it names), rules on a
header the hit path writes per request, and the edge's own paths (`site_config.EDGE_PATHS`: `/api/...`,
`/metrics`, the dashboard, `/_cluster/...`, ACME challenges), which a pull zone's own host would otherwise
take for its origin's.

Which path a request names and whether it may be read are the application's own decisions
(`recv.resolve`, `access.find_source`), and so are the headers (`deliver.final_headers`, the rules looked
up once per prepared hit).

A pull zone's URL (assetcdn/edge/states/pull.py) has a `PulledHit`, by request target (its query is part of
the cache key): the stored response's head as `pull.deliver` and the response hooks give it, valid while the
memory tier holds the same entry object (a 304's refresh, a new response, a purge or an eviction replaces or
drops it). Per request the hit path asks freshness.py whether it is still fresh (`reuse`) and writes Age and
Cache-Status from its clocks. Handed to the application: a request with Cache-Control, Pragma or a condition
other than If-None-Match, a stale entry, a Vary'd URL, a status other than 200, a body on disk only.
"""

from __future__ import annotations

import math
import weakref
from typing import Any

from multidict import CIMultiDict

from assetcdn.edge.access import SourceRefused, find_source
from assetcdn.edge.cache.entry import CachedObject
from assetcdn.edge.node import EdgeNode
from assetcdn.edge.site_config import EdgeConfig, apply_rule_changes, is_edge_path
from assetcdn.edge.states.deliver import (
    content_range,
    final_headers,
    header_changes,
    not_modified_headers,
)
from assetcdn.edge.states.freshness import first_value, fresh_for_plain_requests_until
from assetcdn.edge.states.keys import pull_key
from assetcdn.edge.states.lookup import lookup
from assetcdn.edge.states.path_delivery import ASSET_HEADERS
from assetcdn.edge.states.pull import (
    VARY,
    StoredResponse,
    answered_validator,
    client_headers,
    hit_cache_status,
)
from assetcdn.edge.states.recv import PullPath, resolve
from assetcdn.edge.tls.policy import HSTS_HEADER
from assetcdn.shared.analytics_keys import zone_of
from assetcdn.shared.cdn_cookies import CookieHost
from assetcdn.shared.edge_rules import RESERVED_HEADERS, HeaderChanges, Redirect
from assetcdn.shared.errors import ApiError
from assetcdn.shared.http_server import SERVER_NAME
from assetcdn.shared.manifest import ManifestEntry
from assetcdn.shared.middleware import stamp_headers
from assetcdn.shared.paths import InvalidPath

# Kept between a prepared pull hit's head and the next change of its Age or ttl: more than a float's rounding.
TICK_MARGIN_S = 1e-5
HIT = "HIT"  # the only cache status answered here: `EdgeNode.hit_status` says it (assetcdn/edge/fastpath/hit_server.py)
STATUS_200 = b"HTTP/1.1 200 OK\r\n"
STATUS_206 = b"HTTP/1.1 206 Partial Content\r\n"
STATUS_304 = b"HTTP/1.1 304 Not Modified\r\n"
SERVER_LINE = f"Server: {SERVER_NAME}\r\n".encode()
ID_FIELD = b"X-Request-ID: "  # where a pull hit's heads end: the request's id and the blank line follow
# What an answer here writes per request (assetcdn/edge/fastpath/hit_server.py) or in every prepared head,
# less what no `_headers` rule may touch anyway (RESERVED_HEADERS, skipped on both paths): a path whose
# rules name one of these is answered by the full application.
WRITTEN_HERE = frozenset({"date", "server", "x-request-id", "strict-transport-security", "connection",
                          "content-length", "content-range"})
PER_REQUEST_HEADERS = WRITTEN_HERE - RESERVED_HEADERS
# A pull zone's hit writes these per request too (its age ticks: assetcdn/edge/states/freshness.py).
PULL_PER_REQUEST_HEADERS = PER_REQUEST_HEADERS | {"age", "cache-status"}
# What a prepared head costs the memory tier's budget (`cost`, charged by assetcdn/edge/fastpath/hit_server.py)
# beside the lengths of its byte strings: the object, its strings and numbers, its freshness, and its slot in
# its Host's table (request target included). Measured with tracemalloc (tests/edge/fastpath/test_pull_hits.py
# and test_hit_state.py).
PREPARED_OVERHEAD = 300
PULLED_OVERHEAD = 1_300
# A stored zone's HTTP/2 heads, made on use (`fields_cost`): each field's tuple and its two byte strings (with the
# field's slot in the head's tuple), then a head's tuple; a head with its Date field (h2_dated) holds the same
# fields again in a tuple of its own. Measured with tracemalloc (tests/edge/fastpath/test_h2_streams.py).
H2_FIELD_OVERHEAD = 140
H2_HEAD_OVERHEAD = 60
H2_DATED_OVERHEAD = 120


def fields_cost(fields: tuple[Any, ...], dated: bool = False) -> int:
    """What an HTTP/2 head of `fields` made on use costs the memory tier's budget (`dated`: a copy of a head's
    fields with the second's Date, which holds its fields' references only)."""
    if dated:
        return H2_DATED_OVERHEAD + 8 * len(fields)
    return H2_HEAD_OVERHEAD + sum(H2_FIELD_OVERHEAD + len(name) + len(value) for name, value in fields)


def rules_touch(changes: HeaderChanges, written: frozenset[str]) -> bool:
    """Whether `_headers` rules set or remove one of the headers `written` (lower-case) per request: the full
    application then answers the path (hits here, pull zones' hits and fills alike)."""
    return bool(changes.remove & written) or any(name.lower() in written for name in changes.set)


class Prepared:
    """One (Host, path)'s hit, valid while ``entry`` is the replica's entry for ``cdn_path``."""

    __slots__ = ("entry", "cdn_path", "zone", "key", "file", "size", "etag", "head", "kept_304", "head_304",
                 "h2_head", "h2_head_304", "h2_head_206", "h2_dated", "cost")

    def __init__(self, entry: ManifestEntry, cdn_path: str, key: str, file: str | None, size: int,
                 etag: str | None, type_lines: bytes, kept_lines: bytes) -> None:
        self.entry = entry
        self.cdn_path = cdn_path
        self.zone = zone_of(cdn_path)
        self.key = key                  # memory-tier key of the body (when ``file`` is None)
        self.file = file                # the disk tier's file of a large body
        self.size = size
        self.etag = etag                # the ETag the answer gives (None: a rule detached it)
        # Status line, the header lines (Content-Type's first, then what a 304 keeps) and Content-Length last.
        self.head = STATUS_200 + type_lines + kept_lines + b"Content-Length: %d\r\n" % size
        self.kept_304 = len(STATUS_200) + len(type_lines)   # where the lines a 304 keeps start
        self.head_304: bytes | None = None  # made on the first conditional hit
        # The same heads as HTTP/2 header fields (assetcdn/edge/tls/h2.py response_fields), made on first use.
        self.h2_head: tuple[Any, ...] | None = None
        self.h2_head_304: tuple[Any, ...] | None = None
        self.h2_head_206: tuple[Any, ...] | None = None  # without Content-Range and Content-Length
        self.h2_dated: tuple[bytes, tuple[Any, ...]] | None = None  # (Date line, h2_head and its Date field)
        # What it holds with this head and the 304's (made on use, counted ahead); its HTTP/2 heads are added when
        # made (`fields_cost`, charged by the hit server while it holds this head).
        self.cost = PREPARED_OVERHEAD + 2 * len(self.head) + len(cdn_path) + len(key)

    def partial_lines(self) -> bytes:
        """A 206's status line and the 200's header lines (not kept twice), less Content-Range and Content-Length."""
        return STATUS_206 + self.head[len(STATUS_200):self.head.rindex(b"Content-Length: ")]

    def partial_head(self, start: int, end: int) -> bytes:
        """The head of a 206 for bytes ``[start, end)``."""
        return self.partial_lines() + b"Content-Range: %s\r\nContent-Length: %d\r\n" % (
            content_range(start, end, self.size).encode(), end - start)

    def not_modified_head(self) -> bytes:
        """The head of a 304: the 200's header lines `not_modified_headers` keeps, made once."""
        if self.head_304 is None:
            self.head_304 = STATUS_304 + self.head[self.kept_304:self.head.rindex(b"Content-Length: ")]
        return self.head_304


class HostView:
    """What one Host header value maps to under one configuration: its tenant zone and its hits."""

    __slots__ = ("key", "name", "zone", "cookie_host", "hits", "pulls")

    def __init__(self, key: bytes, name: str, zone: str | None, cookie_host: CookieHost) -> None:
        self.key = key        # the Host header as received
        self.name = name      # its canonical_host (assetcdn/edge/site_config.py)
        self.zone = zone
        # What a pull zone's origin may name in a cookie's Domain here (`EdgeConfig.cookie_host`, judged by
        # `pull.client_headers`): the host's own, or no domain holding the base domain on a custom domain, worked
        # out with the view, not per request.
        self.cookie_host = cookie_host
        self.hits: dict[bytes, Prepared] = {}
        self.pulls: dict[bytes, PulledHit] = {}  # pull zones' hits, by request target (the query is in the key)


def header_lines(headers: CIMultiDict[str]) -> bytes:
    if not headers:
        return b""
    return ("\r\n".join(map(": ".join, headers.items())) + "\r\n").encode()


def prepare(node: EdgeNode, config: EdgeConfig, view: HostView,
            path: str) -> tuple[Prepared, CachedObject] | PullPath | None:
    """The prepared hit of ``path`` on ``view``'s host and the cache entry it serves now; its PullPath when
    a pull zone's (`prepare_pull`); None when the full application must answer (see the module docstring).
    May read the disk tier inline (one SQLite row, or a file of at most the memory tier's object size), as
    a hit there does."""
    if is_edge_path(path):  # the edge's own routes' on every host, a pull zone's own host too: never its origin's
        return None
    try:  # what the delivery route does before its look-up (assetcdn/edge/routes/delivery.py)
        cdn_path = resolve(config, view.zone, path, path)
        if isinstance(cdn_path, PullPath):
            return cdn_path
        if not isinstance(cdn_path, str):
            return None  # a redirect
        entry = find_source(node, cdn_path, view.zone)
    except (InvalidPath, SourceRefused, ApiError):  # ApiError: a `_redirects` rule cannot map the path (400)
        return None
    changes = header_changes(config, path, view.name)
    if rules_touch(changes, PER_REQUEST_HEADERS):
        return None
    head = node.replica.head(entry)
    obj = lookup(node, head.key)
    if obj is None:
        return None
    headers = final_headers(obj, changes, cache_status=HIT, cache_control=node.asset_cache_control, head=head,
                            extra_headers=ASSET_HEADERS)
    kept = not_modified_headers(headers)
    type_lines = header_lines(CIMultiDict((name, value) for name, value in headers.items() if name not in kept))
    return Prepared(entry, cdn_path, head.key, obj.path, obj.size, headers.get("ETag"), type_lines,
                    header_lines(kept) + SERVER_LINE), obj


class PulledHit:
    """One pull zone URL's fresh hit (assetcdn/edge/states/pull.py `deliver`, X-Cache HIT), valid while ``entry``
    is the memory tier's entry under ``key`` (a refresh, a new response or a purge replaces or drops it). The
    heads hold every header but Age and Cache-Status, which tick with time (`per_request_lines`), and Date
    when the origin gave none. The entry is held weakly and its stored head not at all: what the memory tier
    evicts is freed at once, not kept alive by this until the URL is asked for again."""

    __slots__ = ("entry", "freshness", "key", "cdn_path", "zone", "size", "etag", "head", "head_304", "dated",
                 "fresh_until", "cost", "h2_block", "h2_fields", "ranged", "_block", "_tail", "_since", "_until")

    def __init__(self, stored: StoredResponse, key: str, cdn_path: str, changes: HeaderChanges,
                 own_hsts: bool = False, *, shared_host: bool = True, cookie_host: CookieHost = "") -> None:
        obj = stored.obj
        self.entry = weakref.ref(obj)
        self.freshness = stored.freshness
        self.key = obj.key if obj.key == key else key  # the entry's own string, not a copy
        self.cdn_path = cdn_path
        self.zone = zone_of(cdn_path)
        self.size = obj.size
        # What `pull.not_modified` compares: the ETag the answer carries, a `_headers` rule's when one sets or detaches it.
        etag = answered_validator(stored.headers, changes, "etag")
        self.etag = None if etag is None else etag.removeprefix("W/")
        self.dated = first_value(stored.headers, "date") is not None  # the stored Date is the answer's
        # The origin sent its 200 with a Content-Range: a 206 gives its own in its place (`partial_head`).
        self.ranged = first_value(stored.headers, "content-range") is not None
        lines = _pulled_lines(stored, changes, not_modified=False, own_hsts=own_hsts, shared_host=shared_host,
                              cookie_host=cookie_host)
        self.head = STATUS_200 + lines + b"Content-Length: %d\r\n" % obj.size
        self.head_304 = STATUS_304 + _pulled_lines(stored, changes, not_modified=True, own_hsts=own_hsts,
                                                   shared_host=shared_host, cookie_host=cookie_host)
        self.fresh_until = fresh_for_plain_requests_until(stored.freshness)  # answered here while before it
        # What it holds once it answered: its heads, and the 200's head with the lines of the second (`whole_head`).
        self.cost = PULLED_OVERHEAD + 2 * len(self.head) + len(self.head_304) + len(key) + len(cdn_path)
        # Over HTTP/2, the fields of the 200's head of the second (`HitServer._answer_pull_stream`), made from
        # `h2_block`, the `whole_head` they were made of: the same until that head changes.
        self.h2_block: bytes | None = None
        self.h2_fields: tuple[Any, ...] = ()
        self._block, self._tail, self._since, self._until = b"", b"", 0.0, 0.0

    def whole_head(self, now: float, tail: bytes) -> bytes:
        """The 200's head with Age and Cache-Status at ``now`` and ``tail`` (the Date line or the lines every
        answer has), through ``ID_FIELD``: the same bytes for every hit until one of its whole seconds ticks or
        ``tail`` changes, so a hit adds only its request's id to them."""
        if self._since <= now < self._until and tail is self._tail:
            return self._block
        block = self.head + self.per_request_lines(now) + tail + ID_FIELD
        self._block, self._tail, self._since, self._until = block, tail, now, self._lines_until(now)
        return block

    def not_modified_head(self, now: float, tail: bytes) -> bytes:
        """The head of a 304 at ``now``, through ``ID_FIELD``, as ``whole_head``'s."""
        return self.head_304 + self.per_request_lines(now) + tail + ID_FIELD

    def _lines_until(self, now: float) -> float:
        """When Age or Cache-Status's ttl (both whole seconds, `per_request_lines`) next changes after ``now``,
        a little early; ``now`` itself when it cannot be told (the response time is ahead of the clock)."""
        fresh = self.freshness
        if now < fresh.response_time:
            return now
        age = fresh.age(now)
        ttl = fresh.lifetime - age
        return now + min(math.floor(age) + 1 - age, ttl - math.floor(ttl)) - TICK_MARGIN_S

    def partial_head(self, start: int, end: int, now: float, tail: bytes) -> bytes:
        """The head of a 206 for bytes ``[start, end)`` at ``now``: the 200's header lines and the range's, through
        ``ID_FIELD``, as ``whole_head``'s."""
        block = self.head[len(STATUS_200):self.head.rindex(b"Content-Length: ")]
        if self.ranged:  # as `pull.deliver` sets the range's: the origin's Content-Range goes, never beside it
            block = b"\r\n".join(line for line in block.split(b"\r\n") if not line.lower().startswith(b"content-range:"))
        return STATUS_206 + block + b"Content-Range: %s\r\nContent-Length: %d\r\n" % (
            content_range(start, end, self.size).encode(), end - start) + self.per_request_lines(now) + tail + ID_FIELD

    def per_request_lines(self, now: float) -> bytes:
        """Age (RFC 9111 4.2.3's current_age) and Cache-Status at ``now``, as `pull.deliver` writes them."""
        fresh = self.freshness
        return b"Age: %d\r\nCache-Status: %s\r\n" % (int(fresh.age(now)), hit_cache_status(fresh, now).encode())


def _pulled_lines(stored: StoredResponse, changes: HeaderChanges, *, not_modified: bool, own_hsts: bool,
                  shared_host: bool, cookie_host: CookieHost) -> bytes:
    """The header lines the application gives a pull zone's hit (`pull.deliver`, then the response hooks:
    the stamp, the `_headers` rules, aiohttp's defaults), less Age and the edge's Cache-Status, and less the
    origin's HSTS field where the site writes its own (`own_hsts`: the hook replaces it)."""
    headers = client_headers(stored.headers, HIT, "", age=0, shared_host=shared_host, cookie_host=cookie_host,
                             ranges=True)  # a stored 200's: its 304 says the Accept-Ranges its 200 says
    if own_hsts:
        headers.popall(HSTS_HEADER, None)
    # client_headers sets Age and appends this cache's Cache-Status last: both are written per request.
    items = list(headers.items())[:-1]
    headers = CIMultiDict((name, value) for name, value in items if name.lower() != "age")
    if not_modified:
        for name in ("Content-Type", "Content-Encoding", "Content-Range"):
            headers.popall(name, None)
    stamp_headers(headers)
    apply_rule_changes(changes, headers)
    headers.setdefault("Server", SERVER_NAME)
    return header_lines(headers)


def prepare_pull(node: EdgeNode, config: EdgeConfig, view: HostView, target: str,
                 named: PullPath | None = None, *, own_hsts: bool = False, scheme: str = "http") -> PulledHit | bool:
    """The prepared hit of request target ``target`` (path and query) of a pull zone on ``view``'s host, from
    the memory tier only. True when the memory tier holds nothing for it: a miss, which the hit path may fill
    (assetcdn/edge/fastpath/pull_fill.py); False when the application must answer: not a pull zone's path,
    a body kept on disk only, a Vary'd URL, a status other than 200, rules on a header written per request,
    no Content-Type (aiohttp's default for it depends on the method). `named`: `resolve` of the path alone
    (`prepare`), the same answer when there is no query. `scheme`: the connection's (the key's, as the origin
    is told it)."""
    path, mark, query = target.partition("?")
    pulled: PullPath | Redirect | str | None = named if not mark else None
    if pulled is None:
        try:  # what the delivery route does before the serve sequence (assetcdn/edge/routes/delivery.py)
            pulled = resolve(config, view.zone, path, target)
        except InvalidPath:
            return False
    if not isinstance(pulled, PullPath):
        return False
    key = pull_key(pulled.zone.name, pulled.path, query, scheme)
    obj = node.cache.memory.get(key)  # read: an entry asked for again is worth writing when evicted
    if obj is None:
        return True
    if obj.body is None or first_value(obj.headers, VARY) is not None:
        return False
    stored = StoredResponse.of(obj)
    if stored is None or stored.status != 200 or first_value(stored.headers, "content-type") is None:
        return False
    changes = header_changes(config, path, view.name)
    if rules_touch(changes, PULL_PER_REQUEST_HEADERS):
        return False
    return PulledHit(stored, key, f"{pulled.zone.name}{pulled.path}", changes, own_hsts,
                     shared_host=bool(pulled.prefix), cookie_host=view.cookie_host)
