"""A pull zone's plain miss filled on the hit path's own connection, without the aiohttp application.

The common cache fill (assetcdn/edge/states/pull.py): a GET or HEAD of a pull zone's URL that no tier holds, with
no request directives, conditions or ranges, answered by a storable 200 of declared length; over plain HTTP/1.1,
TLS, or an HTTP/2 stream (whose HTTP/1.1 side, assetcdn/edge/tls/h2.py, turns the answer written here into its
frames and counts what it sent). The hit server (assetcdn/edge/fastpath/hit_server.py) claims it when the
memory tier has no prepared hit for the URL; this module then takes the application's steps with the serve
sequence's own functions: the look-up in
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

import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from functools import partial
from typing import TYPE_CHECKING, Any

from assetcdn.edge.cdn_loop import HEAD_MARK, looped
from assetcdn.edge.cdn_loop import NAME as CDN_LOOP
from assetcdn.edge.delivery_log import BodyCounter, Pending, body_sent, country_code
from assetcdn.edge.fastpath.prepared import (
    ID_FIELD,
    PER_REQUEST_HEADERS,
    STATUS_200,
    header_lines,
    rules_touch,
)
from assetcdn.edge.fastpath.sendfile import TLS_PIECE
from assetcdn.edge.origin_client import OriginError, OriginResponse
from assetcdn.edge.site_config import PullZone, apply_rule_changes
from assetcdn.edge.states.deliver import header_changes
from assetcdn.edge.states.freshness import Directives, first_value
from assetcdn.edge.states.growing import Growing
from assetcdn.edge.states.keys import pull_key
from assetcdn.edge.states.pull import (
    FLIGHTS,
    Kept,
    Land,
    Varied,
    ask,
    client_headers,
    fill_cache_status,
    fill_headers,
    flight_key,
    found_too_large,
    growing_for,
    judge,
    keep,
    lookup,
    new_spool,
    selected_by,
    send_timeout_s,
    sent_in_time,
    settle,
)
from assetcdn.edge.states.recv import PullPath, resolve
from assetcdn.edge.tls.policy import HSTS_HEADER
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
CACHE_STATUS_VARY_MISS = fill_cache_status("vary-miss", None)  # the URL stored, not the variant a request selects
MISS = str(CacheResult.MISS)  # the answer's X-Cache, as the delivery log reads it off the application's head


class Fill:
    """One claimed miss: what was read of its request on the hit path before its head was parsed again."""

    __slots__ = ("conn", "view", "target", "named", "head_only", "request_id", "country", "keep_alive", "peer",
                 "started")

    def __init__(self, conn: HitProtocol, view: HostView, target: str, named: PullPath | None, head_only: bool,
                 request_id: bytes, country: str, keep_alive: bool, peer: str | None) -> None:
        self.conn = conn  # the connection that claimed it: only its `start` takes it
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
        # Set by `claim`, taken by `start` in the same pass of the same connection (nothing runs in between:
        # one claim at a time for the whole server); a claim left behind is never another connection's.
        self.claimed: Fill | None = None
        self.send_timeout_s = send_timeout_s(server.node.settings)  # a client that takes none of its answer
        self.scheme = "https" if server.secure else "http"  # as the origin is told (X-Forwarded-Proto)
        self.started = 0  # fills begun here (each leads its URL's flight); tests count the requests begun by it
        self.filled = 0   # of them, answered here

    def claim(self, conn: HitProtocol, view: HostView, url: bytes, head_only: bool, named: PullPath | None) -> bool:
        """Whether the miss of request target ``url`` on ``conn`` (whose head the hit server parsed, without
        cache fields) may be filled here: no If-None-Match or Range. The connection then calls `start` with the
        request's head. `named`: `resolve` of the path alone, when the hit server has it."""
        headers = conn.headers
        if headers[1] is not None or headers[2] is not None:
            return False
        try:
            target = url.decode("ascii")
        except UnicodeDecodeError:
            return False
        country = headers[5]  # COUNTRY's slot
        server = self.server
        self.claimed = Fill(conn, view, target, named, head_only, server.ids.of(headers[3]),
                            "XX" if country is None else country_code(country.decode("utf-8", "surrogateescape")),
                            conn.keep_alive, conn.peer)
        return True

    def start(self, conn: HitProtocol, head: bytes) -> None:
        """Fill the claimed miss whose request head is ``head``, or hand the request to the application."""
        fill, self.claimed = self.claimed, None
        started = None if fill is None or fill.conn is not conn else self._begin(conn, fill, head)
        if started is None:
            conn.hand_over(head)
            return
        self.started += 1
        conn.busy = True
        conn.deadline = float("inf")
        task = self.server.loop.create_task(started)
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
        if rules_touch(changes, PER_REQUEST_HEADERS):
            return None
        lowered = [(name.lower(), value) for name, value in fields]
        zone = named.zone
        # This zone's own request back at the edges (one search of the head, most have no CDN-Loop): the
        # application refuses it. Another CDN's values in front of this one are no reason not to fill here.
        if zone.fleet and HEAD_MARK in head.lower() and looped(
                [value for name, value in lowered if name == CDN_LOOP], zone.fleet, zone.name):
            return None
        url_key = pull_key(zone.name, named.path, query, self.scheme)
        sent = Varied(fields, zone, fill.peer, self.scheme)
        if lookup(server.node, url_key, sent) is not None:  # stored: fresh, stale or a Vary'd URL's
            return None
        land = self.flights.lead(flight_key(url_key, zone))
        if land is None:  # one under way: the application waits for it
            return None
        return self._fill(conn, fill, head, fields, lowered, zone, named, query, url_key, sent, land, changes)

    async def _fill(self, conn: HitProtocol, fill: Fill, head: bytes, fields: list[tuple[str, str]],
                    lowered: list[tuple[str, str]], zone: PullZone, named: PullPath, query: str, url_key: str,
                    sent: Varied, land: Land, changes: HeaderChanges) -> None:
        node = self.server.node
        fetched: OriginResponse | OriginError | None = None
        handing = False  # an origin answer for the application: it leads the URL's flight from here on
        try:
            try:
                headers = fill_headers(fields, zone, fill.peer, self.scheme, None)
                sent.origin_sends(headers)  # the Vary key's fields, should the answer vary: not made a second time
                fetched = await ask(node, zone, named.path, query, headers, from_edge=False)
            except OriginError as exc:
                fetched = exc
            if isinstance(fetched, OriginResponse) and (writes := self._writes(zone, lowered, fetched)) is not None:
                # The requests waiting for this URL wait for the answer to be stored, not for this client.
                kept = self.server.loop.create_future()
                growing = growing_for(kept, writes[0])
                land(kept, selected_by(fetched.headers, sent), growing)
                try:
                    await self._answer(conn, fill, zone, named, url_key, sent, fetched, changes, kept, growing,
                                       *writes)
                finally:
                    settle(kept)
                return
            if isinstance(fetched, OriginResponse) and conn.transport is None:
                status = fetched.status
                self._gone(fill, named, status, await self._keep_unsent(zone, lowered, named, url_key, sent, fetched,
                                                                         land))
                return
            handing = isinstance(fetched, OriginResponse) and conn.transport is not None
        except Exception:  # never a hung connection: what was fetched goes back, the connection is closed
            log.exception("filling a pull zone's miss on the hit path failed")
            self._abandon(conn, fetched)
            return
        finally:
            if not handing:  # the origin's failure: the requests waiting for the URL answer with it
                land(fetched if isinstance(fetched, OriginError) else None)
        if conn.transport is None:
            if isinstance(fetched, OriginResponse):
                fetched.release()
            elif isinstance(fetched, OriginError):  # the application's 504 or 502 (`pull.origin_failed`), never sent
                self._gone(fill, named, 504 if fetched.timeout else 502, None)
            return
        # The application answers with what the origin said, and lands the flight the requests for the URL wait
        # for (as one it led itself: once its answer says what is kept); or the handover does, if it never takes it.
        try:
            conn.hand_over(head, fetched, land if handing else None, fill.started,
                           partial(self._keep_gone, zone, lowered, named, url_key, sent) if handing else None)
        except Exception:  # never a flight left open, nor a hung connection
            log.exception("handing a pull zone's fill to the application failed")
            land(None)
            self._abandon(conn, fetched)

    async def _keep_unsent(self, zone: PullZone, lowered: list[tuple[str, str]], named: PullPath, url_key: str,
                           sent: Varied, response: OriginResponse, land: Land) -> CacheResult:
        """The client went before the origin's head (an HTTP/2 stream reset, a closed connection): there is no request
        to hand the answer over with, but one that may be kept is still read into the cache for the requests waiting
        for the URL, as the application keeps it for a client gone mid-body; one that may not is closed unread. Its
        cache result: MISS (kept) or PASS. A body of no declared length that this worker found too large to keep
        lately (`pull.found_too_large`) is closed unread too, as one declared too large is."""
        node = self.server.node
        why, declared, parsed = judge(zone, lowered, response, node.origins.limits.max_object_bytes)
        if why is not None or (declared is None and found_too_large(node, url_key)):
            response.release()
            return CacheResult.PASS
        kept = self.server.loop.create_future()
        growing = growing_for(kept, declared)
        land(kept, selected_by(response.headers, sent), growing)
        try:
            await keep(node, zone, named.path, url_key, sent, response, parsed, new_spool(declared), None, kept,
                       growing=growing)
        finally:
            settle(kept)
        return CacheResult.MISS

    def _gone(self, fill: Fill, named: PullPath, status: int, result: CacheResult | None) -> None:
        """A fill whose client went before the origin's head, with the answer the application would have given it
        (`status`, its cache result: None for an error of the edge's own): counted as the application counts it (its
        metrics middleware, its cache result, its delivery with no byte sent), not nowhere."""
        server = self.server
        method = "HEAD" if fill.head_only else "GET"
        seconds = time.perf_counter() - fill.started
        server.metrics.count_request(server.route, method, str(status), seconds)
        if result is not None:
            server.metrics.cache_result(result).inc()
        cdn_path = f"{named.zone.name}{named.path}"
        server.deliveries.settle((time.time(), fill.view.name, method, cdn_path, zone_of(cdn_path), status, 0,
                                  "BYPASS" if result is None else str(result), fill.country, fill.request_id,
                                  fill.peer, seconds), 0, True)

    def _keep_gone(self, zone: PullZone, lowered: list[tuple[str, str]], named: PullPath, url_key: str, sent: Varied,
                   response: OriginResponse, land: Land) -> None:
        """A handed-over answer whose client went before the application took it (`HandoffTransport.drop_fetched`):
        kept for the requests waiting for the URL all the same, as `_keep_unsent` keeps one whose client went
        before the origin's head; the flight landed once that is done."""
        async def keeping() -> None:
            try:
                await self._keep_unsent(zone, lowered, named, url_key, sent, response, land)
            except Exception:
                log.exception("keeping a pull zone's fill whose client went failed")
                response.release()
            finally:
                land(None)

        task = self.server.loop.create_task(keeping())
        node = self.server.node
        node.background.add(task)
        task.add_done_callback(node.background.discard)

    @staticmethod
    def _abandon(conn: HitProtocol, fetched: OriginResponse | OriginError | None) -> None:
        """A fill that failed here: what was fetched goes back, the connection is closed."""
        if isinstance(fetched, OriginResponse):
            fetched.release()
        PullFills._cut_off(conn)

    def _writes(self, zone: PullZone, lowered: list[tuple[str, str]],
                response: OriginResponse) -> tuple[int, Directives] | None:
        """The origin's answer is one this module writes, a storable 200 of declared length within the object
        size limit, with a Content-Type (aiohttp's default for none depends on the method): its length and
        directives (`pull.judge`); None when the application answers with it."""
        if response.status != 200 or first_value(response.headers, "content-type") is None:
            return None
        why, declared, parsed = judge(zone, lowered, response, self.server.node.origins.limits.max_object_bytes)
        return None if why is not None or declared is None else (declared, parsed)

    async def _answer(self, conn: HitProtocol, fill: Fill, zone: PullZone, named: PullPath, url_key: str,
                      sent: Varied, response: OriginResponse, changes: HeaderChanges,
                      kept: Kept, growing: Growing | None, declared: int, parsed: Directives) -> None:
        """`pull.send_and_keep` of a storable answer, written to the connection (`kept` done once stored)."""
        server = self.server
        node = server.node
        node.metrics.cache_result(CacheResult.MISS).inc()
        headers = client_headers(response.headers, CacheResult.MISS,
                                 CACHE_STATUS_VARY_MISS if sent.vary_miss else CACHE_STATUS_STORED, age=None,
                                 shared_host=bool(named.prefix), cookie_host=fill.view.cookie_host, ranges=True)
        if server.own_hsts:  # the site's own goes in the tail, as the application's hook replaces the origin's
            headers.popall(HSTS_HEADER, None)
        dated = "Date" in headers
        # The response hooks (assetcdn/shared/middleware.py, assetcdn/edge/app.py), then aiohttp's own fields.
        stamp_headers(headers)
        apply_rule_changes(changes, headers)
        headers.setdefault("Server", SERVER_NAME)
        tail = server.extra_head if dated else server.date
        connection = b"" if fill.keep_alive else b"Connection: close\r\n"
        answer_head = (STATUS_200 + header_lines(headers) + b"Content-Length: %d\r\n" % declared + tail + connection
                       + ID_FIELD + fill.request_id + b"\r\n\r\n")
        cdn_path = f"{zone.name}{named.path}"
        pending: Pending = (time.time(), fill.view.name, "HEAD" if fill.head_only else "GET", cdn_path,
                            zone_of(cdn_path), 200, body_sent(fill.head_only, 200, declared), MISS,
                            fill.country, fill.request_id, fill.peer, time.perf_counter() - fill.started)
        if not fill.keep_alive:
            conn.closing = True
        counter = BodyCounter(conn.transport, conn.drain.beneath)
        # The head goes out with the body's first piece (one system call), or alone when there is none to send.
        head = [answer_head]
        if fill.head_only or not declared:
            self._send_head(conn, head)
        sending = await keep(node, zone, named.path, url_key, sent, response, parsed, new_spool(declared),
                             None if fill.head_only else partial(self._sender(conn), conn, counter, head), kept,
                             transport=conn.transport, watch=conn.watch_lost, growing=growing)
        if sending is None:
            self._send_head(conn, head)
            conn.closing = True  # a body cut short must not look complete to the client
        self._done(conn, fill, pending, counter)

    @staticmethod
    def _send_head(conn: HitProtocol, head: list[bytes]) -> None:
        """Write the answer's head unless it went out already (`head` empty then)."""
        transport = conn.transport
        if head and transport is not None and not transport.is_closing():
            conn.queued += len(head[0])
            transport.write(head.pop())

    def _sender(self, conn: HitProtocol) -> Callable[[HitProtocol, BodyCounter, list[bytes], bytes],
                                                       Awaitable[bool]]:
        """How a body chunk goes to `conn`: whole, or over TLS (not an HTTP/2 stream, which holds references and
        pauses its writer) a TLS_PIECE at a time, as the hit path writes a hit's body."""
        return self._send if conn.zero_copy or conn.when_sent is not None else self._send_pieces

    async def _send_pieces(self, conn: HitProtocol, counter: BodyCounter, head: list[bytes],
                           chunk: bytes | memoryview) -> bool:
        """`_send` of `chunk` a TLS_PIECE at a time, each once the last has drained: TLS encrypts at once what it is
        handed, whether the client reads or not."""
        if len(chunk) <= TLS_PIECE:
            return await self._send(conn, counter, head, chunk)
        view = memoryview(chunk)
        for start in range(0, len(view), TLS_PIECE):
            if not await self._send(conn, counter, head, view[start:start + TLS_PIECE]):
                return False
        return True

    async def _send(self, conn: HitProtocol, counter: BodyCounter, head: list[bytes],
                    chunk: bytes | memoryview) -> bool:
        """Write a body chunk (after the head, when it is still to go), waiting while the client does not read,
        as `pull.sent_in_time` allows; False once the client is gone or cut off."""
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
            return await sent_in_time(conn.drain.waiter(), self.send_timeout_s, partial(self._cut_off, conn))
        return True

    @staticmethod
    def _cut_off(conn: HitProtocol) -> None:
        """Close a fill's connection now (`pull.sent_in_time`): its answer can never be completed."""
        conn.closing = True
        conn.cut = True
        if conn.transport is not None:
            conn.transport.abort()

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

