"""The first TLS record of a connection, read before OpenSSL sees it: a ClientHello whose server name
(SNI) is not ASCII is refused here with a fatal ``unrecognized_name`` alert.

Python's ``ssl`` reads the name as ASCII before any callback runs; one that is not fails the handshake
inside OpenSSL, whose fatal alert uvloop's TLS transport drops as it closes the connection, so the
client would only see the connection closed. RFC 6066 section 3: a host name is ASCII, and a server
that does not recognize the name may abort with ``unrecognized_name`` (RFC 8446 section 6.2 keeps
``decode_error`` for a message whose lengths or fields cannot be parsed; this one parses).

:class:`ClientHelloCheck` holds the bytes of the first record only until it is whole (at most one
record: 5 + 16384 bytes), then either refuses it or hands the connection and every byte it holds to
the TLS protocol, which then reads from the socket directly. Anything it cannot read as a ClientHello
(another record type, an oversized record, a message cut short) goes to the TLS protocol as it is.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, cast

HANDSHAKE = 22          # record content type
CLIENT_HELLO = 1        # handshake message type
SERVER_NAME = 0         # extension type (RFC 6066 section 3)
HOST_NAME = 0           # server name type
RECORD_HEADER = 5       # type, version (2), length (2)
MAX_RECORD = 2 ** 14    # RFC 8446 section 5.1: a longer record is OpenSSL's to refuse
# A fatal (2) unrecognized_name (112) alert record, TLS 1.2 record version (RFC 8446 section 5.1).
UNRECOGNIZED_NAME_ALERT = bytes((21, 3, 3, 0, 2, 2, 112))


def host_name(record: bytes) -> bytes | None:
    """The host name a ClientHello record's server_name extension holds, as sent; None if `record` is
    not a ClientHello or has no host name within it. Read once per connection: lengths by indexing, no
    slice but the name's."""
    if len(record) < RECORD_HEADER + 4 or record[0] != HANDSHAKE or record[RECORD_HEADER] != CLIENT_HELLO:
        return None
    # The message, cut at the record's end: a name beyond it (a ClientHello over several records) is not read.
    end = min(len(record), RECORD_HEADER + 4 + (record[6] << 16 | record[7] << 8 | record[8]))
    at = RECORD_HEADER + 4 + 2 + 32                                   # legacy_version, random
    if at >= end:
        return None
    at += 1 + record[at]                                              # legacy_session_id
    if at + 1 >= end:
        return None
    at += 2 + (record[at] << 8 | record[at + 1])                      # cipher_suites
    if at >= end:
        return None
    at += 1 + record[at]                                              # legacy_compression_methods
    if at + 1 >= end:
        return None
    extensions_end = min(end, at + 2 + (record[at] << 8 | record[at + 1]))
    at += 2
    while at + 4 <= extensions_end:
        kind, length = record[at] << 8 | record[at + 1], record[at + 2] << 8 | record[at + 3]
        at += 4
        if kind == SERVER_NAME:
            if at + 1 >= extensions_end:
                return None
            names_end = min(extensions_end, at + length, at + 2 + (record[at] << 8 | record[at + 1]))
            at += 2
            while at + 3 <= names_end:
                name_type, name_length = record[at], record[at + 1] << 8 | record[at + 2]
                at += 3
                if name_type == HOST_NAME:
                    return record[at:at + name_length] if at + name_length <= names_end else None
                at += name_length
            return None
        at += length
    return None


class ClientHelloCheck(asyncio.Protocol):
    """A connection's protocol until its first record is whole (see the module docstring). `tls` is the
    TLS protocol (uvloop's SSLProtocol, a buffered protocol), told of the connection at once so that its
    handshake timeout covers a ClientHello that never ends; `refused` is told each name refused."""

    __slots__ = ("tls", "refused", "transport", "head")

    def __init__(self, tls: Any, refused: Callable[[bytes], None]) -> None:
        self.tls = tls
        self.refused = refused
        self.transport: asyncio.Transport | None = None
        self.head = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's TCPTransport, not a subclass
        self.tls.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        head = self.head + data
        if head[0] == HANDSHAKE:
            if len(head) < RECORD_HEADER:
                self.head = head
                return
            length = int.from_bytes(head[3:5])
            if length <= MAX_RECORD:
                if len(head) < RECORD_HEADER + length:
                    self.head = head
                    return
                name = host_name(head[:RECORD_HEADER + length])
                if name is not None and not name.isascii():
                    self._refuse(name)
                    return
        self._hand_over(head)

    def _refuse(self, name: bytes) -> None:
        assert self.transport is not None
        self.head = b""
        self.refused(name)
        self.transport.write(UNRECOGNIZED_NAME_ALERT)
        self.transport.close()  # once the alert is written

    def _hand_over(self, head: bytes) -> None:
        assert self.transport is not None
        self.head = b""
        self.transport.set_protocol(self.tls)
        size = len(head)
        buffer = self.tls.get_buffer(size)
        if len(buffer) >= size:  # the usual case: one copy into the TLS protocol's buffer
            buffer[:size] = head
            self.tls.buffer_updated(size)
            return
        view = memoryview(head)
        while view:
            buffer = self.tls.get_buffer(len(view))
            count = min(len(buffer), len(view))
            buffer[:count] = view[:count]
            self.tls.buffer_updated(count)
            view = view[count:]

    def eof_received(self) -> bool | None:
        result: bool | None = self.tls.eof_received()
        return result

    def connection_lost(self, exc: Exception | None) -> None:
        self.tls.connection_lost(exc)
