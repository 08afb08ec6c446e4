"""A pull zone's image as the source of a transform, an auto-format conversion or a placeholder.

The source is obtained by the pull serve sequence's states (assetcdn/edge/states/pull.py), with the edge's
own request (no client fields but CDN-Loop, assetcdn/edge/cdn_loop.py) in place of a client's:

    look up the URL's stored response (the same entry a delivery of the URL uses)
    -> fresh: used as it is | within stale-while-revalidate: used, revalidated in the background
       | otherwise: a conditional request (304: the stored head is updated) or a new response, stored
    -> one origin request per URL however many deliveries and variants wait (the pull zones' `Flights`)
    -> origin down or 5xx: the stale copy where stale-if-error allows, else 502 or 504

Its validator (assetcdn/edge/states/keys.py `pull_source_id`) names its content in its variants' keys, so a
new ETag from the origin makes new variants (assetcdn/edge/states/pull_variant.py retires the old ones).
Refusals are `SourceRefused`, which each route renders in its own envelope, as for a stored zone's file.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import logging
import time
import zlib
from dataclasses import dataclass
from typing import NamedTuple
from urllib.parse import quote

from aiohttp import web

from assetcdn.edge.access import SourceRefused
from assetcdn.edge.app_keys import NODE
from assetcdn.edge.cache.entry import CachedObject
from assetcdn.edge.cache.store import PurgedMeanwhile
from assetcdn.edge.cache.tags import public_tags, pull_variants_tag
from assetcdn.edge.cdn_loop import came_back, carried, refusal_message
from assetcdn.edge.node import EdgeNode
from assetcdn.edge.origin_client import (
    OriginError,
    OriginResponse,
    origin_request_headers,
)
from assetcdn.edge.site_config import EdgeConfig, PullZone
from assetcdn.edge.states.freshness import (
    ERROR_STATUSES,
    Headers,
    NotStored,
    Reuse,
    delta_seconds,
    field_values,
    first_value,
    http_date,
    listed_fields,
    not_storable,
    parse_directives,
    response_directives,
    reuse,
    split_list,
    stored_headers,
    usable_on_error,
    validated_by,
    validators,
)
from assetcdn.edge.states.keys import pull_key, pull_source_id
from assetcdn.edge.states.pull import (
    FLIGHTS,
    ErrorAnswered,
    Flights,
    Kept,
    Land,
    StoredResponse,
    Varied,
    ask,
    collapsed,
    drop_if_superseded,
    flight_key,
    lookup,
    named_by_body,
    no_landing,
    origin_tags,
    own_tags,
    read_not_kept,
    refresh,
    selected_by,
    settle,
    store_unless_purged,
    through_flight,
    unasked_not_modified,
    unpurged,
)
from assetcdn.edge.states.too_large import TooLarge
from assetcdn.shared.logs import LinePerInterval
from assetcdn.shared.manifest import format_of

log = logging.getLogger(__name__)
# An origin's failures for image sources, per zone and kind: one line per 10 s (as pull.py's ORIGIN_FAILURES).
SOURCE_FAILURES = LinePerInterval(log)
SOURCE_FIELDS: Headers = ()          # the edge's own request for a source carries no client's fields


class SourceClient(NamedTuple):
    """Whom the edge asks a source for: its address and scheme (X-Forwarded-For, -Proto) and its CDN-Loop lines."""

    ip: str | None
    scheme: str
    loop: Headers

NO_DIRECTIVES: dict[str, str | None] = {}
# Path characters (assetcdn/shared/paths.py) sent as they are; a space is percent-encoded, as browsers send it.
# A source path is percent-encoded as a purge's URL is spelt (normal_path, assetcdn/shared/purge_targets.py):
# the characters a path may hold as they are kept, so `/<zone>/a&b.png` names its delivery's copy.
PATH_SAFE = "/!$&'()*+,;=:@"
IMAGE_TYPES = {
    "image/jpeg": "jpeg", "image/jpg": "jpeg", "image/png": "png", "image/webp": "webp", "image/gif": "gif",
    "image/avif": "avif", "image/tiff": "tiff", "image/svg+xml": "svg", "image/heic": "heic", "image/heif": "heif",
}


@dataclass(frozen=True, slots=True)
class PullSourcePath:
    """Where a source path (`url` of a transform or placeholder, `path` of auto) names a pull zone's file."""

    zone: PullZone
    path: str             # at the origin, percent-encoded, from `/`

    @property
    def cdn_path(self) -> str:
        return f"{self.zone.name}{self.path}"


def pull_source_path(config: EdgeConfig, host_zone: str | None, cdn_path: str) -> PullSourcePath | None:
    """The pull zone file a validated CDN path (no leading slash) names on this request's host, as a
    delivery of `/<cdn_path>` would (a pull zone's own host: every path is the zone's); None for a stored
    zone's path."""
    named = config.pull_target(host_zone, "/" + quote(cdn_path, safe=PATH_SAFE))
    return PullSourcePath(named[0], named[1]) if named is not None else None


@dataclass(frozen=True, slots=True)
class PullSource:
    """A pull zone's image as obtained now: its stored response and the id its variants are keyed by."""

    at: PullSourcePath
    url_key: str
    stored: StoredResponse
    source_id: str
    body: bytes | None        # read already (fetched now, or hashed for its id), else read from the cache
    kept: bool = True         # False: fetched while a purge named it, so not stored, nor are its variants
    stale: bool = False       # used past its freshness (stale-while-revalidate, stale-if-error): so are its variants
    limit: int = 0            # how large its image may be decoded of a content coding (`data`): the source limit

    @property
    def format(self) -> str:
        """What the pipeline is told the source is (it sniffs the bytes itself): the origin's image type,
        else the path's extension, as a stored file's comes from its name."""
        content_type = (first_value(self.stored.headers, "content-type") or "").split(";", 1)[0].strip().lower()
        return IMAGE_TYPES.get(content_type) or format_of(self.at.path.rsplit("/", 1)[-1]) or content_type

    @property
    def tags(self) -> tuple[str, ...]:
        """What its variants are stored with: the origin's tags and the URL's and zone's (purge by tag, by
        URL, an unsafe request to it, the zone's deletion), and its variants' own (retired together). The origin's
        are those the copy was stored with too: its head lacks a field that the origin withholds from clients
        (a qualified `no-cache="Cache-Tag"`), and variants tagged from it alone outlived a purge of those tags."""
        return tuple(dict.fromkeys((*origin_tags(self.stored.headers), *public_tags(self.stored.obj.tags),
                                    *own_tags(self.at.zone, self.at.path), pull_variants_tag(self.url_key))))

    @property
    def shown_tags(self) -> tuple[str, ...]:
        """The tags a variant's answer shows (its Cache-Tag): the edge's own (its zone's), never the origin's, which
        are the origin's word to the CDN (pull.SURROGATE_FIELDS: a delivery of the image leaves its Cache-Tag and
        Surrogate-Key out too) and often name what is inside the origin; they still tag the variant (`tags`)."""
        return (*own_tags(self.at.zone, self.at.path), pull_variants_tag(self.url_key))

    def client_max_age(self, now: float) -> int | None:
        """How long a client may keep a variant: what is left of the source's freshness here, and never more
        than a browser may keep the source itself (RFC 9111 4.2.1 for a private cache: its Cache-Control
        max-age, else Expires less Date, else the heuristic; s-maxage and fields targeted at CDNs give it
        nothing), less its age; None when the source must be validated before every use (no-cache)."""
        headers, freshness = self.stored.headers, self.stored.freshness
        browser = parse_directives(field_values(headers, "cache-control"))
        if freshness.no_cache or ("no-cache" in browser and not listed_fields(browser["no-cache"])):
            return None   # a qualified `no-cache="Cache-Tag"` asks that only that field be validated first
        age = freshness.age(now)
        remaining = freshness.lifetime - age
        expires = http_date(first_value(headers, "expires"))
        if "max-age" in browser:
            remaining = min(remaining, (delta_seconds(browser["max-age"]) or 0) - age)
        elif expires is not None:
            date = http_date(first_value(headers, "date"))
            remaining = min(remaining, expires - (freshness.response_time if date is None else date) - age)
        else:
            directives, targeted = response_directives(headers)
            if targeted or "s-maxage" in directives:
                remaining = 0   # an explicit lifetime for shared caches only: a browser would validate first
        return max(0, int(remaining))

    async def data(self) -> bytes:
        """The whole image (FileNotFoundError when the cache dropped it meanwhile: look it up again): the body,
        decoded of the content coding the origin sent it under (kept coded, as a delivery answers with it), or
        SourceRefused when it does not decode (`decoded`)."""
        body = self.body if self.body is not None else await stored_body(self.stored.obj)
        codings = content_codings(self.stored.headers)
        if not codings:
            return body
        return await asyncio.get_running_loop().run_in_executor(None, decoded, self.at, codings, body, self.limit)


async def stored_body(obj: CachedObject) -> bytes:
    if obj.body is not None:
        return obj.body
    return await asyncio.get_running_loop().run_in_executor(None, obj.read_range, 0, obj.size)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def source_limit(node: EdgeNode) -> int:
    """A pull zone's image may be as large as a stored zone's file can be (what control accepts)."""
    return int(node.settings.get("control", "max_upload_bytes"))


class SourceTooLarge(SourceRefused):
    """422 SourceTooLarge, with the size and limit that refused it (`TOO_LARGE_SOURCES` keeps those, not the text)."""

    def __init__(self, at: PullSourcePath, size: int, limit: int) -> None:
        super().__init__(422, "SourceTooLarge", f"The source '/{at.cdn_path}' is too large: {size:,} bytes "
                         f"exceeds this edge's limit of {limit:,} bytes for a source.")
        self.size = size
        self.limit = limit


def too_large(at: PullSourcePath, size: int, limit: int) -> SourceTooLarge:
    return SourceTooLarge(at, size, limit)


# The sources a worker refused as too large (assetcdn/edge/states/too_large.py): an image over the limit is not stored
# as a source, so every transform, placeholder and format of it would ask the origin again (its head, or a chunked
# body read up to the limit); each worker asks once per TOO_LARGE_KEPT_S at most.
TOO_LARGE_SOURCES = web.AppKey("pull_sources_too_large", TooLarge)


async def obtain(request: web.Request, at: PullSourcePath) -> PullSource:
    """The source as the pull serve sequence gives it now (fresh, revalidated or fetched again), or
    SourceRefused: 404 (the origin has none), 422 (too large), 502 or 504 (the origin failed), 508 (the zone's
    own request: its origin is a variant of its own image, which would wait for the fill that asked for it)."""
    if came_back(request.headers, at.zone):
        raise SourceRefused(508, "LoopDetected", refusal_message(at.zone.name))
    node, flights, refused_sources = request.app[NODE], request.app[FLIGHTS], request.app[TOO_LARGE_SOURCES]
    url_key = pull_key(at.zone.name, at.path, "", request.scheme)
    mark = node.cache.purge_mark()  # taken before the origin is asked: a purge meanwhile lets its refusal go
    if (refused := refused_sources.refusal(url_key, mark)) is not None:
        raise too_large(at, *refused)
    flight = flight_key(url_key, at.zone)
    # The edge asks for a client: X-Forwarded-For, -Proto, and its CDN-Loop, or a cycle through another zone's
    # images would come back to this zone unmarked and join the flight that sent it.
    client = SourceClient(request.remote, request.scheme, carried(request.headers))
    # What the edge's own request selects of a URL that varies: a flight keeping another variant (a browser's
    # `Accept: image/webp` of an origin that negotiates) is not waited for, as a delivery of another variant is not.
    sent = Varied(SOURCE_FIELDS, at.zone, client.ip, client.scheme)

    async def cached(since: float | None) -> tuple[PullSource | None, StoredResponse | None]:
        stored = lookup(node, url_key, sent)
        if stored is not None:
            decision = Reuse.FRESH if collapsed(stored, since) else reuse(stored.freshness, NO_DIRECTIVES, time.time())
            if decision is Reuse.FRESH:
                return await described(node, at, url_key, stored), stored
            if decision is Reuse.STALE_REVALIDATING:
                revalidate_in_background(node, client, flights, at, url_key, stored)
                return await described(node, at, url_key, stored, stale=True), stored
        return None, stored

    async def fill(stored: StoredResponse | None, land: Land, *, whole_first: bool = False) -> PullSource:
        # `whole_first` (through_flight): a source is read whole before it is used, whatever the flight.
        # A request that waited for a flight refused as too large asks nothing: the refusal is its answer too.
        if (refused := refused_sources.refusal(url_key, mark)) is not None:
            raise too_large(at, *refused)
        try:
            return await from_origin(node, client, at, url_key, stored, land)
        except SourceTooLarge as exc:  # remembered before the flight lands, so before its waiters look
            refused_sources.remember(url_key, mark, exc.size, exc.limit)
            raise

    async def stale(stored: StoredResponse | None, _exc: OriginError) -> PullSource | None:
        if stored is not None:  # a copy a purge removed while the flight waited answers no failure
            stored = unpurged(node, stored)
        if stored is not None and usable_on_error(stored.freshness, NO_DIRECTIVES, time.time()):
            return await described(node, at, url_key, stored, stale=True)
        return None

    async def failed(stored: StoredResponse | None, exc: OriginError) -> PullSource:
        if (answer := await stale(stored, exc)) is not None:
            return answer
        if isinstance(exc, ErrorAnswered):  # the origin answered the flight (pull.py `origin_failed`): asked again
            return await fill(None if stored is None else unpurged(node, stored), no_landing)
        raise origin_failed(at, exc) from None

    try:
        return await through_flight(flights, flight, node.origins.limits, cached, fill, failed, sent=sent, stale=stale)
    except SourceTooLarge as exc:  # a stored copy over the limit (`described`)
        refused_sources.remember(url_key, mark, exc.size, exc.limit)
        raise


async def described(node: EdgeNode, at: PullSourcePath, url_key: str, stored: StoredResponse,
                    body: bytes | None = None, *, kept: bool = True, stale: bool = False) -> PullSource:
    """A stored response as a source: refused unless it is a whole image within the byte limit; its id
    from its validator (hashing its body when it has none)."""
    if stored.status != 200:
        raise not_an_image(at, stored.status)
    limit = source_limit(node)
    if stored.obj.size > limit:
        raise too_large(at, stored.obj.size, limit)
    etag, last_modified = first_value(stored.headers, "etag"), first_value(stored.headers, "last-modified")
    digest = stored.digest   # kept with the response when it was stored
    if digest is None and named_by_body(stored.headers):  # stored without one: hashed now
        data = body if body is not None else await stored_body(stored.obj)
        digest = await asyncio.get_running_loop().run_in_executor(None, sha256, data)
        body = data
    return PullSource(at, url_key, stored, pull_source_id(etag, last_modified, stored.obj.size, digest), body,
                      kept, stale, limit)


# The content codings an image source is decoded of (zlib's window bits: gzip's header, or zlib's; deflate sent raw,
# as some servers do, is told apart by its first byte).
DECODED_CODINGS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}
INFLATE_STEP = 1024 * 1024  # decoded bytes per step, so that a bomb stops at the limit, not once inflated


def content_codings(headers: Headers) -> list[str]:
    """The content codings a response's body is under (RFC 9110 8.4), in the order they were applied; identity is
    none."""
    return [coding for coding in (member.lower() for member in split_list(
        field_values(headers, "content-encoding"))) if coding and coding != "identity"]


def decoded(at: PullSourcePath, codings: list[str], body: bytes, limit: int) -> bytes:
    """A source's body under `codings` decoded (the last applied first), at most `limit` bytes (SourceTooLarge
    past it); 502 for a coding this edge does not decode or bytes that do not decode. An origin may code an image
    whatever a request asks (a source's asks nothing: RFC 9110 12.5.3 lets it use any coding), and the pipeline
    takes the image, not its coding."""
    for coding in reversed(codings):
        wbits = DECODED_CODINGS.get(coding)
        if wbits is None:
            raise SourceRefused(502, "OriginError", f"The origin sent '/{at.cdn_path}' under the content coding "
                                f"{coding}, which this edge does not decode for an image's variants.")
        if coding == "deflate" and body and body[0] & 0x0F != 8:
            wbits = -zlib.MAX_WBITS
        out: list[bytes] = []
        size = 0
        data = body
        try:
            while data:
                decoder = zlib.decompressobj(wbits=wbits)  # a gzip body may be several members (RFC 1952)
                while data and not decoder.eof:
                    piece = decoder.decompress(data, INFLATE_STEP)
                    size += len(piece)
                    if size > limit:
                        raise too_large(at, size, limit)
                    out.append(piece)
                    data = decoder.unconsumed_tail
                if not decoder.eof:
                    raise zlib.error("the compressed data is cut short")
                data = decoder.unused_data
                if data and wbits != DECODED_CODINGS["gzip"]:
                    raise zlib.error("data after the end of the compressed stream")
        except zlib.error as exc:
            raise SourceRefused(502, "OriginError", f"The origin sent '/{at.cdn_path}' as {coding}-coded bytes "
                                f"that do not decode ({exc}).") from None
        body = b"".join(out)
    return body


def not_an_image(at: PullSourcePath, status: int) -> SourceRefused:
    """The refusal of an origin's answer other than 200, fresh from the origin or stored: 404 for 404 and 410,
    else 502 OriginError."""
    if status in (404, 410):
        return SourceRefused(404, "AssetNotFound", f"No asset at '/{at.cdn_path}' (the origin answered {status}).")
    return SourceRefused(502, "OriginError", f"The origin answered {status} for '/{at.cdn_path}'.")


def origin_failed(at: PullSourcePath, exc: OriginError) -> SourceRefused:
    SOURCE_FAILURES.log(logging.INFO, f"source {at.zone.name}", "pull zone %s: the origin failed for the source %s: %s",
                        at.zone.name, at.path, exc)
    if exc.timeout:
        return SourceRefused(504, "OriginTimeout", f"The origin did not answer in time: {exc}")
    return SourceRefused(502, "OriginUnreachable", f"The origin could not be reached: {exc}")


def refuse_unshared(at: PullSourcePath, why: NotStored | None) -> None:
    """502 SourceNotCacheable when the origin's answer may not be kept by a shared cache (`why`)."""
    if why is not None:
        raise SourceRefused(502, "SourceNotCacheable", f"The origin's answer for '/{at.cdn_path}' may not be "
                            f"kept by a shared cache ({why.value}), so no variant is made from it.")


async def from_origin(node: EdgeNode, client: SourceClient, at: PullSourcePath, url_key: str,
                      stored: StoredResponse | None, land: Land = no_landing) -> PullSource:
    """A miss, or a stored source the origin must confirm (304: its head updated) or replace; the stale
    copy when the origin fails and stale-if-error allows it. `land` tells the requests waiting for this one
    whether a body is being kept for them, as soon as the origin's head says."""
    headers = origin_request_headers(client.loop, at.zone.origin, client_ip=client.ip, scheme=client.scheme)
    conditions = validators(stored.headers) if stored is not None else []
    for name, value in conditions:
        headers[name] = value
    try:
        response = await ask(node, at.zone, at.path, "", headers, from_edge=False)
    except OriginError as exc:
        land(exc)
        if stored is not None:  # a copy a purge removed while the origin was asked answers no failure
            stored = unpurged(node, stored)
        if stored is not None and usable_on_error(stored.freshness, NO_DIRECTIVES, time.time()):
            return await described(node, at, url_key, stored, stale=True)
        raise origin_failed(at, exc) from None
    if response.status == 304 and not conditions:
        # A 304 answers a condition (RFC 9110 15.4.5), and this request had none (a source stored without ETag
        # or Last-Modified is asked for whole): it confirms no stored source, as a delivery takes it.
        response.release()
        land(unasked_not_modified())
        if stored is not None:
            stored = unpurged(node, stored)
        if stored is not None and usable_on_error(stored.freshness, NO_DIRECTIVES, time.time()):
            return await described(node, at, url_key, stored, stale=True)
        raise not_an_image(at, response.status)
    if stored is not None and (response.status == 304 or (response.status == 412 and conditions)):
        # A 412 answers the validators, not the image (a GET's If-None-Match that holds is 304, RFC 9110 13.1.2):
        # asked for whole, as a 304 about another response is (pull.py `ask_origin`).
        response.release()
        if response.status == 304 and validated_by(stored.headers, response.headers):
            refreshed = await refresh(node, at.zone, at.path, stored, response)
            # A 304 that made it one a shared cache may not keep (refresh left the stored copy as it was):
            # no variant is made of it, as of a first answer that says so.
            refuse_unshared(at, not_storable("GET", refreshed.status, SOURCE_FIELDS, refreshed.headers,
                                             store_set_cookie=at.zone.store_set_cookie))
            return await described(node, at, url_key, refreshed)
        return await from_origin(node, client, at, url_key, None, land)  # a 304 about another response, a 412
    if response.status in ERROR_STATUSES and stored is not None:  # as a delivery's (pull.py `ask_origin`)
        stored = unpurged(node, stored)
    if response.status in ERROR_STATUSES and stored is not None and usable_on_error(stored.freshness, NO_DIRECTIVES,
                                                                                    time.time()):
        response.release()
        land(ErrorAnswered(response.status))  # the waiters answer with their stale copy too, not asking again
        return await described(node, at, url_key, stored, stale=True)
    await drop_if_superseded(node, at.zone, stored, response, SOURCE_FIELDS)  # as a delivery's revalidation does
    why = not_storable("GET", response.status, SOURCE_FIELDS, response.headers,
                       store_set_cookie=at.zone.store_set_cookie)
    if why is not None:
        response.release()
        if response.status != 200:
            raise not_an_image(at, response.status)
        refuse_unshared(at, why)
    limit = min(source_limit(node), node.origins.limits.max_object_bytes)
    length = first_value(response.headers, "content-length")
    if length is not None and length.isdigit() and int(length) > limit:
        response.release()
        raise too_large(at, int(length), limit) if response.status == 200 else not_an_image(at, response.status)
    # Any answer a delivery would keep is kept (a 404 too: the requests for a missing image meanwhile and
    # after are answered from it, as its deliveries are, not each by the origin), then judged as a source.
    kept: Kept = asyncio.get_running_loop().create_future()
    sent = Varied(SOURCE_FIELDS, at.zone, client.ip, client.scheme)
    land(kept, selected_by(response.headers, sent))  # a delivery of another variant waiting for the URL asks at once
    try:
        try:
            read, body, in_cache = await keep(node, at, url_key, sent, response, limit)
        except OriginError as exc:  # the body failed once its head was in: the origin's failure, as a head's is
            settle(kept, exc)  # the requests waiting for it take it as theirs (pull.py `through_flight`)
            if stored is not None:
                stored = unpurged(node, stored)
            if stored is not None and usable_on_error(stored.freshness, NO_DIRECTIVES, time.time()):
                return await described(node, at, url_key, stored, stale=True)
            raise origin_failed(at, exc) from None
        settle(kept, in_cache)
        return await described(node, at, url_key, read, body, kept=in_cache)
    finally:
        settle(kept)  # refused (too large, not an image): not kept, and nothing for the others to retry


async def keep(node: EdgeNode, at: PullSourcePath, url_key: str, sent: Varied, response: OriginResponse,
               limit: int) -> tuple[StoredResponse, bytes, bool]:
    """Read an answer the origin sent whole (at most `limit` bytes) and store it: the response, its body, and
    whether it is stored. One a purge made since it was asked for names (`ask`'s mark) is read for this request
    only (False), and a source's variant made from it is not stored either. OriginError when the origin's body
    fails (`from_origin` answers it as the origin's failure)."""
    chunks: list[bytes] = []
    size = 0
    budget = node.origins.source_reads
    try:
        async for chunk in response.chunks(capped=False):
            if size + len(chunk) > limit:
                raise too_large(at, size + len(chunk), limit)
            if not budget.take(len(chunk)):  # counted as they arrive: bodies being read by all requests at once
                raise SourceRefused(503, "EdgeBusy", f"This edge worker is reading as many image sources from "
                                    f"origins as it may at once ({budget.limit:,} bytes); retry shortly.",
                                    headers={"Retry-After": "1"})
            size += len(chunk)
            chunks.append(chunk)
        body = b"".join(chunks)
    finally:
        response.release()
        chunks.clear()
        budget.give(size)  # read (the body is this request's and the cache's from here), or given up
    digest = await asyncio.get_running_loop().run_in_executor(None, sha256, body) \
        if named_by_body(response.headers) else None
    head = stored_headers(response.headers)
    try:
        obj = await store_unless_purged(node, at.zone, at.path, url_key, sent, response, head,
                                        io.BytesIO(body), digest)
    except PurgedMeanwhile:
        # This request is answered from the bytes it read; the next one asks the origin again.
        log.debug("pull zone %s: the source %s not kept: purged while it was fetched", at.zone.name, at.path)
        return read_not_kept(url_key, response, head, body, digest), body, False
    kept = StoredResponse.of(obj) if obj is not None else None
    if kept is None:
        raise SourceRefused(503, "ServiceUnavailable", "The source could not be kept in this edge's cache. Retry.")
    return kept, body, True


def revalidate_in_background(node: EdgeNode, client: SourceClient, flights: Flights,
                             at: PullSourcePath, url_key: str, stored: StoredResponse) -> None:
    """stale-while-revalidate: the stale source is used now; one request to the origin updates or replaces it
    (none when a delivery or another variant is already asking)."""
    land = flights.lead(flight_key(url_key, at.zone), stored.freshness.response_time)
    if land is None:
        return

    async def revalidate() -> None:
        try:
            await from_origin(node, client, at, url_key, stored, land)
        except SourceRefused as exc:
            SOURCE_FAILURES.log(logging.INFO, f"source revalidation {at.zone.name}",
                                "pull zone %s: background revalidation of the source %s failed: %s", at.zone.name,
                                at.path, exc.message)
        finally:
            land(None)

    task = asyncio.get_running_loop().create_task(revalidate())
    node.background.add(task)
    task.add_done_callback(node.background.discard)


def variant_cache_control(source: PullSource, longest: int | None = None) -> str:
    """A variant's Cache-Control: what is left of its source's freshness for a client (`client_max_age`), at
    most `longest` seconds; `no-cache` when the source must be validated first. `public` unless the source's own
    Cache-Control keeps it from the caches past this edge, which a field targeted at this edge (CDN-Cache-Control)
    let it keep: `private` (browsers only) or `no-store` (no cache at all) then, as the source's deliveries say."""
    browser = parse_directives(field_values(source.stored.headers, "cache-control"))
    if "no-store" in browser:
        return "no-store"
    scope = "private" if "private" in browser and not listed_fields(browser["private"]) else "public"
    max_age = source.client_max_age(time.time())
    if max_age is None:
        return f"{scope}, no-cache"
    return f"{scope}, max-age={max_age if longest is None else min(max_age, longest)}"
