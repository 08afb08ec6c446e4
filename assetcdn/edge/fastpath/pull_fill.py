"""A pull zone's plain miss filled on the hit path's own connection, without the aiohttp application.

The common cache fill (assetcdn/edge/states/pull.py): an HTTP/1.1 GET or HEAD of a pull zone's URL that no tier
holds, with no request directives, conditions or ranges, answered by a storable 200 of declared length. The
hit server (assetcdn/edge/fastpath/hit_server.py) claims it when the memory tier has no prepared hit for the
URL; this module then takes the application's steps with the serve sequence's own functions: the look-up in
both tiers (anything stored: the application decides), the flight (one already under way: the application
waits for it), the origin request (`pull.fill_headers`, the shields), whether the answer may be stored
(`freshness.not_storable`), the client's head (`pull.client_headers`, then the response hooks' stamp and
`_headers` rules, as `prepared._pulled_lines` does for a hit), the body streamed to the client while it is
kept, and `pull.store`. It counts what the application's middleware and hooks count: the request by route,
method, status and latency, a cache MISS, and the delivery, recorded once its bytes are out.

Anything else goes to the application as before. An origin answer this module does not write (another
status, no length, a failure) is handed to the application with the request, which answers with it in place
of a new origin request (`pull.handed_fill`).
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import logging
import tempfile
import time
from collections.abc import Coroutine
from functools import partial
from typing import IO, TYPE_CHECKING, Any

from assetcdn.edge.delivery_log import BodyCounter, Pending, body_sent, country_code
from assetcdn.edge.fastpath.prepared import PER_REQUEST_HEADERS, STATUS_200, header_lines
from assetcdn.edge.origin_client import OriginError, OriginResponse
from assetcdn.edge.site_config import PullZone, apply_rule_changes
from assetcdn.edge.states.deliver import header_changes
from assetcdn.edge.states.freshness import first_value, not_storable, stored_headers
from assetcdn.edge.states.keys import pull_key, pull_variant_key
from assetcdn.edge.states.pull import (
    FLIGHTS,
    SPOOL_MEMORY,
    client_headers,
    fill_cache_status,
    fill_headers,
    lookup,
    named_by_body,
    relay_body,
    store,
)
from assetcdn.edge.states.recv import PullPath, resolve
from assetcdn.shared.analytics_keys import zone_of
from assetcdn.shared.cache_results import CacheResult
from assetcdn.shared.edge_rules import HeaderChanges, Redirect
from assetcdn.shared.http_server import SERVER_NAME
from assetcdn.shared.middleware import stamp_headers
from assetcdn.shared.paths import InvalidPath

if TYPE_CHECKING:
    from assetcdn.edge.fastpath.hit_server import HitServer
    from assetcdn.edge.fastpath.prepared import HostView
    from assetcdn.edge.fastpath.protocol import HitProtocol

log = logging.getLogger(__name__)

CACHE_STATUS_STORED = fill_cache_status("uri-miss", None)
MISS = str(CacheResult.MISS)  # the answer's X-Cache, as the delivery log reads it off the application's head


class Fill:
    """One claimed miss: what was read of its request on the hit path before its head was parsed again."""

    __slots__ = ("view", "target", "named", "head_only", "request_id", "country", "keep_alive", "peer", "started")

    def __init__(self, view: HostView, target: str, named: PullPath | None, head_only: bool, request_id: bytes,
                 country: str, keep_alive: bool, peer: str | None) -> None:
        self.view = view
        self.target = target
        self.named = named  # what `recv.resolve` made of the path alone, when the hit server resolved it
        self.head_only = head_only
        self.request_id = request_id
        self.country = country
        self.keep_alive = keep_alive
        self.peer = peer
        self.started = time.perf_counter()


class PullFills:
    """The hit server's plain pull zone misses (see the module docstring)."""

    def __init__(self, server: HitServer) -> None:
        self.server = server
        self.flights = server.app[FLIGHTS]
        self.claimed: Fill | None = None  # set by `claim`, taken by `start` in the same pass of the connection
        self.started = 0  # fills begun here (each leads its URL's flight)
        self.filled = 0   # of them, answered here

    def claim(self, conn: HitProtocol, view: HostView, url: bytes, head_only: bool, named: PullPath | None) -> bool:
        """Whether the miss of request target ``url`` on ``conn`` (whose head the hit server parsed, without
        cache fields) may be filled here: plain HTTP/1.1 (TLS and HTTP/2 take the application's route), no
        If-None-Match or Range. The connection then calls `start` with the request's head. `named`: `resolve`
        of the path alone, when the hit server has it."""
        headers = conn.headers
        if not conn.zero_copy or conn.when_sent is not None or headers[1] is not None or headers[2] is not None:
            return False
        try:
            target = url.decode("ascii")
        except UnicodeDecodeError:
            return False
        country = headers[5]  # COUNTRY's slot
        server = self.server
        self.claimed = Fill(view, target, named, head_only, server.ids.of(headers[3]),
                            "XX" if country is None else country_code(country.decode("utf-8", "surrogateescape")),
                            conn.keep_alive, conn.peer)
        return True

    def start(self, conn: HitProtocol, head: bytes) -> None:
        """Fill the claimed miss whose request head is ``head``, or hand the request to the application."""
        fill, self.claimed = self.claimed, None
        started = None if fill is None else self._begin(conn, fill, head)
        if started is None:
            conn.hand_over(head)
            return
        self.started += 1
        conn.busy = True
        conn.deadline = float("inf")
        task = asyncio.get_running_loop().create_task(started)
        node = self.server.node
        node.background.add(task)
        task.add_done_callback(node.background.discard)

    def _begin(self, conn: HitProtocol, fill: Fill, head: bytes) -> Coroutine[Any, Any, None] | None:
        """The fill's coroutine once it leads the URL's flight; None when the application answers."""
        fields = request_fields(head)
        if fields is None:
            return None
        server = self.server
        view = fill.view
        path, _, query = fill.target.partition("?")
        named: PullPath | Redirect | str | None = fill.named if not query and "?" not in fill.target else None
        if named is None:
            try:  # what the delivery route does before the serve sequence (assetcdn/edge/routes/delivery.py)
                named = resolve(server.config, view.zone, path, fill.target)
            except InvalidPath:
                return None
        if not isinstance(named, PullPath):
            return None
        changes = header_changes(server.config, path, view.name)
        if changes.remove & PER_REQUEST_HEADERS or any(name.lower() in PER_REQUEST_HEADERS for name in changes.set):
            return None
        lowered = [(name.lower(), value) for name, value in fields]
        zone = named.zone
        url_key = pull_key(zone.name, named.path, query)
        if lookup(server.node, url_key, lowered) is not None:  # stored: fresh, stale or a Vary'd URL's
            return None
        flight_key = pull_variant_key(url_key, "flight")
        if self.flights.join(flight_key) is not None:  # one under way: the application waits for it
            return None
        return self._fill(conn, fill, head, fields, lowered, zone, named, query, url_key, flight_key, changes)

    async def _fill(self, conn: HitProtocol, fill: Fill, head: bytes, fields: list[tuple[str, str]],
                    lowered: list[tuple[str, str]], zone: PullZone, named: PullPath, query: str, url_key: str,
                    flight_key: str, changes: HeaderChanges) -> None:
        node = self.server.node
        fetched: OriginResponse | OriginError | None = None
        try:
            try:
                fetched = await node.shields.fill(zone, named.path, query, fill_headers(
                    fields, zone, fill.peer, "http", None), from_edge=False)
            except OriginError as exc:
                fetched = exc
            if isinstance(fetched, OriginResponse) and self._writes(zone, lowered, fetched):
                # The requests waiting for this URL wait for the answer to be stored, not for this client.
                kept = asyncio.get_running_loop().create_future()
                self.flights.land(flight_key, kept)
                try:
                    await self._answer(conn, fill, zone, named, url_key, lowered, fetched, changes, kept)
                finally:
                    if not kept.done():
                        kept.set_result(None)
                return
        except Exception:  # never a hung connection: what was fetched goes back, the connection is closed
            log.exception("filling a pull zone's miss on the hit path failed")
            if isinstance(fetched, OriginResponse):
                fetched.release()
            conn.cut = True
            if conn.transport is not None:
                conn.transport.abort()
            return
        finally:
            self.flights.land(flight_key)
        if conn.transport is None:
            if isinstance(fetched, OriginResponse):
                fetched.release()
            return
        conn.hand_over(head, fetched)  # the application answers with what the origin said

    def _writes(self, zone: PullZone, lowered: list[tuple[str, str]], response: OriginResponse) -> bool:
        """The origin's answer is one this module writes: a storable 200 of declared length within the object
        size limit, with a Content-Type (aiohttp's default for none depends on the method)."""
        headers = response.headers
        if response.status != 200 or first_value(headers, "content-type") is None:
            return False
        length = first_value(headers, "content-length")
        if length is None or not length.isdigit() or int(length) > self.server.node.origins.limits.max_object_bytes:
            return False
        return not_storable("GET", response.status, lowered, headers, store_set_cookie=zone.store_set_cookie) is None

    async def _answer(self, conn: HitProtocol, fill: Fill, zone: PullZone, named: PullPath, url_key: str,
                      lowered: list[tuple[str, str]], response: OriginResponse, changes: HeaderChanges,
                      kept: asyncio.Future[None]) -> None:
        """`pull.stream_and_store` of a storable answer, written to the connection (`kept` done once stored)."""
        server = self.server
        node = server.node
        node.metrics.cache_result(CacheResult.MISS).inc()
        declared = int(first_value(response.headers, "content-length") or 0)
        headers = client_headers(response.headers, CacheResult.MISS, CACHE_STATUS_STORED, age=None)
        dated = "Date" in headers
        # The response hooks (assetcdn/shared/middleware.py, assetcdn/edge/app.py), then aiohttp's own fields.
        stamp_headers(headers)
        apply_rule_changes(changes, headers)
        headers.setdefault("Server", SERVER_NAME)
        tail = server.extra_head if dated else server.date
        connection = b"" if fill.keep_alive else b"Connection: close\r\n"
        answer_head = (STATUS_200 + header_lines(headers) + b"Content-Length: %d\r\n" % declared + tail + connection
                       + b"X-Request-ID: " + fill.request_id + b"\r\n\r\n")
        cdn_path = f"{zone.name}{named.path}"
        pending: Pending = (time.time(), fill.view.name, "HEAD" if fill.head_only else "GET", cdn_path,
                            zone_of(cdn_path), 200, body_sent(fill.head_only, 200, declared), MISS,
                            fill.country, fill.request_id, fill.peer, time.perf_counter() - fill.started)
        if not fill.keep_alive:
            conn.closing = True
        transport = conn.transport
        counter = BodyCounter(transport)
        # The head goes out with the body's first piece (one system call), or alone when there is none to send.
        head = [answer_head]
        if fill.head_only:
            self._send_head(conn, head)
        limit = node.origins.limits.max_object_bytes
        spool: IO[bytes] | None = io.BytesIO() if declared <= SPOOL_MEMORY \
            else tempfile.SpooledTemporaryFile(max_size=SPOOL_MEMORY)
        digest = hashlib.sha256() if named_by_body(response.headers) else None
        try:
            spool, sending = await relay_body(response, limit, spool, digest,
                                              None if fill.head_only else partial(self._send, conn, counter, head))
        except OriginError as exc:
            log.info("pull zone %s: the origin's body for %s failed: %s", zone.name, named.path, exc)
            self._send_head(conn, head)
            conn.closing = True  # a body cut short must not look complete to the client
            self._done(conn, fill, pending, counter)
            return
        self._send_head(conn, head)  # an empty body
        if spool is not None:
            await store(node, zone, named.path, url_key, lowered, response, stored_headers(response.headers), spool,
                        digest.hexdigest() if digest is not None else None)
        kept.set_result(None)
        if not sending:
            response.release()
        self._done(conn, fill, pending, counter)

    @staticmethod
    def _send_head(conn: HitProtocol, head: list[bytes]) -> None:
        """Write the answer's head unless it went out already (`head` empty then)."""
        transport = conn.transport
        if head and transport is not None and not transport.is_closing():
            conn.queued += len(head[0])
            transport.write(head.pop())

    @staticmethod
    async def _send(conn: HitProtocol, counter: BodyCounter, head: list[bytes], chunk: bytes) -> bool:
        """Write a body chunk (after the head, when it is still to go), waiting while the client does not read;
        False once the client is gone."""
        transport = conn.transport
        if transport is None or transport.is_closing():
            return False
        conn.queued += len(chunk)
        if head:
            conn.queued += len(head[0])
            transport.writelines((head.pop(), chunk))
        else:
            transport.write(chunk)
        counter(len(chunk), 0)
        if conn.drain.paused:
            try:
                await conn.drain.waiter()
            except ConnectionError:
                return False
        return True

    def _done(self, conn: HitProtocol, fill: Fill, pending: Pending, counter: BodyCounter) -> None:
        """The answer is written: counted as the metrics middleware counts it, its delivery recorded once its
        bytes are out, and the connection's next request."""
        self.filled += 1
        self.server.metrics.count_request(self.server.route, pending[2], "200", time.perf_counter() - fill.started)
        conn.fill_done(pending, counter)


def request_fields(head: bytes) -> list[tuple[str, str]] | None:
    """A request head's header fields as aiohttp gives them (names as sent, values without surrounding
    whitespace); None for obsolete line folding, which the application's parser judges."""
    fields: list[tuple[str, str]] = []
    for line in head.split(b"\r\n")[1:]:
        if not line:
            continue
        if line[:1] in (b" ", b"\t"):
            return None
        name, _, value = line.partition(b":")
        fields.append((name.decode("utf-8", "surrogateescape"),
                       value.strip(b" \t").decode("utf-8", "surrogateescape")))
    return fields

