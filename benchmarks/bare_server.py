"""The floor of a Python hit server, for benchmarks/hits_bench.py: nothing but the answer.

    .venv/bin/python -m benchmarks.bare_server --port 8080 --dir DIR

An ``asyncio.Protocol`` on uvloop with ``httptools``, serving every regular file under ``DIR`` as
``GET /<relative path>``: a precomputed response head; a body under 64 KB from memory (one
``writelines``), larger ones with ``sendfile(2)`` from the file, with the edge's own code (assetcdn/edge/fastpath/sendfile.py). No
Date, no request id, no metrics, no log, no cache lookup but one dict: what is left is the kernel,
uvloop and httptools, the cost every Python server pays per request. So its per-core rate is the
most the edge can reach, and its 1 MB rate is this machine's ceiling for a server sending from a
file over loopback. Anything but a known path gets a 404; a malformed request closes the connection.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
from pathlib import Path

import httptools
import uvloop

from assetcdn.edge.fastpath.sendfile import Drain, Progress, send_file, send_file_nowait

SENDFILE_MIN = 64 * 1024
NOT_FOUND = b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"


class Entry:
    __slots__ = ("head", "body", "path", "size")

    def __init__(self, path: Path) -> None:
        self.size = path.stat().st_size
        self.path = str(path)
        self.head = (b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nX-Cache: HIT\r\n"
                     b"Content-Length: %d\r\n\r\n" % self.size)
        self.body = path.read_bytes() if self.size < SENDFILE_MIN else None


class Bare(asyncio.Protocol):
    def __init__(self, files: dict[bytes, Entry]) -> None:
        self.files = files
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.url = b""
        self.out: list[bytes] = []
        self.queue: list[Entry | None] = []  # requests parsed, in order, not answered yet
        self.sending = False
        self.drain = Drain()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def on_url(self, url: bytes) -> None:
        self.url = url

    def on_message_complete(self) -> None:
        self.queue.append(self.files.get(self.url))

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            assert self.transport is not None
            self.transport.close()
            return
        self.flush()

    def flush(self) -> None:
        transport = self.transport
        if transport is None or self.sending:
            return
        queue, self.queue = self.queue, []
        while queue:
            entry = queue.pop(0)
            if entry is None:
                self.out.append(NOT_FOUND)
                continue
            self.out.append(entry.head)
            if entry.body is not None:
                self.out.append(entry.body)
                continue
            transport.writelines(self.out)
            self.out = []
            fileno = os.open(entry.path, os.O_RDONLY | os.O_CLOEXEC)
            sent = 0
            if not transport.get_write_buffer_size():  # as the edge does: all of it now when the socket takes it
                try:
                    sent = send_file_nowait(transport, fileno, 0, entry.size, Progress())
                except OSError:
                    os.close(fileno)
                    transport.abort()
                    return
            if sent == entry.size:
                os.close(fileno)
                continue
            self.sending = True
            self.queue = queue + self.queue
            transport.pause_reading()
            asyncio.get_running_loop().create_task(self.send_rest(fileno, sent, entry.size - sent))
            return
        if self.out:
            transport.writelines(self.out)
            self.out = []

    async def send_rest(self, fileno: int, offset: int, count: int) -> None:
        transport = self.transport
        try:
            if transport is None:
                return
            await send_file(transport, self.drain, fileno, offset, count, Progress())
        except (ConnectionError, OSError):
            if self.transport is not None:
                self.transport.abort()
            return
        finally:
            os.close(fileno)
        self.sending = False
        if self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()
            self.flush()

    def pause_writing(self) -> None:
        self.drain.pause_writing()

    def resume_writing(self) -> None:
        self.drain.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self.drain.connection_lost()


def load(directory: Path) -> dict[bytes, Entry]:
    return {b"/" + str(path.relative_to(directory)).encode(): Entry(path)
            for path in directory.rglob("*") if path.is_file()}


async def serve(port: int, directory: Path) -> None:
    files = load(directory)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: Bare(files), "127.0.0.1", port, backlog=1024)
    stop = loop.create_future()
    loop.add_signal_handler(signal.SIGTERM, stop.set_result, None)
    loop.add_signal_handler(signal.SIGINT, stop.set_result, None)
    await stop
    server.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--dir", type=Path, required=True)
    args = parser.parse_args(argv)
    uvloop.run(serve(args.port, args.dir))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
