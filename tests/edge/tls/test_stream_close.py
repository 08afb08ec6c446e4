"""How an HTTP/2 stream ends when its HTTP/1.1 side closes (assetcdn/edge/tls/h2.py `StreamTransport.close`), for
each shape of answer written to it: a complete answer ends the stream (END_STREAM), one cut short of its declared
length, its last chunk or its head is reset, so that no client takes a truncated body as whole."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from ngh2 import ErrorCode

from assetcdn.edge.tls.h2 import StreamTransport

SIZED = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n"
CHUNKED = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


class Connection:
    """What a stream tells its HTTP/2 connection, recorded."""

    def __init__(self) -> None:
        self.pending_total = 0
        self.resets: list[ErrorCode] = []

    def pump(self, stream: StreamTransport) -> None:
        pass

    def reset(self, stream: StreamTransport, code: ErrorCode) -> None:
        self.resets.append(code)
        stream.finished(True)

    def send_headers(self, stream: StreamTransport, headers: Any, end_stream: bool) -> None:
        pass

    def stream_done(self, stream: StreamTransport) -> None:
        pass


WHOLE: dict[str, tuple[bytes, list[bytes | memoryview]]] = {
    "a sized body in one write": (b"GET", [SIZED + b"hello"]),
    "a sized body after its head": (b"GET", [SIZED, b"hel", b"lo"]),
    "a head split over two writes": (b"GET", [SIZED[:20], SIZED[20:], b"hello"]),
    "a sized body as a view": (b"GET", [SIZED, memoryview(b"xhello")[1:]]),
    "Content-Length: 0": (b"GET", [b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"]),
    "a 304 with a length": (b"GET", [b"HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\n\r\n"]),
    "a 204": (b"GET", [b"HTTP/1.1 204 No Content\r\n\r\n"]),
    "a HEAD's answer": (b"HEAD", [SIZED]),
    "a whole chunked body": (b"GET", [CHUNKED, b"5\r\nhello\r\n", b"0\r\n\r\n"]),
    "100 Continue, then the answer": (b"GET", [CONTINUE, SIZED + b"hello"]),
    "a body delimited by the close": (b"GET", [b"HTTP/1.1 200 OK\r\n\r\n", b"abc"]),
    "a body coded identity, delimited by the close": (
        b"GET", [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: identity\r\n\r\n", b"abc"]),
}
CUT_SHORT: dict[str, tuple[bytes, list[bytes | memoryview]]] = {
    "a sized body short": (b"GET", [SIZED, b"hel"]),
    "a sized head alone": (b"GET", [SIZED]),
    "a chunked body without its last chunk": (b"GET", [CHUNKED, b"5\r\nhello\r\n"]),
    "half a head": (b"GET", [b"HTTP/1.1 200 OK\r\nContent-"]),
    "only 100 Continue": (b"GET", [CONTINUE]),
}


def closed_after(method: bytes, writes: list[bytes | memoryview]) -> tuple[list[ErrorCode], bool]:
    """The resets a stream sent and whether it ended, once `writes` were written to it and it was closed."""
    async def run() -> tuple[list[ErrorCode], bool]:
        connection = Connection()
        stream = StreamTransport(connection, 1, method)  # type: ignore[arg-type]
        for data in writes:
            stream.write(data)
        stream.close()
        return connection.resets, stream.ended or stream.end_pending

    return asyncio.run(run())


@pytest.mark.parametrize("shape", list(WHOLE))
def test_a_complete_answer_ends_its_stream(shape: str) -> None:
    assert closed_after(*WHOLE[shape]) == ([], True)


@pytest.mark.parametrize("shape", list(CUT_SHORT))
def test_an_answer_cut_short_resets_its_stream(shape: str) -> None:
    resets, _ = closed_after(*CUT_SHORT[shape])
    assert resets == [ErrorCode.INTERNAL_ERROR]
