"""The disk tier on a real diskcache directory: tags, restart, bounds, streaming, ranges."""

from __future__ import annotations

import errno
import hashlib
import io
import os
import sqlite3
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Iterator, Sequence
from pathlib import Path

import diskcache
import pytest

from assetcdn.edge.cache.disk import ROWS_PER_UPSERT, DiskTier, _CleanDisk
from assetcdn.edge.cache.entry import STREAM_CHUNK, CachedObject, strong_etag

MB = 1024 * 1024


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[DiskTier]:
    tier = DiskTier(tmp_path / "cache", size_limit=64 * MB)
    yield tier
    tier.close()


def put(tier: DiskTier, key: str, body: bytes, *tags: str) -> None:
    tier.put(key, body, content_type="image/png", etag=strong_etag(key), tags=tags)


def test_round_trip_keeps_metadata(disk: DiskTier) -> None:
    disk.put(
        "asset:1",
        b"png-bytes",
        content_type="image/png",
        etag='"1"',
        tags=("project-a", "all-assets"),
        headers=(("X-Zone", "a"),),
        stored_at=123.0,
    )
    obj = disk.get("asset:1", load_limit=MB)
    assert obj is not None
    assert (obj.body, obj.size, obj.content_type, obj.etag) == (b"png-bytes", 9, "image/png", '"1"')
    assert obj.tags == ("project-a", "all-assets")
    assert obj.headers == (("X-Zone", "a"),)
    assert obj.stored_at == 123.0
    assert disk.get("asset:missing", load_limit=MB) is None


def test_purge_by_tag(disk: DiskTier) -> None:
    put(disk, "a", b"1", "project-x", "all-assets")
    put(disk, "b", b"2" * 100_000, "project-x", "type-logos")  # a body file, not inline
    put(disk, "c", b"3", "project-y", "all-assets")
    assert sorted(disk.purge_tags(["project-x"])) == ["a", "b"]
    assert disk.get("a", load_limit=MB) is None and disk.get("b", load_limit=MB) is None
    assert disk.get("c", load_limit=MB) is not None
    assert disk.keys_for_tags(["project-x"]) == []


def test_overwrite_replaces_tags(disk: DiskTier) -> None:
    put(disk, "k", b"old", "old-tag")
    put(disk, "k", b"new", "new-tag")
    assert disk.keys_for_tags(["old-tag"]) == []
    assert disk.purge_tags(["new-tag"]) == ["k"]


def test_survives_restart(tmp_path: Path) -> None:
    directory = tmp_path / "cache"
    first = DiskTier(directory, size_limit=64 * MB)
    put(first, "small", b"s" * 10, "project-a")
    put(first, "large", b"L" * (2 * MB), "project-a", "format-mp4")
    put(first, "other", b"o", "project-b")
    first.close()

    reopened = DiskTier(directory, size_limit=64 * MB)
    small = reopened.get("small", load_limit=MB)
    large = reopened.get("large", load_limit=MB)
    assert small is not None and small.body == b"s" * 10 and small.tags == ("project-a",)
    assert large is not None and large.path is not None and large.size == 2 * MB
    assert sorted(reopened.purge_tags(["project-a"])) == ["large", "small"]
    assert len(reopened) == 1
    reopened.close()


def test_bounded_by_size_limit_and_index_follows_eviction(tmp_path: Path) -> None:
    limit = 2 * MB
    tier = DiskTier(tmp_path / "cache", size_limit=limit)
    body = b"b" * (100 * 1024)
    for index in range(60):
        put(tier, f"asset:{index}", body, "all-assets")
        assert tier.volume() <= limit + len(body) + 256 * 1024
    assert len(tier) < 60
    assert tier.get("asset:59", load_limit=MB) is not None
    assert tier.get("asset:0", load_limit=MB) is None
    remaining = {f"asset:{i}" for i in range(60) if tier.get(f"asset:{i}", load_limit=0)}
    assert set(tier.keys_for_tags(["all-assets"])) == remaining
    tier.close()


@pytest.mark.parametrize("streamed", [False, True], ids=["bytes", "stream"])
def test_a_put_over_the_limit_evicts_only_the_oldest_entries_it_needs_to(tmp_path: Path, streamed: bool) -> None:
    """Where the limit holds only a few entries (a small volume, or a limit a full filesystem lowered), a put
    past it evicts the oldest entries until the new one fits, not ten at a time: the tier keeps what fits, and
    never drops the entry just written."""
    body = b"x" * 400_000
    tier = DiskTier(tmp_path / "cache", size_limit=1_900_000)  # four such bodies beside SQLite's pages
    try:
        for index in range(12):
            key = f"asset:{index}"
            if streamed:
                tier.put(key, io.BytesIO(body), content_type="image/png", etag=strong_etag(key), tags=())
            else:
                put(tier, key, body)
            held = [i for i in range(index + 1) if tier.get(f"asset:{i}", load_limit=0) is not None]
            assert held == list(range(max(0, index - 3), index + 1)), index  # the newest four, the last put's too
            assert tier.volume() < tier.size_limit
    finally:
        tier.close()


def test_a_streamed_put_over_the_limit_of_a_tier_of_small_entries_keeps_them_and_itself(tmp_path: Path) -> None:
    """Small bodies live in SQLite's rows, whose pages are given back only when the cull's transaction commits:
    the cull after a streamed put must not take every small entry (and then the new one) for want of seeing
    the space they free within its transaction."""
    tier = DiskTier(tmp_path / "cache", size_limit=2_000_000)
    try:
        small = 0
        while tier.volume() < 1_900_000:
            put(tier, f"small:{small}", b"s" * 2000)
            small += 1
        tier.put("large", io.BytesIO(b"l" * 200_000), content_type="image/png", etag='"l"', tags=())
        assert tier.get("large", load_limit=0) is not None
        held = sum(tier.get(f"small:{i}", load_limit=0) is not None for i in range(small))
        assert held >= small * 3 // 4, (held, small)
        assert tier.volume() < tier.size_limit
    finally:
        tier.close()


def test_a_batch_over_the_limit_evicts_only_the_oldest_entries_it_needs_to(tmp_path: Path) -> None:
    body = b"x" * 400_000
    tier = DiskTier(tmp_path / "cache", size_limit=1_900_000)
    try:
        for index in range(0, 12, 2):  # two fills to a batch, sharing a segment file
            tier.put_many([entry(f"asset:{index + i}", body, stored_at=index + i) for i in range(2)])
            held = [i for i in range(index + 2) if tier.get(f"asset:{i}", load_limit=0) is not None]
            assert held == list(range(max(0, index - 2), index + 2)), index
    finally:
        tier.close()


def test_clear(disk: DiskTier) -> None:
    put(disk, "a", b"1", "t")
    put(disk, "b", b"2" * 50_000, "t")
    assert disk.clear() == 2
    assert len(disk) == 0 and disk.keys_for_tags(["t"]) == []


def streamed_peak(directory: Path, source: Path) -> tuple[int, int, int, str, int]:
    """(bytes written, size read back, largest chunk, its SHA-256, traced peak) of `source` put into a disk
    tier at `directory` as a stream and read back in chunks, in this process."""
    disk = DiskTier(directory, size_limit=64 * MB)
    tracemalloc.start()
    try:
        with source.open("rb") as fh:
            written = disk.put("video:1", fh, content_type="video/mp4", etag='"v1"', tags=("format-mp4",))
        obj = disk.get("video:1", load_limit=MB)
        assert obj is not None and obj.body is None and obj.path is not None
        digest = hashlib.sha256()
        largest_chunk = 0
        for chunk in obj.iter_chunks():
            largest_chunk = max(largest_chunk, len(chunk))
            digest.update(chunk)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        disk.close()
    return written, obj.size, largest_chunk, digest.hexdigest(), peak


def test_large_entry_streams_without_loading_it_whole(tmp_path: Path) -> None:
    size = 5 * MB
    source = tmp_path / "source.bin"
    source.write_bytes(os.urandom(size))
    expected = hashlib.sha256(source.read_bytes()).hexdigest()
    # In a process of its own: tracemalloc counts every thread's allocations, and a test process may still
    # run another test's writer thread.
    script = ("import sys; from pathlib import Path; from tests.edge.cache.test_disk import streamed_peak; "
              "print(*streamed_peak(Path(sys.argv[1]), Path(sys.argv[2])))")
    out = subprocess.run([sys.executable, "-c", script, str(tmp_path / "cache"), str(source)],
                         capture_output=True, text=True, check=True, timeout=120,
                         cwd=Path(__file__).parents[3]).stdout.split()
    written, stored, largest_chunk, digest, peak = int(out[0]), int(out[1]), int(out[2]), out[3], int(out[4])

    assert written == size and stored == size
    assert digest == expected
    assert largest_chunk <= STREAM_CHUNK
    assert peak < 2 * STREAM_CHUNK + 512 * 1024  # never near the 5 MB body
    disk = DiskTier(tmp_path / "cache", size_limit=64 * MB)
    try:
        obj = disk.get("video:1", load_limit=MB)
        assert obj is not None
        with obj.open() as fh:  # what sendfile would use
            assert os.fstat(fh.fileno()).st_size == size
    finally:
        disk.close()


def test_open_descriptor_outlives_a_purge(disk: DiskTier) -> None:
    put(disk, "big", b"z" * (2 * MB), "t")
    obj = disk.get("big", load_limit=0)
    assert obj is not None
    with obj.open() as fh:
        disk.purge_tags(["t"])
        assert len(fh.read()) == 2 * MB
    with pytest.raises(FileNotFoundError):
        obj.open()


@pytest.mark.parametrize("size", [1000, 200_000])  # inline in SQLite, and a body file
def test_range_reads(disk: DiskTier, size: int) -> None:
    body = bytes(range(256)) * (size // 256 + 1)
    body = body[:size]
    put(disk, "k", body)
    assert disk.read_range("k", 0, 10) == body[0:10]
    assert disk.read_range("k", 100, 612) == body[100:612]
    assert disk.read_range("k", size - 5, size + 100) == body[-5:]  # clamped to the size
    assert disk.read_range("k", size + 10, size + 20) == b""
    assert disk.read_range("missing", 0, 10) is None
    obj = disk.get("k", load_limit=0 if size > 100_000 else MB)
    assert obj is not None
    assert obj.read_range(100, 612) == body[100:612]
    assert b"".join(obj.iter_chunks(7, 5000, chunk_size=1000)) == body[7:5000]


def test_stream_put_of_small_body(disk: DiskTier) -> None:
    assert (
        disk.put("k", io.BytesIO(b"tiny"), content_type="text/plain", etag='"t"', tags=("t",)) == 4
    )
    obj = disk.get("k", load_limit=MB)
    assert obj is not None and obj.body == b"tiny"


def test_sqlite_memory_per_connection_is_bounded_also_in_a_directory_made_with_diskcaches_defaults(
        tmp_path: Path) -> None:
    """diskcache applies the `sqlite_*` settings it stores in the directory to every connection it opens (one
    per thread); its defaults would let each hold a 32 MB page cache and map 64 MB of the database."""
    diskcache.Cache(str(tmp_path / "cache")).close()
    tier = DiskTier(tmp_path / "cache", size_limit=64 * MB)
    put(tier, "asset:1", b"x")
    tier.close()
    with sqlite3.connect(tmp_path / "cache" / "cache.db") as con:
        settings = dict(con.execute("SELECT key, value FROM Settings WHERE key LIKE 'sqlite_%'").fetchall())
        page_size = con.execute("PRAGMA page_size").fetchone()[0]
    con.close()
    assert settings["sqlite_cache_size"] * page_size <= 256 * 1024
    assert settings["sqlite_mmap_size"] == 0


def test_a_large_body_is_returned_as_its_path_without_opening_its_file(disk: DiskTier,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    body = os.urandom(MB)
    put(disk, "large", body)
    opened: list[object] = []
    real_open = open

    def counting_open(file: object, *args: object, **kwargs: object) -> object:
        opened.append(file)
        return real_open(file, *args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr("builtins.open", counting_open)
    obj = disk.get("large", load_limit=64 * 1024)
    assert obj is not None and obj.body is None and obj.path is not None
    assert obj.size == len(body)          # the row's size
    assert opened == []
    monkeypatch.undo()
    assert obj.read_range(0, len(body)) == body


# The tag index's triggers of earlier versions, which found a row's entries by key through a second index.
BY_KEY_SCHEMA = (
    "CREATE INDEX IF NOT EXISTS EdgeTag_key ON EdgeTag (key)",
    "CREATE TRIGGER IF NOT EXISTS EdgeTag_update AFTER UPDATE OF tag ON Cache FOR EACH ROW BEGIN"
    " DELETE FROM EdgeTag WHERE key = OLD.key; INSERT OR IGNORE INTO EdgeTag (tag, key)"
    " SELECT value, NEW.key FROM json_each(CASE WHEN json_valid(NEW.tag) THEN NEW.tag ELSE '{}' END, '$.tags'); END",
    "CREATE TRIGGER IF NOT EXISTS EdgeTag_delete AFTER DELETE ON Cache FOR EACH ROW BEGIN"
    " DELETE FROM EdgeTag WHERE key = OLD.key; END",
)


def test_a_cache_of_an_earlier_version_keeps_its_tags_and_loses_the_index_by_key(tmp_path: Path) -> None:
    directory = tmp_path / "cache"
    first = DiskTier(directory, size_limit=64 * MB)
    put(first, "kept", b"k", "project-a", "all")
    put(first, "gone", b"g" * 50_000, "project-b", "all")
    first.close()
    with sqlite3.connect(directory / "cache.db") as con:  # as an earlier version left it
        for statement in BY_KEY_SCHEMA:
            con.execute(statement)
    reopened = DiskTier(directory, size_limit=64 * MB)
    with sqlite3.connect(directory / "cache.db") as con:
        schema = {name for (name,) in con.execute("SELECT name FROM sqlite_master WHERE name LIKE 'EdgeTag%'")}
    assert schema == {"EdgeTag", "EdgeTag_insert", "EdgeTag_update_by_tag", "EdgeTag_delete_by_tag"}
    put(reopened, "kept", b"k2", "project-c")  # overwritten: its old tags no longer name it
    assert reopened.purge_tags(["project-b"]) == ["gone"]
    assert reopened.keys_for_tags(["project-a", "all"]) == [] and reopened.keys_for_tags(["project-c"]) == ["kept"]
    reopened.close()


def test_body_files_sit_one_directory_deep_and_files_of_the_deeper_layout_still_serve(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    directory = tmp_path / "cache"
    large = b"L" * 100_000
    with monkeypatch.context() as earlier:  # diskcache's own layout, as earlier versions wrote files
        earlier.setattr(_CleanDisk, "filename", diskcache.Disk.filename)
        first = DiskTier(directory, size_limit=64 * MB)
        for index in range(3):
            put(first, f"old:{index}", large, "old")
        first.close()
    tier = DiskTier(directory, size_limit=64 * MB)
    for index in range(20):
        put(tier, f"new:{index}", large, "new")
    depths = sorted({len(path.relative_to(directory).parts) for path in directory.rglob("*.val")})
    assert depths == [2, 3]  # the new files one directory deep, the earlier ones two
    old = tier.get("old:1", load_limit=0)
    assert old is not None and old.path is not None and Path(old.path).read_bytes() == large
    assert sorted(tier.purge_tags(["old"])) == ["old:0", "old:1", "old:2"]
    assert [len(path.relative_to(directory).parts) for path in directory.rglob("*.val")] == [2] * 20
    assert sorted(tier.purge_tags(["new"])) == sorted(f"new:{index}" for index in range(20))
    assert list(directory.rglob("*.val")) == []
    tier.close()


def entry(key: str, body: bytes, *tags: str, stored_at: float = 1.0) -> CachedObject:
    return CachedObject(key=key, content_type="image/png", etag=strong_etag(key), tags=tags, size=len(body),
                        stored_at=stored_at, body=body, headers=(("x-zone", "a"),))


def body_files(tier: DiskTier) -> set[Path]:
    return {path for path in tier.directory.rglob("*.val")}


def segment_files(tier: DiskTier) -> set[Path]:
    return {path for path in tier.directory.rglob("*.seg")}


def test_a_batch_is_stored_as_single_puts_are(disk: DiskTier) -> None:
    put(disk, "replaced", b"f" * 100_000, "old-tag")  # a body file, which the batch's row replaces
    put(disk, "kept", b"k", "kept-tag")
    old_files = body_files(disk)
    later = time.time() + 5.0  # stored after the puts (a batch never writes over a newer response)
    disk.put_many([entry("replaced", b"small now", "new-tag", stored_at=later), entry("new", b"n" * 40_000, "new-tag"),
                   entry("inline", b"i", "inline-tag"), entry("inline", b"second", "inline-tag", stored_at=7.0)])
    replaced = disk.get("replaced", load_limit=MB)
    assert replaced is not None and replaced.body == b"small now" and replaced.stored_at == later
    assert replaced.tags == ("new-tag",) and replaced.headers == (("x-zone", "a"),)
    inline = disk.get("inline", load_limit=MB)
    assert inline is not None and (inline.body, inline.stored_at) == (b"second", 7.0)  # a key's last entry
    new = disk.get("new", load_limit=MB)
    assert new is not None and new.body == b"n" * 40_000
    assert not old_files & body_files(disk)  # the replaced body's file is gone
    assert len(body_files(disk)) == 1 and len(disk) == 4
    assert disk.volume() >= 40_000 and disk.volume() < 100_000 + 40_000
    assert disk.keys_for_tags(["old-tag"]) == []
    assert sorted(disk.keys_for_tags(["new-tag"])) == ["new", "replaced"]
    assert disk.keys_for_tags(["inline-tag", "kept-tag"]) in (["inline", "kept"], ["kept", "inline"])


def test_batches_stay_within_the_size_limit_and_the_index_follows_eviction(tmp_path: Path) -> None:
    limit = 2 * MB
    tier = DiskTier(tmp_path / "cache", size_limit=limit)
    body = b"b" * (100 * 1024)
    for batch in range(12):
        tier.put_many([entry(f"asset:{batch * 5 + i}", body, "all-assets", stored_at=batch * 5 + i)
                       for i in range(5)])
        assert tier.volume() <= limit + 5 * len(body) + 256 * 1024
    assert len(tier) < 60
    assert tier.get("asset:59", load_limit=MB) is not None
    assert tier.get("asset:0", load_limit=MB) is None
    remaining = {f"asset:{i}" for i in range(60) if tier.get(f"asset:{i}", load_limit=0)}
    assert set(tier.keys_for_tags(["all-assets"])) == remaining
    # Each batch's bodies share a segment, which went with the last of its entries evicted.
    assert body_files(tier) == set()
    assert len(segment_files(tier)) == len({int(key.split(":")[1]) // 5 for key in remaining})
    tier.close()


def test_a_batch_that_evicts_inline_entries_and_files_removes_the_files(tmp_path: Path) -> None:
    """Eviction by a batch culls the oldest rows, with a body inline (no file) or in a file, as single puts
    would: each culled file goes, and the batch just written stays (the tier is not emptied)."""
    limit = 1 * MB
    tier = DiskTier(tmp_path / "cache", size_limit=limit)
    small, large = b"s" * 1024, b"l" * (100 * 1024)
    for batch in range(8):
        tier.put_many([entry(f"asset:{batch}:{i}", small if i % 2 else large, "all", stored_at=batch * 10 + i)
                       for i in range(6)])
        assert all(tier.get(f"asset:{batch}:{i}", load_limit=0) is not None for i in range(6)), batch
    remaining = {key for batch in range(8) for i in range(6)
                 if tier.get(key := f"asset:{batch}:{i}", load_limit=0) is not None}
    assert len(remaining) < 48 and "asset:7:5" in remaining and "asset:0:1" not in remaining
    # Each batch's three large bodies share a segment, kept while one of them is.
    assert body_files(tier) == set()
    assert len(segment_files(tier)) == len({key.split(":")[1] for key in remaining
                                            if int(key.rsplit(":", 1)[1]) % 2 == 0})
    tier.close()


def test_a_body_file_holds_the_body_exactly_from_a_put_and_from_a_batch(disk: DiskTier) -> None:
    body = b"\n".join(os.urandom(200) for _ in range(300))  # many lines: written whole, not line by line
    put(disk, "single", body)
    disk.put_many([entry("batched", body)])
    for key in ("single", "batched"):
        stored = disk.get(key, load_limit=1024)
        assert stored is not None and stored.path is not None and stored.size == len(body)
        assert Path(stored.path).read_bytes() == body


def refuse_rows(tier: DiskTier, key: str) -> None:
    """The database refuses any new row under `key` (as a corrupt or constrained database would): an error that
    is not an OSError, raised after the body file is written."""
    tier._sql().execute(f"CREATE TRIGGER refuse BEFORE INSERT ON Cache WHEN NEW.key = '{key}'"
                        " BEGIN SELECT RAISE(ABORT, 'refused'); END")


def test_a_batch_the_database_refuses_leaves_no_body_file(disk: DiskTier) -> None:
    refuse_rows(disk, "refused")
    with pytest.raises(sqlite3.DatabaseError, match="refused"):
        disk.put_many([entry("first", b"f" * 40_000), entry("refused", b"r" * 40_000)])
    assert len(disk) == 0 and body_files(disk) == set() and disk.get("first", load_limit=MB) is None


def test_a_single_write_of_a_failed_batch_that_the_database_refuses_leaves_no_body_file(disk: DiskTier) -> None:
    """The batch fails (an I/O error), so each entry is written on its own; the database refuses one of those:
    its body file goes, and the entry written before it stays."""
    refuse_rows(disk, "refused")
    write_segments = disk._write_segments

    def failing(bodies: Sequence[tuple[str, bytes]], written: list[str]) -> dict[str, str]:
        disk._write_segments = write_segments  # type: ignore[method-assign]
        raise OSError(errno.EIO, "I/O error")

    disk._write_segments = failing  # type: ignore[method-assign]
    with pytest.raises(sqlite3.DatabaseError, match="refused"):
        disk.put_many([entry("first", b"f" * 40_000), entry("refused", b"r" * 40_000)])
    stored = disk.get("first", load_limit=0)
    assert stored is not None and stored.path is not None
    assert body_files(disk) == {Path(stored.path)} and len(disk) == 1


def test_a_batch_writes_its_rows_in_a_few_statements_not_one_per_row(disk: DiskTier) -> None:
    """sqlite3 lets go of the GIL around each statement it steps, and a writer thread waits to get it back from a
    busy event loop each time: a batch's rows go ROWS_PER_UPSERT to a statement, and all of them are stored."""
    count = 2 * ROWS_PER_UPSERT + 7
    statements: list[str] = []
    connection: sqlite3.Connection = disk._cache._con  # this thread's, the one put_many writes with
    connection.set_trace_callback(statements.append)
    try:
        disk.put_many([entry(f"pull:{i}", b"%d" % i, f"/p/{i}", stored_at=float(i)) for i in range(count)])
    finally:
        connection.set_trace_callback(None)
    # Each statement as run, with its values (repeated once per trigger it fires): three distinct ones.
    assert len({statement for statement in statements if statement.lstrip().startswith("INSERT INTO Cache")}) == 3
    assert len(disk) == count
    for i in (0, ROWS_PER_UPSERT - 1, ROWS_PER_UPSERT, count - 1):
        stored = disk.get(f"pull:{i}", load_limit=MB)
        assert stored is not None and stored.body == b"%d" % i and stored.stored_at == float(i)
        assert stored.tags == (f"/p/{i}",) and stored.headers == (("x-zone", "a"),)
    assert disk.keys_for_tags([f"/p/{count - 1}"]) == [f"pull:{count - 1}"]


def test_every_connection_keeps_statement_journals_in_memory_and_checkpoints_late(tmp_path: Path) -> None:
    """The writer's batches change pages all over the key index: their statement journals stay in memory (no write
    system call per page to a temporary file) and the write-ahead log takes SQLITE_WAL_PAGES before a checkpoint,
    on every thread's connection (diskcache opens one per thread) and after a reopen."""
    from concurrent.futures import ThreadPoolExecutor

    from assetcdn.edge.cache.sqlite_conn import SQLITE_WAL_PAGES

    def pragmas(tier: DiskTier) -> tuple[int, int]:
        sql = tier._cache._sql
        ours = tier._sql()  # the tag index's and the purge log's connection to the same file
        found = {(sql("PRAGMA temp_store").fetchone()[0], sql("PRAGMA wal_autocheckpoint").fetchone()[0]),
                 (ours.execute("PRAGMA temp_store").fetchone()[0],
                  ours.execute("PRAGMA wal_autocheckpoint").fetchone()[0])}
        assert len(found) == 1
        return found.pop()

    tier = DiskTier(tmp_path / "cache", size_limit=64 * MB)
    try:
        with ThreadPoolExecutor(1) as pool:
            assert pool.submit(pragmas, tier).result() == (2, SQLITE_WAL_PAGES)
        assert pragmas(tier) == (2, SQLITE_WAL_PAGES)
    finally:
        tier.close()
    with sqlite3.connect(tmp_path / "cache" / "cache.db") as con:  # an earlier version's database keeps its own
        con.execute("UPDATE Settings SET value = 1000 WHERE key = 'sqlite_wal_autocheckpoint'")
    again = DiskTier(tmp_path / "cache", size_limit=64 * MB)
    try:
        assert pragmas(again) == (2, SQLITE_WAL_PAGES)
    finally:
        again.close()


def test_a_batch_never_writes_a_response_older_than_the_one_held_under_its_key(disk: DiskTier) -> None:
    """Another worker stored a newer response under the key after this one queued its older one (the other's
    notice not yet published here): the batch keeps the newer row and its body file, and writes the rest."""
    newer, older = b"n" * 100_000, b"o" * 100_000  # bodies in files: the newer one's file must stay
    disk.put_many([entry("shared", newer, stored_at=20.0)])
    disk.put_many([entry("shared", older, stored_at=10.0), entry("other", b"x" * 50_000, stored_at=10.0)])
    kept = disk.get("shared", load_limit=MB)
    assert kept is not None and (kept.body, kept.stored_at) == (newer, 20.0)
    assert disk.get("other", load_limit=MB) is not None
    opened = disk.get("shared", load_limit=0)
    assert opened is not None and opened.path is not None
    with open(opened.path, "rb") as file:
        assert file.read() == newer
    disk.put_many([entry("shared", b"z" * 100_000, stored_at=30.0)])  # a newer one still replaces it
    replaced = disk.get("shared", load_limit=MB)
    assert replaced is not None and replaced.stored_at == 30.0
