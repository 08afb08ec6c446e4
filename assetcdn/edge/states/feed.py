"""A fill's first client sent its body at its own pace, apart from the fill (assetcdn/edge/states/pull.py `keep`).

A fill that keeps its answer reads the origin at the origin's pace and stores the answer once it is read: the
requests waiting for the URL are answered from the cache then, however slowly the client that asked first reads.
That client is sent the body by a task of its own (`ClientFeed`): the chunks the fill reads are queued for it up
to QUEUE_BYTES; past that the client lags, the fill queues no more, and what the client has still to be sent is
read back from the fill's own copy of the body (its spool: `rest_of`) once the fill is done, as fast as the client
takes it. A client that takes nothing for the send timeout is cut off by the send rule (`pull.sent_in_time`), as
before; the fill does not wait for it either way.
"""

from __future__ import annotations

import asyncio
import io
import os
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import IO

# What a client may have queued for it beside what its connection holds; past it, it lags (module docstring).
QUEUE_BYTES = 256 * 1024
# A lagging client's rest is read back from the spool's file in pieces of this many bytes.
REST_PIECE = 256 * 1024

Send = Callable[[bytes], Awaitable[bool]]


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


def rest_of(spool: IO[bytes], start: int) -> Rest:
    """The bytes of `spool` from `start` to its end (its position, which stays where it is), taken before the
    spool is handed on and closed (`pull.store`): copied from memory, or a descriptor of its file of their own."""
    end = spool.tell()
    if isinstance(spool, io.BytesIO):
        return Rest(spool.getbuffer()[start:end].tobytes(), None, start, end)
    return Rest(None, os.dup(spool.fileno()), start, end)  # a SpooledTemporaryFile: fileno() rolls it to its file


class ClientFeed:
    """Sends a fill's body to its client by a task of its own (module docstring): `offer` each chunk the fill
    reads, then `finish` once the fill is done (or `cancel`, when the origin's body failed)."""

    def __init__(self, send: Send) -> None:
        self._send = send  # False once the client is gone or cut off
        self._chunks: deque[bytes] = deque()
        self._queued = 0
        self.offered = 0  # the body's bytes queued (or sent) so far: a lagging client's rest starts there
        self.lagging = False
        self.gone = False
        self._ended = False
        self._rest: Rest | None = None
        self._more: asyncio.Future[None] | None = None
        self._task = asyncio.get_running_loop().create_task(self._run())

    def offer(self, chunk: bytes) -> None:
        """The fill's next chunk: queued for the client, unless it lags or is gone."""
        if self.gone or self.lagging:
            return
        if self._queued and self._queued + len(chunk) > QUEUE_BYTES:
            self.lagging = True
            return
        self._chunks.append(chunk)
        self._queued += len(chunk)
        self.offered += len(chunk)
        self._wake()

    async def finish(self, rest: Rest | None) -> bool:
        """The fill is done; `rest` (this feed's to close) holds the body past `offered` when the client lags.
        Waits until the client has been sent the whole body or is gone: whether it has been sent it all."""
        if self._task.done():  # gone already (or failed: raised here)
            if rest is not None:
                rest.close()
            return await self._task
        self._rest, self._ended = rest, True
        self._wake()
        return await self._task  # cancelled with the caller

    def cancel(self) -> None:
        """Stop sending (the origin's body failed, or the fill ended otherwise): the caller ends the answer."""
        self._task.cancel()

    def _wake(self) -> None:
        more, self._more = self._more, None
        if more is not None and not more.done():
            more.set_result(None)

    async def _run(self) -> bool:
        try:
            while True:
                if self._chunks:
                    chunk = self._chunks.popleft()
                    self._queued -= len(chunk)
                    if not await self._send(chunk):
                        self.gone = True
                        return False
                    continue
                if self._ended:
                    break
                self._more = asyncio.get_running_loop().create_future()
                await self._more
            if self._rest is not None:
                async for piece in self._rest.pieces():
                    if not await self._send(piece):
                        self.gone = True
                        return False
            return True
        finally:
            self._chunks.clear()
            self._queued = 0
            if self._rest is not None:
                self._rest.close()
