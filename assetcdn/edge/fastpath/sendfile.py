"""Zero-copy bodies: a cache file sent to a client socket with ``sendfile(2)``, never read into Python.

uvloop has no ``loop.sendfile`` (it raises NotImplementedError), so the body goes straight to the
socket's descriptor: first everything the transport still buffers is flushed (responses written
before this one go out first), then ``os.sendfile`` runs until the range is sent, waiting for
writability on a duplicate of the descriptor when the socket buffer is full (an event loop refuses
a watcher on a descriptor its transport owns; a duplicate names the same socket). Works on uvloop
and on asyncio's own loops.
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections import deque
from typing import Any

SENDFILE_CHUNK = 4 * 1024 * 1024  # per system call: keeps one call from holding the loop for long


class Progress:
    """The bytes of a file range (or of answers in memory) handed to the kernel so far: exact for
    sendfile; for bytes written through a transport, what was written less what the transport still
    held after the last write (``Drain.held``)."""

    __slots__ = ("written", "sent")

    def __init__(self) -> None:
        self.written = 0
        self.sent = 0

    def wrote(self, size: int, held: int) -> None:
        """``size`` more bytes written to a transport, which then held ``held`` bytes."""
        self.written += size
        # What the transport still holds may include bytes written before these: never more than sent.
        self.sent = max(self.sent, self.written - held)


class Drain:
    """Waits until a transport's write buffer is empty, through the protocol's pause/resume calls."""

    __slots__ = ("paused", "_waiter", "_marks", "beneath", "_beneath_marks")

    def __init__(self) -> None:
        self.paused = False
        self._waiter: asyncio.Future[None] | None = None
        self._marks: tuple[int, int] | None = None  # the transport's own (low, high) while lowered to zero
        # Under TLS, the socket's transport beneath it (assetcdn/edge/tls/site.py `TlsProtocol`): TLS passes it
        # every record it seals at once, and it holds what the kernel did not take, which the TLS transport's
        # write buffer size leaves out. None on a plain connection.
        self.beneath: asyncio.WriteTransport | None = None
        self._beneath_marks: tuple[int, int] | None = None

    def held(self, transport: asyncio.WriteTransport) -> int:
        """The bytes written to `transport` that have not reached the kernel: what it holds, and under TLS what
        the socket's transport beneath it holds (sealed, so a little more than the bytes they carry)."""
        beneath = self.beneath
        if beneath is None:
            return transport.get_write_buffer_size()
        return transport.get_write_buffer_size() + beneath.get_write_buffer_size()

    def gone(self, transport: asyncio.WriteTransport) -> bool:
        """The connection is ending: `transport` is closing, or under TLS the socket's transport beneath is. A socket
        transport whose write failed (the client reset the connection) is closing from that write on and drops
        whatever it is handed later, holding none of it, while TLS above it hears of the loss only a turn of the loop
        later: what is written from then on never reaches the kernel, and must not be counted as sent."""
        beneath = self.beneath
        return transport.is_closing() or (beneath is not None and beneath.is_closing())

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def waiter(self) -> asyncio.Future[None]:
        """Resolved by the next resume_writing (or failed by connection_lost)."""
        if self._waiter is None or self._waiter.done():
            self._waiter = asyncio.get_running_loop().create_future()
        return self._waiter

    def connection_lost(self) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(ConnectionResetError("connection lost"))

    def lower_marks(self, transport: asyncio.WriteTransport) -> bool:
        """Water marks of zero until `restore_marks`: the transport pauses the protocol while it holds any
        byte and resumes it the moment it holds none. False when they already were lowered."""
        if self._marks is not None:
            return False
        self._marks = transport.get_write_buffer_limits()
        # A TLS transport pauses at a size >= its mark: with zero it would pause holding nothing, and
        # stay paused, as nothing more it holds would resume it.
        high = 1 if transport.get_extra_info("sslcontext") is not None else 0
        transport.set_write_buffer_limits(high=high, low=0)
        beneath = self.beneath
        if beneath is not None and not beneath.is_closing():
            # The socket's transport pauses TLS while it holds any byte and resumes it once it holds none, which
            # TLS tells the connection (`TlsProtocol.resume_writing`): the TLS transport may hold none before.
            self._beneath_marks = beneath.get_write_buffer_limits()
            beneath.set_write_buffer_limits(high=0, low=0)
        return True

    def restore_marks(self, transport: asyncio.WriteTransport) -> None:
        marks, self._marks = self._marks, None
        if marks is not None:
            transport.set_write_buffer_limits(high=marks[1], low=marks[0])
        marks, self._beneath_marks = self._beneath_marks, None
        beneath = self.beneath
        if marks is not None and beneath is not None and not beneath.is_closing():
            beneath.set_write_buffer_limits(high=marks[1], low=marks[0])

    def full(self, transport: asyncio.WriteTransport) -> bool:
        """The client is behind: the transport paused the protocol, and holds more than its own high-water
        mark (marks lowered to zero pause it at any byte held, which is no reason to stop writing)."""
        if not self.paused:
            return False
        marks = self._marks
        return marks is None or transport.get_write_buffer_size() > marks[1]

    async def wait_empty(self, transport: asyncio.WriteTransport) -> None:
        """Return once the transport holds no unsent bytes (a low-water mark of zero)."""
        if not transport.get_write_buffer_size():
            return
        lowered = self.lower_marks(transport)
        try:
            while transport.get_write_buffer_size():
                if transport.is_closing():
                    raise ConnectionResetError("connection closing")
                # The transport pauses us while it holds more than the mark (zero) and resumes us once
                # it has sent everything.
                self._waiter = asyncio.get_running_loop().create_future()
                await self._waiter
        finally:
            if lowered:
                self.restore_marks(transport)


def _socket_fd(transport: asyncio.BaseTransport) -> int:
    sock = transport.get_extra_info("socket")
    if sock is None:
        raise ConnectionResetError("transport has no socket")
    fd = sock.fileno() if not isinstance(sock, int) else sock
    if fd < 0:
        raise ConnectionResetError("socket closed")
    return int(fd)


async def _writable(fd: int) -> None:
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()
    loop.add_writer(fd, lambda: ready.done() or ready.set_result(None))  # type: ignore[func-returns-value]
    try:
        await ready
    finally:
        loop.remove_writer(fd)


def send_file_nowait(transport: asyncio.WriteTransport, fileno: int, offset: int, count: int,
                     progress: Progress) -> int:
    """As much of the range as the socket takes now, without waiting; the transport must hold no
    unsent bytes. Returns the bytes sent (also added to ``progress``); raises OSError (not
    BlockingIOError) on a broken socket."""
    fd = _socket_fd(transport)
    sent_total = 0
    while count > 0:
        try:
            sent = os.sendfile(fd, fileno, offset, min(count, SENDFILE_CHUNK))
        except (BlockingIOError, InterruptedError):
            break
        if sent == 0:
            raise ConnectionResetError("file shorter than expected")
        offset += sent
        count -= sent
        sent_total += sent
        progress.sent += sent
    return sent_total


async def send_file(transport: asyncio.WriteTransport, drain: Drain, fileno: int, offset: int,
                    count: int, progress: Progress) -> None:
    """Send ``count`` bytes of the open file ``fileno`` from ``offset`` after everything already
    written to ``transport``, counting them in ``progress``. Raises ConnectionError if the client
    goes away."""
    await drain.wait_empty(transport)
    fd = os.dup(_socket_fd(transport))
    try:
        while count > 0:
            if transport.is_closing():
                raise ConnectionResetError("connection closing")
            try:
                sent = os.sendfile(fd, fileno, offset, min(count, SENDFILE_CHUNK))
            except BlockingIOError:
                await _writable(fd)
                continue
            except InterruptedError:
                continue
            except OSError as exc:
                raise ConnectionResetError(str(exc)) from exc
            if sent == 0:
                raise ConnectionResetError("file shorter than expected")  # truncated cache file
            offset += sent
            count -= sent
            progress.sent += sent
    finally:
        os.close(fd)


WRITE_CHUNK = 256 * 1024  # read from the file per write when the bytes must pass through TLS
TLS_PIECE = 64 * 1024     # of a body already in memory, written to TLS at once


async def _drained(transport: asyncio.WriteTransport, drain: Drain, timeout_s: float | None) -> None:
    """Wait while the transport holds too much; TimeoutError when the client took nothing for ``timeout_s``
    (None: no limit)."""
    while drain.full(transport):
        await asyncio.wait_for(drain.waiter(), timeout_s)


async def write_file(transport: asyncio.WriteTransport, drain: Drain, fileno: int, offset: int, count: int,
                     progress: Progress, timeout_s: float | None) -> None:
    """``send_file`` for a transport that must see the bytes (TLS encrypts them): the file is read in
    chunks and written, each once the client has read enough of the previous ones (the transport
    paused the protocol meanwhile), counted in ``progress``. Raises TimeoutError when the client reads
    nothing for ``timeout_s``."""
    while count > 0:
        await _drained(transport, drain, timeout_s)
        if drain.gone(transport):
            raise ConnectionResetError("connection closing")
        chunk = os.pread(fileno, min(count, WRITE_CHUNK), offset)
        if not chunk:
            raise ConnectionResetError("file shorter than expected")
        transport.write(chunk)
        if drain.gone(transport):  # the socket failed this write: none of it was sent
            raise ConnectionResetError("connection lost")
        offset += len(chunk)
        count -= len(chunk)
        progress.wrote(len(chunk), drain.held(transport))


async def write_views(transport: asyncio.WriteTransport, drain: Drain, views: list[memoryview],
                      progress: Progress, timeout_s: float | None) -> None:
    """``write_file`` for bytes already in memory (a hit's body): written TLS_PIECE at a time, as views."""
    for view in views:
        while view:
            await _drained(transport, drain, timeout_s)
            if drain.gone(transport):
                raise ConnectionResetError("connection closing")
            piece = view[:TLS_PIECE]
            transport.write(piece)
            if drain.gone(transport):  # the socket failed this write: none of it was sent
                raise ConnectionResetError("connection lost")
            progress.wrote(len(piece), drain.held(transport))
            view = view[TLS_PIECE:]


class PacedWrites:
    """An application's answers over TLS HTTP/1.1 (assetcdn/edge/fastpath/protocol.py: a request handed over to it,
    or a connection given to it for good). TLS seals at once whatever it is handed and the socket's transport beneath
    keeps what the kernel does not take, so a write larger than TLS_PIECE would be held sealed whole for a client
    that reads nothing. Such a write is handed to TLS a TLS_PIECE at a time, as `write_views` does a hit's body: each
    while the TLS transport has not paused its protocol (`Drain.full`), the rest kept as views of the bytes written
    (never copies), and every write after it kept behind them, in order. While it keeps any, or TLS paused the
    connection, the application (`app`, its protocol) is paused; one that stays paused with no byte taken by the
    client for `send_timeout_s` is cut off (`cut_off`), as the hit path cuts off its own answers. Smaller writes go
    straight to TLS, which costs one length check.

    A mixin of the transport the application writes to, in front of the TLS transport (`_transport`); `pace` sets
    it up (no object of its own: nothing refers back to the transport, which the garbage collector would have to
    free)."""

    _transport: asyncio.Transport

    def pace(self, drain: Drain, send_timeout_s: float | None) -> None:
        self.drain = drain
        self.app: asyncio.BaseProtocol | None = None
        self.pieces: deque[memoryview] | None = None  # made by the first write kept
        self.held = 0  # the bytes of `pieces` (and of those dropped: `drop`)
        self.dropped = False
        self.pumping = False
        self.app_paused = False
        self.send_timeout_s = send_timeout_s
        self.timer: asyncio.TimerHandle | None = None
        self.moved_at = 0.0  # loop time the client last took bytes while the application was paused

    def cut_off(self) -> None:
        """End the connection at once: its client took none of the answer for the send timeout."""
        raise NotImplementedError

    def keep(self, data: Any) -> None:
        """`data` behind what is kept already (a view of it; a copy only of a buffer its writer could change)."""
        view = memoryview(data)
        if not view.readonly:
            view = memoryview(bytes(view))
        elif view.itemsize != 1:
            view = view.cast("B")
        if view:
            if self.pieces is None:
                self.pieces = deque()
            self.pieces.append(view)
            self.held += len(view)

    def pump(self) -> int:
        """Hand TLS what is kept, a piece at a time, while it takes them; the bytes handed. Then the application
        is paused or resumed as the pieces and TLS allow."""
        handed = 0
        pieces = self.pieces
        if pieces and not self.pumping:
            transport, drain = self._transport, self.drain
            self.pumping = True  # a write may pause or resume the connection at once: no second pump within it
            try:
                while pieces and not drain.full(transport):
                    # The client gone (`Drain.gone`): nothing more is handed, or it would seem to have been sent.
                    if drain.gone(transport):
                        self.drop()
                        break
                    view = pieces[0]
                    if len(view) > TLS_PIECE:
                        piece = view[:TLS_PIECE]
                        pieces[0] = view[TLS_PIECE:]
                    else:
                        piece = pieces.popleft()
                    self.held -= len(piece)
                    handed += len(piece)
                    transport.write(piece)
            finally:
                self.pumping = False
        self.settle()
        return handed

    def resumed(self) -> int:
        """The TLS transport resumed the connection (the client took bytes): `pump`."""
        if self.app_paused:
            self.moved_at = asyncio.get_running_loop().time()
        return self.pump()

    def settle(self) -> None:
        """Pause the application while anything is kept or TLS paused the connection; resume it otherwise."""
        app = self.app
        if app is None:
            return
        paused = bool(self.pieces) or self.drain.paused or self.dropped
        if paused == self.app_paused:
            return
        self.app_paused = paused
        if paused:
            app.pause_writing()
            if self.send_timeout_s is not None and self.timer is None:
                loop = asyncio.get_running_loop()
                self.moved_at = loop.time()
                self.timer = loop.call_later(self.send_timeout_s, self._expired)
        else:
            self._disarm()
            app.resume_writing()

    def drop(self) -> None:
        """The connection is ending at once (aborted, lost): nothing kept is sent. `held` still counts it (written,
        never sent: what a delivery counts as sent leaves it out), and the application stays paused until it hears
        that the connection is lost (its answer is not done)."""
        if self.pieces:
            self.pieces.clear()
        self.dropped = True
        self._disarm()

    def _disarm(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _expired(self) -> None:
        self.timer = None
        if not self.app_paused or self.send_timeout_s is None:
            return
        loop = asyncio.get_running_loop()
        left = self.moved_at + self.send_timeout_s - loop.time()
        if left > 0:
            self.timer = loop.call_later(left, self._expired)
            return
        self.drop()
        self.cut_off()


def keep_alive_probes(listening: socket.socket) -> None:
    """TCP keep-alive probes on every connection a listening socket accepts, as aiohttp sets them on its
    connections: Linux copies the option to each accepted socket, so no connection pays a system call
    (and uvloop a socket object) for it."""
    try:
        listening.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    except OSError:
        pass
