"""The first-record check of the https port (assetcdn/edge/tls/client_hello.py) on real ClientHellos,
fed as the socket would, in pieces: what it sends the client, and what the TLS protocol behind it gets."""

from __future__ import annotations

import pytest

from assetcdn.edge.tls.client_hello import (
    MAX_RECORD,
    UNRECOGNIZED_NAME_ALERT,
    ClientHelloCheck,
    host_name,
)
from tests.support.https import NOT_ASCII, PLACEHOLDER, client_hello_naming


class Connection:
    """The socket's side: what was written to the client, whether it was closed, and the protocol reading."""

    def __init__(self) -> None:
        self.written = b""
        self.closed = False
        self.protocol: object = None

    def write(self, data: bytes) -> None:
        self.written += data

    def close(self) -> None:
        self.closed = True

    def set_protocol(self, protocol: object) -> None:
        self.protocol = protocol


class Tls:
    """The TLS protocol's side: every byte it was given, through a buffer smaller than a ClientHello."""

    def __init__(self) -> None:
        self.received = bytearray()
        self.buffer = bytearray(100)
        self.made = self.lost = 0

    def connection_made(self, _transport: object) -> None:
        self.made += 1

    def connection_lost(self, _exc: Exception | None) -> None:
        self.lost += 1

    def eof_received(self) -> None:
        return None

    def get_buffer(self, _size: int) -> memoryview:
        return memoryview(self.buffer)

    def buffer_updated(self, count: int) -> None:
        self.received += self.buffer[:count]


def fed(data: bytes, piece: int) -> tuple[ClientHelloCheck, Connection, Tls, list[bytes]]:
    connection, tls, refused = Connection(), Tls(), list[bytes]()
    check = ClientHelloCheck(tls, refused.append)
    check.connection_made(connection)  # type: ignore[arg-type]
    for start in range(0, len(data), piece):
        if connection.protocol is None and not connection.closed:
            check.data_received(data[start:start + piece])
    return check, connection, tls, refused


def test_the_host_name_of_a_real_client_hello_is_read_as_sent() -> None:
    assert host_name(client_hello_naming(PLACEHOLDER)) == PLACEHOLDER
    assert host_name(client_hello_naming(NOT_ASCII)) == NOT_ASCII


def test_a_client_hello_cut_anywhere_is_read_without_error() -> None:
    hello = client_hello_naming(NOT_ASCII)
    assert {host_name(hello[:end]) for end in range(len(hello) + 1)} == {None, NOT_ASCII}


@pytest.mark.parametrize("piece", [1, 3, 100, 100_000])
def test_a_server_name_that_is_not_ascii_is_answered_with_an_alert_once_the_record_is_whole(piece: int) -> None:
    hello = client_hello_naming(NOT_ASCII)
    _check, connection, tls, refused = fed(hello, piece)
    assert connection.written == UNRECOGNIZED_NAME_ALERT and connection.closed
    assert refused == [NOT_ASCII] and tls.received == b"" and connection.protocol is None


@pytest.mark.parametrize("piece", [1, 3, 100, 100_000])
def test_an_ascii_server_name_goes_to_tls_byte_for_byte(piece: int) -> None:
    hello = client_hello_naming(PLACEHOLDER) + b"early data"  # what follows in the same read goes too
    check, connection, tls, refused = fed(hello, piece)
    assert connection.protocol is tls and tls.made == 1
    # In pieces, the first record is handed over whole and the rest is read by TLS itself.
    assert bytes(tls.received) == hello[:len(tls.received)] and len(tls.received) >= len(hello) - len(b"early data")
    assert connection.written == b"" and not connection.closed and refused == []
    check.connection_lost(None)
    assert tls.lost == 1


@pytest.mark.parametrize("data", [b"GET / HTTP/1.1\r\n\r\n", b"\x16\x03\x01" + (MAX_RECORD + 1).to_bytes(2) + b"\x01"])
def test_what_is_not_a_client_hello_record_goes_to_tls_as_it_is(data: bytes) -> None:
    _check, connection, tls, refused = fed(data, 100)
    assert connection.protocol is tls and bytes(tls.received) == data
    assert connection.written == b"" and refused == []
