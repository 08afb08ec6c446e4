"""A one-worker edge (``EdgeCache.alone``): a fill stored behind is in the memory tier only, and reaches the disk
tier when the memory tier evicts it for room, or at a flush or shutdown; purges, newer fills and soft purges
see it as they see an entry on disk."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from itertools import count
from pathlib import Path
from typing import Any

import pytest

from assetcdn.edge.cache import memory, store, write_behind
from assetcdn.edge.cache.memory import VICTIM_SHARE, entry_cost
from assetcdn.edge.cache.store import SOFT_PURGED, EdgeCache
from assetcdn.shared.config import load_settings
from assetcdn.shared.metrics import Metrics
from tests.support.edge_cache import HEAD, KB, MB, HeldWriter, on_disk

BODY = b"a" * KB
KEY = "pull:z:/a"
TAGS = ["path-a", "origin-x"]
OTHERS = count()


def one_worker(directory: Path) -> EdgeCache:
    """A cache of a one-worker edge whose memory tier holds about ten 1 KB entries."""
    cache = EdgeCache(directory, disk_size_limit=64 * MB, memory_bytes=16 * KB, memory_max_object=4 * KB)
    cache.alone = True
    return cache


@pytest.fixture
def cache(tmp_path: Path) -> Iterator[EdgeCache]:
    edge_cache = one_worker(tmp_path / "cache")
    yield edge_cache
    edge_cache.close()


def fill_the_disk(cache: EdgeCache) -> EdgeCache:
    """Store entries on disk until the disk tier has no room left: what it writes from now on pushes out others."""
    for n in range(10_000):
        if not cache.disk.has_room():
            break
        cache.put(f"pull:z:/filler-{n}", b"f" * (4 * KB), "text/plain", '"f"', ["path-filler"], headers=HEAD)
    assert not cache.disk.has_room()
    cache.alone = True  # as at a start: the memory tier learns that the disk tier is full
    return cache


@pytest.fixture
def full(tmp_path: Path) -> Iterator[EdgeCache]:
    edge_cache = EdgeCache(tmp_path / "cache", disk_size_limit=512 * KB, memory_bytes=16 * KB,
                           memory_max_object=4 * KB)
    yield fill_the_disk(edge_cache)
    edge_cache.close()


def fill(cache: EdgeCache, writer: HeldWriter, key: str = KEY, body: bytes = BODY, etag: str = '"1"',
         *, read: bool = True) -> None:
    """A fill of `key`, then (`read`) a request that reads it: an entry read again is one the disk tier keeps."""
    assert cache.put_behind(key, body, "text/plain", etag, TAGS, HEAD, writer=writer) is not None
    if read:
        assert cache.get(key) is not None


def evict(cache: EdgeCache, key: str = KEY) -> None:
    """Store other entries (on disk already: no victims of their own) until the memory tier evicts `key`'s."""
    while key in cache.memory:
        cache.put(f"pull:z:/other-{next(OTHERS)}", BODY, "text/plain", '"o"', ["path-other"], headers=HEAD)


def test_a_fill_is_on_disk_only_once_flushed_and_is_not_written_again_when_evicted(cache: EdgeCache) -> None:
    writer = HeldWriter()
    fill(cache, writer)
    writer.run()
    assert on_disk(cache, KEY) is None and cache.get(KEY).body == BODY  # type: ignore[union-attr]
    stats = cache.stats()
    assert (stats.memory_entries, stats.disk_entries, stats.unwritten_entries) == (1, 0, 1)
    cache.flush_writes()
    assert on_disk(cache, KEY) == BODY
    assert cache.stats().unwritten_entries == 0
    evict(cache)
    assert cache.memory.victim(KEY) is None  # on disk already: nothing to write


def test_an_evicted_entry_is_written_and_then_served_from_disk_with_its_head(cache: EdgeCache) -> None:
    writer = HeldWriter()
    fill(cache, writer)
    writer.run()
    assert on_disk(cache, KEY) is None
    evict(cache)
    waiting = cache.get(KEY)  # until its batch, served from the victims
    assert waiting is not None and waiting.body == BODY
    assert cache.stats().unwritten_entries == 1
    assert writer.jobs
    writer.run()
    assert on_disk(cache, KEY) == BODY and cache.memory.victim(KEY) is None
    served = cache.get(KEY)
    assert served is not None and served is not waiting
    assert (served.body, served.content_type, served.etag, served.tags, served.headers) == (
        BODY, "text/plain", '"1"', tuple(TAGS), HEAD)
    evict(cache)  # read back from disk: never written again
    assert cache.memory.victim(KEY) is None


PURGES: dict[str, Callable[[EdgeCache], int]] = {
    "key": lambda cache: cache.purge_keys([KEY]),
    "tag": lambda cache: cache.purge_tags(["origin-x"]),
    "prefix": lambda cache: cache.purge_tag_prefixes(["path-"]),
    "all": lambda cache: cache.purge_all(),
}


@pytest.mark.parametrize("where", ["in memory", "evicted", "evicted during the purge"])
@pytest.mark.parametrize("purge", list(PURGES))
def test_a_purge_leaves_nothing_of_a_memory_only_entry(cache: EdgeCache, purge: str, where: str,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    writer = HeldWriter()
    fill(cache, writer)
    writer.run()
    assert on_disk(cache, KEY) is None
    if where == "evicted":
        evict(cache)
        assert cache.get(KEY) is not None  # queued for the disk tier, still served
    elif where == "evicted during the purge":  # after the purge wrote what was queued, before its memory step
        flush = cache._writes.flush

        def flush_then_evict() -> None:
            flush()
            evict(cache)

        monkeypatch.setattr(cache._writes, "flush", flush_then_evict)
    assert PURGES[purge](cache) >= 1
    writer.run()
    cache.flush_writes()
    assert on_disk(cache, KEY) is None and cache.get(KEY) is None


@pytest.mark.parametrize("newer", ["put_behind", "put", "put_behind, evicted too"])
def test_a_newer_fill_is_not_overwritten_by_the_older_ones_eviction(cache: EdgeCache, newer: str) -> None:
    writer = HeldWriter()
    fill(cache, writer)
    evict(cache)
    assert cache.get(KEY).body == BODY  # type: ignore[union-attr]  # the older one, evicted, not written yet
    if newer == "put":
        cache.put(KEY, b"newer", "text/plain", '"2"', TAGS, headers=HEAD)
    else:
        fill(cache, writer, body=b"newer", etag='"2"')
        if newer == "put_behind, evicted too":
            evict(cache)
    writer.run()
    cache.flush_writes()
    assert on_disk(cache, KEY) == b"newer"
    stored = cache.disk.get(KEY, load_limit=MB)
    assert stored is not None and stored.etag == '"2"'


async def test_shutdown_writes_the_memory_only_entries_and_a_restart_finds_them(tmp_path: Path) -> None:
    cache = one_worker(tmp_path / "cache")
    writer = HeldWriter()
    keys = [f"pull:z:/kept-{n}" for n in range(4)]
    for n, key in enumerate(keys):
        fill(cache, writer, key, bytes([n]) * KB)
    assert cache.stats().unwritten_entries == 4 and cache.stats().disk_entries == 0
    await cache.aclose()
    again = one_worker(tmp_path / "cache")
    try:
        assert [getattr(again.get(key), "body", None) for key in keys] == [bytes([n]) * KB for n in range(4)]
    finally:
        again.close()


def test_what_shutdown_has_no_time_left_to_write_is_logged_not_written(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    cache = one_worker(tmp_path / "cache")
    for n in range(2):
        fill(cache, HeldWriter(), f"pull:z:/late-{n}")
    monkeypatch.setattr(store, "CLOSE_WAIT_S", 0.0)
    with caplog.at_level(logging.WARNING, logger="assetcdn.edge.cache.write_behind"):
        cache.close()
    assert "2 entries held only in memory were not written" in caplog.text
    again = one_worker(tmp_path / "cache")
    try:
        assert again.get("pull:z:/late-0") is None and again.get("pull:z:/late-1") is None
    finally:
        again.close()


SOFT: dict[str, dict[str, Any]] = {
    "tag": {"tags": ["origin-x"]},
    "prefix": {"prefixes": ["path-"]},
    "everything": {"everything": True},
}


@pytest.mark.parametrize("soft", list(SOFT))
def test_a_soft_purge_keeps_a_memory_only_entry_to_be_revalidated(cache: EdgeCache, soft: str) -> None:
    writer = HeldWriter()
    fill(cache, writer)
    writer.run()
    assert on_disk(cache, KEY) is None
    assert cache.soft_purge(**SOFT[soft], revalidated="pull:") == 1
    kept = cache.get(KEY)
    assert kept is not None and kept.body == BODY and kept.etag == '"1"'
    assert [name for name, _ in kept.headers] == [*(name for name, _ in HEAD), SOFT_PURGED]


def test_the_victims_waiting_for_a_writer_that_is_behind_stay_within_their_share(cache: EdgeCache) -> None:
    writer = HeldWriter()
    for n in range(40):
        fill(cache, writer, f"pull:z:/many-{n}")
    victims = cache.memory.victims()
    assert cache.memory.victims_dropped == 40 - len(cache.memory) - len(victims) > 0
    assert sum(entry_cost(obj) for obj in victims) <= cache.memory.max_bytes // VICTIM_SHARE
    assert victims[-1].key == f"pull:z:/many-{39 - len(cache.memory)}"  # the newest are kept
    writer.run()
    assert [on_disk(cache, obj.key) for obj in victims] == [BODY] * len(victims)


def test_a_real_writer_thread_writes_every_evicted_entry(cache: EdgeCache) -> None:
    """Fills evict one another while the writer thread writes the victims: each ends in memory, on disk, or
    counted as let go (the victims' bound), none in between."""
    keys = [f"pull:z:/real-{n}" for n in range(200)]
    with ThreadPoolExecutor(max_workers=1) as writer:
        for key in keys:
            assert cache.put_behind(key, BODY, "text/plain", '"e"', TAGS, HEAD, writer=writer) is not None
            assert cache.get(key) is not None
    in_memory = {key for key in keys if key in cache.memory}
    written = {key for key in keys if on_disk(cache, key) == BODY}
    assert cache.memory.victim_count == 0
    assert len(in_memory | written) + cache.memory.victims_dropped == len(keys)
    assert len(written) > 0


async def test_while_the_writer_is_behind_the_evictions_a_fill_waits_for_it(cache: EdgeCache) -> None:
    """Past half the victims' share, a fill is queued for the writer with a future its client waits for: the
    writer sets the pace of fills, and nothing is let go while fills wait for it."""
    keys = [f"pull:z:/paced-{n}" for n in range(200)]
    waited = 0
    with ThreadPoolExecutor(max_workers=1) as writer:
        for key in keys:
            kept = cache.put_behind(key, BODY, "text/plain", '"e"', TAGS, HEAD, writer=writer)
            assert kept is not None and cache.get(key) is not None
            if kept[1] is not None:  # as a fill does: its answer waits for the writer's batch
                await kept[1]
                waited += 1
    assert waited > 0
    cache.flush_writes()
    assert all(key in cache.memory or on_disk(cache, key) == BODY for key in keys)
    assert cache.memory.victims_dropped == 0


def test_the_victims_the_writer_took_are_not_let_go_while_it_writes_them(cache: EdgeCache) -> None:
    """Past their share, the oldest victims are let go unwritten, but not those the writer's batch holds: it writes
    them, and each entry ends counted once (written, or let go), never both."""
    writer = HeldWriter()
    for n in range(20):
        fill(cache, writer, f"pull:z:/taken-{n}")
    taken = cache.memory.victims()  # what the writer's batch took, still being written
    assert taken
    for n in range(40):
        fill(cache, writer, f"pull:z:/later-{n}")
    assert [obj.key for obj in taken if not cache.memory.holds(obj)] == []
    assert cache.memory.victims_dropped > 0  # later victims past the share were let go
    writer.run()  # the batch writes what it holds (the victims it took among them), then settles them
    assert all(on_disk(cache, obj.key) == BODY for obj in taken)
    keys = [f"pull:z:/taken-{n}" for n in range(20)] + [f"pull:z:/later-{n}" for n in range(40)]
    in_memory = [key for key in keys if key in cache.memory]
    written = [key for key in keys if on_disk(cache, key) == BODY]
    let_go = [key for key in keys if key not in in_memory and key not in written]
    assert len(let_go) == cache.memory.victims_dropped


def test_the_victims_evicted_while_the_writer_writes_a_batch_stay_within_their_share(cache: EdgeCache) -> None:
    writer = HeldWriter()
    for n in range(20):
        fill(cache, writer, f"pull:z:/first-{n}")
    taken = cache.memory.victims()  # the writer's batch, being written
    dropped = cache.memory.victims_dropped
    for n in range(200):
        fill(cache, writer, f"pull:z:/then-{n}")
    victims = cache.memory.victims()
    assert any(obj.key.startswith("pull:z:/then-") for obj in victims)
    # The batch being written counts in the share: with it, the victims hold no more than their room, but for the
    # newest, which stays however large.
    assert sum(entry_cost(obj) for obj in victims[:-1]) <= cache.memory.max_bytes // VICTIM_SHARE
    assert cache.memory.victims_dropped > dropped
    assert all(cache.memory.holds(obj) for obj in taken)


def test_the_entries_and_the_victims_together_stay_within_the_memory_budget(cache: EdgeCache) -> None:
    """The victims' room is kept out of the budget: what the tier holds, victims waiting or being written
    included, never passes ``memory_cache_mb``."""
    memory = cache.memory
    writer = HeldWriter()
    for n in range(300):
        key = f"pull:z:/budget-{n}"
        fill(cache, writer, key)
        newest = entry_cost(cache.get(key))  # type: ignore[arg-type]  # a victim costs as much (the newest may stay)
        assert memory.bytes <= memory.max_bytes - memory.max_bytes // VICTIM_SHARE
        assert memory.bytes + memory.victim_bytes <= memory.max_bytes + newest
        if n == 49:
            memory.victims()  # the writer takes a batch, and writes it only later
    assert memory.victim_count > 0 and memory.victims_dropped > 0
    writer.run()
    assert memory.victim_count == 0 and memory.victim_bytes == 0


def test_with_several_workers_the_whole_budget_holds_entries(tmp_path: Path) -> None:
    """Only a one-worker edge has memory-only entries to keep victims of: otherwise no room is kept for them."""
    shared = EdgeCache(tmp_path / "cache", disk_size_limit=64 * MB, memory_bytes=16 * KB, memory_max_object=4 * KB)
    try:
        for n in range(40):
            shared.put(f"pull:z:/shared-{n}", BODY, "text/plain", '"s"', TAGS, headers=HEAD)
        assert shared.memory.bytes > shared.memory.max_bytes - shared.memory.max_bytes // VICTIM_SHARE
        shared.alone = True
        shared.put("pull:z:/alone", BODY, "text/plain", '"s"', TAGS, headers=HEAD)
        assert shared.memory.bytes <= shared.memory.max_bytes - shared.memory.max_bytes // VICTIM_SHARE
    finally:
        shared.close()


def test_a_read_from_disk_is_not_brought_into_memory_while_the_writer_is_behind(cache: EdgeCache) -> None:
    """A disk hit brought into memory evicts a memory-only entry for the writer to write; while it is behind, the
    hit is answered from disk and leaves the memory tier as it is, so reads never make victims be let go."""
    writer = HeldWriter()
    fill(cache, writer, "pull:z:/old")
    evict(cache, "pull:z:/old")
    writer.run()  # the writer writes the victim
    assert on_disk(cache, "pull:z:/old") == BODY
    n = 0
    while not cache.memory.victims_pressing:
        fill(cache, writer, f"pull:z:/pressing-{n}")
        n += 1
    before = (cache.memory.victim_bytes, cache.memory.victims_dropped)
    assert cache.get("pull:z:/old").body == BODY  # type: ignore[union-attr]
    assert "pull:z:/old" not in cache.memory
    assert (cache.memory.victim_bytes, cache.memory.victims_dropped) == before
    writer.run()  # the writer catches up: the next read is brought into memory again
    assert cache.get("pull:z:/old").body == BODY  # type: ignore[union-attr]
    assert "pull:z:/old" in cache.memory


@pytest.mark.parametrize("gone", ["purge of its own tags", "victims full"])
def test_a_fill_of_a_key_on_disk_never_lets_the_older_body_come_back(cache: EdgeCache, gone: str) -> None:
    """The disk tier holds an older response under the key: the new fill is written behind as with several
    workers, so that whatever removes it from memory does not leave the older body to be served."""
    writer = HeldWriter()
    cache.put(KEY, b"old body", "text/plain", '"old"', ["release-41"], headers=HEAD)
    assert cache.put_behind(KEY, BODY, "text/plain", '"new"', ["release-42"], HEAD, writer=writer) is not None
    if gone == "purge of its own tags":
        cache.purge_tags(["release-42"])
        assert cache.get(KEY) is None
    else:
        writer.run()  # written before anything else happens to it
        for n in range(200):
            fill(cache, writer, f"pull:z:/crowd-{n}")
        found = cache.get(KEY)
        assert found is None or found.body == BODY


def test_a_soft_purge_writes_what_it_keeps_stale_within_its_time_and_drops_the_rest(
        cache: EdgeCache, monkeypatch: pytest.MonkeyPatch) -> None:
    """The memory-only entries a soft purge keeps stale are written in batches for ``SOFT_PURGE_WRITE_S``; past
    it, the rest are removed as a hard purge removes them (fetched again, never served as fresh)."""
    writer = HeldWriter()
    fill(cache, writer)
    monkeypatch.setattr(store, "SOFT_PURGE_WRITE_S", 0.0)
    cache.soft_purge(everything=True, revalidated="pull:")
    assert cache.get(KEY) is None and on_disk(cache, KEY) is None


def test_a_fill_the_full_disk_kept_out_stays_unwritten_and_is_written_later(
        cache: EdgeCache, monkeypatch: pytest.MonkeyPatch) -> None:
    writer = HeldWriter()
    fill(cache, writer)

    def full_disk(entries: Any, current: Any = None) -> None:
        cache.disk.full_events += 1  # what DiskTier.put_many counts when a body does not fit even after evicting

    monkeypatch.setattr(cache.disk, "put_many", full_disk)
    cache.flush_writes()
    assert on_disk(cache, KEY) is None and cache.stats().unwritten_entries == 1
    monkeypatch.undo()
    cache.flush_writes()
    assert on_disk(cache, KEY) == BODY and cache.stats().unwritten_entries == 0


def test_while_the_disk_tier_has_room_a_fill_nobody_read_again_is_written_when_evicted(cache: EdgeCache) -> None:
    writer = HeldWriter()
    fill(cache, writer, read=False)
    evict(cache)
    writer.run()
    assert on_disk(cache, KEY) == BODY and cache.memory.unread_dropped == 0


def test_while_the_writer_is_behind_a_fill_nobody_read_again_is_let_go_and_its_next_fill_is_written(
        cache: EdgeCache) -> None:
    """With room on disk, an evicted fill is written, read or not, while the writer keeps up; once it is behind, one
    nobody asked for again is let go rather than queued behind the others (a crawl of one-time URLs then does not
    have every fill wait for the writer), remembered so that its next fill is written. A fill read again is still
    written."""
    writer = HeldWriter()
    for n in range(3):  # the least recently used: their evictions put the writer behind
        fill(cache, writer, f"pull:z:/early-{n}")
    fill(cache, writer, read=False)
    fill(cache, writer, "pull:z:/read")
    while "pull:z:/early-2" in cache.memory:
        evict(cache, "pull:z:/early-2")
    assert cache.memory.victims_pressing and cache.disk.has_room()
    evict(cache)
    assert cache.memory.unread_dropped == 1 and cache.memory.victim(KEY) is None
    evict(cache, "pull:z:/read")
    assert cache.memory.victim("pull:z:/read") is not None
    writer.run()
    assert on_disk(cache, KEY) is None and cache.get(KEY) is None
    assert on_disk(cache, "pull:z:/read") == BODY
    assert not cache.memory.victims_pressing
    for n in range(3):
        fill(cache, writer, f"pull:z:/later-{n}")
    fill(cache, writer, body=b"b" * KB, read=False)  # asked for again: written when evicted, behind or not
    while "pull:z:/later-2" in cache.memory:
        evict(cache, "pull:z:/later-2")
    assert cache.memory.victims_pressing
    evict(cache)
    assert cache.memory.victim(KEY) is not None
    writer.run()
    assert on_disk(cache, KEY) == b"b" * KB
    assert cache.memory.unread_dropped == 1


def test_once_the_disk_tier_is_full_a_fill_nobody_read_again_is_let_go_and_its_next_fill_is_written(
        full: EdgeCache) -> None:
    """A one-time URL does not push out what the full disk tier holds; one asked for again after its unread copy
    went is kept on disk."""
    cache = full
    writer = HeldWriter()
    fill(cache, writer, read=False)
    evict(cache)
    writer.run()
    assert on_disk(cache, KEY) is None and cache.get(KEY) is None
    assert cache.memory.unread_dropped == 1
    fill(cache, writer, body=b"b" * KB, read=False)  # asked for again: its next eviction writes it
    evict(cache)
    writer.run()
    assert on_disk(cache, KEY) == b"b" * KB
    assert cache.get(KEY).body == b"b" * KB  # type: ignore[union-attr]
    assert cache.memory.unread_dropped == 1


def test_a_fill_read_through_the_hit_path_is_written_when_evicted(full: EdgeCache) -> None:
    """The hit path's first answer of a fill (assetcdn/edge/fastpath/prepared.py) reads it as `get` does."""
    cache = full
    writer = HeldWriter()
    fill(cache, writer, read=False)
    assert cache.memory.get(KEY) is not None
    evict(cache)
    writer.run()
    assert on_disk(cache, KEY) == BODY and cache.memory.unread_dropped == 0


def test_the_disk_writer_tells_the_memory_tier_when_the_disk_tier_fills_up(tmp_path: Path) -> None:
    """The writer's batches keep the memory tier's view of the disk tier's room: past it, unread fills go."""
    cache = EdgeCache(tmp_path / "cache", disk_size_limit=512 * KB, memory_bytes=16 * KB, memory_max_object=4 * KB)
    cache.alone = True
    writer = HeldWriter()
    assert cache.memory.disk_has_room
    for n in range(10_000):  # fills read and evicted, written batch after batch, until the disk tier is full
        fill(cache, writer, f"pull:z:/fills-{n}", b"x" * (4 * KB))
        writer.run()
        if not cache.disk.has_room():
            break
    assert not cache.disk.has_room() and not cache.memory.disk_has_room
    fill(cache, writer, read=False)
    evict(cache)
    writer.run()
    assert on_disk(cache, KEY) is None and cache.memory.unread_dropped == 1
    cache.close()


def test_with_second_hit_off_every_evicted_fill_is_written(tmp_path: Path) -> None:
    cache = EdgeCache.from_settings(
        {**load_settings(environ={"ASSETCDN_EDGE_DISK_SECOND_HIT": "false"}).section("edge"),
         "cache_size_mb": 1, "memory_cache_mb": 1, "memory_object_max_kb": 4}, tmp_path / "cache")
    try:
        fill_the_disk(cache)
        writer = HeldWriter()
        fill(cache, writer, read=False)
        evict(cache)
        writer.run()
        assert on_disk(cache, KEY) == BODY and cache.memory.unread_dropped == 0
    finally:
        cache.close()


def test_the_fills_let_go_unwritten_are_counted_on_metrics(full: EdgeCache) -> None:
    cache = full
    metrics = Metrics("edge")
    cache.memory.report_to(metrics)
    writer = HeldWriter()
    fill(cache, writer, read=False)
    evict(cache)
    for n in range(40):  # read, evicted while the writer is held: past the victims' share some are let go
        fill(cache, writer, f"pull:z:/behind-{n}")
    metrics.flush()
    lines = metrics.render().decode().splitlines()
    assert 'assetcdn_edge_memory_unwritten_evictions_total{process="edge",reason="unread"} 1.0' in lines
    behind = cache.memory.victims_dropped
    assert behind > 0
    assert (f'assetcdn_edge_memory_unwritten_evictions_total{{process="edge",reason="writer_behind"}} {behind:.1f}'
            in lines)


def test_the_urls_let_go_unread_are_remembered_for_two_generations_only(full: EdgeCache,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """What remembers them is bounded: after two generations of other URLs let go, a URL is new again."""
    cache = full
    monkeypatch.setattr(memory, "GHOSTS", 2)
    writer = HeldWriter()
    fill(cache, writer, read=False)
    evict(cache)
    for n in range(4):  # two generations of other unread fills let go
        fill(cache, writer, f"pull:z:/once-{n}", read=False)
        evict(cache, f"pull:z:/once-{n}")
    fill(cache, writer, read=False)  # forgotten: unread again, let go again
    evict(cache)
    writer.run()
    assert on_disk(cache, KEY) is None and cache.memory.unread_dropped == 6


def test_a_fill_put_while_the_disk_tier_had_room_is_written_when_evicted_after_it_filled(tmp_path: Path) -> None:
    cache = EdgeCache(tmp_path / "cache", disk_size_limit=512 * KB, memory_bytes=16 * KB, memory_max_object=4 * KB)
    try:
        cache.alone = True
        writer = HeldWriter()
        fill(cache, writer, read=False)
        fill_the_disk(cache)
        evict(cache)
        writer.run()
        assert on_disk(cache, KEY) == BODY and cache.memory.unread_dropped == 0
    finally:
        cache.close()


def test_a_refill_while_the_older_fills_batch_is_written_never_lets_the_older_body_come_back(
        full: EdgeCache, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fill of a key whose older fill the writer's batch is committing is not held in memory only: let go unread,
    it would leave the older row on disk to be served again."""
    cache = full
    writer = HeldWriter()
    fill(cache, writer)  # read: its eviction writes it
    evict(cache)
    refilled: list[object] = []
    add_keys = cache.disk._add_keys

    def refill_mid_batch(keys: Any) -> None:  # inside the batch's transaction, before it commits
        if not refilled:
            refilled.append(cache.put_behind(KEY, b"newer", "text/plain", '"2"', TAGS, HEAD, writer=writer))
        add_keys(keys)

    monkeypatch.setattr(cache.disk, "_add_keys", refill_mid_batch)
    writer.run()
    monkeypatch.setattr(cache.disk, "_add_keys", add_keys)
    assert refilled and refilled[0] is not None
    evict(cache)  # the newer fill, never read, evicted
    writer.run()
    found = cache.get(KEY)
    assert found is not None and found.body == b"newer" and found.etag == '"2"'


def test_after_a_purge_empties_the_full_disk_tier_an_unread_fill_is_written_again(full: EdgeCache) -> None:
    cache = full
    assert not cache.memory.disk_has_room
    cache.purge_all()
    cache.sync_purges()  # as the hit path's next batch of requests does: the purge replayed here too
    assert cache.memory.disk_has_room
    writer = HeldWriter()
    fill(cache, writer, read=False)
    evict(cache)
    writer.run()
    assert on_disk(cache, KEY) == BODY and cache.memory.unread_dropped == 0


@pytest.mark.parametrize(("after", "trims"), [(8 * KB, 1), (1 << 30, 0)])
async def test_once_evictions_stop_the_writer_gives_the_heap_back_once(cache: EdgeCache, monkeypatch: pytest.MonkeyPatch,
                                                                       after: int, trims: int) -> None:
    """The victims' bodies are freed among live entries, where the C heap keeps them: once no victim came or went for
    TRIM_IDLE_S and enough of them went (TRIM_AFTER_BYTES), the writer trims the heap, once, in its own thread."""
    threads: list[str] = []
    monkeypatch.setattr(write_behind, "TRIM_IDLE_S", 0.05)
    monkeypatch.setattr(write_behind, "TRIM_AFTER_BYTES", after)
    monkeypatch.setattr(write_behind, "can_trim", lambda: True)
    monkeypatch.setattr(write_behind, "trim_heap", lambda: threads.append(threading.current_thread().name))
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="writer") as writer:
        for n in range(60):
            kept = cache.put_behind(f"pull:z:/trim-{n}", BODY, "text/plain", '"t"', TAGS, HEAD, writer=writer)
            assert kept is not None
            if kept[1] is not None:
                await kept[1]
        for _ in range(1000):  # until the batches are written and, when due, the heap trimmed
            if cache.memory.victim_count == 0 and len(threads) >= trims:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.3)  # idle: nothing more is due
        await asyncio.wrap_future(writer.submit(lambda: None))
    assert cache.memory.victim_bytes_gone > 8 * KB
    assert len(threads) == trims
    assert all(name.startswith("writer") for name in threads)


def test_a_fill_the_writers_batch_is_writing_is_not_let_go_when_evicted_meanwhile(cache: EdgeCache) -> None:
    """A fill queued while the writer was behind is in the batch under way; evicted before that batch commits, it
    waits for the batch to settle it, and the victims' bound never lets it go (it would be written and counted as
    let go unwritten both)."""
    writer = HeldWriter()
    fill(cache, writer, "pull:z:/writing")
    cache.memory.in_flight = frozenset({"pull:z:/writing"})  # what the writer publishes for its batch under way
    dropped = cache.memory.victims_dropped
    for n in range(40):
        fill(cache, writer, f"pull:z:/after-{n}")
    assert "pull:z:/writing" not in cache.memory and cache.memory.victims_dropped > dropped  # the bound let others go
    writing = cache.memory.victim("pull:z:/writing")
    assert writing is not None
    cache.memory.settle([writing], stored=True)  # the batch commits
    cache.memory.in_flight = frozenset()
    assert cache.memory.victim("pull:z:/writing") is None


async def test_a_fill_of_a_key_on_disk_waits_for_the_writer_while_it_is_behind(cache: EdgeCache) -> None:
    """Such a fill is queued (not memory-only) and, evicted before its batch, waits among the victims however many
    they are: while the writer is behind, its answer waits for its batch as a memory-only fill's does, so that the
    writer sets the pace rather than the victims growing past their room."""
    writer = HeldWriter()
    cache.put(KEY, b"old body", "text/plain", '"old"', TAGS, headers=HEAD)
    n = 0
    while not cache.memory.victims_pressing:
        fill(cache, writer, f"pull:z:/pressing-{n}")
        n += 1
    stored = cache.put_behind(KEY, BODY, "text/plain", '"new"', TAGS, HEAD, writer=writer)
    assert stored is not None and stored[1] is not None
    while not stored[1].done():  # the batches, as the gathering time hands them to the writer
        writer.run()
        await asyncio.sleep(0.01)
    assert on_disk(cache, KEY) == BODY
