"""A ClientHello whose server name (SNI) is not ASCII, against a real `assetcdn up` https port: each
handshake is refused with a fatal unrecognized_name alert, and the edge's log gets one line for all of
them instead of a Python traceback per handshake."""

from __future__ import annotations

import socket

import pytest

from tests.edge.tls.client import TIMEOUT_S, client_context, handshake
from tests.support.https import NOT_ASCII, HttpsCdn, client_hello_naming

pytestmark = pytest.mark.integration

HANDSHAKES = 20
LOG_LINE = "its server name (SNI) is not ASCII"
UNRECOGNIZED_NAME_ALERT = b"\x15\x03\x03\x00\x02\x02\x70"  # alert record, fatal (2), unrecognized_name (112)


def answer_to(port: int, hello: bytes, *, pieces: int = 1) -> bytes:
    """Everything the server sends back until it closes the connection; `hello` is sent in `pieces`
    writes."""
    received = b""
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT_S) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        size = -(-len(hello) // pieces)
        for start in range(0, len(hello), size):
            sock.sendall(hello[start:start + size])
        while chunk := sock.recv(65536):
            received += chunk
    return received


def test_a_server_name_that_is_not_ascii_is_refused_with_one_log_line(https_cdn: HttpsCdn) -> None:
    hello = client_hello_naming(NOT_ASCII)
    for number in range(HANDSHAKES):
        # Some sent in several writes: the edge reads the whole first record before it decides.
        reply = answer_to(https_cdn.https_port, hello, pieces=1 + number % 4)
        assert reply == UNRECOGNIZED_NAME_ALERT, reply.hex()
    assert handshake(https_cdn.https_port, "localhost", client_context(https_cdn.ca_file)).alpn == "http/1.1"
    log = https_cdn.cdn.log_path.read_text(errors="replace")
    assert "Traceback" not in log and "Exception ignored" not in log, log[-4000:]
    lines = [line for line in log.splitlines() if LOG_LINE in line]
    assert len(lines) == 1, lines  # one worker: one line a minute at most
