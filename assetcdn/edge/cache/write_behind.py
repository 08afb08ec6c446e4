"""Write-behind for the disk tier: entries the memory tier holds already reach disk in batches, one SQLite
transaction per batch, from one writer thread.

A cache fill's response is in the memory tier (so the next request of this worker is a hit) before its disk
write, which then costs the filling request nothing: the writer takes every entry queued meanwhile in one
transaction (a commit and the index pages it touches shared by the batch). Rules that keep the tiers agreeing:

- an entry is written only while the memory tier still holds that very object: one purged, replaced by a newer
  response or evicted before its turn is not written. The purges other workers made are replayed on the memory
  tier first, inside the batch's SQLite write transaction, so a purge another worker logged before the batch
  commits removes the entry from the batch (a purge logged after it removes the written row);
- a purge on this worker writes what is queued first (a soft purge marks it stale on disk) and holds ``lock``
  for its memory and disk steps; the writer holds it from that check to the commit: a purge never runs between
  them, so it cannot miss an entry that lands after it;
- ``flush`` writes what is queued at once (shutdown, and callers that need the disk tier current);
- ``close`` waits for a batch under way for a bounded time only (each batch's writes are bounded too, see
  assetcdn/edge/cache/disk.py), and after it nothing more is written: what is still queued stays in memory.

When the node's other workers read the same disk tier, a fill must be there before its client has the whole
answer (the next request may reach another worker): the caller then waits for its entry's batch (``wait``),
which is group commit, the fills that arrive while the writer is busy sharing its next transaction.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Executor

from assetcdn.edge.cache.disk import DiskTier
from assetcdn.edge.cache.entry import CachedObject
from assetcdn.edge.cache.memory import MemoryTier

log = logging.getLogger(__name__)
# A batch is handed to the writer this long after its first entry: the fills arriving meanwhile join it, and
# the event loop hands work to the writer thread (an executor submit) once per batch rather than once per fill.
GATHER_S = 0.05


Waiter = tuple[asyncio.AbstractEventLoop, "asyncio.Future[None]"]


class WriteBehind:
    def __init__(self, memory: MemoryTier, disk: DiskTier, *, sync_purges: Callable[[], None],
                 gather_s: float = GATHER_S) -> None:
        self._memory = memory
        self._sync_purges = sync_purges  # replays other workers' purges on the memory tier
        self._gather_s = gather_s
        self._disk = disk
        self._queue: list[tuple[CachedObject, Waiter | None]] = []
        self._scheduled = False
        self._closed = False
        self._queue_lock = threading.Lock()  # the queue and the flag only: held for microseconds
        self.lock = threading.RLock()        # a batch's check and commit; a purge's memory and disk steps

    def add(self, obj: CachedObject, writer: Executor, *, wait: bool = False) -> asyncio.Future[None] | None:
        """Queue ``obj`` (in the memory tier already) for the disk tier; `writer` runs the batch. Without
        `wait`, ``GATHER_S`` later when called on an event loop (the loop's timer: the writer thread is not held
        meanwhile). With `wait` (on an event loop), as soon as the writer is free, and the future returned is
        done once the batch holding ``obj`` is written (or failed: ``obj`` then stays in memory only)."""
        waiter: Waiter | None = None
        loop: asyncio.AbstractEventLoop | None
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if wait and loop is not None:
            waiter = (loop, loop.create_future())
        with self._queue_lock:
            self._queue.append((obj, waiter))
            start, self._scheduled = not self._scheduled, True
        if start:
            if loop is not None and waiter is None:
                loop.call_later(self._gather_s, self._submit, writer)
            else:
                self._submit(writer)
        return None if waiter is None else waiter[1]

    def _submit(self, writer: Executor) -> None:
        try:
            writer.submit(self._drain)
        except RuntimeError:  # the executor is shut down (the process is stopping): written here
            self._drain()

    def flush(self) -> None:
        """Write everything queued now, in the calling thread."""
        with self.lock:
            self._write(self._take())

    def close(self, wait_s: float) -> bool:
        """Write what is queued, then no more; False when the writer's batch under way did not end within
        `wait_s` (what is queued is then not written)."""
        if not self.lock.acquire(timeout=wait_s):
            self._closed = True
            log.warning("edge cache: the disk writer is still writing after %.0f s; closing without writing "
                        "the %d entries queued", wait_s, len(self._queue))
            return False
        try:
            self._write(self._take())
            self._closed = True
        finally:
            self.lock.release()
        return True

    def _take(self) -> list[tuple[CachedObject, Waiter | None]]:
        with self._queue_lock:
            batch, self._queue = self._queue, []
            return batch

    def _drain(self) -> None:
        while True:
            with self._queue_lock:
                if not self._queue:
                    self._scheduled = False
                    return
            with self.lock:
                self._write(self._take())

    def _current(self, entries: Sequence[CachedObject]) -> list[CachedObject]:
        """The entries the memory tier still holds, once the purges of other workers are replayed on it (none once
        closed: the purge log may be closed already)."""
        if self._closed:
            return []
        self._sync_purges()
        held = self._memory.get
        return [obj for obj in entries if held(obj.key) is obj]

    def _write(self, batch: list[tuple[CachedObject, Waiter | None]]) -> None:
        held = self._memory.get
        current = [] if self._closed else [obj for obj, _ in batch if held(obj.key) is obj]
        try:
            if current:
                self._disk.put_many(current, current=self._current)
        except Exception:  # a cache write failing must not stop later ones: the entry stays memory-only
            log.exception("edge cache: %d entries could not be written to the disk tier", len(current))
        finally:
            waiting: dict[asyncio.AbstractEventLoop, list[asyncio.Future[None]]] = {}
            for _, waiter in batch:
                if waiter is not None:
                    waiting.setdefault(waiter[0], []).append(waiter[1])
            for loop, futures in waiting.items():
                with contextlib.suppress(RuntimeError):  # that loop is closed: no one waits any more
                    loop.call_soon_threadsafe(_written, futures)


def _written(futures: list[asyncio.Future[None]]) -> None:
    for future in futures:
        if not future.done():
            future.set_result(None)
