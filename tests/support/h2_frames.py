"""A raw HTTP/2 client for conformance tests (tests/edge/tls/test_h2_conformance.py): frames built from bytes, so
that it can send what no conforming library would (bad lengths, bad stream ids, broken HPACK), and reads of what
the server answers, each bounded by a deadline. Its verifications follow h2spec's (github.com/summerwind/h2spec,
spec/verifier.go), except that a GOAWAY or RST_STREAM with another error code than the one expected fails the
case, where h2spec would still pass it if the connection then closes."""

from __future__ import annotations

import socket
import ssl
import struct
import time
from dataclasses import dataclass, field

import hpack

from tests.edge.tls.client import client_context

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
WAIT_S = 15.0   # bounds a wait for the server's answer; a passing case returns as soon as it arrives

DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = range(10)
FRAME_NAMES = ("DATA", "HEADERS", "PRIORITY", "RST_STREAM", "SETTINGS", "PUSH_PROMISE", "PING", "GOAWAY",
               "WINDOW_UPDATE", "CONTINUATION")
END_STREAM, ACK, END_HEADERS, PADDED, PRIORITY_FLAG = 0x1, 0x1, 0x4, 0x8, 0x20

NO_ERROR, PROTOCOL_ERROR, INTERNAL_ERROR, FLOW_CONTROL_ERROR = 0x0, 0x1, 0x2, 0x3
STREAM_CLOSED, FRAME_SIZE_ERROR, REFUSED_STREAM, CANCEL, COMPRESSION_ERROR = 0x5, 0x6, 0x7, 0x8, 0x9
ERROR_NAMES = {0x0: "NO_ERROR", 0x1: "PROTOCOL_ERROR", 0x2: "INTERNAL_ERROR", 0x3: "FLOW_CONTROL_ERROR",
               0x4: "SETTINGS_TIMEOUT", 0x5: "STREAM_CLOSED", 0x6: "FRAME_SIZE_ERROR", 0x7: "REFUSED_STREAM",
               0x8: "CANCEL", 0x9: "COMPRESSION_ERROR", 0xa: "CONNECT_ERROR", 0xb: "ENHANCE_YOUR_CALM"}

HEADER_TABLE_SIZE, ENABLE_PUSH, MAX_CONCURRENT_STREAMS, INITIAL_WINDOW_SIZE, MAX_FRAME_SIZE, MAX_HEADER_LIST_SIZE = (
    range(1, 7))
DEFAULT_WINDOW = 65535
DEFAULT_FRAME_SIZE = 16384


def frame(kind: int, payload: bytes, *, flags: int = 0, stream_id: int = 0) -> bytes:
    return struct.pack(">I", len(payload))[1:] + bytes((kind, flags)) + struct.pack(">I", stream_id) + payload


def error_name(code: int) -> str:
    return ERROR_NAMES.get(code, hex(code))


@dataclass(frozen=True)
class Frame:
    kind: int
    flags: int
    stream_id: int
    payload: bytes

    @property
    def error_code(self) -> int:
        """The error code of a RST_STREAM or GOAWAY frame."""
        return int(struct.unpack(">I", self.payload[:4] if self.kind == RST_STREAM else self.payload[4:8])[0])

    def __str__(self) -> str:
        name = FRAME_NAMES[self.kind] if self.kind < len(FRAME_NAMES) else hex(self.kind)
        detail = f" ({error_name(self.error_code)})" if self.kind in (RST_STREAM, GOAWAY) else ""
        return f"{name}{detail} length {len(self.payload)} flags {self.flags:#x} stream {self.stream_id}"


class CaseFailed(AssertionError):
    """The server did not answer as the case requires: what it was expected to send, and what it sent."""

    def __init__(self, expected: str, seen: list[str]) -> None:
        super().__init__(f"expected {expected}; the server sent: {', '.join(seen) or 'nothing'}")


@dataclass
class Target:
    """An HTTP/2 server over TLS on loopback, and a path it answers with a body of at least 5 bytes."""

    name: str
    port: int
    path: str

    @property
    def authority(self) -> str:
        return f"localhost:{self.port}"


@dataclass
class Conn:
    """One TLS connection speaking raw HTTP/2 (the client side)."""

    target: Target
    sock: ssl.SSLSocket = field(init=False)
    encoder: hpack.Encoder = field(init=False, default_factory=hpack.Encoder)
    settings: dict[int, int] = field(init=False, default_factory=dict)  # the server's
    closed: bool = field(init=False, default=False)
    seen: list[str] = field(init=False, default_factory=list)  # what was read, for the failure message
    _buffer: bytes = field(init=False, default=b"")

    def __post_init__(self) -> None:
        raw = socket.create_connection(("127.0.0.1", self.target.port), timeout=WAIT_S)
        self.sock = client_context(None, alpn=("h2",)).wrap_socket(raw, server_hostname="localhost")
        assert self.sock.selected_alpn_protocol() == "h2"

    def close(self) -> None:
        self.sock.close()

    # --- sending (errors ignored: the server may already have closed, as the case expects) -----------------

    def send(self, data: bytes) -> None:
        try:
            self.sock.sendall(data)
        except OSError:
            pass

    def write(self, kind: int, payload: bytes, *, flags: int = 0, stream_id: int = 0) -> None:
        self.send(frame(kind, payload, flags=flags, stream_id=stream_id))

    def common_headers(self, method: str = "GET") -> list[tuple[str, str]]:
        return [(":method", method), (":scheme", "https"), (":path", self.target.path),
                (":authority", self.target.authority)]

    def encode(self, headers: list[tuple[str, str]]) -> bytes:
        return bytes(self.encoder.encode(headers))

    def headers(self, stream_id: int, block: bytes, *, end_stream: bool = True, end_headers: bool = True,
                priority: tuple[int, int, bool] | None = None, pad: int | None = None) -> None:
        """A HEADERS frame; ``priority`` is (dependency, weight byte, exclusive)."""
        flags = (END_STREAM if end_stream else 0) | (END_HEADERS if end_headers else 0)
        payload = block
        if priority is not None:
            dependency, weight, exclusive = priority
            flags |= PRIORITY_FLAG
            payload = struct.pack(">IB", dependency | (0x80000000 if exclusive else 0), weight) + payload
        if pad is not None:
            flags |= PADDED
            payload = bytes((pad,)) + payload + bytes(pad)
        self.write(HEADERS, payload, flags=flags, stream_id=stream_id)

    def request(self, stream_id: int, method: str = "GET", *, end_stream: bool = True,
                extra: list[tuple[str, str]] | None = None) -> None:
        self.headers(stream_id, self.encode(self.common_headers(method) + (extra or [])), end_stream=end_stream)

    def data(self, stream_id: int, payload: bytes, *, end_stream: bool = True, pad: int | None = None) -> None:
        flags = END_STREAM if end_stream else 0
        if pad is not None:
            flags |= PADDED
            payload = bytes((pad,)) + payload + bytes(pad)
        self.write(DATA, payload, flags=flags, stream_id=stream_id)

    def continuation(self, stream_id: int, block: bytes, *, end_headers: bool = True) -> None:
        self.write(CONTINUATION, block, flags=END_HEADERS if end_headers else 0, stream_id=stream_id)

    def priority(self, stream_id: int, dependency: int, weight: int, exclusive: bool = False) -> None:
        self.write(PRIORITY, struct.pack(">IB", dependency | (0x80000000 if exclusive else 0), weight),
                   stream_id=stream_id)

    def rst_stream(self, stream_id: int, code: int) -> None:
        self.write(RST_STREAM, struct.pack(">I", code), stream_id=stream_id)

    def write_settings(self, *pairs: tuple[int, int]) -> None:
        self.write(SETTINGS, b"".join(struct.pack(">HI", key, value) for key, value in pairs))

    def ping(self, data: bytes, *, ack: bool = False) -> None:
        self.write(PING, data, flags=ACK if ack else 0)

    def goaway(self, last_stream_id: int, code: int, debug: bytes = b"") -> None:
        self.write(GOAWAY, struct.pack(">II", last_stream_id, code) + debug)

    def window_update(self, stream_id: int, increment: int) -> None:
        self.write(WINDOW_UPDATE, struct.pack(">I", increment), stream_id=stream_id)

    def dummy_headers(self, count: int, length: int = 4000) -> list[tuple[str, str]]:
        """h2spec's DummyHeaders: ``count`` fields of ``length`` bytes each (its default --max-header-length)."""
        return [(f"x-dummy{i}", "x" * length) for i in range(count)]

    # --- reading ---------------------------------------------------------------------------------------------

    def next_frame(self, deadline: float) -> Frame | None:
        """The next frame the server sends; None once the connection is closed. Fails past ``deadline``."""
        while True:
            if len(self._buffer) >= 9:
                length = int.from_bytes(self._buffer[:3], "big")
                if len(self._buffer) >= 9 + length:
                    kind, flags = self._buffer[3], self._buffer[4]
                    stream_id = int.from_bytes(self._buffer[5:9], "big") & 0x7FFFFFFF
                    received = Frame(kind, flags, stream_id, self._buffer[9:9 + length])
                    self._buffer = self._buffer[9 + length:]
                    self.seen.append(str(received))
                    return received
            if self.closed:
                return None
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            self.sock.settimeout(remaining)
            try:
                chunk = self.sock.recv(65536)
            except TimeoutError:
                raise TimeoutError from None
            except (ConnectionError, ssl.SSLError):  # a reset, or a close without close_notify
                chunk = b""
            if not chunk:
                self.closed = True
                self.seen.append("connection closed")
            self._buffer += chunk

    def wait(self, expected: str, accept: object) -> Frame | None:
        """Read until ``accept(frame or None)`` is True (it may raise CaseFailed at once); the frame accepted."""
        deadline = time.monotonic() + WAIT_S
        try:
            while True:
                received = self.next_frame(deadline)
                if accept(received):  # type: ignore[operator]
                    return received
                if received is None:
                    raise CaseFailed(expected, self.seen)
        except TimeoutError:
            self.seen.append(f"nothing more for {WAIT_S:.0f} s")
            raise CaseFailed(expected, self.seen) from None

    def handshake(self) -> None:
        """The preface and SETTINGS exchange, as h2spec's: ours (INITIAL_WINDOW_SIZE 65535) acknowledged, the
        server's received and acknowledged."""
        self.send(PREFACE)
        self.write_settings((INITIAL_WINDOW_SIZE, DEFAULT_WINDOW))
        state = {"local": False, "remote": False}

        def settled(received: Frame | None) -> bool:
            if received is not None and received.kind == SETTINGS:
                if received.flags & ACK:
                    state["local"] = True
                else:
                    state["remote"] = True
                    for offset in range(0, len(received.payload) - 5, 6):
                        key, value = struct.unpack(">HI", received.payload[offset:offset + 6])
                        self.settings[key] = value
                    self.write(SETTINGS, b"", flags=ACK)
            return state["local"] and state["remote"]

        self.wait("the server's SETTINGS and the acknowledgement of ours", settled)
        self.seen.clear()

    # --- verifications (h2spec's spec/verifier.go) -----------------------------------------------------------

    def connection_error(self, *codes: int) -> None:
        """GOAWAY with one of ``codes``, or the connection closed."""
        expected = " or ".join(f"GOAWAY {error_name(code)}" for code in codes) + " or a connection close"

        def accept(received: Frame | None) -> bool:
            if received is None:
                return True
            if received.kind == GOAWAY:
                if received.error_code not in codes:
                    raise CaseFailed(expected, self.seen)
                return True
            return False
        self.wait(expected, accept)

    def stream_error(self, *codes: int) -> None:
        """RST_STREAM or GOAWAY with one of ``codes``, or the connection closed."""
        expected = " or ".join(f"RST_STREAM/GOAWAY {error_name(code)}" for code in codes) + " or a connection close"

        def accept(received: Frame | None) -> bool:
            if received is None:
                return True
            if received.kind in (RST_STREAM, GOAWAY):
                if received.error_code not in codes:
                    raise CaseFailed(expected, self.seen)
                return True
            return False
        self.wait(expected, accept)

    def connection_close(self) -> None:
        self.wait("the connection closed", lambda received: received is None)

    def stream_close(self) -> None:
        """The stream ended by the server: END_STREAM on DATA or HEADERS, or RST_STREAM NO_ERROR."""
        self.wait("the stream ended (END_STREAM, or RST_STREAM NO_ERROR)", lambda received: received is not None and (
            received.kind in (DATA, HEADERS) and received.flags & END_STREAM
            or received.kind == RST_STREAM and received.error_code == NO_ERROR))

    def headers_frame(self, stream_id: int) -> None:
        """A HEADERS frame: the first one the server sends must be on ``stream_id``."""
        def accept(received: Frame | None) -> bool:
            if received is not None and received.kind == HEADERS:
                if received.stream_id != stream_id:
                    raise CaseFailed(f"HEADERS on stream {stream_id}", self.seen)
                return True
            return False
        self.wait(f"HEADERS on stream {stream_id}", accept)

    def frame_of(self, kind: int) -> Frame:
        received = self.wait(FRAME_NAMES[kind], lambda received: received is not None and received.kind == kind)
        assert received is not None
        return received

    def data_frame(self, length: int) -> None:
        """The first DATA frame the server sends is ``length`` bytes long."""
        received = self.frame_of(DATA)
        if len(received.payload) != length:
            raise CaseFailed(f"DATA of length {length}", self.seen)

    def settings_ack(self) -> None:
        self.wait("SETTINGS with ACK", lambda received: received is not None and received.kind == SETTINGS
                  and bool(received.flags & ACK))

    def ping_ack(self, data: bytes, *, or_close: bool = False) -> None:
        """PING with ACK and ``data`` (or, with ``or_close``, the connection closed); another PING fails."""
        expected = "PING with ACK and the same payload" + (" or a connection close" if or_close else "")

        def accept(received: Frame | None) -> bool:
            if received is None:
                return or_close
            if received.kind == PING:
                if not received.flags & ACK or received.payload != data:
                    raise CaseFailed(expected, self.seen)
                return True
            return False
        self.wait(expected, accept)
