"""Which keys the disk tier may hold, known without asking SQLite: a Bloom filter of the keys written.

A cache miss of an edge with one worker (the only process writing its disk tier) asks the filter first: a key it
has never been given is not on disk, and the miss skips the SQLite look-up (a read transaction, its file locks and
a page read, on the event loop). A key it was given may be on disk (or
may have been, or collide): then SQLite is asked as before. So the filter may answer "maybe" wrongly; "no" wrongly
only for a row another process wrote, which a one-worker edge's directory does not have.

What keeps "no" true (assetcdn/edge/cache/disk.py):
- every key is added before a request can look it up: inside the write transaction of a batch, before its
  COMMIT; for a streamed body, right after its write commits and before its fill lands (the requests for that
  URL wait for the fill);
- a rebuild (the keys of every row, read in a write transaction, so no other write is half done) happens
  between writes, in the writing thread, and the filter it replaces takes no adds meanwhile (one lock);
- deleted rows are not removed (a Bloom filter cannot): they only make "maybe" more frequent until the next
  rebuild, which starts from the rows held then.

Its size is 32 bits per row held at the rebuild (at least ``MIN_BITS``), with three probes per key: rebuilt when
the adds since reach a sixteenth of the bits (about 2% of absent keys are then asked of SQLite all the same).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

MIN_BITS = 1 << 20     # 128 KB
BITS_PER_ROW = 32
FULL_AT = 16           # rebuilt once adds reach bits / FULL_AT
_U64 = (1 << 64) - 1


class KeyFilter:
    """A Bloom filter of strings, three probes from the key's hash (double hashing); adds under ``lock`` (two
    threads setting bits of one byte would lose one), checks lock-free (bytes of a bytearray that only ever
    gain bits)."""

    __slots__ = ("_bits", "_mask", "_room", "_lock")

    def __init__(self, keys: Iterable[str] = (), rows: int = 0) -> None:
        size = MIN_BITS
        while size < BITS_PER_ROW * rows:
            size <<= 1
        self._bits = bytearray(size >> 3)
        self._mask = size - 1
        self._room = size // FULL_AT  # adds left before a rebuild is due
        self._lock = threading.Lock()
        for key in keys:
            self._set(key)

    def may_hold(self, key: str) -> bool:
        """False when `key` was never added (not on disk); True when it may have been."""
        bits, mask = self._bits, self._mask
        h = hash(key) & _U64
        step = (h >> 32) | 1
        at = h & mask
        if not bits[at >> 3] >> (at & 7) & 1:
            return False
        at = (at + step) & mask
        if not bits[at >> 3] >> (at & 7) & 1:
            return False
        at = (at + step) & mask
        return bool(bits[at >> 3] >> (at & 7) & 1)

    def add_all(self, keys: Iterable[str]) -> None:
        """Add `keys`; the caller holds ``lock`` (and has checked this is still the filter in use)."""
        for key in keys:
            self._set(key)
            self._room -= 1

    @property
    def full(self) -> bool:
        """Whether a rebuild is due (absent keys are asked of SQLite more and more often past this)."""
        return self._room <= 0

    @property
    def lock(self) -> threading.Lock:
        """Held by adds: a rebuild holds it from its read of the rows until it replaces this filter."""
        return self._lock

    def _set(self, key: str) -> None:
        bits, mask = self._bits, self._mask
        h = hash(key) & _U64
        step = (h >> 32) | 1
        at = h & mask
        for _ in range(3):
            bits[at >> 3] |= 1 << (at & 7)
            at = (at + step) & mask
