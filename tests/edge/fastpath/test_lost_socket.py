"""A TLS HTTP/1.1 answer whose client resets the connection while the edge writes: the socket's transport beneath
TLS (uvloop's) fails the write, is closing from then on and silently drops whatever TLS passes it later, holding none
of it, while TLS above it hears of the loss only a turn of the loop later. Bytes written in between never reach the
kernel; before, each write of a large body went on at once (nothing held, nothing paused) and the whole rest of the
file was counted as sent, several MB more than the kernel could take (seen in the delivery statistics of
tests/edge/tls/test_h2_counted.py under load). Here the real uvloop transport and a real reset, with TLS's part played
by a transport that passes every write beneath at once and holds nothing, as TLS does for a client that reads."""

from __future__ import annotations

import asyncio
import os
import select
import socket
import struct
import tempfile
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import uvloop

from assetcdn.edge.fastpath.sendfile import Drain, Progress, write_file, write_views
from tests.support.wait import wait_until

BODY = os.urandom(6 * 1024 * 1024)  # more than the kernel takes of one connection
SEND_TIMEOUT_S = 30.0  # bounds a wait for a client that never reads (never reached: nothing waits here)


class Keeper(asyncio.Protocol):
    """The accepted connection's protocol (TLS's, in the edge): keeps its transport."""

    def __init__(self, made: asyncio.Future[asyncio.Transport]) -> None:
        self.made = made

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.made.set_result(transport)  # type: ignore[arg-type]


class PassingOn(asyncio.WriteTransport):
    """TLS's transport as the hit path sees it for a client that reads: each write passed to the socket's transport
    at once, nothing held, not closing until told of the loss (which these tests never deliver)."""

    def __init__(self, beneath: asyncio.WriteTransport) -> None:
        super().__init__()
        self.beneath = beneath

    def write(self, data: Any) -> None:
        self.beneath.write(bytes(data))

    def get_write_buffer_size(self) -> int:
        return 0

    def is_closing(self) -> bool:
        return False


def reset(client: socket.socket, beneath: asyncio.Transport) -> None:
    """The client resets the connection (RST); returns once the edge's socket has it."""
    client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    client.close()
    poller = select.poll()
    poller.register(beneath.get_extra_info("socket").fileno(), select.POLLERR | select.POLLHUP)
    assert poller.poll(int(SEND_TIMEOUT_S * 1000)), "the reset never reached the edge's socket"


async def lost_while_writing(noticed_by: str,
                             write: Callable[[asyncio.WriteTransport, Drain, Progress], Awaitable[None]]) -> Progress:
    """A connection whose client resets before `write` writes to it; the reset `noticed_by` the socket's transport
    reading ("read", before the write starts) or only by its first write ("write"): what `write` counted as sent."""
    loop = asyncio.get_running_loop()
    made: asyncio.Future[asyncio.Transport] = loop.create_future()
    server = await loop.create_server(lambda: Keeper(made), "127.0.0.1", 0)
    client = socket.create_connection(server.sockets[0].getsockname()[:2])
    try:
        beneath = await made
        if noticed_by == "write":
            beneath.pause_reading()
        reset(client, beneath)
        if noticed_by == "read":
            async def closing() -> bool:
                return beneath.is_closing()
            await wait_until(closing, "the socket's transport read the reset")
        drain = Drain()
        drain.beneath = beneath
        progress = Progress()
        with pytest.raises(ConnectionResetError):
            await write(PassingOn(beneath), drain, progress)
        return progress
    finally:
        client.close()
        server.close()
        await server.wait_closed()


@pytest.mark.parametrize("noticed_by", ["read", "write"])
def test_a_file_written_after_the_reset_is_not_counted_as_sent(noticed_by: str) -> None:
    with tempfile.TemporaryFile() as file:
        file.write(BODY)
        file.flush()

        async def write(transport: asyncio.WriteTransport, drain: Drain, progress: Progress) -> None:
            await write_file(transport, drain, file.fileno(), 0, len(BODY), progress, SEND_TIMEOUT_S)

        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            progress = runner.run(lost_while_writing(noticed_by, write))
    assert progress.sent == 0


@pytest.mark.parametrize("noticed_by", ["read", "write"])
def test_a_body_in_memory_written_after_the_reset_is_not_counted_as_sent(noticed_by: str) -> None:
    async def write(transport: asyncio.WriteTransport, drain: Drain, progress: Progress) -> None:
        await write_views(transport, drain, [memoryview(BODY)], progress, SEND_TIMEOUT_S)

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        progress = runner.run(lost_while_writing(noticed_by, write))
    assert progress.sent == 0

