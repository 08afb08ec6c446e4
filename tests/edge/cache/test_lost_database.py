"""The disk tier's database lost or damaged between two starts of an edge (a bad disk, or an operator who removed
``cache.db`` to get rid of a damaged one): the workers started again on the directory still cache, and still
purge each other's memory tiers."""

from __future__ import annotations

import os
from pathlib import Path

from assetcdn.edge.cache.entry import strong_etag
from assetcdn.edge.cache.store import EdgeCache

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
