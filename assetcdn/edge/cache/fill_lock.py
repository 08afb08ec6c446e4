"""One cache fill per URL for all the workers of an edge: a byte-range lock per flight key on a file they share.

The workers of an edge share its disk tier. Without this, a URL new to the edge that two workers miss at the same
moment is fetched twice, and the fleet's shielding would have one worker ask another over HTTP for it (a second
fill inside the edge, through the shield worker's application, about four times a plain fill's CPU). Here a
worker that leads a URL's flight (assetcdn/edge/states/pull.py `Flights`) takes the URL's byte of this file first,
and holds it until what it fetched is stored (on disk: with several workers a fill is written before its flight
ends). A worker that finds the byte taken waits for it to be let go, then looks in the disk tier, as a request
waiting for a flight of its own worker does. This is how nginx's `proxy_cache_lock` shares a fill between workers.

Open file description locks (Linux's ``F_OFD_SETLK``): each worker's open of the file holds its own locks, which a
second open conflicts with even in the same process (the tests run several workers in one), and they go with the
process, so a worker killed mid-fill leaves no lock behind. A key's byte is a 62-bit hash of it: two keys of one
byte (about one pair in 10^18) only take turns. One worker may lead flights of two keys of one byte at once; the
byte is let go when the last of them ends (`_held` counts them).

A fill the origin failed (no answer in time, none at all) leaves that word in the file before it lets go of the
URL (`failed`): a record of the key's byte and the time, in one of `FAILURE_SLOTS` fixed places at the start of the
file (which the byte-range locks, advisory, do not touch). The workers that waited for that fill read it
(`failed_since`) and answer with the same failure at once, rather than each ask the origin that just failed (a
client's wait twice as long before its 504, and a request each to a failing origin). A record another key's
failure overwrote meanwhile (one slot per 4,096th of the keys) is only missed: the waiter asks the origin itself.
Its time is the host's monotonic clock (``time.monotonic``: CLOCK_MONOTONIC, one for every process of the host, as
the workers sharing this file are), not the wall clock: stepped back by a time sync, the wall clock made an earlier
failure of the key look newer than a wait that began after it, whose fill then succeeded. A record whose time is
past the clock's now is from before the host restarted (the file outlives it; the clock starts again), and ignored.

Cost: two ``fcntl`` calls per fill (take, let go); a wait polls the byte (one call each time, at most every 20 ms),
and reads one record when it ends; a failed fill writes one.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import logging
import os
import struct
import time
from pathlib import Path

log = logging.getLogger(__name__)
# struct flock on Linux (64-bit off_t): l_type, l_whence, l_start, l_len, l_pid (0 for OFD locks), and its padding.
_FLOCK = struct.Struct("hhqqi4x")
_SPAN = 1 << 62  # the byte offsets keys hash to
_BUSY = (errno.EAGAIN, errno.EACCES)
FILL_LOCK_FILE = "fills.lock"  # in the edge's cache directory, beside the disk tier its workers share
# A failed fill's record: the key's byte, when it failed (`time.monotonic`), whether for want of time. FAILURE_SLOTS
# of them.
_FAILURE = struct.Struct("<qd?7x")
FAILURE_SLOTS = 4096


def _flock(kind: int, offset: int) -> bytes:
    return _FLOCK.pack(kind, os.SEEK_SET, offset, 1, 0)


def key_offset(key: str) -> int:
    """The byte of the lock file that stands for `key`."""
    return int.from_bytes(hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=8).digest(),
                          "big") % _SPAN


class NodeFillLock:
    """A worker's side of its edge's fill lock (the module docstring)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        self._held: dict[int, int] = {}  # offset -> flights of this worker holding it

    @classmethod
    def open(cls, path: Path) -> NodeFillLock | None:
        """The worker's side of the lock at `path`; None (logged) when the file cannot be opened: each worker then
        fills on its own, as with ``[origin] shield_siblings = false``."""
        try:
            return cls(path)
        except OSError as exc:
            log.warning("the edge's fill lock (%s) cannot be opened: %s; a URL several workers miss at once is "
                        "fetched by each", path, exc)
            return None

    def take(self, offset: int) -> bool:
        """Take a key's byte (`key_offset`) for a fill this worker leads; False when another worker of the edge
        holds it."""
        held = self._held.get(offset)
        if held:
            self._held[offset] = held + 1
            return True
        fd = self._fd
        if fd is None:  # closed (the worker stopping): no other worker is kept waiting by this one
            return True
        try:
            fcntl.fcntl(fd, fcntl.F_OFD_SETLK, _flock(fcntl.F_WRLCK, offset))
        except OSError as exc:
            if exc.errno in _BUSY:
                return False
            self._give_up(exc)  # a file system without these locks: fills go on, each worker on its own
            return True
        self._held[offset] = 1
        return True

    def release(self, offset: int) -> None:
        """Let go of a byte taken by `take` (once the last flight of this worker holding it ends)."""
        held = self._held.get(offset, 0)
        if held > 1:
            self._held[offset] = held - 1
            return
        self._held.pop(offset, None)
        if held and self._fd is not None:
            try:
                fcntl.fcntl(self._fd, fcntl.F_OFD_SETLK, _flock(fcntl.F_UNLCK, offset))
            except OSError as exc:  # raised, it would fail the answer of the flight ending, and keep the byte held
                self._give_up(exc)  # closing the file lets go of it, and of every other byte this worker holds

    def held_elsewhere(self, offset: int) -> bool:
        """Whether another worker of the edge holds a key's byte now (a worker waiting for its fill asks this)."""
        if self._fd is None or self._held.get(offset):
            return False
        try:
            answer = fcntl.fcntl(self._fd, fcntl.F_OFD_GETLK, _flock(fcntl.F_WRLCK, offset))
        except OSError as exc:
            self._give_up(exc)
            return False
        kind: int = _FLOCK.unpack(answer)[0]
        return kind != fcntl.F_UNLCK

    def _give_up(self, exc: OSError) -> None:
        log.warning("the edge's fill lock (%s) failed: %s; this worker's fills no longer wait for the other "
                    "workers' (a URL they miss at once is fetched by each)", self.path, exc)
        self.close()

    def failed(self, offset: int, timeout: bool) -> None:
        """Record that this worker's fill of a key (its byte, held) got no answer from the origin (`timeout`: none in
        time), for the workers waiting for it (`failed_since`); before the byte is let go."""
        fd = self._fd
        if fd is None:
            return
        try:
            os.pwrite(fd, _FAILURE.pack(offset, time.monotonic(), timeout), (offset % FAILURE_SLOTS) * _FAILURE.size)
        except OSError as exc:  # the waiters then ask the origin themselves, as before this record
            log.warning("the edge's fill lock (%s) cannot record a failed fill: %s", self.path, exc)

    def failed_since(self, offset: int, since: float) -> bool | None:
        """Whether the fill of a key (its byte) another worker ended since `since` (`time.monotonic`) failed for want of
        time (True) or got no answer at all (False); None when no such failure is recorded."""
        fd = self._fd
        if fd is None:
            return None
        try:
            record = os.pread(fd, _FAILURE.size, (offset % FAILURE_SLOTS) * _FAILURE.size)
        except OSError:
            return None
        if len(record) < _FAILURE.size:
            return None
        recorded, at, timeout = _FAILURE.unpack(record)
        # Not after now: a record from before the host restarted (this file outlives it, the clock starts again).
        return bool(timeout) if recorded == offset and since <= at <= time.monotonic() else None

    def close(self) -> None:
        """Let go of every byte this worker holds (closing the file does) and take no more."""
        fd, self._fd = self._fd, None
        self._held.clear()
        if fd is not None:
            os.close(fd)
