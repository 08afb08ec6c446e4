"""What the edge cache hands back: one cached response body and the headers it was stored with."""

from __future__ import annotations

import io
import sys
from collections.abc import Iterator, Sequence
from typing import BinaryIO, cast

STREAM_CHUNK = 256 * 1024


def strong_etag(content_hash: str) -> str:
    """A strong, quoted ETag from a SHA-256 (an asset's manifest hash, a variant's own hash, a segment's
    rendition hash and number), never the git blob id, which names the content in git only."""
    return f'"{content_hash}"'


# Separates the fields of an entry's metadata string; no header value, tag, content type or ETag holds it
# (an entry whose fields do, which HTTP does not allow, keeps them as tuples instead).
SEP = "\0"


def pack_meta(content_type: str, etag: str, tags: Sequence[str], headers: Sequence[Sequence[str]]) -> str | None:
    """Content type, ETag, the tag count, the tags, then each header's name and value, joined by ``SEP``;
    None when one of them holds ``SEP``."""
    parts = [content_type, etag, str(len(tags)), *tags]
    for name, value in headers:
        parts.append(name)
        parts.append(value)
    packed = SEP.join(parts)
    return packed if packed.count(SEP) == len(parts) - 1 else None


class CachedObject:
    """One cache entry.

    Exactly one of ``body`` and ``path`` is set:

    - ``body``: the whole response in memory (small objects; everything the memory tier holds).
    - ``path``: a file inside the disk tier's directory holding exactly the body (large objects).
      The file is written once and never modified; eviction or purge unlinks it, so a
      descriptor opened before that keeps reading the complete body (POSIX unlink semantics).
      Opening it later may raise ``FileNotFoundError``: treat that as a miss.
      The HTTP layer can ``sendfile`` from it or stream it with :meth:`iter_chunks`.

    The memory tier holds many of these, so one costs little beside its body: the content type, ETag,
    tags and header fields live in one string (``_meta``), read back into their usual forms when asked
    for; the size of an in-memory body is its length. Immutable, like the tuples it gives out. Weakly
    referable: what holds on to an entry beside the memory tier (the hit path's prepared hits) must not keep
    it alive once the tier has let it go.
    """

    __slots__ = ("key", "body", "path", "stored_at", "_size", "_meta", "__weakref__")

    key: str
    body: bytes | None
    path: str | None
    stored_at: float
    _size: int | None
    _meta: str | tuple[str, str, tuple[str, ...], tuple[tuple[str, str], ...]]

    def __init__(
        self,
        key: str,
        content_type: str,
        etag: str,
        tags: Sequence[str],
        size: int,
        stored_at: float,
        body: bytes | None = None,
        path: str | None = None,
        headers: Sequence[Sequence[str]] = (),
    ) -> None:
        meta = pack_meta(content_type, etag, tags, headers)
        init = object.__setattr__
        init(self, "key", key)
        init(self, "body", body)
        init(self, "path", path)
        init(self, "stored_at", stored_at)
        init(self, "_size", None if body is not None and len(body) == size else size)
        if meta is None:
            init(self, "_meta", (content_type, etag, tuple(tags), tuple((name, value) for name, value in headers)))
        else:
            init(self, "_meta", meta)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"CachedObject is immutable: cannot set {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"CachedObject is immutable: cannot delete {name!r}")

    def __repr__(self) -> str:
        where = f"body={len(self.body)} bytes" if self.body is not None else f"path={self.path!r}"
        return f"CachedObject(key={self.key!r}, size={self.size}, {where}, etag={self.etag!r})"

    @property
    def size(self) -> int:
        size = self._size
        if size is None:  # only when the body is in memory
            return len(cast(bytes, self.body))
        return size

    def footprint(self) -> int:
        """Bytes this entry holds in memory: the object, its key, body, metadata and stored-at."""
        return (OBJECT_SIZE + sys.getsizeof(self.key) + sys.getsizeof(self.body) + sys.getsizeof(self._meta)
                + FLOAT_SIZE)

    @property
    def content_type(self) -> str:
        meta = self._meta
        return meta[: meta.index(SEP)] if isinstance(meta, str) else meta[0]

    @property
    def etag(self) -> str:
        meta = self._meta
        if isinstance(meta, str):
            start = meta.index(SEP) + 1
            return meta[start : meta.index(SEP, start)]
        return meta[1]

    @property
    def tags(self) -> tuple[str, ...]:
        meta = self._meta
        if not isinstance(meta, str):
            return meta[2]
        fields = meta.split(SEP, 3)  # the header fields after the tags stay in one piece
        count = int(fields[2])
        return tuple(fields[3].split(SEP, count)[:count]) if count else ()

    @property
    def headers(self) -> tuple[tuple[str, str], ...]:
        meta = self._meta
        if not isinstance(meta, str):
            return meta[3]
        fields = meta.split(SEP)
        pairs = iter(fields[3 + int(fields[2]) :])
        return tuple(zip(pairs, pairs, strict=True))

    def fields(self) -> tuple[str, str, tuple[str, ...], tuple[tuple[str, str], ...]]:
        """Content type, ETag, tags and headers at once (one pass over the metadata string, where each property
        makes its own): what the disk tier's writer stores of each entry."""
        meta = self._meta
        if not isinstance(meta, str):
            return meta
        fields = meta.split(SEP)
        count = int(fields[2])
        pairs = iter(fields[3 + count :])
        return fields[0], fields[1], tuple(fields[3 : 3 + count]), tuple(zip(pairs, pairs, strict=True))

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


class MemoryOnly(CachedObject):
    """An entry in the memory tier only, not on disk yet: a one-worker edge's fill (``EdgeCache.put_behind``),
    written to the disk tier when the memory tier evicts it or the cache is flushed. The class is the flag, so
    the entry costs what a ``CachedObject`` costs (no slot more); ``written`` turns it into one."""

    __slots__ = ()


def written(obj: CachedObject) -> None:
    """`obj` is on disk now: from then on an ordinary entry (its class changes, its identity stays, so the hit
    path's references to it remain valid). Only the memory tier calls it, under its lock."""
    if type(obj) is MemoryOnly:
        object.__setattr__(obj, "__class__", CachedObject)


# What ``footprint`` counts beside the strings and bytes: the object itself and its stored-at float.
OBJECT_SIZE = sys.getsizeof(CachedObject("", "", "", (), 0, 0.0, body=b""))
FLOAT_SIZE = sys.getsizeof(0.0)


def clamp_range(start: int, end: int, size: int) -> tuple[int, int]:
    """``[start, end)`` limited to ``[0, size)``; an empty range comes back as ``(start, start)``."""
    start = max(0, min(start, size))
    end = max(start, min(end, size))
    return start, end

