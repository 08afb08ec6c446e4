"""The manifest generation a node's cache has taken every purge up to, shared by the node's workers.

Every worker of a node keeps its own manifest replica and learns each generation on its own (a
push to it, or a catch-up), but they share one disk tier. A worker that learns a generation late
(it registered after the generation was pushed, missed the push, or fell behind far enough to be
sent a snapshot) must not apply that generation's purges to the shared disk again: another worker
applied them when they were made, and everything cached since then (after the purge) would go too.
So a generation's purges are applied to the node's cache once, by the first worker that learns it,
and this file records how far that has got.

The number lives in a small file next to the disk tier, read and written under an exclusive
``flock`` that is held while the purges themselves run, so two workers never both decide to apply
the same generation.
"""

from __future__ import annotations

import fcntl
import os
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

APPLIED_FILE = "edge-applied.gen"
_FORMAT = struct.Struct("<q")


@dataclass(frozen=True, slots=True)
class GenerationPurge:
    """What one manifest generation removes from the cache: entries carrying any of ``tags`` or a tag that
    starts with one of ``tag_prefixes``, or all. ``soft``: what can be revalidated is marked stale instead
    (``EdgeCache.purge_generations``). ``within``: a scope for ``tags``, the entries that also carry this tag (a
    zone's, for a tag purge within one zone); empty, none."""

    generation: int
    tags: tuple[str, ...] = ()
    everything: bool = False
    tag_prefixes: tuple[str, ...] = ()
    soft: bool = False
    within: str = ""


@dataclass(slots=True)
class Applied:
    """The generation read under the lock; set ``generation`` to record a new one on release."""

    generation: int


class AppliedGeneration:
    def __init__(self, directory: Path) -> None:
        self._path = directory / APPLIED_FILE

    @contextmanager
    def hold(self) -> Iterator[Applied]:
        """The node's applied generation, exclusively (across threads and processes) until the block ends;
        the value the block leaves in it is written back. Blocking: call from an executor."""
        fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # one open file description per call: threads exclude each other too
            raw = os.pread(fd, _FORMAT.size, 0)
            read = _FORMAT.unpack(raw)[0] if len(raw) == _FORMAT.size else 0
            applied = Applied(read)
            yield applied
            if applied.generation != read:
                os.pwrite(fd, _FORMAT.pack(applied.generation), 0)
        finally:
            os.close(fd)  # releases the lock

    def read(self) -> int:
        with self.hold() as applied:
            return applied.generation
