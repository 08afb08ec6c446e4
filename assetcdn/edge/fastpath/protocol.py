"""The edge's public connections: cache hits answered straight from the socket, the rest by aiohttp.

Every connection of the public port starts here (an ``asyncio.Protocol``; heads parsed by
``httptools``). A request head is answered by this module when it is a hit: HTTP/1.1 GET or HEAD
without a body, of a path the worker has prepared (assetcdn/edge/fastpath/prepared.py), with no more than
If-None-Match and one byte range to honour. That answer is the full application's answer to the
same request, header for header, built from the prepared head plus `Date` and `X-Request-ID`; it
is counted in the same metrics and recorded in the same delivery log.

Everything else goes to the aiohttp application of the same process, unchanged:

- a request without a body (a miss, an API call, a transform, a 404...) is handed over alone: a
  fresh aiohttp request handler gets exactly that request's bytes on a transport that passes writes
  through and reports its end (``HandoffTransport``); once it has answered, the connection comes
  back here (unless the answer closed it) and pipelined requests behind it go on in order;
- a request with a body (uploads, management calls), a CONNECT, an HTTP/1.0 request that wants
  to keep the connection, or bytes httptools cannot parse: the connection is given to aiohttp for
  good, with everything received so far, and aiohttp answers as it always did (400 on malformed
  requests, its size limits and deadlines). A request asking for an upgrade (`Upgrade: h2c`) is answered as
  any other: the edge switches to no other protocol.

Deliveries are recorded (assetcdn/edge/delivery_log.py) with the bytes that reached the kernel. An
answer the socket takes whole at once, the usual hit, is recorded as it is written. One whose body the
transport still holds waits: its place in what the connection queued is kept, the transport's water
marks go to zero so the connection hears the moment it holds nothing, and it is recorded whole then,
or, if the connection ends first, with what had left the transport by the last write (``aborted``).
Over TLS the transport is two: TLS passes each record it seals at once to the socket's transport beneath,
which holds what the kernel did not take: what either holds has not left (``Drain.held``), and a waiting
delivery hears from both (``beneath_drained``).
A file counts what sendfile sent; an answer on an HTTP/2 stream, the DATA bytes the stream sent.

Limits kept here: a request head must be complete within ``header_timeout_s`` of the connection
opening or of the previous answer (the same deadline aiohttp applies; the connection is closed
without an answer), and a head larger than ``MAX_HEAD``, of more than ``MAX_REQUEST_FIELDS`` fields, or with a
field aiohttp reads as one value (``SINGLE_VALUED``) twice goes to aiohttp, which refuses it with its own limits
(so a head may carry no more than aiohttp would accept: a request is never a 200 here and a 400 there). Responses to pipelined requests are written together, in order; while the client does
not read them (the transport's write buffer is full) no further request is read.

Over TLS a read is the client's whole decrypted data, however much was pipelined: requests are answered
one per pass, TLS_TURN_ANSWERS per loop turn (reading paused until the rest is answered), and answers
larger than TLS_PIECE are handed to TLS a piece at a time as the client reads, so a client that reads
nothing holds little memory, and is cut off after ``tls.send_timeout_s``. An answer that fits in one TLS
record (head and body together) is handed to TLS whole, so it is sealed as one record. The application's
answers are paced the same way (``TlsHandoffTransport``, ``PacedTransport``: sendfile.py ``PacedWrites``): a
write larger than TLS_PIECE, however the application wrote it, goes to TLS a piece at a time, the
application paused meanwhile and cut off after the same send timeout.
"""

from __future__ import annotations

import asyncio
import os
import socket
import struct
import sys
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

import httptools

from assetcdn.edge.fastpath.proxy_protocol import ClientTransport, ForwardingTransport
from assetcdn.edge.fastpath.sendfile import (
    TLS_PIECE,
    Drain,
    PacedWrites,
    Progress,
    send_file,
    send_file_nowait,
    write_file,
    write_views,
)

if TYPE_CHECKING:
    from assetcdn.edge.delivery_log import BodyCounter, Pending
    from assetcdn.edge.fastpath.hit_server import HitServer

# What a lost connection's parser is replaced by (see ``connection_lost``).
LOST_PARSER = httptools.HttpRequestParser(object())
# A longer head goes to aiohttp, whose own limits then apply (a request line of 8190 bytes, a field of 8189:
# assetcdn/shared/http_server.py `HANDLER_ARGS`; past them 414 and 431): a head within this size is within both
# (its request line and the blank line that ends it take more than the byte between them). Not within its 128
# fields (a field line may be 4 bytes).
MAX_HEAD = 8190
MAX_REQUEST_FIELDS = 128        # aiohttp's max_headers: a head of more fields goes to aiohttp, which refuses it
FEW_FIELDS_HEAD = 4 * (MAX_REQUEST_FIELDS + 1)  # no head this long has more fields: its lines are not counted
MAX_PIPELINED = 256 * 1024      # bytes read ahead while a request is being answered elsewhere
READ_AHEAD = "read-ahead"       # why reading is paused: MAX_PIPELINED bytes wait
TURN = "turn"                   # why reading is paused: pipelined requests wait for the loop's next turn
TLS_TURN_ANSWERS = 16           # pipelined requests answered per loop turn over TLS
TLS_RECORD = 2 ** 14            # RFC 8446 section 5.1: the most plaintext one TLS record carries
COUNTRY = 5                     # slot of the analytics country header (its name is configured)
# One slot for the request fields a pull zone's hit cannot answer here as the application would (its
# directives, the conditions it does not compare): any of them, once or more, hands a pull request over.
CACHE_FIELDS = 6
# The slot of the fields that always hand a request over, stored zone or pull zone: Expect (the application
# decides), and If-Match and If-Unmodified-Since (a stored file's are evaluated by assetcdn/edge/states/deliver.py,
# a pull zone passes them to its origin).
APPLICATION_FIELDS = 4
# Fields aiohttp reads as one value, refusing a request that sends one twice (400, its parser's SINGLETON_HEADERS;
# Host has slot 0, and llhttp refuses a second Content-Length or Transfer-Encoding itself): a repeated slot hands
# the request over, as any does. User-Agent, in nearly every request, has a slot of its own; the others, rare in a
# request, share one (two different ones then hand it over too: the application answers it as it would anyway).
USER_AGENT = 7
SINGLE_VALUED = 8
WANTED = {b"host": 0, b"if-none-match": 1, b"range": 2, b"x-request-id": 3,
          **dict.fromkeys((b"expect", b"if-match", b"if-unmodified-since"), APPLICATION_FIELDS),
          **dict.fromkeys((b"cache-control", b"pragma", b"if-modified-since", b"if-range"), CACHE_FIELDS),
          b"user-agent": USER_AGENT,
          **dict.fromkeys((b"content-type", b"content-location", b"content-range", b"etag", b"max-forwards",
                           b"server"), SINGLE_VALUED)}
SLOTS = SINGLE_VALUED + 1       # the length of a request's slots list (an HTTP/2 stream's too)
ANSWERED, HAND_OVER, GIVE_AWAY, BUSY = 0, 1, 2, 3  # BUSY: the head is in `out`, `pending_file` follows
FILL = 4  # a pull zone's miss the hit server fills on this connection (assetcdn/edge/fastpath/pull_fill.py)
SO_PEERNAME = 28                # Linux: the peer's address even once the connection was reset
StreamSent = Callable[[Callable[[int, bool], None]], None]  # an HTTP/2 stream's `when_sent` (assetcdn/edge/tls/h2.py)
# (connection, buffer, head start, head end, answers out) -> ANSWERED, HAND_OVER, GIVE_AWAY or BUSY
Decide = Callable[["HitProtocol", bytes, int, int, list[Any]], int]


def peer_address(transport: asyncio.BaseTransport) -> Any:
    """The client's address: ``peername``, or, for a connection reset before it was accepted (the
    kernel then refuses getpeername), the address accept saw, which Linux still gives as SO_PEERNAME."""
    peer = transport.get_extra_info("peername")
    if peer is not None:
        return peer
    sock = transport.get_extra_info("socket")
    try:
        family = sock.family
        if family == socket.AF_INET:
            raw = sock.getsockopt(socket.SOL_SOCKET, SO_PEERNAME, 16)
            return socket.inet_ntop(family, raw[4:8]), struct.unpack("!H", raw[2:4])[0]
        if family == socket.AF_INET6:
            raw = sock.getsockopt(socket.SOL_SOCKET, SO_PEERNAME, 28)
            return socket.inet_ntop(family, raw[8:24]), struct.unpack("!H", raw[2:4])[0], 0, 0
    except (AttributeError, OSError, ValueError):
        pass
    return None


class HandoffTransport(ForwardingTransport):
    """What an aiohttp request handler writes to while it answers one handed-over request: writes go
    to the connection; its ``close`` (the end of its single request) returns the connection. Its
    ``peername`` is the connection's as it had it at its start (or as a PROXY header named it)."""

    def __init__(self, connection: HitProtocol, transport: asyncio.Transport) -> None:
        super().__init__(transport, connection.peername)
        self._connection = connection
        self.closed = False
        self.lost = False  # the connection is gone (its close will not come back here)
        self.delivery: tuple[Pending, BodyCounter] | None = None  # the answer's, recorded once it is out
        # The origin's answer (or failure) the hit path fetched for this request (assetcdn/edge/fastpath/pull_fill.py),
        # and how to land the URL's flight it began for that answer (None: it began none, or landed it).
        self.fetched: Any = None
        self.landing: Callable[..., None] | None = None  # assetcdn/edge/states/pull.py `Land`
        # How the fetched answer is still read into the cache for the requests waiting for its URL when the client
        # goes before the application took it (assetcdn/edge/fastpath/pull_fill.py `PullFills._keep_unsent`):
        # given the answer and the landing, it lands the flight itself.
        self.unsent: Callable[[Any, Callable[..., None]], None] | None = None
        # perf_counter() when the hit path began the request, when it did more than read its head (a fill whose
        # answer it hands over): the client has waited since then, its origin's answer included.
        self.started: float | None = None

    @property
    def beneath(self) -> asyncio.WriteTransport | None:
        """Under TLS, the socket's transport beneath the connection's (``Drain.beneath``)."""
        return self._connection.drain.beneath

    def take_fetched(self) -> Any:
        """What the hit path fetched for the request (assetcdn/edge/states/pull.py `handed_fill`), once."""
        fetched, self.fetched = self.fetched, None
        return fetched

    def take_landing(self) -> Callable[..., None] | None:
        """The landing of the flight the hit path began for the fetched answer, once: whoever takes it lands the
        flight (assetcdn/edge/states/pull.py `serve_pull`)."""
        landing, self.landing = self.landing, None
        return landing

    def drop_fetched(self) -> None:
        """The request was answered (or the connection lost) without it: its origin connection goes back, and the
        flight no one took is landed (the requests waiting for the URL ask again). A client gone before the
        application took the answer leaves it to `unsent`, which keeps it for those requests when it may be kept, as
        a fill whose client went before the origin's head does."""
        fetched = self.take_fetched()
        landing = self.take_landing()
        unsent, self.unsent = self.unsent, None
        if self.lost and unsent is not None and landing is not None and fetched is not None and not isinstance(
                fetched, BaseException):
            unsent(fetched, landing)
            return
        if fetched is not None and not isinstance(fetched, BaseException):
            fetched.release()
        if landing is not None:
            landing()

    def write(self, data: Any) -> None:
        if not self.closed:
            self._connection.queued += len(data)
            self._transport.write(data)

    def writelines(self, chunks: Any) -> None:
        if not self.closed:
            chunks = list(chunks)
            self._connection.queued += sum(len(chunk) for chunk in chunks)
            self._transport.writelines(chunks)

    def deliver(self, pending: Pending, counter: BodyCounter) -> None:
        """The application's answer is a delivery (DeliveryLog.record): the connection records it once
        the answer is out, or at once when the connection is already gone."""
        if self.lost:
            self._connection.app_delivery_lost(pending, counter)
        else:
            self.delivery = (pending, counter)

    def is_closing(self) -> bool:
        return self.closed or self._transport.is_closing()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.drop_fetched()
            self._connection.handoff_ended(self)

    def abort(self) -> None:
        self.closed = True
        self._connection.cut = True
        self._transport.abort()

    def transport_paused(self) -> None:
        """The connection's transport paused the connection (the client is behind): the handler is paused."""
        handler = self._connection.handler
        if handler is not None:
            handler.pause_writing()

    def transport_resumed(self) -> None:
        handler = self._connection.handler
        if handler is not None:
            handler.resume_writing()

    def gone(self) -> None:
        """The connection was lost while the request was being answered."""
        self.lost = True

    def pause_reading(self) -> None:
        self._connection.pause_reading_for(self)

    def resume_reading(self) -> None:
        self._connection.resume_reading_for(self)

    def can_write_eof(self) -> bool:
        return False

    def write_eof(self) -> None:
        raise NotImplementedError


class TlsHandoffTransport(HandoffTransport, PacedWrites):
    """A HandoffTransport over TLS HTTP/1.1: writes larger than TLS_PIECE are paced (assetcdn/edge/fastpath/sendfile.py
    `PacedWrites`), the handler paused while any is kept; counted in the connection's `queued` as they are handed to
    TLS. Closed while it keeps some, the connection comes back once they are handed (the next answer goes after)."""

    def __init__(self, connection: HitProtocol, transport: asyncio.Transport) -> None:
        super().__init__(connection, transport)
        self.pace(connection.drain, connection.send_timeout_s)
        self.ending = False  # closed while bytes are kept: handoff_ended once they are handed

    def write(self, data: Any) -> None:
        if not self.closed:
            if self.pieces or len(data) > TLS_PIECE:
                self.keep(data)
                self._pump()
            else:
                self._connection.queued += len(data)
                self._transport.write(data)

    def writelines(self, chunks: Any) -> None:
        if not self.closed:
            chunks = list(chunks)
            size = sum(len(chunk) for chunk in chunks)
            if self.pieces or size > TLS_PIECE:
                for chunk in chunks:
                    self.keep(chunk)
                self._pump()
            else:  # one TLS record where they fit, not one per piece (aiohttp passes a head and body apart)
                self._connection.queued += size
                self._transport.write(b"".join(chunks))

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + self.held

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.drop_fetched()
            if self.pieces:
                self.ending = True
            elif not self.dropped:  # (dropped: the connection is ending at once, and its loss ends the request)
                self._disarm()  # the connection's own deadlines apply from here
                self._connection.handoff_ended(self)

    def abort(self) -> None:
        self.drop()
        self.ending = False
        super().abort()

    def cut_off(self) -> None:
        self.abort()

    def transport_paused(self) -> None:
        self.settle()

    def transport_resumed(self) -> None:
        self._connection.queued += self.resumed()
        self._ended()

    def gone(self) -> None:
        self.drop()
        self.ending = False
        super().gone()

    def _pump(self) -> None:
        self._connection.queued += self.pump()
        self._ended()

    def _ended(self) -> None:
        if self.ending and not self.pieces and not self.dropped:
            self.ending = False
            self._disarm()
            self._connection.handoff_ended(self)


class PacedTransport(ForwardingTransport, asyncio.Protocol, PacedWrites):
    """A TLS HTTP/1.1 connection given to aiohttp for good (`HitProtocol._give_away`): the transport its handler
    writes to, writes larger than TLS_PIECE paced (assetcdn/edge/fastpath/sendfile.py `PacedWrites`), and the TLS
    transport's protocol, which passes on to the handler what TLS reads and tells. Closed while it keeps bytes, TLS
    closes once they are handed to it."""

    def __init__(self, transport: asyncio.Transport, peername: Any, app: asyncio.Protocol, drain: Drain,
                 send_timeout_s: float | None) -> None:
        super().__init__(transport, peername)
        self.pace(drain, send_timeout_s)
        self.app = app
        self.close_after = False

    # --- the transport the handler writes to ---

    def write(self, data: Any) -> None:
        if self.close_after:
            return
        if self.pieces or len(data) > TLS_PIECE:
            self.keep(data)
            self._pump()
        else:
            self._transport.write(data)

    def writelines(self, chunks: Any) -> None:
        if self.close_after:
            return
        chunks = list(chunks)
        if self.pieces or sum(len(chunk) for chunk in chunks) > TLS_PIECE:
            for chunk in chunks:
                self.keep(chunk)
            self._pump()
        else:  # one TLS record where they fit, not one per piece (aiohttp passes a head and body apart)
            self._transport.write(b"".join(chunks))

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + self.held

    def is_closing(self) -> bool:
        return self.close_after or self._transport.is_closing()

    def close(self) -> None:
        if self.pieces:
            self.close_after = True
        else:
            self._disarm()  # TLS's own shutdown timeout applies from here
            self._transport.close()

    def abort(self) -> None:
        self.drop()
        self.close_after = False
        self._transport.abort()

    def cut_off(self) -> None:
        self.abort()

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self.app = protocol

    def get_protocol(self) -> asyncio.BaseProtocol:
        assert self.app is not None
        return self.app

    def pause_reading(self) -> None:
        self._transport.pause_reading()

    def resume_reading(self) -> None:
        self._transport.resume_reading()

    def can_write_eof(self) -> bool:
        return False

    def write_eof(self) -> None:
        raise NotImplementedError  # as TLS's own transport

    # --- the TLS transport's protocol ---

    def data_received(self, data: bytes) -> None:
        self.app.data_received(data)  # type: ignore[union-attr]  # aiohttp's handler, a Protocol

    def eof_received(self) -> bool | None:
        told: bool | None = self.app.eof_received()  # type: ignore[union-attr]
        return told

    def connection_lost(self, exc: Exception | None) -> None:
        self.drop()
        if self.app is not None:
            self.app.connection_lost(exc)

    def pause_writing(self) -> None:
        self.drain.pause_writing()
        self.settle()

    def resume_writing(self) -> None:
        self.drain.resume_writing()
        self.resumed()
        self._closed_after()

    def _pump(self) -> None:
        self.pump()
        self._closed_after()

    def _closed_after(self) -> None:
        if self.close_after and not self.pieces:
            self.close_after = False
            self._disarm()
            self._transport.close()


class HitProtocol(asyncio.Protocol):
    __slots__ = ("server", "transport", "buffer", "parser", "url", "headers", "complete", "repeated",
                 "busy", "handler", "handoff", "deadline", "drain", "peer", "peername", "paused_by", "closing",
                 "pending_file", "keep_alive", "zero_copy", "batch", "turn_answers", "send_timeout_s", "records",
                 "waiting", "queued", "handed", "cut", "when_sent", "decide", "last_write", "ended", "on_lost")

    def __init__(self, server: HitServer) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.buffer = b""
        self.parser = httptools.HttpRequestParser(self)
        self.url = b""
        self.headers: list[bytes | None] = [None] * SLOTS
        self.complete = False
        self.keep_alive = True
        self.repeated = False
        self.busy = False           # a request is being answered elsewhere (aiohttp, or a file)
        self.handler: Any = None    # the aiohttp request handler of a handed-over request
        self.handoff: HandoffTransport | None = None
        self.deadline = 0.0
        self.drain = Drain()
        self.peer: str | None = None
        self.peername: Any = None
        self.paused_by: set[object] = set()
        self.closing = False
        # The client half-closed (sent its FIN) while a request was answered elsewhere: the complete requests it
        # sent before are still answered, in order, and the connection closes once none is left.
        self.ended = False
        # (descriptor, offset, count, its delivery) to send next
        self.pending_file: tuple[int, int, int, Pending] | None = None
        self.zero_copy = not server.secure  # sendfile(2) to the socket; TLS must see (encrypt) the bytes
        # Requests answered per pass of `process`. Over TLS one: the client's whole decrypted read arrives
        # at once, and answers are written in bounded pieces (_flush), TLS_TURN_ANSWERS per loop turn.
        self.batch = sys.maxsize if self.zero_copy else 1
        self.turn_answers = 0
        # A TLS client that takes none of an answer for this long is cut off (None: an HTTP/2 stream,
        # whose connection judges progress).
        self.send_timeout_s: float | None = server.send_timeout_s
        self.records: list[Pending] = []  # deliveries answered in `out`, recorded once it is written
        # Deliveries whose bodies the transport still held: [delivery, start, end], positions in
        # `queued`, the bytes this connection queued on its transport (counted while any wait).
        self.waiting: list[list[Any]] = []
        self.queued = 0
        self.handed = 0    # of `queued`, what had left the transport when last seen
        self.cut = False   # this side aborted the connection: its loss is no sign that the rest went out
        self.when_sent: StreamSent | None = None  # on an HTTP/2 stream, which counts what it sends
        # How a request head is answered (HitServer.answer); an HTTP/2 stream's, by what its fields decided already.
        self.decide: Decide = server.answer
        # Over TLS (assetcdn/edge/tls/ssl_object.py): the connection's last write carries the close_notify alert.
        self.last_write: Callable[[], None] | None = None
        # Told once the connection is lost: a fill's client lagging behind it (`watch_lost`).
        self.on_lost: Callable[[], None] | None = None

    # --- httptools callbacks --------------------------------------------------------------------

    def on_url(self, url: bytes) -> None:
        self.url = url

    def on_header(self, name: bytes, value: bytes) -> None:
        slot = self.server.wanted.get(name.lower())
        if slot is not None:
            if self.headers[slot] is not None and slot != CACHE_FIELDS:
                self.repeated = True
            self.headers[slot] = value

    def on_headers_complete(self) -> None:
        # Read here: llhttp resets its connection flags once the message is complete.
        self.keep_alive = self.parser.should_keep_alive()

    def on_message_complete(self) -> None:
        self.complete = True

    # --- connection -----------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's are not asyncio.Transport subclasses
        peer = self.peername = peer_address(transport)
        self.peer = peer[0] if isinstance(peer, tuple) else None
        self.when_sent = transport.get_extra_info("when_sent")
        self.deadline = self.server.loop.time() + self.server.header_timeout_s
        self.server.connections.add(self)
        if not self.zero_copy:  # what TLS may hold encrypted for a client that does not read
            transport.set_write_buffer_limits(high=TLS_PIECE)  # type: ignore[attr-defined]

    def client_address(self, peername: Any) -> None:
        """The client's address as a trusted balancer's PROXY header named it (assetcdn/edge/fastpath/proxy_protocol.py),
        in place of the peer's; told once, right after connection_made."""
        self.peername = peername
        self.peer = peername[0]

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.connections.discard(self)
        self.closing = True
        self.transport = None
        if self.waiting:
            if exc is None and not self.cut:  # closed once the transport had sent everything
                self.handed = self.queued
            self._check_waiting(False)
        self.drain.connection_lost()
        on_lost, self.on_lost = self.on_lost, None
        if on_lost is not None:
            on_lost()
        handler, handoff = self.handler, self.handoff
        if handler is not None:
            self.handler = self.handoff = None  # nothing comes back: its close below is the end
            if handoff is not None:
                handoff.gone()
                handoff.drop_fetched()
                delivery, handoff.delivery = handoff.delivery, None
                if delivery is not None:
                    self.app_delivery_lost(*delivery)
            handler.connection_lost(exc)
        self.buffer = b""
        # The parser calls back into this protocol: a cycle that only the garbage collector would break, and an
        # idle worker may not run it for long, keeping a lost connection's memory.
        self.parser = LOST_PARSER

    def watch_lost(self, told: Callable[[], None] | None) -> None:
        """Have `told` called once this connection is lost, at once when it is already (None: no longer): a fill's
        client lagging behind it gives its places back then (assetcdn/edge/states/feed.py `ClientFeed`)."""
        if told is not None and self.transport is None:
            told()
            return
        self.on_lost = told

    def pause_writing(self) -> None:
        self.drain.pause_writing()
        if self.handoff is not None:
            self.handoff.transport_paused()

    def resume_writing(self) -> None:
        transport = self.transport
        if self.waiting and transport is not None and not self.drain.held(transport):
            self.handed = self.queued  # everything queued has left the transport
            self._check_waiting(True)
        self.drain.resume_writing()
        if self.handoff is not None:
            self.handoff.transport_resumed()
        if not self.busy and self.buffer and not self.closing:
            self.resume_reading_for(self.drain)
            self.process()

    def beneath_drained(self) -> None:
        """Over TLS, the socket's transport beneath resumed TLS (assetcdn/edge/tls/site.py `TlsProtocol`): while
        deliveries wait, its marks are zero, so it holds nothing now, and those whose bytes TLS no longer holds
        either have reached the kernel."""
        transport = self.transport
        if self.waiting and transport is not None and not self.drain.held(transport):
            self.handed = self.queued
            self._check_waiting(True)

    def eof_received(self) -> bool | None:
        # The client sent all it will: answer what it sent (the request under way, then the ones pipelined behind
        # it), then close.
        if not self.busy:
            return None  # the transport closes itself
        self.ended = True
        return True

    def data_received(self, data: bytes) -> None:
        if self.busy or self.closing:
            self.buffer += data
            if len(self.buffer) > MAX_PIPELINED:
                self.pause_reading_for(READ_AHEAD)
            return
        self.buffer = self.buffer + data if self.buffer else data
        self.process()

    def timed_out(self) -> None:
        """The head deadline passed (HitServer's once-a-second sweep): close without an answer; over TLS,
        answers the client has not read for ``send_timeout_s`` are dropped (a close would wait for them)."""
        transport = self.transport
        if transport is not None and not self.busy:
            if self.send_timeout_s is not None and not self.zero_copy and self.drain.full(transport):
                self.cut = True
                transport.abort()
            else:
                transport.close()

    def close_when_idle(self) -> None:
        """The server is stopping: close now if idle, else after the answer under way."""
        self.closing = True
        if not self.busy and self.transport is not None:
            self.transport.close()

    # --- flow control shared with handed-over requests ----------------------------------------

    def pause_reading_for(self, reason: object) -> None:
        if not self.paused_by and self.transport is not None:
            self.transport.pause_reading()
        self.paused_by.add(reason)

    def resume_reading_for(self, reason: object) -> None:
        if reason in self.paused_by:
            self.paused_by.discard(reason)
            if not self.paused_by and self.transport is not None:
                self.transport.resume_reading()

    # --- requests -------------------------------------------------------------------------------

    def process(self) -> None:
        """Answer every complete request head in the buffer, in order, until one goes elsewhere."""
        transport = self.transport
        if transport is None:
            return
        buf = self.buffer
        server = self.server
        parser = self.parser
        out: list[Any] = []
        pos = 0
        answered = 0
        size = len(buf)
        server.begin_batch()
        while pos < size:
            end = buf.find(b"\r\n\r\n", pos)
            if end < 0:
                break
            head_end = end + 4
            if head_end - pos > MAX_HEAD or (head_end - pos > FEW_FIELDS_HEAD
                                             and buf.count(b"\n", pos, head_end) > MAX_REQUEST_FIELDS + 2):
                self._flush(out)
                self._give_away(buf[pos:])
                return
            headers = self.headers
            headers[0] = headers[1] = headers[2] = headers[3] = headers[4] = headers[5] = headers[6] = headers[7] = \
                headers[8] = None
            self.complete = self.repeated = False
            upgrade = False
            try:
                # The usual read is one whole request head: fed as it is, no view to make.
                parser.feed_data(buf if head_end == size and not pos else memoryview(buf)[pos:head_end])
            except httptools.HttpParserUpgrade:
                # A request asking for another protocol (`Upgrade: h2c`, websocket), which the edge does not switch to:
                # answered as any other (RFC 9110 7.8 lets a server ignore Upgrade), the requests behind it after it.
                # Given to aiohttp with them, they were lost: its parser drops what follows an upgrade it does not
                # take. A CONNECT, or one with a body (llhttp ends an upgrade request at its head, leaving its body to
                # the new protocol), is aiohttp's as before.
                head = buf[pos:head_end].lower()
                if not self.complete or parser.get_method() == b"CONNECT" or (
                        head.find(b"\ncontent-length:") >= 0 or head.find(b"\ntransfer-encoding:") >= 0):
                    self._flush(out)
                    self._give_away(buf[pos:])
                    return
                upgrade = True
            except httptools.HttpParserError:  # malformed: aiohttp answers as it always did
                self._flush(out)
                self._give_away(buf[pos:])
                return
            if not self.complete:  # a body follows
                self._flush(out)
                self._give_away(buf[pos:])
                return
            outcome = self.decide(self, buf, pos, head_end, out)
            if upgrade:  # the parser stopped for the switch: a new one reads the requests behind it
                self.parser = parser = httptools.HttpRequestParser(self)
            if outcome == ANSWERED:
                answered += 1
                pos = head_end
                if self.closing or answered == self.batch:
                    break
                continue
            self._flush(out)
            if outcome == GIVE_AWAY:
                self._give_away(buf[pos:])
                return
            if outcome == FILL:
                self.buffer = buf[head_end:]  # the rest waits for the fill (process() runs again)
                server.fills.start(self, buf[pos:head_end])
                return
            if outcome == BUSY and self.pending_file is not None:  # its head is out; the file follows
                fileno, offset, count, pending = self.pending_file
                self.pending_file = None
                if self._send_file_now(fileno, offset, count, pending):
                    answered += 1
                    pos = head_end
                    if self.closing:
                        break
                    continue
                self.buffer = buf[head_end:]  # the rest waits for the file (process() runs again)
                return
            self.buffer = buf[head_end:]
            self.hand_over(buf[pos:head_end])
            return
        rest = buf[pos:] if pos else buf
        if self.closing:
            self._flush(out, last=True)
            if not self.busy and self.transport is not None:
                self.transport.close()
            return
        if answered == self.batch and rest:
            self._next_pass(rest, out)
            return
        if self.ended:  # half-closed, and no complete request left: nothing more can come
            self._flush(out, last=True)
            self.closing = True
            if not self.busy and self.transport is not None:
                self.transport.close()
            return
        if rest and (len(rest) > MAX_HEAD or rest.find(b"\n\n") >= 0 or rest.find(b"\n\r\n") >= 0):
            # Too long for a head, or lines ending in a bare LF: aiohttp's parser decides. (find, not `in`:
            # bytes membership first tries its operand as an int, a TypeError made and dropped each time.)
            self._flush(out)
            self._give_away(rest)
            return
        self.buffer = rest
        self._flush(out)
        if answered:
            self.deadline = server.loop.time() + server.header_timeout_s
            if self.drain.paused and rest:
                self.pause_reading_for(self.drain)  # the client is not reading its answers
        if self.paused_by:
            self.resume_reading_for(TURN)

    def _next_pass(self, rest: bytes, out: list[Any]) -> None:
        """TLS, more pipelined requests behind the one answered: the next now, or at the loop's next turn
        (reading paused meanwhile) once this turn has answered TLS_TURN_ANSWERS."""
        self.buffer = rest
        self._flush(out)
        if self.busy or self.transport is None:
            return  # the rest of an answer is being written; then _continue goes on
        self.deadline = self.server.loop.time() + self.server.header_timeout_s
        self.turn_answers += 1
        transport = self.transport
        if self.turn_answers < TLS_TURN_ANSWERS and not self.drain.full(transport):
            self.process()
            return
        self.turn_answers = 0
        self.pause_reading_for(TURN)
        if not self.drain.full(transport):
            asyncio.get_running_loop().call_soon(self._next_turn)
        elif self.send_timeout_s is not None:  # resume_writing goes on, if the client reads in time
            self.deadline = min(self.deadline, self.server.loop.time() + self.send_timeout_s)

    def _next_turn(self) -> None:
        transport = self.transport
        if not self.busy and not self.closing and transport is not None and not self.drain.full(transport):
            self.process()

    def _flush(self, out: list[Any], last: bool = False) -> None:
        """Write `out`; `last`: the connection closes once it is written."""
        if not out:
            return
        transport = self.transport
        if transport is not None:
            if self.zero_copy:
                transport.writelines(out)
            else:
                size = sum(map(len, out))
                if size > TLS_PIECE:
                    self._write_bounded(transport, out)
                    return
                if last and self.last_write is not None:
                    self.last_write()  # the close_notify alert sealed behind this one write
                    transport.write(out[0] if len(out) == 1 else b"".join(out))
                elif size <= TLS_RECORD and len(out) > 1:
                    # One TLS record rather than one per piece (head, body): each record is a cipher
                    # pass of its own, which costs more than copying what fits in one.
                    transport.write(b"".join(out))
                else:
                    transport.writelines(out)
            # The usual answer: the socket took all of it, and its deliveries are recorded whole now.
            beneath = self.drain.beneath
            if self.when_sent is None and not transport.get_write_buffer_size() and (
                    beneath is None or not beneath.get_write_buffer_size()) and not transport.is_closing():
                records = self.records
                if records:
                    record = self.server.deliveries.record_pending
                    for pending in records:
                        record(pending)
                    records.clear()
                if self.waiting:
                    self.handed = self.queued
                    self._check_waiting(True)
                out.clear()
                return
        self._count_out(out)
        out.clear()

    def _write_bounded(self, transport: asyncio.Transport, out: list[Any]) -> None:
        """Answers too large to hand to TLS at once (they would be encrypted and held whole, whether the
        client reads or not): written a piece at a time while the transport takes them; the rest as the
        client reads, the connection busy meanwhile. Their deliveries wait for the last piece."""
        places = self._places(out)
        size = sum(map(len, out))
        views = [memoryview(item) for item in out]
        out.clear()
        progress = Progress()
        drain = self.drain
        self.busy = True  # a write that empties the transport resumes it: no answer may start in between
        while views and not drain.full(transport) and not drain.gone(transport):
            view = views[0]
            piece = view[:TLS_PIECE]
            transport.write(piece)
            if drain.gone(transport):  # the socket failed this write: none of it was sent (`_write_views` ends it)
                break
            progress.wrote(len(piece), drain.held(transport))
            if len(view) > TLS_PIECE:
                views[0] = view[TLS_PIECE:]
            else:
                del views[0]
        self.busy = bool(views)
        if views:
            self.deadline = float("inf")
            asyncio.get_running_loop().create_task(self._write_views(views, places, size, progress))
        else:
            self._queued(places, size)

    async def _write_views(self, views: list[memoryview], places: list[list[Any]], size: int,
                           progress: Progress) -> None:
        try:
            transport = self.transport
            if transport is None:
                raise ConnectionResetError("connection lost")
            await write_views(transport, self.drain, views, progress, self.send_timeout_s)
        except (ConnectionError, OSError):  # gone, or no byte taken for send_timeout_s
            # What had left the transport of these answers by their last write.
            self.queued += progress.written
            self.handed = max(self.handed, self.queued - progress.written + progress.sent)
            self.waiting += places
            self._check_waiting(False)
            if self.transport is not None:
                self.cut = True
                self.transport.abort()
            return
        self._queued(places, size)
        self.busy = False
        self._continue()

    # --- deliveries recorded once their bytes are out -------------------------------------------

    def _count_out(self, out: list[Any]) -> None:
        """The deliveries answered in `out` when the transport did not take it all at once (or is gone):
        each waits at its place in what the connection queued."""
        self._queued(self._places(out), sum(len(item) for item in out))

    def _places(self, out: list[Any]) -> list[list[Any]]:
        """The deliveries answered in `out` (taken from `records`), each at its place in what the
        connection will have queued once `out` is written; none on an HTTP/2 stream, which tells what
        it sent."""
        records, self.records = self.records, []
        if self.when_sent is not None:
            for pending in records:
                self._stream_delivery(pending)
            return []
        position = self.queued
        index = 0
        places = []
        for pending in records:  # each answer is its head, then its body unless it has none
            position += len(out[index])
            index += 1
            size = pending[6]
            places.append([pending, position, position + size])
            if size:
                position += size
                index += 1
        return places

    def _queued(self, places: list[list[Any]], size: int) -> None:
        """`size` more bytes written to the transport, with the deliveries `places` answered in them."""
        if self.when_sent is not None:  # an HTTP/2 stream: its deliveries wait on the stream
            return
        self.queued += size
        transport = self.transport
        alive = transport is not None and not transport.is_closing()
        if alive:
            assert transport is not None
            self.handed = self.queued - self.drain.held(transport)
        self.waiting += places
        self._check_waiting(alive)

    def _check_waiting(self, alive: bool) -> None:
        """Record the waiting deliveries whose bodies have left the transport (`handed`); when the
        connection is gone (not `alive`), all of them, each with what had left of it."""
        handed = self.handed
        keep = []
        for entry in self.waiting:
            pending, start, end = entry
            if end <= handed:
                self.server.deliveries.settle(pending, end - start, False)
            elif not alive:
                self.server.deliveries.settle(pending, max(0, handed - start), True)
            else:
                keep.append(entry)
        self.waiting = keep
        transport = self.transport
        if transport is not None:
            if keep:
                self.drain.lower_marks(transport)  # resume_writing: the moment the transport holds nothing
            else:
                self.drain.restore_marks(transport)

    def _stream_delivery(self, pending: Pending) -> None:
        assert self.when_sent is not None
        self.when_sent(partial(self.server.deliveries.settle, pending))

    def _app_delivered(self, pending: Pending, counter: BodyCounter) -> None:
        """A handed-over request's answer is out of the application: its body, the last `counter.written`
        bytes queued, waits like a hit's."""
        if self.when_sent is not None:
            self._stream_delivery(pending)
            return
        transport = self.transport
        alive = transport is not None and not transport.is_closing()
        if alive:
            assert transport is not None
            self.handed = self.queued - self.drain.held(transport)
        self.waiting.append([pending, self.queued - counter.written, self.queued])
        self._check_waiting(alive)

    def app_delivery_lost(self, pending: Pending, counter: BodyCounter) -> None:
        """A handed-over request's answer whose connection ended first: what had left the transport."""
        if self.when_sent is not None:
            self._stream_delivery(pending)
        else:
            self.server.deliveries.settle(pending, counter.handed, True)

    # --- files ---------------------------------------------------------------------------------------

    def _send_file_now(self, fileno: int, offset: int, count: int, pending: Pending) -> bool:
        """Send the file right away when the socket takes it all (the usual case on a client that
        reads); True when done. Otherwise the rest goes on in a task and the connection is busy."""
        transport = self.transport
        progress = Progress()
        if self.when_sent is not None:
            self._stream_delivery(pending)
            pending_here: Pending | None = None
        else:
            pending_here = pending
        if self.zero_copy and transport is not None and not transport.get_write_buffer_size():
            try:
                sent = send_file_nowait(transport, fileno, offset, count, progress)
            except OSError:
                os.close(fileno)
                if pending_here is not None:
                    self.server.deliveries.settle(pending_here, progress.sent, True)
                self.cut = True
                transport.abort()
                self.closing = True
                return True
            offset, count = offset + sent, count - sent
            if not count:
                os.close(fileno)
                if pending_here is not None:
                    self.server.deliveries.settle(pending_here, progress.sent, False)
                return True
        self.busy = True
        self.deadline = float("inf")
        asyncio.get_running_loop().create_task(self._send_file(fileno, offset, count, pending_here, progress))
        return False

    async def _send_file(self, fileno: int, offset: int, count: int, pending: Pending | None,
                         progress: Progress) -> None:
        """The rest of a file; its delivery (`pending`, None when a stream records it) is recorded with
        what sendfile sent, or, written through TLS, once the transport has sent it."""
        try:
            transport = self.transport
            if transport is None:
                raise ConnectionResetError("connection lost")
            if self.zero_copy:
                await send_file(transport, self.drain, fileno, offset, count, progress)
            else:
                await write_file(transport, self.drain, fileno, offset, count, progress, self.send_timeout_s)
        except (ConnectionError, OSError):
            if pending is not None:
                self.server.deliveries.settle(pending, progress.sent, True)
            if self.transport is not None:
                self._check_waiting(False)
                self.cut = True
                self.transport.abort()
            return
        finally:
            os.close(fileno)
        transport = self.transport
        if pending is not None:
            if self.zero_copy or transport is None:  # sendfile's count is exact; gone: what had left by then
                self.server.deliveries.settle(pending, progress.sent, transport is None)
            else:
                self.queued += count
                self.handed = self.queued - self.drain.held(transport)
                self.waiting.append([pending, self.queued - count, self.queued])
                self._check_waiting(not transport.is_closing())
        self.busy = False
        self._continue()

    def _continue(self) -> None:
        """After a request answered elsewhere: the next pipelined one, or the close it asked for."""
        self.deadline = self.server.loop.time() + self.server.header_timeout_s
        self.resume_reading_for(READ_AHEAD)
        if self.closing:
            if self.transport is not None:
                self.transport.close()
            return
        if self.buffer:
            self.process()
        elif self.ended:  # the client half-closed: its last request is answered
            self.closing = True
            if self.transport is not None:
                self.transport.close()
        else:  # a turn's last request went elsewhere (TLS, _next_pass): reading goes on for the next one
            self.resume_reading_for(TURN)

    # --- handing requests to aiohttp --------------------------------------------------------------

    def hand_over(self, request: bytes, fetched: Any = None, landing: Callable[..., None] | None = None,
                  started: float | None = None,
                  unsent: Callable[[Any, Callable[..., None]], None] | None = None) -> None:
        """One body-less request to a fresh aiohttp request handler; the connection comes back when
        the handler closes its HandoffTransport (handoff_ended). `fetched`: the origin's answer the hit
        path has for it already (assetcdn/edge/fastpath/pull_fill.py), `landing` the flight it began for it,
        `started` when it began the request (perf_counter()), and `unsent` how that answer is kept should the
        client go before the application takes it (`HandoffTransport.drop_fetched`)."""
        assert self.transport is not None
        self.busy = True
        self.deadline = float("inf")
        handler = self.server.web_server()
        # Over TLS HTTP/1.1 (the socket's transport beneath known) the handler's large writes are paced.
        handoff = HandoffTransport(self, self.transport) if self.drain.beneath is None else \
            TlsHandoffTransport(self, self.transport)
        handoff.fetched = fetched
        handoff.landing = landing
        handoff.started = started
        handoff.unsent = unsent
        self.handler, self.handoff = handler, handoff
        handler.connection_made(handoff)
        if isinstance(handoff, TlsHandoffTransport):
            handoff.app = handler
        if self.drain.paused:  # the client is behind already: the handler waits as the hit path would
            handoff.transport_paused()
        # Kept alive only once its answer has ended (aiohttp sets it from the response then): a handler that fails
        # after its head went out (a body file failing mid-body) ends without one, and the connection must not be
        # taken back as if that answer were whole (`handoff_ended`), the client waiting for the rest of it.
        handler.keep_alive(False)
        handler.data_received(request)
        handler.close()  # answer this one request, then close the (handoff) transport

    def fill_done(self, pending: Pending, counter: BodyCounter) -> None:
        """A pull zone's fill answered on this connection (assetcdn/edge/fastpath/pull_fill.py) is written: its
        delivery waits like an application answer's, and the next request goes on."""
        if self.transport is None:
            self.app_delivery_lost(pending, counter)
            return
        self._app_delivered(pending, counter)
        self.busy = False
        self._continue()

    def handoff_ended(self, handoff: HandoffTransport) -> None:
        handler = self.handler
        if handoff is not self.handoff or handler is None:
            return
        # The handler keeps the connection open only if its answer did (not `Connection: close`, no error).
        keep = bool(getattr(handler, "_keepalive", False)) and not getattr(handler, "_force_close", True)
        asyncio.get_running_loop().call_soon(self._handed_back, handler, handoff, keep)

    def _handed_back(self, handler: Any, handoff: HandoffTransport, keep: bool) -> None:
        if self.handoff is not handoff:
            return
        self.handler = self.handoff = None
        self.paused_by.discard(handoff)
        handler.connection_lost(None)  # detaches it from aiohttp's server (and ends its timers)
        self.busy = False
        if self.transport is None:
            return
        delivery, handoff.delivery = handoff.delivery, None
        if delivery is not None:
            self._app_delivered(*delivery)
        if not keep:
            self.closing = True
        self._continue()

    def _give_away(self, received: bytes) -> None:
        """The rest of this connection belongs to aiohttp, starting with ``received``."""
        transport = self.transport
        self.server.connections.discard(self)
        if transport is None:
            return
        if self.waiting:  # aiohttp writes on its own from here: what has left the transport so far
            self.handed = self.queued - self.drain.held(transport)
            self._check_waiting(False)
        self.transport = None
        self.buffer = b""
        handler = self.server.web_server()
        # aiohttp asks its transport for the client's address: the one a PROXY header gave, when one did.
        peername = self.peername
        if self.drain.beneath is not None:  # TLS HTTP/1.1: the handler's large writes are paced
            paced = PacedTransport(transport, peername, handler, self.drain, self.send_timeout_s)
            transport.set_protocol(paced)
            handler.connection_made(paced)
        else:
            paced = None
            transport.set_protocol(handler)
            handler.connection_made(transport if peername == transport.get_extra_info("peername")
                                    else ClientTransport(transport, peername))
        if self.paused_by:
            self.paused_by.clear()
            transport.resume_reading()
        if self.drain.paused:
            if paced is not None:
                paced.settle()
            else:
                handler.pause_writing()
        if received:
            handler.data_received(received)


