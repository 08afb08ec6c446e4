"""The disk tier's database lost or damaged between two starts of an edge (a bad disk, or an operator who removed
``cache.db`` to get rid of a damaged one): the workers started again on the directory still cache, and still
purge each other's memory tiers."""

from __future__ import annotations

import logging
import os
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from assetcdn.edge.cache import write_behind
from assetcdn.edge.cache.entry import strong_etag
from assetcdn.edge.cache.store import EdgeCache
from assetcdn.shared.logs import LinePerInterval

MB = 1024 * 1024


def worker(directory: Path) -> EdgeCache:
    return EdgeCache(directory, disk_size_limit=64 * MB, memory_bytes=1 * MB)


def purges_published(directory: Path, count: int) -> None:
    """An edge's life before the loss: its workers published `count` purges to each other."""
    first = worker(directory)
    for number in range(count):
        first.purge_keys([f"pull:old-{number}"])
    first.close()


def test_a_purge_reaches_the_other_workers_after_the_database_was_removed_between_starts(tmp_path: Path) -> None:
    directory = tmp_path / "cache"
    purges_published(directory, 5)
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(f"{directory / 'cache.db'}{suffix}"):
            os.remove(f"{directory / 'cache.db'}{suffix}")

    one, other = worker(directory), worker(directory)
    try:
        one.put("pull:logo", b"old logo", "image/png", strong_etag("old"), ("zone-a",))
        assert other.get("pull:logo") is not None  # in the other worker's memory tier now
        assert one.purge_keys(["pull:logo"]) == 1
        assert other.get("pull:logo") is None
        one.put("pull:icon", b"old icon", "image/png", strong_etag("icon"), ("zone-b",))
        assert other.get("pull:icon") is not None
        assert one.purge_tags(["zone-b"]) == 1
        assert other.get("pull:icon") is None
    finally:
        one.close()
        other.close()


def test_a_disk_tier_that_fails_every_write_costs_the_log_a_line_per_interval_not_one_per_batch(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    cache = worker(tmp_path / "cache")
    writer = ThreadPoolExecutor(1)

    def failing(*args: object, **kwargs: object) -> None:
        raise sqlite3.DatabaseError("database disk image is malformed")

    monkeypatch.setattr(cache.disk, "put_many", failing)
    monkeypatch.setattr(write_behind, "WRITE_FAILURES", LinePerInterval(write_behind.log, 60.0))  # none logged yet
    try:
        with caplog.at_level(logging.WARNING, logger="assetcdn.edge.cache"):
            for number in range(20):
                assert cache.put_behind(f"pull:{number}", b"body", "text/plain", strong_etag(str(number)), (), (),
                                        writer=writer) is not None
                cache.flush_writes()  # a batch each, each refused
                assert cache.get(f"pull:{number}") is not None  # kept in memory all the same
        failures = [record for record in caplog.records if "could not be written" in record.getMessage()]
        assert len(failures) == 1, [record.getMessage() for record in failures]
        assert "database disk image is malformed" in failures[0].getMessage()
    finally:
        writer.shutdown()
        cache.close()


def test_a_worker_that_cannot_read_the_purges_of_the_others_serves_none_of_what_they_purged(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    directory = tmp_path / "cache"
    one, other = worker(directory), worker(directory)
    try:
        one.put("pull:logo", b"old logo", "image/png", strong_etag("old"), ("zone-a",))
        one.put("pull:icon", b"icon", "image/png", strong_etag("icon"), ("zone-b",))
        assert other.get("pull:logo") is not None and other.get("pull:icon") is not None  # in its memory tier

        def unreadable(*args: object) -> None:
            raise sqlite3.DatabaseError("database disk image is malformed")

        assert one.purge_keys(["pull:logo"]) == 1
        monkeypatch.setattr(other._purges, "_sql", unreadable)  # the log's pages damaged, for this worker's reads
        assert other.get("pull:logo") is None  # not the purged copy of its memory tier, nor an error
        monkeypatch.undo()
        assert other.get("pull:icon") is not None  # read from the disk tier again
    finally:
        one.close()
        other.close()
