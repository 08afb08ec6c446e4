"""Clients of the edge's https port for tests: TLS handshakes (what certificate and version), HTTP/1.1
over TLS, and HTTP/2 with the `h2` library (the same python-hyper library the edge uses, here as a client)."""

from __future__ import annotations

import http.client
import socket
import ssl
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import h2.config
import h2.connection
import h2.events

TIMEOUT_S = 20.0


def client_context(ca: Path | None, *, alpn: tuple[str, ...] = ("http/1.1",),
                   version: ssl.TLSVersion | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(ca)) if ca else ssl._create_unverified_context()  # noqa: S323
    if version is not None:
        with warnings.catch_warnings():  # TLS 1.0 and 1.1 are deprecated: offering them is the point
            warnings.simplefilter("ignore", DeprecationWarning)
            context.minimum_version = context.maximum_version = version
        if version < ssl.TLSVersion.TLSv1_2:
            context.set_ciphers("ALL:@SECLEVEL=0")  # so the client really offers the old version
    context.set_alpn_protocols(list(alpn))
    return context


@dataclass
class Handshake:
    version: str | None
    cipher: str | None
    certificate: bytes  # DER
    alpn: str | None


def handshake(port: int, server_name: str, context: ssl.SSLContext) -> Handshake:
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT_S) as raw, \
            context.wrap_socket(raw, server_hostname=server_name) as tls:
        der = tls.getpeercert(binary_form=True)
        assert der is not None
        cipher = tls.cipher()
        return Handshake(tls.version(), cipher[0] if cipher else None, der, tls.selected_alpn_protocol())


@dataclass
class Answer:
    status: int
    headers: dict[str, str]  # lower-case names; of a repeated field, its last value
    body: bytes
    fields: list[tuple[str, str]] = field(default_factory=list)  # every field as sent, in order

    def values(self, name: str) -> list[str]:
        """Every value of the field `name` (lower case), in order."""
        return [value for field_name, value in self.fields if field_name.lower() == name]


def https_get(port: int, path: str, *, server_name: str = "localhost", ca: Path | None = None,
              method: str = "GET", headers: dict[str, str] | None = None, body: bytes | None = None) -> Answer:
    raw = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT_S)
    connection = http.client.HTTPConnection(server_name, port, timeout=TIMEOUT_S)  # Host: server_name:port
    connection.sock = client_context(ca).wrap_socket(raw, server_hostname=server_name)  # SNI: server_name
    try:
        connection.request(method, path, body=body, headers=headers or {})
        response = connection.getresponse()
        fields = response.getheaders()
        return Answer(response.status, {k.lower(): v for k, v in fields}, response.read(), fields)
    finally:
        connection.close()


def _sent_over_tls13(sock: socket.socket, request: bytes, server_name: str,
                     ca: Path | None) -> tuple[ssl.SSLObject, ssl.MemoryBIO]:
    """A TLS 1.3 handshake over `sock` through memory BIOs, then `request` sent: (the TLS object, the BIO the
    caller feeds what it reads off the wire into)."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = client_context(ca, version=ssl.TLSVersion.TLSv1_3).wrap_bio(incoming, outgoing, server_hostname=server_name)
    while True:
        try:
            tls.do_handshake()
            break
        except ssl.SSLWantReadError:
            sock.sendall(outgoing.read())
            chunk = sock.recv(65536)
            assert chunk, "closed during the handshake"
            incoming.write(chunk)
    tls.write(request)
    sock.sendall(outgoing.read())
    return tls, incoming


def answer_records(port: int, request: bytes, *, server_name: str = "localhost", ca: Path | None = None) -> list[bytes]:
    """The plaintext of each TLS record that carries application data, as the server sent them, for
    `request` (one whole HTTP/1.1 request that closes the connection) over a TLS 1.3 connection: its
    records are read off the wire one at a time, each decrypted alone, until the server's close_notify."""
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT_S) as sock:
        tls, incoming = _sent_over_tls13(sock, request, server_name, ca)
        wire = b""
        records: list[bytes] = []
        while True:
            while len(wire) < 5 or len(wire) < 5 + int.from_bytes(wire[3:5]):
                chunk = sock.recv(65536)
                assert chunk, "closed before its close_notify"
                wire += chunk
            end = 5 + int.from_bytes(wire[3:5])
            incoming.write(wire[:end])
            wire = wire[end:]
            plaintext = b""
            try:
                while data := tls.read(65536):
                    plaintext += data
            except ssl.SSLWantReadError:  # the record is read (a session ticket carries no application data)
                if plaintext:
                    records.append(plaintext)
                continue
            return records  # an empty read: the server's close_notify


def closing_answer(port: int, request: bytes, *, server_name: str = "localhost",
                   ca: Path | None = None) -> tuple[bytes, bytes]:
    """(the plaintext answer, what came after the server's close_notify until the server closed the TCP
    connection) for `request` (one whole HTTP/1.1 request that closes the connection) over TLS 1.3, this
    client never sending a close_notify of its own; a server that waits for it runs into TIMEOUT_S."""
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT_S) as sock:
        tls, incoming = _sent_over_tls13(sock, request, server_name, ca)
        plaintext = b""
        while True:
            try:
                data = tls.read(65536)
            except ssl.SSLWantReadError:
                chunk = sock.recv(65536)
                assert chunk, "closed before its close_notify"
                incoming.write(chunk)
                continue
            if not data:  # the server's close_notify
                break
            plaintext += data
        after = b""
        while chunk := sock.recv(65536):
            after += chunk
        return plaintext, after + incoming.read()


@dataclass
class H2Client:
    """A blocking HTTP/2 client over one TLS connection."""

    port: int
    server_name: str = "localhost"
    ca: Path | None = None
    sock: ssl.SSLSocket = field(init=False)
    conn: h2.connection.H2Connection = field(init=False)
    terminated: h2.events.ConnectionTerminated | None = None

    def __post_init__(self) -> None:
        raw = socket.create_connection(("127.0.0.1", self.port), timeout=TIMEOUT_S)
        self.sock = client_context(self.ca, alpn=("h2",)).wrap_socket(raw, server_hostname=self.server_name)
        assert self.sock.selected_alpn_protocol() == "h2"
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding=None))
        self.conn.initiate_connection()

    def close(self) -> None:
        self.sock.close()

    def send(self) -> None:
        data = self.conn.data_to_send()
        if data:
            self.sock.sendall(data)

    def request_headers(self, path: str, method: str = "GET", extra: list[tuple[str, str]] | None = None
                        ) -> list[tuple[bytes, bytes]]:
        return [(b":method", method.encode()), (b":path", path.encode()), (b":scheme", b"https"),
                (b":authority", self.server_name.encode()),
                *((k.encode(), v.encode()) for k, v in (extra or []))]

    def get(self, path: str, method: str = "GET", extra: list[tuple[str, str]] | None = None) -> Answer:
        stream_id = self.conn.get_next_available_stream_id()
        self.conn.send_headers(stream_id, self.request_headers(path, method, extra), end_stream=True)
        self.send()
        return self.answer(stream_id)

    def send_body(self, path: str, method: str, headers: list[tuple[str, str]], body: bytes) -> Answer:
        """A request with a body, in DATA frames as the windows allow (no content-length unless in `headers`)."""
        stream_id = self.conn.get_next_available_stream_id()
        self.conn.send_headers(stream_id, self.request_headers(path, method, headers))
        view = memoryview(body)
        while view:
            window = min(self.conn.local_flow_control_window(stream_id), self.conn.max_outbound_frame_size)
            if window <= 0:
                self.send()
                self.receive()  # WINDOW_UPDATE
                continue
            self.conn.send_data(stream_id, bytes(view[:window]))
            view = view[window:]
        self.conn.end_stream(stream_id)
        self.send()
        return self.answer(stream_id)

    def answer(self, stream_id: int) -> Answer:
        status, headers, body, fields = 0, {}, bytearray(), []
        while True:
            for event in self.receive():
                if isinstance(event, h2.events.ResponseReceived) and event.stream_id == stream_id:
                    for name, value in event.headers or ():
                        headers[bytes(name).decode()] = bytes(value).decode()
                        fields.append((bytes(name).decode(), bytes(value).decode()))
                    status = int(headers.pop(":status"))
                elif isinstance(event, h2.events.DataReceived) and event.stream_id == stream_id:
                    body += event.data or b""
                    self.conn.acknowledge_received_data(event.flow_controlled_length, stream_id)
                elif isinstance(event, h2.events.StreamEnded) and event.stream_id == stream_id:
                    self.send()
                    return Answer(status, headers, bytes(body), fields)
                elif isinstance(event, h2.events.StreamReset) and event.stream_id == stream_id:
                    raise ConnectionResetError(f"stream reset: {event.error_code!r}")
            self.send()

    def receive(self) -> list[h2.events.Event]:
        data = self.sock.recv(65536)
        if not data:
            raise ConnectionResetError("connection closed")
        events = self.conn.receive_data(data)
        for event in events:
            if isinstance(event, h2.events.ConnectionTerminated):
                self.terminated = event
        return events

    def until_closed(self) -> h2.events.ConnectionTerminated | None:
        """Read until the server closes the connection; its GOAWAY, if it sent one."""
        try:
            while True:
                self.receive()
                self.send()
        except (ConnectionResetError, ssl.SSLError, h2.exceptions.ProtocolError, BrokenPipeError):
            return self.terminated
