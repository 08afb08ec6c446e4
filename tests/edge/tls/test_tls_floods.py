"""One client misbehaving on the edge's https port (a real `assetcdn up`, one worker) while others are served:
control-frame floods (PING, SETTINGS, WINDOW_UPDATE) and pipelined HTTP/1.1 over TLS leave plain and TLS hits
answering at once; clients that never read their answers cost bounded memory, which comes back, and are
closed once no byte moves; a client announcing a huge HPACK table does not get one.

Everything here is seen from the wire, as a client would see it."""

from __future__ import annotations

import http.client
import os
import socket
import ssl
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.settings
import pytest

from tests.edge.tls.client import TIMEOUT_S, H2Client, client_context
from tests.edge.tls.flood import BURST, burst
from tests.support.https import ZONE, HttpsCdn, start_https_cdn, worker_rss

pytestmark = pytest.mark.integration

SEND_TIMEOUT_S = 2.0        # the edge's no-progress timeout, short here
MAX_CONTROL_FRAMES = 500    # control frames per second a connection may send
PROBES = 20
PROBE_LIMIT_S = 0.1         # the median answer of a hit during a flood
SMALL = "v1/floods/small.bin"
LARGE = "v1/floods/large.bin"  # 1 MB: a memory-tier body
LARGE_BODY = os.urandom(1024 * 1024)
ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def cdn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpsCdn]:
    running = start_https_cdn(tmp_path_factory.mktemp("floods"), {
        "ASSETCDN_TLS_REDIRECT_HTTP": "false",  # plain hits are answered, not redirected
        "ASSETCDN_TLS_SEND_TIMEOUT_S": str(SEND_TIMEOUT_S),
        "ASSETCDN_TLS_H2_MAX_CONTROL_FRAMES_PER_S": str(MAX_CONTROL_FRAMES),
    })
    try:
        running.upload(SMALL, os.urandom(1024))
        running.upload(LARGE, LARGE_BODY)
        yield running
    finally:
        running.cdn.stop()


def plain_connection(cdn: HttpsCdn) -> http.client.HTTPConnection:
    return http.client.HTTPConnection("127.0.0.1", cdn.plain_port, timeout=TIMEOUT_S)


def tls_connection(cdn: HttpsCdn) -> http.client.HTTPConnection:
    connection = http.client.HTTPConnection("localhost", cdn.https_port, timeout=TIMEOUT_S)
    raw = socket.create_connection(("127.0.0.1", cdn.https_port), timeout=TIMEOUT_S)
    connection.sock = client_context(None).wrap_socket(raw, server_hostname="localhost")
    return connection


def hit(connection: http.client.HTTPConnection, path: str) -> float:
    """Seconds to answer one GET on a kept-alive connection; it must be a hit."""
    started = time.perf_counter()
    connection.request("GET", f"/{ZONE}/{path}")
    response = connection.getresponse()
    response.read()
    elapsed = time.perf_counter() - started
    assert response.status == 200 and response.getheader("X-Cache") == "HIT"
    return elapsed


def worker_cpu(cdn: HttpsCdn) -> float:
    """CPU seconds (user and system) the edge's (only) worker has used."""
    (pid,) = cdn.cdn.pids("--name edge-0")
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.parametrize("kind", ["ping", "settings", "window_update", "pipelined"])
def test_a_flood_from_one_connection_leaves_other_clients_served(cdn: HttpsCdn, kind: str) -> None:
    plain, tls = plain_connection(cdn), tls_connection(cdn)
    for connection in (plain, tls):
        for _ in range(3):  # a MISS first, then hits
            connection.request("GET", f"/{ZONE}/{SMALL}")
            connection.getresponse().read()
    flood = subprocess.Popen([sys.executable, "-m", "tests.edge.tls.flood", kind, str(cdn.https_port),
                              "localhost", f"/{ZONE}/{SMALL}"], cwd=ROOT, stdout=subprocess.PIPE)
    try:
        assert flood.stdout is not None and flood.stdout.readline() == b"flooding\n"
        plain_s = [hit(plain, SMALL) for _ in range(PROBES)]
        tls_s = [hit(tls, SMALL) for _ in range(PROBES)]
        assert flood.poll() is None  # still flooding throughout
    finally:
        flood.kill()
        flood.wait()
        plain.close()
        tls.close()
    assert statistics.median(plain_s) < PROBE_LIMIT_S, plain_s
    assert statistics.median(tls_s) < PROBE_LIMIT_S, tls_s


@pytest.mark.parametrize("kind", ["ping", "settings", "window_update", "priority"])
def test_a_control_frame_flood_is_ended_with_enhance_your_calm(cdn: HttpsCdn, kind: str) -> None:
    attacker = H2Client(cdn.https_port)
    try:
        attacker.send()  # preface and SETTINGS
        try:
            for _ in range(MAX_CONTROL_FRAMES * 8 // BURST):  # eight times the limit, at once
                attacker.sock.sendall(burst(kind, "localhost", f"/{ZONE}/{SMALL}"))
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            pass  # already closed by the edge while we were still sending
        goaway = attacker.until_closed()
        assert goaway is not None and goaway.error_code == h2.errors.ErrorCodes.ENHANCE_YOUR_CALM
    finally:
        attacker.close()
    client = H2Client(cdn.https_port)  # a client pinging within the limit is answered
    try:
        for i in range(10):
            client.conn.ping(i.to_bytes(8, "big"))
        assert client.get(f"/{ZONE}/{SMALL}").status == 200
    finally:
        client.close()


def closed_by_server(socks: list[ssl.SSLSocket], deadline: float) -> bool:
    """Read (and drop) what each socket receives until the edge has closed every one, or the deadline."""
    for sock in socks:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            while sock.recv(1 << 16):
                pass
        except (TimeoutError, ssl.SSLError):
            return False
        except OSError:
            pass
    return True


def h2_never_reading(cdn: HttpsCdn, requests: int) -> ssl.SSLSocket:
    """A connection that shuts every stream's window (SETTINGS_INITIAL_WINDOW_SIZE = 0) and asks for the
    large file `requests` times."""
    raw = socket.create_connection(("127.0.0.1", cdn.https_port), timeout=TIMEOUT_S)
    sock = client_context(None, alpn=("h2",)).wrap_socket(raw, server_hostname="localhost")
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding=None))
    conn.local_settings = h2.settings.Settings(client=True, initial_values={
        h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 0})
    conn.initiate_connection()
    for _ in range(requests):
        conn.send_headers(conn.get_next_available_stream_id(), [
            (b":method", b"GET"), (b":path", f"/{ZONE}/{LARGE}".encode()), (b":scheme", b"https"),
            (b":authority", b"localhost")], end_stream=True)
    sock.sendall(conn.data_to_send())
    return sock


def http1_never_reading(cdn: HttpsCdn, requests: int) -> ssl.SSLSocket:
    raw = socket.create_connection(("127.0.0.1", cdn.https_port), timeout=TIMEOUT_S)
    sock = client_context(None).wrap_socket(raw, server_hostname="localhost")
    sock.sendall(f"GET /{ZONE}/{LARGE} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode() * requests)
    return sock


def warm(cdn: HttpsCdn) -> None:
    """The large file is a hit, whole, on both protocols before anything is measured."""
    client = H2Client(cdn.https_port)
    try:
        for _ in range(2):
            answer = client.get(f"/{ZONE}/{LARGE}")
            assert answer.status == 200 and answer.body == LARGE_BODY
    finally:
        client.close()
    tls = tls_connection(cdn)
    try:
        for _ in range(2):
            tls.request("GET", f"/{ZONE}/{LARGE}")
            response = tls.getresponse()
            assert response.status == 200 and response.read() == LARGE_BODY
        assert response.getheader("X-Cache") == "HIT"
    finally:
        tls.close()


@pytest.mark.parametrize(("protocol", "connections", "requests"), [("h2", 10, 100), ("http/1.1", 200, 5)])
def test_clients_that_never_read_cost_bounded_memory_that_comes_back(
        cdn: HttpsCdn, protocol: str, connections: int, requests: int) -> None:
    warm(cdn)
    start = worker_rss(cdn)
    opened = h2_never_reading if protocol == "h2" else http1_never_reading
    socks = [opened(cdn, requests) for _ in range(connections)]
    try:
        peak = worker_rss(cdn)
        stalled_until = time.monotonic() + SEND_TIMEOUT_S
        while time.monotonic() < stalled_until:  # while it runs (the edge gives up once no byte moved for long)
            peak = max(peak, worker_rss(cdn))
            time.sleep(0.05)
        assert peak - start <= 50 * 1024 * 1024, (start, peak)
        # No byte moves: the edge closes these connections (a few seconds, not the header or idle timeout).
        assert closed_by_server(socks, time.monotonic() + SEND_TIMEOUT_S + 5)
    finally:
        for sock in socks:
            sock.close()
    deadline = time.monotonic() + 10
    while worker_rss(cdn) > start + 20 * 1024 * 1024:
        assert time.monotonic() < deadline, (start, worker_rss(cdn))
        time.sleep(0.1)


def answered(client: H2Client, ids: list[int]) -> set[int]:
    """The statuses of the streams `ids`, answered in any order."""
    statuses, open_ids = set(), set(ids)
    while open_ids:
        for event in client.receive():
            if isinstance(event, h2.events.ResponseReceived):
                statuses.add(int(dict(event.headers or ())[b":status"]))
            elif isinstance(event, h2.events.DataReceived):
                client.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, (h2.events.StreamEnded, h2.events.StreamReset)):
                open_ids.discard(event.stream_id)
        client.send()
    return statuses


def test_the_hpack_table_stays_the_servers_size(cdn: HttpsCdn) -> None:
    """A client allowing a 4 GB HPACK table: the edge's encoder keeps to 4,096 bytes (the table size it
    announces to the client's decoder), and answers keep their cost: the worker's CPU for the last 2,000
    requests against the first 2,000 (CPU time, which a loaded machine disturbs far less than wall time).
    Fields indexed on every answer would fill a 4,096-byte table within a hundred answers, so both windows
    are measured long after it has filled and wrapped."""
    client = H2Client(cdn.https_port)
    client.conn.update_settings({h2.settings.SettingCodes.HEADER_TABLE_SIZE: 2 ** 32 - 1})
    client.send()
    batch, total, window = 50, 6000, 2000
    cpu = []  # the worker's CPU seconds every `window` requests
    try:
        for index in range(total // batch):
            if index % (window // batch) == 0:
                cpu.append(worker_cpu(cdn))
            ids = []
            for _ in range(batch):
                stream_id = client.conn.get_next_available_stream_id()
                client.conn.send_headers(stream_id, client.request_headers(f"/{ZONE}/{SMALL}"), end_stream=True)
                ids.append(stream_id)
            client.send()
            assert answered(client, ids) == {200}
            assert client.conn.decoder.header_table_size <= 4096  # the edge's dynamic table size updates
        cpu.append(worker_cpu(cdn))
    finally:
        client.close()
    first, last = cpu[1] - cpu[0], cpu[-1] - cpu[-2]
    assert last <= 2 * first, (first, last)
