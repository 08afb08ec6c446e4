"""A flooding client of the edge's https port, run as its own process so that its CPU and its GIL are not the
probing test's (tests/edge/tls/test_tls_floods.py):

    python -m tests.edge.tls.flood KIND PORT HOST PATH

KIND is ``ping``, ``settings``, ``window_update`` or ``priority`` (HTTP/2 frames built by hand, as fast as the socket takes
them) or ``pipelined`` (HTTP/1.1 HEADs of PATH over TLS: hits with the smallest answers, the most requests a
read can carry). One connection at a time: when the edge closes it, the next one starts. What comes back is
read and discarded. Prints ``flooding`` once the first connection has sent its first burst, then runs until
killed.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
import sys

from tests.edge.tls.client import client_context

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
BURST = 1000  # frames (or requests) per write


def frame(kind: int, payload: bytes, *, flags: int = 0, stream_id: int = 0) -> bytes:
    return struct.pack(">I", len(payload))[1:] + bytes((kind, flags)) + struct.pack(">I", stream_id) + payload


def burst(kind: str, host: str, path: str) -> bytes:
    if kind == "ping":
        return frame(0x6, b"floodpng") * BURST
    if kind == "settings":
        return frame(0x4, struct.pack(">HI", 0x2, 0)) * BURST  # ENABLE_PUSH = 0, again and again
    if kind == "window_update":
        return frame(0x8, struct.pack(">I", 1)) * BURST  # the connection's window, one byte at a time
    if kind == "priority":  # RFC 7540 priorities of idle streams, depending on nothing
        return b"".join(frame(0x2, struct.pack(">IB", 0, 16), stream_id=2 * i + 1) for i in range(BURST))
    if kind == "pipelined":
        return f"HEAD {path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode() * BURST
    raise SystemExit(f"unknown flood {kind!r}")


async def discard(reader: asyncio.StreamReader) -> None:
    with contextlib.suppress(OSError, asyncio.IncompleteReadError):
        while await reader.read(1 << 16):
            pass


async def flood(kind: str, port: int, data: bytes) -> None:
    announced = False
    alpn = ("http/1.1",) if kind == "pipelined" else ("h2",)
    context = client_context(None, alpn=alpn)
    while True:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context,
                                                           server_hostname="localhost")
        except OSError:
            continue
        reading = asyncio.create_task(discard(reader))
        try:
            if kind != "pipelined":
                writer.write(PREFACE + frame(0x4, b""))
            while not reading.done():
                writer.write(data)
                await writer.drain()
                if not announced:
                    announced = True
                    sys.stdout.write("flooding\n")
                    sys.stdout.flush()
        except OSError:
            pass
        finally:
            writer.close()
            reading.cancel()
            with contextlib.suppress(BaseException):
                await reading


def main() -> None:
    kind, port, host, path = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    asyncio.run(flood(kind, port, burst(kind, host, path)))


if __name__ == "__main__":
    main()
