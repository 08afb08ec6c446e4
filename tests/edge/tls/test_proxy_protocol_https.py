"""The PROXY protocol on a real `assetcdn up` with two edge workers (assetcdn/edge/fastpath/proxy_protocol.py):
on the https port the header comes before the ClientHello, and the address it names is the client's over
HTTP/1.1 and HTTP/2 alike; from an untrusted address, malformed, or never finished, the header closes the
connection before TLS. On the http port, the per-client limit counts that address across both workers."""

from __future__ import annotations

import http.client
import socket
import ssl
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import h2.config
import h2.connection
import orjson
import pytest

from tests.edge.tls.client import TIMEOUT_S, Answer, H2Client, client_context
from tests.integration.harness import METRICS
from tests.support.https import ZONE, HttpsCdn, start_https_cdn
from tests.support.proxy_protocol import UNTRUSTED, v1, v2

pytestmark = pytest.mark.integration

FILE = "v1/proxied.txt"
BODY = b"through a balancer"
HEADER_TIMEOUT_S = 1.0
WAIT_S = 30.0  # the access log is written at each analytics flush; this only bounds a test on a loaded machine


@pytest.fixture(scope="module")
def cdn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpsCdn]:
    running = start_https_cdn(tmp_path_factory.mktemp("proxy-https"), {
        "ASSETCDN_EDGE_PROXY_PROTOCOL": "optional", "ASSETCDN_EDGE_PROXY_PROTOCOL_TRUSTED": "127.0.0.1/32",
        "ASSETCDN_EDGE_PROXY_PROTOCOL_TIMEOUT_S": str(HEADER_TIMEOUT_S), "ASSETCDN_ACCESS_LOG_OUTPUT": "file",
        "ASSETCDN_TLS_REDIRECT_HTTP": "false", "ASSETCDN_COUNTERS_SIGNED_RATE_LIMIT": "100",
        "ASSETCDN_ANALYTICS_FLUSH_INTERVAL_S": "0.2"}, workers=2)  # the access log is written at each flush
    try:
        running.upload(FILE, BODY)
        yield running
    finally:
        running.cdn.stop()


def connect(port: int, header: bytes, source: str = "127.0.0.1") -> socket.socket:
    raw = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT_S, source_address=(source, 0))
    raw.sendall(header)
    return raw


def https_get(port: int, header: bytes, path: str, request_id: str, source: str = "127.0.0.1") -> Answer:
    connection = http.client.HTTPConnection("localhost", port, timeout=TIMEOUT_S)
    connection.sock = client_context(None).wrap_socket(connect(port, header, source), server_hostname="localhost")
    try:
        connection.request("GET", path, headers={"X-Request-ID": request_id})
        response = connection.getresponse()
        return Answer(response.status, {k.lower(): v for k, v in response.getheaders()}, response.read())
    finally:
        connection.close()


@dataclass
class ProxiedH2Client(H2Client):
    """HTTP/2 over TLS on a connection that starts with `header`."""

    header: bytes = b""

    def __post_init__(self) -> None:
        raw = connect(self.port, self.header)
        self.sock = client_context(None, alpn=("h2",)).wrap_socket(raw, server_hostname=self.server_name)
        assert self.sock.selected_alpn_protocol() == "h2"
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding=None))
        self.conn.initiate_connection()

    def get_with_id(self, path: str, request_id: str) -> Answer:
        stream_id = self.conn.get_next_available_stream_id()
        self.conn.send_headers(stream_id, self.request_headers(path, extra=[("x-request-id", request_id)]),
                               end_stream=True)
        self.send()
        return self.answer(stream_id)


def logged_ips(cdn: HttpsCdn, *request_ids: str) -> dict[str, str]:
    """The client_ip the access log (either worker's) wrote for each request."""
    deadline = time.monotonic() + WAIT_S
    while True:
        found = {}
        for path in cdn.cdn.data_dir.rglob("access-edge-0-*.log"):
            for line in path.read_bytes().splitlines():
                entry = orjson.loads(line)
                if entry["request_id"] in request_ids:
                    found[entry["request_id"]] = entry["client_ip"]
        if len(found) == len(request_ids) or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


def closed_before_tls(port: int, sent: bytes, source: str = "127.0.0.1") -> bool:
    """The edge closes the connection after `sent`, unanswered: no TLS handshake follows."""
    raw = connect(port, sent, source)
    try:
        client_context(None).wrap_socket(raw, server_hostname="localhost").close()
    except (ssl.SSLError, ConnectionError, OSError) as exc:
        return not isinstance(exc, TimeoutError)
    return False


def refusals(cdn: HttpsCdn, reason: str) -> float:
    connection = http.client.HTTPConnection("127.0.0.1", cdn.plain_port, timeout=TIMEOUT_S)
    try:
        connection.request("GET", "/metrics", headers=METRICS)
        text = connection.getresponse().read().decode()
    finally:
        connection.close()
    for line in text.splitlines():
        if line.startswith(f'assetcdn_edge_proxy_header_refusals_total{{reason="{reason}"}}'):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_over_tls_the_header_names_the_client_of_http1_and_http2(cdn: HttpsCdn) -> None:
    cases = {"203.0.113.5": v1("203.0.113.5"), "2001:db8::7": v2("2001:db8::7"), "127.0.0.1": v2(None, local=True)}
    ids = {client: str(uuid.uuid4()) for client in cases}
    for client, header in cases.items():
        answer = https_get(cdn.https_port, header, f"/{ZONE}/{FILE}", ids[client])
        assert (answer.status, answer.body) == (200, BODY)
    h2_hit, h2_missing = str(uuid.uuid4()), str(uuid.uuid4())
    streams = ProxiedH2Client(cdn.https_port, header=v2("198.51.100.9"))
    try:
        assert streams.get_with_id(f"/{ZONE}/{FILE}", h2_hit).body == BODY
        assert streams.get_with_id(f"/{ZONE}/v1/none.txt", h2_missing).status == 404
    finally:
        streams.close()
    assert logged_ips(cdn, *ids.values(), h2_hit, h2_missing) == {
        **{request_id: named for named, request_id in ids.items()},
        h2_hit: "198.51.100.9", h2_missing: "198.51.100.9"}


def test_over_tls_an_untrusted_malformed_or_unfinished_header_closes_the_connection(cdn: HttpsCdn) -> None:
    before = {reason: refusals(cdn, reason) for reason in ("untrusted", "malformed", "timeout")}
    assert closed_before_tls(cdn.https_port, v2("203.0.113.99"), UNTRUSTED)
    assert closed_before_tls(cdn.https_port, b"PROXY TCP4 203.0.113.99 127.0.0.1 1\r\n")
    started = time.monotonic()
    with connect(cdn.https_port, v2("203.0.113.99")[:20]) as unfinished:  # and nothing more
        assert unfinished.recv(1) == b""
    # Cut off by proxy_protocol_timeout_s, well before header_timeout_s (20 s) would close an idle connection.
    assert time.monotonic() - started < 15
    assert {reason: refusals(cdn, reason) - count for reason, count in before.items()} == {
        "untrusted": 1, "malformed": 1, "timeout": 1}
    # The untrusted address without a header is served, as itself.
    request_id = str(uuid.uuid4())
    assert https_get(cdn.https_port, b"", f"/{ZONE}/{FILE}", request_id, UNTRUSTED).status == 200
    assert logged_ips(cdn, request_id) == {request_id: UNTRUSTED}


def test_the_limit_counts_the_named_client_across_workers(cdn: HttpsCdn) -> None:
    def remaining(header: bytes) -> str | None:
        raw = connect(cdn.plain_port, header)
        connection = http.client.HTTPConnection("127.0.0.1", cdn.plain_port, timeout=TIMEOUT_S)
        connection.sock = raw
        try:
            connection.request("GET", "/api/signed")
            return connection.getresponse().getheader("X-RateLimit-Remaining")
        finally:
            connection.close()

    # New connections, spread over both workers by the kernel; one count per named client.
    counts = [remaining(v2("203.0.113.50")) for _ in range(6)]
    assert counts == [str(99 - i) for i in range(6)]
    assert remaining(v1("203.0.113.51")) == "99"
