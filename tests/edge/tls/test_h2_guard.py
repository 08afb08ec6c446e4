"""The stream rules checked in front of libnghttp2 (assetcdn/edge/tls/h2_guard.py), and what they must leave alone.

The rules themselves are h2spec's cases (tests/edge/tls/test_h2_conformance.py). Here, through a real `assetcdn up`
with raw frames (tests/support/h2_frames.py): frames a client sends in flight after the edge reset or refused its
stream, trailers, frames cut at every byte, and a long connection are all served; and, on ``FrameGuard`` with a real
libnghttp2 connection: what the library is given does not depend on how the reads split the frames, and the
streams remembered stay bounded however many a connection opens.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

import hpack
import ngh2
import pytest
from ngh2 import ErrorCode

from assetcdn.edge.tls.h2_guard import HEAD_SIZE, RESET_KEPT, SKIPPED_KEPT, SWEEP_MIN, FrameGuard
from tests.support.h2_frames import (
    ACK,
    DATA,
    DEFAULT_WINDOW,
    END_HEADERS,
    END_STREAM,
    FLOW_CONTROL_ERROR,
    GOAWAY,
    HEADERS,
    INITIAL_WINDOW_SIZE,
    MAX_CONCURRENT_STREAMS,
    PING,
    PREFACE,
    PRIORITY,
    PROTOCOL_ERROR,
    REFUSED_STREAM,
    RST_STREAM,
    SETTINGS,
    WINDOW_UPDATE,
    CaseFailed,
    Conn,
    Frame,
    Target,
    frame,
)
from tests.support.https import MAX_RESETS, ZONE, HttpsCdn

BODY = b"a hit on a connection the guard reads\n" * 32
FILE = "guard/index.txt"
BIG_WINDOW = 2**30   # the connection window a test gives the edge: answers never wait for it
SEQUENTIAL = 1200    # streams one after the other on one connection


# ============================ through the edge ============================

@pytest.fixture(scope="module")
def target(https_cdn: HttpsCdn) -> Target:
    https_cdn.upload(FILE, BODY)
    return Target("edge", https_cdn.https_port, f"/{ZONE}/{FILE}")


@pytest.fixture
def conn(target: Target) -> Iterator[Conn]:
    opened = Conn(target)
    try:
        yield opened
    finally:
        opened.close()


def body_of(conn: Conn, stream_id: int) -> bytes:
    """The body answered on ``stream_id``; a GOAWAY, a close or a RST_STREAM before its end fails."""
    parts: list[bytes] = []
    expected = f"the body on stream {stream_id}, no GOAWAY or RST_STREAM"

    def accept(received: Frame | None) -> bool:
        if received is None or received.kind == GOAWAY or received.kind == RST_STREAM:
            raise CaseFailed(expected, conn.seen)
        if received.kind == DATA and received.stream_id == stream_id:
            parts.append(received.payload)
            return bool(received.flags & END_STREAM)
        return False
    conn.wait(expected, accept)
    return b"".join(parts)


def reset_of(conn: Conn, stream_id: int) -> int:
    """The error code of the RST_STREAM the edge sends on ``stream_id`` (a GOAWAY or a close first fails)."""
    def accept(received: Frame | None) -> bool:
        if received is None or received.kind == GOAWAY:
            raise CaseFailed(f"RST_STREAM on stream {stream_id}", conn.seen)
        return received.kind == RST_STREAM and received.stream_id == stream_id
    received = conn.wait(f"RST_STREAM on stream {stream_id}", accept)
    assert received is not None
    return received.error_code


@pytest.mark.integration
def test_frames_in_flight_after_the_edge_reset_a_stream_are_ignored(conn: Conn) -> None:
    conn.handshake()
    conn.request(1, "POST", end_stream=False, extra=[("content-length", "2")])
    conn.data(1, b"abc", end_stream=False)  # more than its content-length: the stream is reset
    assert reset_of(conn, 1) == PROTOCOL_ERROR
    conn.data(1, b"d", end_stream=False)    # sent before the client read the reset
    conn.headers(1, conn.encode([("x-checksum", "0")]))  # its trailers, END_STREAM
    conn.request(3)
    assert body_of(conn, 3) == BODY


@pytest.mark.integration
def test_a_body_in_flight_on_a_refused_stream_is_ignored(conn: Conn) -> None:
    # The edge's SETTINGS are not acknowledged: a stream past its limit is refused (REFUSED_STREAM), not an error.
    conn.send(PREFACE)
    conn.write_settings((INITIAL_WINDOW_SIZE, DEFAULT_WINDOW))
    settings = conn.wait("the edge's SETTINGS", lambda received: received is not None and received.kind == SETTINGS
                         and not received.flags & ACK)
    assert settings is not None
    pairs = [struct.unpack(">HI", settings.payload[i:i + 6]) for i in range(0, len(settings.payload), 6)]
    limit = next(value for key, value in pairs if key == MAX_CONCURRENT_STREAMS)
    conn.window_update(0, BIG_WINDOW)
    block = conn.encode(conn.common_headers())
    refused = 2 * limit + 1
    conn.send(b"".join(frame(HEADERS, block, flags=END_HEADERS, stream_id=stream_id)
                       for stream_id in range(1, refused + 1, 2)))  # each waits for a body: all stay open
    assert reset_of(conn, refused) == REFUSED_STREAM
    conn.data(refused, b"late body")        # sent before the client read the refusal
    conn.send(b"".join(frame(DATA, b"", flags=END_STREAM, stream_id=stream_id) for stream_id in range(1, refused, 2)))
    answering = set(range(1, refused, 2))

    def all_answered(received: Frame | None) -> bool:  # their streams are closed: a new one is within the limit
        if received is None or received.kind == GOAWAY or received.kind == RST_STREAM:
            raise CaseFailed("the answers of the open streams", conn.seen)
        if received.kind in (DATA, HEADERS) and received.flags & END_STREAM:
            answering.discard(received.stream_id)
        return not answering
    conn.wait("the answers of the open streams", all_answered)
    conn.request(refused + 2)
    assert body_of(conn, refused + 2) == BODY


@pytest.mark.integration
def test_trailers_are_accepted(conn: Conn) -> None:
    conn.handshake()
    conn.request(1, end_stream=False)
    conn.data(1, b"body", end_stream=False)
    conn.headers(1, conn.encode([("x-checksum", "0")]))  # END_STREAM
    assert body_of(conn, 1) == BODY
    conn.request(3)
    assert body_of(conn, 3) == BODY


@pytest.mark.integration
def test_frames_cut_at_every_byte(conn: Conn) -> None:
    def bytewise(data: bytes) -> None:
        for i in range(len(data)):
            conn.send(data[i:i + 1])  # one TLS record each (how many the edge reads at once is up to it)

    bytewise(PREFACE + frame(SETTINGS, struct.pack(">HI", INITIAL_WINDOW_SIZE, DEFAULT_WINDOW)))
    conn.wait("the edge's SETTINGS", lambda received: received is not None and received.kind == SETTINGS)
    bytewise(frame(SETTINGS, b"", flags=ACK) + frame(HEADERS, conn.encode(conn.common_headers()),
                                                     flags=END_HEADERS, stream_id=1)
             + frame(PRIORITY, struct.pack(">IB", 0, 15), stream_id=1)
             + frame(WINDOW_UPDATE, struct.pack(">I", 2**31 - 1), stream_id=1))  # past 2^31-1: a stream error
    assert reset_of(conn, 1) == FLOW_CONTROL_ERROR
    bytewise(frame(DATA, b"in flight", flags=END_STREAM, stream_id=1)
             + frame(HEADERS, conn.encode(conn.common_headers()), flags=END_HEADERS | END_STREAM, stream_id=3))
    assert body_of(conn, 3) == BODY
    bytewise(frame(PING, b"12345678"))
    conn.ping_ack(b"12345678")


@pytest.mark.integration
def test_a_long_connection_is_served_to_its_end(conn: Conn) -> None:
    conn.handshake()
    conn.window_update(0, BIG_WINDOW)
    for stream_id in range(1, 2 * SEQUENTIAL, 2):  # each with a body: each is remembered until it ends
        conn.send(frame(HEADERS, conn.encode(conn.common_headers()), flags=END_HEADERS, stream_id=stream_id)
                  + frame(DATA, b"", flags=END_STREAM, stream_id=stream_id))
        assert body_of(conn, stream_id) == BODY, stream_id


@pytest.mark.integration
def test_streams_reset_for_the_clients_frames_count_as_its_resets(conn: Conn) -> None:
    """A client making the edge reset streams (here by overflowing their windows: "MadeYouReset") is ended as one
    resetting them itself."""
    conn.handshake()
    block = conn.encode(conn.common_headers())
    overflow = struct.pack(">I", 2**31 - 1)
    conn.send(b"".join(frame(HEADERS, block, flags=END_HEADERS, stream_id=stream_id)
                       + frame(WINDOW_UPDATE, overflow, stream_id=stream_id)
                       for stream_id in range(1, 2 * (MAX_RESETS + 1), 2)))
    received = conn.wait("GOAWAY ENHANCE_YOUR_CALM", lambda received: received is None or received.kind == GOAWAY)
    assert received is not None and received.error_code == ErrorCode.ENHANCE_YOUR_CALM, conn.seen


# ============================ FrameGuard on a libnghttp2 connection ============================

class Server:
    """libnghttp2's server side behind a FrameGuard, as H2Protocol has it."""

    def __init__(self, max_concurrent_streams: int = 100) -> None:
        self.h2 = ngh2.Connection(ngh2.Role.SERVER, ngh2.Configuration(auto_window_update=False))
        self.h2.initiate_connection({ngh2.Setting.MAX_CONCURRENT_STREAMS: max_concurrent_streams})
        self.h2.data_to_send()
        self.guard = FrameGuard(self.h2, max_concurrent_streams)
        self.encoder = hpack.Encoder()

    def receive(self, data: bytes) -> ErrorCode | None:
        return self.guard.receive(data)

    def request(self, stream_id: int, *, end_stream: bool) -> bytes:
        block = bytes(self.encoder.encode([(":method", "POST"), (":scheme", "https"), (":path", "/a"),
                                           (":authority", "localhost")]))
        return frame(HEADERS, block, flags=END_HEADERS | (END_STREAM if end_stream else 0), stream_id=stream_id)

    def frames_out(self) -> list[tuple[int, int, bytes]]:
        """(type, stream id, payload) of what the library sends."""
        data, frames = self.h2.data_to_send(), []
        while data:
            length = int.from_bytes(data[:3], "big")
            frames.append((data[3], int.from_bytes(data[5:9], "big"), data[9:9 + length]))
            data = data[9 + length:]
        return frames


OPENING = PREFACE + frame(SETTINGS, b"") + frame(SETTINGS, b"", flags=ACK)


def received(events: list[ngh2.Event]) -> list[object]:
    """The library's events, a stream's DATA pieces in a row joined (split reads give smaller pieces)."""
    joined: list[object] = []
    for event in events:
        if isinstance(event, ngh2.DataReceived):
            last = joined[-1] if joined else None
            if isinstance(last, list) and last[0] == event.stream_id and not last[2]:
                last[1] += event.data
                last[2] = event.end_stream
                continue
            joined.append([event.stream_id, event.data, event.end_stream])
        else:
            joined.append(repr(event))
    return joined


def test_split_reads_give_the_library_what_whole_reads_give() -> None:
    whole, split = Server(), Server()
    conversation = (OPENING + whole.request(1, end_stream=False) + frame(DATA, b"body", stream_id=1)
                    + frame(WINDOW_UPDATE, struct.pack(">I", 100), stream_id=1)
                    + frame(PRIORITY, struct.pack(">IB", 0, 15), stream_id=1)
                    + frame(HEADERS, bytes(whole.encoder.encode([("x-checksum", "0")])), stream_id=1,
                            flags=END_HEADERS | END_STREAM)
                    + whole.request(3, end_stream=True) + frame(WINDOW_UPDATE, struct.pack(">I", 100)))
    assert whole.receive(conversation) is None
    for i in range(len(conversation)):
        assert split.receive(conversation[i:i + 1]) is None
    assert received(split.h2.events()) == received(whole.h2.events())
    assert split.h2.stream_remote_window_size(1) == whole.h2.stream_remote_window_size(1) == DEFAULT_WINDOW + 100
    assert (split.guard.held, split.guard.last, split.guard.receiving) == (b"", 3, set())
    # Still in step with the frames: DATA on stream 1, ended by its trailers, is on a closed stream.
    late = frame(DATA, b"late", stream_id=1)
    assert whole.receive(late) == ErrorCode.STREAM_CLOSED
    assert [split.receive(late[i:i + 1]) for i in range(HEAD_SIZE)] == [None] * (HEAD_SIZE - 1) + [
        ErrorCode.STREAM_CLOSED]


def test_frames_on_closed_streams_end_the_connection() -> None:
    server = Server()
    assert server.receive(OPENING + server.request(1, end_stream=True)) is None
    assert server.receive(frame(DATA, b"x", stream_id=1)) == ErrorCode.STREAM_CLOSED

    server = Server()
    assert server.receive(OPENING + server.request(1, end_stream=False)
                          + frame(RST_STREAM, struct.pack(">I", 8), stream_id=1)) is None
    assert server.receive(server.request(1, end_stream=True)) == ErrorCode.STREAM_CLOSED


def skipping(times: int) -> tuple[Server, int]:
    """A server whose client opened streams skipping one id ``times`` times; the last id skipped."""
    server = Server()
    opened = 1
    assert server.receive(OPENING + server.request(opened, end_stream=True)) is None
    for _ in range(times):
        opened += 4
        assert server.receive(server.request(opened, end_stream=True)) is None
    return server, opened - 2


def test_headers_on_a_skipped_stream_id() -> None:
    server = Server()
    # Stream 5 and 3 in one read: the library is given 5 (its GOAWAY's last stream), not 3.
    assert server.receive(OPENING + server.request(5, end_stream=True)
                          + server.request(3, end_stream=True)) == ErrorCode.PROTOCOL_ERROR
    assert [type(event).__name__ for event in server.h2.events()][-1] == "RequestReceived"

    server, skipped = skipping(SKIPPED_KEPT + 1)
    assert server.receive(server.request(skipped, end_stream=True)) == ErrorCode.PROTOCOL_ERROR
    # The oldest skipped range is forgotten: its id is taken for a closed stream's, a connection error all the same.
    server, _ = skipping(SKIPPED_KEPT + 1)
    assert server.receive(server.request(3, end_stream=True)) == ErrorCode.STREAM_CLOSED


def test_priority_rules() -> None:
    server = Server()
    assert server.receive(OPENING + frame(PRIORITY, struct.pack(">IB", 0, 15))) == ErrorCode.PROTOCOL_ERROR

    server = Server()
    assert server.receive(OPENING + frame(PRIORITY, struct.pack(">IB", 1, 15), stream_id=1)) == \
        ErrorCode.PROTOCOL_ERROR  # an idle stream cannot be reset

    server = Server()
    assert server.receive(OPENING + server.request(1, end_stream=False)
                          + frame(PRIORITY, struct.pack(">IB", 1, 15), stream_id=1)) is None
    assert (RST_STREAM, 1, struct.pack(">I", PROTOCOL_ERROR)) in server.frames_out()
    assert server.guard.streams_reset == 1


def test_a_window_overflow_in_the_read_that_opens_the_stream_resets_that_stream() -> None:
    server = Server()
    increment = frame(WINDOW_UPDATE, struct.pack(">I", 2**31 - DEFAULT_WINDOW), stream_id=1)  # 2^31: one past
    assert server.receive(OPENING + server.request(1, end_stream=False) + increment
                          + server.request(3, end_stream=True)) is None
    sent = server.frames_out()
    assert (RST_STREAM, 1, struct.pack(">I", FLOW_CONTROL_ERROR)) in sent
    assert GOAWAY not in [kind for kind, _, _ in sent]
    assert server.guard.streams_reset == 1
    assert 3 in [event.stream_id for event in server.h2.events() if isinstance(event, ngh2.RequestReceived)]


@pytest.mark.parametrize(("sent", "code"), [
    (frame(WINDOW_UPDATE, struct.pack(">I", 2**31 - 1), stream_id=1), FLOW_CONTROL_ERROR),
    (frame(PRIORITY, struct.pack(">IB", 1, 15), stream_id=1), PROTOCOL_ERROR)])
def test_a_stream_error_cut_at_every_byte(sent: bytes, code: int) -> None:
    server = Server()
    assert server.receive(OPENING + server.request(1, end_stream=False)) is None
    for i in range(len(sent)):
        assert server.receive(sent[i:i + 1]) is None
    out = server.frames_out()
    assert (RST_STREAM, 1, struct.pack(">I", code)) in out and GOAWAY not in [kind for kind, _, _ in out]


def test_streams_the_server_reset_stay_open_to_frames_in_flight_and_memory_stays_bounded() -> None:
    server = Server(max_concurrent_streams=10)
    assert server.receive(OPENING) is None
    count = 3 * RESET_KEPT
    for stream_id in range(1, 2 * count, 2):
        assert server.receive(server.request(stream_id, end_stream=False)) is None
        server.h2.reset_stream(stream_id, ErrorCode.CANCEL)  # the client never ends it
        server.frames_out()
        assert len(server.guard.receiving) <= SWEEP_MIN + 1
    assert len(server.guard.reset) <= RESET_KEPT
    for stream_id in range(2 * count - 1, 2 * (count - RESET_KEPT // 2), -2):  # in flight on the latest ones
        assert server.receive(frame(DATA, b"late", flags=END_STREAM, stream_id=stream_id)) is None
    # The first ones reset are forgotten: a frame on one is taken for a frame on a closed stream.
    assert server.receive(frame(DATA, b"late", flags=END_STREAM, stream_id=1)) == ErrorCode.STREAM_CLOSED


def test_a_thousand_streams_ended_by_the_client_leave_nothing_behind() -> None:
    server = Server()
    assert server.receive(OPENING) is None
    for stream_id in range(1, 2 * SEQUENTIAL, 2):
        assert server.receive(server.request(stream_id, end_stream=False)
                              + frame(DATA, b"body", flags=END_STREAM, stream_id=stream_id)) is None
        server.h2.send_response(stream_id, [(b":status", b"204")], end_stream=True)
        server.frames_out()
    guard = server.guard
    assert (guard.receiving, list(guard.reset), list(guard.skipped), guard.held) == (set(), [], [], b"")


class CountingConnection:
    """A library connection that counts the calls reading the client's bytes."""

    def __init__(self, connection: ngh2.Connection) -> None:
        self.connection = connection
        self.calls = 0

    def receive_data(self, data: bytes | memoryview) -> None:
        self.calls += 1
        self.connection.receive_data(data)

    def __getattr__(self, name: str) -> object:
        return getattr(self.connection, name)


def test_a_run_of_window_updates_is_given_to_the_library_in_one_call() -> None:
    server = Server()
    assert server.receive(OPENING + server.request(1, end_stream=False) + server.request(3, end_stream=False)) is None
    counting = CountingConnection(server.h2)
    server.guard.connection = counting  # type: ignore[assignment]
    run = b"".join(frame(WINDOW_UPDATE, struct.pack(">I", 1000), stream_id=stream_id)
                   for _ in range(200) for stream_id in (1, 3))
    assert server.receive(run) is None
    assert counting.calls == 1
    assert server.h2.stream_remote_window_size(1) == server.h2.stream_remote_window_size(3) == DEFAULT_WINDOW + 200_000
    # The increments not yet read by the library still count: the one taking stream 3 past 2^31-1 resets it.
    past = frame(WINDOW_UPDATE, struct.pack(">I", 2**31 - 1 - DEFAULT_WINDOW - 200_000), stream_id=3)
    assert server.receive(frame(WINDOW_UPDATE, struct.pack(">I", 1), stream_id=3) + past) is None
    out = server.frames_out()
    assert (RST_STREAM, 3, struct.pack(">I", FLOW_CONTROL_ERROR)) in out and GOAWAY not in [k for k, _, _ in out]
    assert server.guard.streams_reset == 1


@pytest.mark.integration
def test_a_header_list_past_the_limit_counts_its_stream_as_processed(conn: Conn) -> None:
    """The GOAWAY for a header list past h2_max_header_list_size names its stream as the last (RFC 9113 6.8), also
    when a frame after it in the same read (a WINDOW_UPDATE for it) has the guard give the library what came before
    on its own: a client retries the streams above the last one on a new connection, where it is refused again."""
    conn.handshake()
    block = conn.encode(conn.common_headers() + [("x-big", "x" * 4000)] * 5)  # 20 KB decoded, against 16 KB
    conn.send(frame(HEADERS, block, flags=END_STREAM | END_HEADERS, stream_id=1)
              + frame(WINDOW_UPDATE, struct.pack(">I", 1000), stream_id=1))
    goaway = conn.wait("GOAWAY", lambda received: received is None or received.kind == GOAWAY)
    assert goaway is not None, conn.seen
    assert struct.unpack(">I", goaway.payload[:4])[0] & 0x7FFFFFFF == 1, str(goaway)
