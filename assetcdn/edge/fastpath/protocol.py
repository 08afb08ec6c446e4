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
- a request with a body (uploads, management calls), an upgrade, an HTTP/1.0 request that wants
  to keep the connection, or bytes httptools cannot parse: the connection is given to aiohttp for
  good, with everything received so far, and aiohttp answers as it always did (400 on malformed
  requests, its size limits and deadlines).

Limits kept here: a request head must be complete within ``header_timeout_s`` of the connection
opening or of the previous answer (the same deadline aiohttp applies; the connection is closed
without an answer), and a head larger than ``MAX_HEAD`` goes to aiohttp, which refuses it with its
own limits (so a head may carry no more than aiohttp would accept). Responses to pipelined requests are written together, in order; while the client does
not read them (the transport's write buffer is full) no further request is read.

Over TLS a read is the client's whole decrypted data, however much was pipelined: requests are answered
one per pass, TLS_TURN_ANSWERS per loop turn (reading paused until the rest is answered), and answers
larger than TLS_PIECE are handed to TLS a piece at a time as the client reads, so a client that reads
nothing holds little memory, and is cut off after ``tls.send_timeout_s``.
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import TYPE_CHECKING, Any

import httptools

from assetcdn.edge.fastpath.sendfile import (
    TLS_PIECE,
    Drain,
    send_file,
    send_file_nowait,
    set_keepalive,
    write_file,
    write_views,
)

if TYPE_CHECKING:
    from assetcdn.edge.fastpath.hit_server import HitServer

# A longer head goes to aiohttp, whose limits then apply as before (max_line_size and max_field_size
# 8190 each, 128 headers): a head within this size is within all of them.
MAX_HEAD = 8190
MAX_PIPELINED = 256 * 1024      # bytes read ahead while a request is being answered elsewhere
READ_AHEAD = "read-ahead"       # why reading is paused: MAX_PIPELINED bytes wait
TURN = "turn"                   # why reading is paused: pipelined requests wait for the loop's next turn
TLS_TURN_ANSWERS = 16           # pipelined requests answered per loop turn over TLS
WANTED = {b"host": 0, b"if-none-match": 1, b"range": 2, b"x-request-id": 3, b"expect": 4}
COUNTRY = 5                     # slot of the analytics country header (its name is configured)
ANSWERED, HAND_OVER, GIVE_AWAY, BUSY = 0, 1, 2, 3  # BUSY: the head is in `out`, `pending_file` follows


class HandoffTransport(asyncio.Transport):
    """What an aiohttp request handler writes to while it answers one handed-over request: writes go
    to the connection; its ``close`` (the end of its single request) returns the connection."""

    def __init__(self, connection: HitProtocol, transport: asyncio.Transport) -> None:
        super().__init__()
        self._connection = connection
        self._transport = transport
        self.closed = False

    def write(self, data: Any) -> None:
        if not self.closed:
            self._transport.write(data)

    def writelines(self, chunks: Any) -> None:
        if not self.closed:
            self._transport.writelines(chunks)

    def is_closing(self) -> bool:
        return self.closed or self._transport.is_closing()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._connection.handoff_ended(self)

    def abort(self) -> None:
        self.closed = True
        self._transport.abort()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._transport.get_extra_info(name, default)

    def pause_reading(self) -> None:
        self._connection.pause_reading_for(self)

    def resume_reading(self) -> None:
        self._connection.resume_reading_for(self)

    def is_reading(self) -> bool:
        return self._transport.is_reading()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._transport.set_write_buffer_limits(high, low)

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size()

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self._transport.get_write_buffer_limits()

    def can_write_eof(self) -> bool:
        return False

    def write_eof(self) -> None:
        raise NotImplementedError


class HitProtocol(asyncio.Protocol):
    __slots__ = ("server", "transport", "buffer", "parser", "url", "headers", "complete", "repeated",
                 "busy", "handler", "handoff", "deadline", "drain", "peer", "paused_by", "closing",
                 "pending_file", "keep_alive", "zero_copy", "batch", "turn_answers", "send_timeout_s")

    def __init__(self, server: HitServer) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.buffer = b""
        self.parser = httptools.HttpRequestParser(self)
        self.url = b""
        self.headers: list[bytes | None] = [None] * 6
        self.complete = False
        self.keep_alive = True
        self.repeated = False
        self.busy = False           # a request is being answered elsewhere (aiohttp, or a file)
        self.handler: Any = None    # the aiohttp request handler of a handed-over request
        self.handoff: HandoffTransport | None = None
        self.deadline = 0.0
        self.drain = Drain()
        self.peer: str | None = None
        self.paused_by: set[object] = set()
        self.closing = False
        self.pending_file: tuple[int, int, int] | None = None  # (descriptor, offset, count) to send next
        self.zero_copy = not server.secure  # sendfile(2) to the socket; TLS must see (encrypt) the bytes
        # Requests answered per pass of `process`. Over TLS one: the client's whole decrypted read arrives
        # at once, and answers are written in bounded pieces (_flush), TLS_TURN_ANSWERS per loop turn.
        self.batch = sys.maxsize if self.zero_copy else 1
        self.turn_answers = 0
        # A TLS client that takes none of an answer for this long is cut off (None: an HTTP/2 stream,
        # whose connection judges progress).
        self.send_timeout_s: float | None = server.send_timeout_s

    # --- httptools callbacks --------------------------------------------------------------------

    def on_url(self, url: bytes) -> None:
        self.url = url

    def on_header(self, name: bytes, value: bytes) -> None:
        slot = self.server.wanted.get(name.lower())
        if slot is not None:
            if self.headers[slot] is not None:
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
        set_keepalive(transport)
        peer = transport.get_extra_info("peername")
        self.peer = peer[0] if isinstance(peer, tuple) else None
        self.deadline = self.server.loop.time() + self.server.header_timeout_s
        self.server.connections.add(self)
        if not self.zero_copy:  # what TLS may hold encrypted for a client that does not read
            transport.set_write_buffer_limits(high=TLS_PIECE)  # type: ignore[attr-defined]

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.connections.discard(self)
        self.closing = True
        self.drain.connection_lost()
        handler = self.handler
        if handler is not None:
            self.handler = self.handoff = None  # nothing comes back: its close below is the end
            handler.connection_lost(exc)
        self.transport = None
        self.buffer = b""

    def pause_writing(self) -> None:
        self.drain.pause_writing()
        if self.handler is not None:
            self.handler.pause_writing()

    def resume_writing(self) -> None:
        self.drain.resume_writing()
        if self.handler is not None:
            self.handler.resume_writing()
        if not self.busy and self.buffer and not self.closing:
            self.resume_reading_for(self.drain)
            self.process()

    def eof_received(self) -> bool | None:
        # The client sent all it will: finish what is being answered, then close.
        if not self.busy:
            return None  # the transport closes itself
        self.closing = True
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
        """The head deadline passed (HitServer's once-a-second sweep): close without an answer."""
        if self.transport is not None and not self.busy:
            self.transport.close()

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
            if head_end - pos > MAX_HEAD:
                self._flush(out)
                self._give_away(buf[pos:])
                return
            headers = self.headers
            headers[0] = headers[1] = headers[2] = headers[3] = headers[4] = headers[5] = None
            self.complete = self.repeated = False
            try:
                # The usual read is one whole request head: fed as it is, no view to make.
                parser.feed_data(buf if head_end == size and not pos else memoryview(buf)[pos:head_end])
            except (httptools.HttpParserError, httptools.HttpParserUpgrade):
                # Malformed, or an upgrade/CONNECT (httptools raises a separate class for those):
                # aiohttp answers as it always did.
                self._flush(out)
                self._give_away(buf[pos:])
                return
            if not self.complete:  # a body follows
                self._flush(out)
                self._give_away(buf[pos:])
                return
            outcome = server.answer(self, buf, pos, head_end, out)
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
            if outcome == BUSY and self.pending_file is not None:  # its head is out; the file follows
                fileno, offset, count = self.pending_file
                self.pending_file = None
                if self._send_file_now(fileno, offset, count):
                    answered += 1
                    pos = head_end
                    if self.closing:
                        break
                    continue
                self.buffer = buf[head_end:]  # the rest waits for the file (process() runs again)
                return
            self.buffer = buf[head_end:]
            self._hand_over(buf[pos:head_end])
            return
        rest = buf[pos:] if pos else buf
        if self.closing:
            self._flush(out)
            if not self.busy and self.transport is not None:
                self.transport.close()
            return
        if answered == self.batch and rest:
            self._next_pass(rest, out)
            return
        if len(rest) > MAX_HEAD or b"\n\n" in rest or b"\n\r\n" in rest:
            # Too long for a head, or lines ending in a bare LF: aiohttp's parser decides.
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
        if self.turn_answers < TLS_TURN_ANSWERS and not self.drain.paused:
            self.process()
            return
        self.turn_answers = 0
        self.pause_reading_for(TURN)
        if not self.drain.paused:  # else resume_writing goes on
            asyncio.get_running_loop().call_soon(self._next_turn)

    def _next_turn(self) -> None:
        if not self.busy and not self.closing and self.transport is not None and not self.drain.paused:
            self.process()

    def _flush(self, out: list[Any]) -> None:
        if out and self.transport is not None:
            if not self.zero_copy and sum(map(len, out)) > TLS_PIECE:
                self._write_bounded(out)
                return
            self.transport.writelines(out)
            out.clear()

    def _write_bounded(self, out: list[Any]) -> None:
        """Answers too large to hand to TLS at once (they would be encrypted and held whole, whether the
        client reads or not): written a piece at a time while the transport takes them; the rest as the
        client reads, the connection busy meanwhile."""
        transport = self.transport
        assert transport is not None
        views = [memoryview(item) for item in out]
        out.clear()
        drain = self.drain
        while views and not drain.paused:
            view = views[0]
            transport.write(view[:TLS_PIECE])
            if len(view) > TLS_PIECE:
                views[0] = view[TLS_PIECE:]
            else:
                del views[0]
        if views:
            self.busy = True
            self.deadline = float("inf")
            asyncio.get_running_loop().create_task(self._write_views(views))

    async def _write_views(self, views: list[memoryview]) -> None:
        transport = self.transport
        if transport is None:
            return
        try:
            await write_views(transport, self.drain, views, self.send_timeout_s)
        except (ConnectionError, OSError):  # gone, or no byte taken for send_timeout_s
            if self.transport is not None:
                self.transport.abort()
            return
        self.busy = False
        self._continue()

    def _send_file_now(self, fileno: int, offset: int, count: int) -> bool:
        """Send the file right away when the socket takes it all (the usual case on a client that
        reads); True when done. Otherwise the rest goes on in a task and the connection is busy."""
        transport = self.transport
        if self.zero_copy and transport is not None and not transport.get_write_buffer_size():
            try:
                sent = send_file_nowait(transport, fileno, offset, count)
            except OSError:
                os.close(fileno)
                transport.abort()
                self.closing = True
                return True
            offset, count = offset + sent, count - sent
            if not count:
                os.close(fileno)
                return True
        self.busy = True
        self.deadline = float("inf")
        asyncio.get_running_loop().create_task(self._send_file(fileno, offset, count))
        return False

    async def _send_file(self, fileno: int, offset: int, count: int) -> None:
        try:
            transport = self.transport
            if transport is None:
                return
            if self.zero_copy:
                await send_file(transport, self.drain, fileno, offset, count)
            else:
                await write_file(transport, self.drain, fileno, offset, count, self.send_timeout_s)
        except (ConnectionError, OSError):
            if self.transport is not None:
                self.transport.abort()
            return
        finally:
            os.close(fileno)
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

    # --- handing requests to aiohttp --------------------------------------------------------------

    def _hand_over(self, request: bytes) -> None:
        """One body-less request to a fresh aiohttp request handler; the connection comes back when
        the handler closes its HandoffTransport (handoff_ended)."""
        assert self.transport is not None
        self.busy = True
        self.deadline = float("inf")
        handler = self.server.web_server()
        handoff = HandoffTransport(self, self.transport)
        self.handler, self.handoff = handler, handoff
        handler.connection_made(handoff)
        handler.data_received(request)
        handler.close()  # answer this one request, then close the (handoff) transport

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
        if not keep:
            self.closing = True
        self._continue()

    def _give_away(self, received: bytes) -> None:
        """The rest of this connection belongs to aiohttp, starting with ``received``."""
        transport = self.transport
        self.server.connections.discard(self)
        if transport is None:
            return
        self.transport = None
        self.buffer = b""
        handler = self.server.web_server()
        transport.set_protocol(handler)
        handler.connection_made(transport)
        if self.paused_by:
            self.paused_by.clear()
            transport.resume_reading()
        if self.drain.paused:
            handler.pause_writing()
        if received:
            handler.data_received(received)


