"""A fill's body as it is read, for the requests waiting for its URL (assetcdn/edge/states/growing.py): the bytes a
reader gets from any start, whatever chunks the fill read around the part it holds in memory, and the descriptor of
its spool's file it reads the rest by, which outlives neither the fill nor its readers, nor goes while one of them
still reads by it."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import io
import os
import threading
import tracemalloc
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import IO, Any

import pytest

from assetcdn.edge.states import growing as growing_module
from assetcdn.edge.states.growing import EndedShort, Growing
from assetcdn.edge.states.pull import SPOOL_MEMORY, new_spool, relay_body, spool_write
from tests.support.wait import wait_until

pytestmark = pytest.mark.asyncio

DECLARED = SPOOL_MEMORY + 300 * 1024
BODY = bytes(index % 251 for index in range(DECLARED))


class Unpurged:
    """A cache no purge was published in since the fills here asked their origin (their mark: 0)."""

    def purge_mark(self) -> int:
        return 0

    def purged_since(self, mark: int, obj: Any) -> bool:
        return False


NO_PURGES = Unpurged()


async def filled(sizes: list[int], growing: Growing | None = None,
                 upto: int = DECLARED) -> tuple[Growing, IO[bytes]]:
    """A fill of BODY's first `upto` bytes in chunks of `sizes` (then one of the rest), each written to its spool as
    `relay_body` writes it, then told to `growing`."""
    growing = growing or Growing(DECLARED, SPOOL_MEMORY)
    spool = new_spool(DECLARED)
    spool = growing.begin(object(), 0, spool)
    at = 0
    for size in [*sizes, DECLARED]:
        chunk = BODY[at:min(at + size, upto)]
        if not chunk:
            break
        at += len(chunk)
        await spool_write(spool, chunk, at, flush=True)
        growing.add(chunk, spool)
    return growing, spool


async def read(growing: Growing, start: int, end: int) -> bytes:
    return b"".join([piece async for piece in growing.pieces(start, end)])


# Chunks that end on the limit, one that straddles it (its bytes past it held in memory with the rest of it), and
# single bytes either side of it.
LAYOUTS = {
    "aligned": [64 * 1024] * 16,
    "straddling": [1000] + [64 * 1024] * 16,
    "bytes": [SPOOL_MEMORY - 2, 1, 1, 1, 1],
}
STARTS = [0, 999, SPOOL_MEMORY - 1, SPOOL_MEMORY, SPOOL_MEMORY + 1, 1000 + 16 * 64 * 1024, DECLARED - 1]


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
async def test_a_reader_gets_the_bodys_bytes_from_any_start_whatever_the_chunks_around_the_memory_limit(
        layout: str) -> None:
    growing, spool = await filled(LAYOUTS[layout])
    growing.join()
    try:
        for start in STARTS:
            for end in (start + 1, min(start + 70 * 1024, DECLARED), DECLARED):
                assert await read(growing, start, end) == BODY[start:end], (start, end)
    finally:
        growing.end(True)
        growing.leave()
        spool.close()


async def test_a_reader_ahead_of_the_fill_gets_each_byte_once_the_fill_has_it() -> None:
    growing = Growing(DECLARED, SPOOL_MEMORY)
    growing.join()
    reader = asyncio.create_task(read(growing, SPOOL_MEMORY - 10, DECLARED))
    await asyncio.sleep(0)
    spool: IO[bytes] | None = None
    try:
        growing, spool = await filled([SPOOL_MEMORY - 5, 7, 64 * 1024], growing)
        growing.end(True)
        assert await reader == BODY[SPOOL_MEMORY - 10:]
    finally:
        growing.leave()
        if spool is not None:
            spool.close()


async def test_a_fill_past_the_memory_limit_holds_none_of_its_body_in_memory() -> None:
    """Its spool rolled over to its file, a fill's readers read every byte from there: the chunks it read are not held
    for them for the rest of the fill (a megabyte per large fill, however long the origin takes, readers or not)."""
    tracemalloc.start()
    try:
        growing = Growing(DECLARED, SPOOL_MEMORY)
        spool = growing.begin(object(), 0, new_spool(DECLARED))
        at = 0
        for size in [64 * 1024] * 20:  # fresh chunks, as the origin's are: 1.25 MB, past the limit
            chunk = bytes(BODY[at:at + size])
            at += size
            await spool_write(spool, chunk, at, flush=True)
            growing.add(chunk, spool)
            del chunk
        held, _peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    try:
        assert held < 256 * 1024, held
        growing.join()
        assert await read(growing, 0, at) == BODY[:at]  # all of it still readable, from the file
    finally:
        growing.end(False)
        growing.leave()
        spool.close()


async def test_a_request_still_waiting_for_a_fill_to_begin_learns_of_its_end_after_another_gave_up() -> None:
    """Two requests wait for a fill's body to begin; the first gives up (its own wait over), then the fill is over
    without a body read (`kept` done: its answer failed before its body). The second learns of it at once, not when
    its own wait runs out: the first one's giving up took its wake-up with it."""
    growing = Growing(DECLARED, SPOOL_MEMORY)
    kept: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
    patient = asyncio.create_task(asyncio.wait_for(growing.begun_or(kept), 60))
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(growing.begun_or(kept), 0.01)
    assert not patient.done()
    kept.set_result(False)
    for _ in range(10):  # the done-callbacks, then the waiting task's turn: no timer involved
        await asyncio.sleep(0)
    assert patient.done()
    await patient


class Purged:
    """A cache whose purges since mark 0 are `published`, `named` of them naming the fill; its log looked at `looks`
    times."""

    def __init__(self) -> None:
        self.published, self.named, self.looks = 0, False, 0

    def purge_mark(self) -> int:
        return self.published

    def purged_since(self, mark: int, obj: Any) -> bool:
        self.looks += 1
        return self.named


@pytest.mark.parametrize("keyed", [True, False], ids=["stored under its key", "a variant's"])
async def test_a_fill_is_joined_after_purges_that_do_not_name_it_and_never_after_one_that_does(keyed: bool) -> None:
    cache = Purged()
    growing = Growing(DECLARED, SPOOL_MEMORY)
    growing.begin(SimpleNamespace(obj=object()), 0, io.BytesIO(), keyed=keyed)  # a StoredResponse's entry, to the purge log
    assert growing.joinable(cache)
    cache.published = 1  # a purge of something else
    assert growing.joinable(cache) is keyed  # a variant's key may be what it named: taken to name it
    assert growing.joinable(cache) is keyed
    assert cache.looks == (1 if keyed else 0)  # one look at the log for that purge, not one per request
    cache.published, cache.named = 2, True
    assert not growing.joinable(cache)
    cache.named = False
    assert not growing.joinable(cache)  # named once: kept out of the cache, never joined again


def descriptors_of(target: str) -> int:
    """How many of this process's descriptors are of the file `target` (as /proc names it): not a count of them all,
    which the descriptors other code of the process closes meanwhile from threads (a fill's readers' among them)
    would move."""
    count = 0
    for name in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            count += os.readlink(f"/proc/self/fd/{name}") == target
    return count


async def test_a_fill_that_ends_short_ends_its_readers_and_lets_its_descriptor_go() -> None:
    growing, spool = await filled([SPOOL_MEMORY, 64 * 1024], upto=SPOOL_MEMORY + 64 * 1024)  # then it fails
    target = os.readlink(f"/proc/self/fd/{spool.fileno()}")
    spool.close()  # as a fill's failure closes it (`relay_body`)
    growing.join()
    reader = asyncio.create_task(read(growing, 0, DECLARED))
    await asyncio.sleep(0.01)
    growing.end(False)
    with pytest.raises(EndedShort):
        await reader
    assert descriptors_of(target) == 1  # its reader still holds it
    growing.leave()

    async def let_go() -> bool:  # closed from a thread (the last descriptor of a removed file frees its blocks)
        return descriptors_of(target) == 0

    await wait_until(let_go, "the fill's descriptor closed once its last reader left")
    assert not growing.joinable(NO_PURGES)


async def test_a_reader_that_leaves_mid_read_keeps_the_descriptor_open_until_its_read_is_done(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A reader cancelled (the edge stopping) while a thread reads its piece of the spool's file: the fill being over,
    the descriptor is let go once that read is done, never closed under it (its number another file's by then)."""
    growing, spool = await filled([SPOOL_MEMORY, 64 * 1024])
    started, release = threading.Event(), threading.Event()
    real = os.pread

    def held(fd: int, size: int, at: int) -> bytes:
        started.set()
        release.wait(20)
        return real(fd, size, at)

    monkeypatch.setattr(os, "pread", held)
    descriptor = growing._fd
    assert descriptor is not None
    same_file = os.fstat(descriptor).st_ino
    growing.join()

    async def reader() -> bytes:
        try:
            return await read(growing, SPOOL_MEMORY, DECLARED)
        finally:
            growing.leave()

    task = asyncio.create_task(reader())

    async def reading() -> bool:
        return started.is_set()

    try:
        await wait_until(reading, "the reader's read of the spool's file")
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        growing.end(False)  # the fill over, and no reader left
        assert os.fstat(descriptor).st_ino == same_file  # still open for the read under way
    finally:
        release.set()
        spool.close()

    def closed() -> bool:
        try:
            return os.fstat(descriptor).st_ino != same_file
        except OSError:
            return True

    async def let_go() -> bool:
        return closed()

    await wait_until(let_go, "the descriptor let go once the read was done")


class Origin:
    """An origin's body in chunks of `size` (what `relay_body` reads)."""

    def __init__(self, body: bytes, size: int) -> None:
        self.body, self.size = body, size

    async def chunks(self, *, capped: bool = True) -> AsyncIterator[bytes]:
        for start in range(0, len(self.body), self.size):
            yield self.body[start:start + self.size]
            await asyncio.sleep(0)


async def test_a_fill_that_cannot_have_a_descriptor_for_its_readers_ends_them_and_still_keeps_its_body(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker out of descriptors when a fill's readers need one to read its file: the readers are ended short
    (their answers cut, the later requests waiting for it stored), and the fill reads the body into its spool still,
    to be stored: not given up for want of what only its readers needed."""
    def no_descriptor(fd: int) -> int:
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(growing_module, "os", SimpleNamespace(dup=no_descriptor, pread=os.pread, close=os.close))
    growing = Growing(DECLARED, SPOOL_MEMORY)
    spool = growing.begin(object(), 0, new_spool(DECLARED))
    growing.join()
    reader = asyncio.create_task(read(growing, 0, DECLARED))
    origin: Any = Origin(BODY, 64 * 1024)
    kept, _sent = await relay_body(origin, DECLARED, spool, None, None, growing=growing)
    try:
        with pytest.raises(EndedShort):
            await reader
        assert kept is not None  # kept
        kept.seek(0)
        assert kept.read() == BODY
        assert not growing.joinable(NO_PURGES)
    finally:
        growing.leave()
        (kept or spool).close()
