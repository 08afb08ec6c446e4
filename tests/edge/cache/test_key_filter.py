"""The disk tier's filter of the keys written (a one-worker edge): a miss of a key never written asks no SQLite,
and every key written is found, through batches, streamed bodies, rebuilds and writes racing a rebuild."""

from __future__ import annotations

import io
import os
import sqlite3
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

from assetcdn.edge.cache import key_filter
from assetcdn.edge.cache.disk import DiskTier
from assetcdn.edge.cache.entry import CachedObject
from assetcdn.edge.cache.key_filter import KeyFilter
from assetcdn.edge.cache.store import EdgeCache

MB = 1024 * 1024


def entry(key: str, body: bytes = b"body") -> CachedObject:
    return CachedObject(key, "text/plain", '"e"', ("tag",), len(body), 1.0, body=body)


def cache_selects(disk: DiskTier) -> list[str]:
    """The statements the calling thread's connections run on the Cache table from now on."""
    seen: list[str] = []

    def trace(statement: str) -> None:
        if "FROM Cache" in statement:
            seen.append(statement)

    disk._sql().set_trace_callback(trace)
    return seen


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[DiskTier]:
    tier = DiskTier(tmp_path / "cache", size_limit=256 * MB)
    yield tier
    tier.close()


def test_the_filter_never_forgets_a_key_and_rarely_claims_one() -> None:
    keys = [f"pull:{n:040x}" for n in range(20_000)]
    built = KeyFilter(keys[:10_000], 10_000)
    with built.lock:
        built.add_all(keys[10_000:])
    assert all(built.may_hold(key) for key in keys)
    absent = [f"pull:absent-{n}" for n in range(20_000)]
    assert sum(built.may_hold(key) for key in absent) < len(absent) * 0.02


def test_a_miss_of_a_key_never_written_asks_no_sqlite_and_a_written_one_is_found(disk: DiskTier) -> None:
    disk.put_many([entry("pull:written")])
    disk.track_keys(True)
    selects = cache_selects(disk)
    assert disk.get("pull:never", load_limit=MB) is None
    assert selects == []
    found = disk.get("pull:written", load_limit=MB)  # written before the filter was built: read from the rows
    assert found is not None and found.body == b"body"
    disk.put_many([entry("pull:batched")])
    disk.put("pull:streamed", io.BytesIO(os.urandom(64 * 1024)), content_type="a/b", etag='"s"', tags=())
    disk.put("pull:bytes", b"small", content_type="a/b", etag='"b"', tags=())
    for key in ("pull:batched", "pull:streamed", "pull:bytes"):
        assert disk.get(key, load_limit=MB) is not None, key


def test_without_the_filter_every_miss_asks_sqlite(disk: DiskTier) -> None:
    """Several workers write one disk tier: a key another worker wrote must be found, so every miss asks."""
    selects = cache_selects(disk)
    assert disk.get("pull:never", load_limit=MB) is None
    assert len(selects) == 1
    other_worker = DiskTier(disk.directory, size_limit=256 * MB)
    other_worker.put_many([entry("pull:theirs")])
    other_worker.close()
    assert disk.get("pull:theirs", load_limit=MB) is not None


def test_a_full_filter_is_rebuilt_from_the_rows_and_finds_every_one(disk: DiskTier,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(key_filter, "MIN_BITS", 1024)  # full after 64 adds
    disk.track_keys(True)
    first = disk._keys
    keys = [f"pull:k{n}" for n in range(300)]
    for start in range(0, len(keys), 10):
        disk.put_many([entry(key) for key in keys[start:start + 10]])
    assert disk._keys is not first  # rebuilt, sized for the rows held
    assert all(disk.get(key, load_limit=MB) is not None for key in keys)


def test_writes_racing_rebuilds_lose_no_key(disk: DiskTier, monkeypatch: pytest.MonkeyPatch) -> None:
    """One thread writes batches (each key added inside its transaction) while another keeps rebuilding the
    filter from the rows: every key written is found afterwards."""
    monkeypatch.setattr(key_filter, "MIN_BITS", 1024)
    disk.track_keys(True)
    written: list[str] = []
    stop = threading.Event()

    def rebuild() -> None:
        while not stop.is_set():
            current = disk._keys
            assert current is not None
            disk._rebuild_keys(current)

    rebuilder = threading.Thread(target=rebuild)
    rebuilder.start()
    try:
        for batch in range(60):
            keys = [f"pull:b{batch}-{n}" for n in range(5)]
            disk.put_many([entry(key) for key in keys])
            written += keys
    finally:
        stop.set()
        rebuilder.join()
    keys_filter = disk._keys
    assert keys_filter is not None
    assert [key for key in written if not keys_filter.may_hold(key)] == []


def test_a_one_worker_cache_keeps_the_filter_and_a_several_worker_one_does_not(tmp_path: Path) -> None:
    cache = EdgeCache(tmp_path / "cache", disk_size_limit=64 * MB, memory_bytes=MB)
    try:
        cache.disk.put_many([entry("pull:before")])
        cache.alone = True
        selects = cache_selects(cache.disk)
        assert cache.get("pull:never") is None and selects == []
        assert cache.get("pull:before") is not None
        cache.alone = False
        selects.clear()
        assert cache.get("pull:never") is None and len(selects) == 1
    finally:
        cache.close()


def test_a_batch_adds_its_keys_before_its_rows_can_be_read(disk: DiskTier, monkeypatch: pytest.MonkeyPatch) -> None:
    """The batch's keys reach the filter inside its write transaction: when they are added, no other connection
    can read their rows yet (so no look-up ever finds a row the filter says is absent)."""
    disk.track_keys(True)
    visible_at_add: list[int] = []
    add = disk._add_keys

    def watched(keys: Iterable[str]) -> None:
        keys = list(keys)
        other = sqlite3.connect(disk.database)
        try:
            visible_at_add.append(other.execute("SELECT count(*) FROM Cache WHERE key = ?", (keys[0],)).fetchone()[0])
        finally:
            other.close()
        add(keys)

    monkeypatch.setattr(disk, "_add_keys", watched)
    disk.put_many([entry("pull:ordered")])
    assert visible_at_add == [0]
    assert disk.get("pull:ordered", load_limit=MB) is not None
