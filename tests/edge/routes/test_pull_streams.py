"""Pull zone bodies when the origin fails them, against an origin the tests drive byte by byte (a raw asyncio server
on 127.0.0.1): what a client sees of a body cut short."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import itertools
import socket
import struct
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import pytest
import pytest_asyncio
from aiohttp import web

from assetcdn.edge.cache.entry import CachedObject
from assetcdn.edge.states.feed import Rest
from tests.support.edge_cache import FailingRead
from tests.support.hit_cdn import READ_S, HitCdn, request_bytes
from tests.support.origins import (
    MAX_OBJECT_MB,
    ZONE,
    Pull,
    ScriptedOrigin,
    add_pull_zone,
    pull_zone_on_hit_cdn,
    stored_url,
)
from tests.support.sockets import slow_reader
from tests.support.wait import WAIT_S, wait_until

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def pull(patient_pull: Pull) -> Pull:
    """The patient pull zone (tests/edge/routes/conftest.py): no origin here withholds its head, and no test is about
    the first-byte time, which a loaded machine's loop delays took from origins that answer at once (a 504)."""
    return patient_pull

# Answers the origin's n-th request (from 1) once its head is read; raises ConnectionError to end the connection.
Script = Callable[[asyncio.StreamReader, asyncio.StreamWriter, int], Awaitable[None]]
ZONES = itertools.count()
SLOW_ZONE = "slowstreams"


@asynccontextmanager
async def raw_origin_zone(pull: Pull, script: Script) -> AsyncIterator[str]:
    """A pull zone of its own in front of an origin on a free loopback port that answers by `script`; the zone's
    name. The origin is stopped at the end."""
    requests = 0

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal requests
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while True:
                await reader.readuntil(b"\r\n\r\n")
                requests += 1
                await script(reader, writer, requests)
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        zone = f"streams{next(ZONES)}"
        await add_pull_zone(pull.cdn, zone, {"Url": f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"})
        yield zone
    finally:
        server.close()
        await server.wait_closed()


def reset(writer: asyncio.StreamWriter) -> None:
    """End the connection with a reset (RST), which no body delimited by the close may take for its end."""
    writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


@pytest.mark.parametrize("framing", [b"Transfer-Encoding: chunked", b"Connection: close"])
@pytest.mark.parametrize("method", ["GET", "POST"])
async def test_an_http_1_0_client_never_takes_a_body_the_origin_cuts_short_for_a_whole_one(
        pull: Pull, method: str, framing: bytes) -> None:
    """A body of no declared length goes to an HTTP/1.0 client delimited by the close (it has no chunks), as
    nginx's proxy_pass asks by default. The origin resets its connection halfway through: the edge closed the
    client's connection as it does to end a broken body, and that close was the body's end to the client, which
    took the first half for the whole answer (a proxy in front would have kept it so). The client's connection
    is reset instead; nothing is stored either."""
    part = bytes(range(256)) * 40
    sent = asyncio.Event()

    async def script(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _n: int) -> None:
        body = b"%x\r\n%s\r\n" % (len(part), part) if framing.startswith(b"Transfer") else part
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nCache-Control: max-age=600\r\n"
                     + framing + b"\r\n\r\n" + body)
        await writer.drain()
        await sent.wait()
        reset(writer)
        raise ConnectionError

    async with raw_origin_zone(pull, script) as zone:
        port = pull.cdn.edge.server.port
        assert port is not None
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            length = "Content-Length: 0\r\n" if method == "POST" else ""
            writer.write(f"{method} /{zone}/half.bin HTTP/1.0\r\nHost: 127.0.0.1\r\n{length}\r\n".encode())
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), WAIT_S)
            assert head.startswith(b"HTTP/1.0 200") and b"content-length" not in head.lower(), head
            assert await asyncio.wait_for(reader.readexactly(len(part)), WAIT_S) == part
            sent.set()
            with pytest.raises(ConnectionResetError):
                await asyncio.wait_for(reader.read(), WAIT_S)
        finally:
            writer.close()
        if method == "GET":
            assert (await pull.cdn.edge.get(f"/{zone}/half.bin")).headers["X-Cache"] == "MISS"


class FullSoon(tempfile.SpooledTemporaryFile):  # type: ignore[type-arg]
    """A fill's spool whose temporary file finds its disk full past 4 MB: by then a client that reads nothing lags
    behind the fill (its connection's buffers hold far less)."""

    full = False  # one found its disk full

    def write(self, data: bytes) -> int:  # type: ignore[override]
        if self.tell() + len(data) > 4 * 1024 * 1024:
            FullSoon.full = True
            raise OSError(errno.ENOSPC, "No space left on device")
        return super().write(data)


@pytest.mark.parametrize("failing", ["spool", "rest"])
async def test_a_lagging_http_1_0_client_whose_fills_temporary_file_fails_never_takes_a_short_body_whole(
        pull: Pull, monkeypatch: pytest.MonkeyPatch, failing: str) -> None:
    """A fill's client that lags behind it is sent the rest of the body from the fill's temporary file; when that
    file finds its disk full (or cannot be read back: EIO) the client is to be cut off (docs/known-gaps.md). The
    fill failed with the OSError instead (aiohttp's "Error handling request", a traceback each time), and the
    client was left on a connection that neither ended its answer nor was cut. An HTTP/1.0 client's body of no
    declared length, which a close would end as if whole, has its connection reset, as for a body the origin cuts
    short."""
    monkeypatch.setattr(FullSoon, "full", False)
    if failing == "spool":
        monkeypatch.setattr(tempfile, "SpooledTemporaryFile", FullSoon)  # what a fill holds a body in
    else:
        async def unreadable(_rest: Rest) -> AsyncIterator[bytes]:
            FullSoon.full = True
            raise OSError(errno.EIO, "Input/output error")
            yield b""  # an async generator, as Rest.pieces is

        monkeypatch.setattr(Rest, "pieces", unreadable)
    part = bytes(range(256)) * 256

    async def script(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _n: int) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nCache-Control: max-age=600\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n")
        for _ in range(MAX_OBJECT_MB * 16):  # the object size limit's bytes, kept
            writer.write(b"%x\r\n%s\r\n" % (len(part), part))
            await writer.drain()
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    async with raw_origin_zone(pull, script) as zone:

        async def failed() -> bool:  # the spool failed, or the fill is stored and its rest waits for the client
            return FullSoon.full or (failing == "rest" and stored_url(pull.cdn.node, zone, "/lagging.bin") is not None)

        port = pull.cdn.edge.server.port
        assert port is not None
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a small window, set before it is opened
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
        reader, writer = await asyncio.open_connection(sock=sock)
        try:
            writer.write(f"GET /{zone}/lagging.bin HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n".encode())
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), WAIT_S)
            assert head.startswith(b"HTTP/1.0 200") and b"content-length" not in head.lower(), head
            await wait_until(failed, "the fill's temporary file failing, or its rest waiting")  # nothing read yet
            with pytest.raises(ConnectionResetError):
                while await asyncio.wait_for(reader.read(1024 * 1024), WAIT_S):
                    pass
        finally:
            writer.close()


async def test_a_disk_only_body_whose_file_fails_while_it_is_sent_never_runs_into_the_next_answer(
        pull: Pull, monkeypatch: pytest.MonkeyPatch) -> None:
    """A body kept on disk only goes through the application, handed over by the hit path; its file failing while it
    is sent (a bad sector) raised in the handler once the head was out. The hit path took the handler's end for the
    end of a kept-alive answer: the connection stayed open, its client waiting for the rest of the declared length
    (and the next request it pipelined). The connection is closed short of it instead, as aiohttp's own site does."""
    large = bytes(range(256)) * (2 * 1024 * 4)  # 2 MB: past the memory tier's object size, kept on disk only
    name = "/disk-only-failing.bin"
    pull.origin.answer(name, large, headers={"Cache-Control": "max-age=600"})
    pull.origin.answer("/next.txt", b"next", headers={"Cache-Control": "max-age=600"})
    assert await (await pull.get(name)).read() == large

    async def stored() -> bool:
        found = stored_url(pull.cdn.node, ZONE, name)
        return found is not None and found.obj.path is not None

    await wait_until(stored, "the body kept on disk only")
    opened = CachedObject.open
    monkeypatch.setattr(CachedObject, "open", lambda obj: FailingRead(opened(obj)))
    port = pull.cdn.edge.server.port
    assert port is not None
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request_bytes(f"/{ZONE}{name}") + request_bytes(f"/{ZONE}/next.txt"))
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), WAIT_S)
        assert head.startswith(b"HTTP/1.1 200") and b"\r\nContent-Length: %d\r\n" % len(large) in head, head
        body = b""
        with contextlib.suppress(ConnectionError):
            while len(body) < len(large) and (more := await asyncio.wait_for(reader.read(1024 * 1024), WAIT_S)):
                body += more
    finally:
        writer.close()
    assert len(body) < len(large) and body == large[:len(body)]


@pytest.mark.parametrize("cache_control", ["max-age=600", "no-store"])
@pytest.mark.parametrize("site", ["hit", "application"])
async def test_an_http_1_0_keep_alive_clients_answer_of_no_declared_length_ends_with_its_close(
        slow_readers: tuple[HitCdn, ScriptedOrigin], site: str, cache_control: str) -> None:
    """An HTTP/1.0 client that asks to keep its connection (`Connection: keep-alive`) is sent an answer of no
    declared length (the origin's chunked body) without chunks and without `Connection: keep-alive`, so it reads the
    body to the close. The connection stayed open all the same, waiting for another request: the client had its
    whole answer only when the edge's idle timeout closed it. It closes once the body is sent; an answer of
    declared length keeps the connection for the next request."""
    cdn, origin = slow_readers
    name = f"/http-1-0-keep-{site}-{cache_control.partition('=')[0]}.bin"

    async def chunked(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "application/octet-stream",
                                               "Cache-Control": cache_control})
        response.enable_chunked_encoding()
        await response.prepare(request)
        await response.write(LARGE[:5000])
        return response

    origin.route(name, chunked)
    origin.answer(f"{name}.sized", LARGE[:300], headers={"Content-Type": "application/octet-stream",
                                                         "Cache-Control": cache_control})
    port = cdn.port if site == "hit" else cdn.plain_port
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(f"GET /{SLOW_ZONE}{name}.sized HTTP/1.0\r\nConnection: keep-alive\r\n\r\n".encode())
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), READ_S)
        assert b"\r\nContent-Length: 300\r\n" in head and b"\r\nConnection: keep-alive\r\n" in head, head
        assert await asyncio.wait_for(reader.readexactly(300), READ_S) == LARGE[:300]
        writer.write(f"GET /{SLOW_ZONE}{name} HTTP/1.0\r\nConnection: keep-alive\r\n\r\n".encode())
        received = await asyncio.wait_for(reader.read(), READ_S)  # to the close, as an HTTP/1.0 client reads it
    finally:
        writer.close()
    head, _, body = received.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.0 200") and b"content-length" not in head.lower(), head
    assert b"keep-alive" not in head.lower() and b"chunked" not in head.lower(), head
    assert body == LARGE[:5000]


@pytest.mark.parametrize("requests", [1, 3])
@pytest.mark.parametrize(("site", "method"), [("hit", "POST"), ("application", "GET"), ("application", "POST")])
async def test_a_client_that_half_closes_after_its_requests_still_gets_their_answers(
        slow_readers: tuple[HitCdn, ScriptedOrigin], site: str, method: str, requests: int) -> None:
    """A client that sends its requests and then shuts its side (SHUT_WR), as `nc -N` does, waits for the answers.
    A connection aiohttp answers (the edge's without the hit path, `fast_hits = false`, or one whose request has a
    body, given to aiohttp by the hit path) was closed at that EOF with the handler cancelled: the client got no
    answer at all, though a POST had reached the origin. Every answer arrives, in order, then the close."""
    cdn, origin = slow_readers
    names = [f"/half-closed-{site}-{method.lower()}-{requests}-{i}.bin" for i in range(requests)]
    for i, name in enumerate(names):
        origin.answer(name, b"answered %d" % i, headers={"Content-Type": "text/plain", "Cache-Control": "no-store"})
    port = cdn.port if site == "hit" else cdn.plain_port
    body = b"form=1" if method == "POST" else b""
    length = f"Content-Length: {len(body)}\r\n" if body else ""
    sent = b"".join(f"{method} /{SLOW_ZONE}{name} HTTP/1.1\r\nHost: 127.0.0.1\r\n{length}\r\n".encode() + body
                    for name in names)

    def exchange() -> bytes:
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.sendall(sent)
            sock.shutdown(socket.SHUT_WR)
            sock.settimeout(READ_S)
            received = b""
            while chunk := sock.recv(65536):  # to the close
                received += chunk
            return received

    received = await asyncio.to_thread(exchange)
    answers = []
    for _ in names:
        head, _, received = received.partition(b"\r\n\r\n")
        size = int(next(line for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:"))[15:])
        assert head.startswith(b"HTTP/1.1 200"), head
        answers.append(received[:size])
        received = received[size:]
    assert answers == [b"answered %d" % i for i in range(requests)] and received == b""
    assert [[seen.body for seen in origin.requests(name)] for name in names] == [[body]] * requests


SEND_TIMEOUT_S = 1.0
LARGE = bytes(range(256)) * (24 * 1024)  # 6 MB: far more than the socket buffers hold


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def slow_readers(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[tuple[HitCdn, ScriptedOrigin]]:
    async with pull_zone_on_hit_cdn(tmp_path_factory.mktemp("pull-streams-slow"), SLOW_ZONE,
                                    ASSETCDN_TLS_SEND_TIMEOUT_S=str(SEND_TIMEOUT_S)) as found:
        yield found


@pytest.mark.parametrize("fields", [{"Cache_Control": "max-stale=0"}, {"X_Client": "private"}])
async def test_a_client_the_application_cuts_off_for_not_reading_is_let_go_at_once(
        slow_readers: tuple[HitCdn, ScriptedOrigin], fields: dict[str, str]) -> None:
    """A client that takes nothing of a fill's answer for the send timeout is cut off (docs/api-guide.md, "A fill's
    first client, slow or stopped"), a kept answer's (a request with its own directives, answered by the
    application) as one not kept. The application closed its connection, which waits to send what the client has
    not read: a client that never reads again held the connection, its buffers and the edge's descriptor for as
    long as it stayed. It is aborted now: gone from the edge at once, while the client still reads nothing."""
    cdn, origin = slow_readers
    private = "X_Client" in fields
    name = "/slow-private.bin" if private else "/slow-kept.bin"
    origin.answer(name, LARGE, headers={"Content-Type": "application/octet-stream",
                                        "Cache-Control": "private" if private else "max-age=600"})
    hits = cdn.site.hits
    assert hits is not None
    loop = asyncio.get_running_loop()
    idle = await slow_reader(cdn.port)
    try:
        here = idle.getsockname()
        await loop.sock_sendall(idle, request_bytes(f"/{SLOW_ZONE}{name}", **fields))

        async def asked() -> bool:
            return origin.count(name) == 1

        await wait_until(asked, "the origin asked")
        assert any(connection.peername == here for connection in hits.connections)

        async def let_go() -> bool:  # the client reads nothing meanwhile
            return all(connection.peername != here for connection in hits.connections)

        await wait_until(let_go, "the edge letting go of the client that reads nothing")
    finally:
        idle.close()


@pytest.mark.parametrize("method", ["GET", "POST"])
async def test_an_http_1_0_client_cut_off_for_not_reading_never_takes_its_answer_for_whole(
        slow_readers: tuple[HitCdn, ScriptedOrigin], method: str) -> None:
    """An HTTP/1.0 client's answer of no declared length is delimited by the close. Cut off for reading nothing
    for the send timeout, the client was left the bytes its connection held, then the close: read later (a paused
    download resumed), they were the whole answer to it. Its connection is reset instead."""
    cdn, origin = slow_readers
    name = f"/slow-http-1-0-{method.lower()}.bin"

    async def chunked(request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(headers={"Content-Type": "application/octet-stream",
                                               "Cache-Control": "max-age=600"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        for start in range(0, len(LARGE), 256 * 1024):
            await response.write(LARGE[start:start + 256 * 1024])  # waits while the edge does not read
        await response.write_eof()
        return response

    origin.route(name, chunked)
    hits = cdn.site.hits
    assert hits is not None
    loop = asyncio.get_running_loop()
    idle = await slow_reader(cdn.port)
    try:
        here = idle.getsockname()
        length = "Content-Length: 0\r\n" if method == "POST" else ""
        await loop.sock_sendall(idle, f"{method} /{SLOW_ZONE}{name} HTTP/1.0\r\nHost: 127.0.0.1\r\n{length}\r\n".encode())

        async def cut_off() -> bool:  # the client reads nothing meanwhile
            return origin.count(name, method) == 1 and all(c.peername != here for c in hits.connections)

        await wait_until(cut_off, "the client that reads nothing cut off")
        received = b""
        with pytest.raises(ConnectionResetError):
            while chunk := await asyncio.wait_for(loop.sock_recv(idle, 1024 * 1024), WAIT_S):
                received += chunk
        head, _, body = received.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.0 200") and b"content-length" not in head.lower(), head
        assert len(body) < len(LARGE)
    finally:
        idle.close()


async def test_a_client_that_stops_reading_a_large_hit_is_cut_off(slow_readers: tuple[HitCdn, ScriptedOrigin]) -> None:
    """A stored body over 1 MB (kept on disk only) is answered by the application. A client that took none of it
    was waited for without end, holding its connection and a descriptor of the stored file: enough such clients
    use up the worker's descriptors. It is cut off after the send timeout, as a fill's client is and as the hit
    path cuts off a client that reads none of a file it sends."""
    cdn, origin = slow_readers
    name = "/large-hit.bin"
    origin.answer(name, LARGE, headers={"Content-Type": "application/octet-stream", "Cache-Control": "max-age=600"})
    stored = await cdn.connect()
    try:
        first = await stored.request(f"/{SLOW_ZONE}{name}")
        assert (first.status, len(first.body)) == (200, len(LARGE))
    finally:
        stored.close()
    hits = cdn.site.hits
    assert hits is not None
    loop = asyncio.get_running_loop()
    idle = await slow_reader(cdn.port)
    try:
        here = idle.getsockname()
        await loop.sock_sendall(idle, request_bytes(f"/{SLOW_ZONE}{name}"))
        head = await asyncio.wait_for(loop.sock_recv(idle, 4096), WAIT_S)
        assert head.startswith(b"HTTP/1.1 200") and b"X-Cache: HIT" in head, head

        async def let_go() -> bool:  # the client reads nothing more meanwhile
            return all(connection.peername != here for connection in hits.connections)

        await wait_until(let_go, "the edge letting go of the client that reads nothing")
        assert origin.count(name) == 1
    finally:
        idle.close()
