"""Prepared hits: the response head of one (Host, path) worked out once, kept while it is valid.

A prepared hit holds the status line and every header that does not change from one request to
the next: the path's delivery head (Content-Type, ETag, Cache-Tag, nosniff, the sandbox CSP on
active types: assetcdn/edge/states/head.py), Cache-Control, X-Cache, Accept-Ranges, X-API-Version, the
`_headers` rules of that host and path (assetcdn/edge/site_config.py), `Server` and Content-Length. A request adds
`Date` (one string per second) and its `X-Request-ID`. The body is not kept here: a memory-tier
body is looked up by its cache key on every request (so an eviction or purge of the memory tier
takes effect at once and no evicted body stays alive here) and written from memory; a body kept on
disk only (larger than ``edge.memory_object_max_kb``) is the disk tier's file, opened per request
and sent with sendfile (a purge unlinks it: the open fails and the request goes to the full
application, which fetches it again). Writing a memory-tier body beats sendfile of its file on
throughput (hits_bench; the figures are in benchmarks/README.md), though sendfile costs less CPU per byte.

What makes a prepared hit stale, and how each is seen on the next request:

- a manifest change of the path (upload, overwrite, delete, new tags): the replica holds a new
  entry object (or none), checked by identity;
- new edge configuration (rules, domains): every prepared hit of the old configuration is dropped;
- a purge: the memory tier no longer has the key, or the file is gone; purges another worker of
  the node applied are replayed first (EdgeCache.sync_purges);
- control unreachable: the hit would be STALE, which the full application answers.

What is never prepared (the full application answers, assetcdn/edge/fastpath/protocol.py hands it over):
anything not in the manifest or not cached yet (a miss), private paths, tenant-host requests for
another zone, paths a `_redirects` rule matches, rules that would change framing headers.
"""

from __future__ import annotations

from multidict import CIMultiDict

from assetcdn.edge.access import SourceRefused, find_source
from assetcdn.edge.app import delivery_response_headers
from assetcdn.edge.cache.entry import CachedObject
from assetcdn.edge.node import EdgeNode
from assetcdn.edge.site_config import EdgeConfig, tenant_path
from assetcdn.edge.states.deliver import content_range, delivery_headers, not_modified_headers
from assetcdn.edge.states.head import EntryHead
from assetcdn.edge.states.lookup import lookup
from assetcdn.shared.analytics_keys import zone_of
from assetcdn.shared.http_server import SERVER_NAME
from assetcdn.shared.manifest import ManifestEntry
from assetcdn.shared.paths import InvalidPath, parse_cdn_path

HIT = "HIT"  # the only cache status answered here: `EdgeNode.hit_status` says it (assetcdn/edge/fastpath/hit_server.py)
STATUS_200 = b"HTTP/1.1 200 OK\r\n"
STATUS_206 = b"HTTP/1.1 206 Partial Content\r\n"
STATUS_304 = b"HTTP/1.1 304 Not Modified\r\n"
SERVER_LINE = f"Server: {SERVER_NAME}\r\n".encode()
# Headers a `_headers` rule may not touch on a prepared hit: they are per request or frame the
# message. A path whose rules name one of them is always answered by the full application.
PER_REQUEST_HEADERS = frozenset({
    "x-request-id", "date", "server", "content-length", "transfer-encoding", "connection", "keep-alive",
    "content-range", "trailer", "upgrade",
})


class Prepared:
    """One (Host, path)'s hit, valid while ``entry`` is the replica's entry for ``cdn_path``."""

    __slots__ = ("entry", "cdn_path", "zone", "key", "file", "size", "etag", "head", "head_304")

    def __init__(self, entry: ManifestEntry, cdn_path: str, key: str, file: str | None, size: int, etag: str,
                 block: bytes) -> None:
        self.entry = entry
        self.cdn_path = cdn_path
        self.zone = zone_of(cdn_path)
        self.key = key                  # memory-tier key of the body (when ``file`` is None)
        self.file = file                # the disk tier's file of a large body
        self.size = size
        self.etag = etag
        # Status line, the header lines (``block``) and Content-Length, which comes last.
        self.head = STATUS_200 + block + b"Content-Length: %d\r\n" % size
        self.head_304: bytes | None = None  # made on the first conditional hit

    def partial_head(self, start: int, end: int) -> bytes:
        """The head of a 206 for bytes ``[start, end)``: the 200's header lines (not kept twice)."""
        block = self.head[len(STATUS_200):self.head.rindex(b"Content-Length: ")]
        return STATUS_206 + block + b"Content-Range: %s\r\nContent-Length: %d\r\n" % (
            content_range(start, end, self.size).encode(), end - start)


class HostView:
    """What one Host header value maps to under one configuration: its tenant zone and its hits."""

    __slots__ = ("key", "name", "zone", "hits")

    def __init__(self, key: bytes, name: str, zone: str | None) -> None:
        self.key = key        # the Host header as received
        self.name = name      # its canonical_host (assetcdn/edge/site_config.py)
        self.zone = zone
        self.hits: dict[bytes, Prepared] = {}


def response_headers(node: EdgeNode, config: EdgeConfig, head: EntryHead, obj: CachedObject, host: str, path: str,
                     *, not_modified: bool = False) -> CIMultiDict[str] | None:
    """The headers the full application gives this hit, by the functions it uses: `delivery_headers`
    with the CDN path's policy (assetcdn/edge/routes/delivery.py), then the response hooks
    (`delivery_response_headers`, assetcdn/edge/app.py); without Date, Server, X-Request-ID and
    Content-Length. None if a rule touches one of those (the full application answers such paths)."""
    delivered = delivery_headers(obj, cache_status=HIT, cache_control=node.asset_cache_control, head=head)
    headers: CIMultiDict[str] = CIMultiDict(not_modified_headers(delivered) if not_modified else delivered)
    if config.rules.headers:
        changes = config.rules.headers.for_path(path, host)
        if any(name.lower() in PER_REQUEST_HEADERS for name in changes.set) or changes.remove & PER_REQUEST_HEADERS:
            return None
    delivery_response_headers(config, headers, path, host)
    return headers


def header_lines(headers: CIMultiDict[str]) -> bytes:
    return "".join(f"{name}: {value}\r\n" for name, value in headers.items()).encode() + SERVER_LINE


def prepare(node: EdgeNode, config: EdgeConfig, view: HostView, path: str) -> tuple[Prepared, CachedObject] | None:
    """The prepared hit of ``path`` on ``view``'s host and the cache entry it serves now; None when
    the full application must answer (see the module docstring). May read the disk tier inline
    (one SQLite row, or a file of at most the memory tier's object size), as a hit there does."""
    if config.rules.redirects and config.rules.redirects.matches(path):
        return None
    try:  # what the delivery route does before its look-up (assetcdn/edge/routes/delivery.py)
        cdn_path = parse_cdn_path(tenant_path(view.zone, path))
        entry = find_source(node, cdn_path, view.zone)
    except (InvalidPath, SourceRefused):
        return None
    head = node.replica.head(entry)
    obj = lookup(node, head.key)
    if obj is None:
        return None
    headers = response_headers(node, config, head, obj, view.name, path)
    if headers is None:
        return None
    etag = headers.get("ETag", head.etag)
    return Prepared(entry, cdn_path, head.key, obj.path, obj.size, etag, header_lines(headers)), obj


def not_modified_head(node: EdgeNode, config: EdgeConfig, hit: Prepared, obj: CachedObject | None, view: HostView,
                      path: str) -> bytes | None:
    """The 304 head of a prepared hit (Content-Type dropped before the rules apply, as the full
    application does), made once; None if it cannot be prepared."""
    if hit.head_304 is None:
        head = node.replica.head(hit.entry)
        stored = obj if obj is not None else CachedObject(hit.key, head.content_type, head.etag, head.tags, hit.size, 0.0)
        headers = response_headers(node, config, head, stored, view.name, path, not_modified=True)
        if headers is None:
            return None
        hit.head_304 = STATUS_304 + header_lines(headers)
    return hit.head_304
