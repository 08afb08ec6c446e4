"""A pull zone on the https port of a real `assetcdn up`: its misses are filled over TLS HTTP/1.1 and HTTP/2 alike
(on the hit path, assetcdn/edge/fastpath/pull_fill.py), the origin told the client came over https; its fresh hits
are the same answer over HTTP/2 (answered from the stream's fields, assetcdn/edge/fastpath/hit_server.py
`_answer_pull_stream`) as over TLS HTTP/1.1, field for field but for the connection's own and those that tick
(Age, Cache-Status), for a GET, a HEAD, a revalidation and a range; a request with directives of its own goes to
the application on both."""

from __future__ import annotations

import asyncio
import http.client
import os
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import h2.events
import pytest
from h2.settings import SettingCodes

from benchmarks.measure import create_pull_zone
from tests.edge.tls.client import Answer, H2Client, https_get
from tests.integration.harness import ACCOUNT
from tests.support.https import HSTS_MAX_AGE_S, HttpsCdn, start_https_cdn

pytestmark = pytest.mark.integration

ZONE = "securepull"
BODY = os.urandom(20 * 1024)
BIG = os.urandom(700 * 1024)  # its fill writes TLS pieces of its chunks
ETAG = '"secure-1"'
# A head HTTP/1.1 relays (within `[origin] max_header_kb` a line and 64 of them in all) past the 64 KB libnghttp2
# sends by default: 60 fields of 2,000 bytes.
LARGE_HEAD = [(f"X-Large-{n}", f"{n:04d}" * 500) for n in range(60)]
SLOW_HEAD_S = 1.0  # how long the origin takes to answer a path under /slow/
PER_ANSWER = {"date", "x-request-id", "connection", "keep-alive", "age", "cache-status"}


class Origin(BaseHTTPRequestHandler):
    """The user's origin: every path is BODY, fresh for ten minutes."""

    protocol_version = "HTTP/1.1"
    asked: list[str] = []
    schemes: dict[str, str | None] = {}  # the X-Forwarded-Proto each path was last asked with

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        type(self).asked.append(self.path)
        type(self).schemes[self.path] = self.headers.get("X-Forwarded-Proto")
        if self.path.startswith("/to-https/") and self.headers.get("X-Forwarded-Proto") != "https":
            # An origin that sends plain HTTP to https, cacheably (nginx's `return 301` under `expires 1d`).
            self.send_response(301)
            for name, value in (("Location", f"https://assets.example.test{self.path}"), ("Content-Length", "0"),
                                ("Cache-Control", "max-age=600")):
                self.send_header(name, value)
            self.end_headers()
            return
        body = BIG if self.path.startswith("/big/") else BODY
        if self.path.startswith("/slow/"):
            time.sleep(SLOW_HEAD_S)
        self.send_response(200)
        for name, value in (("Content-Type", "application/octet-stream"), ("Content-Length", str(len(body))),
                            ("Cache-Control", "max-age=600"), ("ETag", ETAG)):
            if name != "Content-Type" or "/untyped/" not in self.path:  # the hit path's fill hands such over
                self.send_header(name, value)
        if self.path.startswith("/large-head/"):
            for name, value in LARGE_HEAD:
                self.send_header(name, value)
        if self.path.startswith("/hsts/"):  # an origin that turns HSTS off for its own host
            self.send_header("Strict-Transport-Security", "max-age=0")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (http.server's signature)
        pass


@pytest.fixture(scope="module")
def origin() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Origin)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def secure_pull(tmp_path_factory: pytest.TempPathFactory, origin: str) -> Iterator[HttpsCdn]:
    # Plain HTTP served too (the default), not redirected: a zone's URLs are answered on both schemes.
    cdn = start_https_cdn(tmp_path_factory.mktemp("https-pull"), {"ASSETCDN_ORIGIN_ALLOW_LOOPBACK": "true",
                                                                  "ASSETCDN_TLS_REDIRECT_HTTP": "false"})
    try:
        asyncio.run(create_pull_zone(cdn.cdn.control_url, ACCOUNT, ZONE, origin, Path(cdn.cdn.data_dir)))
        yield cdn
    finally:
        cdn.cdn.stop()


def test_a_pull_zones_hits_over_http_2_are_its_answers_over_http_1_1(secure_pull: HttpsCdn) -> None:
    port, ca = secure_pull.https_port, secure_pull.ca_file
    path = f"/{ZONE}/photo.bin"
    first = https_get(port, path, ca=ca)
    assert (first.status, first.headers["x-cache"], first.body) == (200, "MISS", BODY)
    cases: list[tuple[str, dict[str, str], int, bytes]] = [
        ("GET", {}, 200, BODY), ("HEAD", {}, 200, b""), ("GET", {"If-None-Match": ETAG}, 304, b""),
        ("GET", {"Range": "bytes=100-199"}, 206, BODY[100:200])]
    client = H2Client(port, "localhost", ca)
    try:
        for method, headers, status, expected in cases:
            one = https_get(port, path, ca=ca, method=method, headers=headers)
            two = client.get(path, method, [(name.lower(), value) for name, value in headers.items()])
            assert (one.status, one.body, two.status, two.body) == (status, expected, status, expected), method
            assert one.headers["x-cache"] == two.headers["x-cache"] == "HIT"
            assert {k: v for k, v in two.headers.items() if k not in PER_ANSWER} == \
                {k: v for k, v in one.headers.items() if k not in PER_ANSWER}, (method, headers)
            assert 0 <= int(two.headers["age"]) <= 600 and two.headers["cache-status"].startswith("assetcdn; hit")
        # Directives of the request's own: the application answers (a revalidation, as over HTTP/1.1).
        asked = len(Origin.asked)
        directed = client.get(path, "GET", [("cache-control", "no-cache")])
        assert (directed.status, directed.body) == (200, BODY) and len(Origin.asked) == asked + 1
    finally:
        client.close()
    assert "hit path failed" not in secure_pull.cdn.log_path.read_text()  # every case was decided, none crashed


def test_a_pull_zones_misses_over_tls_http_1_1_and_http_2_are_filled_and_kept(secure_pull: HttpsCdn) -> None:
    port, ca = secure_pull.https_port, secure_pull.ca_file
    big = https_get(port, f"/{ZONE}/big/one.bin", ca=ca)
    assert (big.status, big.headers["x-cache"], big.body == BIG) == (200, "MISS", True)
    over_tls = https_get(port, f"/{ZONE}/tls-miss.bin", ca=ca)
    client = H2Client(port, "localhost", ca)
    try:
        over_h2 = client.get(f"/{ZONE}/h2-miss.bin")
        for answer in (over_tls, over_h2):
            assert (answer.status, answer.headers["x-cache"], answer.body) == (200, "MISS", BODY)
            assert answer.headers["content-length"] == str(len(BODY)) and answer.headers["etag"] == ETAG
        assert "connection" not in over_h2.headers and "keep-alive" not in over_h2.headers
        again = [client.get(f"/{ZONE}/{name}") for name in ("tls-miss.bin", "h2-miss.bin")]
        assert [(a.status, a.headers["x-cache"], a.body) for a in again] == [(200, "HIT", BODY)] * 2
    finally:
        client.close()
    assert [Origin.asked.count(f"/{name}") for name in ("tls-miss.bin", "h2-miss.bin")] == [1, 1]
    assert [Origin.schemes[f"/{name}"] for name in ("tls-miss.bin", "h2-miss.bin")] == ["https", "https"]
    assert "hit path failed" not in secure_pull.cdn.log_path.read_text()


def test_an_answer_to_a_plain_http_request_is_never_served_over_https(secure_pull: HttpsCdn) -> None:
    """The origin is told the client's scheme (X-Forwarded-Proto), and may answer the two differently: here plain
    HTTP gets a redirect to https, fresh for ten minutes. Both schemes' answers were kept under one key, so a
    plain-HTTP request (anyone's) made the edge answer every https client with that redirect to the same URL, a
    redirect loop, until it expired. Each scheme's answer is kept for that scheme."""
    port, ca = secure_pull.https_port, secure_pull.ca_file
    path = f"/{ZONE}/to-https/page.bin"
    plain = plain_get(secure_pull.plain_port, path)
    assert (plain.status, plain.headers["x-cache"]) == (301, "MISS")
    client = H2Client(port, "localhost", ca)
    try:
        answers = [https_get(port, path, ca=ca), client.get(path), https_get(port, path, ca=ca)]
    finally:
        client.close()
    assert [(a.status, a.headers["x-cache"], a.body) for a in answers] == [
        (200, "MISS", BODY), (200, "HIT", BODY), (200, "HIT", BODY)]
    again = plain_get(secure_pull.plain_port, path)
    assert (again.status, again.headers["x-cache"]) == (301, "HIT")
    assert Origin.asked.count("/to-https/page.bin") == 2


def plain_get(port: int, path: str) -> Answer:
    """A GET over plain HTTP/1.1 (the edge's plain port), without following a redirect."""
    connection = http.client.HTTPConnection("localhost", port, timeout=30)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return Answer(response.status, {name.lower(): value for name, value in response.getheaders()},
                      response.read())
    finally:
        connection.close()


def test_the_edges_hsts_field_replaces_the_origins_on_every_path(secure_pull: HttpsCdn) -> None:
    """As the application's hook sets it: one Strict-Transport-Security field, the edge's, on a fill over TLS
    HTTP/1.1 and HTTP/2, a hit on either, and an answer the application makes (a request with its own directives)."""
    port, ca = secure_pull.https_port, secure_pull.ca_file
    ours = [f"max-age={HSTS_MAX_AGE_S}"]
    client = H2Client(port, "localhost", ca)
    try:
        answers = {
            "fill over TLS HTTP/1.1": https_get(port, f"/{ZONE}/hsts/one.bin", ca=ca),
            "fill over HTTP/2": client.get(f"/{ZONE}/hsts/two.bin"),
            "hit over TLS HTTP/1.1": https_get(port, f"/{ZONE}/hsts/two.bin", ca=ca),
            "hit over HTTP/2": client.get(f"/{ZONE}/hsts/one.bin"),
            "the application's": client.get(f"/{ZONE}/hsts/one.bin", "GET", [("cache-control", "no-cache")]),
        }
    finally:
        client.close()
    assert {what: (a.status, a.headers["x-cache"]) for what, a in answers.items()} == {
        "fill over TLS HTTP/1.1": (200, "MISS"), "fill over HTTP/2": (200, "MISS"), "hit over TLS HTTP/1.1": (200, "HIT"),
        "hit over HTTP/2": (200, "HIT"), "the application's": (200, "MISS")}
    assert {what: a.values("strict-transport-security") for what, a in answers.items()} == \
        dict.fromkeys(answers, ours)


def test_an_origins_large_head_reaches_http_2_clients_as_http_1_1_ones(secure_pull: HttpsCdn) -> None:
    """A head within the origin limits (here 120 KB) is the answer's head over HTTP/2 too, on the fill and on the
    hits after it: libnghttp2 sends no header block past 64 KB by default, and reset every such stream."""
    port, ca = secure_pull.https_port, secure_pull.ca_file
    client = H2Client(port, "localhost", ca)
    try:
        client.conn.update_settings({SettingCodes.MAX_HEADER_LIST_SIZE: 1 << 20})  # this client takes such heads
        answers = [client.get(f"/{ZONE}/large-head/{name}") for name in ("one.bin", "one.bin", "two.bin")]
    finally:
        client.close()
    answers.append(https_get(port, f"/{ZONE}/large-head/two.bin", ca=ca))
    assert [(a.status, a.headers["x-cache"], a.body) for a in answers] == \
        [(200, "MISS", BODY), (200, "HIT", BODY), (200, "MISS", BODY), (200, "HIT", BODY)]
    for answer in answers:
        assert [(name, answer.headers[name.lower()]) for name, _ in LARGE_HEAD] == LARGE_HEAD


def answers_of(client: H2Client, stream_ids: list[int]) -> list[Answer]:
    """The answers of streams open at once on `client`, read together (`H2Client.answer` reads one stream's)."""
    heads: dict[int, dict[str, str]] = {}
    bodies = {stream_id: bytearray() for stream_id in stream_ids}
    ended: set[int] = set()
    while len(ended) < len(stream_ids):
        for event in client.receive():
            if isinstance(event, h2.events.ResponseReceived) and event.stream_id in bodies:
                heads[event.stream_id] = {bytes(k).decode(): bytes(v).decode() for k, v in event.headers or ()}
            elif isinstance(event, h2.events.DataReceived) and event.stream_id in bodies:
                bodies[event.stream_id] += event.data or b""
                client.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, (h2.events.StreamEnded, h2.events.StreamReset)) and event.stream_id in bodies:
                ended.add(event.stream_id)
        client.send()
    return [Answer(int(heads.get(n, {}).get(":status", 0)), heads.get(n, {}), bytes(bodies[n])) for n in stream_ids]


@pytest.mark.parametrize(("name", "leading"), [
    ("reset-before-head.bin", [("if-none-match", '"another"')]),
    ("untyped/reset-before-head.bin", []),
], ids=["the application's fill", "the hit path's fill handed over"])
def test_a_fill_whose_client_resets_its_stream_before_the_head_is_still_kept_for_the_others(
        secure_pull: HttpsCdn, name: str, leading: list[tuple[str, str]]) -> None:
    """A request leads the URL's flight: one the application fills (a condition of its own), or a plain miss the hit
    path fills, whose origin answer (no Content-Type) it would hand to the application; its client resets the stream
    before the origin's head arrives. The answer is still kept, as when a fill's client goes mid-body: the requests
    that waited for the flight get it from the cache, and the origin is asked once, not once by each of them (nor
    is the client's going an unhandled error)."""
    port, ca = secure_pull.https_port, secure_pull.ca_file
    path = f"/{ZONE}/slow/{name}"
    leader, others = H2Client(port, "localhost", ca), H2Client(port, "localhost", ca)
    try:
        led = leader.conn.get_next_available_stream_id()
        leader.conn.send_headers(led, leader.request_headers(path, "GET", leading), end_stream=True)
        leader.send()
        time.sleep(SLOW_HEAD_S / 4)  # the origin has the leader's request
        waiting = []
        for _ in range(3):
            stream_id = others.conn.get_next_available_stream_id()
            others.conn.send_headers(stream_id, others.request_headers(path), end_stream=True)
            waiting.append(stream_id)
        others.send()
        time.sleep(SLOW_HEAD_S / 4)  # they wait for the leader's flight
        leader.conn.reset_stream(led)
        leader.send()
        answers = answers_of(others, waiting)
        answers.append(others.get(path))
    finally:
        leader.close()
        others.close()
    assert [(a.status, a.body) for a in answers] == [(200, BODY)] * 4
    assert answers[-1].headers["x-cache"] == "HIT"
    assert Origin.asked.count(f"/slow/{name}") == 1
    assert "unhandled error" not in secure_pull.cdn.log_path.read_text()
