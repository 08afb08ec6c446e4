"""The edge cache: the memory tier in front of the disk tier, with key and tag purges.

With several workers every entry is on disk (the workers share the disk tier; each memory tier holds copies).
On an edge with one worker (``alone``) a fill stored behind (``put_behind``) is in the memory tier only until the
memory tier evicts it, or the cache is flushed or closed: the disk tier is then the second level, a victim cache
(assetcdn/edge/cache/write_behind.py). ``stats`` counts those entries (``unwritten_entries``).

Keys are the caller's (``asset:<blob_id>:<path>``, a variant's key scoped to its source path; every key
is built in assetcdn/edge/states/keys.py): what a response depends on. A URL purge is a purge of the path's internal
tag (assetcdn/edge/cache/tags.py), which every entry made from that path carries; this module only knows
keys and tags.

Blocking and the event loop. ``get`` is meant to be called inline on the event loop:

- a memory hit is a dict lookup under an uncontended lock, one shared-memory integer read
  (cross-worker purges, see ``PurgeLog``) and no I/O or allocation beyond the lookup;
- a disk hit is one indexed SQLite read (tens of microseconds) plus, for bodies at most
  ``memory_max_object`` bytes, one file read of that size; larger bodies are returned as a
  path without reading them.

Measured (5 KB bodies; benchmarks/ARCHIVE.md): a diskcache read inline serves more hits than
one through ``run_in_executor``: the executor hop costs more than the read. So small reads stay inline. ``put`` of large bodies or streams, ``purge_tags`` and
``purge_all`` write and may take milliseconds: call them through an executor from async
code (all methods are thread-safe).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import shutil
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Executor
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial, update_wrapper
from pathlib import Path
from typing import Any, BinaryIO, Concatenate, ParamSpec, TypeVar

from assetcdn.edge.cache.applied import AppliedGeneration, GenerationPurge
from assetcdn.edge.cache.disk import (
    DEFAULT_MIN_FILE_SIZE,
    SEGMENT_SUFFIX,
    DiskTier,
    date_of,
    encode_meta,
    is_disk_full,
    prefix_end,
)
from assetcdn.edge.cache.entry import CachedObject, MemoryOnly
from assetcdn.edge.cache.memory import MemoryTier
from assetcdn.edge.cache.purge_log import PurgeKind, PurgeLog, within_value
from assetcdn.edge.cache.write_behind import WriteBehind
from assetcdn.shared.logs import LinePerInterval

MB = 1024 * 1024
# SQLite's errors of a damaged database file (`damaged`), and the file a worker that found one locks (`open_or_reset`).
DAMAGED_CODES = frozenset({sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB})
DATABASE = "cache.db"
RESET_LOCK = "edge-reset.lock"
# What a worker that cannot open the disk tier on a full filesystem frees of its oldest bodies (`open_or_reset`).
FREE_AT_START = 4 * MB
log = logging.getLogger(__name__)
# The disk tier's reads that failed (`EdgeCache.get`): a line per interval, not one per request.
READ_FAILURES = LinePerInterval(log, 60.0)
# The pseudo header field (":" starts no real field name) a soft purge adds to a stored head, with the time it
# ran: from then on the response is stale (assetcdn/edge/states/pull.py reads it).
SOFT_PURGED = ":soft-purged"
PROBE_BODY = b"assetcdn edge cache probe"
# How long ``close`` waits for a write-behind batch under way (one that cannot begin gives up sooner or later
# on its own: assetcdn/edge/cache/disk.py) and writes the memory-only entries, all told; then it closes
# without writing what is left.
CLOSE_WAIT_S = 60.0
# How long a soft purge writes the memory-only entries it keeps stale (a transaction per batch); those left then
# are removed as a hard purge removes them: fetched again rather than revalidated.
SOFT_PURGE_WRITE_S = 5.0


P = ParamSpec("P")
R = TypeVar("R")


def _holding_writes(method: Callable[Concatenate[EdgeCache, P], R]) -> Callable[Concatenate[EdgeCache, P], R]:
    """A purge: what is queued for the disk tier is written first, and no write-behind batch runs between the
    purge's memory and disk steps (assetcdn/edge/cache/write_behind.py), so it finds what a fill stored.
    Each purge is published to the other workers before and after its deletes (``_published``)."""
    def purge(cache: EdgeCache, /, *args: P.args, **kwargs: P.kwargs) -> R:
        with cache._writes.lock:
            cache._writes.flush()
            try:
                return method(cache, *args, **kwargs)
            finally:
                cache._purged += 1  # a `put` under way may have stored what this purge removed
                cache._writes.note_room()
    update_wrapper(purge, method)
    return purge


def damaged(exc: BaseException) -> bool:
    """Whether SQLite found the database file damaged (not a database, or malformed): not an error that goes away."""
    code = getattr(exc, "sqlite_errorcode", None)
    return isinstance(exc, sqlite3.DatabaseError) and code is not None and code & 0xFF in DAMAGED_CODES


def open_or_reset(directory: Path, open_disk: Callable[[], DiskTier]) -> tuple[DiskTier, PurgeLog]:
    """The disk tier of `directory` and its purge log; a database SQLite finds damaged is removed with the body
    files its rows named, once, and the tier opened empty: a cache is fetched again, and a worker that could not
    open it would fail at every start. Under a lock of the directory, opened again first: the workers of a node
    start together, and the first one to take the lock makes the new database the others then open."""
    try:
        return _open_tiers(directory, open_disk)
    except sqlite3.DatabaseError as exc:
        if is_disk_full(exc) and free_oldest_bodies(directory, FREE_AT_START, exc):
            return _open_tiers(directory, open_disk)
        if not damaged(exc):
            raise
    with open(directory / RESET_LOCK, "ab") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            return _open_tiers(directory, open_disk)
        except sqlite3.DatabaseError as exc:
            if not damaged(exc):
                raise
            log.error("edge cache %s: its database is damaged (%s); removed with every cached body, the cache "
                      "starts empty and is filled again from the origins", directory, exc)
        for entry in os.scandir(directory):
            if entry.name in (DATABASE, f"{DATABASE}-wal", f"{DATABASE}-shm"):
                os.remove(entry.path)
            elif len(entry.name) == 2 and entry.is_dir(follow_symlinks=False):  # the body files' directories
                shutil.rmtree(entry.path, ignore_errors=True)
        return _open_tiers(directory, open_disk)


def free_oldest_bodies(directory: Path, wanted: int, exc: BaseException) -> int:
    """Remove the oldest body files and segments (by their time) of `directory` until `wanted` bytes went: SQLite
    cannot open a database on a full filesystem (its shared-memory index and write-ahead log need room), and a
    worker would fail at every start until something else freed space. Their rows read as misses (fetched again)
    and go with the culls. Returns the bytes freed."""
    bodies: list[tuple[float, int, str]] = []
    for folder in os.scandir(directory):
        if len(folder.name) == 2 and folder.is_dir(follow_symlinks=False):
            with contextlib.suppress(OSError):
                for item in os.scandir(folder.path):
                    if item.name.endswith((".val", SEGMENT_SUFFIX)):
                        stat = item.stat(follow_symlinks=False)
                        bodies.append((stat.st_mtime, stat.st_size, item.path))
    bodies.sort()
    freed = 0
    for _, size, path in bodies:
        if freed >= wanted:
            break
        with contextlib.suppress(OSError):
            os.remove(path)
            freed += size
    log.error("edge cache %s: its database could not be opened on a full filesystem (%s); removed the oldest "
              "cached bodies (%d bytes) to start", directory, exc, freed)
    return freed


def _open_tiers(directory: Path, open_disk: Callable[[], DiskTier]) -> tuple[DiskTier, PurgeLog]:
    disk = open_disk()
    try:
        return disk, PurgeLog(disk.database, directory)
    except BaseException:
        disk.close()
        raise


class PurgedMeanwhile(Exception):
    """Not stored: a purge published since the response was asked for names it (``EdgeCache.put``'s ``since``)."""


@dataclass(frozen=True, slots=True)
class CacheStats:
    """``memory_entries`` counts what the memory tier holds, ``disk_entries`` what the disk tier holds, and
    ``unwritten_entries`` the entries held in memory only (a one-worker edge's fills not written yet, the evicted
    ones waiting for the writer among them), none of them in ``disk_entries``: the cache holds
    ``disk_entries + unwritten_entries``."""

    memory_entries: int
    memory_bytes: int
    memory_limit_bytes: int
    disk_entries: int
    disk_bytes: int
    disk_limit_bytes: int
    unwritten_entries: int = 0

    def to_json(self) -> dict[str, int]:
        return {
            "memory_entries": self.memory_entries,
            "memory_bytes": self.memory_bytes,
            "memory_limit_bytes": self.memory_limit_bytes,
            "disk_entries": self.disk_entries,
            "disk_bytes": self.disk_bytes,
            "disk_limit_bytes": self.disk_limit_bytes,
            "unwritten_entries": self.unwritten_entries,
        }


@dataclass(frozen=True, slots=True)
class CacheCheck:
    ok: bool
    latency_ms: float
    error: str | None = None


class EdgeCache:
    """Memory tier (per process, small hot bodies) in front of the disk tier (per node)."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        disk_size_limit: int = 1024 * MB,
        memory_bytes: int = 128 * MB,
        memory_max_object: int = 256 * 1024,
        disk_min_file_size: int = DEFAULT_MIN_FILE_SIZE,
        second_hit: bool = True,
    ) -> None:
        self.directory = Path(directory)
        self.memory = MemoryTier(memory_bytes, memory_max_object, second_hit=second_hit)
        self.disk, self._purges = open_or_reset(self.directory, lambda: DiskTier(
            # the memory tier's bodies, read whole: a batch of them may share a segment file
            self.directory, size_limit=disk_size_limit, min_file_size=disk_min_file_size,
            segment_max=memory_max_object,
        ))
        self._applied = AppliedGeneration(self.directory)
        self._writes = WriteBehind(self.memory, self.disk, sync_purges=self.sync_purges)
        self.disk.announce = self._purges  # until `alone`: the disk tier's batches announce what they store
        self._replaying = threading.Lock()  # the event loop and the writer thread both replay purges
        self._replays = 0  # replays that took purges or notices (`_forget_if_superseded`)
        self._alone = False
        self._purged = 0  # purges this process made: a `put` that saw one finish meanwhile keeps no memory copy

    @property
    def alone(self) -> bool:
        """The only process of its node using this directory (an edge with one worker): what it stores behind
        reaches the disk tier when the memory tier evicts it, or at a flush (`put_behind`), and a miss of a key
        it never wrote to disk skips the disk tier's look-up (`DiskTier.track_keys`)."""
        return self._alone

    @alone.setter
    def alone(self, alone: bool) -> None:
        self._alone = alone
        self.disk.announce = None if alone else self._purges
        self.disk.track_keys(alone)
        self.memory.keeps_victims = alone  # its memory-only entries wait for the writer within the budget
        self._writes.note_room()

    @classmethod
    def from_settings(cls, edge: Mapping[str, Any], directory: str | os.PathLike[str]) -> EdgeCache:
        """From the ``[edge]`` section; the caller resolves ``cache_dir`` (it depends on the
        data directory and the edge's name)."""
        return cls(
            directory,
            disk_size_limit=int(edge["cache_size_mb"]) * MB,
            memory_bytes=int(edge["memory_cache_mb"]) * MB,
            memory_max_object=int(edge["memory_object_max_kb"]) * 1024,
            second_hit=bool(edge["disk_second_hit"]),
        )

    def get(self, key: str) -> CachedObject | None:
        """The entry under ``key`` from memory, else from disk (promoting small bodies to
        memory); None on a miss. Safe to call inline on the event loop (module docstring)."""
        if self._purges.pending():
            self._apply_remote_purges()
        obj = self.memory.get(key)
        if obj is not None:
            return obj
        obj = self.memory.victim(key)  # evicted, not on disk yet: what the disk tier holds would be older
        if obj is not None:
            return obj
        replays = self._replays
        try:
            obj = self.disk.get(key, load_limit=self.memory.max_object_size)
        except (OSError, sqlite3.Error) as exc:  # the disk or the database failing: a miss, which the origin answers
            READ_FAILURES.log(logging.WARNING, "read", "edge cache %s: a read of the disk tier failed (%s); "
                              "answered as a miss", self.directory, exc)
            return None
        # Not brought into memory while the disk writer is behind: each would evict a memory-only entry for it to
        # write, and reads (which do not wait for it, as fills do) would let victims go unwritten.
        if obj is not None and obj.body is not None and not self.memory.victims_pressing:
            self.memory.put(obj)
            self._forget_if_superseded(obj, replays)
        return obj

    def _forget_if_superseded(self, obj: CachedObject, replays: int) -> None:
        """Drop the memory copy `obj` just made of what the disk tier held when the writer thread replayed purges or
        notices since `replays` (they may name it, and found no copy to drop) and the disk tier holds another
        response under its key now, or none, or the same one marked stale by a soft purge: it would otherwise be
        served for good beside the one stored."""
        if self._replays != replays and self.disk.stored_version(obj.key, SOFT_PURGED) != (
                obj.stored_at, any(name == SOFT_PURGED for name, _ in obj.headers)):
            self.memory.forget(obj)

    def sync_purges(self) -> None:
        """Replay on this worker's memory tier the purges other workers published (cheap when none:
        one shared-memory integer read). ``get`` does it too; the hit path, which reads the memory
        tier directly (assetcdn/edge/fastpath/), calls this once per batch of requests."""
        if self._purges.pending():
            self._apply_remote_purges()

    def read_range(self, key: str, start: int, end: int) -> bytes | None:
        """Bytes ``[start, end)`` (end exclusive) of the body under ``key``; None on a miss."""
        obj = self.memory.get(key) or self.memory.victim(key)
        if obj is not None:
            return obj.read_range(start, end)
        return self.disk.read_range(key, start, end)

    def put(
        self,
        key: str,
        body: bytes | BinaryIO,
        content_type: str,
        etag: str,
        tags: Iterable[str] = (),
        headers: Mapping[str, str] | Sequence[tuple[str, str]] | None = None,
        *,
        since: int | None = None,
        replaced_tags: Iterable[str] = (),
        since_tags: Iterable[str] | None = None,
        replacing: float | None = None,
        stored_at: float | None = None,
    ) -> CachedObject:
        """Store a response body under ``key`` in both tiers and return the stored entry.

        ``body`` is bytes, or a binary stream (e.g. a spooled temporary file of a fetch) that
        is copied to disk in chunks without being held whole; a streamed entry comes back
        as read from disk (``path`` set when larger than ``memory_max_object``). ``etag`` is
        the strong quoted ETag made from a SHA-256 (``strong_etag``): a path's manifest hash
        (the path's delivery, assetcdn/edge/states/path_delivery.py), the hash of a variant's bytes (assetcdn/edge/states/variant.py), or an HLS
        segment's rendition hash and number, never the git blob id. Blocking: see module docstring.

        ``since``: the ``purge_mark`` taken when the response was asked for; PurgedMeanwhile, and nothing kept,
        when a purge published since then names the entry (``_named_since``), or the copy it replaces, which carried
        ``replaced_tags`` (a 304's refresh: the same body under a head whose tags may differ, as ``set_head`` checks).
        ``since_tags``: the tags of ``tags`` such a purge is looked for by, when not all of them (a pull zone image's
        variant leaves out its variants' own tag, which the request that makes it purges first to retire the older
        ones, assetcdn/edge/states/pull_variant.py).
        ``replacing``: the stored-at time of the copy a 304's refresh writes again (`body` bytes); PurgedMeanwhile, and
        nothing kept, when the disk tier holds a response stored after it by then (another worker's newer response,
        which the 304 does not confirm: RFC 9111 4.3.4 updates the stored response it names, no other).
        PurgedMeanwhile too, given ``since``, and nothing kept, when the disk tier holds a newer response under ``key``
        (by the origin's Date, then by when it was stored: assetcdn/edge/cache/disk.py ``_held_is_newer``): the workers
        keep the most recent one (RFC 9111 4).
        ``stored_at``: the time the entry counts as stored from, when not now (a refresh: when its 304 was asked for,
        so that a newer response another worker fetched meanwhile is the one the workers keep).
        """
        tag_tuple = tuple(dict.fromkeys(tags))
        checked = tag_tuple if since_tags is None else tuple(since_tags)
        named = self._named_since(since, key, (*checked, *replaced_tags) if replaced_tags else checked)
        if named is not None and named():  # nothing written
            raise PurgedMeanwhile(key)
        # A mapping, or field lines in order (a pull zone's stored head, where a field may repeat).
        header_pairs = tuple(headers.items()) if isinstance(headers, Mapping) else tuple(headers or ())
        with self._writes.lock:  # a queued older entry under the key is no longer written over this one
            self.memory.discard(key)
        purged, replays = self._purged, self._replays
        if stored_at is None:
            stored_at = time.time()
        superseded: list[bool] = []
        kept_out: list[CachedObject] = []
        unless = named
        if replacing is not None and isinstance(body, bytes | bytearray | memoryview):
            unless = partial(self._named_or_superseded, named, key, replacing, superseded)
        size = self.disk.put(
            key,
            body,
            content_type=content_type,
            etag=etag,
            tags=tag_tuple,
            headers=header_pairs,
            stored_at=stored_at,
            unless=unless,
            refresh=replacing is not None,
            kept_out=kept_out,
        )
        # Nothing written, nor kept in memory: the newer response stays every worker's. (Kept out without `since`:
        # a key named by its content, stored zones' and variants', whose newer row holds the same bytes.)
        if superseded or (kept_out and since is not None):
            raise PurgedMeanwhile(key)
        if isinstance(body, bytes | bytearray | memoryview):  # announced by the disk tier's batch (`announce`)
            obj = CachedObject(
                key=key,
                content_type=content_type,
                etag=etag,
                tags=tag_tuple,
                size=size,
                stored_at=stored_at,
                body=bytes(body),
                headers=header_pairs,
            )
            self._keep_in_memory(obj, purged, named, replays)
            return obj
        stored = self.disk.get(key, load_limit=self.memory.max_object_size)
        # A streamed body is written in a transaction of its own, as stored just after an older row stored later.
        self._stored(((key, stored_at if stored is None else max(stored_at, stored.stored_at)),))
        if stored is None:  # evicted at once: only when the body exceeds the disk budget (or purged meanwhile)
            if named is not None and named():
                raise PurgedMeanwhile(key)
            raise ValueError(f"cache entry {key!r} ({size} bytes) does not fit the disk tier")
        self._keep_in_memory(stored, purged, named, replays)
        return stored

    def _keep_in_memory(self, obj: CachedObject, purged: int, named: Callable[[], bool] | None,
                        replays: int) -> None:
        """The memory copy of what `put` stored, unless a purge finished since `put` began (`purged` then): that
        purge may have removed the disk entry before the copy was made, and the copy would outlive it. Likewise
        a purge published since `put`'s `since` that names it (another worker's: PurgedMeanwhile then), and a
        newer response another worker stored meanwhile (`_forget_if_superseded`, `replays` taken as `put` began)."""
        self.memory.put(obj)
        if self._purged != purged:
            self.memory.discard(obj.key)
        else:
            self._forget_if_superseded(obj, replays)
        if named is not None and named():
            self._forget(obj)
            raise PurgedMeanwhile(obj.key)

    def purge_generation(self) -> int:
        """The manifest generation whose purges this node's cache has taken or is taking, whichever worker runs
        them (one shared-memory integer read): a shield is asked with no lower generation (assetcdn/edge/shield.py),
        since one behind it may still hold what those purges removed here, and this worker would keep that copy."""
        return self._purges.generation()

    def purge_mark(self) -> int:
        """Where this node's purges stand (one shared-memory integer read): a fill takes it as it asks for a
        response, and gives it to ``put`` or ``put_behind`` (``since``) when it stores that response."""
        return self._purges.mark()

    def purged_since(self, mark: int, obj: CachedObject) -> bool:
        """Whether a purge published since `mark` (``purge_mark``, taken before `obj` was looked up) names `obj`: the
        copy a request found may be gone since, and is no longer to be answered with (a stale copy held while the
        origin is asked). One shared-memory integer read when no purge was published since; True when the purge log
        cannot be read (which purges were published is not known)."""
        try:
            return self._purges.names_since(mark, obj.key, obj.tags)
        except sqlite3.Error:
            return True

    def _stored(self, entries: Iterable[tuple[str, float]]) -> None:
        """Tell the node's other workers that the entries (key, stored-at) were stored in the disk tier: each drops
        an older copy its memory tier holds (``PurgeLog.note_stored``), which it would otherwise go on serving
        beside the newer response (a fill made again, a 304's refreshed head). Nothing to tell ``alone``."""
        if not self._alone:
            self._purges.note_stored(entries)

    def _named_since(self, since: int | None, key: str, tags: tuple[str, ...]) -> Callable[[], bool] | None:
        """Whether a purge published since the mark `since` names the entry (its key, a tag or a tag's prefix, or
        everything), asked once the entry is in place: a purge published after that finds it there, one before
        is found here. None without a mark."""
        if since is None:
            return None
        return lambda: self._purges.names_since(since, key, tags)

    def _named_or_superseded(self, named: Callable[[], bool] | None, key: str, replacing: float,
                             superseded: list[bool]) -> bool:
        """`put`'s `unless` for a refresh (`replacing`): a purge names it, or the disk tier holds a response stored
        after the copy it refreshes (then noted in `superseded`). Asked once the write transaction holds the
        database's lock: no newer row lands between the check and the write."""
        if named is not None and named():
            return True
        held = self.disk.stored_version(key, SOFT_PURGED)
        if held is not None and held[0] is not None and held[0] > replacing:
            superseded.append(True)
            return True
        return False

    def _forget(self, obj: CachedObject) -> None:
        """Drop `obj`'s memory copy (or, evicted meanwhile, the victim), not written to the disk tier yet (a newer
        entry under its key stays)."""
        self.memory.forget(obj)

    def set_head(self, obj: CachedObject, content_type: str, etag: str, tags: Iterable[str],
                 headers: Sequence[tuple[str, str]], *, since: int | None = None,
                 stored_at: float | None = None) -> CachedObject | None:
        """The entry `obj` (its body a disk tier file) with new metadata and the same body, which is not
        rewritten (a revalidated response's new head); None when its key holds another body now, or none, or
        when a purge published since `since` (as ``put`` takes it) names it. `stored_at` as ``put`` takes it.
        Blocking: one SQLite write."""
        assert obj.path is not None
        tag_tuple = tuple(dict.fromkeys(tags))
        if stored_at is None:
            stored_at = time.time()
        named = self._named_since(since, obj.key, (*obj.tags, *tag_tuple))
        with self._writes.lock:  # a purge runs before or after, never between the check and the write
            if not self.disk.set_head(obj.key, obj.path, encode_meta(content_type, etag, tag_tuple, stored_at,
                                                                     headers), unless=named):
                return None
            self.memory.discard(obj.key)
        self._stored(((obj.key, stored_at),))
        return CachedObject(key=obj.key, content_type=content_type, etag=etag, tags=tag_tuple, size=obj.size,
                            stored_at=stored_at, path=obj.path, headers=tuple(headers))

    def put_behind(
        self,
        key: str,
        body: bytes,
        content_type: str,
        etag: str,
        tags: Iterable[str],
        headers: Sequence[tuple[str, str]],
        *,
        writer: Executor,
        since: int | None = None,
    ) -> tuple[CachedObject, asyncio.Future[None] | None] | None:
        """Store a body the memory tier takes (``memory.accepts``) in memory now, and on disk in the next batch
        `writer` runs (assetcdn/edge/cache/write_behind.py): no I/O here, so it is called on the event loop.
        Returns the entry and, unless ``alone``, the future done once it is on disk (another worker may be
        asked for it next); None when the memory tier does not take it (the caller stores it with ``put``).
        ``alone``, the entry is memory-only (``MemoryOnly``): not queued, written when the memory tier evicts it
        (module docstring); unless the disk tier may hold the key already, when it is queued as with several
        workers (without a future to wait for). While the disk writer is behind what the memory tier evicts
        (``victims_pressing``), a memory-only entry is queued too, with the future: its fill waits for the writer,
        which so sets the pace of fills instead of letting victims asked for again go unwritten (the memory tier lets go the
        ones nobody read since their fill meanwhile, assetcdn/edge/cache/memory.py); so does a fill queued because the
        disk tier may hold its key (evicted before its batch, it waits among the victims, never let go).
        ``since``: as ``put`` takes it; None too once a purge was published since that mark, so that the caller's
        ``put`` reads the purge log off the event loop (here only the mark is read)."""
        if since is not None and self._purges.mark() != since:
            return None
        alone = self.alone
        # Memory-only unless the disk tier may hold an older response under the key, or will once the writer's
        # batch under way commits: gone unwritten (a purge of its own tags, the victims' bound, let go unread), this
        # one would let that older body be served again.
        memory_only = alone and not self.disk.may_hold(key) and key not in self.memory.in_flight
        obj = (MemoryOnly if memory_only else CachedObject)(
            key=key, content_type=content_type, etag=etag, tags=tuple(dict.fromkeys(tags)), size=len(body),
            stored_at=time.time(), body=body, headers=tuple(headers))
        if alone:
            self._writes.writer = writer  # for the batches of what the memory tier evicts
        if not self.memory.put(obj):
            return None
        if since is not None and self._purges.mark() != since:  # published as it went in: `put` decides
            self._forget(obj)
            return None
        # The writer behind the evictions: queued now (a victim if evicted before its batch), and waited for; so is a
        # fill queued because the disk tier may hold the key, which is never let go once evicted (MemoryTier.queued).
        pressing = self.memory.victims_pressing
        if memory_only and not pressing:
            return obj, None
        return obj, self._writes.add(obj, writer, wait=not alone or pressing)

    def flush_writes(self) -> None:
        """Write to the disk tier now what ``put_behind`` queued and the memory-only entries (``CLOSE_WAIT_S`` at
        most: what is left then is logged, not written). Blocking."""
        self._writes.write_all(CLOSE_WAIT_S)

    @_holding_writes
    def purge_keys(self, keys: Iterable[str]) -> int:
        """Remove ``keys`` from every tier of every worker; returns how many existed here."""
        key_list = list(dict.fromkeys(keys))
        with self._published(("keys", key_list)):
            return len(set(self.memory.discard_many(key_list)) | set(self.disk.delete_many(key_list)))

    @_holding_writes
    def purge_tags(self, tags: Iterable[str], *, within: str = "") -> int:
        """Remove every entry carrying any of ``tags`` and, given ``within``, that tag too (a tag purge within one
        zone: ``within`` is the zone's tag); returns how many were removed."""
        tag_list = list(dict.fromkeys(tags))
        with self._published(_tags_purge(tag_list, within)):
            return len(set(self.memory.purge_tags(tag_list, within)) | set(self.disk.purge_tags(tag_list, within)))

    @_holding_writes
    def purge_all(self) -> int:
        """Empty the cache; returns how many entries were removed (the larger tier's count, memory holding copies
        of disk entries, plus the memory-only entries)."""
        with self._published(("all", ())):
            unwritten = self.memory.unwritten  # the other memory entries are copies of disk ones
            memory_count = self.memory.clear()
            disk_count = self.disk.clear()
        return max(disk_count, memory_count - unwritten) + unwritten

    @_holding_writes
    def purge_tag_prefixes(self, prefixes: Iterable[str]) -> int:
        """Remove every entry carrying a tag that starts with any of ``prefixes``; returns how many."""
        prefix_list = [p for p in dict.fromkeys(prefixes) if p]
        with self._published(("prefix", prefix_list)):
            removed = set(self.memory.purge_tag_prefixes(prefix_list))
            removed |= set(self.disk.delete_many(self.disk.keys_for_tag_prefixes(prefix_list)))
        return len(removed)

    @_holding_writes
    def soft_purge(self, tags: Iterable[str] = (), prefixes: Iterable[str] = (), *, everything: bool = False,
                   revalidated: str = "", scoped: Iterable[tuple[str, str]] = ()) -> int:
        """Mark stale what a purge names, where it can be revalidated: entries whose key starts with
        ``revalidated`` keep their body and get ``SOFT_PURGED`` in their head (the next request asks the
        origin to confirm them); the others are removed. Memory tiers drop their copies (the disk tier's is
        the marked one). ``scoped``: (tag, within) pairs, each naming the entries that carry both (a tag purge
        within one zone, ``purge_tags``' ``within``). Returns how many entries were marked or removed (each once).
        Blocking: see module docstring."""
        tag_list, prefix_list = list(dict.fromkeys(tags)), [p for p in dict.fromkeys(prefixes) if p]
        by_scope: dict[str, list[str]] = {}
        for tag, within in dict.fromkeys(scoped):
            by_scope.setdefault(within, []).append(tag)
        if revalidated:  # a memory-only entry kept stale is written first, then marked as the disk's are
            held = self.memory.memory_only() if everything else [
                *self.memory.carrying(tag_list, prefix_list),
                *(obj for within, named in by_scope.items() for obj in self.memory.carrying(named, (), within))]
            self._writes.store_within([obj for obj in held if type(obj) is MemoryOnly and obj.key.startswith(revalidated)],
                                      time.monotonic() + SOFT_PURGE_WRITE_S, SOFT_PURGE_WRITE_S)
        published: tuple[tuple[PurgeKind, Sequence[str]], ...] = (
            (("all", ()),) if everything else (("tags", tag_list), ("prefix", prefix_list), (
                "within", [within_value(tag, within) for within, named in by_scope.items() for tag in named])))
        with self._published(*published):
            if everything:
                self.memory.clear()
                if not revalidated:
                    return self.disk.clear()
                end = prefix_end(revalidated)
                kept, dropped = (self.disk.keys_between(revalidated, end, inside=True),
                                 self.disk.keys_between(revalidated, end, inside=False))
                touched: set[str] = set()
            else:
                touched = set(self.memory.purge_tags(tag_list)) | set(self.memory.purge_tag_prefixes(prefix_list))
                named_keys = [*self.disk.keys_for_tags(tag_list), *self.disk.keys_for_tag_prefixes(prefix_list)]
                for within, named in by_scope.items():
                    touched.update(self.memory.purge_tags(named, within))
                    named_keys += self.disk.keys_for_tags(named, within)
                found = dict.fromkeys(named_keys)
                kept = [key for key in found if revalidated and key.startswith(revalidated)]
                dropped = [key for key in found if not (revalidated and key.startswith(revalidated))]
            touched |= set(self.disk.mark_stale(kept, SOFT_PURGED, time.time()))
            touched |= set(self.disk.delete_many(dropped))
        return len(touched)

    @contextmanager
    def _published(self, *purges: tuple[PurgeKind, Sequence[str]]) -> Iterator[None]:
        """Publish `purges` to every worker before this one deletes what they name, and again after: a write-behind
        batch of another worker that commits after the first publication replays it and drops what it names (one
        that commits before is deleted here), and a memory tier that read a body back from disk before the delete
        drops it when it replays the second."""
        for kind, values in purges:
            self._purges.record(kind, values)
        try:
            yield
        finally:
            for kind, values in purges:
                self._purges.record(kind, values)

    @_holding_writes
    def purge_generations(self, purges: Iterable[GenerationPurge], *, upto: int, restart: bool = False,
                          revalidated: str = "") -> int:
        """Apply manifest generations' purges, each once per node; returns how many entries went (or, for
        a soft purge, were marked stale: ``soft_purge`` with ``revalidated``).

        The caller (one worker) now holds every generation up to ``upto``; ``purges`` are those it
        learnt with them. A purge of a generation this node's cache has already taken (another
        worker applied it when it was made, assetcdn/edge/cache/applied.py) leaves the disk tier alone:
        applying it again would also remove what was cached after it. It still empties this
        worker's memory tier of what it names, which costs at most a read from disk.
        ``restart``: control's generations started again below what this worker held (its history
        was lost), so the numbers say nothing: empty the cache and count from ``upto``.
        Blocking: see module docstring.
        """
        purges = list(purges)
        with self._applied.hold() as applied:
            if restart:
                applied.generation = upto
                self._purges.publish_generation(upto)
                return self.purge_all()
            taken = [p for p in purges if p.generation <= applied.generation]
            due = [p for p in purges if p.generation > applied.generation]
            applied.generation = max([applied.generation, upto, *(p.generation for p in due)])
            self._purges.publish_generation(applied.generation)  # before they run (`purge_generation`)
            if any(p.everything for p in taken):
                self.memory.clear()
            else:
                for within, tags in _tags_by_scope(taken).items():
                    self.memory.purge_tags(tags, within)
                self.memory.purge_tag_prefixes([prefix for p in taken for prefix in p.tag_prefixes])
            hard, soft = [p for p in due if not p.soft], [p for p in due if p.soft]
            if any(p.everything for p in hard):
                return self.purge_all()
            count = 0
            for within, tags in _tags_by_scope(hard).items():  # unscoped first ("" is the first scope, if any)
                count += self.purge_tags(tags, within=within)
            if any(p.tag_prefixes for p in hard):
                count += self.purge_tag_prefixes(prefix for p in hard for prefix in p.tag_prefixes)
            if soft:
                count += self.soft_purge([tag for p in soft if not p.within for tag in p.tags],
                                         [prefix for p in soft for prefix in p.tag_prefixes],
                                         everything=any(p.everything for p in soft), revalidated=revalidated,
                                         scoped=[(tag, p.within) for p in soft if p.within for tag in p.tags])
            return count

    def stats(self) -> CacheStats:
        """Sizes for /metrics and health; hit and miss counters are the caller's business."""
        return CacheStats(
            memory_entries=len(self.memory),
            memory_bytes=self.memory.bytes,
            memory_limit_bytes=self.memory.max_bytes,
            disk_entries=len(self.disk),
            disk_bytes=self.disk.volume(),
            disk_limit_bytes=self.disk.size_limit,
            unwritten_entries=self.memory.unwritten,
        )

    def check(self) -> CacheCheck:
        """Deep health probe: write, read back and delete a probe entry on disk."""
        started = time.perf_counter()
        key = f"probe:{os.getpid()}"
        try:
            self.disk.put(
                key,
                PROBE_BODY,
                content_type="application/octet-stream",
                etag='"probe"',
                tags=("probe",),
            )
            obj = self.disk.get(key, load_limit=len(PROBE_BODY))
            if obj is None or obj.body != PROBE_BODY or obj.tags != ("probe",):
                raise OSError("probe entry did not read back")
            if not self.disk.delete(key):
                raise OSError("probe entry could not be deleted")
        except Exception as exc:  # any failure makes the probe fail
            return CacheCheck(
                ok=False,
                latency_ms=(time.perf_counter() - started) * 1000,
                error=f"{type(exc).__name__}: {exc}",
            )
        return CacheCheck(ok=True, latency_ms=(time.perf_counter() - started) * 1000)

    def close(self) -> None:
        """Write what ``put_behind`` queued and the memory-only entries (``CLOSE_WAIT_S`` at most, the wait for the
        writer included) and close; a writer still in its batch then keeps the purge log and the disk tier it uses
        open (the process's exit closes them). Blocking: the event loop awaits ``aclose``."""
        self._closed(self._writes.close(CLOSE_WAIT_S))

    async def aclose(self) -> None:
        """``close`` on the event loop: the wait for the writer (and the last batch) runs in a thread, so the loop
        goes on with the rest of the shutdown (other connections' GOAWAY and closing) meanwhile."""
        def close_writes() -> bool:
            try:
                return self._writes.close(CLOSE_WAIT_S)
            finally:  # the last batch opened this thread's own connections (one per thread)
                self._purges.close_connection()
                self.disk.close()

        self._closed(await asyncio.to_thread(close_writes))

    def _closed(self, written: bool) -> None:
        """Close the purge log and the disk tier (this thread's connections: the owner's) once the writer is done."""
        if written:
            self._purges.close()
            self.disk.close()

    def _apply_remote_purges(self) -> None:
        with self._replaying:  # taken and applied together: a thread finding none pending finds them applied
            pending = self._purges.take_pending()
            if pending:  # before they are applied: a copy `get` puts in memory after they are sees it (see there)
                self._replays += 1
            for purge in pending:
                if purge.kind == "all":
                    self.memory.clear()
                elif purge.kind == "tags":
                    self.memory.purge_tags((purge.value,))
                elif purge.kind == "within":
                    self.memory.purge_tags((purge.value,), purge.within)
                elif purge.kind == "prefix":
                    self.memory.purge_tag_prefixes((purge.value,))
                elif purge.kind == "stored":  # a notice (PurgeLog.note_stored): an older copy goes
                    self._discard_older(purge.value, purge.stored_at)
                else:
                    self.memory.discard(purge.value)

    def _discard_older(self, key: str, stored_at: float) -> None:
        """Another worker stored a response under ``key`` as of ``stored_at``: this worker's copy stored before goes,
        unless it waits for its disk batch and is newer by the origin's Date than the response the disk tier holds
        (a lagging replica's, stored later): that batch writes it as stored just after that one (disk.py `_batch`),
        and every worker keeps it. The disk tier is read only for a copy waiting for its batch, with a Date."""
        waiting = self.memory.queued_older(key, stored_at)
        date = None if waiting is None else date_of(waiting.headers)
        self.memory.discard_older(key, stored_at, waiting if date is not None and self.disk.dated_before(key, date)
                                  else None)


def _tags_purge(tags: Sequence[str], within: str) -> tuple[PurgeKind, Sequence[str]]:
    """What the purge log publishes of a purge of `tags` (within the tag `within`, when given)."""
    if within:
        return "within", [within_value(tag, within) for tag in tags]
    return "tags", tags


def _tags_by_scope(purges: Iterable[GenerationPurge]) -> dict[str, list[str]]:
    """The tags `purges` name, by their scope (``GenerationPurge.within``; "" for none, first when there are some)."""
    by_scope: dict[str, list[str]] = {}
    for purge in sorted(purges, key=lambda p: bool(p.within)):
        if purge.tags:
            by_scope.setdefault(purge.within, []).extend(purge.tags)
    return by_scope
