"""A pull zone in front of an origin that breaks HTTP/1.1, driven byte by byte (a raw asyncio server on 127.0.0.1),
on the hit path (assetcdn/edge/fastpath/pull_fill.py) and the application's (assetcdn/edge/states/pull.py): what
the client gets (502 or 504 in the JSON envelope, or a cut connection once the head went), that nothing broken is
stored, and that no connection the origin left in doubt is used for another request."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from tests.support.hit_cdn import HitCdn, parse_head, request_bytes, shared_hit_cdn
from tests.support.origins import stored_url
from tests.support.raw_origin import KEPT, Script, fetch, zone_before
from tests.support.wait import WAIT_S

pytestmark = pytest.mark.asyncio(loop_scope="module")

MAX_OBJECT = 1024 * 1024
FIRST_BYTE_TIMEOUT_S = 1.0
IDLE_TIMEOUT_S = 1.0


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cdn(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[HitCdn]:
    async with shared_hit_cdn(tmp_path_factory.mktemp("pull-hostile"), ASSETCDN_ORIGIN_ALLOW_LOOPBACK="true",
                              ASSETCDN_ORIGIN_FIRST_BYTE_TIMEOUT_S=str(FIRST_BYTE_TIMEOUT_S),
                              ASSETCDN_ORIGIN_IDLE_TIMEOUT_S=str(IDLE_TIMEOUT_S),
                              ASSETCDN_ORIGIN_BODY_TIMEOUT_S="3",
                              ASSETCDN_ORIGIN_MAX_OBJECT_MB=str(MAX_OBJECT // 1024 // 1024)) as found:
        yield found


def sends(raw: bytes, close: bool = False) -> Script:
    async def script(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _n: int) -> None:
        writer.write(raw)
        await writer.drain()
        if close:
            raise ConnectionError

    return script


def error_code(body: bytes) -> str:
    return json.loads(body)["error"]["code"]


@pytest.mark.parametrize("raw", [
    # a head past the bound: too many fields, or too many bytes
    b"HTTP/1.1 200 OK\r\n" + KEPT + b"".join(b"X-F%d: v\r\n" % i for i in range(300)) + b"Content-Length: 2\r\n\r\nok",
    b"HTTP/1.1 200 OK\r\n" + KEPT + b"".join(b"X-F%d: %s\r\n" % (i, b"v" * 8000) for i in range(200))
    + b"Content-Length: 2\r\n\r\nok",
    # framings that disagree, or that no parser should guess at
    b"HTTP/1.1 200 OK\r\n" + KEPT + b"Content-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
    b"HTTP/1.1 200 OK\r\n" + KEPT + b"Content-Length: 2\r\nContent-Length: 3\r\n\r\nok",
    # a singleton field twice: the edge would judge the first type (the default host's sandbox), browsers run the last
    b"HTTP/1.1 200 OK\r\n" + KEPT + b"Content-Type: text/html\r\nContent-Length: 2\r\n\r\nok",
    b"HTTP/1.1 200 OK\r\n" + KEPT + b"Content-Length: -2\r\n\r\nok",
    b"HTTP/1.1 200 OK\r\n" + KEPT + b"Content-Length: two\r\n\r\nok",
    b"HTTP/1.1 200 OK\n" + KEPT.replace(b"\r\n", b"\n") + b"Content-Length: 2\n\nok",
    b"HTTP/1.1 200 OK\r\n" + KEPT + b"X-Folded: a\r\n b\r\nContent-Length: 2\r\n\r\nok",
    b"HTTP/1.1 200 OK\r\n" + KEPT + b"X-Nul: a\x00b\r\nContent-Length: 2\r\n\r\nok",
    b"HTTP/1.1 200 OK\r\n" + KEPT + b"X-Ctl: a\x1bb\r\nContent-Length: 2\r\n\r\nok",
    # statuses that are no final answer
    b"HTTP/1.1 600 Odd\r\n" + KEPT + b"Content-Length: 2\r\n\r\nok",
    b"HTTP/1.1 099 Odd\r\n" + KEPT + b"Content-Length: 2\r\n\r\nok",
    b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n",
    b"HTTP/1.1 101 Switching Protocols\r\n\r\nHTTP/1.1 200 OK\r\n" + KEPT + b"Content-Length: 2\r\n\r\nok",
    b"HTTP/1.1 304 Not Modified\r\n" + KEPT + b"Content-Length: 2\r\n\r\nok",
], ids=["fields", "head-bytes", "cl-and-te", "two-lengths", "two-types", "negative-length", "length-not-a-number", "bare-lf",
        "obs-fold", "nul", "control-character", "status-600", "status-099", "101-upgrade", "101", "unasked-304"])
async def test_an_answer_that_breaks_http_is_a_502_and_nothing_is_stored(cdn: HitCdn, raw: bytes) -> None:
    async with zone_before(cdn, sends(raw)) as (zone, _):
        for port in (cdn.port, cdn.plain_port):  # the hit path's fill, then the application's
            status, headers, body, whole = await fetch(port, f"/{zone}/broken.bin")
            assert (status, whole, error_code(body)) == (502, True, "OriginUnreachable"), (status, headers, body)
        assert stored_url(cdn.node, zone, "/broken.bin") is None


async def test_an_origin_dripping_its_head_is_cut_off_at_the_first_byte_timeout(cdn: HitCdn) -> None:
    async def drip(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _n: int) -> None:
        for byte in b"HTTP/1.1 200 OK\r\n" + KEPT + b"X-Slow: " + b"s" * 100:
            writer.write(bytes([byte]))
            await writer.drain()
            await asyncio.sleep(0.05)  # never quiet for long

    async with zone_before(cdn, drip) as (zone, _):
        loop = asyncio.get_running_loop()
        for port in (cdn.port, cdn.plain_port):
            started = loop.time()
            status, _, body, _ = await fetch(port, f"/{zone}/drip.bin")
            assert (status, error_code(body)) == (504, "OriginTimeout")
            assert loop.time() - started < FIRST_BYTE_TIMEOUT_S + 1
        assert stored_url(cdn.node, zone, "/drip.bin") is None


@pytest.mark.parametrize("framing", ["length", "chunked"])
async def test_a_body_the_origin_stops_sending_is_cut_and_not_stored(cdn: HitCdn, framing: str) -> None:
    async def stall(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _n: int) -> None:
        if framing == "length":
            writer.write(b"HTTP/1.1 200 OK\r\n" + KEPT + b"Content-Length: 10\r\n\r\nhalf")
        else:
            writer.write(b"HTTP/1.1 200 OK\r\n" + KEPT + b"Transfer-Encoding: chunked\r\n\r\n4\r\nhalf\r\n")
        await writer.drain()
        await asyncio.sleep(30)

    async with zone_before(cdn, stall) as (zone, _):
        for port in (cdn.port, cdn.plain_port):
            status, _, body, whole = await fetch(port, f"/{zone}/stalled.bin")
            assert (status, body, whole) == (200, b"half", False)
        assert stored_url(cdn.node, zone, "/stalled.bin") is None


@pytest.mark.parametrize("raw", [
    b"HTTP/1.1 200 OK\r\n" + KEPT + b"Content-Length: 10\r\n\r\nhalf",  # shorter than it said, then the close
    b"HTTP/1.1 200 OK\r\n" + KEPT + b"Content-Length: 10\r\n\r\n",  # the head alone, then the close
    b"HTTP/1.1 200 OK\r\n" + KEPT + b"Transfer-Encoding: chunked\r\n\r\n4\r\nhalf\r\n",  # no last chunk
], ids=["short", "head-only", "no-last-chunk"])
async def test_a_body_cut_by_the_close_is_cut_for_the_client_and_not_stored(cdn: HitCdn, raw: bytes) -> None:
    async with zone_before(cdn, sends(raw, close=True)) as (zone, _):
        for port in (cdn.port, cdn.plain_port):
            status, _, body, whole = await fetch(port, f"/{zone}/cut.bin")
            assert (status, whole) == (200, False)
            assert body in (b"", b"half")
        assert stored_url(cdn.node, zone, "/cut.bin") is None


@pytest.mark.parametrize("framing", ["length", "chunked"])
async def test_a_body_past_the_object_size_limit_reaches_the_client_and_is_not_stored(cdn: HitCdn,
                                                                                      framing: str) -> None:
    piece = bytes(range(256)) * 256
    pieces = 2 * MAX_OBJECT // len(piece)

    async def large(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _n: int) -> None:
        if framing == "length":
            writer.write(b"HTTP/1.1 200 OK\r\n" + KEPT + b"Content-Length: %d\r\n\r\n" % (pieces * len(piece)))
        else:
            writer.write(b"HTTP/1.1 200 OK\r\n" + KEPT + b"Transfer-Encoding: chunked\r\n\r\n")
        for _ in range(pieces):
            writer.write(piece if framing == "length" else b"%x\r\n%s\r\n" % (len(piece), piece))
            await writer.drain()
        if framing == "chunked":
            writer.write(b"0\r\n\r\n")

    async with zone_before(cdn, large) as (zone, _):
        for port in (cdn.port, cdn.plain_port):
            status, _, body, whole = await fetch(port, f"/{zone}/large.bin")
            assert (status, whole, body) == (200, True, piece * pieces)
        assert stored_url(cdn.node, zone, "/large.bin") is None


HOP_BY_HOP = (b"Connection: x-secret, keep-alive\r\nX-Secret: hop\r\nKeep-Alive: timeout=5\r\n"
              b"Proxy-Connection: keep-alive\r\nProxy-Authenticate: Basic\r\nProxy-Authentication-Info: nextnonce=a\r\n"
              b"Upgrade: h2c\r\nTE: trailers\r\nTrailer: X-T\r\n")


@pytest.mark.parametrize(("framing", "body"), [
    (b"Content-Length: 2", b"ok"),  # filled on the hit path
    (b"Transfer-Encoding: chunked", b"2;ext=1\r\nok\r\n0\r\nX-T: 1\r\n\r\n"),  # by the application
], ids=["length", "chunked"])
async def test_hop_by_hop_fields_never_reach_the_client(cdn: HitCdn, framing: bytes, body: bytes) -> None:
    raw = b"HTTP/1.1 200 OK\r\n" + KEPT + HOP_BY_HOP + b"X-End: kept\r\n" + framing + b"\r\n\r\n" + body
    async with zone_before(cdn, sends(raw)) as (zone, _):
        for port in (cdn.port, cdn.port, cdn.plain_port):  # the miss, then hits on both paths
            status, headers, answer, whole = await fetch(port, f"/{zone}/hop.bin")
            assert (status, answer, whole, headers["x-end"]) == (200, b"ok", True, "kept")
            assert not {"x-secret", "keep-alive", "proxy-connection", "proxy-authenticate", "proxy-authentication-info",
                        "upgrade", "te", "trailer", "x-t"} & set(headers), headers
            assert headers.get("connection", "keep-alive") == "keep-alive"


@pytest.mark.parametrize(("ages", "relayed"), [
    (b"Age: -5\r\n", str(2**31)), (b"Age: 5\r\nAge: 7\r\n", str(2**31)), (b"Age: 1.5\r\n", str(2**31)),
    (b"Age: 30\r\n", "30"),
], ids=["negative", "two-lines", "fraction", "valid"])
async def test_an_age_the_origin_sends_reaches_the_client_as_the_edge_reads_it(cdn: HitCdn, ages: bytes,
                                                                               relayed: str) -> None:
    """An Age that is no non-negative integer went out as the origin sent it (`Age: -5`, two Age fields) on the
    answers that pass the origin's head on (a miss, a stale copy fetched again), while the edge counts such a
    response as old as an age can be (RFC 9111 5.1: never fresh): the client gets one Age, the edge's reading."""
    raw = b"HTTP/1.1 200 OK\r\n" + KEPT + ages + b"Content-Length: 2\r\n\r\nok"
    async with zone_before(cdn, sends(raw)) as (zone, _):
        for port in (cdn.port, cdn.plain_port):  # the hit path's fill, then the application's
            status, headers, body, _ = await fetch(port, f"/{zone}/aged{port}.bin")
            assert (status, body, headers["x-cache"], headers["age"]) == (200, b"ok", "MISS", relayed), headers


async def test_interim_answers_before_the_final_one_are_passed_over(cdn: HitCdn) -> None:
    raw = (b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n"
           b"HTTP/1.1 200 OK\r\n" + KEPT + b"Content-Length: 2\r\n\r\nok")
    async with zone_before(cdn, sends(raw)) as (zone, _):
        status, headers, body, _ = await fetch(cdn.port, f"/{zone}/interim.bin")
        assert (status, body, "link" in headers) == (200, b"ok", False)
        assert stored_url(cdn.node, zone, "/interim.bin") is not None


@pytest.mark.parametrize("first", [
    b"HTTP/1.1 200 OK\r\nCache-Control: no-store\r\nContent-Type: text/plain\r\nConnection: close\r\n"
    b"Content-Length: 2\r\n\r\nok",
    # a 204 that sends a body all the same: its bytes are no part of the next answer
    b"HTTP/1.1 204 No Content\r\nCache-Control: no-store\r\nContent-Length: 9\r\n\r\nHTTP/1.1 ",
], ids=["connection-close", "204-with-a-body"])
async def test_a_connection_the_answer_leaves_in_doubt_is_not_used_again(cdn: HitCdn, first: bytes) -> None:
    async def script(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        if n == 1:
            writer.write(first)
        else:
            writer.write(b"HTTP/1.1 200 OK\r\nCache-Control: no-store\r\nContent-Type: text/plain\r\n"
                         b"Content-Length: 4\r\n\r\nnext")
        await writer.drain()

    async with zone_before(cdn, script) as (zone, origin):
        status, _, _, _ = await fetch(cdn.plain_port, f"/{zone}/first.txt")
        assert status in (200, 204)
        status, _, body, whole = await fetch(cdn.plain_port, f"/{zone}/second.txt")
        assert (status, body, whole) == (200, b"next", True)
        assert origin.connections == 2


async def test_an_origin_answering_before_it_read_the_request_body_holds_no_other_request(cdn: HitCdn) -> None:
    """An origin that refuses a forwarded body before reading it, keeps the connection and reads no more: the body's
    rest was still to go when its answer ended. Kept in the pool, the connection held the next request behind it,
    another client's, until the first-byte timeout (504). It is closed; the next request goes on a new one."""
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        if n == 1:
            writer.write(b"HTTP/1.1 413 Content Too Large\r\nContent-Type: text/plain\r\nContent-Length: 3\r\n\r\nbig")
            await writer.drain()
            await asyncio.sleep(30)  # reads none of the body
        writer.write(b"HTTP/1.1 200 OK\r\n" + KEPT + b"Content-Length: 4\r\n\r\nnext")
        await writer.drain()

    async with zone_before(cdn, script) as (zone, origin):
        body = b"x" * (8 * 1024 * 1024)
        reader, writer = await asyncio.open_connection("127.0.0.1", cdn.plain_port)
        try:
            writer.write(request_bytes(f"/{zone}/upload", "POST", Content_Length=str(len(body))) + body)
            async with asyncio.timeout(WAIT_S):
                status, _, _ = parse_head(await reader.readuntil(b"\r\n\r\n"))
            assert status == 413
        finally:
            writer.close()
        status, _, answer, whole = await fetch(cdn.plain_port, f"/{zone}/after.bin")
        assert (status, answer, whole) == (200, b"next", True)
        assert origin.connections == 2


async def test_a_request_body_the_origin_leaves_unread_is_never_taken_for_another_clients_request(cdn: HitCdn) -> None:
    """An origin that answers a forwarded POST without reading its body and keeps the connection (Python's
    `http.server` does, for a handler that reads none) takes the body for the next request on that connection. A
    small body has left the edge whole by then, so the connection went back to the pool: a client whose body was a
    request of its own had the origin's answer to it taken for the next client's fill, and stored under that URL
    for everyone. A connection that carried a body is not kept, however the origin answered."""
    smuggled = b"GET /smuggled HTTP/1.1\r\nHost: origin\r\n\r\n"

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        if n == 1:  # the POST: refused at once, its body left unread
            writer.write(b"HTTP/1.1 401 Unauthorized\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nno")
        elif n == 2:  # the body, read as a request: answered once the edge sends its next request behind it
            try:
                async with asyncio.timeout(WAIT_S):
                    await reader.readuntil(b"\r\n\r\n")
            except (TimeoutError, asyncio.IncompleteReadError):
                raise ConnectionError from None  # the edge closed the connection: nothing more comes on it
            writer.write(b"HTTP/1.1 200 OK\r\n" + KEPT + b"Content-Length: 8\r\n\r\nsmuggled")
            writer.write(b"HTTP/1.1 200 OK\r\n" + KEPT + b"Content-Length: 5\r\n\r\nright")
        else:
            writer.write(b"HTTP/1.1 200 OK\r\n" + KEPT + b"Content-Length: 5\r\n\r\nright")
        await writer.drain()

    async with zone_before(cdn, script) as (zone, origin):
        reader, writer = await asyncio.open_connection("127.0.0.1", cdn.port)
        try:
            writer.write(request_bytes(f"/{zone}/login", "POST", Content_Length=str(len(smuggled))) + smuggled)
            async with asyncio.timeout(WAIT_S):
                status, _, _ = parse_head(await reader.readuntil(b"\r\n\r\n"))
            assert status == 401
        finally:
            writer.close()
        for _ in range(2):  # the fill, then the stored answer
            status, _, answer, whole = await fetch(cdn.port, f"/{zone}/index.html")
            assert (status, answer, whole) == (200, b"right", True)
        assert origin.connections == 2
