"""Pull zones: the serve sequence for paths whose source is an HTTP origin the user runs.

The same states as a stored zone's, with the origin's own headers deciding freshness (RFC 9111, the rules in
assetcdn/edge/states/freshness.py):

    receive (assetcdn/edge/routes/delivery.py: the zone and the origin path)
    -> look up: the URL's entry, then, when the origin answered with Vary, the variant the request selects
    -> fresh: HIT | stale within stale-while-revalidate: STALE, revalidated in the background
       | otherwise: a conditional request (304: the stored head is updated, REVALIDATED) or a MISS
    -> miss: one origin request per key however many clients wait (the first streams the body as it
       arrives while it is written to the cache; the others are answered from the cache once it is there);
       an answer that may not be stored goes to its own client only, and the others ask for their own as soon
       as its head says so; a waiting request gets the fill's outcome, its failure too (`await_flight`);
       with several edges the request goes to the URL's shield edge first (assetcdn/edge/shield.py)
    -> deliver: the stored head with Age, X-Cache and Cache-Status (RFC 9211); If-None-Match,
       If-Modified-Since and a byte range answered from the stored response
    -> origin down or 500, 502, 503, 504: the stale copy where stale-if-error allows (RFC 5861), else 502 or 504

Unsafe methods go to the origin as they are and invalidate what they name (RFC 9111 4.4). Nothing here is
shared with control: a pull zone's bytes never pass through it.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hashlib
import io
import logging
import os
import secrets
import socket
import sqlite3
import struct
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import IO, Any, BinaryIO, Protocol, TypeVar, cast

from aiohttp import web
from multidict import CIMultiDict
from yarl import URL

from assetcdn.edge.app_keys import NODE, SETTINGS
from assetcdn.edge.cache.disk import damaged_file
from assetcdn.edge.cache.entry import CachedObject
from assetcdn.edge.cache.fill_lock import NodeFillLock, key_offset
from assetcdn.edge.cache.store import READ_FAILURES, SOFT_PURGED, PurgedMeanwhile
from assetcdn.edge.cache.tags import path_tag_zone, public_tags, pull_path_tag
from assetcdn.edge.cdn_loop import came_back, loop_detected
from assetcdn.edge.node import EdgeNode
from assetcdn.edge.origin_client import (
    ByteBudget,
    OriginError,
    OriginLimits,
    OriginResponse,
    OriginTimeout,
    OriginTooLarge,
    origin_request_headers,
)
from assetcdn.edge.shield import SHIELD_FIRST_BYTE_SHARE, from_edge, stale_at_shield
from assetcdn.edge.site_config import PullZone, request_host
from assetcdn.edge.states.deliver import parse_range, request_header_changes
from assetcdn.edge.states.feed import ClientFeed, Rest, Watch, rest_of
from assetcdn.edge.states.freshness import (
    ERROR_STATUSES,
    MAX_TAG_BYTES,
    MAX_VARY_FIELDS,
    REQUEST_ERRORS,
    TAG_FIELDS,
    Directives,
    Freshness,
    Headers,
    NotStored,
    Reuse,
    age_value,
    dated,
    first_value,
    freshness,
    http_date,
    invalidates,
    not_storable,
    qualified_fields,
    request_directives,
    request_http_date,
    response_directives,
    reuse,
    secondary_key,
    split_list,
    stored_headers,
    tag_field_bytes,
    updated_headers,
    usable_on_error,
    validated_by,
    validators,
    vary_fields,
    withheld_fields,
)
from assetcdn.edge.states.growing import (
    GROWING_DIR,
    EndedShort,
    Growing,
    SiblingGrowing,
    sweep_leftovers,
)
from assetcdn.edge.states.keys import pull_key, pull_variant_key
from assetcdn.edge.tls.policy import HSTS_HEADER
from assetcdn.shared.cache_results import CacheResult
from assetcdn.shared.cdn_cookies import CookieHost, is_cdn_cookie, may_set
from assetcdn.shared.conditionals import etag_matches, joined_field
from assetcdn.shared.config import Settings
from assetcdn.shared.content_security import keep_sandbox
from assetcdn.shared.decimal_fields import bounded_decimal
from assetcdn.shared.edge_rules import NO_HEADER_CHANGES, HeaderChanges
from assetcdn.shared.errors import ApiError
from assetcdn.shared.http_server import cut_short, watch_lost
from assetcdn.shared.logs import LinePerInterval
from assetcdn.shared.manifest import zone_tag
from assetcdn.shared.request_body import body_deadline, too_large, unsupported_transfer_coding

log = logging.getLogger(__name__)
# An origin's failures, per zone and kind: one line per 10 s with how many were left out, however many requests fail.
ORIGIN_FAILURES = LinePerInterval(log)
STORE_FAILURES = LinePerInterval(log)  # a cache that cannot store (its disk failing): a line per zone and interval
# Requests answered from a fill under way that it ended short (`deliver_growing`): every one of a fill's waiters at
# once, so a line per zone and interval, not one each.
GROWING_CUTS = LinePerInterval(log)
R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)
SPOOL_MEMORY = 1024 * 1024          # a body being stored is kept in memory up to this, then in a temporary file
SENT_BEFORE_STORED = 64 * 1024      # a body read with its head up to this is sent before it is stored (`keep`)
CACHE_STATUS = "assetcdn"           # this cache's name in Cache-Status (RFC 9211)
# Pseudo-fields kept with a stored head (":" starts no real field name): the status and RFC 9111's clocks.
STATUS, REQUEST_TIME, RESPONSE_TIME, VARY = ":status", ":request-time", ":response-time", ":vary"
# A Vary'd URL's own entry names, beside its fields, the generation of variants it leads to (`vary_selector`): a new
# one whenever the entry is written where the URL held no entry of the same fields, so that the variants kept under
# an earlier response's Vary (the origin's Vary changed, or a response without Vary came in between) are never
# selected again. An entry stored before it was added has none, and leads to its variants as it did.
VARY_GENERATION = ":vary-generation"
# The SHA-256 of a body stored without a strong ETag or Last-Modified: what names it as a transform's source.
DIGEST = ":sha256"
ALLOWED = "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS"  # the methods a pull zone's paths take (TRACE is not passed)
MAX_FORWARDS = 255  # the largest Max-Forwards this edge passes on (RFC 9110 7.6.2 lets it choose one)
# A client's own conditions and ranges are answered from the stored response, never passed on a cache fill.
# `Request-Range` is the draft spelling of Range that Apache httpd still honours: its 206, or a 416 with the
# origin's Cache-Control (stored as the URL's answer), would answer the fill.
CLIENT_CONDITIONS = ("If-None-Match", "If-Modified-Since", "If-Match", "If-Unmodified-Since", "If-Range", "Range",
                     "Request-Range")
# ... and their spellings with `_` for `-`, which servers that pass fields as CGI variables read alike (HTTP_IF_MATCH).
CONDITION_NAMES = frozenset(name.lower() for name in CLIENT_CONDITIONS)
# What is never copied to a client from an origin's or stored head: framing is the edge's own, and so is the
# request id (a shield's answer carries the shield's; every answer carries this edge's, the one it logs).
NOT_DELIVERED = frozenset(("content-length", "transfer-encoding", "connection", "keep-alive", "date", "x-request-id"))
# A whole 200 that is stored says what its hits say (`deliver`): this edge answers a byte range of the URL from the
# stored copy, whatever the origin said of its own (nothing, `none`), so the MISS that fills it says so too, and so
# do its 304s and 416s (`client_headers`' `ranges`): a player deciding from its first answer whether it may seek gets
# the same head, and a browser updating its stored head from a 304 (RFC 9111 4.3.4) keeps `bytes`.
NOT_DELIVERED_RANGED = NOT_DELIVERED | {"accept-ranges"}
# What an origin's answer tells this cache, never a browser: Surrogate-Control (the Edge Architecture note's caching
# directives, freshness.TARGETED_FIELDS) and the purge tags (Cache-Tag, Surrogate-Key: freshness.TAG_FIELDS), which
# often name the origin's inner workings (customer ids, build ids) and mean nothing past the CDN. They stay in the
# stored head (a revalidation reads the copy's directives again, a 304 its tags) and go out to another edge that asks
# this one as its shield (`client_headers`' `to_edge`: it reads them as this edge did); never to a client. The whole
# of Surrogate-Control goes, as Fastly drops it, not only the directives meant for this cache: through the edge the
# origin is told of this cache alone (origin_client.py sends the edge's own Surrogate-Capability, never a client's),
# so of no device past it to target, and browsers ignore the field. CDN-Cache-Control is not among them: RFC 9213
# lets a cache pass it on, and a CDN in front of this one may be what it targets.
SURROGATE_FIELDS = frozenset(("surrogate-control", *TAG_FIELDS))
NOT_TO_CLIENTS = NOT_DELIVERED | SURROGATE_FIELDS
NOT_TO_CLIENTS_RANGED = NOT_DELIVERED_RANGED | SURROGATE_FIELDS
ACCEPT_RANGES = ("Accept-Ranges", "bytes")
# Whether a pull zone's answer goes out on the edges' default host (`/<zone>/...`: serve_pull's `prefix`), the
# browser origin every zone and the API share, not on the zone's own host.
SHARED_HOST = web.RequestKey("pull_shared_host", bool)
# What an origin's Set-Cookie may name in its Domain on this request's host (`EdgeConfig.cookie_host`): the host
# alone on the CDN's own hosts, no domain holding the base domain on a zone's custom domain; None (any) to another
# edge's shield request (that edge judges for its clients).
COOKIE_HOST = web.RequestKey[CookieHost]("pull_cookie_host")
# An origin's fields that set a policy of its client's whole browser origin (as HSTS does, HSTS_HEADER): network
# error reporting and where it goes (NEL, W3C Network Error Logging; Report-To), the clearing of the origin's
# cookies, storage and cache (Clear-Site-Data; cookies for the whole registrable domain), and where its next
# connections go (Alt-Svc, RFC 7838). Never from an origin on the default host, every zone's and the API's.
HOST_POLICIES = ("NEL", "Report-To", "Clear-Site-Data", "Alt-Svc")


@dataclass(frozen=True, slots=True)
class StoredResponse:
    """A cached origin response: its cache entry and the head it was stored with."""

    obj: CachedObject
    status: int
    headers: tuple[tuple[str, str], ...]
    freshness: Freshness
    digest: str | None = None   # DIGEST, when it was stored with one
    # The cache's purge mark taken before the look-up that found it (`lookup`): a 304 that confirms it stores its
    # body again (`refresh`), which no purge since then may have removed, even one made before the 304 was asked for.
    mark: int | None = None

    @staticmethod
    def of(obj: CachedObject, head: Sequence[tuple[str, str]] | None = None,
           mark: int | None = None) -> StoredResponse | None:
        """The response `obj` holds; `head`: its ``headers``, when the caller has them decoded already; `mark`: the
        purge mark taken before it was looked up."""
        if head is None:
            head = obj.headers
        fields = dict(item for item in head if item[0].startswith(":"))
        try:
            status = int(fields[STATUS])
            request_time, response_time = float(fields[REQUEST_TIME]), float(fields[RESPONSE_TIME])
        except (KeyError, ValueError):
            return None
        headers = tuple(item for item in head if not item[0].startswith(":"))
        fresh = freshness(status, headers, request_time, response_time)
        soft_purged = fields.get(SOFT_PURGED)
        if soft_purged is not None:  # stale from the purge on: revalidated, its stale-* windows counted from then
            try:
                fresh = replace(fresh, lifetime=min(fresh.lifetime, fresh.age(float(soft_purged))))
            except ValueError:
                fresh = replace(fresh, lifetime=0.0)
        return StoredResponse(obj, status, headers, fresh, fields.get(DIGEST), mark)


# A fill being stored: done once it is in the cache (True), given up (False: purged while it was read, or the cache
# could not keep it), failed by the origin (its OriginError: the body cut short, or too slow), or not kept after all
# by the answer's own measure (None: found over the size limit).
Kept = asyncio.Future[bool | OriginError | None]
# What selects the answer a fill keeps when it varies: the request fields its Vary names and their values in the
# request it answers (`secondary_key`). A request waiting for the flight with other values gets another variant:
# it does not wait for that answer's body (`await_flight`).
Selected = tuple[tuple[str, ...], str]
# The origin requests a fill may make before it knows its answer: the path's shield, then the origin (assetcdn/edge/
# shield.py `Shields.fill`), each within the first-byte time.
FLIGHT_ATTEMPTS = 2
# How often a request waiting for another worker's fill of its URL looks whether that worker let go of it
# (`Flights._sibling_fill`): soon after it began, then at most every SIBLING_POLL_MAX_S.
SIBLING_POLL_FIRST_S = 0.001
SIBLING_POLL_MAX_S = 0.02


@dataclass(frozen=True, slots=True)
class Landing:
    """A flight's outcome as soon as its leader knows it: `kept` when the response is being stored; `failed` when
    the origin gave no answer (none in time, or a broken head: the waiters answer with that failure, as their own
    request would most likely end, instead of each asking a failing origin again); neither when nothing is kept
    for the others (an answer they may not share: they ask the origin themselves). A body the origin fails once its
    head is in (`kept` done with that OriginError) is the waiters' failure too: the stale copy where they may take
    it, else one more origin request for all of them (`through_flight`); one given up otherwise (`kept` done False:
    purged meanwhile) sends one of the waiters to the origin again, the others waiting for it. `selected`: which
    requests the answer being kept is the variant of, when it varies. `body_wait_s`: how long `kept` is waited for
    when not `body_patience_s`: another worker's fill (`Flights._begin`) is landed at once, before its head is in, so
    its body's wait covers the landing's too (`Flights._sibling_fill` ends it by then). `growing`: the body as the
    leader reads it, which the waiters may be answered from before it is stored (assetcdn/edge/states/growing.py)."""

    kept: Kept | None = None
    failed: OriginError | None = None
    selected: Selected | None = None
    body_wait_s: float | None = None
    growing: Growing | SiblingGrowing | None = None

    @property
    def elsewhere(self) -> bool:
        """Whether this is another worker's fill (`Flights._begin`): a failure its `kept` ends with is that fill's
        origin giving no answer (`Flights._sibling_fill`), which the waiters answer with as with `failed`."""
        return self.body_wait_s is not None


class Flights:
    """One origin request per key at a time: the first request for a key leads (asks the origin, streams the
    answer to its client, stores it) and lands the flight as soon as the origin's head says whether the answer is
    kept; requests arriving meanwhile wait for that (`await_flight`), then look up again (their own Vary variant, and
    whether it may answer them) and ask the origin themselves if it may not."""

    def __init__(self) -> None:
        self._waiting: dict[str, asyncio.Future[Landing]] = {}
        self._joined: dict[str, int] = {}  # requests waiting for each key's flight (`joined`)
        self._began: dict[str, float] = {}  # when each key's flight began (Unix time: `lead`)
        # Requests answered after waiting for a flight without asking the origin themselves, ever (`through_flight`;
        # assetcdn_edge_fill_waiters_total): one that waited and then asked the origin after all saved it nothing.
        self.waiters = 0
        # The application's loop, taken at the first flight: an application runs on one loop for its life.
        self._loop: asyncio.AbstractEventLoop | None = None
        # On an edge whose workers share their fills (`share_fills`): the edge's fill lock, the byte each flight
        # this worker leads holds, and the tasks watching the fills of other workers this worker's requests wait for.
        self._node_lock: NodeFillLock | None = None
        self._sibling_patience_s = 0.0
        self._locked: dict[str, int] = {}
        self._watching: set[asyncio.Task[None]] = set()
        self._published: Path | None = None  # where fills under way are published for the other workers
        self._stall_s = 0.0  # how long a published fill may stop growing (`SiblingGrowing`)

    def share_fills(self, lock: NodeFillLock, limits: OriginLimits) -> None:
        """Lead no flight another worker of this edge leads for the same key (assetcdn/edge/cache/fill_lock.py):
        its requests wait for that worker's fill to be stored, as for one of this worker's own, at most as long as
        they would wait for one of this worker's flights to land and keep its body."""
        self._node_lock = lock
        self._sibling_patience_s = flight_patience_s(limits) + body_patience_s(limits)
        self._stall_s = limits.idle_timeout_s + limits.first_byte_timeout_s
        published = lock.path.parent / GROWING_DIR
        try:
            sweep_leftovers(published)
        except OSError as exc:
            log.warning("fills under way cannot be published to the edge's other workers (%s): their requests for "
                        "a URL another worker fills wait until it is stored", exc)
        else:
            self._published = published

    def join(self, key: str, revalidating: float | None = None) -> asyncio.Future[Landing] | None:
        """The flight to wait for, or None: the caller leads, and must `land` the key. `revalidating`: as `lead`
        takes it (the caller must validate its stored copy): the landed flight that brought that copy is not waited
        for."""
        future = self._waiting.get(key)
        if future is not None and revalidating is not None and self._brought(key, future, revalidating):
            future = None
        if future is None:
            future = self._begin(key)
            if future is None:
                return None
        self._joined[key] += 1
        return future

    def _begin(self, key: str) -> asyncio.Future[Landing] | None:
        """A new flight of the key: None when the caller leads it, else the flight of another worker of this edge
        that fills the key now, which the caller (and this worker's requests for the key meanwhile) wait for: landed
        at once, its body kept once that worker's fill is stored and it lets go of the key (`_sibling_fill`)."""
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        future: asyncio.Future[Landing] = loop.create_future()
        self._waiting[key] = future
        self._joined[key] = 0
        self._began[key] = time.time()
        lock = self._node_lock
        if lock is None:
            return None
        offset = key_offset(key)
        # Before the look at the byte: a failure the other worker records as it lets go, right after this look
        # found the byte held, is one of the fill this request waits for (`_sibling_fill`).
        since = time.monotonic()
        if lock.take(offset):
            self._locked[key] = offset
            return None
        kept: Kept = loop.create_future()
        growing = None if self._published is None else SiblingGrowing(
            self._published, key, partial(lock.held_elsewhere, offset), published_head, self._stall_s)
        future.set_result(Landing(kept, body_wait_s=self._sibling_patience_s, growing=growing))
        kept.add_done_callback(lambda _kept: self._forget(key, future))
        task = loop.create_task(self._sibling_fill(lock, offset, kept, since))
        self._watching.add(task)
        task.add_done_callback(self._watching.discard)
        return future

    async def _sibling_fill(self, lock: NodeFillLock, offset: int, kept: Kept, since: float) -> None:
        """Done with `kept` once the other worker lets go of the key (its fill stored, on the disk tier this worker
        reads, or not to be kept), or past `_sibling_patience_s`, when what it kept is left to the waiters' own
        look-up (a request still waiting then asks the origin itself). Done with that fill's failure when it
        recorded one since this wait began (`since`, the host's monotonic clock, as the record's: a wall clock
        stepped back would take an earlier failure of the key for this fill's): its origin gave no answer (`_land`)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._sibling_patience_s
        delay = SIBLING_POLL_FIRST_S
        ended: bool | OriginError = True
        try:
            while held := lock.held_elsewhere(offset):
                if loop.time() >= deadline:
                    break
                await asyncio.sleep(delay)
                delay = min(delay * 2, SIBLING_POLL_MAX_S)
            timeout = None if held else lock.failed_since(offset, since)
            if timeout is not None:
                why = "another worker of this edge got no answer from the origin for this URL"
                ended = OriginTimeout(f"{why} in time") if timeout else OriginError(why)
        finally:
            if not kept.done():
                kept.set_result(ended)

    def joined(self, key: str) -> int:
        """How many requests joined the key's flight under way (0 when none is): they share its one origin request."""
        return self._joined.get(key, 0)

    def lead(self, key: str, revalidating: float | None = None) -> Land | None:
        """How the caller lands the key's new flight, which it leads from here (`landing`); None when one is under
        way (a caller that waits for it takes it with `join`). `revalidating`: when the stored copy the caller
        revalidates came from the origin (its `response_time`): a flight under way that has landed and began
        before then brought that very copy, which answers from the memory tier while the flight waits for its
        storing to end (its disk batch still to be written: `store`), and is no revalidation of it. The caller's
        flight takes its place: the requests for the key join the new one from then on, and the landed one's
        waiters wait for its storing as before (its leader lands only its own flight, `landing`)."""
        future = self._waiting.get(key)
        if future is not None and (revalidating is None or not self._brought(key, future, revalidating)):
            return None
        if self._begin(key) is not None:  # another worker of this edge fills it: this worker's requests wait for it
            return None
        return self.landing(key)

    def _brought(self, key: str, future: asyncio.Future[Landing], arrived: float) -> bool:
        """Whether the key's flight under way (`future`) has landed and began before a stored copy `arrived` (its
        `response_time`): that copy is its answer, and the flight only waits for its storing to end (`lead`). It is
        left to its waiters (forgotten here) for the caller's new flight."""
        if not future.done() or self._began[key] > arrived:
            return False
        self._forget(key, future)
        return True

    def landing(self, key: str) -> Land:
        """How the leader of the key's flight (`join` gave it None) lands it: that flight only, however
        late it is called (a newer flight for the key, led by another request once this one landed, is never
        landed by it: the leader lands again on its way out, after a stream of any length)."""
        return partial(self._land, key, self._waiting[key])

    def _land(self, key: str, future: asyncio.Future[Landing], kept: Kept | OriginError | None = None,
              selected: Selected | None = None, growing: Growing | None = None) -> None:
        """Tell the waiters the response's fate (an OriginError: the origin failed it; `selected`: the variant
        `kept` is, when it varies; `growing`: its body as it is read). While `kept` is not done, requests for the key still join the flight and wait
        for it; a flight landed already is left as it is."""
        if future.done():
            return
        if isinstance(kept, OriginError):
            future.set_result(Landing(failed=kept))
            offset = self._locked.get(key)
            if offset is not None and self._node_lock is not None and not isinstance(kept, ErrorAnswered):
                self._node_lock.failed(offset, kept.timeout)  # for the other workers' requests waiting for it
            kept = None
        else:
            if growing is not None and self._published is not None and key in self._locked:
                growing.share(self._published, key, selected)
            future.set_result(Landing(kept, selected=selected, growing=growing))
        if kept is None or kept.done():
            self._forget(key, future)
        else:
            kept.add_done_callback(lambda _kept: self._forget(key, future))

    def _forget(self, key: str, future: asyncio.Future[Landing]) -> None:
        if self._waiting.get(key) is future:
            del self._waiting[key]
            del self._joined[key]
            del self._began[key]
            offset = self._locked.pop(key, None)
            if offset is not None and self._node_lock is not None:  # the fill is stored: the other workers look
                self._node_lock.release(offset)


def flight_key(url_key: str, zone: PullZone) -> str:
    """The flight of a pull zone URL's fills (`Flights`) under the zone's config as a request found it: a request
    made after the zone's origin changed (or the zone was deleted and made again) leads a fill of its own, never
    waiting for one of the former origin, whose answer is not kept (`replaced`) and whose failure is not the new
    origin's."""
    return pull_variant_key(url_key, zone.flight)


def flight_patience_s(limits: OriginLimits) -> float:
    """How long a request waits for a flight to land: longer than its leader can take to learn the answer's fate
    (a first-byte time for the path's shield, then one for the origin when the shield fails), so that a waiter
    never gives up on a fill that is still to succeed; a leader that fails lands its failure for the waiters. The
    bound is only for a leader that never lands."""
    return limits.first_byte_timeout_s * (FLIGHT_ATTEMPTS + 1)


def body_patience_s(limits: OriginLimits) -> float:
    """How long a request waits for the body a landed flight keeps (`await_flight`): as long as its leader may spend
    reading it from the origin (`body_timeout_s`, on a clock that starts with the leader's first read of the body and
    counts only the origin's waits), and a first-byte time more, so that a body the origin stalls is given up by the
    leader, whose failure the waiter then takes (`through_flight`), before the waiter gives up on it and asks that
    origin itself. A body still being read past that is one a slow client paces (`keep`): not waited for."""
    return limits.body_timeout_s + limits.first_byte_timeout_s


async def await_flight(flight: asyncio.Future[Landing], limits: OriginLimits,
                       deadline: float | None = None, sent: Varied | None = None,
                       growing: bool = False) -> OriginError | None:
    """Wait for a flight: its landing within `flight_patience_s` (TimeoutError past it), then the body it keeps
    for `body_patience_s` or the landing's own `body_wait_s` (past that the caller finds nothing stored and asks the
    origin itself), unless that body is the variant of other request fields' values than the waiter's (`sent`): it
    would not answer the waiter, which asks for its own at once. The origin's failure, if it failed the flight: no answer at all, or a body that
    failed once its head was in (`Kept`). `deadline` (the loop's time): the end of all the waiting, landing and
    body, when the request has less time than that (`through_flight`). `growing`: the caller may be answered from
    the body as it is read (`Landing.growing`): waited for only until that begins, when it does."""
    loop = asyncio.get_running_loop()
    landing = await asyncio.wait_for(asyncio.shield(flight), flight_patience_s(limits) if deadline is None
                                     else max(0.0, deadline - loop.time()))
    if landing.failed is not None:
        return landing.failed
    if other_variant(landing, sent):
        return None
    kept = landing.kept
    if kept is not None:
        if deadline is not None:
            wait_s = max(0.0, deadline - loop.time())
        else:
            wait_s = body_patience_s(limits) if landing.body_wait_s is None else landing.body_wait_s
        with contextlib.suppress(TimeoutError):
            if growing and landing.growing is not None:
                await asyncio.wait_for(landing.growing.begun_or(kept), wait_s)
            else:
                await asyncio.wait_for(asyncio.shield(kept), wait_s)
        if kept.done() and isinstance(failure := kept.result(), OriginError):
            return failure
    return None


def collapsed(stored: StoredResponse, since: float | None) -> bool:
    """Whether `stored` came from the origin since a request began waiting for a flight (`since`, Unix time;
    `through_flight`): the answer to that flight, or a later one, and the request's answer as it is, fresh or not."""
    return since is not None and stored.freshness.response_time >= since


def other_variant(landing: Landing, sent: Varied | None) -> bool:
    """Whether the answer a flight keeps is the variant of other values of the fields its Vary names than the request
    `sent`'s (`Landing.selected`; for another worker's fill, the variant its published head names, once a request
    of this worker has read it: `SiblingGrowing.selected`): no answer to it, which `await_flight` does not wait for."""
    selected = landing.selected
    if selected is None and landing.growing is not None:
        selected = landing.growing.selected
    return selects_other(selected, sent)


def selects_other(selected: Selected | None, sent: Varied | None) -> bool:
    """Whether the request `sent` selects another variant than the answer `selected` names (`other_variant`)."""
    return selected is not None and sent is not None and secondary_key(selected[0], sent.fields()) != selected[1]


class ErrorAnswered(OriginError):
    """The origin answered a flight with an error status (ERROR_STATUSES) that its leader answered with a stale copy
    instead (stale-if-error): the requests waiting for it answer with their stale copy too where they may, rather
    than each asking the failing origin again; one that may not (no copy, or one its own directives keep it from)
    asks the origin itself, for the origin's own answer (`origin_failed`)."""

    def __init__(self, status: int) -> None:
        super().__init__(f"the origin answered {status}")
        self.status = status


def shield_filling() -> ApiError:
    """A shield's refusal of another edge's request it waited for a fill for as long as that edge has, or whose fill
    it waited for kept nothing to share, or had its body failed by the origin (`through_flight`): a refusal of that
    request alone (assetcdn/edge/shield.py `PASSING_REFUSALS`)."""
    return ApiError(409, "ShieldFilling", "This edge's fill of the URL for another request has not answered this one "
                    "in the time the asking edge has; ask the origin for this request.")


def no_landing(kept: Kept | OriginError | None = None, selected: Selected | None = None,
               growing: Growing | None = None) -> None:
    """`land` for a request that leads no flight."""


def selected_by(headers: Headers, sent: Varied) -> Selected | None:
    """What selects a fill's answer of head `headers` to the request `sent`, when it varies (Landing.selected)."""
    vary = vary_fields(headers)
    return (vary, secondary_key(vary, sent.fields())) if vary else None


FLIGHTS = web.AppKey("pull_flights", Flights)


def request_fields(request: web.Request) -> list[tuple[str, str]]:
    return [(name.lower(), value) for name, value in request.headers.items()]


async def serve_pull(request: web.Request, zone: PullZone, path: str, prefix: str) -> web.StreamResponse:
    """Answer a request for `path` (percent-encoded, from `/`) of a pull zone; `prefix` is what the request
    path has before it (`/<zone>` on the default host, nothing on the zone's own hosts)."""
    node = request.app[NODE]
    request[SHARED_HOST] = bool(prefix)
    edge = from_edge(request)
    request[COOKIE_HOST] = None if edge else node.config.cookie_host(request_host(request), bool(prefix))
    # A request this zone sent its origin, back at the edges: refused before it could wait for its own fill. A
    # shield request carries the asking edge's mark for the origin the shield asks, and is no loop.
    if not edge and came_back(request.headers, zone):
        raise loop_detected(zone.name)
    if request.method not in ("GET", "HEAD"):
        if request.method == "TRACE":  # its echo would show the client the zone's RequestHeaders (a secret)
            raise ApiError(405, "MethodNotAllowed", "TRACE is not passed to a pull zone's origin.",
                           headers={"Allow": ALLOWED})
        if "only-if-cached" in request_directives(request_fields(request)):
            # No stored response answers another method (RFC 9111 5.2.1.7): the client asked for no origin request,
            # and this one may change what the origin holds.
            raise ApiError(504, "NotCached", f"A {request.method} is the origin's to answer, never this edge's "
                           "cache (only-if-cached).")
        return await forward_unsafe(request, node, zone, path, prefix)
    fields = request_fields(request)
    directives = request_directives(fields)
    if "If-Match" in request.headers or "If-Unmodified-Since" in request.headers:
        # Preconditions a cache does not evaluate (RFC 9111 4.3.2): the origin's, with the request as it is.
        if "only-if-cached" in directives:
            raise ApiError(504, "NotCached", "A request with If-Match or If-Unmodified-Since is the origin's to "
                           "answer, never this edge's cache (only-if-cached).")
        return await forward_unsafe(request, node, zone, path, prefix, fwd="request")
    sent = varied(request, zone, fields)
    url_key = pull_key(zone.name, path, request.rel_url.raw_query_string, request.scheme)
    flight = flight_key(url_key, zone)

    # Why the first look-up found nothing this request may use (`forwarded_because`, read then: `sent.vary_miss` is
    # the latest look-up's): a request answered from the cache after waiting for another's flight was collapsed into
    # that origin request (RFC 9211 2.2, 2.6), not hit.
    missed: list[str] = []

    async def cached(since: float | None) -> tuple[web.StreamResponse | None, StoredResponse | None]:
        gone = 0   # stored bodies found gone when delivered (purged or evicted since the lookup)
        while True:
            stored = lookup(node, url_key, sent) if gone < 2 else None  # looked up again once, then a miss
            now = time.time()
            if stored is not None:
                decision = Reuse.FRESH if collapsed(stored, since) else reuse(stored.freshness, directives, now)
                if decision is Reuse.FRESH or decision is Reuse.STALE_REVALIDATING:
                    if decision is Reuse.FRESH:
                        status = collapsed_cache_status(missed[0]) if missed else hit_cache_status(
                            stored.freshness, now)
                        answer = await deliver_stored(request, stored, CacheResult.HIT, status)
                    else:
                        background_revalidate(request, node, zone, path, url_key, stored)
                        answer = await deliver_stored(request, stored, CacheResult.STALE,
                                                      f"{CACHE_STATUS}; hit; fwd=stale")
                    if answer is not None:
                        return answer, stored
                    gone += 1
                    continue
            if "only-if-cached" in directives:
                raise ApiError(504, "NotCached", "The response is not in this edge's cache (only-if-cached).")
            if not missed:
                missed.append(forwarded_because(stored, sent, now))
            return None, stored

    async def growing(fill: Growing | SiblingGrowing) -> web.StreamResponse | None:
        # Collapsed into the flight's origin request, as when answered from what it stored (`cached`). Another
        # worker's fill says which variant it is only once its head is published and read (`joinable`), which
        # opens its body: joined at once, so that `leave` closes it whatever follows.
        if not fill.joinable(node.cache):
            return None
        fill.join()
        try:
            if selects_other(fill.selected, sent):
                return None
            answer = await deliver_growing(request, fill, CacheResult.HIT,
                                           collapsed_cache_status(missed[0] if missed else "uri-miss"), zone.name)
        finally:
            fill.leave()
        count_lookup(request, CacheResult.HIT)
        return answer

    if getattr(request.transport, "fetched", None) is not None:
        # The hit path fetched this request's answer (assetcdn/edge/fastpath/pull_fill.py): it is the answer, even
        # when the cache holds the URL by now (its shield, another worker of this edge, stored what it fetched).
        # The URL's flight it began for it is this request's to land: the requests waiting for the URL meanwhile
        # wait for this answer, as for any flight's.
        landing: Land | None = request.transport.take_landing()  # type: ignore[union-attr]
        try:
            return await ask_origin(request, node, zone, path, url_key, fields, None, landing or no_landing)
        finally:
            if landing is not None:
                landing(None)
    return await through_flight(request.app[FLIGHTS], flight, node.origins.limits, cached,
                                partial(ask_origin, request, node, zone, path, url_key, fields),
                                partial(origin_failed, request, zone, path, fields,
                                        again=partial(ask_origin, request, node, zone, path, url_key, fields)),
                                # Another edge's: what is left of its first-byte time for this shield.
                                patience_s=node.origins.limits.first_byte_timeout_s * SHIELD_FIRST_BYTE_SHARE
                                if from_edge(request) else None, sent=sent,
                                stale=partial(stale_on_error, request, zone, fields), growing=growing)


async def through_flight(flights: Flights, flight_key: str, limits: OriginLimits,
                         cached: Callable[[float | None], Awaitable[tuple[R | None, StoredResponse | None]]],
                         fill: Fill[R],
                         failed: Callable[[StoredResponse | None, OriginError], Awaitable[R]],
                         patience_s: float | None = None, sent: Varied | None = None,
                         stale: Callable[[StoredResponse | None, OriginError], Awaitable[R | None]] | None = None,
                         growing: Callable[[Growing | SiblingGrowing], Awaitable[R | None]] | None = None) -> R:
    """What a request of the key's flight gets: `cached`'s answer from the cache (None: nothing there it may
    use, and the stored response it found; after a wait for a flight, given when the wait began: a response the
    origin gave since then, which postdates this request, is its answer as it is, even one to be validated before
    each reuse, `no-cache` or `max-age=0`: that flight was its validation, and the requests that waited for it do
    not each ask the origin again), else `fill`'s (the origin asked, given that stored response and how
    to land the flight) as the flight's leader, or after waiting for the flight to land when it stored nothing
    this request may use; `failed`'s, with the stored response, when the origin failed the flight or it does not
    land within `flight_patience_s` (an OriginTimeout). After a wait that found nothing: an answer the
    flight did not mean to keep (one they may not share), and a second such wait, send the request to the origin
    itself; a body that was to be kept and is not there (purged meanwhile) makes one more flight, which the others
    that waited join, so one origin request, not one each, fetches it again. A body the origin failed once its head
    was in (cut short, or too slow: `Kept`) is the waiters' failure as the flight's head's would be: `stale`'s
    answer (the stale copy the request may take, or None), else one more flight for them all, whose leader `fill`s
    with `whole_first` (its body whole before it answers, so that the origin failing it again is its client's
    `failed` answer, never a body cut short), and should that flight's body fail too, `failed`'s; another edge's
    shield request (`patience_s`) is declined instead, as below (its first-byte time would run out while that
    flight's body is read whole). Deliveries (serve_pull) and transform sources (pull_source.py) alike.
    `patience_s`: how long the request may wait for another's flight, when it has less time than a flight may take
    (another edge's shield request: its first-byte time for the shield runs meanwhile, and
    `SHIELD_FIRST_BYTE_SHARE` of it is the shield's). A flight that has not landed by then, or whose body is still being read, is refused (409
    `ShieldFilling`: the asking edge takes it as a refusal of that one request and asks the origin itself, leaving
    the shield up), rather than the asking edge giving up on the shield and passing it over for every path; so is
    one whose answer is not shared (the shield's own origin request for it would begin late), and one whose body the
    origin failed where no stale copy answers it.
    `growing`: how a request that waited is answered from the flight's body as its leader reads it, before it is
    stored (assetcdn/edge/states/growing.py; None when it may not be, and the request waits for the body stored)."""
    waited: asyncio.Future[Landing] | None = None  # the flight this request waited for
    since: float | None = None  # when it began waiting for it (Unix time)
    retried = False
    whole_first = False  # how this request fills, should it lead a flight: whole first after a body that failed
    deadline = None if patience_s is None else asyncio.get_running_loop().time() + patience_s
    while True:
        answer, stored = await cached(since)
        if answer is not None:
            if waited is not None:  # what the flight it waited for stored: the origin asked once for both
                flights.waiters += 1
            return answer
        if waited is not None:
            kept = waited.result().kept
            if deadline is not None and (kept is None or (not kept.done() and not other_variant(waited.result(), sent))):
                # Waited for its body as long as the asking edge may: declined. One not waited for (another Vary
                # variant's, `await_flight`) is no answer to this request, which asks the origin at once below. An
                # answer not shared is declined too: the asking edge loses nothing asking the origin itself, with
                # its whole first-byte time, where this edge's request would begin with part of it gone.
                raise shield_filling()
            if retried or kept is None or not kept.done() or kept.result() is not False:
                return await fill(stored, no_landing)  # not shared, still being read, or stored: not for this one
            retried = True
        # A request that must validate its stored copy does not wait for the landed flight that brought it.
        waiting = flights.join(flight_key, None if stored is None else stored.freshness.response_time)
        if waiting is None:
            break
        if waiting is waited:  # that flight's body still being read past body_timeout_s: it asks itself
            return await fill(stored, no_landing)
        since = time.time()
        streams = growing is not None and deadline is None
        try:
            failure = await await_flight(waiting, limits, deadline, sent, streams)
            # Only a fill that tells of its body as it reads it (over SPOOL_MEMORY) had the wait end early: a small
            # one's waiters waited for it stored above, and pay nothing more here (no second wait).
            if streams and failure is None and waiting.result().growing is not None:
                if (streamed := await from_growing(waiting, sent, growing)) is not None:
                    flights.waiters += 1
                    return streamed
                # Not answered from it (over, purged since, another variant): its body stored, as any waiter's.
                failure = await await_flight(waiting, limits, deadline, sent)
        except TimeoutError:
            if deadline is not None:
                raise shield_filling() from None
            failure = OriginTimeout(f"no answer from the origin within {flight_patience_s(limits):g} s")
        if failure is not None and waiting.done() and waiting.result().kept is not None \
                and not waiting.result().elsewhere:  # its body failed
            answer = None if stale is None else await stale(stored, failure)
            if answer is not None:
                flights.waiters += 1
                return answer
            if deadline is not None:  # another edge's: it asks the origin itself, with its whole first-byte time
                raise shield_filling()
            if not retried:  # one more flight for the requests that waited, not an origin request each
                retried, waited, whole_first = True, None, True
                continue
        if failure is not None:  # the flight's failure, not one of its own: no origin request either
            flights.waiters += 1
            return await failed(stored, failure)
        waited = waiting
    land = flights.landing(flight_key)
    try:
        return await fill(stored, land, whole_first=whole_first)
    finally:
        land(None)


async def from_growing(flight: asyncio.Future[Landing], sent: Varied | None,
                       answer: Callable[[Growing | SiblingGrowing], Awaitable[R | None]] | None) -> R | None:
    """`answer` from the body a landed flight is reading (`through_flight`), when it is being read still and is the
    variant this request selects; else None."""
    landing = flight.result()
    growing, kept = landing.growing, landing.kept
    if answer is None or growing is None or kept is None or kept.done() or other_variant(landing, sent):
        return None
    return await answer(growing)


def named_by_body(headers: Headers) -> bool:
    """Whether a response has neither a strong ETag nor Last-Modified: as a transform's source it is named by
    its body's SHA-256 (assetcdn/edge/states/keys.py `pull_source_id`), computed once, as it is stored."""
    etag = first_value(headers, "etag")
    return (etag is None or etag.startswith("W/")) and first_value(headers, "last-modified") is None


def forwarded_because(stored: StoredResponse | None, sent: Varied, now: float) -> str:
    """Cache-Status's fwd (RFC 9211 2.2) of a request asked of the origin, given the stored response its look-up
    selected: uri-miss, or vary-miss when the URL is stored but not the variant this request selects (`lookup`);
    request when the selected response is fresh but the request's own directives (no-cache, max-age, min-fresh)
    kept it from answering as it is; else stale."""
    if stored is None:
        return "vary-miss" if sent.vary_miss else "uri-miss"
    return "request" if reuse(stored.freshness, {}, now) is Reuse.FRESH else "stale"


def hit_cache_status(fresh: Freshness, now: float) -> str:
    """The Cache-Status of a fresh hit at `now` (the hit path writes it too, assetcdn/edge/fastpath/prepared.py)."""
    return f"{CACHE_STATUS}; hit; ttl={int(fresh.lifetime - fresh.age(now))}"


def collapsed_cache_status(fwd: str) -> str:
    """The Cache-Status of a request answered with what another request's origin request (`fwd`: why the look-up
    before it waited sent it there) stored meanwhile: collapsed into that one (RFC 9211 2.6), not a hit."""
    return f"{CACHE_STATUS}; fwd={fwd}; collapsed"


def lookup(node: EdgeNode, url_key: str, sent: Varied) -> StoredResponse | None:
    """The stored response a request selects: the URL's entry, or the variant its Vary fields pick (in the
    request `sent` to the origin for it; ``sent.vary_miss`` says when the URL's entry was there but not that
    variant)."""
    sent.vary_miss = False
    mark = node.cache.purge_mark()  # before the look-up: a purge may remove what it finds at any moment after
    try:
        obj = node.cache.get(url_key)
        if obj is None:
            return None
        head = obj.headers
        vary = first_value(head, VARY)
        if vary is not None:  # the URL's entry says which request fields pick a variant
            if vary.count(",") >= MAX_VARY_FIELDS:  # stored before the bound: not looked through on every request
                sent.vary_miss = True
                return None
            obj = node.cache.get(pull_variant_key(url_key, vary_selector(
                first_value(head, VARY_GENERATION), secondary_key(vary.split(",") if vary else (), sent.fields()))))
            sent.vary_miss = obj is None
            if obj is None:
                return None
            head = obj.headers
    except FileNotFoundError:
        return None
    stored = StoredResponse.of(obj, head, mark)
    if stored is not None and stored.status in REQUEST_ERRORS:
        # Stored before such errors were never stored (one client's malformed request, freshness and all): a miss,
        # which the next fill replaces, as they are never stored now.
        return None
    return stored


def vary_selector(generation: str | None, fields: str) -> str:
    """What a variant is kept under beside its URL's key: the values of the request fields its Vary names
    (`secondary_key`, whose first line holds a ':' or a NUL, never a generation's) in the generation of variants
    its URL's own entry names (VARY_GENERATION; None: an entry stored before there were generations)."""
    return fields if generation is None else f"{generation}\n{fields}"


def vary_generation(node: EdgeNode, url_key: str, vary: str) -> str | None:
    """The generation of variants a Vary'd response of fields `vary` (as VARY holds them) is kept in: the one the
    URL's entry names when it is a Vary'd URL's entry of the same fields, else a new one (the URL held nothing, a
    response, or another Vary's entry: the variants under that are retired, never selected again)."""
    try:
        obj = node.cache.get(url_key)
    except FileNotFoundError:
        obj = None
    if obj is not None:
        head = obj.headers
        if first_value(head, VARY) == vary:
            return first_value(head, VARY_GENERATION)
    return secrets.token_hex(8)


def forwarded_headers(request: web.Request, zone: PullZone, stored: StoredResponse | None) -> CIMultiDict[str]:
    """A cache fill's request: the whole response is asked for (the client's own conditions and ranges are
    answered from it here), revalidating the stored one when there is one."""
    return fill_headers(list(request.headers.items()), zone, request.remote, request.scheme, stored)


def fill_headers(fields: Sequence[tuple[str, str]], zone: PullZone, client_ip: str | None, scheme: str,
                 stored: StoredResponse | None) -> CIMultiDict[str]:
    """`forwarded_headers` of a request with header fields `fields` from `client_ip` over `scheme`."""
    headers = origin_request_headers(list(fields), zone.origin, client_ip=client_ip, scheme=scheme)
    for name in CLIENT_CONDITIONS:
        headers.popall(name, None)
    if any("_" in name for name in headers):  # `If_Match` would have a CGI origin answer a condition unasked
        for name in {name for name in headers if "_" in name and name.lower().replace("_", "-") in CONDITION_NAMES}:
            headers.popall(name)
    if stored is not None:
        for name, value in validators(stored.headers):
            headers[name] = value
    return headers


class Varied:
    """What a stored response's Vary selects its variant by (RFC 9111 4.1): the fields of the request this edge
    sends the origin for a client's request (`fill_headers`, without validators), not the client's own. They
    differ where the client names a field in Connection (not sent: keyed on the client's value, the answer to a
    request without the field would be stored as the variant of one with it) and where this edge sets a field
    itself (X-Forwarded-For and -Proto, Host, the zone's own fields): the origin answered the request it got.
    Made on first use: only a Vary'd URL needs them; from the request's fill headers when the caller made them
    already (`origin_sends`)."""

    __slots__ = ("_client", "_zone", "_client_ip", "_scheme", "_headers", "_sent", "vary_miss")

    def __init__(self, client: Sequence[tuple[str, str]], zone: PullZone, client_ip: str | None,
                 scheme: str) -> None:
        self._client, self._zone, self._client_ip, self._scheme = client, zone, client_ip, scheme
        self._headers: CIMultiDict[str] | None = None
        self._sent: Headers | None = None
        # The last `lookup` found the URL's Vary'd entry but no variant for these fields (Cache-Status's vary-miss).
        self.vary_miss = False

    def origin_sends(self, headers: CIMultiDict[str]) -> None:
        """`fill_headers` of this request as the caller made them for its origin request (no validators)."""
        self._headers = headers

    def fields(self) -> Headers:
        if self._sent is None:
            sent = self._headers
            if sent is None:
                sent = fill_headers(self._client, self._zone, self._client_ip, self._scheme, None)
            # `_` read as `-`: servers that pass fields as CGI variables read `Accept_Language` as Accept-Language
            # (both HTTP_ACCEPT_LANGUAGE), so it picks the variant its answer is.
            self._sent = [(name.lower().replace("_", "-"), value) for name, value in sent.items()]
        return self._sent


VARIED = web.RequestKey("pull_varied", Varied)


def varied(request: web.Request, zone: PullZone, fields: Sequence[tuple[str, str]]) -> Varied:
    """`Varied` of an application request with header fields `fields` (its own, `request_fields`): one per
    request, so that its look-up and its store make the Vary key's fields once."""
    found = request.get(VARIED)
    if found is None:
        found = request[VARIED] = Varied(fields, zone, request.remote, request.scheme)
    return found


class Fill(Protocol[R_co]):
    """How a request asks the origin itself in `through_flight`: given the stored response it found, and how to land
    the flight it leads (`no_landing`: none); `whole_first` when it leads the one more flight made after a body the
    origin failed: an answer that is kept is then read whole before any of it answers the request (`ask_origin`)."""

    def __call__(self, stored: StoredResponse | None, land: Land, *, whole_first: bool = False) -> Awaitable[R_co]: ...


class Land(Protocol):
    """How a flight's leader lands it (`Flights.landing`): the answer being kept (and the variant it is, when it
    varies, and its body as it is read), the origin's failure, or None (nothing kept for the others)."""

    def __call__(self, kept: Kept | OriginError | None = None, selected: Selected | None = None,
                 growing: Growing | None = None) -> None: ...


def count_lookup(request: web.Request, result: str) -> None:
    """A cache result counted: a client's request's in `assetcdn_edge_cache_total`, as its X-Cache says; another
    edge's shield request's in `assetcdn_edge_shield_cache_total`, as that edge counted its client's itself."""
    metrics = request.app[NODE].metrics
    (metrics.shield_cache_result(result) if from_edge(request) else metrics.cache_result(result)).inc()


async def deliver_stored(request: web.Request, stored: StoredResponse, x_cache: CacheResult, cache_status: str,
                         counted: CacheResult | None = None) -> web.StreamResponse | None:
    """`deliver`, counted in the cache metric as `counted` (default `x_cache`), or None when the stored body went
    (purged or evicted) since the look-up that found it: the caller looks up again or asks the origin."""
    try:
        answer = await deliver(request, stored, x_cache, cache_status)
    except FileNotFoundError:
        return None
    count_lookup(request, counted or x_cache)
    return answer


async def origin_failed(request: web.Request, zone: PullZone, path: str, fields: Headers,
                        stored: StoredResponse | None, exc: OriginError, *,
                        again: Callable[[StoredResponse | None], Awaitable[web.StreamResponse]] | None = None
                        ) -> web.StreamResponse:
    """No answer from the origin: the stale copy where stale-if-error allows, else 504 or 502. The error status a
    flight this request waited for was answered with (ErrorAnswered), where no stale copy may answer it: `again`'s
    answer (the origin asked for this request)."""
    answer = await stale_on_error(request, zone, fields, stored, exc)
    if answer is not None:
        return answer
    fwd = forwarded_because(stored, varied(request, zone, fields), time.time())
    if isinstance(exc, ErrorAnswered) and again is not None:  # the origin did answer the flight: this request's own
        return await again(None if stored is None else unpurged(request.app[NODE], stored))
    ORIGIN_FAILURES.log(logging.INFO, f"failed {zone.name}", "pull zone %s: the origin failed for %s: %s", zone.name,
                        path, exc)
    # The answer names this cache, as every answer from the origin does: a shield's relays the origin's failure to
    # the asking edge (assetcdn/edge/shield.py `relayed`), which would take an error of the shield's own for the
    # shield failing and pass it over for every zone's paths.
    cache_status = {"Cache-Status": f"{CACHE_STATUS}; fwd={fwd}; "
                                    f"detail={'origin-timeout' if exc.timeout else 'origin-unreachable'}"}
    if exc.timeout:
        raise ApiError(504, "OriginTimeout", f"The origin did not answer in time: {exc}",
                       headers=cache_status) from None
    raise ApiError(502, "OriginUnreachable", f"The origin could not be reached: {exc}", headers=cache_status) from None


async def stale_on_error(request: web.Request, zone: PullZone, fields: Headers, stored: StoredResponse | None,
                         exc: OriginError) -> web.StreamResponse | None:
    """The stale copy answering the origin's failure `exc` (`origin_failed`'s, or a flight's this request waited for,
    `through_flight`) where stale-if-error allows it (RFC 5861: the response's or the request's, `fields`), unless a
    purge removed it meanwhile; None when no copy may answer."""
    if stored is None:
        return None
    now = time.time()
    fwd = forwarded_because(stored, varied(request, zone, fields), now)
    found = unpurged(request.app[NODE], stored)
    if found is None or not usable_on_error(found.freshness, request_directives(fields), now):
        return None
    # None when its body went since the lookup: as if there were none
    return await deliver_stored(request, found, CacheResult.STALE, f"{CACHE_STATUS}; hit; fwd={fwd}; " + (
        f"fwd-status={exc.status}" if isinstance(exc, ErrorAnswered) else "detail=origin-unreachable"))


def unpurged(node: EdgeNode, stored: StoredResponse) -> StoredResponse | None:
    """`stored`, unless a purge made since it was looked up names it (it was held while the origin was asked): then
    what its key holds now (a soft purge's copy, marked stale), or None. A stale copy answers the origin's failure
    (stale-if-error) only while no purge removed it: the origin may take its first-byte time to fail, and answered
    with the copy a purge acknowledged meanwhile removed, the client would get what the purge was made to remove."""
    if stored.mark is None or not node.cache.purged_since(stored.mark, stored.obj):
        return stored
    mark = node.cache.purge_mark()
    try:
        obj = node.cache.get(stored.obj.key)
    except FileNotFoundError:
        return None
    if obj is None:
        return None
    found = StoredResponse.of(obj, mark=mark)
    return found if found is not None and found.status == stored.status else None


async def drop_copy(node: EdgeNode, key: str) -> None:
    """Drop the stored copy under `key` from every tier and worker (a purge of that key alone), off the event loop.
    The disk tier failing the delete: this worker's memory copy goes at least, and the answer the caller is making
    (the origin's, which replaced the copy) is still its client's, not a 500 for the edge's own disk, as for an
    unsafe request's invalidation (`invalidate`)."""
    try:
        await asyncio.get_running_loop().run_in_executor(None, node.cache.purge_keys, [key])
    except (OSError, sqlite3.Error) as exc:
        node.cache.memory.discard_many([key])
        STORE_FAILURES.log(logging.ERROR, "drop", "edge cache: a pull zone copy the origin replaced could not be "
                           "dropped from the disk tier: %s", exc)


async def drop_if_superseded(node: EdgeNode, zone: PullZone, stored: StoredResponse | None, response: OriginResponse,
                             fields: Headers = ()) -> None:
    """Drop `stored` when `response`, the origin's full answer to its revalidation, may not be kept whoever asks
    (`judge` with `fields`, the fields every request for it carries): it says the stored copy is not the origin's
    current response (RFC 9111 4.3.3), and left, stale-if-error and stale-while-revalidate would go on answering with
    (or making variants of) what the origin has replaced. Not for a 5xx (the origin failing: what stale-if-error is
    for), nor an error about the request's own form (REQUEST_ERRORS: its fields, not the URL), which replace nothing."""
    if stored is not None and response.status < 500 and response.status not in REQUEST_ERRORS and judge(
            zone, fields, response, node.origins.limits.max_object_bytes)[0] is not None:
        await drop_copy(node, stored.obj.key)


async def ask_origin(request: web.Request, node: EdgeNode, zone: PullZone, path: str, url_key: str,
                     fields: Headers, stored: StoredResponse | None, land: Land = no_landing, *,
                     whole_first: bool = False) -> web.StreamResponse:
    """A miss, or a stored response the origin must confirm (a 304 updates it) or replace. `land` tells the
    requests waiting for this one what is kept for them, as soon as that is known. A miss of a URL whose chunked
    body this worker found too large to keep (`found_too_large`) is answered as one declared too large is: not kept,
    and a GET's Range asked of the origin as it came, its whole body never asked for first. `whole_first`: an answer
    that is kept is stored before this client gets any of it (`store_then_deliver`)."""
    fwd = forwarded_because(stored, varied(request, zone, fields), time.time())
    too_large = stored is None and found_too_large(node, url_key)
    if too_large and request.method == "GET" and "Range" in request.headers:
        land(None)  # nothing kept: the requests waiting for the URL ask for their own at once
        return await forward_unsafe(request, node, zone, path, "", fwd=f"{fwd}; detail={NotStored.TOO_LARGE.value}")
    try:
        response = handed_fill(request) or await ask(
            node, zone, path, request.rel_url.raw_query_string, forwarded_headers(request, zone, stored),
            from_edge=from_edge(request))
    except OriginError as exc:
        land(exc)
        return await origin_failed(request, zone, path, fields, stored, exc)
    if stored is not None and response.status in (304, 412) and validators(stored.headers):
        # A 412 to the stored copy's validators (a non-conforming origin: a GET's If-None-Match that holds is 304,
        # RFC 9110 13.1.2) answers the edge's conditions, not this client's, which sent none to the origin: asked
        # for whole below, as for a 304 about another response.
        response.release()
        if response.status == 304 and validated_by(stored.headers, response.headers):
            refreshed = await refresh(node, zone, path, stored, response, fields)
            land(None)
            own = withheld_fields(refreshed.headers, response.headers)
            if own:  # what the 304 keeps out of the stored copy is still this request's (a Set-Cookie)
                refreshed = replace(refreshed, headers=(*refreshed.headers, *own))
            if stale_at_shield(response.headers):  # the shield's stale copy confirmed it: stale, as that copy is
                answer = await deliver_stored(request, refreshed, CacheResult.STALE,
                                              f"{CACHE_STATUS}; hit; fwd={fwd}; fwd-status=304")
            else:
                answer = await deliver_stored(request, refreshed, CacheResult.REVALIDATED,
                                              f"{CACHE_STATUS}; fwd={fwd}; fwd-status=304", counted=CacheResult.HIT)
            if answer is not None:  # else its body went meanwhile: asked for whole below
                return answer
        return await ask_origin(request, node, zone, path, url_key, fields, None, land,  # about another response
                                whole_first=whole_first)
    if response.status == 304:
        # A 304 answers a condition (RFC 9110 15.4.5), and this request had none (a client's own are never sent,
        # nor has a stored response without ETag or Last-Modified any): no answer to it, never passed on as one (a
        # client that asked for the body would get none), nor a refresh of that stored response.
        response.release()
        failure = unasked_not_modified()
        land(failure)
        return await origin_failed(request, zone, path, fields, stored, failure)
    if stored is not None and response.status in ERROR_STATUSES:
        stored = unpurged(node, stored)
    if stored is not None and response.status in ERROR_STATUSES and usable_on_error(
            stored.freshness, request_directives(fields), time.time()):
        response.release()
        land(ErrorAnswered(response.status))  # the waiters answer with their stale copy too, not asking again
        answer = await deliver_stored(request, stored, CacheResult.STALE,
                                      f"{CACHE_STATUS}; hit; fwd={fwd}; fwd-status={response.status}")
        if answer is not None:  # else its body went meanwhile: asked for whole below
            return answer
        return await ask_origin(request, node, zone, path, url_key, fields, None, land, whole_first=whole_first)
    await drop_if_superseded(node, zone, stored, response)
    if whole_first and not too_large:  # one found too large is streamed, never kept (`stream_and_store`)
        return await store_then_deliver(request, node, zone, path, url_key, fields, response, fwd, land, stored)
    return await stream_and_store(request, node, zone, path, url_key, fields, response, fwd, land,
                                  None if stored is None else stored.obj.key, too_large=too_large)


async def store_then_deliver(request: web.Request, node: EdgeNode, zone: PullZone, path: str, url_key: str,
                             fields: Headers, response: OriginResponse, fwd: str, land: Land,
                             stored: StoredResponse | None) -> web.StreamResponse:
    """`stream_and_store` for the request that leads the one more flight made after a body the origin failed
    (`through_flight`): an answer that is kept is read whole and stored before this client gets any of it, then
    delivered from the cache (a MISS, as a streamed fill's), so that the origin failing its body again is this
    client's 502 or 504 (`origin_failed`), never an answer cut short; the requests waiting for it take that failure
    as theirs. An answer that is not kept is streamed (`stream_and_store`), and so is one asked for again when the
    body read is not kept after all (found over the size limit, purged meanwhile, the cache failing)."""
    replacing = None if stored is None else stored.obj.key
    why, declared, parsed = judge(zone, fields, response, node.origins.limits.max_object_bytes)
    if why is not None:
        return await stream_and_store(request, node, zone, path, url_key, fields, response, fwd, land, replacing)
    sent = varied(request, zone, fields)
    kept: Kept = asyncio.get_running_loop().create_future()
    land(kept, selected_by(response.headers, sent))
    try:
        await keep(node, zone, path, url_key, sent, response, parsed, new_spool(declared), None, kept,
                   replacing=replacing)
    finally:
        settle(kept)
    outcome = kept.result()
    if isinstance(outcome, OriginError):
        return await origin_failed(request, zone, path, fields, stored, outcome)
    found = lookup(node, url_key, sent) if outcome else None
    if found is not None:
        answer = await deliver_stored(request, found, CacheResult.MISS, fill_cache_status(fwd, None))
        if answer is not None:
            return answer
    return await ask_origin(request, node, zone, path, url_key, fields, None)


async def ask(node: EdgeNode, zone: PullZone, path: str, query: str, headers: CIMultiDict[str], *,
              from_edge: bool) -> OriginResponse:
    """A fill's request (`shields.fill`), its response marked with where the cache's purges stood before it was
    sent: `store` keeps none that a purge made meanwhile names (both fills', this module's and pull_fill.py's)."""
    mark = node.cache.purge_mark()
    response = await node.shields.fill(zone, path, query, headers, from_edge=from_edge)
    response.purge_mark = mark
    return response


def unasked_not_modified() -> OriginError:
    """The origin's failure a 304 to a request without conditions is (both fills', and an image source's)."""
    return OriginError("the origin answered 304 Not Modified to a request without conditions")


def handed_fill(request: web.Request) -> OriginResponse | None:
    """The origin's answer the hit path fetched for this very request before it handed the request over
    (assetcdn/edge/fastpath/pull_fill.py): taken once, in place of a new origin request; its failure is raised."""
    take = getattr(request.transport, "take_fetched", None)
    fetched: OriginResponse | OriginError | None = take() if take is not None else None
    if isinstance(fetched, OriginError):
        raise fetched
    return fetched


async def stream_and_store(request: web.Request, node: EdgeNode, zone: PullZone, path: str, url_key: str,
                           fields: Headers, response: OriginResponse, fwd: str,
                           land: Land = no_landing, replacing: str | None = None, *,
                           too_large: bool = False) -> web.StreamResponse:
    """Send the origin's answer to this client as it arrives and, when it may be stored, keep it; counted in the cache
    metric as its X-Cache says (MISS, or PASS for one that may not be stored). `replacing`: the key of the stored
    copy the answer replaces (it answered that copy's revalidation), dropped should its body be found too large to
    keep (`keep`). `too_large`: this worker found the URL's chunked body too large to keep (`found_too_large`): a
    body of no declared length is taken for one declared too large, not read into a spool up to the limit again."""
    why, declared, parsed = judge(zone, fields, response, node.origins.limits.max_object_bytes)
    if too_large and why is None and declared is None:
        why = NotStored.TOO_LARGE
    if why is NotStored.TOO_LARGE and request.method == "GET" and "Range" in request.headers:
        # Never stored, so no range of it is ever answered from the cache: the client's request goes to the origin
        # as it came (its Range and If-Range the origin's to answer), not the whole body from its first byte.
        response.release()  # the body unread: the origin connection is closed
        land(None)
        # A GET invalidates nothing: no prefix is needed for what `forward_unsafe` would invalidate.
        return await forward_unsafe(request, node, zone, path, "", fwd=f"uri-miss; detail={why.value}")
    count_lookup(request, CacheResult.MISS if why is None else CacheResult.PASS)
    # The waiters learn now whether they get this answer: they wait for it to be stored (`kept`), not for
    # this client to take it, or ask for their own at once.
    kept = asyncio.get_running_loop().create_future() if why is None else None
    growing = growing_for(kept, declared)
    land(kept, None if kept is None else selected_by(response.headers, varied(request, zone, fields)), growing)
    try:
        return await send_and_keep(request, node, zone, path, url_key, fields, response, fwd, why, declared, parsed,
                                   kept, replacing, growing)
    finally:
        settle(kept)


def judge(zone: PullZone, fields: Headers, response: OriginResponse,
          limit: int) -> tuple[NotStored | None, int | None, Directives]:
    """A fill's answer: None when it is kept, else why not; its declared length (None: not declared); its
    caching directives, parsed once here for `keep` (both fills, this module's and pull_fill.py's)."""
    headers = response.headers
    parsed = response_directives(headers)
    why = not_storable("GET", response.status, fields, headers, store_set_cookie=zone.store_set_cookie,
                       parsed=parsed)
    length = first_value(headers, "content-length")
    declared = int(length) if length is not None and length.isdigit() else None
    if why is None and declared is not None and declared > limit:
        why = NotStored.TOO_LARGE
    return why, declared, parsed


def found_too_large(node: EdgeNode, url_key: str) -> bool:
    """Whether this worker found `url_key`'s body too large to keep while reading it, chunked (no declared length),
    lately and with no purge published since (`EdgeNode.too_large`, `remember_too_large`): its next fills take such
    a body for one declared too large (`stream_and_store`; pull_fill.py's for a client gone before the origin's
    head). One dict look-up for a URL never found so."""
    memory = node.too_large
    return url_key in memory and memory.refusal(url_key, node.cache.purge_mark()) is not None


def remember_too_large(node: EdgeNode, url_key: str, response: OriginResponse, size: int) -> None:
    """The origin's `response` for `url_key`, of no declared length, found longer than the object size limit (at
    `size` bytes) while it was read: remembered (`found_too_large`) as of the purge mark it was asked at (a purge
    since lets it go). Not one that varies (Vary): the memory is the URL's, and another variant (another
    Accept-Encoding's) may be small enough to keep."""
    if response.purge_mark is not None and not vary_fields(response.headers):
        node.too_large.remember(url_key, response.purge_mark, size, node.origins.limits.max_object_bytes)


def send_timeout_s(settings: Settings) -> float:
    """How long a fill's client may take none of its answer (`sent_in_time`): the edge's send timeout for
    clients that do not read (``tls.send_timeout_s``), over plain HTTP as over TLS."""
    return float(settings.get("tls", "send_timeout_s"))


async def sent_in_time(sending: Awaitable[object], timeout_s: float, cut_off: Callable[[], None]) -> bool:
    """The rule for a fill's client that does not read, both fills' (this module's and pull_fill.py's): what it
    was written must leave (`sending`: a write, or the wait for the connection to drain) within `timeout_s`,
    else it is cut off (`cut_off`, as when it is gone) and False: a kept answer's fill reads on into the cache
    without it, one not kept stops and its origin connection is closed (docs/api-guide.md "Pull zones")."""
    try:
        async with asyncio.timeout(timeout_s):
            await sending
    except (TimeoutError, ConnectionError):
        cut_off()
        return False
    return True


def cut_off(request: web.Request, answer: web.StreamResponse | None = None) -> None:
    """Close a fill's connection now: its client went, or does not read (`sent_in_time`). Aborted, not closed: a
    close waits to send what the client has not read, for as long as it reads nothing. An `answer` delimited by the
    close (`delimited_by_close`) is reset: the bytes its connection still held, then its end, would read as whole."""
    transport = request.transport  # taken first: `cut_short` closes it and leaves the request none
    cut_short(request)
    if transport is not None:
        if answer is not None and delimited_by_close(request, answer):
            reset_on_close(transport)
        transport.abort()


def broken_off(request: web.Request, answer: web.StreamResponse) -> None:
    """End `answer`, whose body has begun and cannot be completed (the origin's failed), so that its client sees it
    broken: its connection closed (`cut_short`) short of the body's length or last chunk. One delimited by the close
    would read as whole at that close: its connection is reset (RST) instead, which ends no body (`cut_off`)."""
    if delimited_by_close(request, answer):
        cut_off(request, answer)
    else:
        cut_short(request)


def delimited_by_close(request: web.Request, answer: web.StreamResponse) -> bool:
    """Whether a prepared answer's body ends with its connection's close: neither a Content-Length nor chunks (an
    HTTP/1.0 client's of no declared length, HTTP/1.0 having no chunks)."""
    return request.method != "HEAD" and "Content-Length" not in answer.headers and (
        "Transfer-Encoding" not in answer.headers)


def reset_on_close(transport: asyncio.BaseTransport) -> None:
    """Have the connection's close be a reset (SO_LINGER 0: a TCP RST), which no client takes for the end of a body.
    An HTTP/2 stream has no socket of its own: its abort resets it."""
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


def new_spool(declared: int | None) -> IO[bytes]:
    """Where a body being kept is held until it is stored: memory up to SPOOL_MEMORY, then a temporary file."""
    if declared is not None and declared <= SPOOL_MEMORY:
        return io.BytesIO()  # the origin's framing holds the body to its declared length
    return tempfile.SpooledTemporaryFile(max_size=SPOOL_MEMORY)


async def keep(node: EdgeNode, zone: PullZone, path: str, url_key: str, sent: Varied, response: OriginResponse,
               parsed: Directives, spool: IO[bytes] | None, send: Callable[[bytes], Awaitable[bool]] | None,
               kept: Kept | None, *, replacing: str | None = None, transport: Any = None,
               watch: Watch | None = None, growing: Growing | None = None) -> bool | None:
    """A fill's body, both fills' (this module's and pull_fill.py's): into `spool` (None: not kept), to the cache,
    then `kept` done, and to its client (`send`, as `relay_body` takes it). A body that is kept is read and stored
    at the origin's pace, whatever the client's: one read with its head is sent first when it fits the
    connection's buffer, else stored first; a larger one is sent by a task of its own from what the fill read
    (assetcdn/edge/states/feed.py), until it turns out longer than the object size limit (a body that declares
    more is not kept, `judge`, and the origin's framing holds a declared one to it; one of no declared length
    may): from then on it is not kept (`kept` done at once: the requests waiting for the URL ask for their own, and
    they and the worker's next fills take it for a body declared too large, `found_too_large`), and the client sets
    the fill's pace, as it does for one that is not kept from the start; the stored copy it answered a
    revalidation of (`replacing`, its key) goes then, as when a body declared too large answers it
    (`drop_if_superseded`): left, stale-if-error would answer with the body the origin replaced. `transport`: the
    client's, whose connection's places among the lagging its feed takes (`ClientFeed`), and `watch` its
    connection's, which tells a lagging feed that its client is gone. `growing`: told of the body as it is read
    (one not read with its head), for the requests waiting for the URL (assetcdn/edge/states/growing.py).
    Whether the client took the whole body; None when the origin's body failed, or the fill's temporary file did
    while the client lagged behind it (what it had still to be sent was there): the caller cuts the client's
    answer short, so that it does not look complete."""
    digest = hashlib.sha256() if spool is not None and named_by_body(response.headers) else None
    limit = node.origins.limits.max_object_bytes
    whole = response.whole()  # a small body read with its head: one piece, no waits
    feed = None
    rest: Rest | None = None
    try:
        if whole is not None:
            keeping, spool = spool is not None, whole_spool(whole, spool, limit, digest)
            if keeping and spool is None:  # over the limit
                no_longer_kept(node, kept, replacing, url_key, response, len(whole))
            sending = send is not None
            # One that fits the connection's buffer is sent first (never waited for); a larger one is stored
            # first, so that a client slow to take it holds no request waiting for the URL.
            if send is not None and whole and (spool is None or len(whole) <= SENT_BEFORE_STORED):
                sending, send = await send(whole), None
        else:
            if spool is not None and send is not None:
                feed = ClientFeed(send, transport, watch)
            if growing is not None and spool is not None:  # published, its spool may be a file of a known name
                spool = growing.begin(growing_head(zone, path, url_key, response, parsed, growing.declared),
                                      response.purge_mark, spool, keyed=not vary_fields(response.headers))
            try:
                spool, sending = await relay_body(response, limit, spool, digest, None if feed else send, feed,
                                                  partial(no_longer_kept, node, kept, replacing, url_key, response),
                                                  growing)
            except OriginError as exc:
                ORIGIN_FAILURES.log(logging.INFO, f"body {zone.name}", "pull zone %s: the origin's body for %s failed: %s",
                                    zone.name, path, exc)
                settle(kept, exc)  # the requests waiting for it take it as the origin's failure (`through_flight`)
                return None
            except OSError as exc:  # the spool's temporary file failed, holding what a lagging client is still to get
                STORE_FAILURES.log(logging.WARNING, "spool", "pull zone bodies over %d bytes cannot be held to be "
                                   "cached (%s); a client behind its fill is cut off", SPOOL_MEMORY, exc)
                response.release()  # the rest unread: the origin connection is closed
                no_longer_kept(node, kept, replacing)
                return None
            if feed is not None and feed.lagging and spool is not None:
                rest = rest_of(spool, feed.offered, SPOOL_MEMORY)  # before `store` takes the spool
            if growing is not None:  # its readers have every byte now, before it is stored
                growing.end(spool is not None)
        if spool is not None:
            settle(kept, await store(node, zone, path, url_key, sent, response, stored_headers(response.headers, parsed),
                                     spool, digest.hexdigest() if digest is not None else None) is not None)
        settle(kept)
        if whole is not None:
            if send is not None and whole and not await send(whole):
                sending = False
        elif feed is not None:
            rest, held = None, rest
            try:
                sending = await feed.finish(held)
            except OSError as exc:  # the rest could not be read back from the spool's file: cut, as when it failed
                STORE_FAILURES.log(logging.WARNING, "rest", "pull zone bodies over %d bytes cannot be read back "
                                   "from their temporary file (%s); a client behind its fill is cut off",
                                   SPOOL_MEMORY, exc)
                return None
    finally:
        if growing is not None:  # ended short, unless it ended above
            growing.end(False)
        if rest is not None:
            rest.close()
        if feed is not None:
            feed.cancel()  # done already, unless the fill failed or was cancelled
    if not sending:
        response.release()
    return sending


def no_longer_kept(node: EdgeNode, kept: Kept | None, replacing: str | None, url_key: str | None = None,
                   response: OriginResponse | None = None, size: int | None = None) -> None:
    """A body being kept is kept no longer (`keep`, `relay_body`): it turned out longer than the object size limit
    (at `size` bytes), or its temporary file could not hold it (`size` None). One too large is remembered for its
    URL (`url_key`, the origin's `response` its answer: `remember_too_large`) before the requests waiting for it
    learn that it is not kept, so that they too take it for a body declared too large. The stored copy it replaces
    (`replacing`, its key) is dropped in the background: the origin's full answer says that copy is not its
    current response (RFC 9111 4.3.3), as `drop_if_superseded` drops it for a body declared too large."""
    if size is not None and url_key is not None and response is not None:
        remember_too_large(node, url_key, response, size)
    settle(kept)
    if replacing is not None:
        task = asyncio.get_running_loop().create_task(drop_copy(node, replacing))
        node.background.add(task)
        task.add_done_callback(node.background.discard)


def whole_spool(whole: bytes, spool: IO[bytes] | None, limit: int, digest: Any) -> IO[bytes] | None:
    """The spool of a body read whole (`relay_body`'s for a chunk): None when it is not kept (`spool` None, or the
    body over `limit`)."""
    if spool is None:
        return None
    spool.close()
    if len(whole) > limit:
        return None
    # A spool over the body's own bytes, at its end as if written: `store` reads them back without a copy (two
    # copies of a fresh buffer cost more than the rest of a 100 KB fill's storing).
    spool = io.BytesIO(whole)
    spool.seek(0, io.SEEK_END)
    if digest is not None:
        digest.update(whole)
    return spool


async def send_and_keep(request: web.Request, node: EdgeNode, zone: PullZone, path: str, url_key: str,
                        fields: Headers, response: OriginResponse, fwd: str, why: NotStored | None,
                        declared: int | None, parsed: Directives, kept: Kept | None,
                        replacing: str | None = None, growing: Growing | None = None) -> web.StreamResponse:
    """The body to this client as it arrives, kept too when `why` is None (`kept` done once it is; `replacing`: as
    `stream_and_store` takes it)."""
    # This client gets the whole answer; what a qualified no-cache or private names is left out of what is kept.
    client = web.StreamResponse(status=response.status, headers=client_headers(
        response.headers, CacheResult.MISS if why is None else CacheResult.PASS, fill_cache_status(fwd, why), age=None,
        shared_host=request.get(SHARED_HOST, True), cookie_host=request.get(COOKIE_HOST, ""),
        ranges=why is None and response.status == 200, to_edge=from_edge(request)))
    if declared is not None:
        client.content_length = declared
    # A client gone before the head (an HTTP/2 stream reset, a closed connection) is sent nothing, but a kept answer
    # is still read into the cache for the requests waiting for it, as when its client goes mid-body.
    try:
        await client.prepare(request)
    except ConnectionError:
        with_body = False
    else:
        with_body = request.method != "HEAD"
    timeout_s = send_timeout_s(node.settings)
    gone = partial(cut_off, request, client)

    async def send(chunk: bytes) -> bool:
        return await sent_in_time(client.write(chunk), timeout_s, gone)

    sending = await keep(node, zone, path, url_key, varied(request, zone, fields), response, parsed,
                         new_spool(declared) if why is None else None, send if with_body else None, kept,
                         replacing=replacing, transport=request.transport, watch=partial(watch_lost, request),
                         growing=growing)
    if sending is None:
        broken_off(request, client)
    elif sending:
        await client.write_eof()
    return client


def growing_for(kept: Kept | None, declared: int | None) -> Growing | None:
    """What a fill tells the requests waiting for its URL of its body as it reads it (`Landing.growing`): one that
    is kept, of a declared length over SPOOL_MEMORY. A smaller one is waited for whole, as it is soon read: so a
    body the origin fails is the waiters' stale copy or one more origin request answered whole (`through_flight`),
    never an answer cut short, which a request answered as the body is read gets (assetcdn/edge/states/growing.py)."""
    if kept is None or declared is None or declared <= SPOOL_MEMORY:
        return None
    return Growing(declared, SPOOL_MEMORY)


def settle(kept: Kept | None, stored: bool | OriginError | None = None) -> None:
    """The requests waiting for a fill to be kept (`kept`) learn that it is over: `stored` (True), given up (False:
    purged meanwhile, the cache failing), failed by the origin (its OriginError), or not kept after all (None); they
    look again, and ask for their own when it is not there, or take the origin's failure (`through_flight`). Once;
    later calls do nothing."""
    if kept is not None and not kept.done():
        kept.set_result(stored)


async def relay_body(response: OriginResponse, limit: int, spool: IO[bytes] | None, digest: Any,
                     send: Callable[[bytes], Awaitable[bool]] | None,
                     feed: ClientFeed | None = None,
                     dropped: Callable[[int | None], None] | None = None,
                     growing: Growing | None = None) -> tuple[IO[bytes] | None, bool]:
    """Read the origin's body (not read whole with its head: `keep`): each chunk offered to `feed` (the client's,
    for a body being kept) or to `send` (None: nothing is sent; it answers False once the client is gone), and
    into `spool` (and `digest`) while the body stays within `limit`, past which it is still sent but no longer
    kept (`dropped` is told the length it was found at, or None when the spool's file failed instead; a lagging
    feed is first given what it had still to be sent of the spool, and sets the fill's pace from then on).
    `growing` is told of each chunk once it is in the spool, and of a spool given up (ended short). Stops
    early when nothing is sent or kept any more. Returns the spool (None: not kept) and whether the client took the
    whole body (with a feed: whether the client is still there);
    OriginError when the origin's body fails (the spool closed, as on any other error)."""
    size = 0
    try:
        async for chunk in response.chunks(capped=False):
            size += len(chunk)
            if spool is not None:
                if size > limit:  # past the object size limit: still sent, no longer kept
                    if feed is not None:
                        feed.keep_pace(rest_of(spool, feed.offered, SPOOL_MEMORY) if feed.lagging else None)
                    spool.close()
                    spool = None
                    if growing is not None:
                        growing.end(False)
                    if dropped is not None:
                        dropped(size)
                else:
                    try:
                        await spool_write(spool, chunk, size, flush=growing is not None)
                    except OSError as exc:
                        if feed is not None and feed.lagging:  # what the client is still to be sent is in the spool
                            raise
                        # Its temporary file's disk full or failing: the body is still sent, but no longer kept.
                        STORE_FAILURES.log(logging.WARNING, "spool", "pull zone bodies over %d bytes cannot be held "
                                           "to be cached (%s); they are sent, not cached", SPOOL_MEMORY, exc)
                        if feed is not None:
                            feed.keep_pace(None)
                        spool.close()
                        spool = None
                        if growing is not None:
                            growing.end(False)
                        if dropped is not None:
                            dropped(None)
                    else:
                        if digest is not None:
                            digest.update(chunk)
                        if growing is not None:
                            growing.add(chunk, spool)
            if feed is not None:
                feed.offer(chunk)
                if feed.behind:  # as many clients lag as may: this one sets the fill's pace
                    await feed.room()
            elif send is not None and not await send(chunk):
                send = None
            if spool is None and send is None and (feed is None or feed.stopped):
                break
    except BaseException:  # the origin's body failed (OriginError), or the fill did (a rest not taken, cancelled)
        if spool is not None:
            spool.close()
        raise
    return spool, (send is not None) if feed is None else not feed.gone


def fill_cache_status(fwd: str, why: NotStored | None) -> str:
    """The Cache-Status of an answer from the origin (`fwd`: why it was asked), stored or not (`why`)."""
    return f"{CACHE_STATUS}; fwd={fwd}; " + ("stored" if why is None else f"detail={why.value}")


async def spool_write(spool: IO[bytes], chunk: bytes, size: int, *, flush: bool = False) -> None:
    """Add a chunk to a body being kept (`size`: the body's length with it): in memory up to SPOOL_MEMORY, then
    in a temporary file, written from a thread so that a slow disk holds no other request of the worker; with
    `flush`, out of the file object's buffer into the file, where the requests reading it as it grows find it
    (assetcdn/edge/states/growing.py). A fill published to the edge's other workers spools to a file from its
    first byte (`Growing.begin`): written from a thread from the first byte too."""
    if size <= SPOOL_MEMORY and isinstance(spool, (io.BytesIO, tempfile.SpooledTemporaryFile)):
        spool.write(chunk)
        if flush:
            spool.flush()
    else:
        loop = asyncio.get_running_loop()
        if flush:
            await loop.run_in_executor(None, written_flushed, spool, chunk)
        else:
            await loop.run_in_executor(None, spool.write, chunk)


def written_flushed(spool: IO[bytes], chunk: bytes) -> None:
    spool.write(chunk)
    spool.flush()


def published_head(head: dict[str, Any]) -> StoredResponse | None:
    """The response another worker's published fill describes (assetcdn/edge/states/growing.py `Growing.share`),
    with the tags it is stored with."""
    obj = CachedObject(head["url_key"], head["content_type"], head["etag"],
                       tuple(str(tag) for tag in head.get("tags", ())), int(head["declared"]), float(head["stored_at"]),
                       headers=[(str(name), str(value)) for name, value in head["headers"]])
    return StoredResponse.of(obj)


def growing_head(zone: PullZone, path: str, url_key: str, response: OriginResponse, parsed: Directives,
                 declared: int) -> StoredResponse | None:
    """The response a fill keeps, as its stored entry will read (`store`), for the requests answered from its body
    as it is read (assetcdn/edge/states/growing.py): its head only, of the declared length, with the tags it is
    stored with (the purges that name it are those that keep it out of the cache)."""
    head = stored_headers(response.headers, parsed)
    tags = (*origin_tags(response.headers), *own_tags(zone, path))
    obj = CachedObject(url_key, first_value(head, "content-type") or "", first_value(head, "etag") or "", tags,
                       declared, time.time(), headers=stored_meta(head, response.status, response, None))
    return StoredResponse.of(obj)


def stored_meta(head: Sequence[tuple[str, str]], status: int, timed: OriginResponse,
                digest: str | None) -> tuple[tuple[str, str], ...]:
    """What an entry keeps of a response: its head (dated when it came without a Date, `freshness.dated`), then its
    status, the exchange's times (`timed`'s) and its body's SHA-256 when known, as ``StoredResponse.of`` reads them
    back. A shield's answer from its own stale copy (`timed.stale`: a 200, or a 304 confirming the copy here) is
    kept stale from its arrival, as a soft purge marks a copy: the shield's copy may be stale for a soft purge, which
    no field of its answer shows (its Age is the copy's own), and kept fresh here it would be served as the
    origin's current response for its whole lifetime, never asking again."""
    return (*dated(head, timed.response_time), (STATUS, str(status)), (REQUEST_TIME, repr(timed.request_time)),
            (RESPONSE_TIME, repr(timed.response_time)), *(((DIGEST, digest),) if digest is not None else ()),
            *(((SOFT_PURGED, repr(timed.response_time)),) if timed.stale else ()))


def read_not_kept(url_key: str, response: OriginResponse, head: Sequence[tuple[str, str]], body: bytes,
                  digest: str | None) -> StoredResponse:
    """A response read whole but not stored (a purge named it meanwhile), as the stored one would read."""
    obj = CachedObject(url_key, first_value(head, "content-type") or "", first_value(head, "etag") or "", (),
                       len(body), time.time(), body=body, headers=stored_meta(head, response.status, response, digest))
    read = StoredResponse.of(obj)
    assert read is not None  # stored_meta wrote every field `of` reads
    return read


async def store(node: EdgeNode, zone: PullZone, path: str, url_key: str, sent: Varied, response: OriginResponse,
                head: Sequence[tuple[str, str]], spool: IO[bytes], digest: str | None = None) -> CachedObject | None:
    """Keep a complete origin response under its key (and its Vary variant's), tagged for purges, with its
    body's SHA-256 when given (`named_by_body`). A body the memory tier takes is there at once and reaches the
    disk tier in the writer's next batch (assetcdn/edge/cache/write_behind.py); a larger one is written to disk
    first. None when it is not kept: it could not be, or a purge made since it was asked for names it (`ask`:
    the response predates what the purge was made for)."""
    try:
        return await store_unless_purged(node, zone, path, url_key, sent, response, head, spool, digest)
    except PurgedMeanwhile:
        log.debug("pull zone %s: %s not cached: purged while it was fetched", zone.name, path)
        return None


async def store_unless_purged(node: EdgeNode, zone: PullZone, path: str, url_key: str, sent: Varied,
                              response: OriginResponse, head: Sequence[tuple[str, str]], spool: IO[bytes],
                              digest: str | None = None) -> CachedObject | None:
    """`store`, telling its two refusals apart: PurgedMeanwhile when a purge made since the response was asked
    for names it (a caller may still use the body it read, not keep it), None when it could not be kept. A Vary'd
    URL's own entry (the request fields that select its variant) is no copy of a response: it carries the zone's
    tag only, so a purge by tag leaves the variants it does not name reachable, and a purge by URL or prefix
    removes and counts the copies it names (`entriesRemoved`), not the entry that leads to them. Left alone, it
    leads to no variant until the next fill, which writes it again."""
    if replaced(node, zone):  # asked of an origin the zone no longer has: as if purged meanwhile
        spool.close()
        raise PurgedMeanwhile(url_key)
    vary = vary_fields(response.headers) or ()
    meta = stored_meta(head, response.status, response, digest)
    marker_tags = (zone_tag(zone.name),)
    tags = [*origin_tags(response.headers), *own_tags(zone, path)]
    key = url_key
    marker: tuple[tuple[str, str], ...] = ()
    if vary:
        joined = ",".join(vary)
        generation = vary_generation(node, url_key, joined)
        marker = ((VARY, joined),) if generation is None else ((VARY, joined), (VARY_GENERATION, generation))
        key = pull_variant_key(url_key, vary_selector(generation, secondary_key(vary, sent.fields())))
    content_type = first_value(head, "content-type") or ""
    etag = first_value(head, "etag") or ""
    cache = node.cache
    since = response.purge_mark
    # A body still in memory is stored as bytes: a small one then lives in the disk tier's SQLite row (no file
    # to create, nothing read back), and the memory tier takes the same bytes.
    body: bytes | BinaryIO = cast(BinaryIO, spool)
    if spool.tell() <= SPOOL_MEMORY:
        spool.seek(0)
        body = spool.read()
        spool.close()
        if cache.memory.accepts(len(body)):
            pending = []
            if vary and (url_entry := cache.put_behind(url_key, b"", "", "", marker_tags, marker,
                                                       writer=node.stores, since=since)) is not None:
                pending.append(url_entry[1])
            kept = cache.put_behind(key, body, content_type, etag, tags, meta, writer=node.stores, since=since)
            if kept is not None:
                for written in (*pending, kept[1]):
                    if written is not None:
                        await written
                return kept[0]
    else:
        spool.seek(0)

    def put() -> CachedObject:
        try:
            if vary:
                cache.put(url_key, b"", "", "", marker_tags, headers=marker, since=since)
            return cache.put(key, body, content_type, etag, tags, headers=meta, since=since)
        finally:
            spool.close()

    try:
        return await asyncio.get_running_loop().run_in_executor(node.stores, put)
    except (OSError, ValueError, sqlite3.Error) as exc:  # the cache's disk or database failing: served, not kept
        STORE_FAILURES.log(logging.WARNING, zone.name, "pull zone %s: a response could not be cached: %s", zone.name,
                           exc)
        return None


async def refresh(node: EdgeNode, zone: PullZone, path: str, stored: StoredResponse,
                  not_modified: OriginResponse, fields: Headers = ()) -> StoredResponse:
    """A stored response confirmed by a 304: its head updated (RFC 9111 3.2, 4.3.4), its body kept. A 304 that
    makes it a response this cache may not keep (a Set-Cookie, `private`, `no-store`, more tags than MAX_TAG_BYTES
    in fields its head does not keep) updates this request's
    answer only: the stored one stays as it was, stale, so the next request asks the origin again. So does a 304
    to a request (`fields`, the client's) with Authorization that does not allow a shared cache to keep it (RFC
    9111 3.5: its fields and freshness would be every client's), or with a `no-store` of its own. So does one
    whose Vary names other request fields than the stored response's, and the stored one is dropped: kept where
    it is with the new Vary (a response stored for any request, or the variant of other fields' values), it would
    answer requests it does not match, the 304 confirming it for this request only (RFC 9111 4.1); the next
    request is asked for whole, and its answer kept under the new Vary."""
    head = updated_headers(stored.headers, not_modified.headers, not_modified.response_time)
    obj = stored.obj
    varies_otherwise = vary_fields(head) != vary_fields(stored.headers)
    if varies_otherwise or not_storable("GET", stored.status, fields, head, store_set_cookie=zone.store_set_cookie
                                        ) is not None or tag_field_bytes(not_modified.headers) > MAX_TAG_BYTES:
        if varies_otherwise:
            await drop_copy(node, obj.key)
        return StoredResponse(obj, stored.status, head, freshness(
            stored.status, head, not_modified.request_time, not_modified.response_time), stored.digest)
    meta = stored_meta(head, stored.status, not_modified, stored.digest)
    tags = list(dict.fromkeys([*confirmed_origin_tags(stored, head, not_modified.headers), *own_tags(zone, path)]))
    # The purges since the copy was looked up (a purge that removed it before the 304 was asked for, too: the body
    # stored again would be the copy that purge removed), else since the 304 was asked for.
    since = not_modified.purge_mark
    if stored.mark is not None:
        since = stored.mark if since is None else min(stored.mark, since)

    # Stored as of when the 304 was asked for, not when it landed: a newer response another worker of the edge
    # fetched meanwhile (its fill waiting for its disk batch) is stored after it, and is the one the workers keep.
    # (Never at or before the copy's own time: the other workers drop their copies older than it.)
    asked_at = not_modified.request_time if not_modified.request_time > obj.stored_at else None

    def put() -> CachedObject | None:
        if obj.body is not None:
            return node.cache.put(obj.key, obj.body, obj.content_type, obj.etag, tags, headers=meta, since=since,
                                  replaced_tags=obj.tags, replacing=obj.stored_at, stored_at=asked_at)
        return node.cache.set_head(obj, obj.content_type, obj.etag, tags, meta,  # a file's body is not rewritten
                                   since=since, stored_at=asked_at)

    try:
        if replaced(node, zone):  # confirmed by an origin the zone no longer has
            raise PurgedMeanwhile(obj.key)
        kept = await asyncio.get_running_loop().run_in_executor(node.stores, put)  # the one writer thread
        updated = StoredResponse.of(kept) if kept is not None else None
    except PurgedMeanwhile:  # the confirmation may predate what the purge was made for
        updated = None
    except (OSError, ValueError, sqlite3.Error) as exc:
        log.info("a revalidated pull zone response could not be updated: %s", exc)
        updated = None
    # Not updated (its body went meanwhile: purged, evicted): answered with what we have.
    return updated or StoredResponse(obj, stored.status, head, freshness(
        stored.status, head, not_modified.request_time, not_modified.response_time), stored.digest)


def replaced(node: EdgeNode, zone: PullZone) -> bool:
    """Whether the edge's config no longer has `zone` as a request found it (its origin changed or removed, the zone
    deleted): what that origin answered the request is not kept, however late it lands, since the purge that
    retires the old origin's responses may have run already. One kept before the config changed is that purge's
    (its purge mark predates it)."""
    current = node.config.pull_zones.get(zone.name)
    return current is not zone and current != zone


def background_revalidate(request: web.Request, node: EdgeNode, zone: PullZone, path: str, url_key: str,
                          stored: StoredResponse) -> None:
    """stale-while-revalidate: the stale copy answers now; one conditional request updates or replaces it."""
    land = request.app[FLIGHTS].lead(flight_key(url_key, zone), stored.freshness.response_time)
    if land is None:
        return  # already on its way
    fields = request_fields(request)
    sent = varied(request, zone, fields)  # taken now: the request is answered before its revalidation ends
    headers = forwarded_headers(request, zone, stored)
    if "only-if-cached" in request_directives(fields):
        without_only_if_cached(headers)

    async def revalidate() -> None:
        kept: Kept | None = None
        try:
            response = await ask(node, zone, path, request.rel_url.raw_query_string, headers,
                                 from_edge=from_edge(request))
            if response.status == 304 or (response.status == 412 and validators(stored.headers)):
                response.release()
                if not validators(stored.headers):
                    return  # it answers no condition: not this one's
                if response.status == 304 and validated_by(stored.headers, response.headers):
                    await refresh(node, zone, path, stored, response, fields)
                    return
                # A 304 about another response (`validated_by`, RFC 9111 4.3.4): the stored one is not the
                # origin's current one; or a 412 to its validators (`ask_origin`), which says nothing of it. Asked
                # for whole, as the foreground asks (`ask_origin`): left as it was,
                # every request until stale-while-revalidate ran out would be answered with it and ask again.
                for name, _value in validators(stored.headers):
                    headers.popall(name, None)
                response = await ask(node, zone, path, request.rel_url.raw_query_string, headers,
                                     from_edge=from_edge(request))
                if response.status == 304:  # to a request without conditions: no answer (`unasked_not_modified`)
                    response.release()
                    return
            if response.status >= 500:  # the origin failing: the stale copy stays (stale-if-error may use it)
                response.release()
                if response.status in ERROR_STATUSES:  # the requests waiting for it answer so too (`origin_failed`)
                    land(ErrorAnswered(response.status))
                return
            why, _, parsed = judge(zone, fields, response, node.origins.limits.max_object_bytes)
            if why is not None:
                response.release()
                # A full answer says the stored copy is not the origin's current response (RFC 9111 4.3.3). One
                # that may not be kept, whoever asks (not for this request's own `no-store` or Authorization), has
                # the copy go, so that the requests after it ask the origin: left, it answered each of them until
                # stale-while-revalidate ran out, each sending the origin another revalidation.
                # Not for an error about this request's own form (REQUEST_ERRORS), which says nothing of the URL.
                if why is NotStored.TOO_LARGE or (response.status not in REQUEST_ERRORS and not_storable(
                        "GET", response.status, (), response.headers, store_set_cookie=zone.store_set_cookie,
                        parsed=parsed) is not None):
                    await drop_copy(node, stored.obj.key)
                return
            kept = asyncio.get_running_loop().create_future()
            land(kept, selected_by(response.headers, sent))
            spool = tempfile.SpooledTemporaryFile(max_size=SPOOL_MEMORY)
            digest = hashlib.sha256() if named_by_body(response.headers) else None
            size = 0
            try:
                async for chunk in response.chunks():
                    size += len(chunk)
                    await spool_write(spool, chunk, size)
                    if digest is not None:
                        digest.update(chunk)
            except OriginError as exc:
                spool.close()
                if isinstance(exc, OriginTooLarge):  # a new body too large to keep (no declared length)
                    await drop_copy(node, stored.obj.key)
                raise
            except OSError as exc:
                # Its temporary file's disk full or failing: the new body is not kept, and the copy it replaces
                # goes, as for one too large (`relay_body`'s for a client's fill).
                spool.close()
                response.release()  # the rest unread: the origin connection is closed
                STORE_FAILURES.log(logging.WARNING, "spool", "pull zone bodies over %d bytes cannot be held to be "
                                   "cached (%s); a background revalidation's is not cached", SPOOL_MEMORY, exc)
                await drop_copy(node, stored.obj.key)
                return
            settle(kept, await store(node, zone, path, url_key, sent, response, stored_headers(response.headers),
                                     spool, digest.hexdigest() if digest is not None else None) is not None)
        except OriginError as exc:
            ORIGIN_FAILURES.log(logging.INFO, f"revalidation {zone.name}",
                                "pull zone %s: background revalidation of %s failed: %s", zone.name, path, exc)
            # No answer (none in time, a broken head), or a body that failed once its head landed the flight (`kept`):
            # the requests waiting for it answer with that failure, as for a revalidation in the foreground
            # (`ask_origin`, `keep`), not each asking the failing origin again. A body found too large is not kept
            # after all: each of them asks for its own, as of a client's fill (`no_longer_kept`).
            land(exc)
            settle(kept, None if isinstance(exc, OriginTooLarge) else exc)
        finally:
            land(None)
            settle(kept)

    task = asyncio.get_running_loop().create_task(revalidate())
    node.background.add(task)
    task.add_done_callback(node.background.discard)


def without_only_if_cached(headers: CIMultiDict[str]) -> None:
    """Take `only-if-cached` out of a background revalidation's Cache-Control: the client's word to this cache, which
    answered it from its stale copy, not to the shield or origin asked for the revalidation, this cache's own request.
    Sent on, a cache there without a copy answers 504 (a shield's own error: that shield passed over for every path,
    by any client that sends it; an origin behind a CDN of its own: a failed revalidation)."""
    kept = [member for member in split_list(headers.popall("Cache-Control", ()))
            if member.partition("=")[0].strip().lower() != "only-if-cached"]
    if kept:
        headers["Cache-Control"] = ", ".join(kept)


def own_tags(zone: PullZone, path: str) -> list[str]:
    """The tags the edge itself puts on a stored response: its URL's (purge by URL, unsafe methods) and its
    zone's (deleting the zone: a zone created again under the name must not be answered with them)."""
    return [pull_path_tag(zone.name, path), zone_tag(zone.name)]


def confirmed_origin_tags(stored: StoredResponse, head: Headers, not_modified: Headers) -> list[str]:
    """The origin's tags of a copy a 304 confirms (`head`: its head updated by the 304): those the 304 names, as its
    fields replace the stored ones of the same name (RFC 9111 3.2), with those of the head and those of a tag field
    the copy's head withheld that the 304 does not name; else the ones the copy was stored with (public: the edge's
    own hold a `:`, and are added again). Not read from the head alone: a field the response's qualified
    `no-cache="..."` or `private="..."` names is not kept in it (an origin's way of keeping its Cache-Tag from
    clients), and the copy would lose its tags with the first 304, their purge no longer reaching it."""
    named = {name for name, _ in not_modified if name in TAG_FIELDS}
    if not named:
        return public_tags(stored.obj.tags)
    tags = [*origin_tags(not_modified), *origin_tags(head)]
    withheld = qualified_fields(response_directives(stored.headers)[0]).intersection(TAG_FIELDS)
    if withheld - named:  # which field a withheld tag came from is not kept: all of them stay (a purge reaches more)
        tags += withheld_tags(stored)
    return tags


def withheld_tags(stored: StoredResponse) -> list[str]:
    """The origin's tags of a stored copy that its head does not show (its tag field named by a qualified
    `no-cache="..."` or `private="..."`, so not kept): what a shield adds for the edge that asks it, which would
    otherwise keep its copy without them, out of reach of their purge."""
    shown = set(origin_tags(stored.headers))
    for tag in stored.obj.tags:  # the copy's own path tag names its zone, whose tag the edge adds itself
        zone = path_tag_zone(tag)
        if zone is not None:
            shown.add(zone_tag(zone))
    return [tag for tag in public_tags(stored.obj.tags) if tag not in shown]


def origin_tags(headers: Headers) -> list[str]:
    """Purge tags an origin gave (Cache-Tag, Surrogate-Key: separated by commas, spaces or tabs). Neither field has
    quoted strings: a `"` is one of a tag's characters, never the start of a string whose commas would not split."""
    tags: list[str] = []
    for name, value in headers:
        if name in TAG_FIELDS:
            tags.extend(tag for tag in value.replace(",", " ").replace("\t", " ").split(" ") if tag and ":" not in tag)
    return tags


def client_headers(head: Sequence[tuple[str, str]], x_cache: str, cache_status: str, age: int | None, *,
                   shared_host: bool, cookie_host: CookieHost, ranges: bool = False,
                   to_edge: bool = False) -> CIMultiDict[str]:
    """A client's head from an origin's or stored one. On the default host (`shared_host`) an active type (HTML,
    SVG, script) gets the sandbox policy stored files get, beside any policy the origin sent: there the origin's
    page would otherwise run script as the origin every zone and the API share (read them, register a service
    worker over them). Nor does the origin's Strict-Transport-Security go out there: HSTS is the whole host's
    policy (RFC 6797 8.1), the edge's own (`[tls] hsts_max_age_s`), which one zone's origin would otherwise set
    for every zone (`includeSubDomains`: their tenant hosts too) or clear; nor do the other policies of the whole
    host (HOST_POLICIES: a reporting endpoint that browsers would send every later URL of the host to, other
    zones' and the API's). On the zone's own host the origin's policies are its own choice. On any host, a Set-Cookie naming one of this CDN's own cookies (CDN_COOKIES) is
    left out: cookies ignore ports (and a zone's host is below the default one), so it would sign the dashboard's
    user out or in as someone else. So is one whose Domain `cookie_host` does not allow (`EdgeConfig.cookie_host`,
    `cdn_cookies.may_set`): another host than the request's on the CDN's own hosts, the base domain or one above it
    on a zone's custom domain. `Domain=<base domain>` on a zone's tenant host, or `Domain=example.com` on a custom
    domain `shop.example.com` beside the base domain `cdn.example.com`, would set it for every zone's tenant host,
    whose origins browsers then send it to. One copy serves every host of its zone, so this is judged for each
    answer's host, never when it is stored. `ranges`: the head of a stored 200's fill (a MISS), which says
    `Accept-Ranges: bytes` in place of the origin's, as its hits do (NOT_DELIVERED_RANGED): one more field in the
    list the multidict is made of, no more work per answer. The fields the origin meant for the CDN alone
    (SURROGATE_FIELDS: Surrogate-Control, Cache-Tag, Surrogate-Key) are left out the same way, in the one pass that
    makes the list, so a prepared hit's head lacks them at no cost per hit; `to_edge`: the answer to another edge's
    shield request, which keeps them (that edge stores the answer as this one did, and leaves them out for its
    clients in turn)."""
    if to_edge:
        dropped = NOT_DELIVERED_RANGED if ranges else NOT_DELIVERED
    else:
        dropped = NOT_TO_CLIENTS_RANGED if ranges else NOT_TO_CLIENTS
    fields = [field for field in head if field[0] not in dropped and field[0][:1] != ":"]
    date = first_value(head, "date")
    if date is not None:
        fields.append(("Date", date))
    if ranges:
        fields.append(ACCEPT_RANGES)
    headers: CIMultiDict[str] = CIMultiDict(fields)  # one multidict made whole: cheaper than a field at a time
    if "set-cookie" in headers:
        cookies = headers.popall("set-cookie")
        for cookie in cookies:
            if not is_cdn_cookie(cookie) and may_set(cookie, cookie_host):
                headers.add("set-cookie", cookie)
    if shared_host:
        headers.popall(HSTS_HEADER, None)
        for name in HOST_POLICIES:
            headers.popall(name, None)
        keep_sandbox(headers)
    if age is not None:
        headers["Age"] = str(age)
    elif "age" in headers:  # the origin's, as the edge reads it: one that is no non-negative integer (`-5`, two
        # lines) counts as the oldest an age can be (freshness.age_value), never relayed as it came (`Age: -5`)
        headers["Age"] = str(age_value(head))
    headers["X-Cache"] = x_cache
    headers.add("Cache-Status", cache_status)
    return headers


async def deliver(request: web.Request, stored: StoredResponse, x_cache: str, cache_status: str) -> web.StreamResponse:
    """The stored response to this request: 304 for a matching condition, 206 for one byte range, else whole.
    FileNotFoundError, before anything is sent, when its body file went since the lookup (purged, evicted)."""
    head = answer_head(request, stored, x_cache, cache_status)
    if isinstance(head, web.Response):
        return head
    status, headers, start, end = head
    obj = stored.obj
    if obj.body is not None and request.method != "HEAD":
        return web.Response(status=status, headers=headers, body=obj.body[start:end])
    response = web.StreamResponse(status=status, headers=headers)
    response.content_length = end - start
    if request.method == "HEAD":
        await response.prepare(request)
        await response.write_eof()
        return response
    loop = asyncio.get_running_loop()
    # A client that takes none of it for the send timeout is cut off, as a fill's is (`sent_in_time`): waited for
    # without end, it held its connection and the file's descriptor. The node's settings, as a fill reads them: a
    # shield's cluster site (another edge's request) has no SETTINGS of its own.
    timeout_s = send_timeout_s(request.app[NODE].settings)
    # Opened before the head is sent: a body that went since the lookup is the caller's miss, not a broken answer
    # (an open descriptor reads the whole file even if it is removed meanwhile).
    try:
        opened = obj.open()
    except FileNotFoundError:
        raise
    except OSError as exc:  # the disk refusing it (EIO, the cache directory's permissions gone): the caller's miss too
        READ_FAILURES.log(logging.WARNING, "read", "edge cache: the body file %s cannot be opened (%s); asked of the "
                          "origin instead", obj.path, exc)
        raise FileNotFoundError(errno.ENOENT, f"cache file cannot be opened ({exc})", obj.path) from exc
    with opened as body:
        if obj.body is None and (found := os.fstat(body.fileno()).st_size) != obj.size:
            # Cut short on disk since it was stored (a damaged disk): sent, it would stop short of its Content-Length
            # on a connection kept open. The caller asks the origin, as for a body gone (`deliver_stored`).
            damaged_file(str(obj.path), obj.size, found)
            raise FileNotFoundError(errno.ENOENT, "cache file is not its entry's size", obj.path)
        await response.prepare(request)
        body.seek(start)
        remaining = end - start
        while remaining > 0:
            chunk = await loop.run_in_executor(None, body.read, min(256 * 1024, remaining))
            if not chunk:  # cut short while being sent: the connection is closed, never the answer ended short
                raise ConnectionResetError(f"cache file of {obj.key} is shorter than its entry")
            remaining -= len(chunk)
            if not await sent_in_time(response.write(chunk), timeout_s, partial(cut_off, request, response)):
                return response
    await response.write_eof()
    return response


async def deliver_growing(request: web.Request, growing: Growing | SiblingGrowing, x_cache: str,
                          cache_status: str, zone: str) -> web.StreamResponse:
    """`deliver` of the body a fill is reading (assetcdn/edge/states/growing.py; the caller has joined it): its
    bytes sent as the fill has them. An answer the fill ends short of is cut short (`broken_off`), logged once per
    `zone` (its name) and interval with the others (GROWING_CUTS)."""
    head = answer_head(request, growing.stored, x_cache, cache_status)
    if isinstance(head, web.Response):
        return head
    status, headers, start, end = head
    response = web.StreamResponse(status=status, headers=headers)
    response.content_length = end - start
    await response.prepare(request)
    if request.method != "HEAD":
        timeout_s = send_timeout_s(request.app[NODE].settings)
        try:
            async for piece in growing.pieces(start, end):
                if not await sent_in_time(response.write(piece), timeout_s, partial(cut_off, request, response)):
                    return response
        except (EndedShort, OSError) as exc:
            GROWING_CUTS.log(logging.INFO, zone, "pull zone %s: a request answered from a fill under way was cut "
                             "short: %s", zone, exc)
            broken_off(request, response)
            return response
    await response.write_eof()
    return response


def answer_head(request: web.Request, stored: StoredResponse, x_cache: str,
                cache_status: str) -> web.Response | tuple[int, CIMultiDict[str], int, int]:
    """What `deliver` answers with: the whole answer when it has no body from the cache (304, 416), else its status,
    head and the bytes of the stored body it sends (start, end)."""
    now = time.time()
    age = int(stored.freshness.age(now))
    # A stored 200's every answer (its 304, 206 and 416 too) says the Accept-Ranges its 200 says, not the origin's.
    edge = from_edge(request)
    headers = client_headers(stored.headers, x_cache, cache_status, age, shared_host=request.get(SHARED_HOST, True),
                             cookie_host=request.get(COOKIE_HOST, ""), ranges=stored.status == 200, to_edge=edge)
    obj = stored.obj
    if edge:
        withheld = withheld_tags(stored)
        if withheld:  # under the field the head withholds, so that the asking edge withholds it from its clients too
            named = qualified_fields(response_directives(stored.headers)[0])
            headers.add("Surrogate-Key" if "surrogate-key" in named and "cache-tag" not in named else "Cache-Tag",
                        " ".join(withheld))
    # The `_headers` rules the response hook gives this answer (assetcdn/edge/app.py; none to another edge's shield
    # request): a rule's ETag or Last-Modified is the one the client holds and sends back.
    changes = NO_HEADER_CHANGES if edge else request_header_changes(request)
    if not_modified(request, stored, changes):
        for name in ("Content-Type", "Content-Encoding", "Content-Range"):
            headers.popall(name, None)
        return web.Response(status=304, headers=headers)
    status, start, end = stored.status, 0, obj.size
    range_header = joined_field(request, "Range")  # two lines of it: no one range, ignored
    if range_header is not None and stored.status == 200 and if_range_holds(request, stored, changes):
        parsed = parse_range(range_header, obj.size)
        if parsed is False:  # no content of the representation: nothing its type or coding would describe
            # This request's Range, not the URL: the copy's freshness would let a cache after the edge answer every
            # later request with it (a stored file's 416 is no-store too, assetcdn/edge/states/deliver.py).
            for name in ("Content-Type", "Content-Encoding", "Expires", "CDN-Cache-Control", "Surrogate-Control"):
                headers.popall(name, None)
            headers["Cache-Control"] = "no-store"
            headers["Content-Range"] = f"bytes */{obj.size}"
            return web.Response(status=416, headers=headers)
        if parsed is not None:
            status, (start, end) = 206, parsed
            headers["Content-Range"] = f"bytes {start}-{end - 1}/{obj.size}"
    return status, headers, start, end


def answered_validator(headers: Headers, changes: HeaderChanges, name: str) -> str | None:
    """The validator field `name` (lower-case: etag, last-modified) of the answer made from stored head `headers`
    with the `_headers` rules' `changes` (`apply_rule_changes`: what they detach goes, what they set replaces it):
    the one its client holds and revalidates with, which the conditions are compared with, on both paths (the hit
    path's prepared heads, assetcdn/edge/fastpath/prepared.py `PulledHit`, too)."""
    if changes:
        for field_name, value in changes.set.items():
            if field_name.lower() == name:
                return value
        if name in changes.remove:
            return None
    return first_value(headers, name)


def not_modified(request: web.Request, stored: StoredResponse, changes: HeaderChanges = NO_HEADER_CHANGES) -> bool:
    """The request's own conditions hold against the stored response as answered with the `_headers` rules'
    `changes` (`answered_validator`: a rule's ETag, not the origin's, is the one its clients send back) (RFC 9110
    13.2.2: If-None-Match first).
    `If-None-Match: *` names any current representation, one without an ETag too (RFC 9110 13.1.2), as the hit
    path compares it (assetcdn/edge/fastpath/hit_server.py); several If-None-Match lines are one list (RFC 9110
    5.3: the hit path hands such a request over). An If-Modified-Since that is not one HTTP-date (a list of them,
    another form, trailing text) is ignored (13.1.3, `request_http_date`)."""
    if stored.status != 200:
        return False
    if_none_match = joined_field(request, "If-None-Match")
    if if_none_match is not None:
        etag = answered_validator(stored.headers, changes, "etag")
        return etag_matches(if_none_match, None if etag is None else etag.removeprefix("W/"))
    if_modified_since = joined_field(request, "If-Modified-Since")
    if if_modified_since is None:
        return False
    since = request_http_date(if_modified_since)
    last_modified = http_date(answered_validator(stored.headers, changes, "last-modified"))
    return since is not None and last_modified is not None and last_modified <= since


# RFC 9110 8.8.2.2: a cache takes a stored Last-Modified for a strong validator when it is this much before the
# stored Date (the origin's clock): the representation cannot have changed twice within its second unseen.
STRONG_LAST_MODIFIED_S = 60


def if_range_holds(request: web.Request, stored: StoredResponse, changes: HeaderChanges = NO_HEADER_CHANGES) -> bool:
    """The request's If-Range holds (RFC 9110 13.1.5): a strong ETag equal to the one answered (`answered_validator`
    with the `_headers` rules' `changes`), or the answered Last-Modified exactly when it is a strong validator
    (STRONG_LAST_MODIFIED_S); no If-Range holds too."""
    condition = joined_field(request, "If-Range")  # two lines of it: no one validator, and so never equal
    if condition is None:
        return True
    etag = answered_validator(stored.headers, changes, "etag")
    if condition.startswith(("\"", "W/")):
        return etag is not None and not etag.startswith("W/") and condition == etag
    last_modified = answered_validator(stored.headers, changes, "last-modified")
    if condition != last_modified:
        return False
    modified, date = http_date(last_modified), http_date(first_value(stored.headers, "date"))
    return modified is not None and date is not None and date - modified >= STRONG_LAST_MODIFIED_S


async def forward_unsafe(request: web.Request, node: EdgeNode, zone: PullZone, path: str,
                         prefix: str, fwd: str = "method") -> web.StreamResponse:
    """Any other method: to the origin as it is; a success invalidates what it names (RFC 9111 4.4). The body
    is received whole first, in the time the edge gives request bodies (a slow sender is answered 408); one
    that declares more than the edge takes is 413 before any of it is asked for (no 100 Continue). A GET or
    HEAD with If-Match or If-Unmodified-Since goes the same way (`fwd` "request", RFC 9211): those preconditions
    are the origin's to evaluate (RFC 9111 4.3.2), and answered from the stored copy they would be dropped (a
    client resuming a download of one version would get a range of another), so nothing is looked up or kept. An
    OPTIONS whose Max-Forwards is 0 is answered here, as its final recipient, a larger one counted down (RFC 9110
    7.6.2). The answer goes at its client's pace, within the send timeout a fill's client has (`sent_in_time`): a
    client that takes none of it for that long is cut off, and the origin connection closed, not held for it."""
    budget = node.origins.forward_bodies
    held = 0
    try:
        with body_deadline(request, request.app[SETTINGS]):
            body, held = await forwarded_body(request, budget)
        headers = origin_request_headers(list(request.headers.items()), zone.origin, client_ip=request.remote,
                                         scheme=request.scheme)
        hops = max_forwards(request) if request.method == "OPTIONS" else None
        if hops == 0:
            return web.Response(status=200, headers={"Allow": ALLOWED})
        if hops is not None:
            headers["Max-Forwards"] = str(hops - 1)
        target = zone.origin.target(path, request.rel_url.raw_query_string)
        try:
            response = await node.origins.request(zone.origin, request.method, target, headers, body=body or None)
        except OriginError as exc:
            if exc.timeout:
                raise ApiError(504, "OriginTimeout", f"The origin did not answer in time: {exc}") from None
            raise ApiError(502, "OriginUnreachable", f"The origin could not be reached: {exc}") from None
    finally:
        budget.give(held)  # sent (the origin's head is here) or refused: the body is not held any more
    del body
    if invalidates(request.method, response.status):
        await invalidate(node, zone, request, path, prefix, response.headers)
    count_lookup(request, CacheResult.PASS)
    answer = web.StreamResponse(status=response.status, headers=client_headers(
        response.headers, CacheResult.PASS, f"{CACHE_STATUS}; fwd={fwd}", age=None, shared_host=bool(prefix),
        cookie_host=request.get(COOKIE_HOST, ""), to_edge=from_edge(request)))
    length = first_value(response.headers, "content-length")
    if length is not None and length.isdigit():
        answer.content_length = int(length)
    await answer.prepare(request)
    timeout_s = send_timeout_s(node.settings)
    gone = partial(cut_off, request, answer)
    try:
        async for chunk in response.chunks(capped=False):
            if not await sent_in_time(answer.write(chunk), timeout_s, gone):
                response.release()  # the rest unread: the origin connection is closed
                return answer
    except OriginError:
        broken_off(request, answer)
        return answer
    await sent_in_time(answer.write_eof(), timeout_s, gone)
    return answer


async def forwarded_body(request: web.Request, budget: ByteBudget) -> tuple[bytes, int]:
    """`request`'s body, received whole, and the bytes of `budget` it holds (the caller gives them back), taken as
    they arrive, declared or chunked. Taking a declared length before its bytes came would let a few connections
    that declare large bodies and send nothing hold the whole budget, every other upload of the worker 503 until
    their body timeout; a declared length that does not fit beside what is held now is refused before any of it
    is read. Past the budget, 503 EdgeBusy with Retry-After (what was taken already is given back); a body larger
    than the whole budget (one set below the request limit) can never be taken: 413, as past the request limit."""
    limit = min(request.client_max_size, budget.limit)
    refused = declared_refusal(request, budget)
    if refused is not None:
        raise refused
    chunks: list[bytes] = []
    held = 0
    try:
        async for chunk in request.content.iter_any():
            if held + len(chunk) > limit:
                raise too_large(limit, held + len(chunk))
            if not budget.take(len(chunk)):
                raise edge_busy(budget)
            held += len(chunk)
            chunks.append(chunk)
    except BaseException:
        budget.give(held)
        raise
    return b"".join(chunks), held


def declared_refusal(request: web.Request, budget: ByteBudget) -> ApiError | None:
    """The answer to a body whose declared length the worker cannot take, before any of it is read (and so without
    a 100 Continue: assetcdn/edge/routes/delivery.py): 413 past the request limit or the whole budget, 503 EdgeBusy
    past what is left of the budget; None when it fits, or declares no length. A body under another transfer coding
    than chunked (`gzip, chunked`) is 501 (RFC 9112 6.1): the server takes its chunks and leaves the coding on the
    bytes, which would reach the origin as the content itself, without the field (hop-by-hop) that named it."""
    if (refused := unsupported_transfer_coding(request)) is not None:
        return refused
    declared = request.content_length
    if declared is None:
        return None
    limit = min(request.client_max_size, budget.limit)
    if declared > limit:
        return too_large(limit, declared)
    if budget.held + declared > budget.limit:
        return edge_busy(budget)
    return None


def edge_busy(budget: ByteBudget) -> ApiError:
    return ApiError(503, "EdgeBusy", f"This edge worker holds as many request bodies for origins as it may at once "
                    f"({budget.limit:,} bytes); retry shortly.", headers={"Retry-After": "1"})


def max_forwards(request: web.Request) -> int | None:
    """A request's Max-Forwards (RFC 9110 7.6.2: 1*DIGIT), at most MAX_FORWARDS; None when it has none or one
    that is not a number."""
    value = request.headers.get("Max-Forwards", "").strip()
    return bounded_decimal(value, MAX_FORWARDS) if value.isascii() and value.isdigit() else None


def origin_of(url: URL) -> tuple[str, str | None, int | None]:
    """A URL's origin as RFC 9110 4.2.3 compares it: scheme, host, and port with the scheme's default for none
    (`http://host:80` is `http://host`; yarl's `origin()` keeps the two spellings apart)."""
    return url.scheme, url.host, url.port


async def invalidate(node: EdgeNode, zone: PullZone, request: web.Request, path: str, prefix: str,
                     headers: Headers) -> None:
    """Drop what an unsafe request's success names: its URL, and the Location and Content-Location it
    answered with when they name paths of the same zone (RFC 9111 4.4). The origin writes them in its own
    URL space (its host, its path prefix) or, behind a Host header, in the zone's public one."""
    tags = [pull_path_tag(zone.name, path)]
    origin_url = zone.origin.target(path)
    origin_prefix = zone.origin.url.raw_path.rstrip("/")
    origins = {origin_of(origin_url)}  # where the edge connects, and the site its Host header names there
    if zone.origin.host_header:
        with contextlib.suppress(ValueError):
            origins.add(origin_of(URL.build(scheme=origin_url.scheme, authority=zone.origin.host_header)))
    for name in ("location", "content-location"):
        value = first_value(headers, name)
        if value is None:
            continue
        try:
            named = URL(value)
            as_origin, as_public = origin_url.join(named), request.url.join(named)
            public = origin_of(request.url)
        except ValueError:
            continue
        if origin_of(as_origin) in origins and as_origin.raw_path.startswith(origin_prefix + "/"):
            tags.append(pull_path_tag(zone.name, as_origin.raw_path[len(origin_prefix):]))
        if origin_of(as_public) == public and as_public.raw_path.startswith(prefix + "/"):
            tags.append(pull_path_tag(zone.name, as_public.raw_path[len(prefix):]))
    try:
        await asyncio.get_running_loop().run_in_executor(None, node.cache.purge_tags, tags)
    except (OSError, sqlite3.Error) as exc:  # the cache's disk failing: the origin's answer is still the client's
        node.cache.memory.purge_tags(tags)  # this worker's copies at least (the disk tier's could not be reached)
        STORE_FAILURES.log(logging.ERROR, f"invalidate {zone.name}", "pull zone %s: what a %s changed could not "
                           "be purged from the disk tier: %s", zone.name, request.method, exc)
    await node.shields.invalidated(tags)
