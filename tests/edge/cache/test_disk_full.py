"""The disk tier on a filesystem that fills up before its size limit: puts never fail (what does not fit is
not cached), older entries are evicted to make room, the event is logged once, and caching goes on."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from assetcdn.edge.cache.store import MB, EdgeCache
from tests.integration.small_fs import free_bytes, small_fs

BODY = 100_000


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
