"""A fill's first client sent its body at its own pace, apart from the fill (assetcdn/edge/states/pull.py `keep`).

A fill that keeps its answer reads the origin at the origin's pace and stores the answer once it is read: the
requests waiting for the URL are answered from the cache then, however slowly the client that asked first reads.
That client is sent the body by a task of its own (`ClientFeed`): the chunks the fill reads are queued for it up
to QUEUE_BYTES; past that the client lags, the fill queues no more, and what the client has still to be sent is
read back from the fill's own copy of the body (its spool: `rest_of`) once the fill is done, as fast as the client
takes it. A client that takes nothing for the send timeout is cut off by the send rule (`pull.sent_in_time`), as
before; the fill does not wait for it either way.

What lagging clients hold (each a copy of up to 1 MB in memory, or its fill's temporary file, up to the object
size limit) is bounded by how many may lag at once in a worker, MAX_LAGGING: past it, a client behind its queue
sets the pace of its fill again (`room`), as every fill's first client did before, holding its origin connection
(whose pool bounds those). An HTTP/1.1 connection asks one thing at a time, so it holds one of those places at
most; an HTTP/2 connection's streams (assetcdn/edge/tls/h2.py) hold CONNECTION_LAGGING at most, so that one
client opening many streams it does not read cannot take them all: past it, its next client behind its queue sets
its fill's pace. A connection's count (`LagPlaces`) is its transport's `lag_places`, looked up once a client would
first lag (None: one request at a time, counted by the worker's bound alone).

A lagging client is sent nothing more until its fill ends: a client that goes meanwhile (its connection closed or
reset, its HTTP/2 stream reset) would hold its places until then, were it not for its connection's `watch`, which
the feed is given by its fill and which tells it, while it lags, that its client's connection is lost: its places
come back at once, and the fill reads on into the cache without it. Set only when a client starts to lag: nothing
for one that keeps up. (A client that only half-closes its connection, which HTTP/1.1 allows while it waits for its
answer, is still there: a lagging one that so closes it keeps its places until its feed next sends.)

A body of no declared length (chunked) may turn out longer than the object size limit: the fill then keeps it no
longer, and its copy goes (`keep_pace`). A lagging client is first sent what it had still to be sent of that copy
(read back from it before it went), then the rest of the body as the fill reads it, and from then on the client
sets the fill's pace, as for an answer that is not kept.
"""

from __future__ import annotations

import asyncio
import io
import logging
import os
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import IO, Any, Protocol

# What a client may have queued for it beside what its connection holds; past it, it lags (module docstring).
QUEUE_BYTES = 256 * 1024
# Clients lagging behind their fills at once in a worker (module docstring).
MAX_LAGGING = 32
# ... and of them, the streams of one HTTP/2 connection: a quarter, more than a browser's six HTTP/1.1 connections
# to a host hold (module docstring).
CONNECTION_LAGGING = MAX_LAGGING // 4
# A lagging client's rest is read back from the spool's file in pieces of this many bytes.
REST_PIECE = 256 * 1024

Send = Callable[[bytes], Awaitable[bool]]
# Have the callback called once the client's connection is lost, or no longer (None): its fill's (module docstring).
Watch = Callable[[Callable[[], None] | None], None]

log = logging.getLogger(__name__)


class LagPlaces(Protocol):
    """A connection whose requests may lag behind their fills several at once (an HTTP/2 connection): how many do."""

    lagging: int


class Rest:
    """What a lagging client is still to be sent: `data` (the spool was in memory), or the bytes `start` to `end`
    of a descriptor of the spool's temporary file, `fd` (this object's own: closed by `close`)."""

    __slots__ = ("data", "fd", "start", "end")

    def __init__(self, data: bytes | None, fd: int | None, start: int, end: int) -> None:
        self.data, self.fd, self.start, self.end = data, fd, start, end

    async def pieces(self) -> AsyncIterator[bytes]:
        if self.data is not None:
            view = memoryview(self.data)
            for at in range(0, len(view), REST_PIECE):
                yield bytes(view[at:at + REST_PIECE])
            return
        assert self.fd is not None
        loop = asyncio.get_running_loop()
        at = self.start
        while at < self.end:  # a read off the event loop: the file may not be in the page cache any more
            piece = await loop.run_in_executor(None, os.pread, self.fd, min(REST_PIECE, self.end - at), at)
            if not piece:
                raise OSError("the spool ended before its length")
            at += len(piece)
            yield piece

    def close(self) -> None:
        fd, self.fd = self.fd, None
        if fd is not None:
            os.close(fd)


def rest_of(spool: IO[bytes], start: int, in_memory: int) -> Rest:
    """The bytes of `spool` from `start` to its end (its position, which stays where it is), taken before the
    spool is handed on and closed (`pull.store`): copied from memory (a BytesIO, or a SpooledTemporaryFile still
    within `in_memory`, its size limit), or a descriptor of its file of their own."""
    end = spool.tell()
    if isinstance(spool, io.BytesIO):
        return Rest(spool.getbuffer()[start:end].tobytes(), None, start, end)
    if end <= in_memory:  # not rolled over to its file: read, not written to a file on the event loop
        spool.seek(start)
        data = spool.read()
        spool.seek(end)
        return Rest(data, None, start, end)
    return Rest(None, os.dup(spool.fileno()), start, end)


class ClientFeed:
    """Sends a fill's body to its client by a task of its own (module docstring): `offer` each chunk the fill
    reads, then `finish` once the fill is done (or `cancel`, when the origin's body failed). `transport`: the
    client's, whose `lag_places` (module docstring) is its connection's count; `watch`: its connection's (module
    docstring)."""

    lagging_now = 0  # the feeds lagging in this process (its one event loop's): at most MAX_LAGGING

    def __init__(self, send: Send, transport: Any = None, watch: Watch | None = None) -> None:
        self._send = send  # False once the client is gone or cut off
        self._watch = watch  # told of `_lost` while the client lags
        self._transport = transport  # until its connection's places are looked up (`_lag`)
        self._places: LagPlaces | None = None  # ... and found: the count this feed's place is in while it lags
        # What the client is to be sent, in order: the fill's chunks, and a lagging client's rest (`finish`,
        # `keep_pace`), each Rest this feed's to close.
        self._items: deque[bytes | Rest] = deque()
        self._queued = 0  # the bytes of the chunks among them
        self.offered = 0  # the body's bytes queued (or sent) so far: a lagging client's rest starts there
        self.lagging = False
        self.paced = False  # the fill's copy is gone (`keep_pace`): the client sets the fill's pace from now on
        self.gone = False
        self._ended = False
        self._more: asyncio.Future[None] | None = None
        self._room: asyncio.Future[None] | None = None
        self._task = asyncio.get_running_loop().create_task(self._run())

    def offer(self, chunk: bytes) -> None:
        """The fill's next chunk: queued for the client, unless it lags or is gone. Past the queue's bound the
        client lags, while fewer than MAX_LAGGING do (and fewer than CONNECTION_LAGGING of its connection's
        streams); else the chunk is queued all the same and the fill waits for `room` before it reads on."""
        if self.gone or (self.lagging and not self.paced) or self._task.done():  # (done: gone, or failed)
            return
        if (not self.paced and self._queued and self._queued + len(chunk) > QUEUE_BYTES
                and ClientFeed.lagging_now < MAX_LAGGING and self._lag()):
            return
        self._items.append(chunk)
        self._queued += len(chunk)
        self.offered += len(chunk)
        self._wake()

    def keep_pace(self, rest: Rest | None) -> None:
        """The fill keeps the body no longer (past the object size limit) and its copy goes: a lagging client is
        sent `rest` (what it had not been offered, taken from that copy before it went; this feed's to close)
        before the chunks offered from now on, and the client sets the fill's pace (`behind`) from now on."""
        self.paced = True
        if rest is None:
            return
        if self.gone or self._task.done():
            rest.close()
            return
        self._items.append(rest)
        self._wake()

    @property
    def stopped(self) -> bool:
        """Whether the client is sent nothing more while the fill reads on: it is gone or cut off (or its feed
        failed). A fill that keeps nothing (`keep_pace`) then stops reading."""
        return self.gone or self._task.done()

    @property
    def behind(self) -> bool:
        """Whether the fill should wait for the client (`room`): its queue is past the bound and it may not lag."""
        return (self.paced or not self.lagging) and not self.gone and self._queued > QUEUE_BYTES

    async def room(self) -> None:
        """Wait while the client is `behind`: it takes its queue at its pace (or goes, or is cut off)."""
        while self.behind and not self._task.done():
            self._room = asyncio.get_running_loop().create_future()
            await self._room

    async def finish(self, rest: Rest | None) -> bool:
        """The fill is done; `rest` (this feed's to close) holds the body past `offered` when the client lags.
        Waits until the client has been sent the whole body or is gone: whether it has been sent it all."""
        if self._task.done():  # gone already (or failed: raised here)
            if rest is not None:
                rest.close()
            return await self._task
        if rest is not None:
            if self.gone:  # lost while it lagged (`_lost`): nothing more is sent
                rest.close()
            else:
                self._items.append(rest)
        self._ended = True
        self._wake()
        return await self._task  # cancelled with the caller

    def cancel(self) -> None:
        """Stop sending (the origin's body failed, or the fill ended otherwise): the caller ends the answer."""
        task = self._task
        if not task.done():
            task.cancel()
        elif not task.cancelled() and task.exception() is not None:  # retrieved: raised by `finish` if awaited
            log.debug("a fill's client feed failed", exc_info=task.exception())
        self._drop_queued()  # a task cancelled before it ran never reaches its own `finally`

    def _drop_queued(self) -> None:
        """Nothing more is sent: the rests still queued are closed (one being sent is no longer among them, and
        closes itself), the queue emptied, and the client's place among the lagging given back."""
        for item in self._items:
            if isinstance(item, Rest):
                item.close()
        self._items.clear()
        self._queued = 0
        self._unlag()

    def _lag(self) -> bool:
        """Take a place among the lagging (the worker has one free): unless the client's connection holds
        CONNECTION_LAGGING already. Its connection's count is looked up the first time, never on a fill whose
        client keeps up."""
        transport, self._transport = self._transport, None
        if transport is not None:
            self._places = getattr(transport, "lag_places", None)
        places = self._places
        if places is not None:
            if places.lagging >= CONNECTION_LAGGING:
                return False
            places.lagging += 1
        ClientFeed.lagging_now += 1
        self.lagging = True
        if self._watch is not None:
            self._watch(self._lost)  # called at once when the connection is lost already
        return True

    def _unlag(self) -> None:
        if self.lagging:
            self.lagging = False
            ClientFeed.lagging_now -= 1
            if self._places is not None:
                self._places.lagging -= 1
            if self._watch is not None:
                self._watch(None)

    def _lost(self) -> None:
        """The lagging client's connection is lost (`watch`): its places come back now, not once the fill ends (its
        task waits for the fill's next chunk, or for its end, and is sent nothing before); nothing more is sent."""
        self.gone = True
        self._drop_queued()
        self._wake()  # its task ends (one in a send learns it from the send)
        self._roomy()

    def _wake(self) -> None:
        more, self._more = self._more, None
        _resolve(more)

    def _roomy(self) -> None:
        room, self._room = self._room, None
        _resolve(room)

    async def _run(self) -> bool:
        try:
            while True:
                if self._items:
                    item = self._items.popleft()
                    if isinstance(item, Rest):
                        try:
                            async for piece in item.pieces():
                                if not await self._send(piece):
                                    self.gone = True
                                    return False
                        finally:
                            item.close()
                        continue
                    self._queued -= len(item)
                    if not await self._send(item):
                        self.gone = True
                        return False
                    if self._queued <= QUEUE_BYTES:
                        self._roomy()
                    continue
                if self._ended:
                    return True
                self._more = asyncio.get_running_loop().create_future()
                await self._more
                if self.gone:  # lost while it lagged (`_lost`)
                    return False
        finally:
            self._drop_queued()
            self._roomy()  # a fill waiting for room reads on: the client is done or gone


def _resolve(waiter: asyncio.Future[None] | None) -> None:
    if waiter is not None and not waiter.done():
        waiter.set_result(None)
