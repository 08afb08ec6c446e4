"""Request bodies a pull zone forwards to its origin (POST, PUT, PATCH...): each is received whole before it is
sent, so a worker holds at most `[origin] forward_bodies_mb` of them at once; past that a request is answered 503
with Retry-After, never queued into the worker's memory."""

from __future__ import annotations

import asyncio
import gzip
from collections.abc import AsyncIterator
from pathlib import Path

import orjson
import pytest
import pytest_asyncio
from aiohttp import ClientResponse, web

from tests.support.cdn import shared_cdn_apps
from tests.support.control import ACCOUNT
from tests.support.origins import PREFIX, ZONE, Pull, ScriptedOrigin, add_pull_zone, serve_origin
from tests.support.wait import wait_until

KB = 1024
BUDGET_MB = "0.5"        # the worker's budget for forwarded bodies in this module (512 KB)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def pull(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Pull]:
    origin = ScriptedOrigin()
    server = await serve_origin(origin)
    try:
        async with shared_cdn_apps(tmp_path_factory.mktemp("forwarded-bodies"), ASSETCDN_ORIGIN_ALLOW_LOOPBACK="true",
                                   ASSETCDN_ORIGIN_FORWARD_BODIES_MB=BUDGET_MB) as cdn:
            await add_pull_zone(cdn, ZONE, {"Url": f"http://127.0.0.1:{server.port}{PREFIX}"})
            yield Pull(cdn, origin)
    finally:
        await server.close()


SHARED = pytest.mark.asyncio(loop_scope="module")


@SHARED
async def test_bodies_past_the_workers_budget_are_503_until_the_held_ones_are_sent(pull: Pull) -> None:
    release = asyncio.Event()
    arrived: list[int] = []

    async def slow(request: web.Request) -> web.Response:  # holds the first upload's answer until released
        arrived.append(len(await request.read()))
        await release.wait()
        return web.Response(status=201, body=b"created")

    async def quick(request: web.Request) -> web.Response:
        return web.Response(status=201, body=str(len(await request.read())).encode())

    pull.origin.route("/slow-upload", slow)
    pull.origin.route("/upload", quick)
    edge = pull.cdn.edge
    first = asyncio.create_task(edge.post(f"/{ZONE}/slow-upload", data=b"a" * (400 * KB)))

    async def first_arrived() -> bool:
        return arrived == [400 * KB]

    await wait_until(first_arrived, "the first upload at the origin")
    # Held until the origin answers it (the body stays in memory until then): another of that size is refused,
    # a smaller one that fits beside it is taken.
    refused = await edge.post(f"/{ZONE}/upload", data=b"b" * (400 * KB))
    assert refused.status == 503 and refused.headers["Retry-After"] == "1"
    assert orjson.loads(await refused.read())["error"]["code"] == "EdgeBusy"
    small = await edge.post(f"/{ZONE}/upload", data=b"s" * (100 * KB))
    assert (small.status, await small.read()) == (201, str(100 * KB).encode())
    release.set()
    assert (await first).status == 201
    again = await edge.post(f"/{ZONE}/upload", data=b"b" * (400 * KB))
    assert (again.status, await again.read()) == (201, str(400 * KB).encode())
    assert len(pull.origin.requests("/upload")) == 2  # the refused one never reached the origin

    # Bodies held as they arrive: a client sending a body slowly holds what it sent so far (300 KB of 400 KB).
    budget = pull.cdn.node.origins.forward_bodies
    reader, writer = await asyncio.open_connection("127.0.0.1", edge.server.port)
    try:
        writer.write(f"POST /{ZONE}/upload HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {400 * KB}\r\n\r\n".encode()
                     + b"c" * (300 * KB))  # and the rest later
        await writer.drain()

        async def held() -> bool:
            return budget.held == 300 * KB

        await wait_until(held, "the slow body's first 300 KB received")
        refused = await edge.post(f"/{ZONE}/upload", data=b"d" * (300 * KB))
        assert refused.status == 503 and refused.headers["Retry-After"] == "1"
        assert orjson.loads(await refused.read())["error"]["code"] == "EdgeBusy"
        small = await edge.post(f"/{ZONE}/upload", data=b"e" * (100 * KB))  # what is left of the budget is taken
        assert small.status == 201
        writer.write(b"c" * (100 * KB))
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 20)
        assert head.startswith(b"HTTP/1.1 201 "), head
    finally:
        writer.close()
    after = await edge.post(f"/{ZONE}/upload", data=b"f" * (400 * KB))
    assert after.status == 201


@SHARED
async def test_a_chunked_body_is_counted_as_it_arrives(pull: Pull) -> None:
    pull.origin.route("/chunked", lambda request: _count(request))

    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(6):
            yield b"g" * (100 * KB)

    # Over the whole budget (set below the request limit here), chunked or declared: it can never be taken, 413.
    for body in (chunks(), b"g" * (600 * KB)):
        refused = await pull.cdn.edge.post(f"/{ZONE}/chunked", data=body)
        assert refused.status == 413, await refused.text()
        assert orjson.loads(await refused.read())["error"]["code"] == "PayloadTooLarge"
    assert pull.origin.requests("/chunked") == []

    async def fewer() -> AsyncIterator[bytes]:
        for _ in range(3):
            yield b"h" * (100 * KB)

    first, release = await held_upload(pull, "/held-upload")
    busy = await pull.cdn.edge.post(f"/{ZONE}/chunked", data=fewer())  # fits the budget, not beside 400 KB
    assert busy.status == 503 and busy.headers["Retry-After"] == "1"
    release.set()
    assert (await first).status == 201
    taken = await pull.cdn.edge.post(f"/{ZONE}/chunked", data=fewer())
    assert (taken.status, await taken.read()) == (201, str(300 * KB).encode())


async def held_upload(pull: Pull, name: str) -> tuple[asyncio.Task[ClientResponse], asyncio.Event]:
    """A 400 KB upload to `name`, whose origin has read it and answers once the event is set: its body is held
    against the worker's budget meanwhile. The upload's task, and the event."""
    release = asyncio.Event()

    async def held(request: web.Request) -> web.Response:
        await request.read()
        await release.wait()
        return web.Response(status=201)

    pull.origin.route(name, held)
    upload = asyncio.create_task(pull.cdn.edge.post(f"/{ZONE}{name}", data=b"a" * (400 * KB)))

    async def at_origin() -> bool:
        return len(pull.origin.requests(name)) == 1

    await wait_until(at_origin, "the upload held at its origin")
    return upload, release


async def _count(request: web.Request) -> web.Response:
    return web.Response(status=201, body=str(len(await request.read())).encode())


@SHARED
async def test_a_declared_body_holds_only_what_has_arrived(pull: Pull) -> None:
    """A declared length is not taken before the bytes arrive: clients that declare large bodies and send none
    (a few connections, no bandwidth) would otherwise hold the whole budget, every other upload to every pull zone
    of the worker 503 until their body timeout, and again as they reconnect."""
    pull.origin.route("/declared", lambda request: _count(request))
    edge = pull.cdn.edge
    idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
    try:
        for _ in range(3):  # 1.2 MB declared, over twice the budget; 3 KB sent
            reader, writer = await asyncio.open_connection("127.0.0.1", edge.server.port)
            writer.write(f"POST /{ZONE}/declared HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {400 * KB}\r\n\r\n"
                         .encode() + b"i" * KB)
            await writer.drain()
            idle.append((reader, writer))

        budget = pull.cdn.node.origins.forward_bodies

        async def arrived() -> bool:  # the idle requests' handlers are receiving their bodies
            return budget.held >= 3 * KB

        await wait_until(arrived, "the three idle bodies' first bytes received")
        answer = await edge.post(f"/{ZONE}/declared", data=b"j" * (400 * KB))
        assert (answer.status, await answer.read()) == (201, str(400 * KB).encode())
        for reader, writer in idle:
            writer.write(b"i" * (399 * KB))
            await writer.drain()
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 20)
            assert head.startswith(b"HTTP/1.1 201 "), head
    finally:
        for _, writer in idle:
            writer.close()


@SHARED
async def test_expect_100_continue_is_not_met_for_a_body_the_budget_cannot_take(pull: Pull) -> None:
    """A declared body that does not fit beside what the worker holds is refused before any of it is read; with
    `Expect: 100-continue` the edge answered 100 Continue all the same, so the client sent the whole body (up to
    26 MB at the default limits) only to be answered 503. The 503 now comes instead of the 100 (RFC 9110 10.1.1);
    a body that fits gets its 100."""
    pull.origin.route("/expected", lambda request: _count(request))
    edge = pull.cdn.edge
    budget = pull.cdn.node.origins.forward_bodies
    reader, writer = await asyncio.open_connection("127.0.0.1", edge.server.port)
    opened: list[asyncio.StreamWriter] = [writer]
    try:
        writer.write(f"POST /{ZONE}/expected HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {400 * KB}\r\n\r\n"
                     .encode() + b"k" * (300 * KB))
        await writer.drain()

        async def held() -> bool:
            return budget.held == 300 * KB

        await wait_until(held, "the slow body's first 300 KB received")
        for size, first in ((300 * KB, b"HTTP/1.1 503 "), (100 * KB, b"HTTP/1.1 100 ")):
            asking, sending = await asyncio.open_connection("127.0.0.1", edge.server.port)
            opened.append(sending)
            sending.write(f"POST /{ZONE}/expected HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {size}\r\n"
                          "Expect: 100-continue\r\n\r\n".encode())
            await sending.drain()
            head = await asyncio.wait_for(asking.readuntil(b"\r\n\r\n"), 20)
            assert head.startswith(first), (size, head)
            if first == b"HTTP/1.1 503 ":  # in the envelope
                assert b"\r\nRetry-After: 1\r\n" in head
                length = int(head.split(b"\r\nContent-Length: ", 1)[1].split(b"\r\n", 1)[0])
                assert orjson.loads(await asking.readexactly(length))["error"]["code"] == "EdgeBusy"
        sending.write(b"l" * (100 * KB))
        await sending.drain()
        head = await asyncio.wait_for(asking.readuntil(b"\r\n\r\n"), 20)
        assert head.startswith(b"HTTP/1.1 201 "), head
        writer.write(b"k" * (100 * KB))
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 20)
        assert head.startswith(b"HTTP/1.1 201 "), head
    finally:
        for each in opened:
            each.close()
    assert [len(seen.body) for seen in pull.origin.requests("/expected")] == [100 * KB, 400 * KB]


@SHARED
async def test_a_cache_control_rule_does_not_make_a_busy_or_failed_answer_cacheable(pull: Pull) -> None:
    """`_headers` rules apply to a delivery's errors too; a rule giving every path a year's `Cache-Control` made a
    503 EdgeBusy and an origin's 500 say a shared cache may keep them for a year, and answer every later request
    for the URL with them. A 5xx keeps the Cache-Control it was answered with (none, or the origin's own)."""
    resp = await pull.cdn.control.post("/api/core/rules", headers=ACCOUNT, json={
        "File": "_headers", "Content": "/*\n  Cache-Control: public, max-age=31536000, immutable\n  X-Frame-Options: DENY\n"})
    assert resp.status in (200, 201), await resp.text()
    pull.origin.answer("/ruled.txt", b"fine", headers={"Cache-Control": "max-age=60"})
    pull.origin.answer("/broken.txt", b"oops", status=500)
    pull.origin.answer("/flaky.txt", b"later", status=503, headers={"Cache-Control": "max-age=5"})

    async def applied() -> bool:
        return "immutable" in (await pull.cdn.edge.get(f"/{ZONE}/ruled.txt")).headers.get("Cache-Control", "")

    await wait_until(applied, "the rule at the edge")
    broken = await pull.cdn.edge.get(f"/{ZONE}/broken.txt")
    assert broken.status == 500 and "Cache-Control" not in broken.headers and broken.headers["X-Frame-Options"] == "DENY"
    flaky = await pull.cdn.edge.get(f"/{ZONE}/flaky.txt")
    assert flaky.status == 503 and flaky.headers.getall("Cache-Control") == ["max-age=5"]

    first, release = await held_upload(pull, "/held-again")
    busy = await pull.cdn.edge.post(f"/{ZONE}/upload", data=b"b" * (400 * KB))
    assert busy.status == 503 and "Cache-Control" not in busy.headers
    release.set()
    assert (await first).status == 201


@SHARED
async def test_a_body_under_another_transfer_coding_than_chunked_is_501_and_never_forwarded(pull: Pull) -> None:
    """`Transfer-Encoding: gzip, chunked`: the server takes the chunks and leaves the gzip coding on the bytes, and
    the field that named it is hop-by-hop, so the origin was sent the compressed bytes as the upload itself (201
    for a body that was never the one the client sent). Such a body is refused (RFC 9112 6.1: 501), before any 100
    Continue; plain chunked bodies still go through."""
    pull.origin.route("/coded", lambda request: _count(request))
    coded = gzip.compress(b"the upload itself")
    chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(coded), coded)
    for coding, expect in (("gzip, chunked", ""), ("deflate,chunked", "Expect: 100-continue\r\n")):
        reader, writer = await asyncio.open_connection("127.0.0.1", pull.cdn.edge.server.port)
        try:
            writer.write(f"POST /{ZONE}/coded HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: {coding}\r\n{expect}"
                         "\r\n".encode())
            if not expect:
                writer.write(chunked)
            await writer.drain()
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 20)
            assert head.startswith(b"HTTP/1.1 501 "), (coding, head)
            length = int(head.split(b"\r\nContent-Length: ", 1)[1].split(b"\r\n", 1)[0])
            assert orjson.loads(await reader.readexactly(length))["error"]["code"] == "UnsupportedTransferCoding"
        finally:
            writer.close()
    assert pull.origin.requests("/coded") == []
    plain = await pull.cdn.edge.post(f"/{ZONE}/coded", data=_chunks(coded))
    assert (plain.status, await plain.read()) == (201, str(len(coded)).encode())


async def _chunks(body: bytes) -> AsyncIterator[bytes]:
    yield body


@SHARED
async def test_a_chunked_bodys_trailer_fields_never_reach_the_next_request(pull: Pull) -> None:
    """A chunked body's trailer section ends that request. aiohttp's parser kept its last trailer field pending and
    added it to the next request read on the connection: behind a balancer that pools its connections to the edge,
    one client's `0\\r\\nCookie: ...\\r\\n\\r\\n` was sent to the origin with another client's request. The
    connection now closes after a request with a chunked body: the request behind it is never read from there."""
    pull.origin.route("/trailed", lambda request: _count(request))
    pull.origin.answer("/behind", b"plain", headers={"Cache-Control": "no-store"})
    reader, writer = await asyncio.open_connection("127.0.0.1", pull.cdn.edge.server.port)
    try:
        writer.write(f"POST /{ZONE}/trailed HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                     "5\r\nhello\r\n0\r\nX-Trailed: one\r\nX-Smuggled: yes\r\n\r\n"
                     f"GET /{ZONE}/behind HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 20)
        assert head.startswith(b"HTTP/1.1 201 "), head
        assert b"\r\nConnection: close\r\n" in head, head
        length = int(head.split(b"\r\nContent-Length: ", 1)[1].split(b"\r\n", 1)[0])
        assert await reader.readexactly(length) == b"5"
        assert await asyncio.wait_for(reader.read(), 20) == b""  # closed: the pipelined GET is not answered here
    finally:
        writer.close()
    assert [seen.body for seen in pull.origin.requests("/trailed")] == [b"hello"]
    assert all("X-Smuggled" not in seen.headers for seen in pull.origin.requests("/behind"))
    again = await pull.get("/behind")  # asked again on a connection of its own, as a client does
    assert (again.status, await again.read()) == (200, b"plain")
    assert "X-Smuggled" not in pull.origin.requests("/behind")[-1].headers


async def test_a_body_still_arriving_is_408_with_no_time_allowed_per_byte(tmp_path: Path) -> None:
    """`[server] body_min_bytes_per_s = 0`: the body's deadline is `body_timeout_s` alone. It divided by 0 in the
    deadline's timer, so a body trickling in was never cut off (and never reached the origin either)."""
    origin = ScriptedOrigin()
    origin.route("/slow-body", lambda request: _count(request))
    server = await serve_origin(origin)
    try:
        async with shared_cdn_apps(tmp_path, ASSETCDN_ORIGIN_ALLOW_LOOPBACK="true", ASSETCDN_SERVER_BODY_TIMEOUT_S="1",
                                   ASSETCDN_SERVER_BODY_MIN_BYTES_PER_S="0") as cdn:
            await add_pull_zone(cdn, ZONE, {"Url": f"http://127.0.0.1:{server.port}{PREFIX}"})
            reader, writer = await asyncio.open_connection("127.0.0.1", cdn.edge.server.port)
            try:
                writer.write(f"POST /{ZONE}/slow-body HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n"
                             .encode() + b"s" * 10)
                await writer.drain()
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
                assert head.startswith(b"HTTP/1.1 408 "), head
            finally:
                writer.close()
            assert origin.count("/slow-body", "POST") == 0
    finally:
        await server.close()
