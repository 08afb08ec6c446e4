"""The memory tier: an in-process LRU of small, hot response bodies, bounded by the memory they hold."""

from __future__ import annotations

import bisect
import sys
import threading
from collections import OrderedDict
from collections.abc import Iterable

from assetcdn.edge.cache.entry import CachedObject

# What the tier's own structures spend per entry beyond the entry's ``footprint``: its slot in the LRU
# (a dict slot and a linked-list node), and per tag its slot in the tag index plus the tag's string, which
# the index holds once however many entries carry it (charged to each, so shared tags are over-counted).
ENTRY_OVERHEAD = 100
TAG_OVERHEAD = 64 + sys.getsizeof("")


def entry_cost(obj: CachedObject, tags: Iterable[str] | None = None) -> int:
    """The bytes an entry costs the tier: what it is charged against ``max_bytes`` (`tags`: its tags, when the
    caller has them already)."""
    return obj.footprint() + ENTRY_OVERHEAD + sum(TAG_OVERHEAD + len(tag) for tag in (obj.tags if tags is None
                                                                                       else tags))


class MemoryTier:
    """LRU over ``CachedObject`` values that carry a ``body``, bounded by ``max_bytes`` of memory: each
    entry is charged what it really holds (``entry_cost``: body, metadata, key, index slots), not only its
    body, so a budget of X MB keeps about X MB.

    ``get`` and ``put`` are O(1); ``purge_tags`` is O(entries carrying those tags) through a tag -> keys
    index (a tag carried by one entry maps to its key alone, not to a set of one), and
    ``purge_tag_prefixes`` finds the tags under a prefix by bisection of the index's tags in order, sorted
    when a prefix purge needs them after tags came or went (rare beside puts, each of which may bring a new
    tag: a pull zone's path tag).
    Objects whose body is larger than ``max_object_size`` are never kept (they stream from the disk
    tier instead). A ``threading.Lock`` guards every operation because puts may come from executor
    threads; uncontended, it costs tens of nanoseconds on a hit.
    The tier is per process: with several workers, each has its own (see ``PurgeLog``).
    """

    def __init__(self, max_bytes: int, max_object_size: int) -> None:
        self.max_bytes = max(0, max_bytes)
        self.max_object_size = max(0, min(max_object_size, self.max_bytes))
        self._entries: OrderedDict[str, CachedObject] = OrderedDict()
        self._by_tag: dict[str, str | set[str]] = {}
        self._sorted_tags: list[str] | None = []  # the keys of _by_tag in order (prefix purges); None: unsorted
        self._bytes = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: str) -> bool:
        return key in self._entries

    @property
    def bytes(self) -> int:
        """What the entries held cost (``entry_cost``), at most ``max_bytes``."""
        return self._bytes

    def accepts(self, size: int) -> bool:
        """Whether an object with a body of ``size`` bytes may live in memory at all."""
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
        until the budget holds. Returns False (and keeps nothing) when the object has no
        in-memory body, is larger than ``max_object_size`` or costs more than the whole budget; an
        older entry under the same key is dropped in that case so the tier never serves a superseded body.
        """
        with self._lock:
            self._remove(obj.key)
            if obj.body is None or not self.accepts(obj.size):
                return False
            tags = obj.tags
            cost = entry_cost(obj, tags)
            if cost > self.max_bytes:
                return False
            self._entries[obj.key] = obj
            self._bytes += cost
            for tag in tags:
                self._index(tag, obj.key)
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
                self._collect(self._by_tag.get(tag), keys)
            return [key for key in keys if self._remove(key)]

    def purge_tag_prefixes(self, prefixes: Iterable[str]) -> list[str]:
        """Remove every entry carrying a tag that starts with any of ``prefixes``; returns the keys removed."""
        with self._lock:
            keys: set[str] = set()
            ordered = self._sorted_tags
            if ordered is None:
                ordered = self._sorted_tags = sorted(self._by_tag)
            for prefix in prefixes:
                at = bisect.bisect_left(ordered, prefix)
                while at < len(ordered) and ordered[at].startswith(prefix):
                    self._collect(self._by_tag.get(ordered[at]), keys)
                    at += 1
            return [key for key in keys if self._remove(key)]

    @staticmethod
    def _collect(held: str | set[str] | None, keys: set[str]) -> None:
        if isinstance(held, str):
            keys.add(held)
        elif held is not None:
            keys |= held

    def clear(self) -> int:
        with self._lock:
            count = len(self._entries)
            self._entries.clear()
            self._by_tag.clear()
            self._sorted_tags = []
            self._bytes = 0
            return count

    def _index(self, tag: str, key: str) -> None:
        held = self._by_tag.get(tag)
        if held is None:
            self._by_tag[tag] = key
            self._sorted_tags = None
        elif isinstance(held, str):
            if held != key:
                self._by_tag[tag] = {held, key}
        else:
            held.add(key)

    def _remove(self, key: str) -> bool:
        obj = self._entries.pop(key, None)
        if obj is None:
            return False
        tags = obj.tags
        self._bytes -= entry_cost(obj, tags)
        for tag in tags:
            held = self._by_tag.get(tag)
            if held is None:
                continue
            if isinstance(held, str):
                if held == key:
                    self._drop_tag(tag)
                continue
            held.discard(key)
            if len(held) == 1:
                self._by_tag[tag] = next(iter(held))
            elif not held:
                self._drop_tag(tag)
        return True

    def _drop_tag(self, tag: str) -> None:
        del self._by_tag[tag]
        self._sorted_tags = None
