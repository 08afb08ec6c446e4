"""What the edge cache hands back: one cached response body and the headers it was stored with."""

from __future__ import annotations

import io
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

STREAM_CHUNK = 256 * 1024


def strong_etag(content_hash: str) -> str:
    """A strong, quoted ETag from a SHA-256 (an asset's manifest hash, a variant's own hash, a segment's
    rendition hash and number), never the git blob id, which names the content in git only."""
    return f'"{content_hash}"'


@dataclass(frozen=True, slots=True)
class CachedObject:
    """One cache entry.

    Exactly one of ``body`` and ``path`` is set:

    - ``body``: the whole response in memory (small objects; everything the memory tier holds).
    - ``path``: a file inside the disk tier's directory holding exactly the body (large objects).
      The file is written once and never modified; eviction or purge unlinks it, so a
      descriptor opened before that keeps reading the complete body (POSIX unlink semantics).
      Opening it later may raise ``FileNotFoundError``: treat that as a miss.
      The HTTP layer can ``sendfile`` from it or stream it with :meth:`iter_chunks`.
    """

    key: str
    content_type: str
    etag: str
    tags: tuple[str, ...]
    size: int
    stored_at: float
    body: bytes | None = None
    path: str | None = None
    headers: tuple[tuple[str, str], ...] = ()

    @property
    def in_memory(self) -> bool:
        return self.body is not None

    def open(self) -> BinaryIO:
        """A binary file object positioned at the start of the body; the caller closes it."""
        if self.body is not None:
            return io.BytesIO(self.body)
        assert self.path is not None
        return open(self.path, "rb")

    def read_range(self, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` (end exclusive, like a slice; HTTP ``bytes=a-b`` is ``(a, b + 1)``).

        Reads from disk for path-backed objects: blocking, but only ``end - start`` bytes.
        """
        start, end = clamp_range(start, end, self.size)
        if self.body is not None:
            return self.body[start:end]
        with self.open() as fh:
            fh.seek(start)
            return fh.read(end - start)

    def iter_chunks(
        self, start: int = 0, end: int | None = None, chunk_size: int = STREAM_CHUNK
    ) -> Iterator[bytes]:
        """Yield the body (or ``[start, end)`` of it) in chunks of at most ``chunk_size`` bytes.

        Opens the file once, on the first ``next()``; each chunk is a blocking read, so an
        async caller should pull chunks through an executor or prefer sendfile.
        """
        start, stop = clamp_range(start, self.size if end is None else end, self.size)
        if self.body is not None:
            view = memoryview(self.body)
            for offset in range(start, stop, chunk_size):
                yield bytes(view[offset : min(offset + chunk_size, stop)])
            return
        with self.open() as fh:
            fh.seek(start)
            remaining = stop - start
            while remaining > 0:
                chunk = fh.read(min(chunk_size, remaining))
                if not chunk:
                    return
                remaining -= len(chunk)
                yield chunk


def clamp_range(start: int, end: int, size: int) -> tuple[int, int]:
    """``[start, end)`` limited to ``[0, size)``; an empty range comes back as ``(start, start)``."""
    start = max(0, min(start, size))
    end = max(start, min(end, size))
    return start, end
