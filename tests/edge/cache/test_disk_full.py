"""The disk tier on a filesystem that fills up before its size limit: puts never fail (what does not fit is
not cached), older entries are evicted to make room, the event is logged once, and caching goes on."""

from __future__ import annotations

import io
import logging
import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from assetcdn.edge.cache.disk import DiskTier
from assetcdn.edge.cache.entry import CachedObject
from assetcdn.edge.cache.store import MB, EdgeCache
from tests.integration.small_fs import free_bytes, small_fs

BODY = 100_000
KB = 1024


def test_a_full_filesystem_evicts_logs_once_and_never_fails_a_put(tmp_path: Path,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    with small_fs(tmp_path / "fs", 1024) as fs:
        cache = EdgeCache(fs / "cache", disk_size_limit=1024 * MB, memory_bytes=MB, memory_max_object=1024)
        try:
            cached_once_full = []  # whether each put once the filesystem was full kept its entry
            with caplog.at_level(logging.WARNING, logger="assetcdn.edge.cache.disk"):
                for i in range(40):  # 4 MB into 1 MB
                    body = os.urandom(BODY)
                    stored = cache.put(f"k{i}", body, "application/octet-stream", f'"{i}"', ("t",))
                    assert stored.body == body and stored.size == BODY
                    if cache.disk.full_events:
                        cached_once_full.append(cache.get(f"k{i}") is not None)
            full = [r for r in caplog.records if "filesystem is full" in r.getMessage()]
            assert len(full) == 1, [r.getMessage() for r in caplog.records]
            assert cache.disk.full_events >= 1
            # Evicted, and still caching: most puts keep their entry (one that finds no room even after
            # evicting is served uncached, whichever of the puts that is).
            assert len(cache.disk) < 40 and sum(cached_once_full) * 2 >= len(cached_once_full)
            assert cache.disk.size_limit < MB        # now within what the filesystem can hold
            assert free_bytes(fs) > 0
            check = cache.check()  # a write, read back and delete still work
            assert check.ok, check.error
            leftovers = {p.name for p in (fs / "cache").rglob("*.val")}
            assert len(leftovers) <= len(cache.disk)  # no partial body left behind by a failed write
        finally:
            cache.close()


def test_a_batch_whose_commit_finds_the_disk_full_keeps_the_bodies_of_the_entries_it_would_replace(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A write-behind batch (and then each of its entries on its own) fails at COMMIT, as on a full disk (SQLite
    rolls the transaction back): the entries it would have replaced are still read whole, the one kept in
    SQLite's row as the one kept in a file of its own."""
    tier = DiskTier(tmp_path / "cache", size_limit=1024 * MB)
    try:
        # Older entries, which the eviction after a full disk takes first.
        for i in range(8):
            tier.put(f"older-{i}", b"o" * (64 * KB), content_type="text/plain", etag='"o"', tags=("t",))
        old = {"small": b"old small", "large": b"L" * (64 * KB)}  # inline in SQLite, and a file
        for key, body in old.items():
            tier.put(key, body, content_type="text/plain", etag='"1"', tags=("t",))
        cache = tier._cache

        def full_at_commit(statement: str, *args: Any) -> Any:
            con = cache._con  # the thread's connection now: a failed write replaces it
            if statement == "COMMIT":
                con.execute("ROLLBACK")
                raise sqlite3.OperationalError("database or disk is full")
            return con.execute(statement, *args)

        monkeypatch.setattr(type(cache), "_sql", property(lambda _cache: full_at_commit))
        new = [CachedObject(key=key, content_type="text/plain", etag='"2"', tags=("t",), size=len(body) + 1,
                            stored_at=2.0, body=body + b"!", headers=()) for key, body in old.items()]
        tier.put_many(new, current=lambda entries: entries)
        monkeypatch.undo()
        assert tier.full_events >= 1  # it did find the disk full
        for key, body in old.items():
            stored = tier.get(key, load_limit=MB)
            assert stored is not None and (stored.body, stored.etag) == (body, '"1"'), key
            stored = tier.get(key, load_limit=0)  # a body file opened as the large one's delivery opens it
            assert stored is not None
            if stored.path is not None:
                with open(stored.path, "rb") as file:
                    assert file.read() == body
    finally:
        tier.close()


def test_once_the_filesystem_is_full_each_put_keeps_its_entry_beside_the_newest_that_fit(tmp_path: Path) -> None:
    """Large bodies into a filesystem that holds about six: once it is full, the lowered limit holds a few, and
    each put evicts only the oldest entries it needs room for. The tier never ends up empty, and the entry
    just written is kept."""
    with small_fs(tmp_path / "fs", 3000) as fs:
        tier = DiskTier(fs / "cache", size_limit=1024 * MB)
        try:
            puts_once_full = 0
            for i in range(16):
                tier.put(f"k{i}", os.urandom(400_000), content_type="application/octet-stream", etag=f'"{i}"',
                         tags=("t",))
                if tier.full_events and puts_once_full:  # a put after the one that found it full
                    assert tier.get(f"k{i}", load_limit=0) is not None, i
                    assert len(tier) >= 2, i
                puts_once_full += bool(tier.full_events)
            assert tier.full_events >= 1 and puts_once_full >= 8
        finally:
            tier.close()


def test_a_streamed_entry_a_purge_named_meanwhile_is_not_kept_when_the_cull_after_it_finds_the_disk_full(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A streamed put over the limit is committed, then culled for in a transaction of its own, which finds the
    disk full (its commit cannot grow SQLite's journal): a purge made while the body was written (`unless`) must
    still remove the entry, as it does when the cull succeeds; otherwise the purged response is served from disk."""
    tier = DiskTier(tmp_path / "cache", size_limit=MB)
    try:
        for i in range(8):
            tier.put(f"older-{i}", b"o" * (100 * KB), content_type="text/plain", etag='"o"', tags=("t",))
        cache = tier._cache
        commits = 0

        def full_at_the_culls_commit(statement: str, *args: Any) -> Any:
            nonlocal commits
            con = cache._con
            if statement == "COMMIT":
                commits += 1
                if commits == 2:  # the set's own commit goes through, the cull's after it does not
                    con.execute("ROLLBACK")
                    raise sqlite3.OperationalError("database or disk is full")
            return con.execute(statement, *args)

        monkeypatch.setattr(type(cache), "_sql", property(lambda _cache: full_at_the_culls_commit))
        tier.put("purged", io.BytesIO(b"p" * (300 * KB)), content_type="text/plain", etag='"p"', tags=("t",),
                 unless=lambda: True)
        monkeypatch.undo()
        assert commits >= 2  # the cull did run, and found the disk full
        assert tier.get("purged", load_limit=0) is None
    finally:
        tier.close()


def test_the_write_ahead_log_is_given_back_after_a_full_filesystem_even_when_the_cull_fails(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Small bodies live in SQLite's pages, so deleting body files frees nothing for them, and the cull itself
    may find no room: the write-ahead log's space (up to ~32 MB between checkpoints) is still given back."""
    tier = DiskTier(tmp_path / "cache", size_limit=1024 * MB)
    try:
        for i in range(300):
            tier.put(f"small-{i}", os.urandom(8 * KB), content_type="text/plain", etag=f'"{i}"', tags=("t",))
        wal = tier.database.with_name(tier.database.name + "-wal")
        assert wal.stat().st_size > 0

        def no_room() -> None:
            raise sqlite3.OperationalError("database or disk is full")

        monkeypatch.setattr(tier, "_cull_to_limit", no_room)
        tier._disk_full(OSError(28, "No space left on device"), "next", 8 * KB, retrying=False)
        assert wal.stat().st_size == 0
    finally:
        tier.close()


def test_a_newer_response_the_full_filesystem_keeps_out_leaves_no_worker_the_older_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two workers share the disk tier; the second holds version one in memory. The first one's write of version
    two finds the filesystem full, before and after evicting: version one is no longer what the second worker (or
    a third, reading the disk tier) answers with, while the first answers version two from its memory tier."""
    key = "pull:z:/page"
    first = EdgeCache(tmp_path / "cache", disk_size_limit=1024 * MB, memory_bytes=MB)
    second = EdgeCache(tmp_path / "cache", disk_size_limit=1024 * MB, memory_bytes=MB)
    try:
        for i in range(8):  # older entries, which the eviction after a full filesystem takes first
            first.put(f"older-{i}", b"o" * (64 * KB), "text/plain", '"o"', ("t",))
        first.put(key, b"version one", "text/plain", '"1"', ("t",))
        held = second.get(key)
        assert held is not None and held.body == b"version one"
        batch = first.disk._batch

        def full(entries: Any, *rest: Any, **named: Any) -> None:
            if any(obj.key == key for obj in entries):
                raise sqlite3.OperationalError("database or disk is full")
            batch(entries, *rest, **named)

        monkeypatch.setattr(first.disk, "_batch", full)
        kept = first.put(key, b"version two", "text/plain", '"2"', ("t",))
        monkeypatch.undo()
        assert first.disk.full_events >= 1
        assert kept.body == b"version two"
        found = first.get(key)
        assert found is not None and found.body == b"version two"
        assert second.get(key) is None
        assert first.disk.get(key, load_limit=MB) is None
    finally:
        first.close()
        second.close()
