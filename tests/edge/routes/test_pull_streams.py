"""Pull zone bodies when the origin fails them, against an origin the tests drive byte by byte (a raw asyncio server
on 127.0.0.1): what a client sees of a body cut short."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import socket
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import pytest

from tests.support.origins import Pull, add_pull_zone
from tests.support.wait import WAIT_S

pytestmark = pytest.mark.asyncio(loop_scope="module")

# Answers the origin's n-th request (from 1) once its head is read; raises ConnectionError to end the connection.
Script = Callable[[asyncio.StreamReader, asyncio.StreamWriter, int], Awaitable[None]]
ZONES = itertools.count()


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
