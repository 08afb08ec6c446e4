"""A fill's body while the fill reads it, for the requests that waited for its URL (assetcdn/edge/states/pull.py).

A fill that keeps a body of declared length streams it to its own client as it arrives (`pull.keep`). The requests
for the same URL that arrive meanwhile join its flight. Before this module they waited until the whole body was
stored: for a long video that was the whole download, up to `body_timeout_s` (then each asked the origin itself).
Now they are answered as the fill goes (`pull.deliver_growing`): the head at once, the body's bytes as the fill
has them, each waiting request at its own pace.

- The bytes come from the fill's own copy of the body (its spool, `pull.new_spool`): the first SPOOL_MEMORY bytes
  from the chunks the fill read (references, not copies), the rest read back from the spool's temporary file by a
  descriptor of this object's own (``os.pread``, off the event loop), which the fill flushes after each write. A
  reader never sets the fill's pace: the fill reads at the origin's pace whatever its readers take.
- A request joins only a fill that is still being read, and only while no purge was published since the fill asked
  the origin (the cache's purge mark): after one, it waits for what is stored, as before, which the purge may have
  kept out.
- A fill that ends short (the origin's body failed, the spool's file failed) ends its readers' answers short too:
  their connections are closed short of the Content-Length, as the fill's own client's is, never an answer that
  looks complete.
- The descriptor and the chunks are let go once the fill is over and its last reader has left.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import os
from collections.abc import AsyncIterator
from typing import IO, Any

# A reader's piece of the spool's file: read back this many bytes at a time.
PIECE = 256 * 1024


class EndedShort(Exception):
    """The fill ended before the bytes a reader asks for (its origin's body failed, or it was not kept)."""


class Growing:
    """One fill's body as it is read (module docstring). The fill calls `begin` with the stored head, `add` after
    each chunk is in its spool, then `end`; readers `join`, read `pieces`, and `leave`."""

    __slots__ = ("declared", "memory_limit", "stored", "mark", "written", "ended", "_chunks", "_starts",
                 "_memory_end", "_fd", "_readers", "_changed")

    def __init__(self, declared: int, memory_limit: int) -> None:
        self.declared = declared
        self.memory_limit = memory_limit  # the spool's: past it the bytes are in its temporary file
        self.stored: Any = None  # the head as it is stored (pull.StoredResponse), once `begin` has it
        self.mark: int | None = None  # the cache's purge mark when the fill asked the origin
        self.written = 0  # bytes readers may read
        self.ended: bool | None = None  # None while read; True: whole; False: ended short
        self._chunks: list[bytes] = []
        self._starts: list[int] = []
        self._memory_end = 0
        self._fd: int | None = None
        self._readers = 0
        self._changed: asyncio.Future[None] | None = None

    # --- the fill ---------------------------------------------------------------------------------------------------

    def begin(self, stored: Any, mark: int | None) -> None:
        """The body is about to be read chunk by chunk: readers may join from now on."""
        self.stored, self.mark = stored, mark
        self._wake()

    def add(self, chunk: bytes, spool: IO[bytes]) -> None:
        """`chunk` is in `spool` (flushed to its file once past `memory_limit`), after the bytes before it."""
        start = self.written
        if start < self.memory_limit:
            self._chunks.append(chunk)
            self._starts.append(start)
            self._memory_end = start + len(chunk)
        elif self._fd is None:
            self._fd = os.dup(spool.fileno())  # rolled over to its file by now (`pull.spool_write`)
        self.written = start + len(chunk)
        self._wake()

    def end(self, whole: bool) -> None:
        """The fill is over: every byte read (`whole`), or ended short. Once; later calls do nothing."""
        if self.ended is not None:
            return
        self.ended = whole and self.written == self.declared
        self._wake()
        self._let_go()

    # --- the readers ------------------------------------------------------------------------------------------------

    def joinable(self, mark: int) -> bool:
        """Whether a request may be answered from this fill now: being read, and no purge since it asked the origin
        (`mark`: the cache's purge mark now)."""
        return self.stored is not None and self.ended is None and self.mark == mark

    def join(self) -> None:
        """A reader from now until its `leave` (its bytes stay readable meanwhile)."""
        self._readers += 1

    def leave(self) -> None:
        self._readers -= 1
        self._let_go()

    async def begun_or(self, kept: asyncio.Future[Any]) -> None:
        """Wait until the body is being read (`begin`), or the fill is over (`kept` done, or `end`)."""
        while self.stored is None and self.ended is None and not kept.done():
            waiter = self._waiter()
            kept.add_done_callback(self._kept_done)
            try:
                await asyncio.shield(waiter)
            finally:
                kept.remove_done_callback(self._kept_done)

    async def pieces(self, start: int, end: int) -> AsyncIterator[bytes]:
        """The bytes `start` to `end` as the fill has them (the caller has joined); EndedShort when it ends first."""
        loop = asyncio.get_running_loop()
        at = start
        while at < end:
            if at >= self.written:
                if self.ended is not None:
                    raise EndedShort(f"the fill ended at byte {self.written} of {self.declared}")
                await asyncio.shield(self._waiter())
                continue
            if at < self._memory_end:
                index = bisect.bisect_right(self._starts, at) - 1
                chunk, offset = self._chunks[index], at - self._starts[index]
                piece = chunk[offset:offset + (end - at)] if offset or len(chunk) > end - at else chunk
            else:
                fd = self._fd
                if fd is None:
                    raise EndedShort("the fill's temporary file is gone")
                size = min(PIECE, end - at, self.written - at)
                piece = await loop.run_in_executor(None, os.pread, fd, size, at)
                if not piece:
                    raise EndedShort("the fill's temporary file ended before its length")
            at += len(piece)
            yield piece

    # --- inner --------------------------------------------------------------------------------------------------------

    def _waiter(self) -> asyncio.Future[None]:
        changed = self._changed
        if changed is None or changed.done():
            changed = self._changed = asyncio.get_running_loop().create_future()
        return changed

    def _kept_done(self, _kept: asyncio.Future[Any]) -> None:
        self._wake()

    def _wake(self) -> None:
        changed, self._changed = self._changed, None
        if changed is not None and not changed.done():
            changed.set_result(None)

    def _let_go(self) -> None:
        if self.ended is None or self._readers > 0:
            return
        self._chunks, self._starts, self._memory_end = [], [], 0
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)
