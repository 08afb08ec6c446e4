"""The disk tier: a bounded diskcache directory that survives restarts and keeps each entry's tags.

Layout inside ``directory`` (all in diskcache's own ``cache.db``, so one file is the truth):

- ``Cache`` (diskcache's table): the body as raw bytes (inline in SQLite below
  ``min_file_size``, otherwise a file of exactly the body, which is what makes streaming and
  sendfile possible) and, in diskcache's single ``tag`` column, the entry's metadata as JSON
  (content type, ETag, cache tags, stored-at, extra headers). Body and metadata are written as
  ``Cache.set`` writes them (a body file first, then its row), so they change together in one SQLite
  transaction; of two responses under a key, the row keeps the more recent (``_held_is_newer``).
- Segments: a batch (``put_many``) whose bodies from ``SEGMENT_MIN_BODY`` (4 KB, the most a row's
  page holds) up to ``segment_max`` (the memory tier's largest: always read whole) come to
  ``SEGMENT_MIN_BYTES`` writes them into one file, up to ``SEGMENT_BYTES`` of bodies each, rather than a
  file each (from ``min_file_size``) or SQLite's pages (below it), and each row's ``filename``
  names the segment, the body's offset and its length (``seg#offset:length``, a path no earlier
  version can open: it reads such a row as a miss). A file costs the filesystem an inode made
  and freed (on some filesystems far more than writing the body: a filesystem without a
  journal scans past every inode freed in the last minutes), a body in SQLite's pages is
  written twice (its write-ahead log, then the database), and the memory tier's evictions
  reach this tier at the rate of fills. The segment is removed once no row names it
  (``_CleanDisk.remove``, asked after every commit that dropped one of its rows, from any
  process). Until then the space of its rows purged or replaced stays taken, and counted: the
  volume the culls keep within ``size_limit`` counts every segment's whole size (``EdgeSegment``
  and its triggers), so purged space in a segment pushes out the oldest entries until the
  segment's own turn comes (the eviction policy culls in the order rows were stored). A segment
  left behind (a crash before its batch committed, an earlier version removing its last row) is
  removed once it is ``SEGMENT_SWEEP_AGE_S`` old (``sweep_segments``): by the next start, and by the disk writer
  after a batch, once per ``SEGMENT_SWEEP_AGE_S`` (assetcdn/edge/cache/write_behind.py).
- ``EdgeTag`` (ours): a tag -> key index maintained by SQLite triggers on ``Cache``. Because
  the triggers fire inside diskcache's own transactions, the index follows every insert,
  overwrite, eviction (culling), delete and clear, from any process, with no extra write.

Reads go through diskcache's transaction-free fast path (statistics off, and the default
"least-recently-stored" eviction policy never writes on a read); see ``EdgeCache`` for why
they run inline on the event loop.

A full filesystem (the disk fills before ``size_limit``: a small volume, or one shared with
other data) is not an error of the request being served: ``put`` removes what the failed write
left (a partial body file), lowers this process's limit below the volume it reached, evicts
down to it and tries once more; if the body still does not fit it is not stored, and the caller
serves it all the same. The first time in a process it logs a warning; later ones are counted
(``full_events``).

No write retries for ever (``_bounded``): diskcache's own ``retry=True`` retries a failed BEGIN IMMEDIATE on
every SQLite error, at once and without end, and a connection in a state where BEGIN fails immediately (inside
a transaction diskcache no longer tracks, or holding an old read) would spin there, holding the write-behind
lock that purges and close wait for. A write the database refuses through every attempt is dropped: counted
(``dropped_writes``) and logged; the body is served all the same.

A newer response that is not written (the filesystem full, the database refusing it) removes the older row under
its key and tells the other workers (``_retire``): left, it would be served by every worker as the current one.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import math
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Protocol, TypeVar

import diskcache
import orjson

from assetcdn.edge.cache.entry import STREAM_CHUNK, CachedObject, clamp_range
from assetcdn.edge.cache.key_filter import KeyFilter
from assetcdn.edge.cache.sqlite_conn import (
    SQLITE_CACHE_PAGES,
    SQLITE_TEMP_STORE_MEMORY,
    SQLITE_TIMEOUT_S,
    SQLITE_WAL_PAGES,
    ThreadLocalConnection,
)
from assetcdn.edge.states.freshness import http_date
from assetcdn.shared.logs import LinePerInterval

if TYPE_CHECKING:
    from assetcdn.shared.metrics import Metrics

# diskcache's default: bodies below it live inline in SQLite, larger ones as files.
DEFAULT_MIN_FILE_SIZE = 32 * 1024
# Segments (module docstring): the largest body a batch puts in one (the memory tier's largest object by default),
# the smallest (below it a body fits in its row's page) and the bytes of bodies per segment file (a batch writes
# several past it). A batch writes segments when its bodies of those sizes come to SEGMENT_MIN_BYTES: a batch of a
# few small ones keeps them in their rows rather than make a file for them.
DEFAULT_SEGMENT_MAX = 1024 * 1024
SEGMENT_MIN_BODY = 4 * 1024
SEGMENT_MIN_BYTES = 64 * 1024
SEGMENT_BYTES = 64 * 1024 * 1024
SEGMENT_SUFFIX = ".seg"
# A segment file no row names is removed at a start once this old (a younger one may be another process's batch
# that has not committed yet).
SEGMENT_SWEEP_AGE_S = 3600.0
# diskcache opens a connection per thread that touches the cache (the event loop's and each executor
# thread's); its defaults per connection (a 32 MB page cache, a 64 MB memory map) grow with the database until
# they hold much of it, several times over. Ours are small: other reads come from the kernel's page cache.
SQLITE_MMAP_BYTES = 0
# `put_many`: keys per look-up of the files they held (within SQLite's default bound on parameters).
_KEYS_PER_SELECT = 500
# `put_many`'s row: diskcache's `Cache.set` of a raw key without expiry, as one upsert.
# Rows go ROWS_PER_UPSERT to a statement: sqlite3 lets go of the GIL around each statement it steps (each row of an
# executemany), and a writer thread then waits a switch interval to get it back from a busy event loop per step, so a
# batch written a row at a time ran about 20 times slower while the loop served requests (its victims held meanwhile).
ROWS_PER_UPSERT = 100
_UPSERT_ROW = "(?, 1, ?, NULL, ?, 0, ?, ?, ?, ?, ?)"
_UPSERT_PARAMS = _UPSERT_ROW.count("?")


def _upsert(rows: int) -> str:
    return (
        "INSERT INTO Cache (key, raw, store_time, expire_time, access_time, access_count, tag, size, mode, filename,"
        f" value) VALUES {','.join([_UPSERT_ROW] * rows)} ON CONFLICT (key, raw) DO UPDATE SET"
        " store_time = excluded.store_time, expire_time = NULL, access_time = excluded.access_time,"
        " access_count = 0, tag = excluded.tag, size = excluded.size, mode = excluded.mode,"
        " filename = excluded.filename, value = excluded.value"
    )


_UPSERT_FULL = _upsert(ROWS_PER_UPSERT)
# After a full filesystem the limit drops to this share of the volume the cache had reached.
FULL_SHRINK = 0.8
# A cull (``_cull_oldest``) looks at this many of the oldest rows at a time (diskcache's own cull takes them all);
# ``_cull_to_limit`` culls at most CULL_ROUNDS times, a transaction each.
CULL_ROWS = 10
CULL_ROUNDS = 100
# The tier has room (`has_room`) while it holds no more than this share of its size limit: past it, a one-worker
# edge writes only the evicted fills that were asked for again (assetcdn/edge/cache/memory.py, second_hit).
ROOM_SHARE = 15 / 16
FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})
# A write's transaction begins within this many attempts, each waiting up to the busy timeout for another
# worker's write lock; after a failed one the thread's connection is reopened. Then the write is dropped.
BEGIN_ATTEMPTS = 3

log = logging.getLogger(__name__)
# Body files found damaged (`damaged_file`): a line per interval, not one per request for them.
DAMAGED_LINES = LinePerInterval(log, 60.0)
# Older responses not removed after their newer ones could not be written (`DiskTier._retire_pending`): likewise.
UNRETIRED = LinePerInterval(log, 60.0)
T = TypeVar("T")


# Responses not written (`DiskTier._retire`): key to the latest one's stored-at and origin's Date (None: none).
Unwritten = dict[str, tuple[float, str | None]]


def _add_unwritten(unwritten: Unwritten, entries: Iterable[CachedObject]) -> None:
    """Add `entries` (the latest of a key's by stored-at) to what was not written."""
    for obj in entries:
        if unwritten.get(obj.key, (obj.stored_at,))[0] <= obj.stored_at:
            unwritten[obj.key] = (obj.stored_at, date_of(obj.headers))


def date_of(head: object) -> str | None:
    """The Date field of a stored head (name and value pairs: an entry's, or a row's metadata decoded)."""
    if isinstance(head, list | tuple):
        for field in head:
            if len(field) == 2 and field[0] == "date":  # a stored head's names are lower-case
                value = field[1]
                return value if isinstance(value, str) else None
    return None


def _date_order(held: dict[str, Any], date: str | None) -> int:
    """How the response of a row (its metadata decoded, `held`) compares by its origin's Date with one dated `date`:
    1 newer, -1 older, 0 when either has none or they name the same moment. The dates are parsed only when they
    differ as written."""
    held_date = date_of(held.get("h"))
    if held_date is not None and date is not None and held_date != date:
        held_time, time_ = http_date(held_date), http_date(date)
        if held_time is not None and time_ is not None and held_time != time_:
            return 1 if held_time > time_ else -1
    return 0


def _held_is_newer(held: dict[str, Any], held_at: float | None, obj: CachedObject, *, by_date: bool = True) -> bool:
    """Whether the row under `obj`'s key (its metadata decoded, `held`, stored at `held_at`) holds a response newer
    than `obj`'s: the later by its origin's Date (RFC 9111 4: of several stored responses, the most recent by
    Date is used, `_date_order`); of two of the same Date, or without one (not a pull zone's), or not `by_date` (a
    304's refresh of the response held, RFC 9111 4.3.4, whatever its Date), the one stored later. The dates are read
    only here, for a key already held."""
    order = _date_order(held, date_of(obj.headers)) if by_date else 0
    if order:
        return order > 0
    return held_at is not None and held_at > obj.stored_at


def damaged_file(path: str, size: int, found: int) -> None:
    """Log that the body file at `path`, of an entry of `size` bytes, holds `found` bytes (a bad disk, or a hand that
    truncated it): the entry reads as a miss, and the next fill stores the origin's body over it."""
    DAMAGED_LINES.log(logging.WARNING, "body file", "edge cache: body file %s holds %d bytes, not the %d its entry "
                      "stored (a damaged disk?); asked of the origin instead", path, found, size)

class DiskBusy(OSError):
    """The database refused a write's transaction through every attempt: nothing was written."""


def is_disk_full(exc: BaseException) -> bool:
    """A write failed for want of space: ENOSPC (or a quota, or a file size limit) from a body file, or
    SQLite's "database or disk is full" (and the I/O error it reports when its journal cannot grow)."""
    if isinstance(exc, sqlite3.OperationalError):
        text = str(exc)
        return "full" in text or "disk I/O error" in text
    return isinstance(exc, OSError) and exc.errno in FULL_ERRNOS


def segment_row(segment: str, offset: int, length: int) -> str:
    """The ``filename`` of a row whose body is `length` bytes at `offset` of the segment file `segment`."""
    return f"{segment}#{offset}:{length}"


def segment_place(filename: str) -> tuple[str, int, int] | None:
    """The segment, offset and length a row's ``filename`` names; None for a file of its own."""
    segment, mark, place = filename.partition("#")
    if not mark or not segment.endswith(SEGMENT_SUFFIX):
        return None
    offset, _, length = place.partition(":")
    return segment, int(offset), int(length)


def decoded_meta(meta: object) -> dict[str, Any]:
    """A row's metadata (``tag``: JSON), decoded as ``get`` reads it (SQLite's own parse of a float may round it);
    empty for a row without it (not ours, or of an earlier layout)."""
    if not isinstance(meta, str):
        return {}
    try:
        decoded = orjson.loads(meta)
    except orjson.JSONDecodeError:
        return {}
    return decoded if isinstance(decoded, dict) else {}


def stored_at_of(meta: dict[str, Any]) -> float | None:
    """The stored-at a row's decoded metadata ("at") names; None when it has none."""
    at = meta.get("at")
    return float(at) if isinstance(at, int | float) else None


def _file_or_segment(filename: str) -> tuple[str, bool]:
    """A row's body file, or the segment its place is in (what removing it removes), and whether it is one."""
    place = segment_place(filename)
    return (filename, False) if place is None else (place[0], True)


def read_segment(root: str, segment: str, offset: int, length: int) -> bytes | None:
    """A body kept in a segment; None when the segment is gone (its rows evicted since) or shorter."""
    try:
        fd = os.open(os.path.join(root, segment), os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        body = os.pread(fd, length, offset)
    finally:
        os.close(fd)
    return body if len(body) == length else None


class _CleanDisk(diskcache.Disk):  # type: ignore[misc]  # diskcache has no type information
    """diskcache's Disk, but a body file whose write fails (ENOSPC) is removed instead of left behind,
    and the file a store wrote is remembered (per thread) so it can be removed if the row then fails.
    Rows whose body is in a segment (module docstring) are read from it, and removing one removes the
    segment once no row names it."""

    _stored = threading.local()
    # Set by the tier (per instance): whether a row still names a segment; unset, a segment is never removed.
    segment_named: Callable[[str], bool] | None = None

    def remove(self, file_path):  # type: ignore[no-untyped-def]
        place = segment_place(file_path)
        if place is None:
            super().remove(file_path)
        else:
            self.remove_segment(place[0])

    def remove_segment(self, segment: str) -> None:
        """Remove `segment` unless a row names it (asked after the commit that dropped a row of it: of two
        processes dropping its last rows, the later commit sees none)."""
        named = self.segment_named
        if named is not None and not named(segment):
            # Its directory stays (one of 256): the next segments land there, and making one costs an inode too.
            with contextlib.suppress(OSError):  # removed by another process meanwhile
                os.remove(os.path.join(self._directory, segment))

    def fetch(self, mode, filename, value, read):  # type: ignore[no-untyped-def]
        place = segment_place(filename) if mode == diskcache.core.MODE_BINARY and filename else None
        if place is None:
            return super().fetch(mode, filename, value, read)
        body = read_segment(self._directory, *place)
        if body is None:  # diskcache reads ENOENT as a key removed meanwhile
            raise FileNotFoundError(errno.ENOENT, "segment removed", filename)
        return body  # whole, even when asked for a reader: a segment's bodies are read whole

    def store(self, value, read, key=diskcache.core.UNKNOWN):  # type: ignore[no-untyped-def]
        self._stored.filename = None
        if type(value) is bytes and len(value) >= self.min_file_size:
            # One write of the whole body: diskcache's own iterates a BytesIO of it, which yields its lines.
            filename, full_path = self.filename(key, value)  # type: ignore[no-untyped-call]
            self._write(full_path, (value,), "xb")  # type: ignore[no-untyped-call]
            size, mode, db_value = len(value), diskcache.core.MODE_BINARY, None
        else:
            size, mode, filename, db_value = super().store(value, read, key=key)
        self._stored.filename = filename
        return size, mode, filename, db_value

    def columns(self, body: bytes, key: str) -> tuple[int, int, str | None, Any]:
        """diskcache's size, mode, filename and value columns for a body (its file written when it is large)."""
        size, mode, filename, value = self.store(body, False, key=key)  # type: ignore[no-untyped-call]
        self._stored.filename = None
        return size, mode, filename, value

    def take_stored(self) -> str | None:
        filename: str | None = getattr(self._stored, "filename", None)
        self._stored.filename = None
        return filename

    def filename(self, key=diskcache.core.UNKNOWN, value=diskcache.core.UNKNOWN):  # type: ignore[no-untyped-def]
        """diskcache's random name, in one level of 256 directories rather than its two of 65,536: a new body
        file then seldom needs a directory made (nor its removal one removed, diskcache removes emptied ones).
        A row keeps its file's name, so files of either layout are read and removed alike."""
        hex_name = os.urandom(16).hex()
        filename = os.path.join(hex_name[:2], hex_name[2:] + ".val")
        return filename, os.path.join(self._directory, filename)

    def _write(self, full_path, iterator, mode, encoding=None):  # type: ignore[no-untyped-def]
        full_dir = os.path.dirname(full_path)
        for count in range(1, 11):
            try:
                if count > 1:  # the directory is usually there: made once an open says it is not
                    os.makedirs(full_dir, exist_ok=True)
                writer = open(full_path, mode, encoding=encoding)  # noqa: SIM115 (closed below)
            except OSError:
                if count == 10:
                    raise
                continue
            try:
                with writer:
                    size = 0
                    for chunk in iterator:
                        size += len(chunk)
                        writer.write(chunk)
                    return size
            except BaseException:
                try:
                    os.remove(full_path)  # ours: just created with "x"
                except OSError:
                    pass
                raise
        raise OSError(errno.EIO, f"could not open {full_path}")


def _segment_trigger(name: str, when: str) -> str:
    """A trigger for a row of a segment leaving it (deleted, or its filename replaced): its size stays counted
    (diskcache's own trigger took it off), and once no row names the segment its bytes are taken off with it."""
    segment = "substr(OLD.filename, 1, instr(OLD.filename, '#') - 1)"
    left = f"NOT EXISTS (SELECT 1 FROM Cache WHERE filename > {segment} || '#' AND filename < {segment} || '$')"
    return (
        f"CREATE TRIGGER IF NOT EXISTS {name} {when} BEGIN"
        " UPDATE Settings SET value = value + OLD.size WHERE key = 'size';"
        " UPDATE Settings SET value = value - COALESCE("
        f"(SELECT bytes FROM EdgeSegment WHERE name = {segment}), 0) WHERE key = 'size' AND {left};"
        f" DELETE FROM EdgeSegment WHERE name = {segment} AND {left}; END"
    )


# The tags a row's metadata names, for the triggers (OLD or NEW); metadata that is not JSON names none.
_ROW_TAGS = "json_each(CASE WHEN json_valid({row}.tag) THEN {row}.tag ELSE '{{}}' END, '$.tags')"
# One transaction: a worker opening the cache while another writes to it sees the old triggers or the new ones,
# never neither. A row's index entries are found by its own tags (the primary key), so the index needs no
# second b-tree by key: the triggers of earlier versions that deleted by key (and their index) are replaced.
_SCHEMA = (
    "BEGIN IMMEDIATE",
    "CREATE TABLE IF NOT EXISTS EdgeTag ("
    " tag TEXT NOT NULL, key TEXT NOT NULL, PRIMARY KEY (tag, key)) WITHOUT ROWID",
    "CREATE TRIGGER IF NOT EXISTS EdgeTag_insert AFTER INSERT ON Cache"
    " FOR EACH ROW WHEN json_valid(NEW.tag) BEGIN"
    " INSERT OR IGNORE INTO EdgeTag (tag, key)"
    " SELECT value, NEW.key FROM json_each(NEW.tag, '$.tags'); END",
    "DROP TRIGGER IF EXISTS EdgeTag_update",
    "DROP TRIGGER IF EXISTS EdgeTag_delete",
    "DROP INDEX IF EXISTS EdgeTag_key",
    "CREATE TRIGGER IF NOT EXISTS EdgeTag_update_by_tag AFTER UPDATE OF tag ON Cache"
    " FOR EACH ROW BEGIN"
    f" DELETE FROM EdgeTag WHERE key = OLD.key AND tag IN (SELECT value FROM {_ROW_TAGS.format(row='OLD')});"
    " INSERT OR IGNORE INTO EdgeTag (tag, key)"
    f" SELECT value, NEW.key FROM {_ROW_TAGS.format(row='NEW')}; END",
    "CREATE TRIGGER IF NOT EXISTS EdgeTag_delete_by_tag AFTER DELETE ON Cache"
    " FOR EACH ROW BEGIN"
    f" DELETE FROM EdgeTag WHERE key = OLD.key AND tag IN (SELECT value FROM {_ROW_TAGS.format(row='OLD')}); END",
    # Whether a row still names a segment (`DiskTier._segment_named`): the rows with a file only.
    "CREATE INDEX IF NOT EXISTS EdgeCache_filename ON Cache (filename) WHERE filename IS NOT NULL",
    # Each segment's bytes (its bodies, written in the batch's transaction). diskcache's `size` setting (what its
    # volume and culls count) keeps counting a segment's bytes after its rows go, until the last one does: the
    # space of the entries purged or replaced is taken until the file is removed, and the culls see it.
    "CREATE TABLE IF NOT EXISTS EdgeSegment (name TEXT PRIMARY KEY, bytes INTEGER NOT NULL) WITHOUT ROWID",
    _segment_trigger("EdgeSegment_delete", "AFTER DELETE ON Cache FOR EACH ROW WHEN OLD.filename LIKE '%.seg#%'"),
    _segment_trigger("EdgeSegment_update", "AFTER UPDATE OF filename ON Cache FOR EACH ROW"
                     " WHEN OLD.filename LIKE '%.seg#%' AND OLD.filename IS NOT NEW.filename"),
    "COMMIT",
)


class Announcer(Protocol):
    """Who tells the other processes sharing the tier that keys were stored anew (the node's purge log)."""

    def stage_stored(self, con: sqlite3.Connection, entries: Sequence[tuple[str, float]]) -> int:
        """Inside the write transaction that stores the entries (key, stored-at): their notices; returns the last
        one's sequence number."""
        ...

    def publish_stored(self, last: int) -> None:
        """Once that transaction committed: publish the notices up to `last`."""
        ...


class _CountingReader:
    """Wraps a binary stream so the size diskcache writes is known afterwards, and caps each
    read (diskcache asks for 4 MiB at a time) so a streamed put holds little in memory."""

    def __init__(self, raw: BinaryIO) -> None:
        self._raw = raw
        self.size = 0

    def read(self, size: int = -1) -> bytes:
        chunk = self._raw.read(STREAM_CHUNK if size < 0 else min(size, STREAM_CHUNK))
        self.size += len(chunk)
        return chunk


def prefix_end(prefix: str) -> str:
    """The least string above every string that starts with ``prefix`` (non-empty)."""
    return prefix[:-1] + chr(ord(prefix[-1]) + 1)


def encode_meta(
    content_type: str,
    etag: str,
    tags: Sequence[str],
    stored_at: float,
    headers: Sequence[tuple[str, str]],
) -> str:
    return orjson.dumps(  # tuples and lists alike become JSON arrays
        {
            "ct": content_type,
            "etag": etag,
            "tags": tags if isinstance(tags, tuple | list) else list(tags),
            "at": stored_at,
            "h": headers if isinstance(headers, tuple | list) else list(headers),
        }
    ).decode()


class DiskTier:
    """Bounded, restart-surviving body store on ``diskcache.Cache``, with tag purges.

    Process-safe (SQLite WAL): every worker of a node may open the same directory.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        size_limit: int,
        min_file_size: int = DEFAULT_MIN_FILE_SIZE,
        segment_max: int = DEFAULT_SEGMENT_MAX,
        eviction_policy: str = "least-recently-stored",
    ) -> None:
        self.directory = Path(directory)
        # Body files are named by joining strings: a Path per read would also intern each file's unique name
        # in the process's table of interned strings.
        self._root = str(self.directory)
        self._cache = diskcache.Cache(
            self._root,
            disk=_CleanDisk,
            timeout=SQLITE_TIMEOUT_S,  # per attempt (``_bounded``)
            size_limit=size_limit,
            disk_min_file_size=min_file_size,
            eviction_policy=eviction_policy,
            statistics=False,
            tag_index=False,
            sqlite_cache_size=SQLITE_CACHE_PAGES,
            sqlite_mmap_size=SQLITE_MMAP_BYTES,
            sqlite_temp_store=SQLITE_TEMP_STORE_MEMORY,
            sqlite_wal_autocheckpoint=SQLITE_WAL_PAGES,
        )
        # diskcache's own cull (in its `set`) takes its `cull_limit` oldest rows at once, which empties a tier whose
        # limit holds fewer entries (the entry just written included): this tier culls for itself (`_cull_oldest`).
        self._cache.reset("cull_limit", 0, update=False)
        self._oldest = diskcache.core.EVICTION_POLICY[eviction_policy]["cull"].format(
            fields="rowid, filename, size", now=0)
        self._min_file_size = min_file_size
        self._segment_max = segment_max
        self._cache._disk.segment_named = self._segment_named
        self._connection = ThreadLocalConnection(self.database)
        self._sql().executescript(";\n".join(_SCHEMA) + ";")
        self.sweep_segments()
        # Told of each batch's rows in its own transaction, and published once it commits, when other processes
        # share the tier (assetcdn/edge/cache/store.py): none by default.
        self.announce: Announcer | None = None
        self.full_events = 0  # puts that found the filesystem full (logged the first time only)
        self.dropped_writes = 0  # entries not stored because the database refused every attempt (each logged)
        self._full_lock = threading.Lock()
        # The keys whose newer response (stored-at) this process could not write, while the older row under them
        # may still be there: removed before this process's next write, when it could not be at once (`_retire`).
        self._unretired: Unwritten = {}
        self._retire_lock = threading.Lock()
        # The keys written, when this process is the only writer (`track_keys`): a miss of a key never written
        # is answered without SQLite (assetcdn/edge/cache/key_filter.py).
        self._keys: KeyFilter | None = None

    @property
    def size_limit(self) -> int:
        return int(self._cache.size_limit)

    @property
    def database(self) -> Path:
        name: str = diskcache.core.DBNAME
        return self.directory / name

    def __len__(self) -> int:
        return len(self._cache)

    def volume(self) -> int:
        """Bytes on disk: SQLite pages plus body files (what ``size_limit`` bounds)."""
        return int(self._cache.volume())

    def has_room(self) -> bool:
        """Whether this tier takes more without evicting: its volume is within ``ROOM_SHARE`` of its size limit."""
        return self.volume() <= self.size_limit * ROOM_SHARE

    def track_keys(self, on: bool) -> None:
        """Keep (`on`) or stop keeping a filter of the keys written, read first from the rows held: for a process
        that is the only one writing this directory (every other writer's rows would be missed by it)."""
        self._keys = None
        if on:
            self._rebuild_keys(None)

    def may_hold(self, key: str) -> bool:
        """False when this tier holds no row under `key` (known without SQLite: `track_keys`); True when it may."""
        keys_filter = self._keys
        return keys_filter is None or keys_filter.may_hold(key)

    def _add_keys(self, keys: Iterable[str]) -> None:
        """Add `keys` to the filter in use (a rebuild under way ends first; its replacement takes them)."""
        while (keys_filter := self._keys) is not None:
            with keys_filter.lock:
                if self._keys is keys_filter:
                    keys_filter.add_all(keys)
                    return

    def _rebuild_keys(self, full: KeyFilter | None) -> None:
        """A new filter from the keys of the rows held (replacing `full`, unless another thread did already; None:
        the first, on a connection of its own, closed after), read in a write transaction: no write is half done
        meanwhile, and adds wait for the new filter. Left as it is when the transaction cannot begin (it then only
        answers "maybe" more often)."""
        con = self._sql() if full is not None else sqlite3.connect(self.database, timeout=SQLITE_TIMEOUT_S,
                                                                   isolation_level=None)
        try:
            try:
                con.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                log.warning("edge cache %s: the key filter was not rebuilt (%s)", self.directory, exc)
                return
            try:
                if full is None:
                    self._keys = self._read_keys(con)
                else:
                    with full.lock:
                        if self._keys is full:
                            self._keys = self._read_keys(con)
            finally:
                con.execute("COMMIT")
        finally:
            if full is None:
                con.close()

    @staticmethod
    def _read_keys(con: sqlite3.Connection) -> KeyFilter:
        """A filter of every row's key, sized by their count (the keys streamed, not listed)."""
        rows = con.execute("SELECT count(*) FROM Cache WHERE raw = 1").fetchone()[0]
        return KeyFilter((row[0] for row in con.execute("SELECT key FROM Cache WHERE raw = 1")), rows)

    def _keys_filled(self) -> None:
        """After a write: a new filter when the one in use took as many adds as it was sized for."""
        keys_filter = self._keys
        if keys_filter is not None and keys_filter.full:
            self._rebuild_keys(keys_filter)

    def get(self, key: str, *, load_limit: int) -> CachedObject | None:
        """The entry under ``key``; bodies up to ``load_limit`` bytes come back in ``body``,
        larger ones as ``path`` (nothing read but the SQLite row: its size is the row's), except those in a
        segment, which are read whole (no larger than the ``segment_max`` they were written under)."""
        if not self.may_hold(key):
            return None
        row = self._sql().execute(
            "SELECT filename, value, size, tag FROM Cache WHERE key = ? AND raw = 1", (key,)
        ).fetchone()
        if row is None:
            return None
        filename, value, size, meta = row
        body: bytes | None
        path: str | None = None
        if filename is None:
            if not isinstance(value, bytes):  # not a body this tier stored (diskcache's other modes)
                return None
            body, size = value, len(value)
        elif (place := segment_place(filename)) is not None:  # read whole, whatever load_limit: see segment_max
            body = read_segment(self._root, *place)
            if body is None:
                return None
        elif size <= load_limit:
            try:
                with open(os.path.join(self._root, filename), "rb") as file:
                    body = file.read()
            except FileNotFoundError:  # purged or evicted since the row was read
                return None
            if len(body) != size:  # cut short (or written over) on disk since it was stored: not the entry's body
                damaged_file(os.path.join(self._root, filename), size, len(body))
                return None
        else:
            body, path = None, os.path.join(self._root, filename)
        if not isinstance(meta, str):
            return None
        data = decoded_meta(meta)
        try:
            return CachedObject(
                key=key,
                content_type=data["ct"],
                etag=data["etag"],
                tags=data["tags"],
                size=size,
                stored_at=data["at"],
                body=body,
                path=path,
                headers=data["h"],
            )
        except KeyError:  # not the JSON object every entry is stored with: changed on disk (a damaged page)
            DAMAGED_LINES.log(logging.WARNING, "head", "edge cache %s: the stored head of %s cannot be read (a "
                              "damaged disk?); asked of the origin instead", self._root, key)
            return None

    def dated_before(self, key: str, date: str) -> bool:
        """Whether the row under ``key`` holds a response older by the origin's Date than one dated `date`
        (``_date_order``); metadata only, no body read."""
        row = self._sql().execute("SELECT tag FROM Cache WHERE key = ? AND raw = 1", (key,)).fetchone()
        return row is not None and _date_order(decoded_meta(row[0]), date) < 0

    def stored_version(self, key: str, mark: str) -> tuple[float | None, bool] | None:
        """The stored-at time of the entry under ``key`` and whether its head holds the pseudo header field ``mark``
        (``mark_stale`` adds it and leaves the stored-at time as it was); metadata only, no body read. None when
        absent."""
        row = self._sql().execute("SELECT tag FROM Cache WHERE key = ? AND raw = 1", (key,)).fetchone()
        if row is None:
            return None
        meta = decoded_meta(row[0])
        head = meta.get("h")
        marked = isinstance(head, list) and any(isinstance(field, list) and field[:1] == [mark] for field in head)
        return stored_at_of(meta), marked

    def put(
        self,
        key: str,
        body: bytes | BinaryIO,
        *,
        content_type: str,
        etag: str,
        tags: Sequence[str],
        headers: Sequence[tuple[str, str]] = (),
        stored_at: float | None = None,
        unless: Callable[[], bool] | None = None,
        refresh: bool = False,
        kept_out: list[CachedObject] | None = None,
    ) -> int:
        """Store ``body`` (bytes, or a binary stream copied in ``STREAM_CHUNK`` pieces, never
        held whole) and return its size. May evict older entries to respect ``size_limit``.
        On a full filesystem it evicts and tries once more (bytes only: a stream cannot be read
        twice); a body that still does not fit is not stored, and its size is returned all the same.
        `unless` (a purge made meanwhile names the entry): bytes are not stored when it says so once the
        transaction holds the write lock; a stream's entry, written without holding it, is removed after
        when it says so then. A write that fails removes the older row under ``key`` (``_retire``), unless
        `refresh` (the same response with a newer head: the older row is still that response). Bytes older than
        the row under ``key`` (``_held_is_newer``; a `refresh` by when it was stored only) are not stored: their
        entry is added to `kept_out`."""
        if stored_at is None:
            stored_at = time.time()
        if self._unretired:
            self._retire_pending()
        written = busy = False
        try:
            if not isinstance(body, bytes | bytearray | memoryview):
                size, written, busy = self._put_stream(key, body, content_type, etag, tags, headers, stored_at,
                                                       unless, kept_out)
                return size
            data = bytes(body)
            obj = CachedObject(key=key, content_type=content_type, etag=etag, tags=tuple(tags), size=len(data),
                               stored_at=stored_at, body=data,
                               headers=tuple(headers))
            try:
                written = self._put_entry(obj, None if unless is None else (lambda entries: [] if unless() else entries),
                                          kept_out, by_date=not refresh)
            except DiskBusy as exc:
                busy = True
                self._dropped(1, exc)
            self._keys_filled()
            return len(data)
        finally:
            if not written and not refresh and key in self._retire({key: (stored_at, date_of(headers))},
                                                                   at_once=not busy) and kept_out is not None:
                kept_out.append(CachedObject(key=key, content_type=content_type, etag=etag, tags=tuple(tags), size=0,
                                             stored_at=stored_at, headers=tuple(headers)))

    def _put_stream(self, key: str, body: BinaryIO, content_type: str, etag: str, tags: Sequence[str],
                    headers: Sequence[tuple[str, str]], stored_at: float, unless: Callable[[], bool] | None,
                    kept_out: list[CachedObject] | None) -> tuple[int, bool, bool]:
        """``put`` of a stream: its size, whether it was written (or kept out: True), and whether the database
        refused it (not written either). As diskcache's ``set`` writes one (the body's file first, then its row in a
        transaction), but the row is written as ``_batch`` writes one: not over a newer response (``kept_out``
        then), and as stored just after an older one stored later."""
        entry = CachedObject(key=key, content_type=content_type, etag=etag, tags=tags, size=0, stored_at=stored_at,
                             headers=headers)
        reader = _CountingReader(body)
        disk: _CleanDisk = self._cache._disk
        try:
            with self._removing_stored():  # the body's file goes when its row is not written
                written = disk.store(reader, True, key=key)  # type: ignore[no-untyped-call]
                with self._transaction():
                    meta, replaced = self._stream_row(key, entry, written, kept_out)
            stored = disk.take_stored()  # the row's file now, unless it was kept out
            if not meta:
                if stored is not None:
                    self._remove(stored)
                return reader.size, True, False
        except DiskBusy as exc:
            self._dropped(1, exc)
            return reader.size, False, True
        except (OSError, sqlite3.OperationalError) as exc:
            if not is_disk_full(exc):
                raise
            self._disk_full(exc, key, reader.size, retrying=False)
            self._keys_filled()
            return reader.size, False, False
        else:
            self._remove_replaced(replaced)
            self._add_keys((key,))  # before the fill that wrote it lands: no request looked for it yet
            # The cull is a transaction of its own after the row's commit: whatever becomes of it (the disk full,
            # the database busy), the entry is stored, and a purge that named it meanwhile must still remove it.
            try:
                self._cull_after_put(key, reader.size)
            finally:
                if unless is not None and unless():
                    self._delete_written(key, meta)
        self._keys_filled()
        return reader.size, True, False

    def _stream_row(self, key: str, entry: CachedObject, written: tuple[int, int, str | None, Any],
                    kept_out: list[CachedObject] | None) -> tuple[str, list[str | None]]:
        """Inside the write transaction: the row of a streamed body (`written`: diskcache's columns, its file
        written), unless the row under `key` holds a newer response than `entry` (then added to `kept_out`, and
        nothing written: ""). Returns the metadata written and the file of the row it replaced (removed once the
        transaction commits; the cull is the caller's, ``_cull_after_put``)."""
        con: sqlite3.Connection = self._cache._con
        replaced: list[str | None] = []
        stored_at = entry.stored_at
        row = con.execute("SELECT filename, tag FROM Cache WHERE key = ? AND raw = 1", (key,)).fetchone()
        if row is not None:
            decoded = decoded_meta(row[1])
            held_at = stored_at_of(decoded)
            if _held_is_newer(decoded, held_at, entry):
                if kept_out is not None:
                    kept_out.append(entry)
                return "", []
            if held_at is not None and held_at > stored_at:  # as `_batch` writes it
                stored_at = math.nextafter(held_at, math.inf)
            replaced.append(row[0])
        content_type, etag, tags, headers = entry.fields()
        meta = encode_meta(content_type, etag, tags, stored_at, headers)
        now = time.time()
        size, mode, filename, value = written
        con.execute(_upsert(1), (key, now, now, meta, size, mode, filename, value))
        return meta, replaced

    def _cull_after_put(self, key: str, size: int) -> None:
        """``_cull_to_limit`` after a streamed put committed: a full filesystem is handled as the put's own (the
        entry stays stored), a database that refuses the transaction leaves the volume over the limit until the
        next write culls; neither is a write dropped."""
        try:
            self._cull_to_limit()
        except DiskBusy as exc:
            log.warning("edge cache %s: no cull after storing %s: %s", self.directory, key, exc)
        except (OSError, sqlite3.OperationalError) as exc:
            if not is_disk_full(exc):
                raise
            self._disk_full(exc, key, size, retrying=True)

    def _delete_written(self, key: str, meta: str) -> None:
        """Delete the entry under `key` while it is still the one written with `meta` (not a newer one)."""
        con = self._sql()
        con.execute("BEGIN IMMEDIATE")
        try:
            row = con.execute("SELECT filename FROM Cache WHERE key = ? AND raw = 1 AND tag = ?",
                              (key, meta)).fetchone()
            if row is not None:
                con.execute("DELETE FROM Cache WHERE key = ? AND raw = 1", (key,))
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
        if row is not None and row[0] is not None:
            self._remove(row[0])

    @contextmanager
    def _removing_stored(self) -> Iterator[None]:
        """The body file the disk's ``store`` inside this block wrote (``_put_stream``'s) is removed when the block
        fails, whatever the error, its row's commit included."""
        disk: _CleanDisk = self._cache._disk
        disk.take_stored()  # a name an earlier, committed set left: not this block's
        try:
            yield
        except BaseException:
            leftover = disk.take_stored()
            if leftover is not None:
                self._remove(leftover)
            raise

    def put_many(self, entries: Sequence[CachedObject],
                 current: Callable[[Sequence[CachedObject]], Sequence[CachedObject]] | None = None
                 ) -> list[CachedObject]:
        """Store entries with in-memory bodies in one transaction (``_batch``). On an OSError or SQLite's
        OperationalError each entry is then stored on its own, as by ``put`` (a full filesystem is handled there),
        `current` asked again in each one's transaction; other errors are raised. What cannot begin (``_bounded``)
        is dropped. The older rows under the keys of the entries not written are removed (``_retire``). Returns
        the entries kept out by a newer row under their key (``_batch``; or, not written, ``_retire``)."""
        if self._unretired:
            self._retire_pending()
        unwritten: Unwritten = {}
        kept_out: list[CachedObject] = []
        busy = False
        try:
            try:
                self._batch(entries, current, kept_out)
            except DiskBusy as exc:
                busy = True
                self._dropped(len(entries), exc)
                _add_unwritten(unwritten, entries)
            except (OSError, sqlite3.OperationalError):
                busy = self._put_each(entries, current, unwritten, kept_out)
            self._keys_filled()
        finally:
            if unwritten and (newer := self._retire(unwritten, at_once=not busy)):
                kept_out.extend(obj for obj in entries if obj.key in newer and obj.key in unwritten)
        return kept_out

    def _batch(self, entries: Sequence[CachedObject],
               current: Callable[[Sequence[CachedObject]], Sequence[CachedObject]] | None,
               kept_out: list[CachedObject] | None = None, *, by_date: bool = True) -> None:
        """Store entries with in-memory bodies in one transaction (their own ``stored_at``, headers and tags);
        `current`, called once the transaction holds the database's write lock, says which of them are still to
        be written. An entry older than the row under its key (``_held_is_newer``) is not written but added to
        `kept_out`; one newer by its Date than a row stored after it is written as stored just after that row
        (`by_date` False: a refresh, ordered by when it was stored only).
        When the transaction fails, the body files it wrote are removed and the error raised; the
        files of the rows it replaced or culled are removed only once it commits (until then a rollback would
        bring those rows back).

        The rows are written as ``Cache.set`` writes them (the same columns, so diskcache's and the tag index's
        triggers keep count, size and tags), but once per batch rather than per row: the look-up of the files
        the keys held, the upsert (``executemany``), and diskcache's culls (of ``cull_limit`` rows each, one per
        entry at most and only while over the limit, as its ``set`` makes them)."""
        written: list[str] = []
        replaced: list[str | None] = []
        stored_after: dict[str, float] = {}
        announce, announced = self.announce, 0
        cache = self._cache
        disk: _CleanDisk = cache._disk
        try:
            with self._transaction():
                if current is not None:
                    entries = current(entries)
                latest = {obj.key: obj for obj in entries}  # one row per key: the last entry's
                if not latest:
                    return
                con: sqlite3.Connection = cache._con
                keys = list(latest)
                for start in range(0, len(keys), _KEYS_PER_SELECT):
                    chunk = keys[start:start + _KEYS_PER_SELECT]
                    for key, held, meta in con.execute(
                            "SELECT key, filename, tag FROM Cache WHERE raw = 1 AND key IN "
                            f"({','.join('?' * len(chunk))})", chunk):
                        decoded = decoded_meta(meta)
                        held_at, obj = stored_at_of(decoded), latest[key]
                        if _held_is_newer(decoded, held_at, obj, by_date=by_date):
                            # A newer response under the key (another worker's, written since this one was queued,
                            # its notice not yet published or not yet replayed here; or one the origin sent after
                            # this one): kept, not overwritten, and this one's memory copy goes (`kept_out`).
                            del latest[key]
                            if kept_out is not None:
                                kept_out.append(obj)
                            continue
                        if held_at is not None and held_at > obj.stored_at:  # newer by its Date, stored before
                            # Stored as of just after the row it replaces: the notice has every worker drop the
                            # copies of that row it holds (`PurgeLog.note_stored`).
                            stored_after[key] = math.nextafter(held_at, math.inf)
                        if held is not None:
                            replaced.append(held)
                if not latest:
                    return
                now = time.time()
                least = min(SEGMENT_MIN_BODY, self._min_file_size)
                grouped = [(key, obj.body) for key, obj in latest.items()
                           if obj.body is not None and least <= len(obj.body) <= self._segment_max]
                shared = len(grouped) > 1 and sum(len(body) for _, body in grouped) >= SEGMENT_MIN_BYTES
                places = self._write_segments(grouped, written) if shared else {}
                params: list[Any] = []
                filename: str | None
                for key, obj in latest.items():
                    assert obj.body is not None
                    place = places.get(key)
                    if place is not None:
                        size, mode, filename, value = len(obj.body), diskcache.core.MODE_BINARY, place, None
                    else:
                        size, mode, filename, value = disk.columns(obj.body, key)
                        if filename is not None:
                            written.append(filename)
                    content_type, etag, tags, headers = obj.fields()
                    params += (key, now, now, encode_meta(content_type, etag, tags, stored_after.get(
                        key, obj.stored_at), headers), size, mode, filename, value)
                    if len(params) == ROWS_PER_UPSERT * _UPSERT_PARAMS:
                        con.execute(_UPSERT_FULL, params)
                        params = []
                if params:
                    con.execute(_upsert(len(params) // _UPSERT_PARAMS), params)
                self._add_keys(latest)  # before the COMMIT makes the rows readable
                if announce is not None:  # committed with the rows, not in a transaction of their own
                    announced = announce.stage_stored(con, [(key, stored_after.get(key, obj.stored_at))
                                                            for key, obj in latest.items()])
                for _ in latest:  # at most one cull per entry, as single puts would make
                    if not self._cull_oldest(con, replaced.append):
                        break
        except BaseException:
            for name in written:  # rolled back: no row owns them (nor names a segment of them)
                self._remove(name)
            raise
        if announce is not None and announced:
            announce.publish_stored(announced)
        self._remove_replaced(replaced)

    def _cull_oldest(self, con: sqlite3.Connection, gone: Callable[[str | None], None]) -> bool:
        """Inside a write transaction, when the volume is at or over the limit: delete the oldest rows (in the
        eviction policy's order) until the bytes they free bring it under, at most ``CULL_ROWS`` of them, and give
        each one's filename to `gone` (its file is removed once the transaction commits). A body file frees its
        size, a segment its bytes once its last row goes; a body inline frees nothing until SQLite gives its pages
        back at the commit, so inline rows all go, as diskcache's cull takes them. Returns whether it deleted any."""
        cache = self._cache
        excess = cache.volume() - cache.size_limit
        if excess < 0:
            return False
        rows = con.execute(self._oldest, (CULL_ROWS,)).fetchall()
        taken: list[int] = []
        named: dict[str, int] = {}  # the rows still naming each segment met, less those taken
        freed = 0
        for rowid, filename, size in rows:
            taken.append(rowid)
            gone(filename)
            if filename is None:
                continue
            place = segment_place(filename)
            if place is None:
                freed += size
            else:
                segment = place[0]
                left = named.get(segment)
                if left is None:  # counted up to one past what a cull takes: a segment with more stays
                    (left,) = con.execute("SELECT COUNT(*) FROM (SELECT 1 FROM Cache WHERE filename > ? AND"
                                          " filename < ? LIMIT ?)", (segment + "#", segment + "$", CULL_ROWS + 1)
                                          ).fetchone()
                named[segment] = left = left - 1
                if left == 0:
                    row = con.execute("SELECT bytes FROM EdgeSegment WHERE name = ?", (segment,)).fetchone()
                    freed += row[0] if row is not None else 0
            if freed > excess:
                break
        if taken:
            con.execute(f"DELETE FROM Cache WHERE rowid IN ({','.join('?' * len(taken))})", taken)
        return bool(taken)

    def _cull_to_limit(self) -> None:
        """Cull (``_cull_oldest``) until the volume is under the limit, at most ``CULL_ROUNDS`` culls, each in a
        transaction of its own and the files of its rows removed once it commits. Under the limit: no transaction.
        A transaction per cull: the pages of the rows inline are given back only at a commit, so within one
        transaction the volume would not fall for them, and every round would take ten more of them (a thousand
        small entries, then the one just written, for a streamed put a little over the limit); it also lets
        other writers in between."""
        for _ in range(CULL_ROUNDS):
            if self.volume() < self.size_limit:
                return
            replaced: list[str | None] = []
            with self._transaction():
                culled = self._cull_oldest(self._cache._con, replaced.append)
            self._remove_replaced(replaced)
            if not culled:
                return

    def _remove_replaced(self, replaced: Sequence[str | None]) -> None:
        """After the commit that replaced or culled the rows: their files, which no row owns any more (a row inline
        had none); a segment goes once no row names it, asked once per segment however many of its rows went."""
        disk: _CleanDisk = self._cache._disk
        for gone, segment in dict.fromkeys(_file_or_segment(name) for name in replaced if name is not None):
            if segment:
                disk.remove_segment(gone)
            else:
                self._remove(gone)

    def _put_each(self, entries: Sequence[CachedObject],
                  current: Callable[[Sequence[CachedObject]], Sequence[CachedObject]] | None,
                  unwritten: Unwritten, kept_out: list[CachedObject]) -> bool:
        """``put_many``'s entries after its transaction failed, one transaction each, each asking `current` again:
        a purge made since the batch's own check is not undone. The keys of those not written (and their stored-at)
        are added to `unwritten`, on an error raised too. Whether the database refused a transaction throughout."""
        for index, obj in enumerate(entries):
            try:
                if not self._put_entry(obj, current, kept_out):
                    _add_unwritten(unwritten, (obj,))
            except DiskBusy as exc:  # the rest would wait as long each
                self._dropped(len(entries) - index, exc)
                _add_unwritten(unwritten, entries[index:])
                return True
            except BaseException:
                _add_unwritten(unwritten, entries[index:])
                raise
        return False

    def _put_entry(self, obj: CachedObject,
                   current: Callable[[Sequence[CachedObject]], Sequence[CachedObject]] | None,
                   kept_out: list[CachedObject] | None = None, *, by_date: bool = True) -> bool:
        """``_batch`` of one entry, tried once more after evicting when the filesystem is full (what still does
        not fit is not stored: False); raises DiskBusy, and errors other than a full filesystem."""
        for attempt in range(2):
            try:
                self._batch([obj], current, kept_out, by_date=by_date)
                return True
            except (OSError, sqlite3.OperationalError) as exc:
                if not is_disk_full(exc):  # DiskBusy too
                    raise
                self._disk_full(exc, obj.key, obj.size, retrying=attempt == 0)
        return False

    def _retire(self, unwritten: Mapping[str, tuple[float, str | None]], *, at_once: bool = True) -> set[str]:
        """The newer responses `unwritten` (key: stored-at and Date) could not be written: the older rows under their
        keys go (``_retire_pending``), so that no worker goes on serving them as the current ones (RFC 9111 4: the most
        recent response is the one to use), and the other workers drop the copies they hold. `at_once`, or else
        (the database refused the write's every attempt, and would make this one wait as long) before this
        process's next write, as when it cannot be done now. Returns the keys found holding a response not older
        than the one not written (``_retire_pending``): that response is kept out, as a batch keeps it out."""
        with self._retire_lock:
            for key, response in unwritten.items():
                if self._unretired.get(key, response)[0] <= response[0]:
                    self._unretired[key] = response
        return self._retire_pending() if at_once else set()

    def _retire_pending(self) -> set[str]:
        """In one transaction (one attempt: the write that failed waited long enough), delete the rows under the
        keys `_retire` was given that hold an older response than the one not written, as ``_batch`` orders them
        (``_held_is_newer``: by the origin's Date, then by when stored; a row not older is that response's own or
        another worker's newer one, and stays), and tell the other workers, as of that response's stored-at or just
        after the row deleted (``Announcer``): each drops the older copies its memory tier holds. Left for the next
        write when it fails. Returns the keys whose row it kept (none when it failed)."""
        with self._retire_lock:
            taken = dict(self._unretired)
        if not taken:
            return set()
        pending = {key: response[0] for key, response in taken.items()}
        newer: set[str] = set()
        removed: list[str | None] = []
        announce, announced = self.announce, 0
        keys = list(taken)
        try:
            with ExitStack() as stack:
                self._bounded(lambda: stack.enter_context(self._cache.transact()), attempts=1)
                con: sqlite3.Connection = self._cache._con
                for start in range(0, len(keys), _KEYS_PER_SELECT):
                    chunk = keys[start:start + _KEYS_PER_SELECT]
                    for key, filename, meta in con.execute(
                            "SELECT key, filename, tag FROM Cache WHERE raw = 1 AND key IN "
                            f"({','.join('?' * len(chunk))})", chunk).fetchall():
                        decoded = decoded_meta(meta)
                        held_at, (stored_at, date) = stored_at_of(decoded), taken[key]
                        order = _date_order(decoded, date)
                        if order > 0 or (order == 0 and held_at is not None and held_at >= stored_at):
                            del pending[key]  # not older: the response's own row, or a newer one
                            newer.add(key)
                            continue
                        con.execute("DELETE FROM Cache WHERE key = ? AND raw = 1", (key,))
                        removed.append(filename)
                        if held_at is not None and held_at >= stored_at:  # older by its Date, stored later
                            pending[key] = math.nextafter(held_at, math.inf)
                if announce is not None and pending:
                    announced = announce.stage_stored(con, list(pending.items()))
        except (OSError, sqlite3.Error) as exc:
            UNRETIRED.log(logging.ERROR, "retire", "edge cache %s: the older responses under %d keys whose newer "
                          "ones could not be written were not removed (%s); tried again at the next write",
                          self.directory, len(keys), exc)
            return set()
        with self._retire_lock:
            for key, response in taken.items():
                if self._unretired.get(key) == response:  # not failed again meanwhile, for a newer response
                    del self._unretired[key]
        if announce is not None and announced:
            announce.publish_stored(announced)
        self._remove_replaced(removed)
        return newer

    def _remove(self, filename: str) -> None:
        """Remove a body file no row owns, as diskcache does (an emptied directory goes too); a row's place in
        a segment removes the segment once no row names it."""
        self._cache._disk.remove(filename)

    def sweep_segments(self, age_s: float = SEGMENT_SWEEP_AGE_S) -> int:
        """Remove the segment files no row names (``EdgeSegment``) that are `age_s` old: left by a crash between
        a batch's write and its commit, or by an earlier version that removed their last rows. Returns how many."""
        try:
            known = {row[0] for row in self._sql().execute("SELECT name FROM EdgeSegment")}
        except sqlite3.Error as exc:
            log.warning("edge cache %s: the segments could not be listed (%s); none swept", self.directory, exc)
            return 0
        before = time.time() - age_s
        swept = 0
        for directory in os.scandir(self._root):
            if not directory.is_dir(follow_symlinks=False) or len(directory.name) != 2:
                continue
            try:
                items = list(os.scandir(directory.path))
            except FileNotFoundError:  # emptied and removed meanwhile (by any worker's removal of its last file)
                continue
            for item in items:
                name = f"{directory.name}/{item.name}"
                if not item.name.endswith(SEGMENT_SUFFIX) or name in known:
                    continue
                with contextlib.suppress(OSError):
                    if item.stat(follow_symlinks=False).st_mtime < before and not self._segment_named(name):
                        os.remove(item.path)
                        swept += 1
        if swept:
            log.info("edge cache %s: removed %d segment files no entry named", self.directory, swept)
        return swept

    def _segment_named(self, segment: str) -> bool:
        """Whether a row names `segment` (the index on ``filename``: one look-up); True when SQLite cannot say,
        which keeps the file."""
        try:
            return self._sql().execute("SELECT 1 FROM Cache WHERE filename > ? AND filename < ? LIMIT 1",
                                       (segment + "#", segment + "$")).fetchone() is not None
        except sqlite3.Error as exc:
            log.warning("edge cache %s: whether segment %s is in use could not be read (%s); it is kept",
                        self.directory, segment, exc)
            return True

    def _write_segments(self, bodies: Sequence[tuple[str, bytes]], written: list[str]) -> dict[str, str]:
        """Write `bodies` (key, body) into segment files of up to ``SEGMENT_BYTES`` each (a larger body alone in
        one) and record them (``EdgeSegment``, in the caller's transaction); each key's row ``filename``
        (``segment_row``). Each file is added to `written` once it is whole."""
        disk: _CleanDisk = self._cache._disk
        places: dict[str, str] = {}
        start = 0
        while start < len(bodies):
            end, total = start, 0
            while end < len(bodies) and (end == start or total + len(bodies[end][1]) <= SEGMENT_BYTES):
                total += len(bodies[end][1])
                end += 1
            name, full_path = disk.filename()  # type: ignore[no-untyped-call]
            segment = name[: -len(".val")] + SEGMENT_SUFFIX
            disk._write(full_path[: -len(".val")] + SEGMENT_SUFFIX,  # type: ignore[no-untyped-call]
                        (body for _, body in bodies[start:end]), "xb")
            written.append(segment)
            self._cache._con.execute("INSERT INTO EdgeSegment (name, bytes) VALUES (?, ?)", (segment, total))
            offset = 0
            for key, body in bodies[start:end]:
                places[key] = segment_row(segment, offset, len(body))
                offset += len(body)
            start = end
        return places

    def _bounded(self, write: Callable[[], T], *, attempts: int = BEGIN_ATTEMPTS) -> T:
        """`write`: one diskcache write with ``retry=False`` (a failed BEGIN IMMEDIATE raises its Timeout), made
        within `attempts`. Before it, and after a failed attempt, this thread's connection is closed when in a
        state where BEGIN fails at once (a transaction diskcache no longer tracks is rolled back with it, an old
        read ends with it); the next attempt opens a new one. Raises DiskBusy when the last attempt fails too."""
        if self._cache._txn_id == threading.get_ident():  # inside this thread's transaction: no BEGIN to fail
            return write()
        con: sqlite3.Connection | None = getattr(self._cache._local, "con", None)
        if con is not None and con.in_transaction:  # one diskcache does not track: BEGIN would fail at once
            log.warning("edge cache %s: a connection was left inside a transaction; rolled back and reopened",
                        self.directory)
            self._cache.close()
        attempt = 1
        while True:
            try:
                return write()
            except diskcache.Timeout as exc:
                cause = exc.__context__  # diskcache raises Timeout "from None" over SQLite's error
                self._cache.close()
                if attempt >= attempts:
                    raise DiskBusy(errno.EBUSY, f"no write transaction after {attempts} attempts ({cause})") from exc
                log.warning("edge cache %s: a write could not begin (%s); trying again on a new connection",
                            self.directory, cause)
                attempt += 1

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        """diskcache's transaction (its nested writes join it), begun within ``_bounded``'s attempts."""
        with ExitStack() as stack:
            self._bounded(lambda: stack.enter_context(self._cache.transact()))
            yield

    def report_to(self, metrics: Metrics) -> None:
        """Add this tier's full-filesystem events and dropped writes to `metrics` on each of its flushes."""
        metrics.follow_counts([(metrics.disk_full.labels(metrics.kind), lambda: self.full_events),
                               (metrics.disk_dropped_writes.labels(metrics.kind), lambda: self.dropped_writes)])

    def _dropped(self, count: int, exc: DiskBusy) -> None:
        with self._full_lock:
            self.dropped_writes += count
        log.warning("edge cache %s: %d entries not written to the disk tier: %s; they are served all the same",
                    self.directory, count, exc)

    def _disk_full(self, exc: BaseException, key: str, size: int, *, retrying: bool) -> None:
        """After a write that found no space (which removed what it left): lower the limit, evict."""
        with self._full_lock:
            self.full_events += 1
            first = self.full_events == 1
            try:
                volume = int(self._cache.volume())
            except sqlite3.Error:
                volume = self.size_limit
            limit = min(self.size_limit, int(volume * FULL_SHRINK))
            self._cache.reset("size_limit", limit, update=False)  # this process's limit; the file keeps its own
        if first:
            log.warning("edge cache %s: the filesystem is full (%s); caching within %d bytes from now on, "
                        "evicting older entries; what does not fit is served without being cached. "
                        "This is logged once.", self.directory, exc, limit)
        self._evict_files(volume - limit)
        try:
            self._cull_to_limit()  # now that there is room for SQLite's journal, drop their rows
        except (OSError, sqlite3.Error) as cull_error:
            log.debug("evicting after a full filesystem failed: %s", cull_error)
        try:  # whether the cull could run or not (small bodies live in SQLite's pages: no file freed room for it)
            # The write-ahead log keeps the size it grew to (up to ~32 MB between checkpoints): give it back.
            self._sql().execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        except sqlite3.Error as checkpoint_error:
            log.debug("giving back the write-ahead log after a full filesystem failed: %s", checkpoint_error)
        if not retrying:
            log.debug("not cached (no space): %s, %d bytes", key, size)

    def _evict_files(self, excess: int) -> None:
        """Free `excess` bytes at once by deleting the body files of the oldest entries (the order the
        eviction policy culls in). SQLite needs room of its own to delete rows when the disk is full; a
        row left without its file reads as a miss (``get``), and the cull that follows removes it."""
        if excess <= 0:
            return
        rows = self._sql().execute(
            "SELECT filename, size FROM Cache WHERE filename IS NOT NULL ORDER BY store_time"
        )
        freed = 0
        segments: set[str] = set()
        for filename, size in rows:
            if (place := segment_place(filename)) is not None:  # the whole segment goes: its rows read as misses
                filename = place[0]
                if filename in segments:
                    continue
                segments.add(filename)
            try:
                if place is not None:
                    size = os.path.getsize(self.directory / filename)
                os.remove(self.directory / filename)
            except OSError:
                continue
            freed += size
            if freed >= excess:
                break

    def read_range(self, key: str, start: int, end: int) -> bytes | None:
        """Bytes ``[start, end)`` of the body under ``key`` (end exclusive, clamped to the size),
        reading only that span from disk (a body in a segment is read whole); None when the key is absent."""
        try:
            value = self._cache.get(key, default=None, read=True)
        except OSError:
            return None
        if value is None:
            return None
        if isinstance(value, bytes):
            start, end = clamp_range(start, end, len(value))
            return value[start:end]
        with value:
            start, end = clamp_range(start, end, os.fstat(value.fileno()).st_size)
            value.seek(start)
            data: bytes = value.read(end - start)
            return data

    def delete(self, key: str) -> bool:
        return bool(self._bounded(lambda: self._cache.delete(key)))

    def delete_many(self, keys: Iterable[str]) -> list[str]:
        return [key for key in keys if self.delete(key)]

    def keys_for_tags(self, tags: Iterable[str], within: str = "") -> list[str]:
        """Keys of the entries carrying any of ``tags`` and, given ``within``, that tag too (each asked of the tag
        index by its primary key, tag and key: no walk of the entries carrying ``within``)."""
        tag_list = list(dict.fromkeys(tags))
        if not tag_list:
            return []
        marks = ",".join("?" * len(tag_list))
        if within:  # the tags' rows first, each asked for its scope (a join may walk all of the scope's rows)
            query = (f"SELECT DISTINCT key FROM EdgeTag t WHERE tag IN ({marks})"
                     " AND EXISTS (SELECT 1 FROM EdgeTag z WHERE z.tag = ? AND z.key = t.key)")
            rows = self._sql().execute(query, [*tag_list, within]).fetchall()
        else:
            rows = self._sql().execute(f"SELECT DISTINCT key FROM EdgeTag WHERE tag IN ({marks})", tag_list).fetchall()
        return [row[0] for row in rows]

    def purge_tags(self, tags: Iterable[str], within: str = "") -> list[str]:
        """Delete every entry carrying any of ``tags`` (and, given ``within``, that tag too; works across
        restarts); returns keys."""
        return self.delete_many(self.keys_for_tags(tags, within))

    def keys_for_tag_prefixes(self, prefixes: Iterable[str]) -> list[str]:
        """Keys of the entries carrying a tag that starts with any of ``prefixes``: a range of the tag
        index's primary key per prefix, not a scan."""
        keys: dict[str, None] = {}
        for prefix in dict.fromkeys(prefixes):
            if not prefix:
                continue
            rows = self._sql().execute(
                "SELECT key FROM EdgeTag WHERE tag >= ? AND tag < ?", (prefix, prefix_end(prefix))
            ).fetchall()
            keys.update((row[0], None) for row in rows)
        return list(keys)

    def keys_between(self, start: str, end: str, *, inside: bool) -> list[str]:
        """Keys in ``[start, end)`` (``inside``), or all the others: what a soft purge of everything marks,
        and what it removes."""
        where = "key >= ? AND key < ?" if inside else "NOT (key >= ? AND key < ?)"
        rows = self._sql().execute(f"SELECT key FROM Cache WHERE {where}", (start, end)).fetchall()
        return [row[0] for row in rows if isinstance(row[0], str)]

    def mark_stale(self, keys: Iterable[str], mark: str, at: float) -> list[str]:
        """Add the pseudo header field ``(mark, at)`` to the stored head of each of ``keys`` that lacks one
        (body and tags unchanged); returns the keys that hold it now. One transaction per call."""
        key_list = list(dict.fromkeys(keys))
        if not key_list:
            return []
        con = self._sql()
        con.execute("BEGIN IMMEDIATE")
        try:
            marked: list[str] = []
            for key in key_list:
                cursor = con.execute(
                    "UPDATE Cache SET tag = json_insert(tag, '$.h[#]', json_array(?, ?))"
                    " WHERE key = ? AND json_valid(tag) AND NOT EXISTS ("
                    "SELECT 1 FROM json_each(Cache.tag, '$.h') WHERE json_extract(value, '$[0]') = ?)",
                    (mark, repr(at), key, mark),
                )
                if cursor.rowcount or con.execute("SELECT 1 FROM Cache WHERE key = ?", (key,)).fetchone():
                    marked.append(key)
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
        return marked

    def set_head(self, key: str, path: str, meta: str, unless: Callable[[], bool] | None = None) -> bool:
        """Replace the metadata (content type, ETag, tags, stored-at, head: ``encode_meta``) of the entry under
        ``key`` whose body is the file at ``path``, leaving the body as it is; False when the key now holds
        another body or none, or when `unless` says so once the transaction holds the write lock."""
        filename = os.path.relpath(path, self.directory)
        con = self._sql()
        con.execute("BEGIN IMMEDIATE")
        try:
            if unless is not None and unless():
                con.execute("COMMIT")
                return False
            cursor = con.execute("UPDATE Cache SET tag = ? WHERE key = ? AND raw = 1 AND filename = ?",
                                 (meta, key, filename))
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
        return cursor.rowcount == 1

    def clear(self) -> int:
        return int(self._bounded(self._cache.clear))

    def close(self) -> None:
        """Close the calling thread's connections (each thread that used the tier opened its own)."""
        self._cache.close()
        self._connection.close()

    def _sql(self) -> sqlite3.Connection:
        return self._connection.get()
