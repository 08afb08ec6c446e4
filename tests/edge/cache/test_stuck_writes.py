"""A disk tier write never retries for ever, and closing the cache never waits for ever on its writer.

diskcache's ``retry=True`` retries BEGIN IMMEDIATE on every SQLite error, at once: a writer thread whose
connection is in a state where BEGIN fails immediately would spin holding the write-behind lock, and the cache's
close would wait for it. Each write runs in a daemon thread here, joined with a generous limit: a write still
going at the limit fails the test instead of hanging it."""

from __future__ import annotations

import asyncio
import io
import logging
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from assetcdn.edge.cache import disk as disk_module
from assetcdn.edge.cache import store as store_module
from assetcdn.edge.cache.disk import DiskTier
from assetcdn.edge.cache.entry import CachedObject
from assetcdn.edge.cache.store import EdgeCache
from assetcdn.shared.metrics import Metrics

MB = 1024 * 1024
LIMIT_S = 30.0  # far above what each write takes here, even on a loaded machine: only a write that never ends


def entry(key: str, body: bytes) -> CachedObject:
    return CachedObject(key=key, content_type="text/plain", etag='"e"', tags=("t",), size=len(body),
                        stored_at=1.0, body=body, headers=())


BATCH = [entry("pull:z:/small", b"inline"), entry("pull:z:/large", b"f" * (64 * 1024))]  # a row, and a file


def in_one_thread(steps: Sequence[Callable[[], Any]]) -> None:
    """Run `steps` in order in one new thread (so they share its SQLite connections), within LIMIT_S."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            for step in steps:
                step()
        except BaseException as exc:  # reported in the test's thread
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)  # one that never ends must not hold the process
    thread.start()
    thread.join(LIMIT_S)
    assert not thread.is_alive(), f"the write still runs after {LIMIT_S} s"
    if errors:
        raise errors[0]


@pytest.fixture
def tier(tmp_path: Path) -> Iterator[DiskTier]:
    disk = DiskTier(tmp_path / "cache", size_limit=64 * MB)
    yield disk
    disk.close()


def bodies(tier: DiskTier) -> dict[str, bytes | None]:
    found = {obj.key: tier.get(obj.key, load_limit=MB) for obj in BATCH}
    return {key: None if obj is None else obj.body for key, obj in found.items()}


def leave_in_transaction(tier: DiskTier) -> None:
    """This thread's diskcache connection inside a transaction diskcache does not track (its bookkeeping is
    cleared before COMMIT or ROLLBACK runs, so one of them failing leaves the connection in it)."""
    tier._cache._con.execute("BEGIN IMMEDIATE")


def test_a_batch_on_a_connection_left_inside_a_transaction_is_written(
        tier: DiskTier, caplog: pytest.LogCaptureFixture) -> None:
    """BEGIN on such a connection fails at once, every time: the connection is rolled back and reopened, and
    the operator is told."""
    with caplog.at_level(logging.WARNING, logger="assetcdn.edge.cache.disk"):
        in_one_thread([lambda: leave_in_transaction(tier), lambda: tier.put_many(BATCH)])
    assert bodies(tier) == {obj.key: obj.body for obj in BATCH}
    assert any("left inside a transaction" in r.getMessage() for r in caplog.records), caplog.records


def test_a_streamed_put_on_a_connection_left_inside_a_transaction_is_stored(tier: DiskTier) -> None:
    """A stream is read once, so its write has one attempt: the connection is repaired before it."""
    body = b"s" * (64 * 1024)
    in_one_thread([lambda: leave_in_transaction(tier),
                   lambda: tier.put("pull:z:/stream", io.BytesIO(body), content_type="text/plain", etag='"e"',
                                    tags=())])
    stored = tier.get("pull:z:/stream", load_limit=MB)
    assert stored is not None and stored.body == body


def test_a_batch_on_a_connection_holding_an_old_read_is_written(tier: DiskTier, tmp_path: Path) -> None:
    """The writer's connection still holds a read begun before another connection wrote: SQLite refuses its
    BEGIN IMMEDIATE at once ("database is locked", without waiting), every time."""
    other = DiskTier(tmp_path / "cache", size_limit=64 * MB)
    reads: list[sqlite3.Cursor] = []

    def open_read() -> None:
        for n in range(3):
            tier.put(f"pull:z:/{n}", b"x", content_type="text/plain", etag='"e"', tags=())
        reads.append(tier._cache._con.execute("SELECT key FROM Cache"))
        reads[0].fetchone()  # rows left: the read stays open
        other.put("pull:z:/other", b"y", content_type="text/plain", etag='"e"', tags=())

    try:
        in_one_thread([open_read, lambda: tier.put_many(BATCH)])
    finally:
        other.close()
    assert bodies(tier) == {obj.key: obj.body for obj in BATCH}


def test_a_batch_that_finds_the_database_locked_throughout_is_dropped(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """Another connection holds the write lock through every attempt: the batch is given up (counted, logged),
    not retried for ever; once the lock is gone the tier writes again."""
    monkeypatch.setattr(disk_module, "SQLITE_TIMEOUT_S", 0.05)  # each attempt's wait for the lock
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    tier = DiskTier(tmp_path / "cache", size_limit=64 * MB)
    metrics = Metrics("edge")
    tier.report_to(metrics)
    holder = sqlite3.connect(tier.database, isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")
        with caplog.at_level(logging.WARNING, logger="assetcdn.edge.cache.disk"):
            in_one_thread([lambda: tier.put_many(BATCH)])
        holder.execute("ROLLBACK")
        assert bodies(tier) == {obj.key: None for obj in BATCH}
        assert tier.dropped_writes == len(BATCH)
        for _ in range(2):  # a second flush adds nothing more
            metrics.flush()
            assert 'assetcdn_edge_disk_dropped_writes_total{process="edge"} 2.0' in metrics.render().decode()
        assert any("not written" in r.getMessage() for r in caplog.records), caplog.records
        assert not [p for p in tier.directory.rglob("*.val")]  # the large body's file went with its batch
        in_one_thread([lambda: tier.put_many(BATCH)])
        assert bodies(tier) == {obj.key: obj.body for obj in BATCH}
    finally:
        holder.close()
        tier.close()


def test_a_delete_that_finds_the_database_locked_throughout_fails(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A purge's delete must not report success without deleting: it fails (an OSError), and does not hang."""
    monkeypatch.setattr(disk_module, "SQLITE_TIMEOUT_S", 0.05)
    tier = DiskTier(tmp_path / "cache", size_limit=64 * MB)
    tier.put("pull:z:/kept", b"x", content_type="text/plain", etag='"e"', tags=("t",))
    holder = sqlite3.connect(tier.database, isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")
        with pytest.raises(OSError, match="no write transaction"):
            in_one_thread([lambda: tier.purge_tags(["t"])])
        holder.execute("ROLLBACK")
        assert tier.get("pull:z:/kept", load_limit=MB) is not None
        assert tier.purge_tags(["t"]) == ["pull:z:/kept"]
    finally:
        holder.close()
        tier.close()


def held_batches(cache: EdgeCache) -> tuple[threading.Event, threading.Event]:
    """(started, release): each disk batch of `cache` sets `started`, then waits for `release` before it writes."""
    started, release = threading.Event(), threading.Event()
    put_many = cache.disk.put_many

    def held(entries: Sequence[CachedObject], current: Any = None) -> list[CachedObject]:
        started.set()
        release.wait(LIMIT_S)
        return put_many(entries, current)

    cache.disk.put_many = held  # type: ignore[method-assign]
    return started, release


def test_close_does_not_wait_for_ever_on_a_writer_that_does_not_finish(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """The writer thread is inside a batch that does not end: close gives up waiting for it (logged) and
    closes; the writer's batch, once it ends, resolves its waiters and later ones write nothing."""
    monkeypatch.setattr(store_module, "CLOSE_WAIT_S", 0.2, raising=False)
    cache = EdgeCache(tmp_path / "cache", disk_size_limit=64 * MB, memory_bytes=MB)
    started, release = held_batches(cache)
    with ThreadPoolExecutor(max_workers=1) as writer:
        try:
            cache.put_behind("pull:z:/a", b"a", "text/plain", '"e"', ["t"], (), writer=writer)
            assert started.wait(LIMIT_S)
            cache.put_behind("pull:z:/b", b"b", "text/plain", '"e"', ["t"], (), writer=writer)  # queued behind
            with caplog.at_level(logging.WARNING, logger="assetcdn.edge.cache.write_behind"):
                in_one_thread([cache.close])
            assert any("still writing" in r.getMessage() for r in caplog.records), caplog.records
        finally:
            release.set()


async def test_closing_waits_for_a_busy_writer_while_the_event_loop_runs_on(tmp_path: Path) -> None:
    """Shutdown closes the cache while the disk writer is inside a batch: the event loop keeps running other
    callbacks during the wait (the timer here is what lets the batch end), and what was queued behind the batch
    is written before the cache closes."""
    cache = EdgeCache(tmp_path / "cache", disk_size_limit=64 * MB, memory_bytes=MB)
    started, release = held_batches(cache)
    loop = asyncio.get_running_loop()
    with ThreadPoolExecutor(max_workers=1) as writer:
        try:
            cache.put_behind("pull:z:/a", b"a", "text/plain", '"e"', ["t"], (), writer=writer)
            assert await loop.run_in_executor(None, started.wait, LIMIT_S)
            cache.put_behind("pull:z:/b", b"b", "text/plain", '"e"', ["t"], (), writer=writer)  # queued behind
            closing = asyncio.ensure_future(cache.aclose())
            fired_while_closing: list[bool] = []

            def on_time() -> None:
                fired_while_closing.append(not closing.done())
                release.set()

            loop.call_soon(on_time)
            await asyncio.wait_for(closing, LIMIT_S)
        finally:
            release.set()
    assert fired_while_closing == [True]
    reopened = DiskTier(tmp_path / "cache", size_limit=64 * MB)
    try:
        assert [getattr(reopened.get(key, load_limit=MB), "body", None) for key in ("pull:z:/a", "pull:z:/b")] == \
            [b"a", b"b"]
    finally:
        reopened.close()


def test_the_older_row_a_dropped_batch_leaves_goes_at_the_next_write(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch of a newer response the database refuses throughout (the lock held past every attempt) cannot
    remove the older row under its key either while the lock is held: it is removed by this tier's next write, so
    that the older response is not served on as the current one."""
    monkeypatch.setattr(disk_module, "SQLITE_TIMEOUT_S", 0.05)
    tier = DiskTier(tmp_path / "cache", size_limit=64 * MB)
    older = CachedObject(key="pull:z:/page", content_type="text/plain", etag='"1"', tags=("t",), size=3,
                         stored_at=1.0, body=b"one", headers=())
    newer = CachedObject(key="pull:z:/page", content_type="text/plain", etag='"2"', tags=("t",), size=3,
                         stored_at=2.0, body=b"two", headers=())
    tier.put_many([older])
    holder = sqlite3.connect(tier.database, isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")
        in_one_thread([lambda: tier.put_many([newer])])
        holder.execute("ROLLBACK")
        assert tier.dropped_writes == 1
        in_one_thread([lambda: tier.put_many([entry("pull:z:/other", b"other")])])
        assert tier.get("pull:z:/page", load_limit=MB) is None
        assert getattr(tier.get("pull:z:/other", load_limit=MB), "body", None) == b"other"
    finally:
        holder.close()
        tier.close()
