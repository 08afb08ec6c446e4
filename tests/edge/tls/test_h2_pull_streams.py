"""A pull zone's requests over HTTP/2 that HTTP/1.1 carries otherwise (a request's trailer section, a body the edge
held back from flow control on a stream that ended), sent by an unchecking client (the `h2` library, its own validation off) to the hit server's H2Protocol in this process
(tests/support/h2_memory.py), the answers compared with what the same request gets over HTTP/1.1; and its fills
over HTTP/2: streams reset before their fill's end, shut windows, many streams for one new URL, an origin's
connection fields and large heads, `:authority` against `host`."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import h2.config
import h2.connection
import h2.errors
import ngh2
import pytest
import pytest_asyncio
from aiohttp import web
from h2.settings import SettingCodes

from assetcdn.edge.fastpath.hit_server import HitServer
from assetcdn.edge.states import feed as feed_module
from assetcdn.edge.states.feed import ClientFeed
from assetcdn.edge.tls.h2 import CONNECTION_BUFFER_HIGH, H2Limits, H2Protocol
from tests.support.feeds import record_feeds, waits_for_its_fill
from tests.support.h2_memory import H2InProcess, MemoryTransport
from tests.support.hit_cdn import HitCdn
from tests.support.origins import ScriptedOrigin, chunked_answer, pull_zone_on_hit_cdn, stored_url
from tests.support.wait import wait_until

pytestmark = pytest.mark.asyncio(loop_scope="module")

ZONE = "h2pull"
Fields = list[tuple[bytes, bytes]]


class Edge:
    def __init__(self, cdn: HitCdn, origin: ScriptedOrigin, secure: HitServer) -> None:
        self.cdn = cdn
        self.origin = origin
        self.secure = secure  # the https site's hit server: the one HTTP/2 streams reach

    def connect(self) -> H2InProcess:
        """A connection whose client sends what it is given, as a hostile client may."""
        conn = H2InProcess(self.secure)
        conn.client = h2.connection.H2Connection(h2.config.H2Configuration(
            client_side=True, header_encoding=None, validate_outbound_headers=False,
            normalize_outbound_headers=False))
        conn.client.initiate_connection()
        return conn


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def edge(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Edge]:
    async with pull_zone_on_hit_cdn(tmp_path_factory.mktemp("h2-pull-streams"), ZONE) as (cdn, origin):
        assert cdn.site.hits is not None
        secure = HitServer(cdn.app, cdn.site.hits.web_server, secure=True)
        try:
            yield Edge(cdn, origin, secure)
        finally:
            secure.stop()


def request(path: str, method: str = "GET", *fields: tuple[bytes, bytes]) -> Fields:
    return [(b":method", method.encode()), (b":scheme", b"https"), (b":path", f"/{ZONE}{path}".encode()),
            (b":authority", b"edge.test"), *fields]


async def answer(conn: H2InProcess, stream_id: int, what: str) -> tuple[int, dict[str, str], bytes]:
    """The status (0: reset before a head), fields and body of `stream_id`'s answer."""
    async def ended() -> bool:
        conn.exchange()
        return bool(conn.answers[stream_id][2])

    await wait_until(ended, what)
    head, body, _ = conn.answers.pop(stream_id)
    headers = {bytes(k).decode(): bytes(v).decode() for k, v in head or ()}
    return int(headers.pop(":status", "0")), headers, bytes(body)


async def echo(request: web.Request) -> web.StreamResponse:
    """The origin's answer to a POST: the body it was sent."""
    return web.Response(body=b"got " + await request.read(), headers={"Cache-Control": "no-store"})


async def test_a_request_body_ended_by_its_trailer_section_is_forwarded_whole(edge: Edge) -> None:
    """RFC 9113 8.1: a request's trailer section (HEADERS with END_STREAM after its DATA) ends its body. A POST to a
    pull zone with trailers is answered with what its origin says, as a chunked HTTP/1.1 POST with trailer fields is,
    not left waiting for a body that has ended."""
    edge.origin.route("/echo", echo)
    conn = edge.connect()
    stream_id = conn.client.get_next_available_stream_id()
    conn.answers[stream_id] = [None, bytearray(), False]
    conn.client.send_headers(stream_id, request("/echo", "POST", (b"te", b"trailers")))
    conn.client.send_data(stream_id, b"hello")
    conn.client.send_headers(stream_id, [(b"x-checksum", b"5")], end_stream=True)
    status, _, body = await answer(conn, stream_id, "the POST's answer")
    assert (status, body) == (200, b"got hello")
    assert [seen.body for seen in edge.origin.requests("/echo")] == [b"hello"]


async def sent_whole(conn: H2InProcess, stream_id: int, body: bytes) -> bool:
    """Send `body` on `stream_id` as the windows let it go, END_STREAM with its last byte; False when the edge has
    not opened them again for it within a second."""
    view = memoryview(body)
    for _ in range(100):
        window = min(conn.client.local_flow_control_window(stream_id), conn.client.max_outbound_frame_size)
        if window > 0:
            piece, view = view[:window], view[window:]
            conn.client.send_data(stream_id, bytes(piece), end_stream=not view)
        conn.exchange()
        if not view:
            return True
        await asyncio.sleep(0.01)
    return False


async def test_a_stream_that_leaves_with_body_bytes_held_back_gives_their_window_back(edge: Edge) -> None:
    """A GET whose body the application does not read while its origin answers late: past what aiohttp buffers the
    edge stops giving the client window back for it. The client resets the stream; those bytes were received all
    the same and count no more against the connection's window, so the next upload on the connection goes through
    (it waited for a window never reopened)."""
    release = asyncio.Event()

    async def late(_request: web.Request) -> web.StreamResponse:
        await release.wait()
        return web.Response(body=b"late", headers={"Cache-Control": "no-store", "Content-Type": "text/plain"})

    edge.origin.route("/late", late)
    edge.origin.route("/upload", echo)
    conn = edge.connect()
    try:
        held = conn.client.get_next_available_stream_id()
        conn.answers[held] = [None, bytearray(), False]
        conn.resets[held] = -1
        conn.client.send_headers(held, request("/late"))
        assert not await sent_whole(conn, held, b"z" * (4 * 1024 * 1024))  # the edge stopped reading it
        conn.client.reset_stream(held)
        conn.exchange()
        upload = conn.client.get_next_available_stream_id()
        conn.answers[upload] = [None, bytearray(), False]
        conn.client.send_headers(upload, request("/upload", "POST"))
        assert await sent_whole(conn, upload, b"u" * 1000)
        status, _, body = await answer(conn, upload, "the upload's answer")
        assert (status, body) == (200, b"got " + b"u" * 1000)
    finally:
        release.set()


async def test_body_bytes_that_arrive_after_an_early_answer_give_the_connections_window_back(edge: Edge) -> None:
    """An upload answered before its body was read (413 for a declared length over the limit, 503 EdgeBusy, 408...):
    its client goes on sending the DATA it has in flight, which the application reads and drops. Their window was
    never given back once the answer had ended, so the connection's window stayed shut: every later upload on the
    connection waited for a window never reopened (until its body timeout). The bytes are given back as they are
    read, before the answer's end as after it."""
    edge.origin.route("/upload-after-413", echo)
    conn = edge.connect()
    refused = conn.client.get_next_available_stream_id()
    conn.answers[refused] = [None, bytearray(), False]
    conn.resets[refused] = -1
    too_large = str(100 * 1024 * 1024).encode()
    conn.client.send_headers(refused, request("/upload-after-413", "POST", (b"content-length", too_large)))
    status, _, body = await answer(conn, refused, "the 413")
    assert status == 413 and b"PayloadTooLarge" in body
    # What the client had in flight: the whole of the connection's window.
    sent = 0
    while (window := min(conn.client.local_flow_control_window(refused), conn.client.max_outbound_frame_size)) > 0:
        conn.client.send_data(refused, b"r" * window)
        sent += window
    conn.exchange()
    assert sent > 0
    upload = conn.client.get_next_available_stream_id()
    conn.answers[upload] = [None, bytearray(), False]
    conn.client.send_headers(upload, request("/upload-after-413", "POST"))
    assert await sent_whole(conn, upload, b"u" * 100_000)
    status, _, body = await answer(conn, upload, "the next upload's answer")
    assert (status, body) == (200, b"got " + b"u" * 100_000)
    assert [len(seen.body) for seen in edge.origin.requests("/upload-after-413")] == [100_000]
    conn.client.reset_stream(refused)
    conn.exchange()


async def test_an_upload_answered_before_its_body_ends_is_told_to_stop_sending(edge: Edge) -> None:
    """An upload answered before its body was read (here 413 for a declared length over the limit) whose client goes
    on sending: over HTTP/1.1 the edge closes the connection once it stops reading, which ends the upload. Over
    HTTP/2 nothing ended it: the client went on sending the whole body for nothing, and the stream stayed open (one
    of its concurrent streams) until it had, or for good. Once the answer is out whole, RST_STREAM NO_ERROR asks the
    client to stop (RFC 9113 8.1)."""
    edge.origin.route("/upload-stopped", echo)
    conn = edge.connect()
    refused = conn.client.get_next_available_stream_id()
    conn.answers[refused] = [None, bytearray(), False]
    conn.resets[refused] = -1
    too_large = str(100 * 1024 * 1024).encode()
    conn.client.send_headers(refused, request("/upload-stopped", "POST", (b"content-length", too_large)))
    conn.client.send_data(refused, b"r" * 1000)
    status, headers, body = await answer(conn, refused, "the 413")
    assert status == 413 and b"PayloadTooLarge" in body and headers["content-length"] == str(len(body))
    assert conn.resets[refused] == -1  # ended by END_STREAM, whole, not by a reset
    conn.answers[refused] = [None, bytearray(), False]

    async def stopped() -> bool:
        conn.exchange()
        return conn.resets[refused] != -1

    await wait_until(stopped, "the RST_STREAM that stops the upload")
    assert conn.resets[refused] == h2.errors.ErrorCodes.NO_ERROR
    assert conn.answers[refused][:2] == [None, bytearray()]  # nothing more was sent on it
    assert not edge.origin.requests("/upload-stopped")


async def test_streams_whose_client_closed_their_windows_hold_up_no_other_stream(edge: Edge) -> None:
    """A client that stops reading some answers (their stream windows shut: a paused video, a download it put off)
    while their fills go on into the cache: what the edge holds for them passes the connection's buffer mark. Every
    other answer on the connection, a new miss here, waited behind them (its producer paused from its first byte)
    until the send timeout reset the stalled streams, where HTTP/2's per-stream windows let it go at once. A
    stream that holds no bytes goes on; one that holds some while the connection is over its mark still pauses."""
    body = bytes(range(256)) * 2400  # 600 KB each: past the stream's mark, kept in memory
    kept = {"Cache-Control": "max-age=600", "Content-Type": "application/octet-stream"}
    names = [f"/stalled-{n}.bin" for n in range(5)]
    for name in (*names, "/next.bin"):
        edge.origin.answer(name, body, headers=kept)
    conn = H2InProcess(edge.secure)
    for name in names:
        conn.stall(f"/{ZONE}{name}")

    async def kept_all() -> bool:
        conn.exchange()
        return all(stored_url(edge.cdn.node, ZONE, name, scheme="https") is not None for name in names)

    await wait_until(kept_all, "the stalled streams' fills kept")
    assert conn.server.pending_total > CONNECTION_BUFFER_HIGH  # the stalled answers hold the connection's mark
    response = await conn.get(f"/{ZONE}/next.bin", [])
    assert (response.status, response.headers["x-cache"], response.body) == (200, "MISS", body)
    assert all(not conn.answers[stream_id][2] for stream_id in conn.stalled)  # still open, not reset


async def test_a_clients_graceful_goaway_lets_the_answers_under_way_end_whole(edge: Edge) -> None:
    """A client that says GOAWAY NO_ERROR (RFC 9113 6.8: it opens no more streams; a proxy draining its connection
    pool does so) while its fills are under way: the edge closed the connection at once, cutting every answer
    short. Its open streams are answered whole, then the connection closes; the client's own libnghttp2 (ngh2)
    reads them, as the `h2` library gives up on a connection once it has sent GOAWAY."""
    body = b"g" * 200_000
    kept = {"Cache-Control": "max-age=600", "Content-Type": "application/octet-stream"}
    paths = ("/draining-1.bin", "/draining-2.bin")
    releases = [edge.origin.hold(path, body, kept) for path in paths]
    transport = MemoryTransport(secure=True)
    server = H2Protocol(edge.secure, H2Limits())
    server.connection_made(transport)
    client = ngh2.Connection(ngh2.Role.CLIENT, ngh2.Configuration(auto_window_update=True))
    client.initiate_connection()
    streams = [client.send_request(request(path), end_stream=True) for path in paths]
    heads: dict[int, dict[bytes, bytes]] = {}
    bodies = {stream_id: bytearray() for stream_id in streams}
    ended: set[int] = set()

    def exchange() -> None:
        if out := client.data_to_send():
            server.data_received(out)
        if received := transport.take():
            client.receive_data(received)
            for event in client.events():
                if isinstance(event, ngh2.ResponseReceived):
                    heads[event.stream_id] = {bytes(name): bytes(value) for name, value in event.headers}
                elif isinstance(event, ngh2.DataReceived):
                    bodies[event.stream_id] += event.data
                    if event.end_stream:
                        ended.add(event.stream_id)
                elif isinstance(event, ngh2.StreamReset):
                    raise AssertionError(f"stream {event.stream_id} reset: {event.error_code!r}")

    async def headed() -> bool:
        exchange()
        return len(heads) == len(streams)

    await wait_until(headed, "the answers' heads")
    client.send_goaway(ngh2.ErrorCode.NO_ERROR)
    exchange()
    for release in releases:
        release.set()

    async def whole() -> bool:
        exchange()
        return ended == set(streams) or transport.closed

    await wait_until(whole, "the answers' ends, or the connection's")
    assert [(heads[n][b":status"], bytes(bodies[n])) for n in streams] == [(b"200", body)] * 2
    assert ended == set(streams)

    async def closed() -> bool:
        exchange()
        return transport.closed

    await wait_until(closed, "the connection closed once its streams are answered")


async def test_a_head_past_the_clients_header_list_size_resets_its_stream_not_the_connection(edge: Edge) -> None:
    """An origin's head larger than the client said it accepts (SETTINGS_MAX_HEADER_LIST_SIZE; Chrome's 256 KB, here
    8 KB) went out all the same: a client takes such a header block for a connection error (it cannot decode it
    and stay in step with HPACK), so every other stream on the connection, another zone's answer on the shared
    default host among them, was lost with it. That stream alone is reset, on the miss and on its hits; the
    connection's other answers arrive whole."""
    kept = {"Cache-Control": "max-age=600", "Content-Type": "application/octet-stream"}
    large = {**kept, **{f"X-Large-{n}": "v" * 1000 for n in range(12)}}  # some 12 KB, within what HTTP/1.1 relays
    edge.origin.answer("/large-head.bin", b"l" * 100, headers=large)
    edge.origin.answer("/beside.bin", b"b" * 100, headers=kept)
    conn = edge.connect()
    conn.client.update_settings({SettingCodes.MAX_HEADER_LIST_SIZE: 8192})
    conn.exchange()
    for attempt in ("miss", "hit"):
        beside = ask(conn, request("/beside.bin"))
        large_stream = ask(conn, request("/large-head.bin"), may_reset=True)
        status, _, _ = await answer(conn, large_stream, f"the large head's stream ({attempt})")
        assert (status, conn.resets[large_stream]) == (0, h2.errors.ErrorCodes.INTERNAL_ERROR), attempt
        status, _, body = await answer(conn, beside, f"the answer beside it ({attempt})")
        assert (status, body) == (200, b"b" * 100), attempt
    assert edge.origin.count("/large-head.bin") == 1  # kept for the next client all the same


async def test_a_client_that_takes_no_head_at_all_costs_the_log_one_line_not_one_per_answer(
        edge: Edge, caplog: pytest.LogCaptureFixture) -> None:
    """A client may advertise a header list size of 1, which no answer fits: each of its streams is reset, and each
    reset was a log line of its own, so one connection could write the edge's log as fast as it asked."""
    edge.origin.answer("/any-head.bin", b"a" * 10, headers={"Cache-Control": "max-age=600",
                                                            "Content-Type": "application/octet-stream"})
    conn = edge.connect()
    conn.client.update_settings({SettingCodes.MAX_HEADER_LIST_SIZE: 1})
    conn.exchange()
    with caplog.at_level(logging.INFO, logger="assetcdn.edge.tls.h2"):
        for attempt in range(6):
            stream_id = ask(conn, request("/any-head.bin"), may_reset=True)
            status, _, _ = await answer(conn, stream_id, f"stream {attempt}'s reset")
            assert (status, conn.resets[stream_id]) == (0, h2.errors.ErrorCodes.INTERNAL_ERROR), attempt
    lines = [record for record in caplog.records if "header list size" in record.getMessage()]
    assert len(lines) <= 1, [record.getMessage() for record in lines]  # none: this module's earlier line is recent


def ask(conn: H2InProcess, fields: Fields, *, may_reset: bool = False) -> int:
    """Open a stream asking `fields` (sent at once); its id."""
    stream_id = conn.client.get_next_available_stream_id()
    conn.answers[stream_id] = [None, bytearray(), False]
    if may_reset:
        conn.resets[stream_id] = -1
    conn.client.send_headers(stream_id, fields, end_stream=True)
    conn.exchange()
    return stream_id


async def headed(conn: H2InProcess, stream_id: int) -> None:
    async def arrived() -> bool:
        conn.exchange()
        return conn.answers[stream_id][0] is not None

    await wait_until(arrived, f"stream {stream_id}'s head")


@pytest.mark.parametrize("framing", ["sized", "chunked"], ids=["the hit path's fill", "the application's fill"])
async def test_a_fill_whose_stream_is_reset_mid_body_is_kept_for_the_streams_waiting_beside_it(
        edge: Edge, framing: str) -> None:
    """The stream that leads a fill is reset by its client once part of the body went out (a browser that navigated
    away), with a GET, a HEAD, a range and a revalidation of the URL waiting for that fill on the same connection. The
    fill reads on into the cache: each of them gets its answer from it, the origin is asked once, and the connection
    holds nothing for the reset stream afterwards."""
    name = f"/reset-mid-body-{framing}.bin"
    body = bytes(range(256)) * 4000
    kept = {"Cache-Control": "max-age=600", "Content-Type": "application/octet-stream", "ETag": '"mid"'}
    release = asyncio.Event()

    async def held(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers=kept)
        if framing == "chunked":
            response.enable_chunked_encoding()
        else:
            response.content_length = len(body)
        await response.prepare(request)
        await response.write(body[:50_000])
        await release.wait()
        await response.write(body[50_000:])
        return response

    edge.origin.route(name, held)
    conn = edge.connect()
    leader = ask(conn, request(name), may_reset=True)
    await headed(conn, leader)
    waiting = {"GET": ask(conn, request(name)), "HEAD": ask(conn, request(name, "HEAD")),
               "range": ask(conn, request(name, "GET", (b"range", b"bytes=600000-600009"))),
               "revalidation": ask(conn, request(name, "GET", (b"if-none-match", b'"mid"')))}
    conn.client.reset_stream(leader)
    conn.exchange()
    release.set()
    answers = {what: await answer(conn, stream_id, what) for what, stream_id in waiting.items()}
    assert {what: (status, body_of) for what, (status, _, body_of) in answers.items()} == {
        "GET": (200, body), "HEAD": (200, b""), "range": (206, body[600000:600010]), "revalidation": (304, b"")}
    assert {headers["x-cache"] for _, headers, _ in answers.values()} == {"HIT"}
    assert answers["HEAD"][1]["content-length"] == str(len(body))
    assert edge.origin.count(name) == 1
    assert (conn.server.streams, conn.server.pending_total, conn.server.paused_producers) == ({}, 0, 0)


async def test_a_stream_reset_while_its_fill_waits_for_the_client_leaves_the_fill_and_the_connection_whole(
        edge: Edge) -> None:
    """A client that reads nothing of a large fill (its stream window shut) holds a bounded part of it, the fill's
    writer paused; it then resets the stream. The fill goes on into the cache, the connection counts no paused
    writer nor held bytes for the stream, and its next stream for the URL is a hit on the whole body."""
    body = bytes(range(256)) * 10_000  # 2.56 MB, 2 MB of it sent at once: far past what a stream holds
    kept = {"Cache-Control": "max-age=600", "Content-Type": "application/octet-stream"}
    release = edge.origin.hold("/paused-then-reset.bin", body, kept, first=2_000_000)
    conn = edge.connect()
    stalled = conn.stall(f"/{ZONE}/paused-then-reset.bin")

    async def paused() -> bool:
        conn.exchange()
        stream = conn.server.streams.get(stalled)
        return stream is not None and stream.producer_paused

    await wait_until(paused, "the fill's writer paused for the client")
    assert conn.server.pending_total < 1024 * 1024  # held in part, not as the origin sends it
    conn.resets[stalled] = -1
    conn.client.reset_stream(stalled)
    conn.exchange()
    assert (conn.server.pending_total, conn.server.paused_producers) == (0, 0)
    release.set()

    async def kept_it() -> bool:
        return stored_url(edge.cdn.node, ZONE, "/paused-then-reset.bin", scheme="https") is not None

    await wait_until(kept_it, "the fill kept")
    last = (b"range", b"bytes=-100")
    status, headers, got = await answer(conn, ask(conn, request("/paused-then-reset.bin", "GET", last)), "a range")
    assert (status, headers["x-cache"], got) == (206, "HIT", body[-100:])
    assert edge.origin.count("/paused-then-reset.bin") == 1


async def test_streams_asking_for_one_new_url_at_once_are_one_origin_request(edge: Edge) -> None:
    """Ten streams of one connection ask for a URL no tier holds while its origin is slow: one asks the origin, the
    others wait for its fill and get the same body."""
    body = b"c" * 100_000
    release = edge.origin.hold("/collapsed.bin", body, {"Cache-Control": "max-age=600", "Content-Type": "a/b"})
    conn = edge.connect()
    streams = [ask(conn, request("/collapsed.bin")) for _ in range(10)]
    await headed(conn, streams[0])
    release.set()
    answers = [await answer(conn, stream_id, "a collapsed stream") for stream_id in streams]
    assert [(status, got) for status, _, got in answers] == [(200, body)] * 10
    assert edge.origin.count("/collapsed.bin") == 1


async def test_an_origins_connection_fields_never_reach_an_http_2_client(edge: Edge) -> None:
    """RFC 9113 8.2.2: a response with a connection-specific field is malformed. An origin's Connection,
    Keep-Alive, Proxy-Connection, Upgrade and the fields its Connection names are left out of the miss, the hit,
    a HEAD and a 304 (the client here is the `h2` library, which refuses such a response); names go out in lower
    case and values without surrounding whitespace, whatever the origin's spelling."""
    fields = {"Cache-Control": "max-age=600", "Content-Type": "text/plain", "ETag": '"hop"', "Connection": "X-Hop",
              "X-Hop": "secret", "Keep-Alive": "timeout=5", "Proxy-Connection": "keep-alive", "Upgrade": "h2c",
              "X-Upper-CASE": "Value", "X-Spaced": "spaced  "}

    async def origin(_request: web.Request) -> web.StreamResponse:
        return web.Response(body=b"hop", headers=fields)

    edge.origin.route("/connection-fields.txt", origin)
    conn = H2InProcess(edge.secure)  # validates what it receives
    seen = [await conn.get(f"/{ZONE}/connection-fields.txt", extra, method) for extra, method in (
        ([], "GET"), ([], "GET"), ([], "HEAD"), ([("if-none-match", '"hop"')], "GET"))]
    assert [(response.status, response.headers["x-cache"]) for response in seen] == [
        (200, "MISS"), (200, "HIT"), (200, "HIT"), (304, "HIT")]
    for response in seen:
        assert not {"connection", "keep-alive", "proxy-connection", "upgrade", "transfer-encoding",
                    "x-hop"} & set(response.headers)
        assert (response.headers["x-upper-case"], response.headers["x-spaced"]) == ("Value", "spaced")


async def test_a_streams_authority_not_its_host_field_names_its_zone(edge: Edge) -> None:
    """A stream whose `:authority` and `host` differ (RFC 9113 8.3.1) is answered for its `:authority`, on the fill
    and on the hit alike: the zone's tenant host with another's `host` is the zone's object; another host with the
    zone's `host` never reaches the zone's cache."""
    edge.origin.answer("/authority.txt", b"the zone's", headers={"Cache-Control": "max-age=600",
                                                                  "Content-Type": "text/plain"})
    conn = edge.connect()
    tenant = f"{ZONE}.cdn.localhost".encode()

    def fields(authority: bytes, host: bytes) -> Fields:
        return [(b":method", b"GET"), (b":scheme", b"https"), (b":path", b"/authority.txt"), (b":authority", authority),
                (b"host", host)]

    for expected in ("MISS", "HIT"):
        status, headers, got = await answer(conn, ask(conn, fields(tenant, b"other.cdn.localhost")), "the zone's")
        assert (status, headers.get("x-cache"), got) == (200, expected, b"the zone's")
        status, headers, got = await answer(conn, ask(conn, fields(b"other.cdn.localhost", tenant)), "another host's")
        assert status == 404 and "x-cache" not in headers and b"the zone's" not in got
    assert edge.origin.count("/authority.txt") == 1


def large_new_urls(edge: Edge, framing: str, names: list[str], body: bytes) -> None:
    """The origin answers each of `names` with `body`, kept: of declared length (the hit path fills it) or chunked
    (the application does)."""
    kept = {"Cache-Control": "max-age=600", "Content-Type": "application/octet-stream"}
    for name in names:
        if framing == "sized":
            edge.origin.answer(name, body, headers=kept)
        else:
            edge.origin.route(name, chunked_answer(body, kept))


@pytest.mark.parametrize("framing", ["sized", "chunked"], ids=["the hit path's fill", "the application's fill"])
async def test_one_connections_stalled_streams_leave_places_for_another_connections_slow_client(
        edge: Edge, framing: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A client opens streams for more new large URLs than one connection may hold places for among the clients
    lagging behind their fills (assetcdn/edge/states/feed.py), and reads none of them. Over HTTP/1.1 a connection
    holds one place at most; here one connection held every place of the worker, so that another connection's client
    that reads slowly set its fill's pace (the requests waiting for its URL waiting for it). Now the stalled streams
    lag up to the connection's bound, and their fills are kept; the others set their fills' pace, as past the
    worker's places; another connection's stalled client still lags and its fill is kept. Its places come back as
    its streams go: reset, answered whole, or with the connection closed; a new connection's client lags in them."""
    per_connection = feed_module.CONNECTION_LAGGING
    monkeypatch.setattr(feed_module, "MAX_LAGGING", ClientFeed.lagging_now + per_connection + 1)
    body = bytes(range(256)) * 4096  # 1 MB each: far past what a stream and its client's queue hold
    names = [f"/lagcap-{framing}-{n}.bin" for n in range(per_connection + 2)]
    others = [f"/lagcap-{framing}-other-{n}.bin" for n in range(2)]
    large_new_urls(edge, framing, [*names, *others], body)

    def stored(name: str) -> bool:
        return stored_url(edge.cdn.node, ZONE, name, scheme="https") is not None

    greedy = edge.connect()
    streams = {greedy.stall(f"/{ZONE}{name}"): name for name in names}

    async def kept_up_to_the_bound() -> bool:
        greedy.exchange()
        return sum(map(stored, names)) >= per_connection

    await wait_until(kept_up_to_the_bound, "the fills of the stalled streams that lag kept")
    slow = edge.connect()
    slow_stream = slow.stall(f"/{ZONE}{others[0]}")

    async def kept_other() -> bool:
        greedy.exchange()
        slow.exchange()
        return stored(others[0])

    await wait_until(kept_other, "another connection's stalled client lagging, its fill kept")
    greedy.exchange()
    assert sum(map(stored, names)) == per_connection  # the others wait for their client
    assert not any(greedy.answers[stream_id][2] for stream_id in streams)  # none reset, none ended
    assert greedy.server.lagging == per_connection

    lagging = next(stream_id for stream_id, name in streams.items() if stored(name))
    greedy.resets[lagging] = -1
    greedy.client.reset_stream(lagging)

    async def one_back() -> bool:
        greedy.exchange()
        return greedy.server.lagging == per_connection - 1

    await wait_until(one_back, "the reset stream's place back")

    slow.stalled.discard(slow_stream)  # it reads at last: the whole body, its place back
    slow.client.increment_flow_control_window(len(body), slow_stream)
    status, _, got = await answer(slow, slow_stream, "the slow client's whole body")
    assert (status, got) == (200, body)
    assert slow.server.lagging == 0

    greedy.server.connection_lost(None)

    async def all_kept() -> bool:
        return all(map(stored, names)) and greedy.server.lagging == 0

    await wait_until(all_kept, "the closed connection's fills kept, its places back")
    late = edge.connect()
    late.stall(f"/{ZONE}{others[1]}")

    async def kept_late() -> bool:
        late.exchange()
        return stored(others[1])

    await wait_until(kept_late, "a new connection's stalled client lagging in the places given back")
    assert late.server.lagging == 1
    late.server.connection_lost(None)

    async def late_back() -> bool:
        return late.server.lagging == 0

    await wait_until(late_back, "the new connection's place back")


@pytest.mark.parametrize("framing", ["sized", "chunked"], ids=["the hit path's fill", "the application's fill"])
async def test_a_lagging_stream_reset_while_the_origin_holds_its_body_gives_its_places_back_at_once(
        edge: Edge, framing: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A stream's client lags behind its large fill (its window shut), then takes what it was queued and resets the
    stream while the origin holds the rest of the body: the worker's place and its connection's come back at once,
    the origin sending nothing more (they were held until the fill's end), and the fill then stores the body."""
    feeds = record_feeds(monkeypatch)
    name = f"/lagging-reset-{framing}.bin"
    body = bytes(range(256)) * 8192  # 2 MB, the last 256 KB held back by the origin
    kept = {"Cache-Control": "max-age=600", "Content-Type": "application/octet-stream"}
    release = asyncio.Event()

    async def held(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers=kept)
        if framing == "chunked":
            response.enable_chunked_encoding()
        else:
            response.content_length = len(body)
        await response.prepare(request)
        for start in range(0, len(body), 64 * 1024):
            if start >= len(body) - 256 * 1024:
                await release.wait()
            await response.write(body[start:start + 64 * 1024])
        return response

    edge.origin.route(name, held)
    conn = edge.connect()
    try:
        stream = conn.stall(f"/{ZONE}{name}")

        async def lagging() -> bool:
            conn.exchange()
            return bool(feeds) and feeds[-1].lagging

        await wait_until(lagging, "the stream's client lagging behind its fill")
        feed = feeds[-1]
        # Its own places (the worker-wide count may also drop meanwhile by a feed an earlier test left to end alone).
        assert conn.server.lagging == 1 and feed.lagging and ClientFeed.lagging_now >= 1
        conn.stalled.discard(stream)  # it takes what it was queued: its feed waits for the fill
        conn.client.increment_flow_control_window(len(body), stream)

        async def idle() -> bool:
            conn.exchange()
            return waits_for_its_fill(feed)

        await wait_until(idle, "the lagging client sent all it was given")
        conn.resets[stream] = -1
        conn.client.reset_stream(stream)
        conn.exchange()

        async def places_back() -> bool:
            conn.exchange()
            # This feed's own place: the worker-wide count (`ClientFeed.lagging_now`) is given back with it (`_unlag`),
            # and may meanwhile also drop by a feed an earlier test left to end on its own, so it is not compared.
            return conn.server.lagging == 0 and not feed.lagging

        await wait_until(places_back, "the reset stream's places back before the origin sends the rest")
        assert (feed.gone, release.is_set()) == (True, False)
    finally:
        release.set()

    async def stored() -> bool:
        return stored_url(edge.cdn.node, ZONE, name, scheme="https") is not None

    await wait_until(stored, "the fill stored")
    status, headers, got = await answer(conn, ask(conn, request(name)), "a hit")
    assert (status, headers["x-cache"], got == body, edge.origin.count(name)) == (200, "HIT", True, 1)


async def test_streams_waiting_for_a_large_fill_are_sent_what_it_has_read_beside_one_that_reads_nothing(
        edge: Edge) -> None:
    """A fill of a body over 1 MB (assetcdn/edge/states/growing.py) on one stream, the origin holding its last part:
    a stream of the same connection waiting for it is sent the bytes read so far, a range of them, its HEAD, while a
    stalled stream (its window shut) of the same URL holds a bounded part and holds up none of them; the origin is
    asked once, and the stalled stream reset leaves the connection nothing held."""
    name = "/growing-h2.bin"
    body = bytes(range(256)) * 5_000  # 1.28 MB
    first = 1_100_000
    kept = {"Cache-Control": "max-age=600", "Content-Type": "video/mp4", "ETag": '"g"'}
    release = edge.origin.hold(name, body, kept, first=first)
    conn = edge.connect()
    leader = ask(conn, request(name))
    try:
        await headed(conn, leader)
        stalled = conn.stall(f"/{ZONE}{name}")
        waiter = ask(conn, request(name))
        ranged = ask(conn, request(name, "GET", (b"range", b"bytes=1050000-1050099")))
        status, headers, got = await answer(conn, ranged, "a range of what the fill read")
        assert (status, headers["x-cache"], got) == (206, "HIT", body[1050000:1050100])
        status, headers, got = await answer(conn, ask(conn, request(name, "HEAD")), "a HEAD")
        assert (status, headers["content-length"], got) == (200, str(len(body)), b"")

        async def sent_what_was_read() -> bool:
            conn.exchange()
            return len(conn.answers[waiter][1]) >= first

        await wait_until(sent_what_was_read, "the waiting stream sent what the fill read")
        assert not release.is_set()
        assert conn.server.pending_total < 1024 * 1024  # the stalled stream's part, bounded
        conn.resets[stalled] = -1
        conn.client.reset_stream(stalled)
        conn.exchange()
        release.set()
        status, headers, got = await answer(conn, waiter, "the waiting stream's whole answer")
        assert (status, headers["x-cache"], got == body) == (200, "HIT", True)
        status, headers, got = await answer(conn, leader, "the leading stream's whole answer")
        assert (status, headers["x-cache"], got == body) == (200, "MISS", True)
    finally:
        release.set()
    assert edge.origin.count(name) == 1
    assert (conn.server.streams, conn.server.pending_total, conn.server.paused_producers) == ({}, 0, 0)
