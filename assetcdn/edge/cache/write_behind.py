"""Write-behind for the disk tier: entries the memory tier holds already reach disk in batches, one SQLite
transaction per batch, from one writer thread.

What is written depends on whether other workers read the same disk tier:

- with other workers, each fill is queued (``add``) as it enters the memory tier: another worker may be asked
  for it next;
- on an edge with one worker, the memory tier is the first level and the disk tier the second (a victim cache):
  a fill is a ``MemoryOnly`` entry, not queued, and reaches disk only when the memory tier evicts it for room
  (it waits among the memory tier's victims for the next batch: assetcdn/edge/cache/memory.py) or when the
  cache is flushed or closed (``write_all``, bounded in time). A crash loses the memory-only entries (they are
  fetched again); an entry read back from disk is an ordinary one and is never written again on eviction.

A cache fill's response is in the memory tier (so the next request of this worker is a hit) before its disk
write, which then costs the filling request nothing: the writer takes every entry queued meanwhile in one
transaction (a commit and the index pages it touches shared by the batch). Rules that keep the tiers agreeing:

- an entry is written only while the memory tier still holds that very object (a victim: still among the
  victims): one purged or replaced by a newer response before its turn is not written. A queued fill the
  memory tier evicts before its turn is a victim until its batch (``MemoryTier.queued``), never let go: the disk
  tier may hold an older response under its key, which every worker would go on serving, and its fill waits. The purges other workers made are replayed on the memory tier first, inside the batch's SQLite
  write transaction, so a purge another worker logged before the batch commits removes the entry from the
  batch (a purge logged after it removes the written row);
- a purge on this worker writes what is queued and the victims first (a soft purge marks them stale on disk,
  and writes the memory-only entries it keeps stale before marking them) and holds ``lock`` for its memory
  and disk steps; the writer holds it from that check to the commit: a purge never runs between them, so it
  cannot miss an entry that lands after it. A memory-only entry the memory tier evicts during a purge, after
  that write, is a victim its memory step removes;
- ``flush`` writes what is queued and the victims at once; ``write_all`` (shutdown, and callers that need the
  disk tier current) the memory-only entries too;
- ``close`` waits for a batch under way for a bounded time only (each batch's writes are bounded too, see
  assetcdn/edge/cache/disk.py), writes the memory-only entries within what is left of that time, and after it
  nothing more is written: what is still queued stays in memory.

When the node's other workers read the same disk tier, a fill must be there before its client has the whole
answer (the next request may reach another worker): the caller then waits for its entry's batch (``wait``),
which is group commit, the fills that arrive while the writer is busy sharing its next transaction.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Executor

from assetcdn.edge.cache.disk import SEGMENT_SWEEP_AGE_S, DiskTier
from assetcdn.edge.cache.entry import CachedObject
from assetcdn.edge.cache.memory import MemoryTier
from assetcdn.edge.heap import can_trim, trim_heap
from assetcdn.shared.logs import LinePerInterval

log = logging.getLogger(__name__)
# Batches the disk tier refused (its disk or database failing): one line per interval while it goes on.
WRITE_FAILURES = LinePerInterval(log, 60.0)
# A batch is handed to the writer this long after its first entry: the fills arriving meanwhile join it, and
# the event loop hands work to the writer thread (an executor submit) once per batch rather than once per fill.
GATHER_S = 0.05
# ``write_all`` writes the memory-only entries this many to a transaction, checking its time bound between them.
UNWRITTEN_BATCH = 500
# Once evictions have stopped for TRIM_IDLE_S (no victim came or went), and victims costing TRIM_AFTER_BYTES have
# gone since the last time, the writer gives the heap's free pages back to the system (assetcdn/edge/heap.py):
# the victims' bodies were freed among live entries, and the process would stay at the backlog's peak. Not while
# evictions go on: fills reuse that room, and pages given back would be faulted in again.
TRIM_IDLE_S = 1.0
TRIM_AFTER_BYTES = 4 << 20


Waiter = tuple[asyncio.AbstractEventLoop, "asyncio.Future[None]"]


class WriteBehind:
    def __init__(self, memory: MemoryTier, disk: DiskTier, *, sync_purges: Callable[[], None],
                 gather_s: float = GATHER_S) -> None:
        self._memory = memory
        self._sync_purges = sync_purges  # replays other workers' purges on the memory tier
        self._gather_s = gather_s
        self._trim_armed = False  # a look at whether evictions stopped is due (`_trim_when_idle`)
        self._trimmed_at = 0  # the victims' `victim_bytes_gone` when the heap was last trimmed
        self._disk = disk
        # When the writer next removes the segment files no row names (a crash between a batch's write and its
        # commit leaves one): every SEGMENT_SWEEP_AGE_S, after a batch, those that old (a start removed the older).
        self._sweep_at = time.monotonic() + SEGMENT_SWEEP_AGE_S
        self._queue: list[tuple[CachedObject, Waiter | None]] = []
        self._scheduled = False
        self._closed = False
        self._queue_lock = threading.Lock()  # the queue and the flag only: held for microseconds
        self.lock = threading.RLock()        # a batch's check and commit; a purge's memory and disk steps
        self.writer: Executor | None = None  # runs the batches of the memory tier's victims
        memory.on_victims = self._victims_waiting

    def _victims_waiting(self) -> None:
        """The memory tier moved entries to its victims: a batch takes them (``GATHER_S`` later on an event loop)."""
        writer = self.writer
        if writer is None:  # no fill was stored behind: flush and close write them
            return
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        with self._queue_lock:
            start, self._scheduled = not self._scheduled, True
        if start:
            if loop is not None:
                loop.call_later(self._gather_s, self._submit, writer)
            else:
                self._submit(writer)
        if loop is not None and not self._trim_armed and can_trim():
            self._trim_armed = True
            loop.call_later(TRIM_IDLE_S, self._trim_when_idle, loop, writer, -1)

    def _trim_when_idle(self, loop: asyncio.AbstractEventLoop, writer: Executor, seen: int) -> None:
        """Trim the heap in the writer (after the batch under way) once no victim came or went for a
        ``TRIM_IDLE_S`` and enough went since the last trim; else look again ``TRIM_IDLE_S`` later while victims
        come and go."""
        memory = self._memory
        gone = memory.victim_bytes_gone
        if gone != seen or memory.victim_count:
            loop.call_later(TRIM_IDLE_S, self._trim_when_idle, loop, writer, gone)
            return
        self._trim_armed = False
        if gone - self._trimmed_at >= TRIM_AFTER_BYTES and not self._closed:
            self._trimmed_at = gone
            with contextlib.suppress(RuntimeError):  # the executor is shut down: the process is stopping
                writer.submit(trim_heap)

    def add(self, obj: CachedObject, writer: Executor, *, wait: bool = False) -> asyncio.Future[None] | None:
        """Queue ``obj`` (in the memory tier already) for the disk tier; `writer` runs the batch. Without
        `wait`, ``GATHER_S`` later when called on an event loop (the loop's timer: the writer thread is not held
        meanwhile). With `wait` (on an event loop), as soon as the writer is free, and the future returned is
        done once the batch holding ``obj`` is written (or failed: ``obj`` then stays in memory only)."""
        self.writer = writer
        waiter: Waiter | None = None
        loop: asyncio.AbstractEventLoop | None
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if wait and loop is not None:
            waiter = (loop, loop.create_future())
        self._memory.queued(obj)  # evicted before its batch, it is written all the same
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
        """Write everything queued and the memory tier's victims now, in the calling thread."""
        with self.lock:
            self._write(self._take())

    def write_all(self, wait_s: float) -> bool:
        """``flush``, then the memory-only entries the memory tier holds, for `wait_s` at most (from the call,
        the wait for a batch under way included); False when not all of them were written (the rest is logged)."""
        deadline = time.monotonic() + wait_s
        if not self.lock.acquire(timeout=wait_s):
            log.warning("edge cache: the disk writer is still writing after %.0f s; %d entries queued and %d held "
                        "only in memory were not written", wait_s, len(self._queue), self._memory.unwritten)
            return False
        try:
            self._write(self._take())
            return self._write_unwritten(deadline, wait_s)
        finally:
            self.lock.release()

    def close(self, wait_s: float) -> bool:
        """``write_all``, then no more; False when the writer's batch under way did not end within `wait_s`
        (what is queued is then not written)."""
        deadline = time.monotonic() + wait_s
        if not self.lock.acquire(timeout=wait_s):
            self._closed = True
            log.warning("edge cache: the disk writer is still writing after %.0f s; closing without writing "
                        "the %d entries queued and the %d held only in memory", wait_s, len(self._queue),
                        self._memory.unwritten)
            return False
        try:
            self._write(self._take())
            self._write_unwritten(deadline, wait_s)
            self._closed = True
        finally:
            self.lock.release()
        return True

    def _write_unwritten(self, deadline: float, wait_s: float) -> bool:
        """The memory-only entries, a transaction per ``UNWRITTEN_BATCH``, until `deadline`."""
        return self.store_within(self._memory.memory_only(), deadline, wait_s)

    def store_within(self, entries: Sequence[CachedObject], deadline: float, wait_s: float) -> bool:
        """`store` of `entries`, a transaction per ``UNWRITTEN_BATCH``, until the monotonic `deadline`; False when
        some were left (logged; `wait_s`: the time they had). The caller holds ``lock``."""
        for start in range(0, len(entries), UNWRITTEN_BATCH):
            if time.monotonic() >= deadline:
                log.warning("edge cache: %d entries held only in memory were not written to the disk tier within "
                            "%.0f s (they are fetched again)", len(entries) - start, wait_s)
                return False
            self.store(entries[start:start + UNWRITTEN_BATCH])
        return True

    def store(self, entries: Sequence[CachedObject]) -> None:
        """Write memory-only `entries` the memory tier still holds now (the caller holds ``lock``)."""
        self._put(list(entries))

    def _take(self) -> list[tuple[CachedObject, Waiter | None]]:
        with self._queue_lock:
            batch, self._queue = self._queue, []
            return batch

    def _drain(self) -> None:
        while True:
            with self._queue_lock:
                if not self._queue and self._memory.victim_count == 0:
                    self._scheduled = False
                    return
            with self.lock:
                self._write(self._take())
            self._sweep_when_due()  # not holding the lock: purges need not wait for a directory's listing

    def _sweep_when_due(self) -> None:
        """Remove the segment files no row names, `SEGMENT_SWEEP_AGE_S` old, once that long since the last time:
        in the writer thread, so that a worker running for days does not keep what a crash left until its next
        start. Outside ``lock``: the files it removes are an hour old and named by no row, which no batch under way
        writes."""
        now = time.monotonic()
        if now < self._sweep_at or self._closed:
            return
        self._sweep_at = now + SEGMENT_SWEEP_AGE_S
        try:
            self._disk.sweep_segments()
        except OSError:  # the cache directory cannot be listed now: next time
            log.exception("edge cache: the segment files could not be swept")

    def _current(self, entries: Sequence[CachedObject]) -> list[CachedObject]:
        """The entries the memory tier still holds (as entries or victims), once the purges of other workers are
        replayed on it (none once closed: the purge log may be closed already)."""
        if self._closed:
            return []
        self._sync_purges()
        holds = self._memory.holds
        return [obj for obj in entries if holds(obj)]

    def _put(self, entries: list[CachedObject]) -> None:
        """Write `entries` that the memory tier still holds, then tell it they are settled (victims go; memory-only
        entries become ordinary ones when written: not when the database dropped the write or the filesystem was
        full)."""
        holds = self._memory.holds
        # Published before the batch looks at what is held: a fill of one of these keys from now on may find this
        # batch's row on disk once it commits, so it is not held in memory only (`EdgeCache.put_behind`).
        self._memory.in_flight = frozenset(obj.key for obj in entries)
        current = [] if self._closed else [obj for obj in entries if holds(obj)]
        dropped, full = self._disk.dropped_writes, self._disk.full_events
        stored = False
        try:
            if current:
                # Those the disk tier kept out, older than what it holds under their keys: not served on here either.
                for obj in self._disk.put_many(current, current=self._current) or ():
                    self._memory.forget(obj)
            # A full filesystem may have kept some out (not which): all stay memory-only, written again later.
            stored = not self._closed and (self._disk.dropped_writes, self._disk.full_events) == (dropped, full)
        except (OSError, sqlite3.Error) as exc:  # the disk or database failing: a line per interval, not per batch
            WRITE_FAILURES.log(logging.ERROR, "write", "edge cache: %d entries could not be written to the disk tier: "
                               "%s; they stay in memory only", len(current), exc)
        except Exception:  # a cache write failing must not stop later ones: the entry stays memory-only
            log.exception("edge cache: %d entries could not be written to the disk tier", len(current))
        finally:
            self._memory.settle(entries, stored=stored)
            self._memory.in_flight = frozenset()
            self.note_room()

    def note_room(self) -> None:
        """Tell the memory tier whether the disk tier has room for fills nobody asked for again (its second_hit):
        when it starts keeping memory-only entries, after each batch, and after each purge (which may have emptied
        it). Only a memory tier with victims (a one-worker edge's) uses the answer: others ask SQLite nothing."""
        if self._closed or not self._memory.second_hit or not self._memory.keeps_victims:
            return
        try:
            self._memory.disk_has_room = self._disk.has_room()
        except Exception:  # a database that cannot say: as if full, which writes less
            log.exception("edge cache: the disk tier's volume could not be read")
            self._memory.disk_has_room = False

    def _write(self, batch: list[tuple[CachedObject, Waiter | None]]) -> None:
        try:
            self._put([obj for obj, _ in batch] + self._memory.victims())
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
