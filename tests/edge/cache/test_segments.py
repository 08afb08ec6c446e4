"""Segments: a batch's bodies too large for SQLite's rows share one file, read back whole per entry, and the file
goes once no row names it, whoever drops the last one."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from assetcdn.edge.cache import disk as disk_module
from assetcdn.edge.cache.disk import DiskTier
from assetcdn.edge.cache.entry import CachedObject, strong_etag
from assetcdn.edge.cache.store import EdgeCache
from tests.support.edge_cache import HEAD, KB, MB, HeldWriter, leave_orphans


@pytest.fixture
def tier(tmp_path: Path) -> Iterator[DiskTier]:
    disk = DiskTier(tmp_path / "cache", size_limit=64 * MB)
    yield disk
    disk.close()


def entry(key: str, body: bytes, stored_at: float = 1.0) -> CachedObject:
    return CachedObject(key=key, content_type="image/png", etag=strong_etag(key), tags=("all", f"path-{key}"),
                        size=len(body), stored_at=stored_at, body=body, headers=(("x-zone", "a"),))


def files(tier: DiskTier, pattern: str) -> set[Path]:
    return set(tier.directory.rglob(pattern))


def row_filename(tier: DiskTier, key: str) -> str:
    row = tier._sql().execute("SELECT filename FROM Cache WHERE key = ?", (key,)).fetchone()
    assert row is not None
    return str(row[0])


def test_a_batch_of_large_bodies_shares_one_file_and_each_reads_back_whole(tier: DiskTier) -> None:
    bodies = {"a": os.urandom(40 * KB), "b": os.urandom(100 * KB), "c": os.urandom(64 * KB), "small": b"inline"}
    tier.put_many([entry(key, body) for key, body in bodies.items()])
    assert len(files(tier, "*.seg")) == 1 and files(tier, "*.val") == set()
    for key, body in bodies.items():
        stored = tier.get(key, load_limit=0)  # read whole all the same: no file of its own to send
        assert stored is not None and stored.body == body and stored.path is None, key
        assert (stored.size, stored.etag, stored.headers) == (len(body), strong_etag(key), (("x-zone", "a"),))
    assert tier.read_range("b", 1000, 3000) == bodies["b"][1000:3000]
    assert tier.read_range("c", 64 * KB - 10, 70 * KB) == bodies["c"][-10:]
    assert sorted(tier.purge_tags(["path-b"])) == ["b"]
    assert tier.get("b", load_limit=MB) is None and tier.get("c", load_limit=MB).body == bodies["c"]  # type: ignore[union-attr]
    # A row names a place in the segment, not a path: a version without segments opens nothing and misses.
    assert not (tier.directory / row_filename(tier, "a")).exists()


def test_the_file_stays_while_a_row_names_it_whichever_process_drops_the_rows(tmp_path: Path) -> None:
    first = DiskTier(tmp_path / "cache", size_limit=64 * MB)
    other = DiskTier(tmp_path / "cache", size_limit=64 * MB)  # another worker's connections to the same tier
    try:
        bodies = {key: os.urandom(50 * KB) for key in ("a", "b", "c")}
        first.put_many([entry(key, body) for key, body in bodies.items()])
        (segment,) = files(first, "*.seg")
        assert other.delete("a") and other.delete("b")
        assert segment.exists()
        stored = other.get("c", load_limit=MB)
        assert stored is not None and stored.body == bodies["c"]
        first.put_many([entry("c", b"now small", stored_at=2.0)])  # the last row replaced by a newer entry
        assert not segment.exists() and files(first, "*.seg") == set()
        assert other.get("c", load_limit=MB).body == b"now small"  # type: ignore[union-attr]
    finally:
        first.close()
        other.close()


def test_a_batch_past_the_segment_size_writes_several(tier: DiskTier, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(disk_module, "SEGMENT_BYTES", 150 * KB)
    bodies = {f"k{i}": os.urandom(60 * KB) for i in range(5)}
    tier.put_many([entry(key, body) for key, body in bodies.items()])
    assert len(files(tier, "*.seg")) == 3  # 120 KB, 120 KB, 60 KB
    assert all(tier.get(key, load_limit=MB).body == body for key, body in bodies.items())  # type: ignore[union-attr]
    assert {os.path.getsize(path) for path in files(tier, "*.seg")} == {120 * KB, 60 * KB}


def test_bodies_past_segment_max_and_a_lone_large_body_keep_files_of_their_own(tmp_path: Path) -> None:
    tier = DiskTier(tmp_path / "cache", size_limit=64 * MB, segment_max=50 * KB)
    try:
        tier.put_many([entry("a", b"a" * 40 * KB), entry("b", b"b" * 40 * KB), entry("big", b"B" * 100 * KB)])
        assert len(files(tier, "*.seg")) == 1 and len(files(tier, "*.val")) == 1
        big = tier.get("big", load_limit=0)
        assert big is not None and big.path is not None and Path(big.path).read_bytes() == b"B" * 100 * KB
        tier.put_many([entry("alone", b"l" * 40 * KB)])  # nothing to share a file with
        alone = tier.get("alone", load_limit=0)
        assert alone is not None and alone.path is not None and len(files(tier, "*.val")) == 2
    finally:
        tier.close()


def test_a_batch_the_database_refuses_leaves_no_segment(tier: DiskTier) -> None:
    tier._sql().execute("CREATE TRIGGER refuse BEFORE INSERT ON Cache WHEN NEW.key = 'refused'"
                        " BEGIN SELECT RAISE(ABORT, 'refused'); END")
    with pytest.raises(sqlite3.DatabaseError, match="refused"):
        tier.put_many([entry("first", b"f" * 40 * KB), entry("refused", b"r" * 40 * KB)])
    assert len(tier) == 0 and files(tier, "*.seg") == set() and tier.get("first", load_limit=MB) is None


def test_eviction_by_size_removes_a_segment_once_all_its_rows_are_culled(tmp_path: Path) -> None:
    tier = DiskTier(tmp_path / "cache", size_limit=2 * MB)
    try:
        for batch in range(10):
            tier.put_many([entry(f"b{batch}:{i}", bytes([batch]) * 100 * KB, stored_at=batch * 10 + i)
                           for i in range(4)])
            assert tier.volume() <= 2 * MB + 4 * 100 * KB + 256 * KB
        batches = {key.split(":")[0] for key in tier.keys_for_tags(["all"])}
        assert "b9" in batches and "b0" not in batches
        assert len(files(tier, "*.seg")) == len(batches)  # one file per batch with an entry left
        assert tier.get("b9:3", load_limit=MB).body == bytes([9]) * 100 * KB  # type: ignore[union-attr]
    finally:
        tier.close()


def test_a_full_filesystem_frees_the_oldest_segments_whole(tier: DiskTier) -> None:
    tier.put_many([entry(f"old{i}", b"o" * 100 * KB, stored_at=1.0) for i in range(3)])
    tier.put_many([entry(f"new{i}", b"n" * 100 * KB, stored_at=2.0) for i in range(3)])
    older = Path(tier.directory, row_filename(tier, "old0").partition("#")[0])
    tier._evict_files(1)  # what a full filesystem does before SQLite can delete rows
    assert not older.exists() and len(files(tier, "*.seg")) == 1
    assert tier.get("old1", load_limit=MB) is None  # a row whose segment went reads as a miss
    assert tier.get("new2", load_limit=MB).body == b"n" * 100 * KB  # type: ignore[union-attr]


def test_a_one_worker_edge_writes_its_evicted_fills_into_segments(tmp_path: Path) -> None:
    """The memory tier's victims reach the disk tier in a batch: one file for the batch, each read back whole."""
    cache = EdgeCache(tmp_path / "cache", disk_size_limit=64 * MB, memory_bytes=4 * MB,
                      memory_max_object=128 * KB)
    cache.alone = True
    writer = HeldWriter()
    try:
        bodies = {f"pull:z:/f{i}": bytes([i]) * 60 * KB for i in range(80)}
        for key, body in bodies.items():
            assert cache.put_behind(key, body, "image/png", '"1"', ["path-f"], HEAD, writer=writer) is not None
        writer.run()  # the evicted fills' batch
        written = {key: cache.disk.get(key, load_limit=0) for key in bodies if key not in cache.memory}
        assert len([key for key, stored in written.items() if stored is not None]) >= 2
        assert len(files(cache.disk, "*.seg")) == 1 and files(cache.disk, "*.val") == set()
        for key, stored in written.items():
            assert stored is None or (stored.body, stored.path) == (bodies[key], None), key
    finally:
        cache.close()


def test_small_bodies_share_a_segment_once_the_batch_holds_enough_of_them(tier: DiskTier) -> None:
    """Bodies from 4 KB share a file when they come to 64 KB (SQLite would write each twice); a batch of a few
    keeps them in their rows, and bodies under 4 KB always stay there."""
    tier.put_many([entry(f"few{i}", bytes([i]) * 5 * KB) for i in range(3)])  # 15 KB: no file for so little
    assert files(tier, "*.seg") == set() and all("#" not in str(row_filename(tier, f"few{i}")) for i in range(3))
    bodies = {f"many{i}": os.urandom(5 * KB) for i in range(20)} | {"tiny": b"t" * 1000}
    tier.put_many([entry(key, body) for key, body in bodies.items()])
    assert len(files(tier, "*.seg")) == 1 and files(tier, "*.val") == set()
    assert row_filename(tier, "tiny") == "None"  # in its row
    for key, body in bodies.items():
        stored = tier.get(key, load_limit=MB)
        assert stored is not None and stored.body == body, key


def size_setting(tier: DiskTier) -> int:
    """diskcache's count of the bytes held outside SQLite's pages (what its volume adds to them)."""
    return int(tier._sql().execute("SELECT value FROM Settings WHERE key = 'size'").fetchone()[0])


def test_a_segment_counts_whole_until_its_last_entry_goes(tier: DiskTier) -> None:
    """The space of a segment's purged entries stays taken until the file goes, so the volume counts it."""
    tier.put_many([entry(f"k{i}", bytes([i]) * 100 * KB) for i in range(5)])
    assert size_setting(tier) == 500 * KB
    for i in range(4):
        assert tier.delete(f"k{i}")
    tier.put_many([entry("k4", b"replaced" * 1000, stored_at=2.0)])  # its last row: replaced by a smaller body
    assert files(tier, "*.seg") == set() and size_setting(tier) == 0  # the new body is in its row
    tier.put_many([entry(f"n{i}", bytes([i]) * 100 * KB) for i in range(3)])
    tier.clear()
    assert files(tier, "*.seg") == set() and size_setting(tier) == 0


def test_purged_space_in_segments_is_culled_within_the_limit(tmp_path: Path) -> None:
    """Most of each batch purged, one entry of each left: the segments' whole sizes count, so the oldest entries
    go and their segments with them rather than the files growing past the limit."""
    limit = 8 * MB
    tier = DiskTier(tmp_path / "cache", size_limit=limit)
    try:
        for batch in range(8):
            tier.put_many([entry(f"b{batch}:{i}", os.urandom(100 * KB), stored_at=batch * 100 + i)
                           for i in range(40)])
            for i in range(39):  # (a cull takes ten of the oldest at once: some of these may have gone)
                tier.delete(f"b{batch}:{i}")
            on_disk = sum(os.path.getsize(path) for path in files(tier, "*.seg"))
            assert on_disk <= limit + 40 * 100 * KB, (batch, on_disk)
        assert tier.get("b7:39", load_limit=MB) is not None and tier.get("b0:39", load_limit=MB) is None
    finally:
        tier.close()


def test_segments_in_one_directory_are_kept_apart(tier: DiskTier, monkeypatch: pytest.MonkeyPatch) -> None:
    names = iter(["ab/" + "1" * 30 + ".val", "ab/" + "2" * 30 + ".val"])
    clean = tier._cache._disk
    monkeypatch.setattr(clean, "filename", lambda *args: (name := next(names), os.path.join(clean._directory, name)))
    tier.put_many([entry(f"one{i}", b"1" * 40 * KB) for i in range(2)])
    tier.put_many([entry(f"two{i}", b"2" * 40 * KB) for i in range(2)])
    assert {path.name[0] for path in files(tier, "*.seg")} == {"1", "2"}
    assert tier.delete("one0") and tier.delete("one1")
    assert {path.name[0] for path in files(tier, "*.seg")} == {"2"}
    assert tier.get("two1", load_limit=MB).body == b"2" * 40 * KB  # type: ignore[union-attr]


def test_a_segment_cut_short_reads_as_a_miss(tier: DiskTier) -> None:
    tier.put_many([entry(f"k{i}", bytes([i]) * 40 * KB) for i in range(2)])
    (segment,) = files(tier, "*.seg")
    os.truncate(segment, 60 * KB)  # the second body is cut short
    assert tier.get("k0", load_limit=MB).body == bytes([0]) * 40 * KB  # type: ignore[union-attr]
    assert tier.get("k1", load_limit=MB) is None and tier.read_range("k1", 0, 10) is None


def test_a_start_removes_old_segments_no_entry_names(tmp_path: Path) -> None:
    """Left by a crash before its batch committed, or by an earlier version that removed its last entry: removed
    by a later start once an hour old; a younger one may be another process's batch about to commit."""
    tier = DiskTier(tmp_path / "cache", size_limit=64 * MB)
    tier.put_many([entry(f"k{i}", bytes([i]) * 40 * KB) for i in range(2)])
    tier.close()
    (live,) = files(tier, "*.seg")
    old, young = leave_orphans(live)
    reopened = DiskTier(tmp_path / "cache", size_limit=64 * MB)
    try:
        assert files(reopened, "*.seg") == {live, young}
        assert reopened.get("k1", load_limit=MB).body == bytes([1]) * 40 * KB  # type: ignore[union-attr]
    finally:
        reopened.close()


def test_a_sweep_passes_over_a_directory_removed_while_it_lists(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Another worker removes an emptied body directory while a sweep lists the cache: the sweep goes on with the
    others rather than give up."""
    tier = DiskTier(tmp_path / "cache", size_limit=64 * MB)
    try:
        tier.put_many([entry(f"k{i}", bytes([i]) * 40 * KB) for i in range(2)])
        (live,) = files(tier, "*.seg")
        gone = tier.directory / "zz"
        gone.mkdir()
        _, young = leave_orphans(live)
        real_scandir = os.scandir

        def scandir(path: Any = ".") -> Any:
            if str(path) == str(gone):
                gone.rmdir()  # removed between the listing of the cache and its own
            return real_scandir(path)

        monkeypatch.setattr(os, "scandir", scandir)
        assert tier.sweep_segments() == 1
        assert files(tier, "*.seg") == {live, young}
    finally:
        tier.close()
