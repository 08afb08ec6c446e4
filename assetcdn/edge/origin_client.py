"""The one piece of the edge that talks to pull zones' origins (the HTTP servers users already run).

- **Where it may connect:** an origin's address is checked as webhook targets are
  (assetcdn/shared/address_guard.py): private, loopback, link-local and metadata addresses are refused
  unless ``[origin] allow_loopback`` lets loopback through (development, tests). A name is resolved by
  the guard for every new connection, so the connection goes to the address that was checked.
- **Connections:** one keep-alive pool, at most ``pool_per_origin`` connections to each origin host, over
  the HTTP/1.1 client in assetcdn/edge/origin_http.py.
- **Time:** ``connect_timeout_s`` to connect, ``first_byte_timeout_s`` from sending the request to the
  response head, ``idle_timeout_s`` between two reads of the body, and ``body_timeout_s`` in all spent waiting
  for the body (an origin trickling a byte now and then is cut off there; time its reader takes is not counted).
- **Size:** response heads are bounded (``max_header_kb`` a field line); a body longer than
  ``max_object_mb`` stops with ``OriginTooLarge`` where it crosses the limit.
- **Headers:** hop-by-hop fields are dropped both ways (those named in ``Connection`` too), and request
  fields that would make the origin answer for another host, scheme or URL than the cache key says
  (``UNKEYED_OVERRIDES``) are never forwarded, nor spelled with ``_`` for ``-``.

- **Shields:** ``peer_request`` asks another edge that shields a URL (assetcdn/edge/shield.py), through a pool
  of its own with the same limits and errors. Its addresses come from control's edge list or the edge's own
  settings, never from a request, so the address guard does not apply to them.

Bodies are streamed: ``OriginResponse.chunks`` yields them as they arrive.
"""

from __future__ import annotations

import contextlib
import logging
import time
from bisect import bisect_left
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field

from multidict import CIMultiDict
from yarl import URL

from assetcdn.edge.cdn_loop import FIELD as CDN_LOOP
from assetcdn.edge.origin_http import Connection, HttpError, Pool
from assetcdn.edge.states.freshness import SURROGATE_CAPABILITY
from assetcdn.shared.address_guard import (
    CachingResolver,
    HostResolver,
    RefusedTarget,
    SystemResolver,
    UnresolvedTarget,
    check_address,
    checked_addresses,
    literal_address,
)
from assetcdn.shared.cdn_cookies import is_cdn_cookie
from assetcdn.shared.config import Settings
from assetcdn.shared.metrics import LATENCY_BUCKETS, Metrics, add_observations
from assetcdn.shared.secrets import TOKEN_PREFIX

log = logging.getLogger(__name__)

# RFC 9110 7.6.1 and the fields that only ever mean this connection, or the next hop (RFC 9110 11.7: the Proxy-
# authentication fields; freshness.UNSTORED_FIELDS keeps none of them either).
HOP_BY_HOP = frozenset(("connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding",
                        "upgrade", "proxy-authenticate", "proxy-authentication-info", "proxy-authorization",
                        "http2-settings"))
# Request fields many origins (and their frameworks) read as the request's host, scheme, URL or method: a
# client could otherwise make the origin answer another URL than the cache key says, for everyone.
UNKEYED_OVERRIDES = frozenset((
    "host", "forwarded", "x-forwarded-host", "x-forwarded-server", "x-forwarded-proto", "x-forwarded-scheme",
    "x-forwarded-port", "x-forwarded-prefix", "x-forwarded-for", "x-real-ip", "x-host", "x-original-url",
    "x-rewrite-url", "x-original-host", "x-http-method-override", "x-http-method", "x-method-override",
    "x-forwarded-ssl", "front-end-https", "x-url-scheme", "via", "surrogate-capability"))
# What the edge answers itself: a client's `Expect: 100-continue` is met by the edge, which has the whole body
# before it asks the origin; another expectation sent on would have the origin (or a shield) refuse the request.
ANSWERED_HERE = frozenset(("expect",))
# This CDN's own keys (control's key fields), which a tool may send with every request, CDN paths too: never the
# origin's to read (whoever may set a zone's origin would collect them). A zone that needs such a field at its
# origin sends its own (`Origin.request_headers`). A Bearer token of this CDN's form is dropped too (`is_cdn_token`).
CDN_CREDENTIALS = frozenset(("accesskey", "accountkey"))
# Fields naming the client's address that some origins believe: the edge says what it saw in X-Forwarded-For.
CLAIMED_ADDRESSES = frozenset(("true-client-ip", "cf-connecting-ip", "fastly-client-ip", "x-client-ip",
                               "x-cluster-client-ip", "x-originating-ip", "x-remote-ip", "x-remote-addr"))
NOT_FORWARDED = HOP_BY_HOP | UNKEYED_OVERRIDES | ANSWERED_HERE | CDN_CREDENTIALS | CLAIMED_ADDRESSES
VIA = "1.1 assetcdn"
DEFAULT_PORTS = {"http": 80, "https": 443}
MAX_CHECKED_HOSTS = 1024  # origin hosts whose refusal (or none) is remembered; more start over


# How `assetcdn_edge_origin_requests_total` counts a request: its target, then its outcome (the answer's status class,
# or why there was none).
ORIGIN, SHIELD = "origin", "shield"
STATUS_CLASSES = ("", "1xx", "2xx", "3xx", "4xx", "5xx")
TIMED_OUT, REFUSED, FAILED = "timeout", "refused", "failed"


class OriginError(Exception):
    """The origin could not give an answer: refused or failed connection, bad response, timeout."""

    timeout = False


class OriginTimeout(OriginError):
    timeout = True


class OriginTooLarge(OriginError):
    """The body is longer than ``max_object_mb``."""


class OriginRefused(OriginError):
    """The origin's address is one the edge may not connect to."""


@dataclass(frozen=True, slots=True)
class Origin:
    """A pull zone's origin: where its paths are fetched from (``<url>/<path>``), the Host header to send
    (default: the URL's host) and fields added to every request (a shared secret the origin checks)."""

    url: URL
    host_header: str | None = None
    request_headers: tuple[tuple[str, str], ...] = ()
    # Appended to the client's CDN-Loop on every request (assetcdn/edge/cdn_loop.py); "" for none.
    loop_token: str = ""
    # The request fields' names lower-case, `_` read as `-` (`origin_request_headers`): made once per origin.
    own_field_names: frozenset[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "own_field_names",
                           frozenset(name.lower().replace("_", "-") for name, _ in self.request_headers))

    def target(self, path: str, query: str = "") -> URL:
        """The origin URL of `path` (percent-encoded, starting with ``/``) below the origin's path prefix, with the
        client's raw `query` passed on as it was sent (``%2F`` stays ``%2F``: never encoded a second time)."""
        base = self.url.with_path(self.url.raw_path.rstrip("/") + path, encoded=True)
        return URL(f"{base}?{query}", encoded=True) if query else base


@dataclass(frozen=True, slots=True)
class OriginLimits:
    connect_timeout_s: float = 5.0
    first_byte_timeout_s: float = 15.0
    idle_timeout_s: float = 15.0
    body_timeout_s: float = 300.0
    max_object_bytes: int = 1024 * 1024 * 1024
    max_field_bytes: int = 16 * 1024
    pool_per_origin: int = 32
    allow_loopback: bool = False
    dns_cache_s: float = 10.0
    forward_bodies_bytes: int = 64 * 1024 * 1024
    source_reads_bytes: int = 256 * 1024 * 1024

    @classmethod
    def from_settings(cls, settings: Settings) -> OriginLimits:
        section = settings.section("origin")
        return cls(connect_timeout_s=float(section["connect_timeout_s"]),
                   first_byte_timeout_s=float(section["first_byte_timeout_s"]),
                   idle_timeout_s=float(section["idle_timeout_s"]),
                   body_timeout_s=float(section["body_timeout_s"]),
                   max_object_bytes=int(float(section["max_object_mb"]) * 1024 * 1024),
                   max_field_bytes=int(float(section["max_header_kb"]) * 1024),
                   pool_per_origin=int(section["pool_per_origin"]),
                   allow_loopback=bool(section["allow_loopback"]),
                   dns_cache_s=float(section["dns_cache_s"]),
                   forward_bodies_bytes=int(float(section["forward_bodies_mb"]) * 1024 * 1024),
                   source_reads_bytes=int(float(section["source_reads_mb"]) * 1024 * 1024))


# Connection values that name no field beyond HOP_BY_HOP (`response_connection_fields`); "close" names no field
# a response holds but one called Close, which the general reading drops as it names it.
PLAIN_CONNECTION = frozenset(("keep-alive", "Keep-Alive"))


def connection_fields(headers: Sequence[tuple[str, str]]) -> frozenset[str]:
    """Hop-by-hop fields, with those a message's own Connection field names (`HOP_BY_HOP` itself when it
    names none other: most messages' `Connection: keep-alive` or `close`)."""
    named = {token.strip().lower() for name, value in headers if name.lower() == "connection"
             for token in value.split(",") if token.strip()}
    return HOP_BY_HOP if named <= HOP_BY_HOP else HOP_BY_HOP | named


def response_connection_fields(headers: Sequence[tuple[str, str]]) -> frozenset[str]:
    """`connection_fields` of a response head whose names are lower-case already (`origin_http.Connection`'s).
    Most name no field but `keep-alive` or `close` (or send no Connection at all): one pass, nothing made."""
    for name, value in headers:
        if name == "connection" and value not in PLAIN_CONNECTION:
            return connection_fields(headers)
    return HOP_BY_HOP


def request_connection_fields(headers: Sequence[tuple[str, str]]) -> frozenset[str]:
    """`connection_fields` of a request's fields as sent (names in any case): most name no Connection field."""
    if not any(len(name) == 10 and name.lower() == "connection" for name, _ in headers):
        return HOP_BY_HOP
    return connection_fields(headers)


def origin_request_headers(client: Sequence[tuple[str, str]], origin: Origin, *, client_ip: str | None,
                           scheme: str) -> CIMultiDict[str]:
    """What the origin is sent: the client's end-to-end fields less the overriding ones and the CDN's own cookies
    (`without_cdn_cookies`), then the origin's
    Host, the zone's own fields, Via and the client's address and scheme as this edge saw them. A name is
    compared with `_` read as `-`: servers that hand fields to applications as CGI variables read
    `X_Forwarded_Host` as `X-Forwarded-Host` (both HTTP_X_FORWARDED_HOST)."""
    fields = request_connection_fields(client)
    dropped = NOT_FORWARDED if fields is HOP_BY_HOP else (
        {name.replace("_", "-") for name in fields} | UNKEYED_OVERRIDES | ANSWERED_HERE | CDN_CREDENTIALS
        | CLAIMED_ADDRESSES)
    zone_fields = origin.request_headers
    if zone_fields:  # the zone's own fields replace the client's, whatever its spelling of their names
        dropped = dropped | origin.own_field_names
    headers: CIMultiDict[str] = CIMultiDict()
    for name, value in client:
        lowered = name.lower()
        if "_" in lowered:
            lowered = lowered.replace("_", "-")
        if lowered == "cookie" and "cdn_" in value:
            value = without_cdn_cookies(value)
            if not value:
                continue
        if lowered not in dropped and not (lowered == "authorization" and is_cdn_token(value)):
            headers.add(name, value)
    headers["Host"] = origin.host_header or origin.url.raw_authority
    for name, value in zone_fields:
        headers[name] = value
    headers["Via"] = VIA
    if origin.loop_token:  # after the client's own (RFC 8586): see assetcdn/edge/cdn_loop.py
        headers.add(CDN_LOOP, origin.loop_token)
    headers["Surrogate-Capability"] = SURROGATE_CAPABILITY  # Surrogate-Control may target this cache
    if client_ip:
        headers["X-Forwarded-For"] = client_ip
    headers["X-Forwarded-Proto"] = scheme
    return headers


def is_cdn_token(authorization: str) -> bool:
    """Whether an Authorization field's value is a Bearer token of this CDN's form (control's API tokens)."""
    scheme, _, credentials = authorization.partition(" ")
    return scheme.lower() == "bearer" and credentials.lstrip().startswith(TOKEN_PREFIX)


def without_cdn_cookies(value: str) -> str:
    """A Cookie field's value less the CDN's own cookies (CDN_COOKIES); empty when it held no other."""
    return "; ".join(pair for pair in (part.strip() for part in value.split(";"))
                     if pair and not is_cdn_cookie(pair))


@dataclass(eq=False)
class OriginResponse:
    status: int
    headers: list[tuple[str, str]]      # lower-case names, in order, hop-by-hop fields left out
    request_time: float                 # Unix time the request was sent
    response_time: float                # Unix time the head arrived
    _conn: Connection
    _pool: Pool
    _limits: OriginLimits
    received: int = field(default=0)
    _released: bool = field(default=False)
    # The edge cache's purge mark when a pull zone fill asked for it (assetcdn/edge/states/pull.py `ask`).
    purge_mark: int | None = field(default=None)
    # Told why, when the body fails (cut short or too slow): a shield's answer marks that shield down.
    body_failed: Callable[[str], None] | None = field(default=None)
    # A shield's answer from its own stale copy (assetcdn/edge/shield.py `stale_at_shield`): stale here too,
    # whatever its Age says (a soft purge's staleness is in no field), so kept stale (pull.py `stored_meta`).
    stale: bool = field(default=False)

    async def chunks(self, *, capped: bool = True) -> AsyncIterator[bytes]:
        """The body as it arrives; OriginTimeout when the origin goes quiet for ``idle_timeout_s`` or has made the
        edge wait ``body_timeout_s`` in all, OriginTooLarge past ``max_object_mb`` unless not `capped` (a body
        only passed on to its client)."""
        limits = self._limits
        limit = limits.max_object_bytes if capped else None
        conn = self._conn
        clock = self._pool.loop.time
        left = limits.body_timeout_s  # only the waits for the origin count, not the reader's own pace
        try:
            while True:
                started = clock()
                try:
                    chunk = await conn.chunk(min(limits.idle_timeout_s, left))
                except TimeoutError:
                    if left <= limits.idle_timeout_s:
                        raise self._failed(OriginTimeout(
                            f"the origin's body took more than {limits.body_timeout_s:g} s")) from None
                    raise self._failed(OriginTimeout(
                        f"the origin sent nothing for {limits.idle_timeout_s:g} s")) from None
                except HttpError as exc:
                    raise self._failed(OriginError(f"the origin's body was cut short ({exc})")) from None
                left -= clock() - started
                if not chunk:
                    return
                self.received += len(chunk)
                if limit is not None and self.received > limit:
                    raise OriginTooLarge(f"the origin's body is longer than {limit} bytes")
                yield chunk
        finally:
            self.release()

    def _failed(self, failure: OriginError) -> OriginError:
        if self.body_failed is not None:
            self.body_failed(str(failure))
        return failure

    async def read(self) -> bytes:
        return b"".join([chunk async for chunk in self.chunks()])

    def whole(self) -> bytes | None:
        """The whole body when the connection has read all of it already (a small body arrives with its head),
        taken at once and the connection given back; None otherwise (read it with `chunks`)."""
        conn = self._conn
        taken = conn.take_all()
        if taken is None:
            return None
        self.received += len(taken)
        self.release()
        return taken

    def release(self) -> None:
        """Give the connection back (or close it, when the body was not read to its end)."""
        if not self._released:
            self._released = True
            self._pool.release(self._conn)

    def __del__(self) -> None:  # a response dropped on an error path still gives its pool slot back
        if not self._released:
            self._released = True
            with contextlib.suppress(Exception):  # a finalizer: the loop may be gone already
                self._conn.close()
                self._pool.release(self._conn)


class ByteBudget:
    """Bytes a worker may hold at once for one purpose (the request bodies it forwards to origins, the image sources
    it reads whole): taken before they are held, given back once they are not. Its event loop's only: no lock."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0

    def take(self, size: int) -> bool:
        """Hold `size` more bytes, if that stays within the limit."""
        if self.held + size > self.limit:
            return False
        self.held += size
        return True

    def give(self, size: int) -> None:
        self.held -= size


class OriginClient:
    def __init__(self, limits: OriginLimits, resolver: HostResolver | None = None) -> None:
        self.limits = limits
        # One lookup per origin name under way, its answer kept `dns_cache_s`: an origin that closes every
        # connection does not cost a lookup per request (the addresses are still checked per connection).
        self._resolver = CachingResolver(resolver or SystemResolver(), ttl_s=limits.dns_cache_s)
        self.forward_bodies = ByteBudget(limits.forward_bodies_bytes)  # request bodies held for origins at once
        self.source_reads = ByteBudget(limits.source_reads_bytes)  # image sources being read whole at once
        self._checked: dict[tuple[str, str], str | None] = {}
        self._pool: Pool | None = None
        self._peer_pool: Pool | None = None
        # Counted since the last metrics flush (`report_to`): requests by (target, outcome), and per target the time
        # to each answer's head (a count per LATENCY_BUCKETS bucket, then +Inf, then the sum of seconds).
        self._counts: dict[tuple[str, str], int] = {}
        self._first_byte: dict[str, list[float]] = {}

    def report_to(self, metrics: Metrics) -> None:
        """Add the requests counted since the last flush to `metrics` on each of its flushes
        (``assetcdn_edge_origin_requests_total``, ``assetcdn_edge_origin_first_byte_seconds``)."""

        def collect() -> None:
            counts, self._counts = self._counts, {}
            for (target, outcome), count in counts.items():
                metrics.origin_requests.labels(metrics.kind, target, outcome).inc(count)
            first_byte, self._first_byte = self._first_byte, {}
            for target, observations in first_byte.items():
                add_observations(metrics.origin_first_byte_seconds.labels(metrics.kind, target), observations)

        for target in (ORIGIN, SHIELD):  # series from the start: an operator can alert before the first failure
            for outcome in ("5xx", TIMED_OUT, REFUSED, FAILED):
                metrics.origin_requests.labels(metrics.kind, target, outcome)
        metrics.add_source(collect)

    def _count(self, target: str, outcome: str) -> None:
        key = (target, outcome)
        self._counts[key] = self._counts.get(key, 0) + 1

    def pool(self) -> Pool:
        """Connections to origins: every new one to the addresses the guard resolved and checked."""
        if self._pool is None:
            self._pool = self._new_pool(self._guarded_addresses)
        return self._pool

    def peer_pool(self) -> Pool:
        """The pool for shield requests to other edges (assetcdn/edge/shield.py): their addresses come from
        control's edge list or the edge's own settings, never from a request, so the guard does not apply."""
        if self._peer_pool is None:
            self._peer_pool = self._new_pool(None)
        return self._peer_pool

    def _new_pool(self, connector: Callable[[str, int], Awaitable[list[str]]] | None) -> Pool:
        limits = self.limits
        return Pool(size=limits.pool_per_origin, keepalive_s=limits.idle_timeout_s,
                    connect_timeout_s=limits.connect_timeout_s, max_field=limits.max_field_bytes,
                    connector=connector)

    async def _guarded_addresses(self, host: str, port: int) -> list[str]:
        literal = literal_address(host)
        if literal is not None:  # checked by `refused` before the request
            return [literal]
        return await checked_addresses(self._resolver, host, allow_loopback=self.limits.allow_loopback)

    async def close(self) -> None:
        for pool in (self._pool, self._peer_pool):
            if pool is not None:
                await pool.close()
        self._pool = self._peer_pool = None

    def refused(self, url: URL) -> str | None:
        """Why the edge may not connect to `url` before any lookup (a name is checked as it resolves)."""
        host = (url.scheme, url.raw_host or "")
        if host in self._checked:
            return self._checked[host]
        if url.scheme not in ("http", "https"):
            refusal: str | None = f"the scheme {url.scheme!r} is not allowed for an origin"
        else:
            literal = literal_address(host[1])
            refusal = None if literal is None else check_address(literal, allow_loopback=self.limits.allow_loopback)
        if len(self._checked) >= MAX_CHECKED_HOSTS:
            self._checked.clear()
        self._checked[host] = refusal
        return refusal

    async def request(self, origin: Origin, method: str, target: URL, headers: Mapping[str, str] | CIMultiDict[str],
                      body: bytes | None = None, *, first_byte_timeout_s: float | None = None) -> OriginResponse:
        """Send one request; the answer's head once it arrived (its body is read with `chunks`), within
        `first_byte_timeout_s` (default: the limits')."""
        refused = self.refused(target)
        if refused:
            self._count(ORIGIN, REFUSED)
            raise OriginRefused(refused)
        return await self._send(self.pool(), method, target, headers, body, ORIGIN, first_byte_timeout_s)

    async def peer_request(self, target: URL, headers: Mapping[str, str] | CIMultiDict[str], method: str = "GET",
                           body: bytes | None = None) -> OriginResponse:
        """A request to another edge acting as a shield: the same timeouts, limits and errors as an origin's."""
        return await self._send(self.peer_pool(), method, target, headers, body, SHIELD)

    async def _send(self, pool: Pool, method: str, target: URL, headers: Mapping[str, str] | CIMultiDict[str],
                    body: bytes | None, counted: str, first_byte_timeout_s: float | None = None) -> OriginResponse:
        """The request on `pool`; counted under `counted` (ORIGIN or SHIELD) with its outcome; its head within
        `first_byte_timeout_s` (default: the limits')."""
        request_time = time.time()  # RFC 9111 4.2.3's request_time and response_time: Unix time
        scheme = target.scheme
        key = (scheme, target.raw_host or "", target.port or DEFAULT_PORTS.get(scheme, 80))
        fields = list(headers.items())
        if "host" not in (name.lower() for name, _ in fields):
            fields.append(("Host", target.raw_authority))
        timeout_s = self.limits.first_byte_timeout_s if first_byte_timeout_s is None else first_byte_timeout_s
        sent_at = pool.loop.time()  # the wait's start on the loop's monotonic clock, which no wall clock step moves
        deadline = sent_at + timeout_s
        try:
            conn = await pool.exchange(key, method, target.raw_path_qs, fields, body, deadline)
        except TimeoutError as exc:  # connecting (its own message), or the head within the first-byte time
            self._count(counted, TIMED_OUT)
            raise OriginTimeout(str(exc) or f"no answer from the origin within {timeout_s:g} s") from None
        except RefusedTarget as exc:  # an address the edge may not reach; a name of none is a failed connection
            self._count(counted, FAILED if isinstance(exc, UnresolvedTarget) else REFUSED)
            raise OriginRefused(exc.message) from None
        except OSError as exc:
            self._count(counted, FAILED)
            raise OriginError(f"could not connect to the origin ({exc.strerror or exc})") from None
        except HttpError as exc:
            self._count(counted, FAILED)
            raise OriginError(f"the origin's answer could not be read ({exc})") from None
        raw = conn.headers
        types = [value for name, value in raw if name == "content-type"]
        if len(types) > 1 and len(set(types)) > 1:
            # A singleton field sent twice (RFC 9110 8.3): the edge reads the first (the sandbox policy of an active
            # type on the default host, transforms), browsers the last (Fetch's "extract a MIME type"), so an
            # `image/png` then `text/html` would run as a page without the sandbox. Neither can be relayed as meant.
            conn.close()
            pool.release(conn)
            self._count(counted, FAILED)
            raise OriginError(f"the origin's answer has {len(types)} different Content-Type fields")
        dropped = response_connection_fields(raw)
        headers_out = [field for field in raw if field[0] not in dropped]
        response_time = time.time()
        status = conn.status
        self._count(counted, STATUS_CLASSES[status // 100] if 1 <= status // 100 <= 5 else FAILED)
        observations = self._first_byte.get(counted)
        if observations is None:
            observations = self._first_byte[counted] = [0] * (len(LATENCY_BUCKETS) + 2)
        waited = pool.loop.time() - sent_at
        observations[bisect_left(LATENCY_BUCKETS, waited)] += 1
        observations[-1] += waited
        return OriginResponse(status, headers_out, request_time, response_time, conn, pool, self.limits)
