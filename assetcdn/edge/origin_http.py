"""The HTTP/1.1 client under assetcdn/edge/origin_client.py: keep-alive connections to origins and shield
edges, one request at a time per connection, the response parsed by llhttp (httptools).

Lean on purpose: a cache fill is one GET, and a general-purpose client's per-request machinery (request and
response objects, header copies, timers per read) cost a fill more than the rest of the edge's work on it.

- **Pool:** per scheme, host and port at most ``size`` connections in use or idle (a request waits for one
  to come back); an idle connection is closed after ``keepalive_s``. A request on a reused connection that
  the server closed meanwhile (nothing of a response came, or only a 408 it sends as it times the idle
  connection out) is sent once more on a new one when its method is idempotent. A connection that carried a
  request body is not kept: a server that answered before reading all of it would take the rest for the next
  request (a request of the client's own, when it wrote one in its body).
- **Connect:** `connect` gives the addresses to try (the origin client's address guard resolves and checks
  them there), each within the connect timeout.
- **Responses:** informational (1xx) heads are skipped, a status outside 100-599 refused; the body is chunked, sized or delimited by the
  close; a head longer than ``max_head`` bytes, of more than MAX_FIELDS fields, or with a field line longer than
  ``max_field`` is refused, and so is a response that sends twice ``max_field`` bytes that end neither a field
  line nor any body (a field or trailer field still being sent, a chunk extension); reading
  stops (the connection paused) while ``BUFFERED`` bytes wait for the reader.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import ssl
import sys
import termios
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, cast

import httptools

BUFFERED = 256 * 1024
# Body pieces shorter than SMALL_PIECE (an origin's tiny chunks: llhttp gives each on its own) are joined into
# pieces of up to JOINED_PIECE as they come: passed on one by one, a body of 1-byte chunks cost the edge some 10 us
# of Python per byte (each chunk relayed, kept and written to the client on its own) and its buffer 40 bytes of
# objects per byte.
SMALL_PIECE = 4 * 1024
JOINED_PIECE = 64 * 1024
# Codings that change the bytes they are applied to (RFC 9110 8.4.1, and Brotli and Zstandard): as transfer codings
# they are refused, not relayed as the body (`sized`).
CONTENT_CODINGS = frozenset(("gzip", "x-gzip", "deflate", "compress", "x-compress", "br", "zstd"))
# Fields a response head may have: each is kept with the stored response and written in every answer from it
# (Varnish allows 64, nginx what fits in 4 or 8 KB).
MAX_FIELDS = 256
# A response head may be this many field lines of the longest a field line may be (`Pool`'s ``max_head``).
HEAD_FIELD_LINES = 64
IDEMPOTENT = frozenset(("GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"))
# Methods whose request has a body by definition: an empty one is sent with Content-Length: 0.
BODIED = frozenset(("POST", "PUT", "PATCH"))
NO_BODY = b""
# The ioctl that reads how many bytes a TCP socket's send queue holds unacknowledged (`send_queued`): Linux's.
SIOCOUTQ: int | None = termios.TIOCOUTQ if sys.platform == "linux" else None

Key = tuple[str, str, int]                              # scheme, host, port
Connector = Callable[[str, int], Awaitable[list[str]]]  # host, port -> addresses to try


class HttpError(Exception):
    """The exchange failed: no connection, a broken or malformed response, a connection cut short."""


class Disconnected(HttpError):
    """The server closed the connection before any byte of a response."""


def sized(headers: list[tuple[str, str]]) -> bool:
    """Whether a response's body ends by its own framing (RFC 9112 6.3): chunked as the final transfer coding,
    or a Content-Length without any Transfer-Encoding (`headers`: lower-case names). Otherwise the connection's
    close ends it, and the bytes before it are the body. A content coding used as a transfer coding (``gzip,
    chunked``) is refused (HttpError): this client decodes none, and passed on without its Transfer-Encoding
    field (hop-by-hop) the coded bytes would be taken for the body; so is chunked applied twice, or not last."""
    codings = [coding.strip().lower() for name, value in headers if name == "transfer-encoding"
               for coding in value.split(",") if coding.strip()]
    if not codings:
        return any(name == "content-length" for name, _ in headers)
    decoded = [coding for coding in codings if coding in CONTENT_CODINGS]
    if decoded or "chunked" in codings[:-1]:
        raise HttpError(f"the response's transfer coding {', '.join(codings)} is not one this edge can pass on")
    return codings[-1] == "chunked"


def field_text(value: bytes) -> str:
    """A response field's value as text: UTF-8 when it is, else each byte one Latin-1 character."""
    try:
        return value.decode()
    except UnicodeDecodeError:
        return value.decode("latin-1")


class Connection(asyncio.Protocol):
    """One connection: a request written whole, its response's head awaited, its body read chunk by chunk."""

    def __init__(self, pool: Pool, key: Key, max_head: int, max_field: int) -> None:
        self.pool, self.key = pool, key
        self._max_head, self._max_field = max_head, max_field
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.reused = False
        self.loop = pool.loop
        self.idle_until = 0.0  # the loop's time at which it is closed while idle (`Pool.release`)
        self._reset()

    def _reset(self) -> None:
        # A connection's responses follow one another: llhttp begins the next message where the last one ended,
        # so the parser of a response read whole (a reused connection's last) serves the next one.
        self._parser = httptools.HttpResponseParser(self)
        self._reset_message()

    def _reset_message(self) -> None:
        self.status = 0
        self.headers: list[tuple[str, str]] = []  # lower-case names, Latin-1 decoded
        self._fields: list[tuple[bytes, bytes]] = []  # as llhttp gives them, decoded once the head is complete
        self._in_head = True
        self._head_bytes = 0
        # Bytes read since the last field line or body bytes came out of the parser (`data_received`).
        self._pending = 0
        self._head: asyncio.Future[None] | None = None
        self._chunks: deque[bytes | bytearray] = deque()  # a bytearray: small pieces joined (`on_body`)
        self._buffered = 0
        self._paused = False
        self._waiter: asyncio.Future[None] | None = None
        self.done = False          # the whole response was read off the connection
        self.keep_alive = False
        self.error: HttpError | None = None
        self._skip_body = False
        # The request sent had a body: the connection is not kept (`Pool.release`), and `unsent` asks the kernel only then.
        self.bodied = False
        self._informational = False
        self._sized = False        # Content-Length or chunked: the close does not end the body
        self._ended = False        # the server ended its side: a FIN, or over TLS its close_notify

    # --- asyncio.Protocol ---------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not an asyncio.Transport subclass

    def data_received(self, data: bytes) -> None:
        if self._head is None or self.done or self.error is not None:  # nothing asked, or past the response
            self.close()
            return
        head = self._head
        if not head.done():
            # Counted while the head is being read; checked once a read leaves it unfinished (the body's first
            # bytes may come in the read that ends it).
            self._head_bytes += len(data)
        # A field's value comes to httptools a read at a time, and it joins each piece to what came before until
        # the line ends (a copy of it all at every read): a line that never ends, in the head or after the last
        # chunk, would grow without bound, each read costing more than the last. Counted whole, reset by any field
        # line or body the read gives (so up to one read more than counted may be pending).
        self._pending += len(data)
        try:
            self._parser.feed_data(data)
            if self._pending > 2 * self._max_field and not self.done:
                self._fail(HttpError(f"a field line or chunk extension of the response passes {2 * self._max_field} "
                                     "bytes"))
            elif self._head_bytes > self._max_head and not head.done():
                self._fail(HttpError(f"the response head is longer than {self._max_head} bytes"))
        except httptools.HttpParserUpgrade:
            self._fail(HttpError("the server switched protocols"))
        except httptools.HttpParserError as exc:
            if self.done:  # bytes after a response's end (a HEAD's body, a second response): not reused
                self.keep_alive = False
            elif isinstance(exc.__context__, HttpError):  # raised by a callback below
                self._fail(exc.__context__)
            else:
                self._fail(HttpError(f"malformed response ({exc})"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.pool.forget(self)
        if self._head is None or self.done or self.error is not None:
            return
        if not self._head.done():
            if self._head_bytes == 0:
                self._fail(Disconnected("the server closed the connection"))
            else:
                self._fail(HttpError("the connection closed within the response head"))
        elif not self._sized and exc is None and self._ended:  # a body delimited by the close: complete now
            self.done, self.keep_alive = True, False
            self._wake()
        elif not self._sized:  # reset, or TLS cut without its close_notify: the body may be cut anywhere
            self._fail(HttpError(f"the connection was broken before the end of the body ({exc or 'no close'})"))
        else:
            self._fail(HttpError("the connection closed before the end of the body"))

    def eof_received(self) -> bool | None:
        # Called for a FIN, and over TLS (on uvloop, the edge's loop) only for the server's close_notify: what
        # makes the close the end of a body delimited by it. The transport then closes (connection_lost).
        self._ended = True
        return None

    def pause_writing(self) -> None:  # requests are small: written whole, never paused for
        pass

    def resume_writing(self) -> None:
        pass

    # --- llhttp callbacks ---------------------------------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        self._pending = 0
        if len(name) + len(value) > self._max_field:
            raise HttpError(f"a response field line is longer than {self._max_field} bytes")
        if self._in_head:
            fields = self._fields
            if len(fields) >= MAX_FIELDS:
                raise HttpError(f"the response head has more than {MAX_FIELDS} fields")
            fields.append((name, value.rstrip(b" \t")))  # trailing whitespace is no part of a value (RFC 9110 5.5)
            return
        self._head_bytes += len(name) + len(value)  # a trailer field (after the last chunk): not kept, and
        if self._head_bytes > self._max_head:       # bounded as the head is
            raise HttpError(f"the response's trailer fields pass {self._max_head} bytes")

    def on_message_begin(self) -> None:
        if self.done:  # a second response after the one asked for (in the same read): never the next request's
            raise HttpError("the server sent bytes past the end of its response")

    def on_headers_complete(self) -> None:
        self._pending = 0
        status = self._parser.get_status_code()
        if not 100 <= status <= 599:
            # Three digits outside HTTP's statuses (RFC 9110 15: to be taken as a server error): passed on, one under
            # 100 would make the client's status line malformed ("HTTP/1.1 0"), one over 599 no status it knows.
            raise HttpError(f"the response's status {status:03d} is not an HTTP status (100-599)")
        if status < 200:  # an interim response: the final one follows
            self._fields = []
            self._informational = True
            return
        self._in_head = False
        try:  # values as sent: UTF-8 (a filename="café") passes through as it came
            self.headers = [(name.decode("latin-1").lower(), value.decode()) for name, value in self._fields]
        except UnicodeDecodeError:  # other bytes (obs-text) as Latin-1, each its own character
            self.headers = [(name.decode("latin-1").lower(), field_text(value)) for name, value in self._fields]
        self.status = status
        self._informational = False
        self.keep_alive = self._parser.should_keep_alive()
        self._sized = sized(self.headers)
        if self._skip_body:  # a HEAD's answer: no body, whatever its fields say; the connection is not reused
            self.done, self.keep_alive = True, False
        assert self._head is not None
        if not self._head.done():
            self._head.set_result(None)

    def on_body(self, body: bytes) -> None:
        self._pending = 0
        if self.done:
            return
        chunks = self._chunks
        if len(body) >= SMALL_PIECE:
            chunks.append(body)
        elif chunks and type(last := chunks[-1]) is bytearray and len(last) < JOINED_PIECE:
            last += body
        else:
            chunks.append(bytearray(body))
        self._buffered += len(body)
        if self._buffered > BUFFERED and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        if self._informational:
            self._informational = False
            return
        if self.done:
            return
        self.done = True
        self._wake()

    # --- the exchange ---------------------------------------------------------------------------------------

    def send(self, method: str, target: str, headers: Iterable[tuple[str, str]], body: bytes | None) -> None:
        if self.reused:  # its last response ended cleanly (`Pool.release` keeps no other)
            self._reset_message()
        else:
            self._reset()
        self._head = self.loop.create_future()
        self._skip_body = method == "HEAD"
        self.bodied = bool(body)
        lines = [f"{method} {target} HTTP/1.1\r\n"]
        for name, value in headers:
            if ":" in name:
                raise HttpError(f"the request field {name!r} cannot be sent")
            if name.lower() != "content-length":  # the body's own length is written below
                lines.append(f"{name}: {value}\r\n")
        if body or method in BODIED:
            lines.append(f"Content-Length: {len(body or NO_BODY)}\r\n")
        lines.append("\r\n")
        head = "".join(lines)
        if head.count("\n") != len(lines) or head.count("\r") != len(lines):  # a CR or LF inside a field
            raise HttpError(f"a request field cannot be sent: {split_field(lines)!r}")
        assert self.transport is not None
        # A client's field bytes that are not UTF-8 were decoded with surrogateescape: they go out as they came.
        self.transport.write(head.encode("utf-8", "surrogateescape") + (body or NO_BODY))

    async def head(self, deadline: float | None = None) -> None:
        """Wait for the response's head; TimeoutError at the loop's time `deadline`."""
        assert self._head is not None
        if deadline is None:
            await self._head
            return
        timer = self.loop.call_at(deadline, expire, self._head)
        try:
            await self._head
        finally:
            timer.cancel()

    async def chunk(self, idle_timeout_s: float) -> bytes:
        """The next piece of the body; b"" at its end. TimeoutError after `idle_timeout_s` of silence."""
        while not self._chunks:
            if self.error is not None:
                raise self.error
            if self.done:
                return NO_BODY
            self._waiter = waiter = self.loop.create_future()
            timer = self.loop.call_later(idle_timeout_s, expire, waiter)
            try:
                await waiter
            finally:
                timer.cancel()
        chunk = self._chunks.popleft()
        self._buffered -= len(chunk)
        if self._paused and self._buffered <= BUFFERED // 2 and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()
        return chunk if type(chunk) is bytes else bytes(chunk)

    def take_all(self) -> bytes | None:
        """The whole body when all of it was read and nothing of it taken yet, else None (`chunk` then)."""
        if not self.done or self.error is not None or self._paused:
            return None
        chunks = self._chunks
        body = chunks.popleft() if len(chunks) == 1 else b"".join(chunks)
        chunks.clear()
        if type(body) is not bytes:
            body = bytes(body)
        self._buffered = 0
        return body

    def at_eof(self) -> bool:
        return self.done and not self._chunks

    def unsent(self) -> bool:
        """Whether bytes of the request are still to go: the server answered before it read the whole body (and may
        never read the rest). Such a connection is aborted, not closed (`close`): a close would wait to send them for
        as long as the server reads none. (`Pool.release` keeps no connection that carried a body.) Over TLS the transport
        hands its records to the TCP connection's buffer as it makes them, holding none itself: the socket's send
        queue (bytes the server's side has not taken) says it there, as the transport's buffer does over TCP."""
        transport = self.transport
        if transport is None:
            return False
        if transport.get_write_buffer_size() > 0:
            return True
        # A request head alone is taken with the answer to it; a body may not be: the kernel is asked (a system call)
        # only then, not on every fill's release.
        return self.bodied and send_queued(transport)

    def close(self) -> None:
        self.closed = True
        if self.unsent():  # a close would wait to send the rest, for as long as the server reads none
            cast(asyncio.Transport, self.transport).abort()
        elif self.transport is not None:
            self.transport.close()

    def _fail(self, error: HttpError) -> None:
        self.error = error
        if self._head is not None and not self._head.done():
            self._head.set_exception(error)
            self._head.exception()  # retrieved: the caller may have stopped waiting (its timeout)
        self._wake()
        self.close()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        self._waiter = None


class Slots:
    """At most ``size`` exchanges at once for one key; the others wait in arrival order. A plain counter and a
    queue of futures (a wait bounded by one timer): asyncio.Semaphore under asyncio.timeout_at cost a fill
    waiting for a slot several times what the slot's bookkeeping needs."""

    __slots__ = ("free", "_waiters", "loop")

    def __init__(self, size: int, loop: asyncio.AbstractEventLoop) -> None:
        self.free = size
        self._waiters: deque[asyncio.Future[None]] = deque()
        self.loop = loop

    async def take(self, deadline: float | None) -> None:
        """One slot, waited for until the loop's time `deadline` (TimeoutError past it; None: no bound)."""
        if self.free > 0 and not self._waiters:
            self.free -= 1
            return
        waiter = self.loop.create_future()
        self._waiters.append(waiter)
        timer = None if deadline is None else self.loop.call_at(deadline, expire, waiter)
        try:
            await waiter  # done by `give`, which hands this waiter its slot
        except BaseException:
            if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                self.give()  # handed a slot as it timed out or was cancelled: passed on
            else:
                with contextlib.suppress(ValueError):
                    self._waiters.remove(waiter)
            raise
        finally:
            if timer is not None:
                timer.cancel()

    def give(self) -> None:
        """A slot back: to the first waiter still waiting, else free."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self.free += 1


def split_field(lines: list[str]) -> str:
    """What holds a CR or LF in a request head's lines (`Connection.send`'s): the first such field's name, or the
    request line."""
    for line in lines[1:]:
        inner = line[:-2]
        if "\r" in inner or "\n" in inner:
            return inner.partition(":")[0]
    return "the request line"


def expire(waiter: asyncio.Future[None]) -> None:
    """A wait's time is up: it ends in TimeoutError, as under asyncio.timeout."""
    if not waiter.done():
        waiter.set_exception(TimeoutError())


def send_queued(transport: asyncio.Transport) -> bool:
    """Whether the kernel still holds bytes written on `transport`'s socket that the peer has not taken (Linux's
    SIOCOUTQ); False where that cannot be asked."""
    if SIOCOUTQ is None:
        return False
    sock = transport.get_extra_info("socket")
    if sock is None:
        return False
    try:
        queued = fcntl.ioctl(sock.fileno(), SIOCOUTQ, b"\0\0\0\0")
    except (OSError, ValueError):
        return False
    return int.from_bytes(queued, sys.byteorder) > 0


class Pool:
    """Keep-alive connections by scheme, host and port; see the module docstring. Made on the event loop it
    serves."""

    def __init__(self, *, size: int, keepalive_s: float, connect_timeout_s: float, max_field: int,
                 connector: Connector | None = None) -> None:
        self._size = size
        self._keepalive_s = keepalive_s
        self._connect_timeout_s = connect_timeout_s
        self._max_field = max_field
        self._max_head = max_field * HEAD_FIELD_LINES
        self._connector = connector
        self._idle: dict[Key, list[Connection]] = {}
        self._slots: dict[Key, Slots] = {}
        self._open: set[Connection] = set()
        self._tls: ssl.SSLContext | None = None
        # One timer for every idle connection (the earliest to close), not one per connection released.
        self._sweep: asyncio.TimerHandle | None = None
        self.loop = asyncio.get_running_loop()  # made on the loop it serves (`OriginClient.pool`)

    async def exchange(self, key: Key, method: str, target: str, headers: Iterable[tuple[str, str]],
                       body: bytes | None, deadline: float | None = None) -> Connection:
        """Send a request; the connection once the final response's head arrived (`release` it when done).
        TimeoutError when that is not before the loop's time `deadline` (None: no bound)."""
        slots = self._slots.get(key)
        if slots is None:
            slots = self._slots[key] = Slots(self._size, self.loop)
        # A new connection (now and then) is bounded by asyncio.timeout_at; the slot and the head (waited for by
        # many requests) by a timer each: asyncio.timeout costs more than the rest of a request.
        await slots.take(deadline)
        try:
            fields = list(headers)
            for attempt in range(2):
                # The second attempt on a new connection: the other idle ones may have been closed with the first.
                conn = None if attempt else self._idle_connection(key)
                if conn is None:
                    async with asyncio.timeout_at(deadline):
                        conn = await self._connect(key)
                try:
                    conn.send(method, target, fields, body)
                    await conn.head(deadline)
                    if conn.status != 408 or attempt or not conn.reused or method not in IDEMPOTENT:
                        return conn
                    # A 408 on a reused connection: the server timed the idle connection out as the request went
                    # (some send a 408 then close, RFC 9110 15.5.9), never read it: sent once more, as for a close.
                    conn.close()
                except Disconnected:
                    conn.close()
                    if attempt or not conn.reused or method not in IDEMPOTENT:
                        raise
                except BaseException:
                    conn.close()
                    raise
            raise AssertionError("unreachable")
        except BaseException:
            slots.give()
            raise

    def release(self, conn: Connection) -> None:
        """The response is done with: its connection kept for the next request when it can be, else closed."""
        slots = self._slots.get(conn.key)
        if slots is not None:
            slots.give()
        # A connection that carried a request body is never kept: an origin that answered without reading all of it
        # (an early refusal; one that reads none) takes what it left for the next request, as a request of its own
        # when the client wrote one there, and the answer to that would be read as the next request's, another
        # client's. Whether it read the body cannot be told here (bytes its kernel took may still be unread).
        if conn.closed or not conn.at_eof() or not conn.keep_alive or conn.error is not None or conn.bodied:
            conn.close()
            return
        conn.reused = True
        loop = self.loop
        conn.idle_until = loop.time() + self._keepalive_s
        self._idle.setdefault(conn.key, []).append(conn)
        if self._sweep is None:
            self._sweep = loop.call_at(conn.idle_until, self._close_idle)

    def _close_idle(self) -> None:
        """Close the connections idle for ``keepalive_s``; the timer again for the next to be."""
        self._sweep = None
        loop = self.loop
        now = loop.time()
        earliest = float("inf")
        for idle in self._idle.values():
            for conn in [conn for conn in idle if conn.idle_until <= now]:
                idle.remove(conn)
                conn.close()
            earliest = min([earliest, *(conn.idle_until for conn in idle)])
        if earliest != float("inf"):
            self._sweep = loop.call_at(earliest, self._close_idle)

    def forget(self, conn: Connection) -> None:
        self._open.discard(conn)
        idle = self._idle.get(conn.key)
        if idle is not None and conn in idle:
            idle.remove(conn)

    async def close(self) -> None:
        for conn in list(self._open):
            conn.close()
        self._idle.clear()
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None
        await asyncio.sleep(0)  # the transports' close callbacks run

    def _idle_connection(self, key: Key) -> Connection | None:
        idle = self._idle.get(key)
        while idle:
            conn = idle.pop()
            if conn.idle_until <= self.loop.time():  # its time is up: the timer is late
                conn.close()
            elif not conn.closed and conn.transport is not None and not conn.transport.is_closing():
                return conn
        return None

    async def _connect(self, key: Key) -> Connection:
        scheme, host, port = key
        loop = self.loop
        tls: dict[str, Any] = {}
        if scheme == "https":
            if self._tls is None:
                self._tls = ssl.create_default_context()
            # The name without the trailing dot of an absolute one (`origin.example.com.`): RFC 6066 sends none in
            # SNI, and the certificate is for `origin.example.com`, which OpenSSL would not match with the dot.
            tls = {"ssl": self._tls, "server_hostname": host.rstrip(".")}
        addresses = [host] if self._connector is None else await self._connector(host, port)
        failure: OSError | None = None
        for address in addresses:
            # Each address within the connect timeout: one that does not answer (a server of the name's that is down
            # behind a firewall dropping its packets) is passed over for the next, as one that refuses is.
            try:
                async with asyncio.timeout(self._connect_timeout_s):
                    _, conn = await loop.create_connection(
                        lambda: Connection(self, key, self._max_head, self._max_field), address, port, **tls)
            except TimeoutError:
                failure = TimeoutError(f"no connection within {self._connect_timeout_s:g} s")
                continue
            except OSError as exc:
                failure = exc
                continue
            if tls:
                # uvloop's TLS transport drops the records it holds undecrypted when the TCP connection ends while
                # this protocol has paused reading (`on_body`): the end of a body, its close_notify with it, lost,
                # and a whole answer taken for one cut short. With a high-water mark of one byte, the socket is read
                # no further while any record waits undecrypted, so the close is seen only once they all were.
                cast(Any, conn.transport).set_read_buffer_limits(high=1, low=0)
            self._open.add(conn)
            return conn
        assert failure is not None
        raise failure
