"""Sockets: a listener on a free loopback port to configure before a server uses it, what the kernel can take
of a response for a client that reads nothing (the bound on the bytes a test of aborted downloads may see
counted as sent), a client with a small receive window (one slow to read, or reading nothing), and clients that go
on sending their body after its answer."""

from __future__ import annotations

import asyncio
import socket
import struct
from pathlib import Path

RCVBUF = 16 * 1024   # the attacking client's receive buffer (the kernel doubles it)


def send_buffer_max() -> int:
    """The most a socket's send buffer can hold here (tcp_wmem autotuning limit)."""
    return int(Path("/proc/sys/net/ipv4/tcp_wmem").read_text().split()[2])


# What the edge can hand to the kernel for a client that reads nothing: its send buffer and the client's
# receive buffer. A body well past it cannot have been sent whole.
REALLY_WRITTEN_MAX = send_buffer_max() + 4 * RCVBUF


def loopback_listener() -> socket.socket:
    """A socket bound to a free loopback port, so that the port can be configured before a server
    uses it (edges' origins and the dashboard's own port are in control's settings)."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    return listener


SMALL_WINDOW = 4096  # a slow reader's receive buffer: the window it advertises from its first segment


async def slow_reader(port: int) -> socket.socket:
    """A non-blocking client connected to 127.0.0.1:`port` whose receive buffer is made small before it connects: the
    bytes it does not read stay in the server's buffers (closed by the caller)."""
    client = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SMALL_WINDOW)
        client.setblocking(False)
        await asyncio.get_running_loop().sock_connect(client, ("127.0.0.1", port))
    except BaseException:
        client.close()
        raise
    return client


async def read_then_reset(port: int, request: bytes, read: int, timeout_s: float) -> None:
    """A slow reader (`slow_reader`) that sends `request`, reads at least `read` bytes of the answer (each read within
    `timeout_s`) and resets its connection (SO_LINGER 0): a download cancelled midway."""
    loop = asyncio.get_running_loop()
    client = await slow_reader(port)
    try:
        await loop.sock_sendall(client, request)
        received = 0
        while received < read:
            received += len(await asyncio.wait_for(loop.sock_recv(client, 64 * 1024), timeout_s))
        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # its close resets
    finally:
        client.close()


async def raw_answer(port: int, head: bytes, timeout_s: float = 30.0) -> bytes:
    """What 127.0.0.1:`port` answers to `head` (a request head written as is, byte for byte, such as a field value
    that is not UTF-8, which HTTP clients will not send), read until the server closes: `head` asks for that with
    `Connection: close`."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(head)
        return await asyncio.wait_for(reader.read(), timeout_s)
    finally:
        writer.close()


async def still_sending_after_answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, head: bytes,
                                     timeout_s: float = 30.0) -> tuple[bytes, bytes]:
    """A client that sends `head` and one byte of its body, reads the answer's head, then goes on sending its body
    (1 KB every 50 ms for half a second, as a client that does not look at the answer yet does) and reads to the end:
    (the answer's head, the rest until the server's end of the connection). A reset raises ConnectionResetError."""
    writer.write(head + b"x")
    answer = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout_s)
    for _ in range(10):
        writer.write(b"x" * 1000)
        await writer.drain()
        await asyncio.sleep(0.05)
    return answer, await asyncio.wait_for(reader.read(), timeout_s)


# A client's send buffer (the kernel doubles it) where a test counts what it holds: small next to the megabytes it
# sends, not so small that it sends slowly (16 KB moved 2.5 MB/s on loopback).
SMALL_SEND_BUFFER = 256 * 1024


async def sending_much_after_answer(port: int, head: bytes, more: int, timeout_s: float = 30.0) -> bytes:
    """A client that sends `head` and one byte of its body, reads the answer's head, then sends `more` bytes of its
    body at once (a large upload that does not look at the answer yet), waits until they all left its buffers, and
    reads to the end: the answer's head and the rest until the server's end of the connection. Its send buffer is
    small (SMALL_SEND_BUFFER): bytes the server does not read stay in it and the kernel's buffers, and once those are
    full the client waits, until the server reads or resets the connection. A reset raises ConnectionResetError (or
    BrokenPipeError)."""
    client = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        client.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SMALL_SEND_BUFFER)
        client.setblocking(False)
        await asyncio.get_running_loop().sock_connect(client, ("127.0.0.1", port))
    except BaseException:
        client.close()
        raise
    reader, writer = await asyncio.open_connection(sock=client)
    try:
        writer.write(head + b"x")
        answer = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout_s)
        writer.transport.set_write_buffer_limits(high=0)  # drain() returns once the transport holds nothing
        writer.write(b"x" * more)
        await asyncio.wait_for(writer.drain(), timeout_s)
        return answer + await asyncio.wait_for(reader.read(), timeout_s)
    finally:
        writer.close()
