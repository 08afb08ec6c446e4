"""EdgeCache.put_behind: in the memory tier at once, on disk in the writer's batches, never over a purge."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from assetcdn.edge.cache.store import EdgeCache
from tests.support.edge_cache import HEAD, KB, MB, HeldWriter, leave_orphans, on_disk


@pytest.fixture
def cache(tmp_path: Path) -> Iterator[EdgeCache]:
    edge_cache = EdgeCache(tmp_path / "cache", disk_size_limit=64 * MB, memory_bytes=1 * MB,
                           memory_max_object=256 * KB)
    yield edge_cache
    edge_cache.close()


def test_an_entry_is_in_memory_at_once_and_on_disk_after_the_batch(cache: EdgeCache) -> None:
    writer = HeldWriter()
    bodies = {f"pull:z:/{n}": bytes([n]) * (n * 10 * KB + 1) for n in range(1, 5)}  # inline rows and files
    for key, body in bodies.items():
        assert cache.put_behind(key, body, "text/plain", '"e"', ["t"], HEAD, writer=writer) is not None
    assert all(cache.get(key).body == body for key, body in bodies.items())  # type: ignore[union-attr]
    assert [on_disk(cache, key) for key in bodies] == [None] * 4
    assert len(writer.jobs) == 1  # one batch for everything queued meanwhile
    writer.run()
    assert {key: on_disk(cache, key) for key in bodies} == bodies
    stored = cache.disk.get("pull:z:/1", load_limit=MB)
    assert stored is not None and stored.headers == HEAD and stored.tags == ("t",)


def test_a_purge_before_the_batch_keeps_the_entry_off_disk(cache: EdgeCache) -> None:
    writer = HeldWriter()
    cache.put_behind("pull:z:/gone", b"old", "text/plain", '"e"', ["path-a"], HEAD, writer=writer)
    cache.put_behind("pull:z:/kept", b"kept", "text/plain", '"e"', ["path-b"], HEAD, writer=writer)
    cache.purge_tags(["path-a"])
    writer.run()
    assert on_disk(cache, "pull:z:/gone") is None and cache.get("pull:z:/gone") is None
    assert on_disk(cache, "pull:z:/kept") == b"kept"


def test_a_purge_another_worker_makes_before_the_batch_keeps_the_entry_off_disk(cache: EdgeCache,
                                                                                tmp_path: Path) -> None:
    """Another worker of the node (its own memory tier, the same disk tier) purges the entry while it is queued
    here: the batch does not write it back, so no worker finds it on disk afterwards."""
    other = EdgeCache(tmp_path / "cache", disk_size_limit=64 * MB, memory_bytes=1 * MB, memory_max_object=256 * KB)
    try:
        writer = HeldWriter()
        cache.put_behind("pull:z:/gone", b"old", "text/plain", '"e"', ["path-a"], HEAD, writer=writer)
        cache.put_behind("pull:z:/kept", b"kept", "text/plain", '"e"', ["path-b"], HEAD, writer=writer)
        other.purge_tags(["path-a"])
        writer.run()
        assert other.get("pull:z:/gone") is None and on_disk(cache, "pull:z:/gone") is None
        assert cache.get("pull:z:/gone") is None
        assert on_disk(cache, "pull:z:/kept") == b"kept"
    finally:
        other.close()


@pytest.mark.parametrize("purge", ["keys", "tags", "prefixes", "everything"])
def test_a_batch_that_commits_while_another_worker_deletes_does_not_bring_the_entry_back(
        cache: EdgeCache, tmp_path: Path, purge: str) -> None:
    """The other worker's batch runs in the middle of the purge, right after its disk rows are deleted: the
    entry it had queued stays off disk, whichever kind of purge it was."""
    other = EdgeCache(tmp_path / "cache", disk_size_limit=64 * MB, memory_bytes=1 * MB, memory_max_object=256 * KB)
    try:
        writer = HeldWriter()
        cache.put_behind("pull:z:/gone", b"old", "text/plain", '"e"', ["path-a"], HEAD, writer=writer)
        deleting = other.disk.delete_many, other.disk.purge_tags, other.disk.clear

        def then_batch(delete: Callable[..., Any]) -> Callable[..., Any]:
            def deleted(*args: Any) -> Any:
                result = delete(*args)
                writer.run()
                return result
            return deleted

        other.disk.delete_many, other.disk.purge_tags, other.disk.clear = (  # type: ignore[method-assign]
            then_batch(deleting[0]), then_batch(deleting[1]), then_batch(deleting[2]))
        {"keys": lambda: other.purge_keys(["pull:z:/gone"]), "tags": lambda: other.purge_tags(["path-a"]),
         "prefixes": lambda: other.purge_tag_prefixes(["path-"]), "everything": other.purge_all}[purge]()
        assert not writer.jobs
        assert on_disk(cache, "pull:z:/gone") is None and cache.get("pull:z:/gone") is None
    finally:
        other.close()


def test_a_purge_another_worker_makes_before_a_failed_batch_is_written_again_keeps_the_entry_off_disk(
        cache: EdgeCache, tmp_path: Path) -> None:
    """The batch fails (an I/O error on a body file) and its entries are written one by one: another worker's
    purge that lands in between, after the batch's check, still wins, on disk and in every memory tier."""
    other = EdgeCache(tmp_path / "cache", disk_size_limit=64 * MB, memory_bytes=1 * MB, memory_max_object=256 * KB)
    try:
        writer = HeldWriter()
        cache.put_behind("pull:z:/large", b"L" * (64 * KB), "text/plain", '"e"', ["path-l"], HEAD, writer=writer)
        cache.put_behind("pull:z:/gone", b"old", "text/plain", '"e"', ["path-a"], HEAD, writer=writer)
        disk = cache.disk._cache._disk
        columns, remove = disk.columns, disk.remove

        def failing(body: bytes, key: str) -> Any:
            if key == "pull:z:/gone":  # the large body's file is written already: the batch rolls back over it
                disk.columns = columns
                raise OSError(errno.EIO, "I/O error")
            return columns(body, key)

        def purged_meanwhile(filename: str) -> None:  # the rolled-back batch's file goes: the purge lands here
            remove(filename)
            disk.remove = remove
            other.purge_tags(["path-a"])

        disk.columns, disk.remove = failing, purged_meanwhile
        writer.run()
        assert disk.remove is remove  # the batch failed and fell back to single writes
        assert on_disk(cache, "pull:z:/gone") is None
        assert other.get("pull:z:/gone") is None and cache.get("pull:z:/gone") is None
        assert on_disk(cache, "pull:z:/large") == b"L" * (64 * KB)
    finally:
        other.close()


def test_a_newer_response_is_not_overwritten_by_a_queued_older_one(cache: EdgeCache) -> None:
    writer = HeldWriter()
    cache.put_behind("pull:z:/a", b"first", "text/plain", '"1"', ["t"], HEAD, writer=writer)
    cache.put("pull:z:/a", b"refreshed", "text/plain", '"2"', ["t"], headers=HEAD)
    cache.put_behind("pull:z:/b", b"first", "text/plain", '"1"', ["t"], HEAD, writer=writer)
    cache.put_behind("pull:z:/b", b"second", "text/plain", '"2"', ["t"], HEAD, writer=writer)
    writer.run()
    assert (on_disk(cache, "pull:z:/a"), on_disk(cache, "pull:z:/b")) == (b"refreshed", b"second")


def test_close_writes_what_is_queued(tmp_path: Path) -> None:
    first = EdgeCache(tmp_path / "cache", disk_size_limit=64 * MB, memory_bytes=1 * MB)
    first.put_behind("pull:z:/a", b"kept", "text/plain", '"e"', ["t"], HEAD, writer=HeldWriter())
    first.close()
    again = EdgeCache(tmp_path / "cache", disk_size_limit=64 * MB, memory_bytes=1 * MB)
    try:
        obj = again.get("pull:z:/a")
        assert obj is not None and obj.body == b"kept"
    finally:
        again.close()


def test_a_real_writer_thread_stores_every_entry(cache: EdgeCache) -> None:
    with ThreadPoolExecutor(max_workers=1) as writer:
        for n in range(200):
            cache.put_behind(f"pull:z:/{n}", b"%d" % n, "text/plain", '"e"', ["t"], HEAD, writer=writer)
    assert [on_disk(cache, f"pull:z:/{n}") for n in range(200)] == [b"%d" % n for n in range(200)]


def test_a_body_the_memory_tier_refuses_is_left_to_put(cache: EdgeCache) -> None:
    writer = HeldWriter()
    assert cache.put_behind("pull:z:/big", b"x" * (300 * KB), "text/plain", '"e"', [], HEAD, writer=writer) is None
    assert writer.jobs == [] and cache.get("pull:z:/big") is None


async def test_with_other_workers_a_fill_is_on_disk_once_its_future_is_done(cache: EdgeCache) -> None:
    with ThreadPoolExecutor(max_workers=1) as writer:
        stored = cache.put_behind("pull:z:/shared", b"body", "text/plain", '"e"', ["t"], HEAD, writer=writer)
        assert stored is not None and stored[1] is not None
        await stored[1]
        assert on_disk(cache, "pull:z:/shared") == b"body"


async def test_alone_a_fill_does_not_wait_for_the_disk(cache: EdgeCache) -> None:
    cache.alone = True
    writer = HeldWriter()
    stored = cache.put_behind("pull:z:/alone", b"body", "text/plain", '"e"', ["t"], HEAD, writer=writer)
    assert stored is not None and stored[1] is None
    assert writer.jobs == []  # handed to the writer only when the gathering time is up
    cache.flush_writes()
    assert on_disk(cache, "pull:z:/alone") == b"body"


def open_files(directory: Path) -> list[str]:
    """This process's open file descriptors on files under `directory`."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # closed meanwhile (the listing's own descriptor)
            continue
        if target.startswith(f"{directory}/"):
            found.append(target)
    return found


async def test_closing_on_the_event_loop_leaves_no_database_connection_open(tmp_path: Path) -> None:
    """``aclose`` writes the last batch in a thread of its own (opening that thread's connections to the disk tier
    and the purge log): once it is done, no file of the cache's directory is open any more."""
    directory = tmp_path / "cache"
    cache = EdgeCache(directory, disk_size_limit=64 * MB, memory_bytes=1 * MB, memory_max_object=256 * KB)
    cache.put_behind("pull:z:/a", b"a", "text/plain", '"e"', ["path-a"], HEAD, writer=HeldWriter())  # left queued
    assert cache.get("pull:z:/a") is not None
    other = EdgeCache(directory, disk_size_limit=64 * MB)
    other.purge_keys(["pull:z:/other"])  # another worker's: the last batch replays it from the purge log
    other.close()
    assert open_files(directory)
    await cache.aclose()
    assert open_files(directory) == []
    reopened = EdgeCache(directory, disk_size_limit=64 * MB)
    try:
        assert on_disk(reopened, "pull:z:/a") == b"a"
    finally:
        reopened.close()


def test_a_put_behind_since_a_mark_reads_no_purge_log_on_the_event_loop(cache: EdgeCache, tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """put_behind runs on the event loop: once a purge was published since the fill's mark, it leaves the entry
    to ``put`` (None: the caller stores it off the loop) rather than query the purge log's SQLite there."""
    other = EdgeCache(tmp_path / "cache", disk_size_limit=64 * MB, memory_bytes=1 * MB, memory_max_object=256 * KB)
    try:
        writer = HeldWriter()
        mark = cache.purge_mark()
        other.purge_tags(["path-other"])
        queried: list[int] = []
        names_since = type(cache._purges).names_since

        def counted(log: Any, *args: Any) -> Any:
            queried.append(1)
            return names_since(log, *args)

        monkeypatch.setattr(type(cache._purges), "names_since", counted)
        assert cache.put_behind("pull:z:/a", b"a", "text/plain", '"e"', ["path-a"], HEAD, writer=writer,
                                since=mark) is None
        assert queried == [] and cache.get("pull:z:/a") is None and writer.jobs == []
        kept = cache.put_behind("pull:z:/b", b"b", "text/plain", '"e"', ["path-b"], HEAD, writer=writer,
                                since=cache.purge_mark())
        assert kept is not None and queried == []  # no purge since its mark: kept at once
    finally:
        other.close()


def test_the_writer_removes_what_a_crash_left_once_an_hour_without_a_restart(cache: EdgeCache) -> None:
    """A segment file no row names (a crash between a batch's write and its commit) is removed by the writer after
    a batch once it is an hour old, an hour after the last sweep: not only by a later start. A named segment and
    a young unnamed one (another worker's batch about to commit) stay."""
    import time

    writer = HeldWriter()
    for n in range(2):  # one batch of two 40 KB bodies: a segment
        cache.put_behind(f"pull:z:/{n}", bytes([n]) * 40 * KB, "text/plain", '"e"', ["t"], HEAD, writer=writer)
    writer.run()
    (live,) = cache.disk.directory.rglob("*.seg")
    old, young = leave_orphans(live)

    cache.put_behind("pull:z:/2", b"x", "text/plain", '"e"', ["t"], HEAD, writer=writer)
    writer.run()  # the first sweep is an hour after the start
    assert old.exists()

    cache._writes._sweep_at = time.monotonic()  # an hour on
    cache.put_behind("pull:z:/3", b"x", "text/plain", '"e"', ["t"], HEAD, writer=writer)
    writer.run()
    assert set(cache.disk.directory.rglob("*.seg")) == {live, young}
    assert on_disk(cache, "pull:z:/1") == bytes([1]) * 40 * KB

    old, _ = leave_orphans(live)  # another crash
    cache.put_behind("pull:z:/4", b"x", "text/plain", '"e"', ["t"], HEAD, writer=writer)
    writer.run()  # the next sweep is an hour after that one
    assert old.exists()


async def test_a_fill_the_memory_tier_evicts_before_its_batch_still_reaches_the_disk_tier(cache: EdgeCache,
                                                                                          tmp_path: Path) -> None:
    """With other workers, fills come in faster than the writer takes them (a batch under way, a slow disk) and the
    memory tier evicts some of them before their batch: each is written all the same, so the other worker finds
    it (it was a miss there, asking the origin again, for good), and this worker serves it meanwhile."""
    other = EdgeCache(tmp_path / "cache", disk_size_limit=64 * MB, memory_bytes=1 * MB, memory_max_object=256 * KB)
    try:
        writer = HeldWriter()
        bodies = {f"pull:z:/burst-{n}": bytes([n]) * (200 * KB) for n in range(8)}  # 1.6 MB: past the 1 MB tier
        waits = []
        for key, body in bodies.items():
            stored = cache.put_behind(key, body, "text/plain", '"e"', ["t"], HEAD, writer=writer)
            assert stored is not None and stored[1] is not None
            waits.append(stored[1])
        assert all(cache.get(key).body == body for key, body in bodies.items())  # type: ignore[union-attr]
        writer.run()
        for waited in waits:
            await waited
        assert {key: on_disk(cache, key) for key in bodies} == bodies
        assert all(other.get(key).body == body for key, body in bodies.items())  # type: ignore[union-attr]
        assert cache.memory.victim_count == 0
    finally:
        other.close()


@pytest.mark.parametrize("alone", [False, True], ids=["workers", "alone"])
def test_a_newer_response_the_memory_tier_evicts_before_its_batch_replaces_the_older_one(
        cache: EdgeCache, tmp_path: Path, alone: bool) -> None:
    """A worker stores a newer response under a key the disk tier holds (a fill made again, a changed body after
    its copy went stale), then fills evict it from its memory tier before its batch: the older response must not
    stay on disk, where this worker and every other would go on serving it (RFC 9111 4: the most recent response).
    Alone (one worker), such a fill is queued too rather than held in memory only (`put_behind`)."""
    other = EdgeCache(tmp_path / "cache", disk_size_limit=64 * MB, memory_bytes=1 * MB, memory_max_object=256 * KB)
    try:
        cache.alone = alone
        writer = HeldWriter()
        cache.put("pull:z:/page", b"version one", "text/plain", '"1"', ["t"], headers=HEAD)
        assert other.get("pull:z:/page").body == b"version one"  # type: ignore[union-attr]
        stored = cache.put_behind("pull:z:/page", b"version two", "text/plain", '"2"', ["t"], HEAD, writer=writer)
        assert stored is not None
        for n in range(6):  # 1.2 MB of other fills, version two the least recently used
            cache.put_behind(f"pull:z:/other-{n}", bytes([n]) * (200 * KB), "text/plain", '"e"', ["t"], HEAD,
                             writer=writer)
        assert cache.get("pull:z:/page").body == b"version two"  # type: ignore[union-attr]
        writer.run()
        assert on_disk(cache, "pull:z:/page") == b"version two"
        assert cache.get("pull:z:/page").body == b"version two"  # type: ignore[union-attr]
        if not alone:  # no other worker to tell then
            assert other.get("pull:z:/page").body == b"version two"  # type: ignore[union-attr]
    finally:
        other.close()


def test_an_evicted_fill_waiting_for_its_batch_gives_way_to_a_newer_response_another_worker_stores(
        cache: EdgeCache, tmp_path: Path) -> None:
    """The evicted fill waits for the writer here while another worker stores a newer response under its key: this
    worker serves the newer one from then on, and its batch does not write the older one over it."""
    other = EdgeCache(tmp_path / "cache", disk_size_limit=64 * MB, memory_bytes=1 * MB, memory_max_object=256 * KB)
    try:
        writer = HeldWriter()
        cache.put_behind("pull:z:/page", b"older", "text/plain", '"1"', ["t"], HEAD, writer=writer)
        for n in range(6):
            cache.put_behind(f"pull:z:/other-{n}", bytes([n]) * (200 * KB), "text/plain", '"e"', ["t"], HEAD,
                             writer=writer)
        assert cache.memory.victim("pull:z:/page") is not None
        other.put("pull:z:/page", b"newer", "text/plain", '"2"', ["t"], headers=HEAD)
        assert cache.get("pull:z:/page").body == b"newer"  # type: ignore[union-attr]
        writer.run()
        assert on_disk(cache, "pull:z:/page") == b"newer"
        assert cache.get("pull:z:/page").body == b"newer"  # type: ignore[union-attr]
    finally:
        other.close()
