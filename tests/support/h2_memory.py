"""Connections to a hit server's protocols in this process, on a memory transport, answers read as `Response`s: HTTP/2
to its H2Protocol (assetcdn/edge/tls/h2.py, the `h2` library as the client), and HTTP/1.1 to its HitProtocol
(assetcdn/edge/fastpath/protocol.py) as the https site's hit server sees a TLS connection (TLS is below it)."""

from __future__ import annotations

import asyncio
import ssl
from typing import Any

import h2.config
import h2.connection
import h2.events

from assetcdn.edge.fastpath.hit_server import HitServer
from assetcdn.edge.tls.h2 import H2Limits, H2Protocol
from tests.support.hit_cdn import Response, parse_head, request_bytes
from tests.support.wait import wait_until


class MemoryTransport(asyncio.Transport):
    """What H2Protocol writes, for the test's client to read; `secure`: it stands for TLS, as the https site's
    connections are (the application reads the request's scheme as https, as it does behind TLS)."""

    def __init__(self, secure: bool = False) -> None:
        super().__init__()
        self.sslcontext = ssl.create_default_context() if secure else None
        self.written = bytearray()
        self.closed = False
        self.reading = True  # the protocol has not paused reading (or resumed it since)
        self.writes: list[int] = []  # the size of each write

    def write(self, data: Any) -> None:
        self.written += data
        self.writes.append(len(data))

    def take(self) -> bytes:
        data, self.written = bytes(self.written), bytearray()
        return data

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "sslcontext":
            return self.sslcontext or default
        return ("127.0.0.1", 40000) if name == "peername" else default

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True


class H2InProcess:
    """One HTTP/2 connection to the hit server's H2Protocol, frames passed in memory."""

    def __init__(self, hits: HitServer) -> None:
        self.transport = MemoryTransport(hits.secure)
        self.server = H2Protocol(hits, H2Limits())
        self.server.connection_made(self.transport)
        self.client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding=None))
        self.client.initiate_connection()
        self.answers: dict[int, list[Any]] = {}
        self.resets: dict[int, int] = {}  # the error codes of the streams the server reset, where `get` allows it
        self.last_stream = 0
        self.stalled: set[int] = set()  # streams whose DATA is not read: their window never given back

    def exchange(self) -> None:
        out = self.client.data_to_send()
        if out:
            self.server.data_received(out)
        received = self.transport.take()
        for event in self.client.receive_data(received) if received else ():
            if isinstance(event, h2.events.ResponseReceived):
                self.answers[event.stream_id][0] = event.headers
            elif isinstance(event, h2.events.DataReceived):
                self.answers[event.stream_id][1] += event.data
                if event.stream_id in self.stalled:  # the connection's window back, never the stream's
                    self.client.increment_flow_control_window(event.flow_controlled_length)
                else:
                    self.client.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, h2.events.StreamEnded):
                self.answers[event.stream_id][2] = True
            elif isinstance(event, h2.events.StreamReset):
                if event.stream_id not in self.resets:
                    raise AssertionError(f"stream {event.stream_id} reset: {event.error_code!r}")
                self.resets[event.stream_id] = event.error_code
                self.answers[event.stream_id][2] = True

    def stall(self, path: str) -> int:
        """Ask for `path` on a stream whose answer this client then does not read (its id)."""
        stream_id = self.client.get_next_available_stream_id()
        self.answers[stream_id] = [None, bytearray(), False]
        self.stalled.add(stream_id)
        self.client.send_headers(stream_id, [(b":method", b"GET"), (b":scheme", b"https"), (b":path", path.encode()),
                                             (b":authority", b"edge.test")], end_stream=True)
        self.exchange()
        return stream_id

    async def get(self, path: str, fields: list[tuple[str, str]], method: str = "GET", *,
                  may_reset: bool = False, authority: str = "edge.test") -> Response:
        """The stream's answer; with `may_reset` a reset by the server ends it too (its code in `resets`, under
        `last_stream`, the id of the stream asked last); `authority`: the host asked."""
        stream_id = self.last_stream = self.client.get_next_available_stream_id()
        self.answers[stream_id] = [None, bytearray(), False]
        if may_reset:
            self.resets[stream_id] = -1
        self.client.send_headers(stream_id, [(b":method", method.encode()), (b":scheme", b"https"),
                                             (b":path", path.encode()),
                                             (b":authority", authority.encode()),
                                             *((k.encode(), v.encode()) for k, v in fields)], end_stream=True)

        async def ended() -> bool:
            self.exchange()
            return bool(self.answers[stream_id][2])

        await wait_until(ended, f"the answer to {path}")
        head, body, _ = self.answers.pop(stream_id)
        headers = {bytes(k).decode(): bytes(v).decode() for k, v in head or ()}
        status = int(headers.pop(":status", "0"))  # 0: reset before any head
        return Response(status, "", headers, bytes(body))  # type: ignore[arg-type]


class MemoryHttp11:
    """One HTTP/1.1 connection to a hit server's HitProtocol, bytes passed in memory, one request at a time."""

    def __init__(self, hits: HitServer) -> None:
        self.transport = MemoryTransport(hits.secure)
        self.protocol = hits.protocol()
        self.protocol.connection_made(self.transport)
        self.received = b""

    async def request(self, path: str, method: str = "GET", **headers: str) -> Response:
        return (await self.pipelined([path], method, **headers))[0]

    async def pipelined(self, paths: list[str], method: str = "GET", **headers: str) -> list[Response]:
        """The answers to GETs (or `method`) of `paths`, sent in one read."""
        self.protocol.data_received(b"".join(request_bytes(path, method, **headers) for path in paths))
        answers: list[Response] = []

        async def complete() -> bool:
            self.received += self.transport.take()
            while len(answers) < len(paths) and (parsed := self._parse(method)) is not None:
                answers.append(parsed)
            return len(answers) == len(paths)

        await wait_until(complete, f"the answers to {paths[0]} and the rest")
        return answers

    def _parse(self, method: str) -> Response | None:
        """The first whole answer received (taken off `received`), or None while it is not all there."""
        end = self.received.find(b"\r\n\r\n")
        if end < 0:
            return None
        head = self.received[:end + 4]
        status, reason, headers = parse_head(head)
        length = 0 if method == "HEAD" or status in (204, 304) else int(headers.get("Content-Length", "0"))
        if len(self.received) < end + 4 + length:
            return None
        body = self.received[end + 4:end + 4 + length]
        self.received = self.received[end + 4 + length:]
        return Response(status, reason, headers, body, head)
