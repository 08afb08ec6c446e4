"""EdgeCache: memory in front of disk, purges across tiers and across worker processes."""

from __future__ import annotations

import io
import shutil
import sqlite3
import time
from collections.abc import Callable, Iterator
from email.utils import formatdate
from pathlib import Path
from typing import Any

import pytest

from assetcdn.edge.cache import purge_log
from assetcdn.edge.cache.entry import strong_etag
from assetcdn.edge.cache.memory import entry_cost
from assetcdn.edge.cache.store import SOFT_PURGED, EdgeCache, PurgedMeanwhile
from assetcdn.shared.config import load_settings
from tests.support.edge_cache import HeldWriter, on_disk

KB = 1024
MB = 1024 * KB


@pytest.fixture
def cache(tmp_path: Path) -> Iterator[EdgeCache]:
    edge_cache = EdgeCache(
        tmp_path / "cache", disk_size_limit=64 * MB, memory_bytes=1 * MB, memory_max_object=256 * KB
    )
    yield edge_cache
    edge_cache.close()


def put(cache: EdgeCache, key: str, body: bytes, *tags: str) -> None:
    cache.put(key, body, "image/webp", strong_etag(key.split(":")[-1]), tags)


def test_small_put_is_served_from_memory(cache: EdgeCache) -> None:
    stored = cache.put(
        "asset:abc",
        b"webp",
        "image/webp",
        strong_etag("abc"),
        ["project-a", "all-assets"],
        headers={"X-Robots-Tag": "noindex"},
    )
    assert stored.etag == '"abc"' and stored.in_memory
    hit = cache.get("asset:abc")
    assert hit is stored  # the memory tier's own object: no copy on a hit
    assert hit.headers == (("X-Robots-Tag", "noindex"),)


def test_disk_hit_is_promoted_to_memory(tmp_path: Path, cache: EdgeCache) -> None:
    put(cache, "asset:1", b"x" * 1000, "t")
    other_worker = EdgeCache(tmp_path / "cache", disk_size_limit=64 * MB)
    assert "asset:1" not in other_worker.memory
    obj = other_worker.get("asset:1")
    assert obj is not None and obj.body == b"x" * 1000 and obj.tags == ("t",)
    assert "asset:1" in other_worker.memory
    other_worker.close()


def test_large_body_stays_on_disk(cache: EdgeCache) -> None:
    stored = cache.put("video:1", io.BytesIO(b"v" * (3 * MB)), "video/mp4", '"v1"', ["format-mp4"])
    assert stored.path is not None and stored.body is None and stored.size == 3 * MB
    assert "video:1" not in cache.memory
    hit = cache.get("video:1")
    assert hit is not None and hit.path == stored.path
    assert cache.read_range("video:1", 10, 20) == b"v" * 10


def test_read_range_from_memory(cache: EdgeCache) -> None:
    put(cache, "asset:r", bytes(range(200)))
    assert cache.read_range("asset:r", 50, 60) == bytes(range(50, 60))
    assert cache.read_range("asset:missing", 0, 1) is None


def test_purge_keys(cache: EdgeCache) -> None:
    put(cache, "asset:1", b"1")
    put(cache, "asset:2", b"2")
    assert cache.purge_keys(["asset:1", "asset:404"]) == 1
    assert cache.get("asset:1") is None and cache.get("asset:2") is not None


def test_purge_tags_counts_distinct_entries(cache: EdgeCache) -> None:
    put(cache, "asset:1", b"1", "project-a", "all-assets")
    put(cache, "asset:2", b"2" * (300 * KB), "project-a")  # disk only
    put(cache, "asset:3", b"3", "project-b", "all-assets")
    assert cache.purge_tags(["project-a", "all-assets"]) == 3
    assert cache.stats().disk_entries == 0 and cache.stats().memory_entries == 0


def test_purge_reaches_other_workers_memory(tmp_path: Path, cache: EdgeCache) -> None:
    other_worker = EdgeCache(tmp_path / "cache", disk_size_limit=64 * MB)
    put(cache, "asset:1", b"1", "project-a")
    put(cache, "asset:2", b"2", "project-b")
    put(cache, "asset:3", b"3", "project-c")
    for key in ("asset:1", "asset:2", "asset:3"):
        assert other_worker.get(key) is not None  # now in the other worker's memory
    assert cache.purge_tags(["project-a"]) == 1
    assert other_worker.get("asset:1") is None
    assert cache.purge_keys(["asset:2"]) == 1
    assert other_worker.get("asset:2") is None
    assert other_worker.get("asset:3") is not None
    cache.purge_all()
    assert other_worker.get("asset:3") is None
    other_worker.close()


def test_a_newer_response_another_worker_stores_replaces_this_workers_memory_copy(tmp_path: Path,
                                                                                  cache: EdgeCache) -> None:
    """A worker holding a copy in memory serves the response another worker stored since, not its copy; the copy
    of the newer response stays in memory."""
    other_worker = EdgeCache(tmp_path / "cache", disk_size_limit=64 * MB)
    put(cache, "pull:1", b"version one")
    assert other_worker.get("pull:1").body == b"version one"  # type: ignore[union-attr]
    put(cache, "pull:1", b"version two")
    assert other_worker.get("pull:1").body == b"version two"  # type: ignore[union-attr]
    assert cache.memory.get("pull:1").body == b"version two"  # type: ignore[union-attr]
    other_worker.close()


@pytest.mark.parametrize("meanwhile", ["stored anew", "purged", "soft purged"])
def test_what_another_worker_stores_or_purges_while_this_one_reads_the_disk_is_not_hidden_by_its_memory_copy(
        tmp_path: Path, cache: EdgeCache, monkeypatch: pytest.MonkeyPatch, meanwhile: str) -> None:
    """A worker reads an entry from the disk tier to bring it into memory; before the copy goes in, another worker
    stores a newer response under the key (or purges it, or soft purges it: the same body and stored-at time under
    a head marked stale), and this worker's disk writer replays that notice (it does before each batch, in its own
    thread), finding no copy to drop yet. The copy then put in memory must not go on being served: the next request
    gets the newer response (or a miss, or the copy marked stale)."""
    other_worker = EdgeCache(tmp_path / "cache", disk_size_limit=64 * MB)
    put(cache, "pull:1", b"version one", "soft")
    read = other_worker.disk.get

    def read_then_another_worker_writes(key: str, *, load_limit: int) -> object:
        obj = read(key, load_limit=load_limit)
        if meanwhile == "purged":
            cache.purge_keys([key])
        elif meanwhile == "soft purged":
            cache.soft_purge(["soft"], revalidated="pull:")
        else:
            put(cache, key, b"version two")
        other_worker.sync_purges()  # the writer thread's replay, between the read and the copy
        return obj

    monkeypatch.setattr(other_worker.disk, "get", read_then_another_worker_writes)
    assert other_worker.get("pull:1").body == b"version one"  # type: ignore[union-attr]  # read before either
    monkeypatch.undo()
    now = other_worker.get("pull:1")
    if meanwhile == "soft purged":
        assert now is not None and now.body == b"version one" and SOFT_PURGED in dict(now.headers)
    else:
        assert (now.body if now is not None else None) == (None if meanwhile == "purged" else b"version two")
    other_worker.close()


def test_a_newer_response_another_worker_stores_while_this_one_stores_is_not_hidden_by_its_memory_copy(
        tmp_path: Path, cache: EdgeCache, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker stores a response; once it is on disk and before its copy goes in memory, another worker stores a
    newer one under the key and this worker's disk writer replays that notice (finding no copy to drop yet). The
    older copy must not go on being served: the next request gets the newer response."""
    other_worker = EdgeCache(tmp_path / "cache", disk_size_limit=64 * MB)
    store = cache.disk.put

    def store_then_another_worker_stores(key: str, body: object, **fields: object) -> int:
        size = store(key, body, **fields)  # type: ignore[arg-type]
        put(other_worker, key, b"version three")
        cache.sync_purges()  # the writer thread's replay, between the write and the copy
        return size

    monkeypatch.setattr(cache.disk, "put", store_then_another_worker_stores)
    cache.put("pull:1", b"version two", "text/plain", strong_etag("2"))
    monkeypatch.undo()
    assert cache.get("pull:1").body == b"version three"  # type: ignore[union-attr]
    assert other_worker.get("pull:1").body == b"version three"  # type: ignore[union-attr]
    other_worker.close()


def test_the_notices_of_many_fills_do_not_keep_a_slow_fill_out_of_the_cache(
        tmp_path: Path, cache: EdgeCache, monkeypatch: pytest.MonkeyPatch) -> None:
    """Other workers store more entries than the purge log keeps rows while one fill is under way, and purge another
    URL: no purge named the fill, so it is stored (the notices of what they stored never push out of the log a
    purge the fill must be checked against)."""
    monkeypatch.setattr(purge_log, "KEEP_ROWS", 3)
    other_worker = EdgeCache(tmp_path / "cache", disk_size_limit=64 * MB)
    cache.purge_keys(["pull:nothing"])
    mark = cache.purge_mark()
    for index in range(5):
        put(other_worker, f"pull:other-{index}", b"stored meanwhile")
    other_worker.purge_keys(["pull:unrelated"])
    cache.put("pull:slow", b"the slow fill", "text/plain", strong_etag("slow"), since=mark)
    assert other_worker.get("pull:slow") is not None
    other_worker.close()


def test_purge_all(cache: EdgeCache) -> None:
    for index in range(5):
        put(cache, f"asset:{index}", b"x" * 100)
    assert cache.purge_all() == 5
    assert cache.get("asset:0") is None
    assert cache.stats().disk_entries == 0


def test_survives_restart_with_tags(tmp_path: Path) -> None:
    directory = tmp_path / "cache"
    first = EdgeCache(directory, disk_size_limit=64 * MB)
    put(first, "asset:1", b"one", "project-a")
    put(first, "asset:2", b"two", "project-b")
    first.close()
    second = EdgeCache(directory, disk_size_limit=64 * MB)
    assert second.get("asset:1") is not None
    assert second.purge_tags(["project-a"]) == 1
    assert second.get("asset:1") is None and second.get("asset:2") is not None
    second.close()


def test_stats_and_check(cache: EdgeCache) -> None:
    put(cache, "asset:1", b"x" * 100)
    stats = cache.stats()
    held = cache.memory.get("asset:1")
    assert held is not None
    assert (stats.memory_entries, stats.memory_bytes, stats.disk_entries) == (1, entry_cost(held), 1)
    assert stats.memory_limit_bytes == 1 * MB and stats.disk_limit_bytes == 64 * MB
    assert stats.disk_bytes > 0 and set(stats.to_json()) >= {"disk_bytes", "memory_entries"}
    check = cache.check()
    assert check.ok and check.error is None
    assert cache.stats().disk_entries == 1  # the probe entry is gone


def test_check_reports_a_lost_directory(tmp_path: Path) -> None:
    edge_cache = EdgeCache(tmp_path / "cache", disk_size_limit=64 * MB)
    edge_cache.disk.close()
    shutil.rmtree(tmp_path / "cache")  # the disk went away under a running edge
    check = edge_cache.check()
    assert not check.ok and check.error


def test_from_settings(tmp_path: Path) -> None:
    edge = load_settings(environ={}).section("edge")
    edge_cache = EdgeCache.from_settings(edge, tmp_path / "cache")
    assert edge_cache.memory.max_bytes == edge["memory_cache_mb"] * MB
    assert edge_cache.memory.max_object_size == edge["memory_object_max_kb"] * KB
    assert edge_cache.disk.size_limit == edge["cache_size_mb"] * MB
    edge_cache.close()


@pytest.mark.parametrize("body", [b"small body", io.BytesIO(b"streamed body")], ids=["bytes", "stream"])
def test_a_purge_that_runs_while_a_put_stores_leaves_no_copy_behind(cache: EdgeCache, body: object,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    # A purge (another executor thread) between the disk write and the memory copy removes the disk entry;
    # the memory copy made after it must not bring the purged response back.
    write = cache.disk.put

    def write_then_purge(*args: object, **kwargs: object) -> int:
        size = write(*args, **kwargs)  # type: ignore[arg-type]
        cache.purge_tags(["page"])
        return size

    monkeypatch.setattr(cache.disk, "put", write_then_purge)
    try:
        cache.put("k", body, "text/plain", strong_etag("0" * 64), ["page"])  # type: ignore[arg-type]
    except ValueError:
        pass  # the streamed entry was purged before it could be read back: nothing stored either way
    monkeypatch.undo()
    assert cache.memory.hit("k") is None  # what the hit path reads, without looking at the disk tier
    assert cache.get("k") is None


class PurgedWhileRead(io.BytesIO):
    """A body stream whose first read lets another worker's purge land: the purge is made while the body is
    written to the disk tier."""

    def __init__(self, body: bytes, purge: Callable[[], object]) -> None:
        super().__init__(body)
        self._purge: Callable[[], object] | None = purge

    def read(self, size: int | None = -1) -> bytes:
        if self._purge is not None:
            purge, self._purge = self._purge, None
            purge()
        return super().read(size)


@pytest.mark.parametrize("purge", ["key", "tag", "prefix", "all"])
def test_a_put_since_a_mark_keeps_nothing_a_purge_made_meanwhile_names(cache: EdgeCache, tmp_path: Path,
                                                                         purge: str) -> None:
    """A fill's body stored with the purge mark taken when it was asked for: a purge another worker makes after
    the mark and before the entry is in place (here: while its body is written) leaves it in no tier; one
    naming something else does not."""
    other = EdgeCache(tmp_path / "cache", disk_size_limit=64 * MB)
    try:
        purges: dict[str, Callable[[], object]] = {
            "key": lambda: other.purge_keys(["pull:z:/a"]), "tag": lambda: other.purge_tags(["path-a"]),
            "prefix": lambda: other.purge_tag_prefixes(["path-"]), "all": other.purge_all}
        body = b"B" * (2 * MB)  # past the memory tier: a file, read back from disk
        mark = cache.purge_mark()
        with pytest.raises(PurgedMeanwhile):
            cache.put("pull:z:/a", PurgedWhileRead(body, purges[purge]), "text/plain", '"e"', ["path-a"],
                      since=mark)
        assert cache.get("pull:z:/a") is None and other.get("pull:z:/a") is None
        mark = cache.purge_mark()
        cache.put("pull:z:/b", PurgedWhileRead(body, lambda: other.purge_tags(["path-c"])), "text/plain", '"e"',
                  ["path-b"], since=mark)
        stored = cache.get("pull:z:/b")
        assert stored is not None and stored.size == len(body)
    finally:
        other.close()


def test_a_new_head_since_a_mark_does_not_undo_a_soft_purge_made_meanwhile(cache: EdgeCache, tmp_path: Path) -> None:
    """A revalidation's new head (the body file kept) asked for before another worker's soft purge is not
    written over the purge's stale mark."""
    other = EdgeCache(tmp_path / "cache", disk_size_limit=64 * MB)
    try:
        stored = cache.put("pull:z:/a", io.BytesIO(b"B" * (2 * MB)), "text/plain", '"e"', ["path-a"])
        mark = cache.purge_mark()
        other.soft_purge(["path-a"], revalidated="pull:")
        assert cache.set_head(stored, "text/plain", '"e"', ["path-a"], (("etag", '"e"'),), since=mark) is None
        marked = cache.get("pull:z:/a")
        assert marked is not None and SOFT_PURGED in dict(marked.headers)
    finally:
        other.close()


def dated(version: int, date: float) -> tuple[tuple[str, str], ...]:
    """A pull zone's stored head of `version`, with the origin's Date `date`."""
    return ((":status", "200"), ("etag", f'"{version}"'), ("date", formatdate(date, usegmt=True)))


def test_workers_keep_the_response_the_origin_dated_last_whichever_was_stored_last(tmp_path: Path) -> None:
    """Two workers share the disk tier. A response dated before the one stored is not stored over it, though
    stored after it (the worker that fetched it answers its own client only); one dated after it is, though stored
    before it (its batch came last), and every worker drops its copy of the replaced one (RFC 9111 4: of several
    stored responses, the most recent by Date)."""
    first = EdgeCache(tmp_path / "cache", disk_size_limit=64 * MB, memory_bytes=MB)
    second = EdgeCache(tmp_path / "cache", disk_size_limit=64 * MB, memory_bytes=MB)
    key, now = "pull:z:/page", time.time()
    try:
        first.put(key, b"version two", "text/plain", '"2"', ("t",), headers=dated(2, now - 60))
        held = second.get(key)
        assert held is not None and held.body == b"version two"
        with pytest.raises(PurgedMeanwhile):  # dated earlier, stored later (a fill's put, given its purge mark)
            first.put(key, b"version one", "text/plain", '"1"', ("t",), headers=dated(1, now - 120), since=first.purge_mark())
        assert [getattr(cache.get(key), "body", None) for cache in (first, second)] == [b"version two"] * 2
        # Dated later, stored as of a minute ago (before version two was): version three replaces it everywhere.
        first.put(key, b"version three", "text/plain", '"3"', ("t",), headers=dated(3, now), stored_at=now - 90)
        assert [getattr(cache.get(key), "body", None) for cache in (first, second)] == [b"version three"] * 2
    finally:
        first.close()
        second.close()


def test_a_fill_dated_later_whose_batch_lands_after_one_dated_earlier_is_what_every_worker_keeps(
        tmp_path: Path) -> None:
    """Two workers share the disk tier. The first fills version two (dated now) behind, its disk batch still to run;
    the second then stores version one (dated two minutes earlier: a lagging replica's), and tells every worker so.
    The first's batch still writes version two over it (as stored just after it): the notice of the older response
    stored later does not drop the newer one waiting for its batch, and every worker answers version two."""
    first = EdgeCache(tmp_path / "cache", disk_size_limit=64 * MB, memory_bytes=MB)
    second = EdgeCache(tmp_path / "cache", disk_size_limit=64 * MB, memory_bytes=MB)
    writer = HeldWriter()
    key, now = "pull:z:/page", time.time()
    try:
        assert first.put_behind(key, b"version two", "text/plain", '"2"', ("t",), dated(2, now),
                                writer=writer) is not None
        second.put(key, b"version one", "text/plain", '"1"', ("t",), headers=dated(1, now - 120))
        writer.run()
        assert on_disk(first, key) == b"version two"
        assert [getattr(cache.get(key), "body", None) for cache in (first, second)] == [b"version two"] * 2
    finally:
        first.close()
        second.close()


def test_a_streamed_body_older_by_its_date_is_not_stored_over_the_newer_one(tmp_path: Path) -> None:
    """As `test_workers_keep_the_response_the_origin_dated_last_whichever_was_stored_last`, for bodies written to
    the disk tier from a stream (a pull zone's over 1 MB, held in a temporary file)."""
    first = EdgeCache(tmp_path / "cache", disk_size_limit=64 * MB, memory_bytes=MB, memory_max_object=256 * KB)
    second = EdgeCache(tmp_path / "cache", disk_size_limit=64 * MB, memory_bytes=MB, memory_max_object=256 * KB)
    key, now = "pull:z:/large", time.time()
    two, one, three = (bytes([n]) * (300 * KB) for n in (2, 1, 3))
    try:
        first.put(key, io.BytesIO(two), "text/plain", '"2"', ("t",), headers=dated(2, now - 60))
        held = second.get(key)
        assert held is not None and held.etag == '"2"'
        with pytest.raises(PurgedMeanwhile):  # dated earlier, stored later
            first.put(key, io.BytesIO(one), "text/plain", '"1"', ("t",), headers=dated(1, now - 120), since=first.purge_mark())
        assert [getattr(cache.get(key), "etag", None) for cache in (first, second)] == ['"2"'] * 2
        first.put(key, io.BytesIO(three), "text/plain", '"3"', ("t",), headers=dated(3, now), stored_at=now - 90)
        assert [getattr(cache.get(key), "etag", None) for cache in (first, second)] == ['"3"'] * 2
        found = second.get(key)
        assert found is not None and found.path is not None
        with open(found.path, "rb") as file:
            assert file.read() == three
        assert len([p for p in (tmp_path / "cache").rglob("*.val")]) == 1  # the kept-out and the replaced went
    finally:
        first.close()
        second.close()


def full_for(cache: EdgeCache, key: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The filesystem full for `cache`'s disk writes of `key`, before and after evicting (until monkeypatch.undo)."""
    batch = cache.disk._batch

    def full(entries: Any, *rest: Any, **named: Any) -> None:
        if any(obj.key == key for obj in entries):
            raise sqlite3.OperationalError("database or disk is full")
        batch(entries, *rest, **named)

    monkeypatch.setattr(cache.disk, "_batch", full)


def older_entries(cache: EdgeCache) -> None:
    """Entries stored before the test's own, which the eviction after a full filesystem takes first."""
    for i in range(8):
        cache.put(f"older-{i}", b"o" * (64 * KB), "text/plain", '"o"', ("t",))


def test_a_response_older_by_its_date_that_the_full_filesystem_keeps_out_leaves_the_newer_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two workers share the disk tier; the first stored version two (dated later, stored earlier). The second's
    write of version one (dated earlier: a lagging replica's) finds the filesystem full: it would never have been
    written over version two, so version two stays, on disk and in the first worker's memory, and is not retired
    as an older response would be (the second worker, and the disk tier once it has room, would serve version one)."""
    first = EdgeCache(tmp_path / "cache", disk_size_limit=64 * MB, memory_bytes=MB)
    second = EdgeCache(tmp_path / "cache", disk_size_limit=64 * MB, memory_bytes=MB)
    key, now = "pull:z:/page", time.time()
    try:
        older_entries(first)
        first.put(key, b"version two", "text/plain", '"2"', ("t",), headers=dated(2, now), stored_at=now - 60)
        full_for(second, key, monkeypatch)
        second.put(key, b"version one", "text/plain", '"1"', ("t",), headers=dated(1, now - 120))
        monkeypatch.undo()
        assert second.disk.full_events >= 1
        on_disk = first.disk.get(key, load_limit=MB)
        assert on_disk is not None and on_disk.body == b"version two"
        assert getattr(first.get(key), "body", None) == b"version two"
    finally:
        first.close()
        second.close()


@pytest.mark.parametrize("stored", ["put", "put_behind"])
def test_a_fill_older_by_its_date_that_the_full_filesystem_keeps_out_is_not_kept_in_its_workers_memory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stored: str) -> None:
    """As above, the fill of version one stored given its purge mark (at once: PurgedMeanwhile, its client gets it,
    the cache does not), or behind (its disk batch): the disk tier holds a newer response, so the fill is kept out,
    and the second worker answers version two, not the older one it fetched."""
    first = EdgeCache(tmp_path / "cache", disk_size_limit=64 * MB, memory_bytes=MB)
    second = EdgeCache(tmp_path / "cache", disk_size_limit=64 * MB, memory_bytes=MB)
    key, now = "pull:z:/page", time.time()
    try:
        older_entries(first)
        first.put(key, b"version two", "text/plain", '"2"', ("t",), headers=dated(2, now), stored_at=now - 60)
        full_for(second, key, monkeypatch)
        if stored == "put":
            with pytest.raises(PurgedMeanwhile):
                second.put(key, b"version one", "text/plain", '"1"', ("t",), headers=dated(1, now - 120),
                           since=second.purge_mark())
        else:
            writer = HeldWriter()
            assert second.put_behind(key, b"version one", "text/plain", '"1"', ("t",), dated(1, now - 120),
                                     writer=writer, since=second.purge_mark()) is not None
            writer.run()
        monkeypatch.undo()
        assert second.disk.full_events >= 1
        assert [getattr(cache.get(key), "body", None) for cache in (first, second)] == [b"version two"] * 2
    finally:
        first.close()
        second.close()


def test_a_response_newer_by_its_date_that_the_full_filesystem_keeps_out_retires_the_older_one_stored_later(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As above, the other way round: the first worker stored version one (dated earlier, stored later); the
    second's write of version two (dated later) finds the filesystem full. Version one is the older response, which
    version two would have replaced: it goes from the disk tier and from the first worker's memory."""
    first = EdgeCache(tmp_path / "cache", disk_size_limit=64 * MB, memory_bytes=MB)
    second = EdgeCache(tmp_path / "cache", disk_size_limit=64 * MB, memory_bytes=MB)
    key, now = "pull:z:/page", time.time()
    try:
        older_entries(first)
        first.put(key, b"version one", "text/plain", '"1"', ("t",), headers=dated(1, now - 120))
        full_for(second, key, monkeypatch)
        second.put(key, b"version two", "text/plain", '"2"', ("t",), headers=dated(2, now), stored_at=now - 60)
        monkeypatch.undo()
        assert second.disk.full_events >= 1
        assert first.disk.get(key, load_limit=MB) is None
        assert first.get(key) is None
    finally:
        first.close()
        second.close()


def test_a_304s_refresh_dated_before_the_stored_response_still_refreshes_it(tmp_path: Path) -> None:
    """A 304 updates the stored response it confirms (RFC 9111 4.3.4), whatever its Date beside the stored one's (an
    origin's servers whose clocks differ): it is no other response for the disk tier to keep out."""
    cache = EdgeCache(tmp_path / "cache", disk_size_limit=64 * MB, memory_bytes=MB)
    key, now = "pull:z:/confirmed", time.time()
    try:
        stored = cache.put(key, b"the body", "text/plain", '"1"', ("t",), headers=dated(1, now))
        refreshed = cache.put(key, b"the body", "text/plain", '"1"', ("t",), headers=(*dated(1, now - 30), (
            "cache-control", "max-age=600")), replacing=stored.stored_at, stored_at=stored.stored_at + 1)
        on_disk = cache.disk.get(key, load_limit=MB)
        assert on_disk is not None and on_disk.headers == refreshed.headers
        assert ("cache-control", "max-age=600") in on_disk.headers
    finally:
        cache.close()


def test_a_put_of_a_content_named_key_another_worker_stored_since_returns_its_entry(tmp_path: Path) -> None:
    """A stored zone's entry or a variant (a key named by its content, put without a purge mark): another worker's
    row under the key, stored after this put began, holds the same bytes; the put is not refused (its caller, a
    client's request, gets the entry), it only leaves that row as it is."""
    first = EdgeCache(tmp_path / "cache", disk_size_limit=64 * MB, memory_bytes=MB)
    second = EdgeCache(tmp_path / "cache", disk_size_limit=64 * MB, memory_bytes=MB)
    key, now = "asset:abc:/logo.webp", time.time()
    try:
        first.put(key, b"webp", "image/webp", strong_etag("abc"), ("t",), stored_at=now)
        stored = second.put(key, b"webp", "image/webp", strong_etag("abc"), ("t",), stored_at=now - 1)
        assert stored.body == b"webp"
        on_disk = second.disk.get(key, load_limit=MB)
        assert on_disk is not None and on_disk.stored_at == now
    finally:
        first.close()
        second.close()
