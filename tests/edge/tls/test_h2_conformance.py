"""HTTP/2 conformance of the edge's https port: h2spec's cases (github.com/summerwind/h2spec: its generic, http2
and hpack groups, RFC 9113's and RFC 7541's server requirements), one parametrized case per h2spec case id, sent
as raw frames over TLS to a real `assetcdn up` (tests/support/h2_frames.py says how answers are judged).

h2spec itself cannot be installed on every machine (docs/https.md, "HTTP/2 conformance"); `make h2spec` runs
this file instead, against the edge and then against nginx (``H2_CONFORMANCE_TARGET=nginx``, set up as
benchmarks/https_bench.py sets it up), and prints both pass counts.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.h2_frames import (
    ACK,
    COMPRESSION_ERROR,
    DATA,
    DEFAULT_FRAME_SIZE,
    DEFAULT_WINDOW,
    ENABLE_PUSH,
    END_HEADERS,
    END_STREAM,
    FLOW_CONTROL_ERROR,
    FRAME_SIZE_ERROR,
    GOAWAY,
    HEADER_TABLE_SIZE,
    HEADERS,
    INITIAL_WINDOW_SIZE,
    MAX_CONCURRENT_STREAMS,
    MAX_FRAME_SIZE,
    MAX_HEADER_LIST_SIZE,
    PADDED,
    PREFACE,
    PROTOCOL_ERROR,
    PUSH_PROMISE,
    REFUSED_STREAM,
    RST_STREAM,
    SETTINGS,
    STREAM_CLOSED,
    CaseFailed,
    Conn,
    Target,
    frame,
)
from tests.support.https import ZONE, start_https_cdn

pytestmark = pytest.mark.integration

BODY = b"HTTP/2 conformance\n" * 64   # what the path answers: DATA for the flow-control cases (at least 5 bytes)
FILE = "conformance/index.txt"
ROOT = Path(__file__).resolve().parents[3]
UNKNOWN_FRAME = b"\x00\x00\x08\x16\x00\x00\x00\x00\x00" + bytes(8)  # type 0x16, 8 bytes, stream 0
OPAQUE = b"h2spec\x00\x00"

CASES: dict[str, Callable[[Conn], None]] = {}


def case(case_id: str) -> Callable[[Callable[[Conn], None]], Callable[[Conn], None]]:
    """Register a case under h2spec's id (group/section/number); its docstring is h2spec's requirement."""
    def register(run: Callable[[Conn], None]) -> Callable[[Conn], None]:
        assert case_id not in CASES, case_id
        CASES[case_id] = run
        return run
    return register


def handshaken(conn: Conn) -> Conn:
    conn.handshake()
    return conn


# ============================ generic: what any HTTP/2 server must accept ============================

def preface_then_settings(conn: Conn) -> None:
    """Sends a client connection preface: the server's first frame MUST be SETTINGS (not an ACK)."""
    conn.send(PREFACE)
    conn.write_settings((INITIAL_WINDOW_SIZE, DEFAULT_WINDOW))
    first = conn.wait("SETTINGS", lambda received: True)
    if first is None or first.kind != SETTINGS or first.flags & ACK:
        raise CaseFailed("SETTINGS (not an ACK) as the server's first frame", conn.seen)


CASES["generic/1/1"] = preface_then_settings


@case("generic/2/1")
def priority_on_idle(conn: Conn) -> None:
    """Sends a PRIORITY frame on idle stream: accepted."""
    handshaken(conn).priority(1, 0, 255)
    conn.ping(OPAQUE)
    conn.ping_ack(OPAQUE)


@case("generic/2/2")
def window_update_half_closed(conn: Conn) -> None:
    """Sends a WINDOW_UPDATE frame on half-closed (remote) stream: accepted, DATA follows."""
    handshaken(conn).write_settings((INITIAL_WINDOW_SIZE, 0))
    conn.request(1)
    conn.window_update(1, 1)
    conn.frame_of(DATA)


@case("generic/2/3")
def priority_half_closed(conn: Conn) -> None:
    """Sends a PRIORITY frame on half-closed (remote) stream: accepted, DATA follows."""
    handshaken(conn).write_settings((INITIAL_WINDOW_SIZE, 0))
    conn.request(1)
    conn.priority(1, 0, 255)
    conn.window_update(1, 1)
    conn.frame_of(DATA)


@case("generic/2/4")
def rst_stream_half_closed(conn: Conn) -> None:
    """Sends a RST_STREAM frame on half-closed (remote) stream: accepted."""
    handshaken(conn).request(1)
    conn.rst_stream(1, 0x8)
    conn.ping(OPAQUE)
    conn.ping_ack(OPAQUE, or_close=True)


@case("generic/2/5")
def priority_on_closed(conn: Conn) -> None:
    """Sends a PRIORITY frame on closed stream: accepted."""
    handshaken(conn).request(1)
    conn.stream_close()
    conn.priority(1, 0, 255)
    conn.ping(OPAQUE)
    conn.ping_ack(OPAQUE)


@case("generic/3.1/1")
def data_frame(conn: Conn) -> None:
    """Sends a DATA frame."""
    handshaken(conn).request(1, "POST", end_stream=False)
    conn.data(1, b"test")
    conn.headers_frame(1)


@case("generic/3.1/2")
def data_frames(conn: Conn) -> None:
    """Sends multiple DATA frames."""
    handshaken(conn).request(1, "POST", end_stream=False)
    conn.data(1, b"test", end_stream=False)
    conn.data(1, b"test")
    conn.headers_frame(1)


@case("generic/3.1/3")
def data_padded(conn: Conn) -> None:
    """Sends a DATA frame with padding."""
    handshaken(conn).request(1, "POST", end_stream=False)
    conn.data(1, b"test", pad=5)
    conn.headers_frame(1)


@case("generic/3.2/1")
def headers_frame(conn: Conn) -> None:
    """Sends a HEADERS frame."""
    handshaken(conn).request(1)
    conn.headers_frame(1)


@case("generic/3.2/2")
def headers_padded(conn: Conn) -> None:
    """Sends a HEADERS frame with padding."""
    handshaken(conn).headers(1, conn.encode(conn.common_headers()), pad=8)
    conn.headers_frame(1)


@case("generic/3.2/3")
def headers_priority(conn: Conn) -> None:
    """Sends a HEADERS frame with priority."""
    handshaken(conn).headers(1, conn.encode(conn.common_headers()), priority=(0, 255, False))
    conn.headers_frame(1)


def priority_then_request(dependency: int, weight: int, exclusive: bool, on: int = 1) -> Callable[[Conn], None]:
    def run(conn: Conn) -> None:
        handshaken(conn).priority(on, dependency, weight, exclusive)
        conn.request(1)
        conn.headers_frame(1)
    return run


CASES["generic/3.3/1"] = priority_then_request(0, 0, False)        # PRIORITY with priority 1
CASES["generic/3.3/2"] = priority_then_request(0, 255, False)      # ... with priority 256
CASES["generic/3.3/3"] = priority_then_request(1, 0, False, on=3)  # ... with stream dependency
CASES["generic/3.3/4"] = priority_then_request(0, 0, True)         # ... with exclusive
CASES["generic/3.3/5"] = priority_then_request(0, 255, False, on=3)  # an idle stream, then a lower stream id


@case("generic/3.4/1")
def rst_stream(conn: Conn) -> None:
    """Sends a RST_STREAM frame."""
    handshaken(conn).request(1, end_stream=False)
    conn.rst_stream(1, 0x8)
    conn.ping(OPAQUE)
    conn.ping_ack(OPAQUE, or_close=True)


@case("generic/3.5/1")
def settings_frame(conn: Conn) -> None:
    """Sends a SETTINGS frame: acknowledged."""
    handshaken(conn).write_settings((HEADER_TABLE_SIZE, 4096), (ENABLE_PUSH, 1), (MAX_CONCURRENT_STREAMS, 100),
                                    (INITIAL_WINDOW_SIZE, 65535), (MAX_FRAME_SIZE, 16384),
                                    (MAX_HEADER_LIST_SIZE, 100))
    conn.settings_ack()


@case("generic/3.7/1")
def ping_frame(conn: Conn) -> None:
    """Sends a PING frame."""
    handshaken(conn).ping(OPAQUE)
    conn.ping_ack(OPAQUE)


@case("generic/3.8/1")
def goaway_frame(conn: Conn) -> None:
    """Sends a GOAWAY frame."""
    handshaken(conn).goaway(0, 0, b"h2spec")
    conn.ping(OPAQUE)
    conn.ping_ack(OPAQUE, or_close=True)


@case("generic/3.9/1")
def window_update_connection(conn: Conn) -> None:
    """Sends a WINDOW_UPDATE frame with stream ID 0."""
    handshaken(conn).window_update(0, 1)
    conn.ping(OPAQUE)
    conn.ping_ack(OPAQUE)


@case("generic/3.9/2")
def window_update_stream(conn: Conn) -> None:
    """Sends a WINDOW_UPDATE frame with stream ID 1."""
    handshaken(conn).request(1)
    conn.window_update(1, 1)
    conn.headers_frame(1)


@case("generic/3.10/1")
def continuation(conn: Conn) -> None:
    """Sends a CONTINUATION frame."""
    block = handshaken(conn).encode(conn.common_headers())
    conn.headers(1, block[:5], end_headers=False)
    conn.continuation(1, block[5:])
    conn.headers_frame(1)


@case("generic/3.10/2")
def continuations(conn: Conn) -> None:
    """Sends multiple CONTINUATION frames."""
    block = handshaken(conn).encode(conn.common_headers())
    conn.headers(1, block[:5], end_headers=False)
    conn.continuation(1, block[5:10], end_headers=False)
    conn.continuation(1, block[10:])
    conn.headers_frame(1)


@case("generic/4/1")
def get_request(conn: Conn) -> None:
    """Sends a GET request."""
    handshaken(conn).request(1)
    conn.headers_frame(1)


@case("generic/4/2")
def head_request(conn: Conn) -> None:
    """Sends a HEAD request."""
    handshaken(conn).request(1, "HEAD")
    conn.headers_frame(1)


@case("generic/4/3")
def post_request(conn: Conn) -> None:
    """Sends a POST request."""
    handshaken(conn).request(1, "POST", end_stream=False)
    conn.data(1, b"test")
    conn.headers_frame(1)


@case("generic/4/4")
def post_trailers(conn: Conn) -> None:
    """Sends a POST request with trailers."""
    handshaken(conn).request(1, "POST", end_stream=False, extra=[("trailer", "x-test")])
    conn.data(1, b"test", end_stream=False)
    conn.headers(1, conn.encode([("x-test", "ok")]))
    conn.headers_frame(1)


def hpack_accepted(representation: bytes, table_size: int | None = None) -> Callable[[Conn], None]:
    """A request whose header block ends with ``representation`` (RFC 7541 encodings the server must decode)."""
    def run(conn: Conn) -> None:
        handshaken(conn)
        if table_size is not None:
            conn.encoder.header_table_size = table_size  # the next block starts with a table size update
        conn.headers(1, conn.encode(conn.common_headers()) + representation)
        conn.headers_frame(1)
    return run


# RFC 7541 representations of user-agent: h2spec and x-test: h2spec, as h2spec's generic/5 writes them.
for number, representation in enumerate((
        b"\xba",                                                                   # indexed
        b"\x40\x87\xb5\x05\xb1\x61\xcc\x5a\x93\x84\x9c\x48\xac\xa4",               # incremental, indexed name
        b"\x40\x0a\x75\x73\x65\x72\x2d\x61\x67\x65\x6e\x74\x06\x68\x32\x73\x70\x65\x63",
        b"\x40\x06\x78\x2d\x74\x65\x73\x74\x06\x68\x32\x73\x70\x65\x63",           # incremental, new name
        b"\x40\x85\xf2\xb2\x4a\x84\xff\x84\x9c\x48\xac\xa4",
        b"\x00\x0a\x75\x73\x65\x72\x2d\x61\x67\x65\x6e\x74\x06\x68\x32\x73\x70\x65\x63",  # without indexing
        b"\x00\x87\xb5\x05\xb1\x61\xcc\x5a\x93\x84\x9c\x48\xac\xa4",
        b"\x00\x06\x78\x2d\x74\x65\x73\x74\x06\x68\x32\x73\x70\x65\x63",
        b"\x00\x85\xf2\xb2\x4a\x84\xff\x84\x9c\x48\xac\xa4",
        b"\x10\x0a\x75\x73\x65\x72\x2d\x61\x67\x65\x6e\x74\x06\x68\x32\x73\x70\x65\x63",  # never indexed
        b"\x10\x87\xb5\x05\xb1\x61\xcc\x5a\x93\x84\x9c\x48\xac\xa4",
        b"\x10\x85\xf2\xb2\x4a\x84\xff\x84\x9c\x48\xac\xa4",
        b"\x10\x85\xf2\xb2\x4a\x84\xff\x84\x9c\x48\xac\xa4"), start=1):
    CASES[f"generic/5/{number}"] = hpack_accepted(representation)
CASES["generic/5/14"] = hpack_accepted(b"", table_size=128)  # a dynamic table size update


@case("generic/5/15")
def multiple_table_size_updates(conn: Conn) -> None:
    """Sends multiple dynamic table size update (128, then 4096) before the header block."""
    handshaken(conn).headers(1, b"\x3f\x61\x3f\xe1\x1f" + conn.encode(conn.common_headers()))
    conn.headers_frame(1)


# ============================ http2: RFC 9113's requirements on a server ============================

CASES["http2/3.5/1"] = preface_then_settings


@case("http2/3.5/2")
def invalid_preface(conn: Conn) -> None:
    """Sends invalid connection preface: the server MUST terminate the connection (PROTOCOL_ERROR)."""
    conn.send(b"INVALID CONNECTION PREFACE\r\n\r\n")
    conn.connection_error(PROTOCOL_ERROR)


@case("http2/4.1/1")
def unknown_type(conn: Conn) -> None:
    """Sends a frame with unknown type: ignored."""
    handshaken(conn).send(UNKNOWN_FRAME)
    conn.ping(bytes(8))
    conn.ping_ack(bytes(8))


@case("http2/4.1/2")
def undefined_flag(conn: Conn) -> None:
    """Sends a frame with undefined flag: ignored."""
    handshaken(conn).send(b"\x00\x00\x08\x06\x16\x00\x00\x00\x00" + bytes(8))
    conn.frame_of(0x6)


@case("http2/4.1/3")
def reserved_bit(conn: Conn) -> None:
    """Sends a frame with reserved field bit: ignored."""
    handshaken(conn).send(b"\x00\x00\x08\x06\x16\x80\x00\x00\x00" + bytes(8))
    conn.frame_of(0x6)


@case("http2/4.2/1")
def data_max_frame_size(conn: Conn) -> None:
    """Sends a DATA frame with 2^14 octets in length (the server's SETTINGS_MAX_FRAME_SIZE, as h2spec): the server
    MUST be capable of receiving it."""
    handshaken(conn).request(1, "POST", end_stream=False)
    conn.data(1, b"x" * conn.settings.get(MAX_FRAME_SIZE, DEFAULT_FRAME_SIZE))
    conn.headers_frame(1)


@case("http2/4.2/2")
def data_over_max_frame_size(conn: Conn) -> None:
    """Sends a large size DATA frame that exceeds the SETTINGS_MAX_FRAME_SIZE: FRAME_SIZE_ERROR."""
    handshaken(conn).request(1, "POST", end_stream=False)
    conn.data(1, b"x" * (conn.settings.get(MAX_FRAME_SIZE, DEFAULT_FRAME_SIZE) + 1))
    conn.stream_error(FRAME_SIZE_ERROR)


@case("http2/4.2/3")
def headers_over_max_frame_size(conn: Conn) -> None:
    """Sends a large size HEADERS frame that exceeds the SETTINGS_MAX_FRAME_SIZE: connection FRAME_SIZE_ERROR."""
    handshaken(conn).headers(1, conn.encode(conn.common_headers() + conn.dummy_headers(5)))
    conn.connection_error(FRAME_SIZE_ERROR)


@case("http2/4.3/1")
def invalid_header_block(conn: Conn) -> None:
    """Sends invalid header block fragment: connection COMPRESSION_ERROR."""
    handshaken(conn).send(b"\x00\x00\x01\x01\x05\x00\x00\x00\x01\x40")
    conn.connection_error(COMPRESSION_ERROR)


def interrupted_header_block(interruption: Callable[[Conn], None], *, method: str = "GET") -> Callable[[Conn], None]:
    """HEADERS without END_HEADERS on stream 1, ``interruption``, then the CONTINUATION: PROTOCOL_ERROR."""
    def run(conn: Conn) -> None:
        handshaken(conn).headers(1, conn.encode(conn.common_headers(method)), end_stream=False, end_headers=False)
        interruption(conn)
        conn.continuation(1, conn.encode(conn.dummy_headers(1)))
        conn.connection_error(PROTOCOL_ERROR)
    return run


CASES["http2/4.3/2"] = interrupted_header_block(lambda conn: conn.priority(1, 0, 255))
CASES["http2/4.3/3"] = interrupted_header_block(lambda conn: conn.request(3))


@case("http2/5.1/1")
def idle_data(conn: Conn) -> None:
    """idle: Sends a DATA frame: PROTOCOL_ERROR (or STREAM_CLOSED)."""
    handshaken(conn).data(1, b"test")
    conn.stream_error(PROTOCOL_ERROR, STREAM_CLOSED)


@case("http2/5.1/2")
def idle_rst_stream(conn: Conn) -> None:
    """idle: Sends a RST_STREAM frame: connection PROTOCOL_ERROR."""
    handshaken(conn).rst_stream(1, 0x8)
    conn.connection_error(PROTOCOL_ERROR)


@case("http2/5.1/3")
def idle_window_update(conn: Conn) -> None:
    """idle: Sends a WINDOW_UPDATE frame: connection PROTOCOL_ERROR."""
    handshaken(conn).window_update(1, 100)
    conn.connection_error(PROTOCOL_ERROR)


@case("http2/5.1/4")
def idle_continuation(conn: Conn) -> None:
    """idle: Sends a CONTINUATION frame: connection PROTOCOL_ERROR."""
    handshaken(conn).continuation(1, conn.encode(conn.common_headers()))
    conn.connection_error(PROTOCOL_ERROR)


@case("http2/5.1/5")
def half_closed_data(conn: Conn) -> None:
    """half closed (remote): Sends a DATA frame: STREAM_CLOSED."""
    handshaken(conn).request(1)
    conn.data(1, b"test")
    conn.stream_error(STREAM_CLOSED)


@case("http2/5.1/6")
def half_closed_headers(conn: Conn) -> None:
    """half closed (remote): Sends a HEADERS frame: STREAM_CLOSED."""
    handshaken(conn).request(1)
    conn.request(1)
    conn.stream_error(STREAM_CLOSED)


@case("http2/5.1/7")
def half_closed_continuation(conn: Conn) -> None:
    """half closed (remote): Sends a CONTINUATION frame: STREAM_CLOSED (or PROTOCOL_ERROR)."""
    block = handshaken(conn).encode(conn.common_headers())
    conn.headers(1, block)
    conn.continuation(1, block)
    conn.stream_error(STREAM_CLOSED, PROTOCOL_ERROR)


@case("http2/5.1/8")
def reset_then_data(conn: Conn) -> None:
    """closed: Sends a DATA frame after sending RST_STREAM frame: STREAM_CLOSED."""
    handshaken(conn).request(1, end_stream=False)
    conn.rst_stream(1, 0x8)
    conn.data(1, b"test")
    conn.stream_error(STREAM_CLOSED)


@case("http2/5.1/9")
def reset_then_headers(conn: Conn) -> None:
    """closed: Sends a HEADERS frame after sending RST_STREAM frame: STREAM_CLOSED."""
    handshaken(conn).request(1, end_stream=False)
    conn.rst_stream(1, 0x8)
    conn.request(1)
    conn.stream_error(STREAM_CLOSED)


@case("http2/5.1/10")
def reset_then_continuation(conn: Conn) -> None:
    """closed: Sends a CONTINUATION frame after sending RST_STREAM frame: STREAM_CLOSED (or PROTOCOL_ERROR)."""
    handshaken(conn).request(1, end_stream=False)
    conn.rst_stream(1, 0x8)
    conn.continuation(1, conn.encode(conn.dummy_headers(1)))
    conn.stream_error(STREAM_CLOSED, PROTOCOL_ERROR)


@case("http2/5.1/11")
def closed_data(conn: Conn) -> None:
    """closed: Sends a DATA frame: STREAM_CLOSED."""
    handshaken(conn).request(1)
    conn.stream_close()
    conn.data(1, b"test")
    conn.stream_error(STREAM_CLOSED)


@case("http2/5.1/12")
def closed_headers(conn: Conn) -> None:
    """closed: Sends a HEADERS frame: connection STREAM_CLOSED."""
    block = handshaken(conn).encode(conn.common_headers())
    conn.headers(1, block)
    conn.stream_close()
    conn.headers(1, block)
    conn.connection_error(STREAM_CLOSED)


@case("http2/5.1/13")
def closed_continuation(conn: Conn) -> None:
    """closed: Sends a CONTINUATION frame: connection STREAM_CLOSED (or PROTOCOL_ERROR)."""
    handshaken(conn).request(1)
    conn.stream_close()
    conn.continuation(1, conn.encode(conn.dummy_headers(1)))
    conn.connection_error(STREAM_CLOSED, PROTOCOL_ERROR)


@case("http2/5.1.1/1")
def even_stream_id(conn: Conn) -> None:
    """Sends even-numbered stream identifier: connection PROTOCOL_ERROR."""
    handshaken(conn).request(2)
    conn.connection_error(PROTOCOL_ERROR)


@case("http2/5.1.1/2")
def decreasing_stream_id(conn: Conn) -> None:
    """Sends stream identifier that is numerically smaller than previous: connection PROTOCOL_ERROR."""
    handshaken(conn).request(5)
    conn.request(3)
    conn.connection_error(PROTOCOL_ERROR)


@case("http2/5.1.2/1")
def over_concurrent_streams(conn: Conn) -> None:
    """Sends HEADERS frames that causes the advertised concurrent stream limit to be exceeded: PROTOCOL_ERROR or
    REFUSED_STREAM."""
    handshaken(conn)
    limit = conn.settings.get(MAX_CONCURRENT_STREAMS)
    if limit is None:
        pytest.skip("the server announces no SETTINGS_MAX_CONCURRENT_STREAMS")
    conn.write_settings((INITIAL_WINDOW_SIZE, 0))  # the answers stay open
    block = conn.encode(conn.common_headers())
    conn.send(b"".join(frame(HEADERS, block, flags=END_STREAM | END_HEADERS, stream_id=2 * i + 1)
                       for i in range(limit + 1)))
    conn.stream_error(PROTOCOL_ERROR, REFUSED_STREAM)


@case("http2/5.3.1/1")
def headers_depends_on_itself(conn: Conn) -> None:
    """Sends HEADERS frame that depends on itself: PROTOCOL_ERROR."""
    handshaken(conn).headers(1, conn.encode(conn.common_headers()), priority=(1, 255, False))
    conn.stream_error(PROTOCOL_ERROR)


@case("http2/5.3.1/2")
def priority_depends_on_itself(conn: Conn) -> None:
    """Sends PRIORITY frame that depend on itself: PROTOCOL_ERROR."""
    handshaken(conn).priority(1, 1, 255)
    conn.stream_error(PROTOCOL_ERROR)


@case("http2/5.4.1/1")
def invalid_ping_closes(conn: Conn) -> None:
    """Sends an invalid PING frame for connection close: the server MUST close the TCP connection."""
    handshaken(conn).send(b"\x00\x00\x08\x06\x00\x00\x00\x00\x03" + bytes(8))
    conn.connection_close()


@case("http2/5.4.1/2")
def invalid_ping_goaway(conn: Conn) -> None:
    """Sends an invalid PING frame to receive GOAWAY frame (h2spec's strict mode: a SHOULD)."""
    handshaken(conn).send(b"\x00\x00\x08\x06\x00\x00\x00\x00\x03" + bytes(8))
    received = conn.wait("GOAWAY", lambda received: received is None or received.kind == GOAWAY)
    if received is None:
        raise CaseFailed("GOAWAY PROTOCOL_ERROR", conn.seen)


@case("http2/5.5/1")
def unknown_extension(conn: Conn) -> None:
    """Sends an unknown extension frame: ignored."""
    handshaken(conn).send(UNKNOWN_FRAME)
    conn.ping(OPAQUE)
    conn.ping_ack(OPAQUE)


@case("http2/5.5/2")
def unknown_extension_in_header_block(conn: Conn) -> None:
    """Sends an unknown extension frame in the middle of a header block: connection PROTOCOL_ERROR."""
    handshaken(conn).headers(1, conn.encode(conn.common_headers()), end_headers=False)
    conn.send(UNKNOWN_FRAME)
    conn.connection_error(PROTOCOL_ERROR)


@case("http2/6.1/1")
def data_stream_zero(conn: Conn) -> None:
    """Sends a DATA frame with 0x0 stream identifier: connection PROTOCOL_ERROR."""
    handshaken(conn).data(0, b"test")
    conn.connection_error(PROTOCOL_ERROR)


@case("http2/6.1/2")
def data_not_open(conn: Conn) -> None:
    """Sends a DATA frame on the stream that is not in "open" or "half-closed (local)" state: STREAM_CLOSED."""
    handshaken(conn).request(1, "POST")
    conn.data(1, b"test")
    conn.stream_error(STREAM_CLOSED)


@case("http2/6.1/3")
def data_invalid_pad_length(conn: Conn) -> None:
    """Sends a DATA frame with invalid pad length: connection PROTOCOL_ERROR."""
    handshaken(conn).request(1, "POST", end_stream=False, extra=[("content-length", "4")])
    conn.send(b"\x00\x00\x05\x00\x09\x00\x00\x00\x01" + b"\x06Test")
    conn.connection_error(PROTOCOL_ERROR)


CASES["http2/6.2/1"] = interrupted_header_block(lambda conn: conn.priority(1, 0, 255))
CASES["http2/6.2/2"] = interrupted_header_block(lambda conn: conn.request(3))


@case("http2/6.2/3")
def headers_stream_zero(conn: Conn) -> None:
    """Sends a HEADERS frame with 0x0 stream identifier: connection PROTOCOL_ERROR."""
    handshaken(conn).request(0)
    conn.connection_error(PROTOCOL_ERROR)


@case("http2/6.2/4")
def headers_invalid_pad_length(conn: Conn) -> None:
    """Sends a HEADERS frame with invalid pad length: PROTOCOL_ERROR."""
    block = handshaken(conn).encode(conn.common_headers())
    conn.send(frame(HEADERS, bytes((len(block) + 2,)) + block, flags=END_STREAM | END_HEADERS | PADDED,
                    stream_id=1))
    conn.stream_error(PROTOCOL_ERROR)


@case("http2/6.3/1")
def priority_stream_zero(conn: Conn) -> None:
    """Sends a PRIORITY frame with 0x0 stream identifier: connection PROTOCOL_ERROR."""
    handshaken(conn).priority(0, 0, 255)
    conn.connection_error(PROTOCOL_ERROR)


@case("http2/6.3/2")
def priority_bad_length(conn: Conn) -> None:
    """Sends a PRIORITY frame with a length other than 5 octets: FRAME_SIZE_ERROR."""
    handshaken(conn).request(1)
    conn.send(b"\x00\x00\x04\x02\x00\x00\x00\x00\x01\x80\x00\x00\x01")
    conn.stream_error(FRAME_SIZE_ERROR)


@case("http2/6.4/1")
def rst_stream_zero(conn: Conn) -> None:
    """Sends a RST_STREAM frame with 0x0 stream identifier: connection PROTOCOL_ERROR."""
    handshaken(conn).rst_stream(0, 0x8)
    conn.connection_error(PROTOCOL_ERROR)


@case("http2/6.4/2")
def rst_stream_idle(conn: Conn) -> None:
    """Sends a RST_STREAM frame on a idle stream: connection PROTOCOL_ERROR."""
    handshaken(conn).rst_stream(1, 0x8)
    conn.connection_error(PROTOCOL_ERROR)


@case("http2/6.4/3")
def rst_stream_bad_length(conn: Conn) -> None:
    """Sends a RST_STREAM frame with a length other than 4 octets: FRAME_SIZE_ERROR."""
    handshaken(conn).request(1)
    conn.send(b"\x00\x00\x03\x03\x00\x00\x00\x00\x01\x00\x00\x00")
    conn.stream_error(FRAME_SIZE_ERROR)


@case("http2/6.5/1")
def settings_ack_with_payload(conn: Conn) -> None:
    """Sends a SETTINGS frame with ACK flag and payload: connection FRAME_SIZE_ERROR."""
    handshaken(conn).send(b"\x00\x00\x01\x04\x01\x00\x00\x00\x00\x00")
    conn.connection_error(FRAME_SIZE_ERROR)


@case("http2/6.5/2")
def settings_on_stream(conn: Conn) -> None:
    """Sends a SETTINGS frame with a stream identifier other than 0x0: connection PROTOCOL_ERROR."""
    handshaken(conn).send(b"\x00\x00\x06\x04\x00\x00\x00\x00\x01\x00\x03\x00\x00\x00\x64")
    conn.connection_error(PROTOCOL_ERROR)


@case("http2/6.5/3")
def settings_bad_length(conn: Conn) -> None:
    """Sends a SETTINGS frame with a length other than a multiple of 6 octets: FRAME_SIZE_ERROR."""
    handshaken(conn).send(b"\x00\x00\x03\x04\x00\x00\x00\x00\x00\x00\x03\x00")
    conn.stream_error(PROTOCOL_ERROR, FRAME_SIZE_ERROR)


def bad_setting(key: int, value: int, code: int) -> Callable[[Conn], None]:
    def run(conn: Conn) -> None:
        handshaken(conn).write_settings((key, value))
        conn.connection_error(code)
    return run


CASES["http2/6.5.2/1"] = bad_setting(ENABLE_PUSH, 2, PROTOCOL_ERROR)
CASES["http2/6.5.2/2"] = bad_setting(INITIAL_WINDOW_SIZE, 2**31, FLOW_CONTROL_ERROR)
CASES["http2/6.5.2/3"] = bad_setting(MAX_FRAME_SIZE, 16383, PROTOCOL_ERROR)
CASES["http2/6.5.2/4"] = bad_setting(MAX_FRAME_SIZE, 2**24, PROTOCOL_ERROR)


@case("http2/6.5.2/5")
def unknown_setting(conn: Conn) -> None:
    """Sends a SETTINGS frame with unknown identifier: ignored."""
    handshaken(conn).write_settings((0xFF, 1))
    conn.ping(OPAQUE)
    conn.ping_ack(OPAQUE)


@case("http2/6.5.3/1")
def settings_in_order(conn: Conn) -> None:
    """Sends multiple values of SETTINGS_INITIAL_WINDOW_SIZE: processed in order (the last one, 1, holds)."""
    handshaken(conn).write_settings((INITIAL_WINDOW_SIZE, 100), (INITIAL_WINDOW_SIZE, 1))
    conn.settings_ack()
    conn.request(1)
    conn.data_frame(1)


@case("http2/6.5.3/2")
def settings_acknowledged(conn: Conn) -> None:
    """Sends a SETTINGS frame without ACK flag: the server MUST immediately emit a SETTINGS ACK."""
    handshaken(conn).write_settings((ENABLE_PUSH, 0))
    conn.settings_ack()


@case("http2/6.7/1")
def ping(conn: Conn) -> None:
    """Sends a PING frame: PING ACK with an identical payload."""
    handshaken(conn).ping(OPAQUE)
    conn.ping_ack(OPAQUE)


@case("http2/6.7/2")
def ping_ack_unanswered(conn: Conn) -> None:
    """Sends a PING frame with ACK: the server MUST NOT respond to it."""
    handshaken(conn).ping(b"invalid\x00", ack=True)
    conn.ping(OPAQUE)
    conn.ping_ack(OPAQUE)


@case("http2/6.7/3")
def ping_on_stream(conn: Conn) -> None:
    """Sends a PING frame with a stream identifier field value other than 0x0: connection PROTOCOL_ERROR."""
    handshaken(conn).send(b"\x00\x00\x08\x06\x00\x00\x00\x00\x01" + bytes(8))
    conn.connection_error(PROTOCOL_ERROR)


@case("http2/6.7/4")
def ping_bad_length(conn: Conn) -> None:
    """Sends a PING frame with a length field value other than 8: connection FRAME_SIZE_ERROR."""
    handshaken(conn).send(b"\x00\x00\x06\x06\x00\x00\x00\x00\x00" + bytes(6))
    conn.connection_error(FRAME_SIZE_ERROR)


@case("http2/6.8/1")
def goaway_on_stream(conn: Conn) -> None:
    """Sends a GOAWAY frame with a stream identifier other than 0x0: connection PROTOCOL_ERROR."""
    handshaken(conn).send(b"\x00\x00\x08\x07\x00\x00\x00\x00\x01" + bytes(8))
    conn.connection_error(PROTOCOL_ERROR)


@case("http2/6.9/1")
def window_update_zero(conn: Conn) -> None:
    """Sends a WINDOW_UPDATE frame with a flow control window increment of 0: connection PROTOCOL_ERROR."""
    handshaken(conn).window_update(0, 0)
    conn.connection_error(PROTOCOL_ERROR)


@case("http2/6.9/2")
def window_update_zero_on_stream(conn: Conn) -> None:
    """Sends a WINDOW_UPDATE frame with a flow control window increment of 0 on a stream: PROTOCOL_ERROR."""
    handshaken(conn).request(1, end_stream=False)
    conn.window_update(1, 0)
    conn.stream_error(PROTOCOL_ERROR)


@case("http2/6.9/3")
def window_update_bad_length(conn: Conn) -> None:
    """Sends a WINDOW_UPDATE frame with a length other than 4 octets: connection FRAME_SIZE_ERROR."""
    handshaken(conn).send(b"\x00\x00\x03\x08\x00\x00\x00\x00\x00\x00\x00\x01")
    conn.connection_error(FRAME_SIZE_ERROR)


@case("http2/6.9.1/1")
def window_of_one(conn: Conn) -> None:
    """Sends SETTINGS frame to set the initial window size to 1 and sends HEADERS frame: DATA of 1 byte."""
    handshaken(conn).write_settings((INITIAL_WINDOW_SIZE, 1))
    conn.settings_ack()
    conn.request(1)
    conn.data_frame(1)


@case("http2/6.9.1/2")
def connection_window_overflow(conn: Conn) -> None:
    """Sends multiple WINDOW_UPDATE frames increasing the flow control window to above 2^31-1: GOAWAY
    FLOW_CONTROL_ERROR."""
    handshaken(conn).window_update(0, 2**31 - 1)
    conn.window_update(0, 2**31 - 1)
    received = conn.frame_of(GOAWAY)
    if received.error_code != FLOW_CONTROL_ERROR:
        raise CaseFailed("GOAWAY FLOW_CONTROL_ERROR", conn.seen)


@case("http2/6.9.1/3")
def stream_window_overflow(conn: Conn) -> None:
    """Sends multiple WINDOW_UPDATE frames increasing the flow control window to above 2^31-1 on a stream:
    RST_STREAM FLOW_CONTROL_ERROR."""
    handshaken(conn).request(1, end_stream=False)
    conn.window_update(1, 2**31 - 1)
    conn.window_update(1, 2**31 - 1)
    received = conn.frame_of(RST_STREAM)
    if received.error_code != FLOW_CONTROL_ERROR:
        raise CaseFailed("RST_STREAM FLOW_CONTROL_ERROR", conn.seen)


@case("http2/6.9.2/1")
def initial_window_changed(conn: Conn) -> None:
    """Changes SETTINGS_INITIAL_WINDOW_SIZE after sending HEADERS frame: the open stream's window follows."""
    handshaken(conn).write_settings((INITIAL_WINDOW_SIZE, 0))
    conn.settings_ack()
    conn.request(1)
    conn.write_settings((INITIAL_WINDOW_SIZE, 1))
    conn.data_frame(1)


@case("http2/6.9.2/2")
def negative_window(conn: Conn) -> None:
    """Sends a SETTINGS frame for window size to be negative: the server MUST track the negative window."""
    handshaken(conn).write_settings((INITIAL_WINDOW_SIZE, 3))
    conn.settings_ack()
    conn.request(1)
    conn.frame_of(DATA)
    conn.write_settings((INITIAL_WINDOW_SIZE, 2))
    conn.settings_ack()
    conn.window_update(1, 2)
    conn.data_frame(1)


@case("http2/6.9.2/3")
def initial_window_too_large(conn: Conn) -> None:
    """Sends a SETTINGS_INITIAL_WINDOW_SIZE settings with an exceeded maximum window size value:
    connection FLOW_CONTROL_ERROR."""
    handshaken(conn).send(b"\x00\x00\x06\x04\x00\x00\x00\x00\x00\x00\x04\x80\x00\x00\x00")
    conn.connection_error(FLOW_CONTROL_ERROR)


@case("http2/6.10/1")
def continuations_accepted(conn: Conn) -> None:
    """Sends multiple CONTINUATION frames preceded by a HEADERS frame: accepted."""
    handshaken(conn).headers(1, conn.encode(conn.common_headers()), end_headers=False)
    conn.continuation(1, conn.encode(conn.dummy_headers(1)), end_headers=False)
    conn.continuation(1, conn.encode(conn.dummy_headers(1)))
    conn.headers_frame(1)


@case("http2/6.10/2")
def continuation_then_data(conn: Conn) -> None:
    """Sends a CONTINUATION frame followed by any frame other than CONTINUATION: connection PROTOCOL_ERROR."""
    handshaken(conn).headers(1, conn.encode(conn.common_headers("POST")), end_stream=False, end_headers=False)
    conn.continuation(1, conn.encode(conn.dummy_headers(1)), end_headers=False)
    conn.data(1, b"test")
    conn.connection_error(PROTOCOL_ERROR)


@case("http2/6.10/3")
def continuation_stream_zero(conn: Conn) -> None:
    """Sends a CONTINUATION frame with 0x0 stream identifier: connection PROTOCOL_ERROR."""
    handshaken(conn).headers(1, conn.encode(conn.common_headers()), end_headers=False)
    conn.continuation(0, conn.encode(conn.dummy_headers(1)))
    conn.connection_error(PROTOCOL_ERROR)


@case("http2/6.10/4")
def continuation_after_end_headers(conn: Conn) -> None:
    """Sends a CONTINUATION frame preceded by a HEADERS frame with END_HEADERS flag: connection PROTOCOL_ERROR."""
    handshaken(conn).request(1)
    conn.continuation(1, conn.encode(conn.dummy_headers(1)))
    conn.connection_error(PROTOCOL_ERROR)


@case("http2/6.10/5")
def continuation_after_last_continuation(conn: Conn) -> None:
    """Sends a CONTINUATION frame preceded by a CONTINUATION frame with END_HEADERS flag: connection
    PROTOCOL_ERROR."""
    handshaken(conn).headers(1, conn.encode(conn.common_headers()), end_headers=False)
    conn.continuation(1, conn.encode(conn.dummy_headers(1)))
    conn.continuation(1, conn.encode(conn.dummy_headers(1)))
    conn.connection_error(PROTOCOL_ERROR)


@case("http2/6.10/6")
def continuation_after_data(conn: Conn) -> None:
    """Sends a CONTINUATION frame preceded by a DATA frame: connection PROTOCOL_ERROR."""
    handshaken(conn).request(1, "POST", end_stream=False)
    conn.data(1, b"test")
    conn.continuation(1, conn.encode(conn.dummy_headers(1)), end_headers=False)
    conn.continuation(0, conn.encode(conn.dummy_headers(1)))
    conn.connection_error(PROTOCOL_ERROR)


@case("http2/7/1")
def goaway_unknown_code(conn: Conn) -> None:
    """Sends a GOAWAY frame with unknown error code: no special behaviour."""
    handshaken(conn).goaway(0, 0xFF)
    conn.ping(OPAQUE)
    conn.ping_ack(OPAQUE, or_close=True)


@case("http2/7/2")
def rst_stream_unknown_code(conn: Conn) -> None:
    """Sends a RST_STREAM frame with unknown error code: no special behaviour."""
    handshaken(conn).request(1, "POST", end_stream=False)
    conn.rst_stream(1, 0xFF)
    conn.ping(OPAQUE)
    conn.ping_ack(OPAQUE, or_close=True)


@case("http2/8.1/1")
def second_headers_without_end_stream(conn: Conn) -> None:
    """Sends a second HEADERS frame without the END_STREAM flag: PROTOCOL_ERROR."""
    handshaken(conn).request(1, "POST", end_stream=False)
    conn.data(1, b"test", end_stream=False)
    conn.headers(1, conn.encode([("x-test", "ok")]), end_stream=False)
    conn.stream_error(PROTOCOL_ERROR)


def malformed(headers: Callable[[list[tuple[str, str]]], list[tuple[str, str]]]) -> Callable[[Conn], None]:
    """A GET whose fields are ``headers(the common ones)``: a malformed request, PROTOCOL_ERROR (RFC 9113 8.1.1)."""
    def run(conn: Conn) -> None:
        handshaken(conn).headers(1, conn.encode(headers(conn.common_headers())))
        conn.stream_error(PROTOCOL_ERROR)
    return run


CASES["http2/8.1.2/1"] = malformed(lambda common: [*common, ("X-TEST", "ok")])
CASES["http2/8.1.2.1/1"] = malformed(lambda common: [*common, (":test", "ok")])
CASES["http2/8.1.2.1/2"] = malformed(lambda common: [*common, (":status", "200")])


@case("http2/8.1.2.1/3")
def pseudo_header_in_trailers(conn: Conn) -> None:
    """Sends a HEADERS frame that contains a pseudo-header field as trailers: PROTOCOL_ERROR."""
    handshaken(conn).request(1, "POST", end_stream=False)
    conn.data(1, b"test", end_stream=False)
    conn.headers(1, conn.encode([(":method", "POST")]))
    conn.stream_error(PROTOCOL_ERROR)


CASES["http2/8.1.2.1/4"] = malformed(lambda common: [("x-test", "ok"), *common])
CASES["http2/8.1.2.2/1"] = malformed(lambda common: [*common, ("connection", "keep-alive")])
CASES["http2/8.1.2.2/2"] = malformed(lambda common: [*common, ("trailers", "test"), ("te", "trailers, deflate")])
CASES["http2/8.1.2.3/1"] = malformed(lambda common: [common[0], common[1], (":path", ""), common[3]])
CASES["http2/8.1.2.3/2"] = malformed(lambda common: common[1:])
CASES["http2/8.1.2.3/3"] = malformed(lambda common: [common[0], common[2], common[3]])
CASES["http2/8.1.2.3/4"] = malformed(lambda common: [common[0], common[1], common[3]])
CASES["http2/8.1.2.3/5"] = malformed(lambda common: [*common, common[0]])
CASES["http2/8.1.2.3/6"] = malformed(lambda common: [*common, common[1]])
CASES["http2/8.1.2.3/7"] = malformed(lambda common: [*common, common[2]])


def content_length_mismatch(*chunks: bytes) -> Callable[[Conn], None]:
    """A POST announcing content-length 1 whose DATA frames carry ``chunks``: PROTOCOL_ERROR."""
    def run(conn: Conn) -> None:
        handshaken(conn).request(1, "POST", end_stream=False, extra=[("content-length", "1")])
        for index, chunk in enumerate(chunks):
            conn.data(1, chunk, end_stream=index == len(chunks) - 1)
        conn.stream_error(PROTOCOL_ERROR)
    return run


CASES["http2/8.1.2.6/1"] = content_length_mismatch(b"test")
CASES["http2/8.1.2.6/2"] = content_length_mismatch(b"test", b"test")


@case("http2/8.2/1")
def push_promise_from_client(conn: Conn) -> None:
    """Sends a PUSH_PROMISE frame: connection PROTOCOL_ERROR."""
    block = handshaken(conn).encode(conn.common_headers())
    conn.write(PUSH_PROMISE, b"\x00\x00\x00\x03" + block, flags=END_HEADERS, stream_id=1)
    conn.connection_error(PROTOCOL_ERROR)


# ============================ hpack: RFC 7541's decoding errors ============================

def hpack_error(representation: bytes, *, before: bool = False) -> Callable[[Conn], None]:
    """A request whose header block has ``representation`` appended (or put first): COMPRESSION_ERROR."""
    def run(conn: Conn) -> None:
        block = handshaken(conn).encode(conn.common_headers())
        conn.headers(1, representation + block if before else block + representation)
        conn.connection_error(COMPRESSION_ERROR)
    return run


CASES["hpack/2.3.3/1"] = hpack_error(b"\xc6")          # indexed field, index 70: past both tables
CASES["hpack/2.3.3/2"] = hpack_error(b"\x7f\x07\x00")  # literal with an indexed name past both tables
CASES["hpack/4.2/1"] = hpack_error(b"\x21")            # a dynamic table size update at the end of the block
CASES["hpack/5.2/1"] = hpack_error(b"\x00\x85\xf2\xb2\x4a\x84\xff\x84\x49\x50\x9f\xff")  # padding over 7 bits
CASES["hpack/5.2/2"] = hpack_error(b"\x00\x85\xf2\xb2\x4a\x84\xff\x83\x49\x50\x90")      # padded with zeros
CASES["hpack/5.2/3"] = hpack_error(b"\x00\x85\xf2\xb2\x4a\x84\xff\x87\x49\x51\xff\xff\xff\xfa\x7f")  # EOS
CASES["hpack/6.1/1"] = hpack_error(b"\x80")            # indexed field, index 0


@case("hpack/6.3/1")
def table_size_update_over_limit(conn: Conn) -> None:
    """Sends a dynamic table size update larger than the value of SETTINGS_HEADER_TABLE_SIZE: COMPRESSION_ERROR."""
    handshaken(conn)
    size = conn.settings.get(HEADER_TABLE_SIZE, 4096) + 1
    update = bytearray(b"\x3f")  # RFC 7541 5.1 integer, 5-bit prefix, behind the 001 pattern
    size -= 31
    while size >= 128:
        update.append(0x80 | size & 0x7F)
        size >>= 7
    update.append(size)
    conn.headers(1, bytes(update) + conn.encode(conn.common_headers()))
    conn.connection_error(COMPRESSION_ERROR)


# ============================ the server under test ============================

def start_nginx(workdir: Path, control_port: int) -> tuple[subprocess.Popen[bytes], int]:
    """nginx with TLS and HTTP/2 in front of control's storage API (benchmarks/https_bench.py's setup)."""
    from benchmarks.https_bench import KEYS
    from benchmarks.nginx_conf import TlsFiles, nginx_conf
    from tests.edge.tls.certs import TestCa
    from tests.integration.harness import free_port_block

    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    if not os.path.exists(nginx):
        pytest.skip("nginx is not installed (make h2spec installs it)")
    os.chmod(workdir, 0o755)  # nginx's workers run as their own user
    cert, key = TestCa().issue("localhost").write(workdir, "localhost")
    directory = workdir / "nginx"
    directory.mkdir(mode=0o777)
    port = free_port_block(1)
    conf = directory / "nginx.conf"
    conf.write_text(nginx_conf(directory, port, control_port, KEYS["ASSETCDN_ACCESS_KEY"], tls=TlsFiles(cert, key)))
    process = subprocess.Popen([nginx, "-c", str(conf), "-p", str(directory)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return process, port


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    running = start_https_cdn(tmp_path_factory.mktemp("h2conformance"))
    try:
        running.upload(FILE, BODY)
        if TARGET != "nginx":
            yield Target("edge", running.https_port, f"/{ZONE}/{FILE}")
            return
        with tempfile.TemporaryDirectory(prefix="h2-conformance-") as tmp:  # under /tmp: nginx's workers read it
            process, port = start_nginx(Path(tmp), int(running.cdn.control_url.rsplit(":", 1)[1]))
            try:
                wait_for_port(port, process)
                yield Target("nginx", port, f"/{ZONE}/{FILE}")
            finally:
                process.terminate()
                process.wait()
    finally:
        running.cdn.stop()


def wait_for_port(port: int, process: subprocess.Popen[bytes]) -> None:
    import socket
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            assert process.poll() is None, "nginx exited"
            assert time.monotonic() < deadline, "nginx does not listen"
            time.sleep(0.05)  # polling for a port another process opens: no event to wait on


TARGET = os.environ.get("H2_CONFORMANCE_TARGET", "edge")


@pytest.mark.parametrize("case_id", list(CASES))
def test_h2spec_case(target: Target, case_id: str) -> None:
    conn = Conn(target)
    try:
        CASES[case_id](conn)
    finally:
        conn.close()


def test_h2spec_tool(target: Target) -> None:
    """h2spec itself, where it is installed (`make h2spec` says why it is not): every case passes."""
    from benchmarks.h2_conformance import unavailable
    reason = unavailable()
    if reason is not None:
        pytest.skip(reason)
    h2spec = shutil.which("h2spec")
    assert h2spec is not None
    done = subprocess.run([h2spec, "-t", "-k", "-h", "localhost", "-p", str(target.port), "-P", target.path,
                           "-o", "10"], capture_output=True, text=True, timeout=1800, check=False)
    assert done.returncode == 0, f"h2spec against {target.name}: {done.stdout[-4000:]}"
