"""Hostile input on the edge's https port (a real `assetcdn up`): garbage where a ClientHello belongs, a
truncated handshake, a handshake that never finishes, HTTP/2 rapid reset (CVE-2023-44487), HEADERS floods,
endless CONTINUATION frames and an HPACK bomb. Each is cut off, and the edge keeps serving other clients
throughout."""

from __future__ import annotations

import socket
import ssl

import h2.errors
import h2.exceptions
import hpack
import pytest

from tests.edge.tls.client import TIMEOUT_S, H2Client, client_context, handshake, https_get
from tests.edge.tls.flood import frame
from tests.support.https import MAX_RESETS, HttpsCdn

pytestmark = pytest.mark.integration


def client_hello() -> bytes:
    """The first flight of a real TLS client: a ClientHello for `localhost`."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = client_context(None).wrap_bio(incoming, outgoing, server_hostname="localhost")
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


def closed_by_server(sock: socket.socket) -> bool:
    """Read until the server closes the connection; False if it was still open after TIMEOUT_S."""
    sock.settimeout(TIMEOUT_S)
    try:
        while sock.recv(65536):
            pass
    except TimeoutError:
        return False
    except ConnectionResetError:
        pass
    return True


def still_serving(https_cdn: HttpsCdn) -> None:
    assert https_get(https_cdn.https_port, "/api/health", ca=https_cdn.ca_file).status == 200
    client = H2Client(https_cdn.https_port, "localhost", https_cdn.ca_file)
    try:
        assert client.get("/api/health").status == 200
    finally:
        client.close()


def test_garbage_before_the_client_hello_is_cut_off(https_cdn: HttpsCdn) -> None:
    with socket.create_connection(("127.0.0.1", https_cdn.https_port)) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n" + b"\x00\xff" * 512)
        assert closed_by_server(sock)
    still_serving(https_cdn)


def test_a_truncated_handshake_leaves_the_edge_serving(https_cdn: HttpsCdn) -> None:
    hello = client_hello()
    for cut in (5, len(hello) // 2, len(hello) - 1):
        with socket.create_connection(("127.0.0.1", https_cdn.https_port)) as sock:
            sock.sendall(hello[:cut])
    still_serving(https_cdn)


def test_a_handshake_that_never_finishes_is_closed_after_the_deadline(https_cdn: HttpsCdn) -> None:
    hello = client_hello()
    with socket.create_connection(("127.0.0.1", https_cdn.https_port)) as silent, \
            socket.create_connection(("127.0.0.1", https_cdn.https_port)) as half:
        half.sendall(hello[: len(hello) // 2])
        still_serving(https_cdn)  # while both wait
        assert closed_by_server(silent) and closed_by_server(half)


def test_http2_rapid_reset_ends_the_connection_and_spares_the_others(https_cdn: HttpsCdn) -> None:
    attacker = H2Client(https_cdn.https_port, "localhost", https_cdn.ca_file)
    try:
        for _ in range(MAX_RESETS * 4):
            stream_id = attacker.conn.get_next_available_stream_id()
            attacker.conn.send_headers(stream_id, attacker.request_headers("/api/health"), end_stream=True)
            attacker.conn.reset_stream(stream_id, h2.errors.ErrorCodes.CANCEL)
        try:
            attacker.send()
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            pass  # already closed by the edge while we were still sending
        goaway = attacker.until_closed()
        assert goaway is not None and goaway.error_code == h2.errors.ErrorCodes.ENHANCE_YOUR_CALM
    finally:
        attacker.close()
    still_serving(https_cdn)


def test_more_streams_than_allowed_end_the_connection(https_cdn: HttpsCdn) -> None:
    attacker = H2Client(https_cdn.https_port, "localhost", https_cdn.ca_file)
    try:
        # Sent before the edge's SETTINGS are read, so the client library does not hold them back: 300
        # requests left open (no END_STREAM) against a limit of 100.
        for _ in range(300):
            attacker.conn.send_headers(attacker.conn.get_next_available_stream_id(),
                                       attacker.request_headers("/api/health", "POST"), end_stream=False)
        try:
            attacker.send()
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            pass
        goaway = attacker.until_closed()
        assert goaway is not None and goaway.error_code != h2.errors.ErrorCodes.NO_ERROR
    finally:
        attacker.close()
    still_serving(https_cdn)


def test_an_oversize_header_list_is_refused(https_cdn: HttpsCdn) -> None:
    attacker = H2Client(https_cdn.https_port, "localhost", https_cdn.ca_file)
    try:
        assert attacker.get("/api/health").status == 200  # a stream answered before
        stream_id = attacker.conn.get_next_available_stream_id()
        flood = [(f"x-flood-{i}", "v" * 1000) for i in range(64)]  # 64 KB of fields against a 16 KB limit
        attacker.conn.send_headers(stream_id, attacker.request_headers("/api/health", extra=flood), end_stream=True)
        attacker.send()
        with pytest.raises((ConnectionResetError, h2.exceptions.ProtocolError, ssl.SSLError)):
            attacker.answer(stream_id)  # reset or GOAWAY: never an answer
        goaway = attacker.terminated or attacker.until_closed()
        # The refused stream counts as processed (RFC 9113 6.8): a client retries none above the GOAWAY's last
        # stream on a new connection, where this one would be refused again.
        assert goaway is not None and goaway.last_stream_id == stream_id, goaway
    finally:
        attacker.close()
    still_serving(https_cdn)


def test_endless_continuation_frames_end_the_connection(https_cdn: HttpsCdn) -> None:
    """A HEADERS frame without END_HEADERS followed by empty CONTINUATION frames: they add nothing to the
    header list, so only a cap on the frames themselves stops a client holding the worker with them."""
    attacker = H2Client(https_cdn.https_port, "localhost", https_cdn.ca_file)
    try:
        attacker.send()  # preface and SETTINGS
        start = frame(0x1, b"\x82\x87\x84", flags=0x1, stream_id=1)  # GET https /, END_STREAM, no END_HEADERS
        try:
            attacker.sock.sendall(start + frame(0x9, b"", stream_id=1) * 20000)
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            pass  # already closed by the edge while we were still sending
        goaway = attacker.until_closed()
        assert goaway is not None and goaway.error_code != h2.errors.ErrorCodes.NO_ERROR
    finally:
        attacker.close()
    still_serving(https_cdn)


def test_an_hpack_bomb_is_refused(https_cdn: HttpsCdn) -> None:
    """One 4,000-byte field put in the HPACK table, then named again a byte at a time: a 4 KB header block
    that decodes to 400 KB of fields, against a 16 KB limit. Decoding stops there and the connection is
    ended (the HTTP/1.1 head's own limit, further on, would only refuse the one stream)."""
    attacker = H2Client(https_cdn.https_port, "localhost", https_cdn.ca_file)
    try:
        attacker.send()
        fields = [*attacker.request_headers("/api/health"), *[(b"x-bomb", b"b" * 4000)] * 100]
        block = hpack.Encoder().encode(fields)
        assert len(block) < 5000  # the field is sent once, then indexed
        attacker.sock.sendall(frame(0x1, block, flags=0x5, stream_id=1))  # END_STREAM | END_HEADERS
        goaway = attacker.until_closed()  # decoding stops at the limit: the connection is ended, not answered
        assert goaway is not None and goaway.error_code == h2.errors.ErrorCodes.ENHANCE_YOUR_CALM
    finally:
        attacker.close()
    still_serving(https_cdn)


def test_a_verified_client_still_completes_its_handshake(https_cdn: HttpsCdn) -> None:
    assert handshake(https_cdn.https_port, "localhost", client_context(https_cdn.ca_file)).alpn == "http/1.1"


def test_none_of_it_left_a_traceback_in_the_log(https_cdn: HttpsCdn) -> None:
    log = https_cdn.cdn.log_path.read_text(errors="replace")
    assert "Traceback" not in log and "Task exception was never retrieved" not in log, log[-4000:]
