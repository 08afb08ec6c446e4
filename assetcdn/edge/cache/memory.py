"""The memory tier: an in-process LRU of small, hot response bodies, bounded by the memory they hold."""

from __future__ import annotations

import bisect
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from assetcdn.edge.cache.entry import CachedObject, MemoryOnly, written
from assetcdn.edge.cache.tags import PATH_TAG_PREFIX

if TYPE_CHECKING:
    from assetcdn.shared.metrics import Metrics

# What the tier's own structures spend per entry beyond the entry's ``footprint``: its slot in the LRU
# (a dict slot and a linked-list node) and its path tag's in the prefix purges' set and order (PREFIXED_TAGS; an
# entry without one is over-counted), and per tag its slot in the tag index plus the tag's string, which
# the index holds once however many entries carry it (charged to each, so shared tags are over-counted).
ENTRY_OVERHEAD = 150
TAG_OVERHEAD = 64 + sys.getsizeof("")
# Evicted memory-only entries waiting for the disk writer (the victims) hold at most this share of ``max_bytes``,
# kept for them out of the budget while the tier has victims to keep (``keeps_victims``: a one-worker edge), so that
# entries and victims together stay within ``max_bytes``: half of it for those waiting for the writer, beyond which
# the oldest waiting go unwritten (or the newest one alone stays), and half for the batch it is writing.
VICTIM_SHARE = 8
# The hit path's prepared heads (assetcdn/edge/fastpath/hit_server.py) are charged to the budget too, up to this
# share of it: what they hold is taken from what the entries may hold (``charge_heads``).
HEADS_SHARE = 4
# Unread memory-only entries let go at eviction are remembered in two generations of GHOSTS keys each, a bitmap of
# GHOST_BITS bits per generation (256 KB) set at one bit per key's hash: so that a URL asked for again after its entry
# went is written when it is evicted the next time. A key taken for a ghost by a shared bit (about 3% of the others
# when a generation is full) is only written as if it had been asked for again.
GHOSTS = 1 << 16
GHOST_BITS = 1 << 21
# The tags a purge by prefix names (assetcdn/edge/node.py `prefix_tag`): path tags, one or a few per entry. Only
# they are kept in order for it: sorting every tag instead (an origin may name dozens per response, up to 16 KB
# of them) took about 0.7 s of a full default tier whenever a prefix purge came after a fill, holding the
# interpreter, so the worker's every request, and again in each worker that replays the purge.
PREFIXED_TAGS = PATH_TAG_PREFIX


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
    ``purge_tag_prefixes`` finds the tags under a prefix by bisection of the index's path tags in order (the
    tags a prefix purge names: ``PREFIXED_TAGS``), sorted when a prefix purge needs them after path tags came or
    went (rare beside puts, each of which may bring a new one: a pull zone's path tag).
    Objects whose body is larger than ``max_object_size`` are never kept (they stream from the disk
    tier instead). A ``threading.Lock`` guards every operation because puts may come from executor
    threads; uncontended, it costs tens of nanoseconds on a hit.
    The tier is per process: with several workers, each has its own (see ``PurgeLog``).

    A ``MemoryOnly`` entry (not on disk yet: assetcdn/edge/cache/write_behind.py) that the LRU evicts for room
    moves to the victims, where it waits for the disk writer (``on_victims`` is told, outside the lock): still
    found by ``victim``, and removed by the purges, ``discard`` and a newer ``put`` under its key as an entry is,
    so the writer (which writes only what is still there) never brings back what they removed. The victims have
    a room of their own within ``max_bytes`` (``keeps_victims``), so the budget bounds them too. An entry queued for
    the disk writer (``queued``: a fill other workers read from disk, or one that replaces what the disk tier may
    hold) that the LRU evicts before its batch is a victim too, outside that bound: written all the same.

    With ``second_hit`` (the default), once the disk tier is full (``disk_has_room`` False, kept by the disk writer),
    a memory-only entry put since then becomes a victim only if it was read since it was put (``get``): one nobody
    asked for again is let go at eviction (counted in ``unread_dropped``) rather than push out of the disk tier what
    is there, and its key is remembered among the ghosts, so that the next fill of that key is written when it is
    evicted in turn. An entry put while the disk tier had room is written when evicted, read or not, unless the
    writer is behind the evictions (``victims_pressing``) at that moment: an evicted entry nobody read since its put
    is let go then as well (ghosted the same way), whatever the disk tier's room, so that a flood of one-time URLs
    does not have every fill wait for the writer to write the one-time URLs before it; what was read is still
    written.
    """

    def __init__(self, max_bytes: int, max_object_size: int, *, second_hit: bool = True) -> None:
        self.max_bytes = max(0, max_bytes)
        self.max_object_size = max(0, min(max_object_size, self.max_bytes))
        self._entries: OrderedDict[str, CachedObject] = OrderedDict()
        self._by_tag: dict[str, str | set[str]] = {}
        self._path_tags: set[str] = set()  # the keys of _by_tag under PREFIXED_TAGS
        self._sorted_tags: list[str] | None = []  # _path_tags in order (prefix purges); None: unsorted
        self._bytes = 0
        self._lock = threading.Lock()
        self._unwritten = 0  # the MemoryOnly entries among _entries
        self._victims: OrderedDict[str, CachedObject] = OrderedDict()
        self._victim_costs: dict[str, int] = {}  # each victim's entry_cost when it became one
        # The victims the disk writer has not taken yet (`victims`), oldest first, and what they cost: the bound is
        # on them, half the victims' room (those taken are being written: at most one batch's worth, at most that
        # half, at a time, so that all of them stay within the room).
        self._waiting: OrderedDict[str, int] = OrderedDict()
        self._waiting_bytes = 0
        self._victim_bytes = 0  # what every victim costs, those being written included
        self.victim_bytes_gone = 0  # what the victims written, let go or removed so far cost (a running total)
        self._limit = self.max_bytes  # what the entries may cost: max_bytes less the victims' room
        # What the hit path's prepared heads hold (``charge_heads``): changed on the event loop only, by the hit
        # servers (the http and the https site's), `head_holders` of them, which share ``heads_room``.
        self.heads_bytes = 0
        self.head_holders = 0
        self.victims_dropped = 0  # evicted memory-only entries let go unwritten (the victims were full)
        self.on_victims: Callable[[], None] | None = None  # called after a put moved entries to the victims
        self.second_hit = second_hit
        self.disk_has_room = True  # set by the disk writer (assetcdn/edge/cache/write_behind.py) after each batch
        self.in_flight: frozenset[str] = frozenset()  # the keys of the disk writer's batch under way (set by it)
        # The memory-only entries not read since their put (with second_hit), each with whether the disk tier was full
        # at its put: let go at eviction while the disk tier is full (if so) or while the writer is behind (either).
        self._unread: dict[str, bool] = {}
        # The entries queued for the disk writer and not settled yet (``queued``): one the LRU evicts before its
        # batch becomes a victim, written all the same (the disk tier may hold an older response under its key).
        self._queued: dict[str, CachedObject] = {}
        # Of them, those a notice of an older response stored later left (``discard_older``): their batch orders them
        # against it by the origin's Date, and writes one newer as stored just after it (assetcdn/edge/cache/disk.py
        # `_batch`); once written (or another row replaced theirs meanwhile), they are read from the disk (``settle``).
        self._spared: dict[str, CachedObject] = {}
        self._ghosts = bytearray(GHOST_BITS // 8)  # the keys of unread entries let go, newest generation
        self._old_ghosts = bytearray(GHOST_BITS // 8)
        self._ghosted = 0  # keys set in the newest generation
        self.unread_dropped = 0  # unread memory-only entries let go at eviction (second_hit)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: str) -> bool:
        return key in self._entries

    @property
    def unwritten(self) -> int:
        """How many entries the tier holds that are not on disk: memory-only entries and victims."""
        return self._unwritten + len(self._victims)

    @property
    def keeps_victims(self) -> bool:
        """Whether the tier keeps a share of ``max_bytes`` for victims (`VICTIM_SHARE`): when it holds memory-only
        entries (a one-worker edge: assetcdn/edge/cache/store.py `alone`); the entries then cost at most the rest."""
        return self._limit < self.max_bytes

    @keeps_victims.setter
    def keeps_victims(self, keeps: bool) -> None:
        with self._lock:
            self._limit = self.max_bytes - (self.max_bytes // VICTIM_SHARE if keeps else 0)

    @property
    def victims_pressing(self) -> bool:
        """The victims (waiting for the disk writer or being written) hold over half their room: the writer is
        behind the evictions, and new fills wait for it (assetcdn/edge/cache/store.py `put_behind`) and reads from
        the disk tier are not brought into memory (`EdgeCache.get`), rather than have victims let go; evicted
        entries nobody read since their put are let go meanwhile (with ``second_hit``)."""
        return self._victim_bytes * 2 > self.max_bytes // VICTIM_SHARE

    @property
    def heads_room(self) -> int:
        """At most what the hit path's prepared heads may hold (the hit path keeps them within it); with no memory
        tier (a budget of 0), no bound: `edge.hot_heads_max` alone bounds them then."""
        return self.max_bytes // HEADS_SHARE if self.max_bytes else sys.maxsize

    def charge_heads(self, cost: int) -> None:
        """The hit path holds a new prepared head costing `cost` (negative: let go): charged to the budget, whose
        least recently used entries make room as for a ``put``. On the event loop."""
        with self._lock:
            self.heads_bytes += cost
            victims = cost > 0 and self._evict_over()
        if victims and self.on_victims is not None:
            self.on_victims()

    @property
    def victim_bytes(self) -> int:
        """What the victims cost (``entry_cost``): at most ``max_bytes`` less the entries' ``bytes``."""
        return self._victim_bytes

    @property
    def victim_count(self) -> int:
        return len(self._victims)

    @property
    def bytes(self) -> int:
        """What the entries held cost (``entry_cost``), at most ``max_bytes`` (less the victims' room when the tier
        ``keeps_victims``)."""
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
        """The entry under ``key``, now the most recently used, and read (``second_hit``); None when absent."""
        with self._lock:
            obj = self._entries.get(key)
            if obj is not None:
                self._entries.move_to_end(key)
                if self._unread:
                    self._unread.pop(key, None)
            return obj

    def put(self, obj: CachedObject) -> bool:
        """Keep ``obj`` as the most recently used entry, evicting the least recently used ones
        until the budget holds. Returns False (and keeps nothing) when the object has no
        in-memory body, is larger than ``max_object_size`` or costs more than the whole budget; an
        older entry under the same key is dropped in that case so the tier never serves a superseded body.
        """
        with self._lock:
            self._remove(obj.key)
            self._unvictim(obj.key)
            if obj.body is None or not self.accepts(obj.size):
                return False
            tags = obj.tags
            cost = entry_cost(obj, tags)
            if cost > self._limit - self.heads_bytes:
                return False
            self._entries[obj.key] = obj
            self._bytes += cost
            if type(obj) is MemoryOnly:
                self._unwritten += 1
                # A URL let go unread before is written when evicted this time, read or not.
                if self.second_hit and not self._is_ghost(obj.key):
                    self._unread[obj.key] = not self.disk_has_room
            for tag in tags:
                self._index(tag, obj.key)
            victims = self._evict_over()
        if victims and self.on_victims is not None:
            self.on_victims()
        return True

    def _evict_over(self) -> bool:
        """Evict the least recently used entries while the entries cost more than they may (the budget less the
        victims' room and the heads); whether memory-only ones became victims. The caller holds the lock."""
        victims = False
        limit = self._limit - self.heads_bytes
        while self._bytes > limit and self._entries:
            oldest = next(iter(self._entries))
            evicted = self._entries[oldest]
            unread = self._unread.get(oldest)  # None: read since its put (or not a memory-only entry)
            cost = self._drop(oldest, evicted)
            if type(evicted) is not MemoryOnly:
                if self._queued.get(oldest) is not evicted:  # on disk already: a copy
                    continue
                self._victimize(evicted, cost)  # queued for the disk writer: written all the same
                victims = True
            elif unread is not None and (unread and not self.disk_has_room or self.victims_pressing):
                self._ghost(oldest)
            else:
                self._victimize(evicted, cost)
                victims = True
        return victims

    def victim(self, key: str) -> CachedObject | None:
        """The evicted memory-only entry under ``key`` that the disk writer has not taken yet (lock-free: one
        dict read); None when there is none."""
        return self._victims.get(key)

    def victims(self) -> list[CachedObject]:
        """The victims now, oldest first, taken by the disk writer: the victims' bound lets none of them go until
        `settle` (one it let go while it was being written would be counted as unwritten, and written): they count
        in the bound, which lets go the oldest of those evicted since."""
        with self._lock:
            self._waiting.clear()
            self._waiting_bytes = 0
            return list(self._victims.values())

    def queued(self, obj: CachedObject) -> None:
        """``obj`` (an entry put here) waits for the disk writer until ``settle``: evicted meanwhile, it becomes a
        victim, still found by ``victim`` and written by the next batch, unless a purge or a newer entry under its
        key removes it first."""
        with self._lock:
            self._queued[obj.key] = obj

    def holds(self, obj: CachedObject) -> bool:
        """Whether ``obj`` itself is still here, as an entry or as a victim (not purged or replaced since)."""
        key = obj.key
        return self._entries.get(key) is obj or self._victims.get(key) is obj

    def memory_only(self) -> list[CachedObject]:
        """The entries not on disk (``MemoryOnly``), least recently used first; victims are not among them."""
        with self._lock:
            return [obj for obj in self._entries.values() if type(obj) is MemoryOnly] if self._unwritten else []

    def carrying(self, tags: Iterable[str], prefixes: Iterable[str], within: str = "") -> list[CachedObject]:
        """The entries carrying any of ``tags`` (and, given ``within``, that tag too) or a tag under any of
        ``prefixes`` (nothing removed)."""
        with self._lock:
            keys: set[str] = set()
            for tag in tags:
                self._collect(self._by_tag.get(tag), keys)
            if within:
                keys = self._within(keys, within)
            self._prefixed(prefixes, keys)
            return [self._entries[key] for key in keys if key in self._entries]

    def settle(self, taken: Iterable[CachedObject], *, stored: bool) -> None:
        """The disk writer is done with ``taken``: the victims among them go, and when they were ``stored``, the
        memory-only entries among them are ordinary entries from now on (an eviction lets them go unwritten)."""
        with self._lock:
            for obj in taken:
                key = obj.key
                if self._queued.get(key) is obj:
                    del self._queued[key]
                if self._spared.get(key) is obj:
                    del self._spared[key]
                    if stored:  # the row is this one as stored just after that one, or a newer one since
                        self._remove_object(obj)
                if self._victims.get(key) is obj:
                    self._unvictim(key)
                elif stored and type(obj) is MemoryOnly:
                    if self._entries.get(key) is obj:
                        self._unwritten -= 1
                        self._unread.pop(key, None)
                    written(obj)

    def forget(self, obj: CachedObject) -> None:
        """Remove ``obj`` itself, as an entry or as a victim (a newer entry under its key stays)."""
        with self._lock:
            self._remove_object(obj)

    def report_to(self, metrics: Metrics) -> None:
        """Add the memory-only entries let go unwritten (``unread_dropped``, ``victims_dropped``) to `metrics` on
        each of its flushes."""
        evictions = metrics.memory_unwritten_evictions
        metrics.follow_counts([(evictions.labels(metrics.kind, "unread"), lambda: self.unread_dropped),
                               (evictions.labels(metrics.kind, "writer_behind"), lambda: self.victims_dropped)])

    def _ghost(self, key: str) -> None:
        """Let an unread entry go unwritten, remembering its key for the next fill of it."""
        self.unread_dropped += 1
        if self._ghosted >= GHOSTS:
            self._old_ghosts, self._ghosts = self._ghosts, self._old_ghosts
            self._ghosts[:] = bytes(len(self._ghosts))
            self._ghosted = 0
        bit = hash(key) & (GHOST_BITS - 1)
        self._ghosts[bit >> 3] |= 1 << (bit & 7)
        self._ghosted += 1

    def _is_ghost(self, key: str) -> bool:
        bit = hash(key) & (GHOST_BITS - 1)
        mask = 1 << (bit & 7)
        return bool((self._ghosts[bit >> 3] | self._old_ghosts[bit >> 3]) & mask)

    def _victimize(self, obj: CachedObject, cost: int) -> None:
        """Move an evicted memory-only entry (`cost`: its ``entry_cost``) to the victims."""
        self._victims[obj.key] = obj
        self._victim_costs[obj.key] = cost
        self._victim_bytes += cost
        # A queued fill the writer's batch under way is writing (it settles it), or one queued for the next batch
        # (never let go by the bound: it may replace an older response on disk, and its fill waits for it).
        if obj.key in self.in_flight or type(obj) is not MemoryOnly:
            return
        self._waiting[obj.key] = cost
        self._waiting_bytes += cost
        half = self.max_bytes // VICTIM_SHARE // 2
        while self._waiting_bytes > half and len(self._waiting) > 1:  # the newest stays, however large
            self._unvictim(next(iter(self._waiting)))
            self.victims_dropped += 1

    def _unvictim(self, key: str) -> bool:
        if self._victims.pop(key, None) is None:
            return False
        cost = self._victim_costs.pop(key)
        if self._waiting.pop(key, None) is not None:
            self._waiting_bytes -= cost
        self._victim_bytes -= cost
        self.victim_bytes_gone += cost
        return True

    def discard(self, key: str) -> bool:
        with self._lock:
            return self._remove(key) | self._unvictim(key)

    def queued_older(self, key: str, stored_at: float) -> CachedObject | None:
        """The entry under ``key`` (or its victim) stored before ``stored_at`` that waits for the disk writer
        (``queued``); None when there is none."""
        with self._lock:
            obj = self._older(key, stored_at)
            return obj if obj is not None and self._queued.get(key) is obj else None

    def discard_older(self, key: str, stored_at: float, spared: CachedObject | None = None) -> bool:
        """Remove the entry under ``key`` when it was stored before ``stored_at`` (another worker stored a newer
        response under the key in the shared disk tier); a copy of that response, or a newer one, stays. So does
        `spared` while it waits for the disk writer (``queued_older``): a response newer by the origin's Date than
        the one stored, which its batch writes as stored just after it (assetcdn/edge/cache/disk.py `_batch`); it is
        read from the disk tier once written (``settle``)."""
        with self._lock:
            obj = self._older(key, stored_at)
            if obj is None:
                return False
            if obj is spared and self._queued.get(key) is obj:
                self._spared[key] = obj
                return False
            return self._remove_object(obj)

    def _older(self, key: str, stored_at: float) -> CachedObject | None:
        """The entry under ``key``, or else its victim (an evicted fill waiting for the disk writer), when stored
        before ``stored_at``. The caller holds the lock."""
        obj = self._entries.get(key)
        if obj is None:
            obj = self._victims.get(key)
        return obj if obj is not None and obj.stored_at < stored_at else None

    def _remove_object(self, obj: CachedObject) -> bool:
        """Remove ``obj`` itself, as an entry or as a victim. The caller holds the lock."""
        key = obj.key
        if self._entries.get(key) is obj:
            return self._remove(key)
        return self._victims.get(key) is obj and self._unvictim(key)

    def discard_many(self, keys: Iterable[str]) -> list[str]:
        with self._lock:
            return [key for key in keys if self._remove(key) | self._unvictim(key)]

    def purge_tags(self, tags: Iterable[str], within: str = "") -> list[str]:
        """Remove every entry carrying any of ``tags`` and, given ``within``, that tag too (a tag purge within one
        zone: ``within`` is its tag); returns the keys removed."""
        with self._lock:
            keys: set[str] = set()
            for tag in tags:
                self._collect(self._by_tag.get(tag), keys)
            if within:
                keys = self._within(keys, within)
            if self._victims:
                wanted = set(tags)
                keys.update(key for key, obj in self._victims.items()
                            if not wanted.isdisjoint(obj.tags) and (not within or within in obj.tags))
            return [key for key in keys if self._remove(key) | self._unvictim(key)]

    def _within(self, keys: set[str], within: str) -> set[str]:
        """Those of ``keys`` whose entries carry the tag ``within`` (the index's keys of it, not copied: the
        intersection walks the smaller set)."""
        held = self._by_tag.get(within)
        if held is None:
            return set()
        if isinstance(held, str):
            return {held} if held in keys else set()
        return keys & held

    def purge_tag_prefixes(self, prefixes: Iterable[str]) -> list[str]:
        """Remove every entry carrying a tag that starts with any of ``prefixes``; returns the keys removed."""
        with self._lock:
            keys: set[str] = set()
            prefixes = self._prefixed(prefixes, keys)
            if self._victims and prefixes:
                keys.update(key for key, obj in self._victims.items()
                            if any(tag.startswith(prefixes) for tag in obj.tags))
            return [key for key in keys if self._remove(key) | self._unvictim(key)]

    def _prefixed(self, prefixes: Iterable[str], keys: set[str]) -> tuple[str, ...]:
        """Add to ``keys`` the entries carrying a tag under any of ``prefixes`` (returned as a tuple)."""
        prefixes = tuple(prefixes)
        if not prefixes:
            return prefixes
        if all(prefix.startswith(PREFIXED_TAGS) for prefix in prefixes):
            ordered = self._sorted_tags
            if ordered is None:
                ordered = self._sorted_tags = sorted(self._path_tags)
        else:  # a prefix outside the path tags (no purge names one): every tag, in order, this once
            ordered = sorted(self._by_tag)
        for prefix in prefixes:
            at = bisect.bisect_left(ordered, prefix)
            while at < len(ordered) and ordered[at].startswith(prefix):
                self._collect(self._by_tag.get(ordered[at]), keys)
                at += 1
        return prefixes

    @staticmethod
    def _collect(held: str | set[str] | None, keys: set[str]) -> None:
        if isinstance(held, str):
            keys.add(held)
        elif held is not None:
            keys |= held

    def clear(self) -> int:
        with self._lock:
            count = len(self._entries) + len(self._victims)
            self._entries.clear()
            self._by_tag.clear()
            self._path_tags.clear()
            self._sorted_tags = []
            self._bytes = 0
            self._unwritten = 0
            self._victims.clear()
            self._victim_costs.clear()
            self._waiting.clear()
            self._waiting_bytes = 0
            self.victim_bytes_gone += self._victim_bytes
            self._victim_bytes = 0
            self._unread.clear()
            return count

    def _index(self, tag: str, key: str) -> None:
        held = self._by_tag.get(tag)
        if held is None:
            self._by_tag[tag] = key
            if tag.startswith(PREFIXED_TAGS):
                self._path_tags.add(tag)
                self._sorted_tags = None
        elif isinstance(held, str):
            if held != key:
                self._by_tag[tag] = {held, key}
        else:
            held.add(key)

    def _remove(self, key: str) -> bool:
        obj = self._entries.get(key)
        if obj is None:
            return False
        self._drop(key, obj)
        return True

    def _drop(self, key: str, obj: CachedObject) -> int:
        """Remove the entry `obj` under `key` and what indexes it; returns what it cost (``entry_cost``)."""
        del self._entries[key]
        tags = obj.tags
        cost = entry_cost(obj, tags)
        self._bytes -= cost
        if type(obj) is MemoryOnly:
            self._unwritten -= 1
            if self._unread:
                self._unread.pop(key, None)
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
        return cost

    def _drop_tag(self, tag: str) -> None:
        del self._by_tag[tag]
        if tag.startswith(PREFIXED_TAGS):
            self._path_tags.discard(tag)
            self._sorted_tags = None
