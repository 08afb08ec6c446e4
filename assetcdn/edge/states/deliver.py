"""deliver: the one place that writes path deliveryers, answers 304 and Range, and streams bodies
(reached through the serve sequence, assetcdn/edge/states/serve.py).

`final_headers` is every header a delivery of a cached body carries, on both paths (the hit path,
assetcdn/edge/fastpath/prepared.py, builds its prepared heads with it): what the path and the body give,
the stamp every answer gets, then the `_headers` rules. A 304 is decided on the ETag it gives, so a rule
that sets or detaches the ETag is the one a client revalidates against, on either path."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping
from typing import Literal

from aiohttp import web
from multidict import CIMultiDict

from assetcdn.edge.app_keys import NODE
from assetcdn.edge.cache.entry import STREAM_CHUNK, CachedObject
from assetcdn.edge.cache.tags import public_tags
from assetcdn.edge.site_config import EdgeConfig, apply_rule_changes, request_host
from assetcdn.edge.states.path_delivery import PathDelivery
from assetcdn.shared.conditionals import etag_matches, if_match_holds, joined_field
from assetcdn.shared.content_security import CSP_HEADER, security_headers
from assetcdn.shared.decimal_fields import bounded_decimal
from assetcdn.shared.edge_rules import HeaderChanges
from assetcdn.shared.errors import ApiError
from assetcdn.shared.middleware import stamp_headers

STALE_WARNING = '110 - "Response is stale: control plane unreachable"'
# One byte range; the unit's name is compared case-insensitively (RFC 9110 14.1).
RANGE = re.compile(r"^(?i:bytes)=([0-9]*)-([0-9]*)\Z")
BEYOND_ANY_BODY = 2**63  # a byte position past any body a cache holds (`position`)
HEADER_CHANGES = web.RequestKey("header_changes", HeaderChanges)


def parse_range(header: str, size: int) -> tuple[int, int] | None | Literal[False]:
    """(start, end_exclusive) for one satisfiable range; None to ignore the header; False if unsatisfiable.
    A suffix range of an empty body is ignored: no Content-Range can name a part of nothing (RFC 9110 14.4), so
    the answer is the whole, empty body (a server may ignore a Range, 14.2)."""
    match = RANGE.match(header.strip())
    if not match:
        return None  # multiple or malformed ranges: answer with the whole body
    first, last = match.groups()
    if first == "" and last == "":
        return None
    if first == "":
        length = position(last)
        if length == 0:
            return False
        if size == 0:
            return None
        return max(size - length, 0), size
    start = position(first)
    end = size if last == "" else min(position(last) + 1, size)
    if start >= size or end <= start:
        return False
    return start, end


def if_range_holds(if_range: str | None, etag: str | None) -> bool:
    """Whether a Range is answered under the request's If-Range (RFC 9110 13.1.5): there is none, or it names the
    strong ETag the answer carries. A date never holds: a delivery carries no Last-Modified of its own (one a
    `_headers` rule sets is no validator of the file), so the answer is the whole body, which is always safe."""
    if if_range is None:
        return True
    return etag is not None and not etag.startswith("W/") and if_range.strip() == etag


def position(digits: str) -> int:
    """A byte position or suffix length of a Range (ASCII digits), at most BEYOND_ANY_BODY: a larger one is past
    any body whatever its digits (and may have more of them than int() converts: 4,300)."""
    return bounded_decimal(digits, BEYOND_ANY_BODY)


def not_modified_headers(headers: CIMultiDict[str]) -> CIMultiDict[str]:
    """What a 304 keeps of a delivery's final headers: all of them but Content-Type (the hit path's
    prepared 304 heads are made with this too, assetcdn/edge/fastpath/prepared.py)."""
    kept = headers.copy()
    kept.popall("Content-Type", None)
    return kept


def content_range(start: int, end: int, size: int) -> str:
    """The Content-Range of a 206 for bytes ``[start, end)`` of ``size``, on both paths."""
    return f"bytes {start}-{end - 1}/{size}"


def header_changes(config: EdgeConfig, path: str, host: str) -> HeaderChanges:
    """What the `_headers` rules do to an answer to request ``path`` on ``host`` (`canonical_host`)."""
    return config.rules.headers.for_path(path, host)


def request_header_changes(request: web.Request) -> HeaderChanges:
    """`header_changes` of an application request, looked up once: `final_headers` and the response
    hook (assetcdn/edge/app.py) apply the same."""
    found = request.get(HEADER_CHANGES)
    if found is None:
        found = request[HEADER_CHANGES] = header_changes(request.app[NODE].config, request.path, request_host(request))
    return found


def final_headers(obj: CachedObject, changes: HeaderChanges, *, cache_status: str, cache_control: str,
                  head: PathDelivery | None = None, tags: tuple[str, ...] | None = None,
                  extra_headers: Mapping[str, str] | None = None) -> CIMultiDict[str]:
    """Every header a delivery of ``obj`` carries but those of the request itself (Date, Server,
    X-Request-ID, Content-Length, Content-Range, HSTS), in their order: the per-path headers from
    ``head`` (the path's path delivery) when the body is the path's own file (variants pass their
    source's ``tags`` and keep their stored Content-Type), the cache's, ``extra_headers``, the security
    headers of the final Content-Type, the stamp every answer gets (assetcdn/shared/middleware.py), then
    ``changes``, the `_headers` rules (`header_changes`)."""
    headers: CIMultiDict[str]
    if head is not None:
        headers = CIMultiDict(head.headers)
    else:
        headers = CIMultiDict((("Content-Type", obj.content_type), ("ETag", obj.etag)))
        shown_tags = public_tags(obj.tags if tags is None else tags)
        if shown_tags:
            headers["Cache-Tag"] = ",".join(shown_tags)
    headers["Cache-Control"] = cache_control
    headers["X-Cache"] = cache_status
    headers["Accept-Ranges"] = "bytes"
    if cache_status == "STALE":
        headers["Warning"] = STALE_WARNING
    if obj.headers:  # never this cache's own marks (":soft-purged"): no field name starts with ':'
        headers.update([field for field in obj.headers if not field[0].startswith(":")])
    if extra_headers:
        headers.update(extra_headers)
    content_type = headers.get("Content-Type")
    if head is None or content_type != head.content_type:
        headers.popall(CSP_HEADER, None)
        headers.update(security_headers(content_type))
    stamp_headers(headers)
    apply_rule_changes(changes, headers)
    return headers


async def deliver(request: web.Request, obj: CachedObject, headers: CIMultiDict[str]) -> web.StreamResponse:
    """Answer with ``obj`` and its ``headers`` (``final_headers``): 304 on an If-None-Match naming the
    ETag they give, 206 or 416 on a Range (the whole body when an If-Range does not hold; Range and If-Range sent on
    several lines are the invalid value they make together, `joined_field`), the body from memory
    or streamed from its cache file. An If-Match naming another version is 412 (the edge is a stored file's origin,
    RFC 9110 13.2.2: before If-None-Match and Range), in the error envelope with the current ETag, never stored.
    If-Unmodified-Since is ignored: a delivery has no Last-Modified of its own (13.1.4)."""
    # Several If-Match lines are one list (RFC 9110 5.3): the first alone would refuse a version a later one names.
    if_match_lines = request.headers.getall("If-Match", None)
    if_match = None if if_match_lines is None else ", ".join(if_match_lines)
    if if_match is not None and not if_match_holds(if_match, etag := headers.get("ETag")):
        raise ApiError(412, "PreconditionFailed", "If-Match names no current version of this file.",
                       headers={"Cache-Control": "no-store", **({"ETag": etag} if etag else {})})
    if_none_match = ", ".join(request.headers.getall("If-None-Match", ()))  # several lines: one list (RFC 9110 5.3)
    if if_none_match and etag_matches(if_none_match, headers.get("ETag")):
        return web.Response(status=304, headers=not_modified_headers(headers))
    status, start, end = 200, 0, obj.size
    range_header = joined_field(request, "Range")  # two lines of it: no one range, ignored
    if range_header and request.method in ("GET", "HEAD") and if_range_holds(
            joined_field(request, "If-Range"), headers.get("ETag")):
        parsed = parse_range(range_header, obj.size)
        if parsed is False:
            headers["Content-Range"] = f"bytes */{obj.size}"
            headers.popall("Content-Type", None)
            # This request's Range, not the URL: a cache after the edge keeping it would answer every later request.
            headers["Cache-Control"] = "no-store"
            return web.Response(status=416, headers=headers)
        if isinstance(parsed, tuple):
            start, end = parsed
            status = 206
            headers["Content-Range"] = content_range(start, end, obj.size)
    if request.method == "HEAD":
        headers["Content-Length"] = str(end - start)
        return web.Response(status=status, headers=headers)
    if obj.body is not None:
        body = obj.body if (start, end) == (0, obj.size) else obj.body[start:end]
        return web.Response(status=status, body=body, headers=headers)
    # Large bodies stream from the cache file in chunks, never loaded whole, each read in the default
    # executor (the event loop never waits for the disk). The file is opened before the headers go
    # out, so a file purged meanwhile surfaces as FileNotFoundError (a miss); once open, it reads
    # whole even if it is unlinked. The hit path (assetcdn/edge/fastpath/) sends such files with sendfile.
    loop = asyncio.get_running_loop()
    assert obj.path is not None
    fh = await loop.run_in_executor(None, open, obj.path, "rb")
    try:
        response = web.StreamResponse(status=status, headers=headers)
        response.content_length = end - start
        await response.prepare(request)
        remaining = end - start
        fh.seek(start)
        while remaining > 0:
            chunk = await loop.run_in_executor(None, fh.read, min(STREAM_CHUNK, remaining))
            if not chunk:
                raise ConnectionResetError(f"cache file of {obj.key} is shorter than its entry")
            remaining -= len(chunk)
            await response.write(chunk)
        await response.write_eof()
    finally:
        fh.close()
    return response
