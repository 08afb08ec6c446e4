"""The memory tier: an in-process LRU of small, hot response bodies, bounded by bytes."""

from __future__ import annotations

import bisect
import threading
from collections import OrderedDict
from collections.abc import Iterable

from assetcdn.edge.cache.entry import CachedObject


class MemoryTier:
    """LRU over ``CachedObject`` values that carry a ``body``, bounded by total body bytes.

    ``get`` and ``put`` are O(1) (a put of a tag new to the tier also inserts it in a sorted list);
    ``purge_tags`` is O(entries carrying those tags) through a tag -> keys index, and
    ``purge_tag_prefixes`` finds the tags under a prefix by bisection of that sorted list. Objects larger than ``max_object_size`` are never kept (they stream
    from the disk tier instead). A ``threading.Lock`` guards every operation because puts
    may come from executor threads; uncontended, it costs tens of nanoseconds on a hit.
    The tier is per process: with several workers, each has its own (see ``PurgeLog``).
    """

    def __init__(self, max_bytes: int, max_object_size: int) -> None:
        self.max_bytes = max(0, max_bytes)
        self.max_object_size = max(0, min(max_object_size, self.max_bytes))
        self._entries: OrderedDict[str, CachedObject] = OrderedDict()
        self._by_tag: dict[str, set[str]] = {}
        self._sorted_tags: list[str] = []   # the keys of _by_tag, in order (prefix purges)
        self._bytes = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: str) -> bool:
        return key in self._entries

    @property
    def bytes(self) -> int:
        return self._bytes

    def accepts(self, size: int) -> bool:
        """Whether an object of ``size`` bytes may live in memory at all."""
        return 0 < self.max_bytes and size <= self.max_object_size

    def hit(self, key: str) -> CachedObject | None:
        """``get`` for the event loop's hit path, without the lock: one dict lookup and an O(1)
        reorder. Safe against puts and purges in executor threads: each dict operation is atomic
        under the GIL, a key removed between the two steps is simply not reordered, and neither
        step changes the byte count or the tag index the lock protects."""
        obj = self._entries.get(key)
        if obj is not None:
            try:
                self._entries.move_to_end(key)
            except KeyError:
                pass
        return obj

    def get(self, key: str) -> CachedObject | None:
        with self._lock:
            obj = self._entries.get(key)
            if obj is not None:
                self._entries.move_to_end(key)
            return obj

    def put(self, obj: CachedObject) -> bool:
        """Keep ``obj`` as the most recently used entry, evicting the least recently used ones
        until the byte budget holds. Returns False (and keeps nothing) when the object has no
        in-memory body or is larger than ``max_object_size``; an older entry under the same
        key is dropped in that case so the tier never serves a superseded body.
        """
        with self._lock:
            self._remove(obj.key)
            if obj.body is None or not self.accepts(obj.size):
                return False
            self._entries[obj.key] = obj
            self._bytes += obj.size
            for tag in obj.tags:
                keys = self._by_tag.get(tag)
                if keys is None:
                    keys = self._by_tag[tag] = set()
                    bisect.insort(self._sorted_tags, tag)
                keys.add(obj.key)
            while self._bytes > self.max_bytes:
                oldest = next(iter(self._entries))
                self._remove(oldest)
            return True

    def discard(self, key: str) -> bool:
        with self._lock:
            return self._remove(key)

    def discard_many(self, keys: Iterable[str]) -> list[str]:
        with self._lock:
            return [key for key in keys if self._remove(key)]

    def purge_tags(self, tags: Iterable[str]) -> list[str]:
        """Remove every entry carrying any of ``tags``; returns the keys removed."""
        with self._lock:
            keys: set[str] = set()
            for tag in tags:
                keys |= self._by_tag.get(tag, set())
            return [key for key in keys if self._remove(key)]

    def purge_tag_prefixes(self, prefixes: Iterable[str]) -> list[str]:
        """Remove every entry carrying a tag that starts with any of ``prefixes``; returns the keys removed."""
        with self._lock:
            keys: set[str] = set()
            for prefix in prefixes:
                at = bisect.bisect_left(self._sorted_tags, prefix)
                while at < len(self._sorted_tags) and self._sorted_tags[at].startswith(prefix):
                    keys |= self._by_tag[self._sorted_tags[at]]
                    at += 1
            return [key for key in keys if self._remove(key)]

    def clear(self) -> int:
        with self._lock:
            count = len(self._entries)
            self._entries.clear()
            self._by_tag.clear()
            self._sorted_tags.clear()
            self._bytes = 0
            return count

    def _remove(self, key: str) -> bool:
        obj = self._entries.pop(key, None)
        if obj is None:
            return False
        self._bytes -= obj.size
        for tag in obj.tags:
            keys = self._by_tag.get(tag)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._by_tag[tag]
                    del self._sorted_tags[bisect.bisect_left(self._sorted_tags, tag)]
        return True
