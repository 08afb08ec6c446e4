"""An HTTP/2 connection to a hit server's H2Protocol in this process (assetcdn/edge/tls/h2.py on a memory transport,
the `h2` library as the client): frames passed in memory, answers read as `Response`s."""

from __future__ import annotations

import asyncio
from typing import Any

import h2.config
import h2.connection
import h2.events

from assetcdn.edge.fastpath.hit_server import HitServer
from assetcdn.edge.tls.h2 import H2Limits, H2Protocol
from tests.support.hit_cdn import Response
from tests.support.wait import wait_until


class MemoryTransport(asyncio.Transport):
    """What H2Protocol writes, for the test's client to read."""

    def __init__(self) -> None:
        super().__init__()
        self.written = bytearray()
        self.closed = False

    def write(self, data: Any) -> None:
        self.written += data

    def take(self) -> bytes:
        data, self.written = bytes(self.written), bytearray()
        return data

    def get_extra_info(self, name: str, default: Any = None) -> Any:
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
        pass

    def resume_reading(self) -> None:
        pass


class H2InProcess:
    """One HTTP/2 connection to the hit server's H2Protocol, frames passed in memory."""

    def __init__(self, hits: HitServer) -> None:
        self.transport = MemoryTransport()
        self.server = H2Protocol(hits, H2Limits())
        self.server.connection_made(self.transport)
        self.client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding=None))
        self.client.initiate_connection()
        self.answers: dict[int, list[Any]] = {}

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
                self.client.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, h2.events.StreamEnded):
                self.answers[event.stream_id][2] = True
            elif isinstance(event, h2.events.StreamReset):
                raise AssertionError(f"stream {event.stream_id} reset: {event.error_code!r}")

    async def get(self, path: str, fields: list[tuple[str, str]], method: str = "GET") -> Response:
        stream_id = self.client.get_next_available_stream_id()
        self.answers[stream_id] = [None, bytearray(), False]
        self.client.send_headers(stream_id, [(b":method", method.encode()), (b":scheme", b"https"),
                                             (b":path", path.encode()),
                                             (b":authority", b"edge.test"),
                                             *((k.encode(), v.encode()) for k, v in fields)], end_stream=True)

        async def ended() -> bool:
            self.exchange()
            return bool(self.answers[stream_id][2])

        await wait_until(ended, f"the answer to {path}")
        head, body, _ = self.answers.pop(stream_id)
        headers = {bytes(k).decode(): bytes(v).decode() for k, v in head}
        return Response(int(headers.pop(":status")), "", headers, bytes(body))  # type: ignore[arg-type]
