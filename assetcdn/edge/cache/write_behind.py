"""Write-behind for the disk tier: entries the memory tier holds already reach disk in batches, one SQLite
transaction per batch, from one writer thread.

A cache fill's response is in the memory tier (so the next request of this worker is a hit) before its disk
write, which then costs the filling request nothing: the writer takes every entry queued meanwhile in one
transaction (a commit and the index pages it touches shared by the batch). Rules that keep the tiers agreeing:

- an entry is written only while the memory tier still holds that very object: one purged (here, or by
  another worker once replayed), replaced by a newer response or evicted before its turn is not written;
- a purge on this worker writes what is queued first (a soft purge marks it stale on disk) and holds ``lock``
  for its memory and disk steps; the writer holds it from that check to the commit: a purge never runs between
  them, so it cannot miss an entry that lands after it;
- ``flush`` writes what is queued at once (shutdown, and callers that need the disk tier current).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from concurrent.futures import Executor

from assetcdn.edge.cache.disk import DiskTier
from assetcdn.edge.cache.entry import CachedObject
from assetcdn.edge.cache.memory import MemoryTier

log = logging.getLogger(__name__)
# A batch is handed to the writer this long after its first entry: the fills arriving meanwhile join it, and
# the event loop hands work to the writer thread (an executor submit) once per batch rather than once per fill.
GATHER_S = 0.05


class WriteBehind:
    def __init__(self, memory: MemoryTier, disk: DiskTier, *, gather_s: float = GATHER_S) -> None:
        self._memory = memory
        self._gather_s = gather_s
        self._disk = disk
        self._queue: list[CachedObject] = []
        self._scheduled = False
        self._queue_lock = threading.Lock()  # the queue and the flag only: held for microseconds
        self.lock = threading.RLock()        # a batch's check and commit; a purge's memory and disk steps

    def __len__(self) -> int:
        return len(self._queue)

    def add(self, obj: CachedObject, writer: Executor) -> None:
        """Queue ``obj`` (in the memory tier already) for the disk tier; `writer` runs the batch, ``GATHER_S``
        later when called on an event loop (the loop's timer: the writer thread is not held meanwhile)."""
        with self._queue_lock:
            self._queue.append(obj)
            start, self._scheduled = not self._scheduled, True
        if start:
            try:
                asyncio.get_running_loop().call_later(self._gather_s, self._submit, writer)
            except RuntimeError:  # no event loop here: at once
                self._submit(writer)

    def _submit(self, writer: Executor) -> None:
        try:
            writer.submit(self._drain)
        except RuntimeError:  # the executor is shut down (the process is stopping): written here
            self._drain()

    def flush(self) -> None:
        """Write everything queued now, in the calling thread."""
        with self.lock:
            self._write(self._take())

    def _take(self) -> list[CachedObject]:
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

    def _write(self, batch: list[CachedObject]) -> None:
        held = self._memory.get
        current = [obj for obj in batch if held(obj.key) is obj]
        if not current:
            return
        try:
            self._disk.put_many(current)
        except Exception:  # a cache write failing must not stop later ones: the entry stays memory-only
            log.exception("edge cache: %d entries could not be written to the disk tier", len(current))
