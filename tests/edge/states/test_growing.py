"""A fill's body as it is read (assetcdn/edge/states/growing.py), on its own: the bytes a reader gets on either side
of what the fill holds in memory, and another worker's published fill (a killed worker's files are none, a fill
that stops growing is given up, one that ends short ends its reader short)."""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from assetcdn.edge.states.growing import (
    EndedShort,
    Growing,
    SiblingGrowing,
    shared_name,
    sweep_leftovers,
)
from assetcdn.edge.states.pull import published_head, spool_write
from tests.support.wait import wait_until

pytestmark = pytest.mark.asyncio

BODY = bytes(range(256)) * 40  # 10,240 bytes


async def read(pieces: Any) -> bytes:
    return b"".join([piece async for piece in pieces])


def fill_in(growing: Growing, spool: Any, chunks: list[bytes]) -> None:
    for chunk in chunks:
        spool.write(chunk)
        spool.flush()
        growing.add(chunk, spool)


async def test_a_reader_gets_the_bytes_it_asks_for_on_either_side_of_what_is_held_in_memory() -> None:
    """Chunks of 3,000 bytes, 4,096 held in memory (one chunk straddles it), the rest read from the spool's file."""
    growing = Growing(len(BODY), 4096)
    with tempfile.TemporaryFile() as spool:
        spool.write(b"")
        growing.begin(object(), 0, spool)
        fill_in(growing, spool, [BODY[at:at + 3000] for at in range(0, len(BODY), 3000)])
        growing.join()
        try:
            for start, end in ((0, len(BODY)), (10, 20), (2990, 3010), (4000, 4200), (5000, 9000), (6001, 6002)):
                assert await read(growing.pieces(start, end)) == BODY[start:end]
        finally:
            growing.end(True)
            growing.leave()


async def test_a_reader_waits_for_bytes_still_to_come_and_is_ended_short_with_the_fill() -> None:
    growing = Growing(len(BODY), 1 << 20)
    spool = io.BytesIO()
    growing.begin(object(), 0, spool)
    fill_in(growing, spool, [BODY[:1000]])
    growing.join()
    reading = asyncio.create_task(read(growing.pieces(0, len(BODY))))
    await asyncio.sleep(0)
    fill_in(growing, spool, [BODY[1000:2000]])
    growing.end(False)  # the origin's body failed
    with pytest.raises(EndedShort):
        await reading
    growing.leave()


class Marks:
    """A node's purges standing at `mark`, any purge since a fill's own mark taken to name it (a published head here
    names no tags)."""

    def __init__(self, mark: int) -> None:
        self.mark = mark

    def purge_mark(self) -> int:
        return self.mark

    def purged_since(self, mark: int, obj: Any) -> bool:
        return True


def published(directory: Path, key: str, pid: int, body: bytes, declared: int, mark: int = 7) -> None:
    """A fill of `key` as a worker of process `pid` publishes it (`Growing._publish`), `body` written so far."""
    name = directory / shared_name(key)
    name.with_suffix(".body").write_bytes(body)
    name.with_suffix(".head").write_bytes(orjson.dumps({
        "key": key, "pid": pid, "body": os.stat(name.with_suffix(".body")).st_ino, "selected": None, "mark": mark, "declared": declared, "url_key": "pull:u",
        "content_type": "video/mp4", "etag": '"e"', "stored_at": 1.0,
        "headers": [["content-type", "video/mp4"], [":status", "200"], [":request-time", "1.0"], [":response-time", "1.0"]]}))


def gone_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


async def test_another_workers_fill_is_read_as_it_grows_and_whole_once_its_head_is_gone(tmp_path: Path) -> None:
    published(tmp_path, "k", os.getpid(), BODY[:4000], len(BODY))
    sibling = SiblingGrowing(tmp_path, "k", lambda: True, published_head, 30.0)
    assert not sibling.joinable(Marks(8))  # a purge since the fill asked the origin
    assert sibling.joinable(Marks(7))
    assert sibling.stored.status == 200 and sibling.declared == len(BODY)
    sibling.join()
    reading = asyncio.create_task(read(sibling.pieces(0, len(BODY))))
    await asyncio.sleep(0.01)
    assert not reading.done()
    name = tmp_path / shared_name("k")
    with name.with_suffix(".body").open("ab") as body:
        body.write(BODY[4000:])
    name.with_suffix(".head").unlink()  # the fill is over: its worker removes the head after its last byte
    assert await reading == BODY
    sibling.leave()


async def test_another_workers_fill_that_ends_short_or_stops_growing_ends_its_reader_short(tmp_path: Path) -> None:
    published(tmp_path, "short", os.getpid(), BODY[:4000], len(BODY))
    filling = [True]
    sibling = SiblingGrowing(tmp_path, "short", lambda: filling[0], published_head, 30.0)
    assert sibling.joinable(Marks(7))
    sibling.join()
    reading = asyncio.create_task(read(sibling.pieces(0, len(BODY))))
    await asyncio.sleep(0.01)
    filling[0] = False  # the filling worker let go of the key's byte (it died), its head still there
    with pytest.raises(EndedShort):
        await reading
    sibling.leave()

    published(tmp_path, "stalled", os.getpid(), BODY[:4000], len(BODY))
    stalled = SiblingGrowing(tmp_path, "stalled", lambda: True, published_head, 0.05)
    assert stalled.joinable(Marks(7))
    stalled.join()
    with pytest.raises(EndedShort):
        await read(stalled.pieces(0, len(BODY)))
    stalled.leave()


async def test_files_a_killed_worker_left_are_no_fill_to_read(tmp_path: Path) -> None:
    published(tmp_path, "left", gone_pid(), BODY, len(BODY))
    assert not SiblingGrowing(tmp_path, "left", lambda: True, published_head, 30.0).joinable(Marks(7))
    published(tmp_path, "other", os.getpid(), BODY, len(BODY))
    for suffix in (".head", ".body"):  # under another key's name (a hash collision): its head names its own key
        (tmp_path / shared_name("other")).with_suffix(suffix).rename((tmp_path / shared_name("mine")).with_suffix(suffix))
    assert not SiblingGrowing(tmp_path, "mine", lambda: True, published_head, 30.0).joinable(Marks(7))


async def test_a_reader_ends_short_at_once_when_its_fill_is_removed_though_a_new_head_has_the_same_inode(
        tmp_path: Path) -> None:
    """A fill another worker published ends short (its head and body removed) and a new fill of the key is published
    at once, its head given the inode number the old head's freed (file systems hand freed numbers out again): the
    reader of the old body ends short then, not once that body has not grown for its stall time (an hour here)."""
    published(tmp_path, "again", os.getpid(), BODY[:4000], len(BODY))
    sibling = SiblingGrowing(tmp_path, "again", lambda: True, published_head, 3600.0)  # the new fill holds the byte
    assert sibling.joinable(Marks(7))
    sibling.join()
    reading = asyncio.create_task(read(sibling.pieces(0, len(BODY))))
    await asyncio.sleep(0.01)
    name = tmp_path / shared_name("again")
    name.with_suffix(".body").unlink()  # the old fill's end
    head = name.with_suffix(".head")
    with head.open("r+b") as rewritten:  # the new fill's head, under the old inode number
        rewritten.write(head.read_bytes().replace(b'"mark":7', b'"mark":8'))
    name.with_suffix(".body").write_bytes(BODY[:100])
    try:
        with pytest.raises(EndedShort):  # bounds only a reader that waits for its stall time
            await asyncio.wait_for(reading, 10)
    finally:
        reading.cancel()
        sibling.leave()


async def test_a_head_read_with_a_newer_fills_body_is_no_fill(tmp_path: Path) -> None:
    """Between a reader's look at a published head and its open of the body, that fill ended and a new one of the
    key published its body (the head's inode number, freed, given to the new head): the body is not the one the head
    describes (its length, its validators), and is not read with it."""
    published(tmp_path, "swapped", os.getpid(), BODY, len(BODY))
    body = (tmp_path / shared_name("swapped")).with_suffix(".body")
    newer = body.with_name("newer")
    newer.write_bytes(BODY[:100])
    newer.replace(body)
    assert not SiblingGrowing(tmp_path, "swapped", lambda: True, published_head, 30.0).joinable(Marks(7))


async def test_a_workers_start_sweeps_a_killed_workers_files_and_never_a_fill_under_way(tmp_path: Path) -> None:
    """At a worker's start: the files of a fill whose worker is gone go, however new (nothing else would remove them
    until the key's next fill); those of a fill under way stay, however long ago it began, as long as its body
    grows; and a stray file goes once an hour old."""
    hours_ago = time.time() - 2 * 3600
    published(tmp_path, "long", os.getpid(), BODY, len(BODY))  # began two hours ago, its last byte just now
    long_name = tmp_path / shared_name("long")
    os.utime(long_name.with_suffix(".head"), (hours_ago, hours_ago))
    published(tmp_path, "killed", gone_pid(), BODY, len(BODY))
    published(tmp_path, "stalled", os.getpid(), BODY, len(BODY))  # its worker's pid given to another process since
    stalled_name = tmp_path / shared_name("stalled")
    for suffix in (".head", ".body"):
        os.utime(stalled_name.with_suffix(suffix), (hours_ago, hours_ago))
    (tmp_path / "stray.head.1").write_bytes(b"{")
    os.utime(tmp_path / "stray.head.1", (hours_ago, hours_ago))
    (tmp_path / "staged.head.2").write_bytes(b"{")
    sweep_leftovers(tmp_path)
    assert sorted(os.listdir(tmp_path)) == sorted(
        [long_name.with_suffix(".head").name, long_name.with_suffix(".body").name, "staged.head.2"])


class Recorded(io.BufferedRandom):
    """A published fill's spool (a file of its own from its first byte), which records the threads it is written in."""

    def __init__(self, path: Path) -> None:
        super().__init__(io.FileIO(path, "w+"))
        self.threads: set[int] = set()

    def write(self, data: Any) -> int:
        self.threads.add(threading.get_ident())
        return super().write(data)


async def test_a_published_fills_first_bytes_are_written_to_its_file_off_the_event_loop(tmp_path: Path) -> None:
    """A published fill's spool is a file from its first byte (`Growing.begin`): its first MB is written from a thread,
    as the rest of a spool in a file is, never on the worker's event loop, where a slow disk would hold every other
    request of the worker."""
    with Recorded(tmp_path / "spool") as spool:
        for size in (100, 200):
            await spool_write(spool, BODY[:100], size, flush=True)
        assert threading.get_ident() not in spool.threads
        spool.seek(0)
        assert spool.read() == BODY[:100] * 2


async def test_the_requests_waiting_for_another_workers_fill_share_one_look_for_its_head(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fifty requests of a worker wait for another worker's fill of one key, which ends unpublished (a body of 1 MB
    or less is never published): they look for its head together, not each on its own every few ms (a small fill's
    waiters on an edge of several workers paid that), and each is done when the fill is. A directory the worker may
    not search is a fill not published, not the requests' failure."""
    looks = [0]
    real_stat = os.stat
    head = (tmp_path / shared_name("small")).with_suffix(".head")

    def counted(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        if os.fspath(path) == os.fspath(head):
            looks[0] += 1
        return real_stat(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", counted)
    sibling = SiblingGrowing(tmp_path, "small", lambda: True, published_head, 30.0)
    kept: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    waiting = [asyncio.create_task(sibling.begun_or(kept)) for _ in range(50)]
    await asyncio.sleep(0.05)
    assert not any(task.done() for task in waiting)
    kept.set_result(True)
    await asyncio.wait_for(asyncio.gather(*waiting), 10)
    assert 0 < looks[0] < len(waiting)

    def refused(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        raise PermissionError(13, "Permission denied", os.fspath(path))

    monkeypatch.setattr(os, "stat", refused)
    refused_dir = SiblingGrowing(tmp_path, "refused", lambda: True, published_head, 30.0)
    kept = asyncio.get_running_loop().create_future()
    waiter = asyncio.create_task(refused_dir.begun_or(kept))
    await asyncio.sleep(0.01)
    kept.set_result(True)
    await asyncio.wait_for(waiter, 10)


async def test_the_readers_of_another_workers_fill_waiting_for_its_bytes_share_one_look(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fifty readers of another worker's fill have every byte it wrote so far: they look for more together, not each
    on its own every few ms (a popular video read as it is filled: three system calls a reader every 20 ms), and each
    gets the bytes that come, then the rest once the fill is over."""
    published(tmp_path, "popular", os.getpid(), BODY[:4000], len(BODY))
    name = tmp_path / shared_name("popular")
    looks = [0]
    real_stat = os.stat

    def counted(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        if os.fspath(path) == os.fspath(name.with_suffix(".head")):
            looks[0] += 1
        return real_stat(path, *args, **kwargs)

    sibling = SiblingGrowing(tmp_path, "popular", lambda: True, published_head, 30.0)
    assert sibling.joinable(Marks(7))
    readers = []
    for _ in range(50):
        sibling.join()
        readers.append(asyncio.create_task(read(sibling.pieces(0, len(BODY)))))
    await asyncio.sleep(0.01)  # each has the 4,000 bytes there are, and waits for more
    monkeypatch.setattr(os, "stat", counted)
    await asyncio.sleep(0.05)
    assert not any(task.done() for task in readers)
    assert looks[0] < len(readers)
    with name.with_suffix(".body").open("ab") as body:
        body.write(BODY[4000:6000])
    await asyncio.sleep(0.05)
    with name.with_suffix(".body").open("ab") as body:
        body.write(BODY[6000:])
    name.with_suffix(".head").unlink()
    try:
        assert await asyncio.wait_for(asyncio.gather(*readers), 10) == [BODY] * len(readers)
    finally:
        for _ in readers:
            sibling.leave()


async def test_the_last_reader_of_another_workers_fill_closes_its_body_off_the_event_loop(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The other worker's fill is over and its body removed: the last reader of this worker to leave closes the
    body's descriptor from a thread, as that close frees the whole body's blocks (up to the object size limit), which
    on the event loop would hold every other request of the worker meanwhile."""
    published(tmp_path, "freed", os.getpid(), BODY, len(BODY))
    sibling = SiblingGrowing(tmp_path, "freed", lambda: True, published_head, 30.0)
    assert sibling.joinable(Marks(7))
    name = tmp_path / shared_name("freed")
    body_inode = os.stat(name.with_suffix(".body")).st_ino
    for suffix in (".head", ".body"):
        name.with_suffix(suffix).unlink()
    closed: list[int] = []
    real_close, real_fstat = os.close, os.fstat

    def recorded(fd: int) -> None:
        with contextlib.suppress(OSError):
            if real_fstat(fd).st_ino == body_inode:
                closed.append(threading.get_ident())
        real_close(fd)

    monkeypatch.setattr(os, "close", recorded)
    sibling.join()
    assert await read(sibling.pieces(0, len(BODY))) == BODY
    sibling.leave()

    async def done() -> bool:
        return bool(closed)

    await wait_until(done, "the body's descriptor closed")
    assert threading.get_ident() not in closed


async def test_the_requests_waiting_for_another_workers_fill_look_past_a_killed_workers_head(tmp_path: Path) -> None:
    """A worker killed mid-fill left its head; a new fill of the key on another worker has not published its own yet:
    a request waiting for that fill goes on looking for its head (rather than take the dead one for it, find it no
    fill, and wait for the whole body), and is done once the new fill publishes."""
    published(tmp_path, "again", gone_pid(), BODY[:4000], len(BODY))
    sibling = SiblingGrowing(tmp_path, "again", lambda: True, published_head, 30.0)
    kept: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    waiting = asyncio.create_task(sibling.begun_or(kept))
    await asyncio.sleep(0.05)
    try:
        assert not waiting.done()
        published(tmp_path, "again", os.getpid(), BODY[:100], len(BODY))  # the new fill's, as `_publish` does
        await asyncio.wait_for(waiting, 10)
        assert sibling.joinable(Marks(7))
    finally:
        waiting.cancel()
        kept.cancel()


async def test_a_published_fills_head_and_body_are_the_workers_own(tmp_path: Path) -> None:
    """Both files of a fill published for the other workers are readable by the edge's user only (0600), whatever
    the umask: the head holds the origin's fields, the body its answer."""
    stored = published_head({"url_key": "pull:u", "content_type": "video/mp4", "etag": '"e"', "declared": len(BODY),
                             "stored_at": 1.0, "headers": [["set-cookie", "a=b"], [":status", "200"],
                                                           [":request-time", "1.0"], [":response-time", "1.0"]]})
    growing = Growing(len(BODY), 4096)
    growing.share(tmp_path, "own", None)
    previous = os.umask(0o022)
    try:
        spool = growing.begin(stored, 0, io.BytesIO())
    finally:
        os.umask(previous)
    try:
        name = tmp_path / shared_name("own")
        assert [oct(path.stat().st_mode & 0o777) for path in (name.with_suffix(".head"), name.with_suffix(".body"))] \
            == ["0o600", "0o600"]
    finally:
        growing.end(False)
        spool.close()
