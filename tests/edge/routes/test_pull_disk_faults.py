"""A pull zone whose edge's cache directory goes bad between restarts: what a client gets is the origin's answer,
never a body cut short."""

from __future__ import annotations

import errno
import logging
import os
import sqlite3
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

import pytest
from aiohttp import ClientPayloadError, ClientTimeout, web

import assetcdn.control.app  # noqa: F401
import assetcdn.edge.app  # noqa: F401
from assetcdn.edge.app_keys import NODE
from assetcdn.edge.cache.disk import DiskTier
from assetcdn.edge.cache.entry import CachedObject
from tests.support.edge_cache import FailingRead
from tests.support.origins import ScriptedOrigin
from tests.support.restartable import ZONE, Worker, healthy, restartable_pull
from tests.support.wait import wait_until

MEMORY_MAX_OBJECT = 1024 * 1024  # edge.memory_object_max_kb's default: larger bodies are kept on disk only


@pytest.fixture
async def restartable(aiohttp_server, aiohttp_client, tmp_path: Path):  # type: ignore[no-untyped-def]
    """Control with a pull zone from a scripted origin, the edge's disk tier directory, and a way to start the
    edge's worker (again) on it."""
    async with restartable_pull(aiohttp_server, aiohttp_client, tmp_path) as (_control, origin, worker):
        yield tmp_path / "edge" / "cache", origin, worker


def body_files(cache_dir: Path) -> list[Path]:
    """The body files the disk tier's rows name (bodies past the size SQLite keeps in a row)."""
    con = sqlite3.connect(cache_dir / "cache.db")
    try:
        return [cache_dir / name for (name,) in con.execute("SELECT filename FROM Cache WHERE filename IS NOT NULL")]
    finally:
        con.close()


async def stored(cache_dir: Path) -> None:
    """Wait for the disk tier to hold a body file: a streamed body is stored after its last byte is sent."""
    async def written() -> bool:
        return bool(body_files(cache_dir))

    await wait_until(written, "the body was stored")


# A body the memory tier takes (read whole from its file) and one kept on disk only (streamed from its file).
@pytest.mark.parametrize("size", [100 * 1024, 2 * 1024 * 1024])
async def test_a_body_file_cut_short_while_the_edge_was_down_is_asked_of_the_origin_not_served_short(
        restartable: tuple[Path, ScriptedOrigin, Worker], size: int) -> None:
    cache_dir, origin, worker = restartable
    body = bytes(range(256)) * (size // 256)
    origin.answer("/f.bin", body, headers={"Cache-Control": "max-age=600"})
    first = await worker()
    await healthy(first)
    resp = await first.get(f"/{ZONE}/f.bin")
    assert await resp.read() == body
    if size > MEMORY_MAX_OBJECT:  # streamed into the disk tier once sent: a stop meanwhile would not store it
        await stored(cache_dir)
    await first.close()  # a graceful stop: the entry stays in the disk tier (a memory-only one is written now)
    await stored(cache_dir)
    (path,) = body_files(cache_dir)
    os.truncate(path, size // 2)  # a bad disk lost its second half

    again = await worker()
    asked = len(origin.requests("/f.bin"))
    resp = await again.get(f"/{ZONE}/f.bin", timeout=ClientTimeout(total=60))
    assert resp.status == 200
    assert await resp.read() == body
    assert resp.headers["Content-Length"] == str(size) and resp.headers["X-Cache"] == "MISS"
    assert len(origin.requests("/f.bin")) == asked + 1
    resp = await again.get(f"/{ZONE}/f.bin", timeout=ClientTimeout(total=60))  # stored whole again
    assert await resp.read() == body and resp.headers["X-Cache"] == "HIT"
    assert len(origin.requests("/f.bin")) == asked + 1


def overwritten(database: Path) -> None:
    """Not a database any more: its header overwritten."""
    with open(database, "r+b") as file:
        file.write(b"\xa5" * 4096)


def cut_short(database: Path) -> None:
    """Its first page kept, the pages it names gone: a malformed database."""
    os.truncate(database, 4096)


@pytest.mark.parametrize("damage", [overwritten, cut_short])
async def test_a_worker_starts_on_a_database_damaged_while_the_edge_was_down_and_caches_again(
        restartable: tuple[Path, ScriptedOrigin, Worker], damage: Callable[[Path], None]) -> None:
    cache_dir, origin, worker = restartable
    small, large = b"logo", bytes(range(256)) * 1024
    origin.answer("/logo.txt", small, headers={"Cache-Control": "max-age=600"})
    origin.answer("/big.bin", large, headers={"Cache-Control": "max-age=600"})
    first = await worker()
    await healthy(first)
    for name, body in (("/logo.txt", small), ("/big.bin", large)):
        resp = await first.get(f"/{ZONE}{name}")
        assert await resp.read() == body
    await first.close()
    await stored(cache_dir)
    with sqlite3.connect(cache_dir / "cache.db") as con:  # the write-ahead log's pages into the file, the log gone
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()
    old_files = list(cache_dir.glob("*/*.val"))
    assert old_files
    damage(cache_dir / "cache.db")

    again = await worker()
    await healthy(again)
    for name, body in (("/logo.txt", small), ("/big.bin", large)):
        asked = len(origin.requests(name))
        resp = await again.get(f"/{ZONE}{name}")
        assert resp.status == 200 and await resp.read() == body
        assert len(origin.requests(name)) == asked + 1  # from the origin: nothing of the damaged cache was kept
        resp = await again.get(f"/{ZONE}{name}")
        assert await resp.read() == body and resp.headers["X-Cache"] == "HIT"
    await again.close()
    assert not any(path.exists() for path in old_files)  # the old body files went with the database


DISK_ERRORS = [sqlite3.DatabaseError("database disk image is malformed"), OSError(errno.EIO, "Input/output error")]


@pytest.mark.parametrize("error", DISK_ERRORS, ids=["database", "disk"])
async def test_each_answer_on_a_connection_is_its_own_url_when_the_disk_tier_cannot_store_a_streamed_body(
        restartable: tuple[Path, ScriptedOrigin, Worker], monkeypatch: pytest.MonkeyPatch, error: Exception) -> None:
    _, origin, worker = restartable
    large = bytes(range(256)) * (MEMORY_MAX_OBJECT // 128)  # stored streamed, after it is sent
    origin.answer("/logo.txt", b"logo", headers={"Cache-Control": "max-age=600"})
    origin.answer("/big.bin", large, headers={"Cache-Control": "max-age=600"})
    client = await worker()
    await healthy(client)
    assert client.app is not None
    disk = client.app[NODE].cache.disk

    def failing(*args: object, **kwargs: object) -> None:
        raise error

    monkeypatch.setattr(disk, "put", failing)
    monkeypatch.setattr(disk, "put_many", failing)
    for _ in range(2):  # one connection, kept alive: each answer is read as the next request's
        for name, body in (("/big.bin", large), ("/logo.txt", b"logo")):
            resp = await client.get(f"/{ZONE}{name}")
            assert resp.status == 200 and await resp.read() == body, name


@pytest.mark.parametrize("error", DISK_ERRORS, ids=["database", "disk"])
async def test_a_read_of_the_disk_tier_that_fails_is_answered_from_the_origin(
        restartable: tuple[Path, ScriptedOrigin, Worker], monkeypatch: pytest.MonkeyPatch, error: Exception) -> None:
    _, origin, worker = restartable
    origin.answer("/logo.txt", b"logo", headers={"Cache-Control": "max-age=600"})
    client = await worker()
    await healthy(client)
    resp = await client.get(f"/{ZONE}/logo.txt")
    assert await resp.read() == b"logo"
    assert client.app is not None
    cache = client.app[NODE].cache
    cache.flush_writes()
    cache.memory.clear()  # the next request reads the disk tier

    def failing(*args: object, **kwargs: object) -> None:
        raise error

    monkeypatch.setattr(cache.disk, "get", failing)
    asked = len(origin.requests("/logo.txt"))
    resp = await client.get(f"/{ZONE}/logo.txt")
    assert resp.status == 200 and await resp.read() == b"logo" and resp.headers["X-Cache"] == "MISS"
    assert len(origin.requests("/logo.txt")) == asked + 1


@pytest.mark.parametrize("error", DISK_ERRORS, ids=["database", "disk"])
async def test_a_revalidation_answered_with_what_may_not_be_kept_is_the_clients_answer_when_the_copy_cannot_go(
        restartable: tuple[Path, ScriptedOrigin, Worker], monkeypatch: pytest.MonkeyPatch, error: Exception) -> None:
    """A stale copy's revalidation is answered with a full response the edge may not keep (`private`): the copy is
    dropped (it is not the origin's current response), but the disk tier fails the delete. The client got 500 for
    the edge's own failure; it gets the origin's answer, and the copy leaves this worker's memory tier at least."""
    _, origin, worker = restartable
    origin.answer("/replaced.txt", b"old", headers={"Cache-Control": "max-age=0", "ETag": '"v1"'})
    client = await worker()
    await healthy(client)
    assert (await client.get(f"/{ZONE}/replaced.txt")).headers["X-Cache"] == "MISS"
    assert client.app is not None
    cache = client.app[NODE].cache
    cache.flush_writes()

    def failing(*args: object, **kwargs: object) -> None:
        raise error

    monkeypatch.setattr(cache.disk, "delete_many", failing)
    origin.answer("/replaced.txt", b"yours", headers={"Cache-Control": "private", "ETag": '"v2"'})
    resp = await client.get(f"/{ZONE}/replaced.txt")
    assert (resp.status, await resp.read(), resp.headers["X-Cache"]) == (200, b"yours", "PASS")
    assert len(origin.requests("/replaced.txt")) == 2


async def test_a_body_file_that_fails_while_it_is_sent_cuts_the_connection_never_ends_the_answer_with_another(
        restartable: tuple[Path, ScriptedOrigin, Worker], monkeypatch: pytest.MonkeyPatch) -> None:
    cache_dir, origin, worker = restartable
    large = bytes(range(256)) * (2 * MEMORY_MAX_OBJECT // 256)
    origin.answer("/big.bin", large, headers={"Cache-Control": "max-age=600"})
    origin.answer("/logo.txt", b"logo", headers={"Cache-Control": "max-age=600"})
    client = await worker()
    await healthy(client)
    resp = await client.get(f"/{ZONE}/big.bin")
    assert await resp.read() == large
    await stored(cache_dir)
    opened = CachedObject.open
    monkeypatch.setattr(CachedObject, "open", lambda obj: FailingRead(opened(obj)))

    resp = await client.get(f"/{ZONE}/big.bin", timeout=ClientTimeout(total=60))
    assert resp.status == 200 and resp.headers["X-Cache"] == "HIT"
    with pytest.raises(ClientPayloadError):  # cut short, and seen to be
        await resp.read()
    monkeypatch.setattr(CachedObject, "open", opened)
    resp = await client.get(f"/{ZONE}/logo.txt")
    assert resp.status == 200 and await resp.read() == b"logo"


@pytest.mark.parametrize("error", [PermissionError(errno.EACCES, "Permission denied"),
                                   OSError(errno.EIO, "Input/output error")], ids=["permissions", "disk"])
async def test_a_body_file_kept_on_disk_only_that_cannot_be_opened_is_answered_from_the_origin(
        restartable: tuple[Path, ScriptedOrigin, Worker], monkeypatch: pytest.MonkeyPatch, error: OSError) -> None:
    cache_dir, origin, worker = restartable
    large = bytes(range(256)) * (2 * MEMORY_MAX_OBJECT // 256)
    origin.answer("/big.bin", large, headers={"Cache-Control": "max-age=600"})
    client = await worker()
    await healthy(client)
    resp = await client.get(f"/{ZONE}/big.bin")
    assert await resp.read() == large
    await stored(cache_dir)

    def failing(obj: CachedObject) -> BinaryIO:
        raise error

    monkeypatch.setattr(CachedObject, "open", failing)  # the cache directory's permissions taken away, or a bad disk
    asked = len(origin.requests("/big.bin"))
    resp = await client.get(f"/{ZONE}/big.bin")
    assert resp.status == 200 and await resp.read() == large and resp.headers["X-Cache"] == "MISS"
    assert len(origin.requests("/big.bin")) == asked + 1


class FullTemporaryDisk(tempfile.SpooledTemporaryFile):  # type: ignore[type-arg]
    """A spool whose temporary file finds its disk full (the system's temporary directory)."""

    def rollover(self) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")


async def test_a_body_whose_temporary_file_finds_the_disk_full_is_sent_whole_and_not_cached(
        restartable: tuple[Path, ScriptedOrigin, Worker], monkeypatch: pytest.MonkeyPatch) -> None:
    _, origin, worker = restartable
    large = bytes(range(256)) * (2 * MEMORY_MAX_OBJECT // 256)  # past what a spool holds in memory
    origin.answer("/big.bin", large, headers={"Cache-Control": "max-age=600"})
    client = await worker()
    await healthy(client)
    monkeypatch.setattr(tempfile, "SpooledTemporaryFile", FullTemporaryDisk)  # what a fill holds a body in
    for asked in (1, 2):
        resp = await client.get(f"/{ZONE}/big.bin", timeout=ClientTimeout(total=60))
        assert resp.status == 200 and await resp.read() == large
        assert len(origin.requests("/big.bin")) == asked  # not cached: asked again


async def test_a_background_revalidation_whose_temporary_file_finds_the_disk_full_drops_the_replaced_copy(
        restartable: tuple[Path, ScriptedOrigin, Worker], monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """stale-while-revalidate's revalidation is answered whole with a new body past what a spool holds in memory,
    and its temporary file finds the disk full: the revalidation task failed with the OSError (the asyncio error
    "Task exception was never retrieved", with a traceback, for every revalidation), and the replaced copy stayed,
    answered STALE to every request until stale-while-revalidate ran out, each sending the origin another
    revalidation. The copy goes, as when the new body may not be kept, and the next request gets the new body."""
    _, origin, worker = restartable
    large = bytes(range(256)) * (2 * MEMORY_MAX_OBJECT // 256)  # past what a spool holds in memory
    bodies = iter((b"old body",))

    async def answer(_request: web.Request) -> web.StreamResponse:
        return web.Response(body=next(bodies, large),
                            headers={"Cache-Control": "max-age=1, stale-while-revalidate=600"})

    origin.route("/grown.bin", answer)
    client = await worker()
    await healthy(client)
    first = await client.get(f"/{ZONE}/grown.bin")
    assert (first.headers["X-Cache"], await first.read()) == ("MISS", b"old body")
    monkeypatch.setattr(tempfile, "SpooledTemporaryFile", FullTemporaryDisk)  # what a fill holds a body in

    async def stale() -> bool:
        return (await client.get(f"/{ZONE}/grown.bin")).headers["X-Cache"] == "STALE"

    await wait_until(stale, "the copy answered stale, and revalidated in the background")

    async def replaced() -> bool:
        resp = await client.get(f"/{ZONE}/grown.bin", timeout=ClientTimeout(total=60))
        return resp.headers["X-Cache"] != "STALE" and await resp.read() == large

    await wait_until(replaced, "the new body answered")
    assert not [record for record in caplog.records if record.levelno >= logging.ERROR]


async def test_health_says_the_disk_tier_fails_rather_than_failing_itself(
        restartable: tuple[Path, ScriptedOrigin, Worker], monkeypatch: pytest.MonkeyPatch) -> None:
    _, _, worker = restartable
    client = await worker()
    await healthy(client)
    assert client.app is not None

    def failing(*args: object) -> int:
        raise sqlite3.DatabaseError("database disk image is malformed")

    monkeypatch.setattr(client.app[NODE].cache.disk, "volume", failing)
    resp = await client.get("/api/health")
    assert resp.status == 503  # a load balancer sends this edge's clients elsewhere
    body = await resp.json()
    (cache,) = [check for check in body["checks"] if check["name"] == "cache"]
    assert cache["healthy"] is False and "database disk image is malformed" in cache["error"]


@pytest.mark.parametrize("meta", ['{"ct": "text/pl', "{}", "[1]"], ids=["cut", "empty", "not-an-object"])
async def test_an_entry_whose_stored_head_was_damaged_is_answered_from_the_origin(
        restartable: tuple[Path, ScriptedOrigin, Worker], meta: str) -> None:
    cache_dir, origin, worker = restartable
    origin.answer("/logo.txt", b"logo", headers={"Cache-Control": "max-age=600"})
    first = await worker()
    await healthy(first)
    resp = await first.get(f"/{ZONE}/logo.txt")
    assert await resp.read() == b"logo"
    await first.close()
    with sqlite3.connect(cache_dir / "cache.db") as con:  # a bad disk changed the bytes of the row's head
        assert con.execute("UPDATE Cache SET tag = ? WHERE raw = 1", (meta,)).rowcount == 1
    con.close()

    again = await worker()
    asked = len(origin.requests("/logo.txt"))
    resp = await again.get(f"/{ZONE}/logo.txt")
    assert resp.status == 200 and await resp.read() == b"logo"
    assert len(origin.requests("/logo.txt")) == asked + 1


async def test_a_worker_starts_on_a_full_filesystem_by_freeing_its_oldest_bodies(
        restartable: tuple[Path, ScriptedOrigin, Worker], monkeypatch: pytest.MonkeyPatch) -> None:
    cache_dir, origin, worker = restartable
    large = bytes(range(256)) * (2 * MEMORY_MAX_OBJECT // 256)
    origin.answer("/big.bin", large, headers={"Cache-Control": "max-age=600"})
    first = await worker()
    await healthy(first)
    resp = await first.get(f"/{ZONE}/big.bin")
    assert await resp.read() == large
    await stored(cache_dir)
    await first.close()
    (held,) = body_files(cache_dir)
    opened = DiskTier.__init__

    def full_filesystem(tier: DiskTier, *args: Any, **kwargs: Any) -> None:
        """SQLite opening a database on a full filesystem (no room for its shared-memory index): it fails until
        something frees room, here the body file the earlier run stored."""
        if held.exists():
            raise sqlite3.OperationalError("disk I/O error")
        opened(tier, *args, **kwargs)

    monkeypatch.setattr(DiskTier, "__init__", full_filesystem)
    again = await worker()
    await healthy(again)
    asked = len(origin.requests("/big.bin"))
    resp = await again.get(f"/{ZONE}/big.bin")
    assert resp.status == 200 and await resp.read() == large  # its body file went: asked of the origin
    assert len(origin.requests("/big.bin")) == asked + 1
    await stored(cache_dir)
    resp = await again.get(f"/{ZONE}/big.bin")
    assert await resp.read() == large and resp.headers["X-Cache"] == "HIT"  # and cached again


async def test_an_unsafe_request_gets_the_origins_answer_when_the_cache_cannot_purge_what_it_changed(
        restartable: tuple[Path, ScriptedOrigin, Worker], monkeypatch: pytest.MonkeyPatch) -> None:
    _, origin, worker = restartable
    origin.answer("/doc.txt", b"v1", headers={"Cache-Control": "max-age=600"})
    client = await worker()
    await healthy(client)
    resp = await client.get(f"/{ZONE}/doc.txt")
    assert await resp.read() == b"v1"
    assert client.app is not None
    cache = client.app[NODE].cache

    def failing(*args: object, **kwargs: object) -> None:
        raise sqlite3.DatabaseError("database disk image is malformed")

    monkeypatch.setattr(cache._purges, "record", failing)  # the damaged database refuses the purge
    monkeypatch.setattr(cache.disk, "get", failing)  # and its reads
    origin.answer("/doc.txt", b"v2", headers={"Cache-Control": "max-age=600"})
    resp = await client.post(f"/{ZONE}/doc.txt", data=b"change")
    assert resp.status == 200 and await resp.read() == b"v2"  # done at the origin: never a 500 to retry it on
    resp = await client.get(f"/{ZONE}/doc.txt")
    assert await resp.read() == b"v2"  # not this worker's copy from before the change
