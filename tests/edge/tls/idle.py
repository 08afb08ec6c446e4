"""Idle HTTP/2 clients of the edge's https port, many at once (benchmarks/idle_connections.py, and the memory
bound's test in tests/edge/tls/test_idle_connections.py).

Each connection makes its TLS handshake (ALPN h2), sends the connection preface and its SETTINGS, reads the
server's SETTINGS and acknowledges them; with a path, it then GETs that path once (a hit: HPACK tables and
buffers used, as a browser's connection has them) and reads the whole answer. Then it stays open, sending
nothing. A connection closed before it answers a PING sent after the preface is counted as refused.
Windows are announced as a browser's (BROWSER_WINDOW). A connection the server refuses (GOAWAY, then the close) is counted as refused, not as an error."""

from __future__ import annotations

import asyncio
import struct
from dataclasses import dataclass, field

import hpack

from tests.edge.tls.client import TIMEOUT_S, client_context
from tests.edge.tls.flood import PREFACE, frame

DATA, HEADERS, SETTINGS, PING, GOAWAY, WINDOW_UPDATE = 0x0, 0x1, 0x4, 0x6, 0x7, 0x8
INITIAL_WINDOW_SIZE = 0x4
BROWSER_WINDOW = 1 << 24  # flow-control windows as large as a browser's: a whole answer may come at once
END_STREAM, ACK, END_HEADERS = 0x1, 0x1, 0x4


@dataclass
class IdleClients:
    writers: list[asyncio.StreamWriter] = field(default_factory=list)
    readers: list[asyncio.StreamReader] = field(default_factory=list)
    refused: int = 0       # answered with GOAWAY before any stream (the edge's connection limit)
    goaway_codes: list[int] = field(default_factory=list)

    def close(self) -> None:
        for writer in self.writers:
            writer.close()
        self.writers.clear()
        self.readers.clear()


async def read_frame(reader: asyncio.StreamReader) -> tuple[int, int, int, bytes]:
    """(type, flags, stream id, payload) of the next frame."""
    head = await reader.readexactly(9)
    length = int.from_bytes(head[:3], "big")
    stream_id = struct.unpack(">I", head[5:9])[0] & 0x7FFFFFFF
    return head[3], head[4], stream_id, await reader.readexactly(length)


async def open_one(port: int, server_name: str, path: str | None, clients: IdleClients) -> None:
    reader, writer = await asyncio.wait_for(asyncio.open_connection(
        "127.0.0.1", port, ssl=client_context(None, alpn=("h2",)), server_hostname=server_name), TIMEOUT_S)
    try:
        # A PING after the preface: its answer comes after the server's SETTINGS and anything it sends at once
        # (a refusal's GOAWAY), so the connection's fate is known when it arrives.
        writer.write(PREFACE + frame(SETTINGS, struct.pack(">HI", INITIAL_WINDOW_SIZE, BROWSER_WINDOW))
                     + frame(WINDOW_UPDATE, struct.pack(">I", BROWSER_WINDOW)) + frame(PING, b"idle-cli"))
        while True:
            try:
                kind, flags, _, payload = await asyncio.wait_for(read_frame(reader), TIMEOUT_S)
            except asyncio.IncompleteReadError:
                kind, flags, payload = -1, 0, b""
            if kind in (GOAWAY, -1):
                clients.refused += 1
                if kind == GOAWAY:
                    clients.goaway_codes.append(struct.unpack(">II", payload[:8])[1])
                writer.close()
                return
            if kind == SETTINGS and not flags & ACK:
                writer.write(frame(SETTINGS, b"", flags=ACK))
            elif kind == PING and flags & ACK:
                break
        if path is not None:
            block = hpack.Encoder().encode([(":method", "GET"), (":path", path), (":scheme", "https"),
                                            (":authority", server_name)])
            writer.write(frame(HEADERS, block, flags=END_STREAM | END_HEADERS, stream_id=1))
            while True:
                kind, flags, stream_id, payload = await asyncio.wait_for(read_frame(reader), TIMEOUT_S)
                if kind == GOAWAY:
                    raise ConnectionError(f"GOAWAY {payload[4:8].hex()} while answering")
                if stream_id == 1 and kind in (DATA, HEADERS) and flags & END_STREAM:
                    break
        await writer.drain()
    except BaseException:
        writer.close()
        raise
    clients.writers.append(writer)
    clients.readers.append(reader)


async def open_idle(port: int, count: int, *, server_name: str = "localhost", path: str | None = None,
                    concurrency: int = 32) -> IdleClients:
    """``count`` idle HTTP/2 connections (the caller closes them: IdleClients.close)."""
    clients = IdleClients()
    gate = asyncio.Semaphore(concurrency)

    async def one() -> None:
        async with gate:
            await open_one(port, server_name, path, clients)

    try:
        await asyncio.gather(*(one() for _ in range(count)))
    except BaseException:
        clients.close()
        raise
    return clients

