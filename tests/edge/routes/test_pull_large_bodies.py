"""Large bodies in pull zones, on the hit path (assetcdn/edge/fastpath/pull_fill.py) and the application's
(assetcdn/edge/states/pull.py), with small limits: 2 MB objects, 64 KB in the memory tier (a larger body is kept on
disk only). What each client gets when a body is at or past the object size limit, ranges and HEAD of a copy kept
on disk only, a purge while a fill reads its body, and that no fill's temporary file outlives it."""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from tests.support.hit_cdn import HitCdn, RawConnection, request_bytes, shared_hit_cdn
from tests.support.origins import stored_url
from tests.support.raw_origin import KEPT, Script, fetch, zone_before
from tests.support.sockets import slow_reader
from tests.support.wait import WAIT_S, wait_until

pytestmark = pytest.mark.asyncio(loop_scope="module")

MAX_OBJECT = 2 * 1024 * 1024
PIECE = bytes(range(256)) * 256  # 64 KB


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cdn(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[HitCdn]:
    async with shared_hit_cdn(tmp_path_factory.mktemp("pull-large"), ASSETCDN_ORIGIN_ALLOW_LOOPBACK="true",
                              ASSETCDN_ORIGIN_FIRST_BYTE_TIMEOUT_S="5", ASSETCDN_ORIGIN_IDLE_TIMEOUT_S="5",
                              ASSETCDN_EDGE_MEMORY_OBJECT_MAX_KB="64",
                              ASSETCDN_ORIGIN_MAX_OBJECT_MB=str(MAX_OBJECT // 1024 // 1024)) as found:
        yield found


def temporary_files() -> set[str]:
    """The files of the temporary directory this process holds open (a fill's spool past 1 MB is one, unlinked; the
    control plane and SQLite hold some of their own, which a test takes as it finds them first)."""
    held = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # closed meanwhile
            continue
        if target.startswith(tempfile.gettempdir()):
            held.add(target)
    return held


async def none_left(before: set[str]) -> None:
    """Once the fills' temporary files are closed (a fill stores its body after its client may have it all)."""
    async def closed() -> bool:
        return temporary_files() <= before

    await wait_until(closed, "the fills' temporary files closed")


def body_of(size: int) -> bytes:
    return (PIECE * (size // len(PIECE) + 1))[:size]


def sends_body(data: bytes, framing: str, *, upto: int | None = None, then: asyncio.Event | None = None) -> Script:
    """An origin answering `data` with a declared length or chunked; `upto`: it stops there and closes (cut short);
    `then`: it sends nothing past its first piece until the event is set."""
    async def script(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        framed = b"Content-Length: %d" % len(data) if framing == "length" else b"Transfer-Encoding: chunked"
        writer.write(b"HTTP/1.1 200 OK\r\n" + KEPT + framed + b"\r\n\r\n")
        for at in range(0, len(data) if upto is None else upto, len(PIECE)):
            if at and then is not None and n == 1:
                await then.wait()
            part = data[at:at + len(PIECE)]
            writer.write(part if framing == "length" else b"%x\r\n%s\r\n" % (len(part), part))
            await writer.drain()
        if upto is not None:
            raise ConnectionError
        if framing == "chunked":
            writer.write(b"0\r\n\r\n")
        await writer.drain()

    return script


async def kept(cdn: HitCdn, zone: str, name: str) -> None:
    async def found() -> bool:  # stored once its last byte is read, maybe after its client has it
        return stored_url(cdn.node, zone, name) is not None

    await wait_until(found, f"{name} stored")


@pytest.mark.parametrize("framing", ["length", "chunked"])
@pytest.mark.parametrize("size", [MAX_OBJECT, MAX_OBJECT + 1], ids=["at-the-limit", "past-the-limit"])
async def test_every_waiting_client_gets_the_whole_body_and_only_one_within_the_limit_is_kept(
        cdn: HitCdn, framing: str, size: int) -> None:
    before = temporary_files()
    data = body_of(size)
    async with zone_before(cdn, sends_body(data, framing)) as (zone, origin):
        answers = await asyncio.gather(*(fetch(port, f"/{zone}/large.bin")
                                         for port in (cdn.port, cdn.plain_port, cdn.port, cdn.plain_port)))
        for status, _, body, whole in answers:
            assert (status, whole, len(body), body == data) == (200, True, size, True)
        if size <= MAX_OBJECT:
            await kept(cdn, zone, "/large.bin")
            stored = stored_url(cdn.node, zone, "/large.bin")
            assert stored is not None and stored.obj.path is not None  # kept on disk only
            status, headers, body, whole = await fetch(cdn.plain_port, f"/{zone}/large.bin")
            assert (status, headers["x-cache"], body == data) == (200, "HIT", True)
            assert origin.requests == 1
        else:
            assert stored_url(cdn.node, zone, "/large.bin") is None
            assert origin.requests == len(answers)  # each asked for its own once the answer was not kept
    await none_left(before)


async def test_ranges_and_head_of_a_copy_kept_on_disk_only(cdn: HitCdn) -> None:
    size = MAX_OBJECT - 12345
    data = body_of(size)
    async with zone_before(cdn, sends_body(data, "length")) as (zone, origin):
        assert (await fetch(cdn.plain_port, f"/{zone}/ranged.bin"))[2] == data
        await kept(cdn, zone, "/ranged.bin")
        for port in (cdn.port, cdn.plain_port):
            conn = await RawConnection.open(port)
            try:
                for asked, (start, end) in (("bytes=0-0", (0, 1)), (f"bytes={size - 1}-", (size - 1, size)),
                                            ("bytes=-10", (size - 10, size)), (f"bytes=10-{2 * size}", (10, size)),
                                            (f"bytes=-{size + 5}", (0, size))):
                    resp = await conn.request(f"/{zone}/ranged.bin", Range=asked)
                    assert (resp.status, resp.header("Content-Range"), resp.body) == (
                        206, f"bytes {start}-{end - 1}/{size}", data[start:end]), asked
                for asked in (f"bytes={size}-", "bytes=-0"):
                    resp = await conn.request(f"/{zone}/ranged.bin", Range=asked)
                    assert (resp.status, resp.header("Content-Range"), resp.body) == (416, f"bytes */{size}", b"")
                resp = await conn.request(f"/{zone}/ranged.bin", Range="bytes=0-0,5-9")  # several: the whole
                assert (resp.status, resp.body == data) == (200, True)
                resp = await conn.request(f"/{zone}/ranged.bin", method="HEAD")
                assert (resp.status, resp.header("Content-Length"), resp.body) == (200, str(size), b"")
            finally:
                conn.close()
        assert origin.requests == 1


@pytest.mark.parametrize("framing", ["length", "chunked"])
async def test_a_fill_purged_while_it_reads_its_body_is_not_kept_and_its_waiter_gets_the_body(
        cdn: HitCdn, framing: str) -> None:
    before = temporary_files()
    data = body_of(MAX_OBJECT - 1)
    go_on = asyncio.Event()
    async with zone_before(cdn, sends_body(data, framing, then=go_on)) as (zone, origin):
        first = asyncio.create_task(fetch(cdn.plain_port, f"/{zone}/purged.bin"))

        async def asked() -> bool:
            return origin.requests == 1

        await wait_until(asked, "the fill under way")
        waiter = asyncio.create_task(fetch(cdn.plain_port, f"/{zone}/purged.bin"))
        await cdn.purge({"urls": [f"http://edge.test/{zone}/purged.bin"]})
        purged_at = time.time()
        go_on.set()
        for answer in await asyncio.gather(first, waiter):
            assert (answer[0], answer[3], answer[2] == data) == (200, True, True)
        await none_left(before)  # the fills stored what they keep by then
        stored = stored_url(cdn.node, zone, "/purged.bin")
        # Only an answer asked for after the purge (the waiter's own fill, when it made one) may be kept.
        assert stored is None or (origin.requests == 2 and stored.freshness.response_time > purged_at)


@pytest.mark.parametrize("framing", ["length", "chunked"])
@pytest.mark.parametrize("outcome", ["origin-cut", "client-gone"])
async def test_no_temporary_file_outlives_a_fill_that_failed(cdn: HitCdn, framing: str, outcome: str) -> None:
    before = temporary_files()
    data = body_of(MAX_OBJECT)  # past what a spool holds in memory: a temporary file
    script = sends_body(data, framing, upto=3 * MAX_OBJECT // 4 if outcome == "origin-cut" else None)
    async with zone_before(cdn, script) as (zone, origin):
        for port in (cdn.port, cdn.plain_port):
            client = await slow_reader(port)
            reader, writer = await asyncio.open_connection(sock=client)
            try:
                writer.write(request_bytes(f"/{zone}/failed-{port}.bin"))
                await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), WAIT_S)
                if outcome == "client-gone":
                    await kept(cdn, zone, f"/failed-{port}.bin")  # the fill ends whatever its client does
                    writer.transport.abort()
                else:
                    while await asyncio.wait_for(reader.read(1024 * 1024), WAIT_S):
                        pass  # to the cut
            finally:
                writer.close()

        await none_left(before)
        assert origin.requests == 2
