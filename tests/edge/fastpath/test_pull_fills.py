"""Pull zones' plain misses filled on the hit path (assetcdn/edge/fastpath/pull_fill.py), over raw sockets against
a real edge and an origin the tests script: the answer, the stored entry, the metrics and the delivery records
the application gives for the same miss; one origin request whatever answers it; pipelined and closing
connections; a client that stops reading its fill, on either path."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import socket
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any, cast

import aiohttp
import orjson
import pytest
import pytest_asyncio
from aiohttp import web
from ngh2 import ErrorCode

from assetcdn.edge.access_log import AccessLog
from assetcdn.edge.app_keys import NODE
from assetcdn.edge.cache.tags import pull_path_tag
from assetcdn.edge.fastpath.hit_server import HitServer
from assetcdn.edge.fastpath.protocol import TLS_TURN_ANSWERS
from assetcdn.edge.fastpath.pull_fill import PullFills
from assetcdn.edge.fastpath.sendfile import TLS_PIECE
from assetcdn.edge.shield import SHIELD_CACHE
from assetcdn.edge.states import freshness
from assetcdn.edge.states import pull as pull_states
from assetcdn.edge.states.feed import ClientFeed
from assetcdn.edge.states.keys import pull_key
from assetcdn.edge.states.pull import flight_key
from assetcdn.shared.cache_results import CacheResult
from tests.support.cdn import ZONE as STORED_ZONE
from tests.support.control import METRICS
from tests.support.feeds import record_feeds, waits_for_its_fill
from tests.support.h2_memory import H2InProcess, MemoryHttp11
from tests.support.hit_cdn import READ_S, HitCdn, RawConnection, Response, request_bytes
from tests.support.origins import (
    LONG,
    PREFIX,
    ScriptedOrigin,
    pull_zone_on_hit_cdn,
    stored_url,
)
from tests.support.raw_origin import KEPT, zone_before
from tests.support.sockets import read_then_reset, slow_reader
from tests.support.wait import wait_until

pytestmark = pytest.mark.asyncio(loop_scope="module")

ZONE = "pullfill"
BODY = bytes(range(256)) * 24
HEADERS = {"Content-Type": "application/octet-stream", "ETag": '"v1"', "Cache-Tag": "news",
           "Last-Modified": "Mon, 01 Jan 2024 00:00:00 GMT", **LONG}
PER_REQUEST = {"x-request-id", "date"}
FIRST_BYTE_TIMEOUT_S = 1.0


class FillCdn:
    def __init__(self, cdn: HitCdn, origin: ScriptedOrigin) -> None:
        self.cdn = cdn
        self.origin = origin

    @property
    def fills(self) -> PullFills:
        assert self.cdn.site.hits is not None
        return self.cdn.site.hits.fills

    def answer(self, *names: str, status: int = 200, **headers: str) -> None:
        for name in names:
            self.origin.answer(name, BODY, status=status, headers={**HEADERS, **headers})


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def filled(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[FillCdn]:
    async with pull_zone_on_hit_cdn(tmp_path_factory.mktemp("pull-fills"), ZONE, ASSETCDN_ORIGIN_FIRST_BYTE_TIMEOUT_S=str(FIRST_BYTE_TIMEOUT_S),
                                    ASSETCDN_ANALYTICS_FLUSH_INTERVAL_S="3600") as (cdn, origin):
        yield FillCdn(cdn, origin)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def patient_filled(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[FillCdn]:
    """`filled` with an origin given 30 s for its head: for tests that hold the head back until requests joined
    or a client left, or answer it late, which a loaded machine can stretch past the 1 s of `filled` (their subject
    is who waits for whom, or what is counted, not that time)."""
    async with pull_zone_on_hit_cdn(tmp_path_factory.mktemp("pull-fills-patient"), ZONE,
                                    ASSETCDN_ORIGIN_FIRST_BYTE_TIMEOUT_S="30",
                                    ASSETCDN_ANALYTICS_FLUSH_INTERVAL_S="3600") as (cdn, origin):
        yield FillCdn(cdn, origin)


def comparable(response: Response) -> tuple[int, list[tuple[str, str]], bytes]:
    headers = sorted((k.lower(), v) for k, v in response.headers.items() if k.lower() not in PER_REQUEST)
    return response.status, headers, response.body


def _text(request_id: str | bytes | None) -> str | None:
    return request_id.decode() if isinstance(request_id, bytes) else request_id


def _metric(text: str, name: str, *labels: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name + "{") and all(label in line for label in labels))


async def test_a_miss_is_filled_on_the_hit_path_as_the_application_fills_it(filled: FillCdn) -> None:
    names = ("/get-fast.bin", "/get-app.bin", "/head-fast.bin", "/head-app.bin")
    filled.answer(*names)
    conn, plain = await filled.cdn.connect(), await filled.cdn.plain()
    before = filled.fills.filled
    head_count = ("assetcdn_requests_total", 'route="/{path}"', 'method="HEAD"', 'status="200"')

    async def heads_counted() -> float:
        return _metric((await plain.request("/metrics", Authorization=METRICS["Authorization"])).body.decode(),
                       *head_count)

    heads_before = await heads_counted()
    fast_get, app_get = await conn.request(f"/{ZONE}{names[0]}"), await plain.request(f"/{ZONE}{names[1]}")
    fast_head = await conn.request(f"/{ZONE}{names[2]}", "HEAD")
    app_head = await plain.request(f"/{ZONE}{names[3]}", "HEAD")

    async def both_filled_here() -> bool:  # a HEAD's fill goes on (reading the body to store it) after its answer
        return filled.fills.filled == before + 2

    async def both_heads_counted() -> bool:  # so, on either port, it is counted after its answer: not in a later test
        return await heads_counted() == heads_before + 2

    await wait_until(both_filled_here, "both misses filled on the hit path")
    await wait_until(both_heads_counted, "both HEAD requests counted")
    assert fast_get.header("X-Cache") == "MISS" and fast_get.body == BODY
    assert comparable(fast_get) == comparable(app_get)
    assert comparable(fast_head) == comparable(app_head) and fast_head.header("Content-Length") == str(len(BODY))
    assert all(a.header("X-Request-ID") and a.header("Date") for a in (fast_get, fast_head))
    # Stored as the application stores it: the next request on the same connection is the hit path's hit.
    served = filled.cdn.site.hits.served if filled.cdn.site.hits else 0
    for name in (names[0], names[2]):
        again = await conn.request(f"/{ZONE}{name}")
        assert (again.status, again.header("X-Cache"), again.body) == (200, "HIT", BODY)
    assert filled.cdn.site.hits is not None and filled.cdn.site.hits.served == served + 2
    assert [filled.origin.count(name) for name in names] == [1, 1, 1, 1]


@pytest.mark.parametrize("path", ["hit", "application"])
async def test_a_query_reaches_the_origin_as_the_client_sent_it(filled: FillCdn, path: str) -> None:
    """An encoded ``/``, ``&`` or ``%`` in a query (a signed URL's signature, a return address) is passed on as sent:
    encoding it again would ask the origin for another URL, and store its answer under this one."""
    name = f"/query-{path}.bin"
    seen: list[str] = []

    async def echo(request: web.Request) -> web.StreamResponse:
        seen.append(request.rel_url.raw_query_string)
        return web.Response(body=request.rel_url.raw_query_string.encode(), headers=HEADERS)

    filled.origin.route(name, echo)
    query = "next=%2Fhome%26x&sig=a%2Bb%3D%3D&pct=100%25"
    conn = await (filled.cdn.connect() if path == "hit" else filled.cdn.plain())
    first = await conn.request(f"/{ZONE}{name}?{query}")
    again = await conn.request(f"/{ZONE}{name}?{query}")
    assert (first.status, first.header("X-Cache"), first.body) == (200, "MISS", query.encode())
    assert (again.status, again.header("X-Cache"), again.body) == (200, "HIT", query.encode())
    assert seen == [query]


@pytest.mark.parametrize("path", ["hit", "application"])
async def test_a_field_a_client_names_in_connection_does_not_pick_the_variant_its_answer_is_stored_as(
        filled: FillCdn, path: str) -> None:
    """`Vary: Origin` (CORS): a client sends Origin but names it in Connection, so the origin is asked without it
    and answers without Access-Control-Allow-Origin. Kept as the variant of that Origin, it would be every later
    browser's answer there, and their cross-origin loads would fail while it is cached."""
    name = f"/cors-{path}.woff2"

    async def cors(request: web.Request) -> web.StreamResponse:
        allowed = {"Access-Control-Allow-Origin": request.headers["Origin"]} if "Origin" in request.headers else {}
        return web.Response(body=b"font", headers={**HEADERS, "Vary": "Origin", **allowed})

    filled.origin.route(name, cors)
    conn = await (filled.cdn.connect() if path == "hit" else filled.cdn.plain())
    site = "https://app.example"
    hostile = await conn.request(f"/{ZONE}{name}", Origin=site, Connection="Origin")
    assert hostile.status == 200 and hostile.header("Access-Control-Allow-Origin") is None
    browser = await conn.request(f"/{ZONE}{name}", Origin=site)
    assert browser.header("Access-Control-Allow-Origin") == site
    again = await conn.request(f"/{ZONE}{name}", Origin=site)
    assert (again.header("X-Cache"), again.header("Access-Control-Allow-Origin")) == ("HIT", site)


async def test_a_vary_on_a_field_the_edge_sets_itself_keys_on_the_value_the_origin_got(filled: FillCdn) -> None:
    """X-Forwarded-For is the edge's: a response that varies on it is kept per client address, whatever a client
    claims in its own X-Forwarded-For."""
    name = "/by-address.txt"

    async def by_address(request: web.Request) -> web.StreamResponse:
        return web.Response(body=request.headers["X-Forwarded-For"].encode(),
                            headers={**HEADERS, "Vary": "X-Forwarded-For"})

    filled.origin.route(name, by_address)
    got = []
    for source, port in (("127.0.0.1", filled.cdn.port), ("127.0.0.2", filled.cdn.plain_port),
                         ("127.0.0.2", filled.cdn.port), ("127.0.0.1", filled.cdn.plain_port)):
        reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))
        try:
            writer.write(request_bytes(f"/{ZONE}{name}", X_Forwarded_For="127.0.0.9", Connection="close"))
            answer = await asyncio.wait_for(reader.read(), READ_S)
        finally:
            writer.close()
        got.append((answer.split(b"\r\n\r\n", 1)[1], b"X-Cache: HIT" in answer))
    assert got == [(b"127.0.0.1", False), (b"127.0.0.2", False), (b"127.0.0.2", True), (b"127.0.0.1", True)]
    assert filled.origin.count(name) == 2


@pytest.mark.parametrize("path", ["hit", "application"])
@pytest.mark.parametrize("personal", [{"Set-Cookie": "session=alice"}, {"Cache-Control": "private, max-age=600"}],
                         ids=["set-cookie", "private"])
async def test_a_304_that_makes_the_response_personal_updates_only_the_answer_it_came_for(
        filled: FillCdn, path: str, personal: dict[str, str]) -> None:
    """A 304's fields update the stored head (RFC 9111 3.2), but one that brings a Set-Cookie or `private` makes it
    a response this shared cache may not keep: kept, it would hand one user's cookie (or private answer) to
    everyone as a hit. It is that user's answer only; the stored one stays stale and the next client revalidates."""
    name = f"/revalidated-{path}-{'-'.join(personal)}.txt"

    async def handler(request: web.Request) -> web.StreamResponse:
        if request.headers.get("If-None-Match") == '"r1"':  # alice's request gets her own fields
            mine = personal if request.headers.get("X-User") == "alice" else {}
            return web.Response(status=304, headers={"ETag": '"r1"', "Cache-Control": "max-age=600", **mine})
        return web.Response(body=b"shared", headers={"Content-Type": "text/plain", "ETag": '"r1"',
                                                     "Cache-Control": "max-age=0"})

    filled.origin.route(name, handler)
    first, second = [await (filled.cdn.connect() if path == "hit" else filled.cdn.plain()) for _ in range(2)]
    assert (await first.request(f"/{ZONE}{name}")).header("X-Cache") == "MISS"
    alice = await first.request(f"/{ZONE}{name}", X_User="alice")
    assert (alice.status, alice.body) == (200, b"shared")
    assert all(alice.header(field) == value for field, value in personal.items())
    bob = await second.request(f"/{ZONE}{name}")
    assert (bob.status, bob.body, bob.header("Set-Cookie")) == (200, b"shared", None)
    assert bob.header("X-Cache") != "HIT" and "private" not in (bob.header("Cache-Control") or "")
    assert filled.origin.count(name) == 3


@pytest.mark.parametrize("path", ["hit", "application"])
async def test_a_utf8_field_value_from_the_origin_reaches_clients_as_the_same_bytes(filled: FillCdn, path: str) -> None:
    name = f"/utf8-{path}.txt"
    disposition = 'attachment; filename="caf\u00e9 \u2013 na\u00efve.txt"'
    filled.origin.answer(name, b"text", headers={**HEADERS, "Content-Disposition": disposition})
    conn = await (filled.cdn.connect() if path == "hit" else filled.cdn.plain())
    for expected in ("MISS", "HIT"):
        answer = await conn.request(f"/{ZONE}{name}")
        assert answer.header("X-Cache") == expected
        assert b": " + disposition.encode() + b"\r\n" in answer.raw_head


@pytest.mark.parametrize("origin_says", [None, "none", "bytes"])
@pytest.mark.parametrize("path", ["hit", "application"])
async def test_a_miss_says_accept_ranges_bytes_as_its_hits_do_whatever_the_origin_said(
        filled: FillCdn, path: str, origin_says: str | None) -> None:
    """A player decides from its first answer whether it may seek by ranges: the MISS that fills a URL says what
    its HITs say, `Accept-Ranges: bytes` (ranges are answered from the stored copy), one line of it, whether the
    origin said nothing, `none` or `bytes`."""
    name = f"/ranges-{path}-{origin_says}.mp4"
    filled.origin.answer(name, BODY, headers={**HEADERS, **({} if origin_says is None else
                                                               {"Accept-Ranges": origin_says})})
    conn = await (filled.cdn.connect() if path == "hit" else filled.cdn.plain())
    miss = await conn.request(f"/{ZONE}{name}")
    hit = await conn.request(f"/{ZONE}{name}")
    assert [(a.header("X-Cache"), a.headers.getall("Accept-Ranges", [])) for a in (miss, hit)] == [
        ("MISS", ["bytes"]), ("HIT", ["bytes"])]
    ranged = await conn.request(f"/{ZONE}{name}", Range="bytes=0-9")
    assert (ranged.status, ranged.body) == (206, BODY[:10])


async def _answer_or_error(conn: Any, target: str) -> Response | Exception:
    try:
        return cast(Response, await conn.request(target))
    except (asyncio.IncompleteReadError, ConnectionError, TimeoutError) as exc:
        return exc


@pytest.mark.parametrize("failure", ["no answer", "body cut short", "body cut short once"])
@pytest.mark.parametrize("path", ["hit", "application"])
async def test_requests_waiting_for_a_fill_the_origin_fails_get_that_failure_not_a_request_each(
        patient_filled: FillCdn, path: str, failure: str) -> None:
    """Six requests wait for a fill whose origin breaks the connection within its head: the waiters answer 502
    with the leader's failure, and the failing origin is asked once, not seven times. One cut halfway through its
    body leaves nothing stored: one of the waiters asks again and the others wait for it, so a cut that does not
    happen again costs one more origin request in all (every waiter then gets the whole body from the cache);
    one that happens again is every waiter's 502, whole (the one that asked had its body read before answering),
    and the origin is asked no more. The body is 1 MB, the largest waited for whole: the waiters of a larger one are
    answered as it is read, and cut short with it (tests/edge/routes/test_pull_growing.py)."""
    filled = patient_filled  # its origin holds the head until every waiter joined
    name = f"/failing-{path}-{failure.replace(' ', '-')}.bin"
    cut = asyncio.Event()
    whole_body = BIG[:pull_states.SPOOL_MEMORY]

    async def failing(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers=HEADERS)
        if failure == "body cut short once" and filled.origin.count(name) > 1:
            return web.Response(body=whole_body, headers=HEADERS)
        if failure.startswith("body cut short"):
            response.content_length = len(whole_body)
            await response.prepare(request)
            await response.write(whole_body[:1000])
        await cut.wait()
        assert request.transport is not None
        if failure == "no answer":  # a broken head, not a bare close (which a reused connection would retry)
            request.transport.write(b"HTTP/1.1 2")
        request.transport.close()
        return response

    filled.origin.route(name, failing)
    target = f"/{ZONE}{name}"
    leader = await (filled.cdn.connect() if path == "hit" else filled.cdn.plain())
    led = asyncio.create_task(_answer_or_error(leader, target))
    flights = filled.cdn.app[pull_states.FLIGHTS]
    key = flight_key(pull_key(ZONE, name, ""), filled.cdn.node.config.pull_zones[ZONE])

    async def leading() -> bool:
        return filled.origin.count(name) == 1

    await wait_until(leading, "the fill under way")
    waiting = [await (filled.cdn.connect() if n % 2 else filled.cdn.plain()) for n in range(6)]
    waiters = [asyncio.create_task(_answer_or_error(conn, target)) for conn in waiting]

    async def all_joined() -> bool:
        return flights.joined(key) == len(waiters)

    await wait_until(all_joined, "every request waiting for the fill")
    cut.set()
    first = await led
    answers = [await waiter for waiter in waiters]
    if failure == "no answer":
        assert isinstance(first, Response) and first.status == 502
        assert [answer.status if isinstance(answer, Response) else answer for answer in answers] == [502] * 6
        assert filled.origin.count(name) == 1
        assert stored_url(filled.cdn.node, ZONE, name) is None
    elif failure == "body cut short":  # its answer had begun: cut short, never complete; the others' had not
        assert not isinstance(first, Response) or len(first.body) < len(whole_body)
        assert [answer.status if isinstance(answer, Response) else answer for answer in answers] == [502] * 6
        assert filled.origin.count(name) == 2  # the leader, then one waiter's new flight for all of them
        assert stored_url(filled.cdn.node, ZONE, name) is None
    else:
        assert not isinstance(first, Response) or len(first.body) < len(whole_body)
        assert [(answer.status, answer.body == whole_body) for answer in answers if isinstance(answer, Response)] == \
            [(200, True)] * 6
        assert filled.origin.count(name) == 2
        assert stored_url(filled.cdn.node, ZONE, name) is not None


async def test_a_filled_miss_is_counted_and_recorded_as_the_applications(filled: FillCdn) -> None:
    filled.answer("/count-fast.bin", "/count-app.bin")
    conn, plain = await filled.cdn.connect(), await filled.cdn.plain()
    deliveries = filled.cdn.node.deliveries
    totals = []
    for connection, name in ((conn, "/count-fast.bin"), (plain, "/count-app.bin")):
        before = (await plain.request("/metrics", Authorization=METRICS["Authorization"])).body.decode()
        deliveries.counts.clear()
        deliveries.deliveries.close()
        deliveries.deliveries.closed.clear()
        answer = await connection.request(f"/{ZONE}{name}", CF_IPCountry="de")
        assert answer.header("X-Cache") == "MISS"

        async def recorded() -> bool:
            return bool(deliveries.counts)

        await wait_until(recorded, "the delivery recorded")
        after = (await plain.request("/metrics", Authorization=METRICS["Authorization"])).body.decode()
        grown = [_metric(after, *metric) - _metric(before, *metric) for metric in (
            ("assetcdn_requests_total", 'route="/{path}"', 'method="GET"', 'status="200"'),
            ("assetcdn_request_seconds_count", 'route="/{path}"'),
            ("assetcdn_edge_cache_total", 'result="MISS"'),
            ("assetcdn_bytes_served_total", 'process="edge"'))]
        counted = [(key[1], (key[2] or "").removeprefix(f"{ZONE}/"), key[3], key[4], key[5], tuple(value))
                   for key, value in deliveries.counts.items()]
        deliveries.deliveries.close()
        records = [(r[1], r[2].removeprefix(f"{ZONE}/"), r[3], r[4], _text(r[5]) == answer.header("X-Request-ID"), r[6])
                   for r, rate in deliveries.deliveries.closed if rate == 1.0]
        totals.append((grown, [(c[0], c[2], c[3], c[4], c[5]) for c in counted], [r[0:1] + r[2:] for r in records]))
    assert totals[0] == totals[1]
    assert totals[0][1] == [(ZONE, "DE", 200, "MISS", (1, len(BODY)))]
    assert totals[0][2] == [("GET", 200, "MISS", True, "127.0.0.1")]


async def test_the_bytes_of_a_pull_zones_answers_are_counted_on_either_path(filled: FillCdn) -> None:
    """`assetcdn_bytes_served_total` counts a pull zone's body bytes, of a miss and of a hit, whether the hit path
    or the application answers it (as it counts a stored zone's)."""
    filled.answer("/bytes-fast.bin", "/bytes-app.bin")
    conn, plain = await filled.cdn.connect(), await filled.cdn.plain()

    async def served() -> float:
        text = (await plain.request("/metrics", Authorization=METRICS["Authorization"])).body.decode()
        return _metric(text, "assetcdn_bytes_served_total", 'process="edge"')

    grown = []
    for connection, name in ((conn, "/bytes-fast.bin"), (plain, "/bytes-app.bin")):
        for x_cache in ("MISS", "HIT"):
            before = await served()
            answer = await connection.request(f"/{ZONE}{name}")
            assert (answer.header("X-Cache"), answer.body) == (x_cache, BODY)
            for _ in range(20):  # a fill's body is counted once it left: after its answer, within a moment
                if await served() != before:
                    break
                await asyncio.sleep(0.05)
            grown.append(await served() - before)
    assert grown == [len(BODY)] * 4


async def test_an_answer_not_written_here_is_the_applications_with_one_origin_request(filled: FillCdn) -> None:
    filled.origin.answer("/gone-fast.bin", b"not here", status=404, headers={"Content-Type": "text/plain"})
    filled.origin.answer("/gone-app.bin", b"not here", status=404, headers={"Content-Type": "text/plain"})
    conn, plain = await filled.cdn.connect(), await filled.cdn.plain()
    fast, app = await conn.request(f"/{ZONE}/gone-fast.bin"), await plain.request(f"/{ZONE}/gone-app.bin")
    assert comparable(fast) == comparable(app)
    assert (fast.status, fast.body) == (404, b"not here")
    assert (filled.origin.count("/gone-fast.bin"), filled.origin.count("/gone-app.bin")) == (1, 1)
    # The connection goes on with the hit path after the application's answer.
    filled.answer("/after-gone.bin")
    assert (await conn.request(f"/{ZONE}/after-gone.bin")).body == BODY


async def test_an_answer_not_written_here_is_logged_with_the_time_its_client_waited_for_the_origin(
        patient_filled: FillCdn, tmp_path: Path) -> None:
    """The access log's `duration_ms` of an origin answer the hit path fetched and handed to the application
    (a 404, slow to come) counts the wait for the origin, as the application's own fill of it does: not only the
    moment the application took to answer with what was fetched."""
    filled = patient_filled  # its origin's 0.3 s left `filled`'s 1 s first byte too little room on a loaded machine
    async def late(_request: web.Request) -> web.StreamResponse:
        await asyncio.sleep(0.3)
        return web.Response(status=404, text="not here")

    filled.origin.route("/slow-404-fast.bin", late)
    filled.origin.route("/slow-404-app.bin", late)
    deliveries = filled.cdn.node.deliveries
    deliveries.access = access = AccessLog("file", "edge-f/0", directory=tmp_path)
    try:
        conn, plain = await filled.cdn.connect(), await filled.cdn.plain()
        for connection, name in ((conn, "/slow-404-fast.bin"), (plain, "/slow-404-app.bin")):
            assert (await connection.request(f"/{ZONE}{name}")).status == 404
        lines: list[dict[str, Any]] = []

        async def logged() -> bool:  # (another test's delivery may be recorded meanwhile: only these two count)
            await access.flush()
            if access.path is None or not access.path.exists():
                return False
            lines[:] = [line for line in map(orjson.loads, access.path.read_bytes().splitlines())
                        if "/slow-404-" in line["path"]]
            return len(lines) == 2

        await wait_until(logged, "both answers in the access log")
    finally:
        deliveries.access = None
        access.close()
    assert sorted((line["path"], line["status"], line["duration_ms"] >= 300) for line in lines) == [
        (f"/{ZONE}/slow-404-app.bin", 404, True), (f"/{ZONE}/slow-404-fast.bin", 404, True)]


async def test_pipelined_misses_are_answered_in_order_and_a_closing_one_closes(filled: FillCdn) -> None:
    names = [f"/pipe-{i}.bin" for i in range(3)]
    for i, name in enumerate(names):
        filled.origin.answer(name, BODY + bytes([i]), headers=HEADERS)
    conn = await filled.cdn.connect()
    await conn.send(b"".join(request_bytes(f"/{ZONE}{name}") for name in names[:2])
                    + request_bytes(f"/{ZONE}{names[2]}", Connection="close"))
    answers = [await conn.response() for _ in names]
    assert [a.body for a in answers] == [BODY + bytes([i]) for i in range(3)]
    assert answers[2].header("Connection") == "close"
    assert await conn.closed_by_server()


async def test_a_chunked_uploads_trailer_fields_never_reach_the_miss_pipelined_behind_it(filled: FillCdn) -> None:
    """A chunked body gives the connection to the application, whose parser added the body's last trailer field to
    the next request it read: the miss pipelined behind the upload reached the origin with the uploader's field. The
    upload's answer closes the connection instead, and the miss is asked again on a new one."""
    filled.origin.answer("/trailer-upload", b"taken", status=201)
    filled.answer("/behind-trailer.bin")
    conn = await filled.cdn.connect()
    await conn.send(f"POST /{ZONE}/trailer-upload HTTP/1.1\r\nHost: edge.test\r\nTransfer-Encoding: chunked\r\n\r\n"
                    "4\r\ndata\r\n0\r\nX-Smuggled: yes\r\n\r\n".encode() + request_bytes(f"/{ZONE}/behind-trailer.bin"))
    upload = await conn.response()
    assert (upload.status, upload.body, upload.header("Connection")) == (201, b"taken", "close")
    assert await conn.closed_by_server()
    conn = await filled.cdn.connect()
    again = await conn.request(f"/{ZONE}/behind-trailer.bin")
    assert (again.status, again.body) == (200, BODY)
    conn.close()
    assert [seen.body for seen in filled.origin.requests("/trailer-upload")] == [b"data"]
    assert [seen.headers.get("X-Smuggled") for seen in filled.origin.requests("/behind-trailer.bin")] == [None]


async def test_a_request_waiting_for_a_fill_made_here_gets_it_from_the_cache_past_the_first_byte_time(
        filled: FillCdn) -> None:
    """The origin sends its head at once and the rest of the body later than the first-byte timeout: a request
    arriving meanwhile (on the application's port) waits for the body to be stored, then is answered from it,
    with no origin request of its own and no 504."""
    async def slow_body(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers=HEADERS)
        response.content_length = len(BODY)
        await response.prepare(request)
        await response.write(BODY[:100])
        await asyncio.sleep(FIRST_BYTE_TIMEOUT_S * 2)  # an origin slow to send the rest
        await response.write(BODY[100:])
        return response

    filled.origin.route("/slow-body.bin", slow_body)
    conn, plain = await filled.cdn.connect(), await filled.cdn.plain()
    first = asyncio.create_task(conn.request(f"/{ZONE}/slow-body.bin"))

    async def fetching() -> bool:
        return filled.origin.count("/slow-body.bin") == 1

    await wait_until(fetching, "the fill under way")
    second = await plain.request(f"/{ZONE}/slow-body.bin")
    answer = await first
    assert (answer.status, answer.header("X-Cache"), answer.body) == (200, "MISS", BODY)
    assert (second.status, second.header("X-Cache"), second.body) == (200, "HIT", BODY)
    assert filled.origin.count("/slow-body.bin") == 1


async def test_an_empty_body_and_a_body_after_its_head_are_answered_as_the_application_answers(
        filled: FillCdn) -> None:
    """The head is written with the body's first piece: an empty body still gets its head, and a body the origin
    sends after its head (a separate read) follows the head, the next request on the connection after it."""
    for name in ("/empty-fast.bin", "/empty-app.bin"):
        filled.origin.answer(name, b"", headers=HEADERS)

    async def late_body(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers=HEADERS)
        response.content_length = len(BODY)
        await response.prepare(request)
        await asyncio.sleep(0.05)  # the body in a read of its own, not with the head
        await response.write(BODY)
        return response

    filled.origin.route("/late-fast.bin", late_body)
    filled.origin.route("/late-app.bin", late_body)
    conn, plain = await filled.cdn.connect(), await filled.cdn.plain()
    before = filled.fills.filled
    for suffix in ("empty", "late"):
        fast = await conn.request(f"/{ZONE}/{suffix}-fast.bin")
        app = await plain.request(f"/{ZONE}/{suffix}-app.bin")
        assert fast.header("X-Cache") == "MISS" and comparable(fast) == comparable(app)
    assert filled.fills.filled == before + 2
    filled.answer("/after-empty.bin")
    assert (await conn.request(f"/{ZONE}/after-empty.bin")).body == BODY


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def two_workers(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[FillCdn]:
    async with pull_zone_on_hit_cdn(tmp_path_factory.mktemp("pull-fills-shielded"), ZONE, workers=2,
                                    ASSETCDN_ANALYTICS_FLUSH_INTERVAL_S="3600", sibling_shield=True) as (cdn, origin):
        yield FillCdn(cdn, origin)


def shielded_by_the_other_worker(cdn: HitCdn, count: int) -> list[str]:
    """Paths whose shield is not the hit site's worker (`two_workers`: the other one, the configured shield)."""
    shields = cdn.node.shields
    names = (f"/shielded-{i}.bin" for i in itertools.count())
    return list(itertools.islice(
        (name for name in names if shields.shield_for(pull_path_tag(ZONE, name)) is not None), count))


async def test_a_fill_through_the_other_workers_shield_is_filled_here_with_this_edges_request_id(
        two_workers: FillCdn) -> None:
    """The shield (another worker of the same edge) answers with its own X-Request-ID: the client gets this
    edge's, the one its delivery is recorded with, from the hit path's fill as from the application's."""
    fast_name, app_name = shielded_by_the_other_worker(two_workers.cdn, 2)
    two_workers.answer(fast_name, app_name)
    conn, plain = await two_workers.cdn.connect(), await two_workers.cdn.plain()
    deliveries = two_workers.cdn.node.deliveries
    deliveries.deliveries.close()
    deliveries.deliveries.closed.clear()
    before = two_workers.fills.filled
    fast, app = await conn.request(f"/{ZONE}{fast_name}"), await plain.request(f"/{ZONE}{app_name}")
    paths = {f"{ZONE}{fast_name}", f"{ZONE}{app_name}"}

    async def both_recorded() -> bool:
        return paths <= {key[2] for key in deliveries.counts}

    await wait_until(both_recorded, "both deliveries recorded")
    assert two_workers.fills.filled == before + 1
    assert fast.header("X-Cache") == "MISS" and fast.body == BODY
    assert comparable(fast) == comparable(app)
    assert fast.headers.getall("Cache-Status")[0].startswith(SHIELD_CACHE)  # the other worker answered the fill
    assert [two_workers.origin.count(name) for name in (fast_name, app_name)] == [1, 1]
    deliveries.deliveries.close()
    recorded = {r[2]: _text(r[5]) for r, rate in deliveries.deliveries.closed if rate == 1.0}
    assert (fast.header("X-Request-ID"), app.header("X-Request-ID")) == (recorded[f"{ZONE}{fast_name}"],
                                                                       recorded[f"{ZONE}{app_name}"])
    # Stored without the shield's id in the way: the next request is the hit path's own hit.
    hits = two_workers.cdn.site.hits
    assert hits is not None
    served = hits.served
    again = await conn.request(f"/{ZONE}{fast_name}")
    assert (again.header("X-Cache"), again.body, hits.served) == ("HIT", BODY, served + 1)


async def test_a_copy_revalidated_through_the_other_workers_shield_names_the_shield_once(two_workers: FillCdn) -> None:
    """The workers share the disk tier, so the shield revalidates the copy the asking worker stored, with the
    shield's member of that worker's earlier exchange in its head: the shield's 304 names the shield once, and the
    copy's head stays as it is however often it is revalidated, not one Cache-Status member longer each time."""
    name = shielded_by_the_other_worker(two_workers.cdn, 3)[-1]

    async def answer(request: web.Request) -> web.StreamResponse:
        if request.headers.get("If-None-Match") == '"v1"':
            return web.Response(status=304, headers={"ETag": '"v1"'})
        return web.Response(body=BODY, headers={**HEADERS, "Cache-Control": "no-cache"})

    two_workers.origin.route(name, answer)
    plain = await two_workers.cdn.plain()
    answers = [await plain.request(f"/{ZONE}{name}") for _ in range(4)]
    plain.close()
    assert [(a.status, a.header("X-Cache"), a.body) for a in answers] == \
        [(200, "MISS", BODY)] + [(200, "REVALIDATED", BODY)] * 3
    assert [a.headers.getall("Cache-Status") for a in answers[1:]] == \
        [[f"{SHIELD_CACHE}; fwd=stale; fwd-status=304", "assetcdn; fwd=stale; fwd-status=304"]] * 3
    assert two_workers.origin.count(name) == 4


async def test_fills_of_equal_and_different_urls_on_several_connections_at_once_each_get_their_own_answer(
        filled: FillCdn) -> None:
    """One claim at a time for the whole hit server (`PullFills.claimed`): connections filling at once, some the
    same URL, each get the answer for the URL they asked, with one origin request per URL."""
    names = [f"/together-{i}.bin" for i in range(3)]
    for i, name in enumerate(names):
        filled.origin.answer(name, BODY + bytes([i]), headers=HEADERS)
    asked = [names[i % len(names)] for i in range(9)]
    connections = [await filled.cdn.connect() for _ in asked]
    for conn, name in zip(connections, asked, strict=True):  # every head sent before any answer is read
        await conn.send(request_bytes(f"/{ZONE}{name}"))
    answers = await asyncio.gather(*(conn.response() for conn in connections))
    assert [(a.status, a.body) for a in answers] == [(200, BODY + bytes([names.index(n)])) for n in asked]
    assert [filled.origin.count(name) for name in names] == [1, 1, 1]
    for conn in connections:
        conn.close()


@pytest.mark.parametrize("path", ["hit", "application"])
async def test_a_fill_reads_the_origins_caching_directives_once(filled: FillCdn, monkeypatch: pytest.MonkeyPatch,
                                                                 path: str) -> None:
    """Whether the answer may be stored and which of its fields are kept come from one reading of its
    Cache-Control, on either path."""
    read: list[object] = []
    real = freshness.response_directives

    def counted(headers: Any) -> Any:
        read.append(headers)
        return real(headers)

    monkeypatch.setattr(freshness, "response_directives", counted)
    monkeypatch.setattr(pull_states, "response_directives", counted, raising=False)
    name = f"/directives-{path}.bin"
    filled.answer(name)
    conn = await (filled.cdn.connect() if path == "hit" else filled.cdn.plain())
    assert (await conn.request(f"/{ZONE}{name}")).header("X-Cache") == "MISS"

    async def stored() -> bool:  # the entry itself, not `lookup`, which reads the stored head's directives
        return filled.cdn.node.cache.get(pull_key(ZONE, name, "")) is not None

    await wait_until(stored, "the fill stored")
    conn.close()
    assert len(read) == 1


async def test_a_stored_url_the_hit_path_does_not_answer_goes_to_the_application_without_a_fill_claim(
        filled: FillCdn, monkeypatch: pytest.MonkeyPatch) -> None:
    """A URL the memory tier holds but the hit path does not answer (a Vary'd one) is not claimed as a fill
    only to be looked up again and handed over; a URL it answers is looked up once in the memory tier."""
    filled.answer("/varied.bin", Vary="Accept-Encoding")
    filled.answer("/plain-hit.bin")
    conn = await filled.cdn.connect()
    for name in ("/varied.bin", "/plain-hit.bin"):
        assert (await conn.request(f"/{ZONE}{name}")).header("X-Cache") == "MISS"

        async def stored(name: str = name) -> bool:
            return filled.cdn.node.cache.memory.hit(pull_key(ZONE, name, "")) is not None

        await wait_until(stored, f"{name} stored")
    fills, memory = filled.fills, filled.cdn.node.cache.memory
    claims: list[object] = []
    looked_up: list[str] = []
    claim, hit, get = fills.claim, memory.hit, memory.get

    def claimed(*args: Any) -> bool:
        claims.append(args)
        return claim(*args)

    def found(key: str) -> Any:
        looked_up.append(key)
        return hit(key)

    def read(key: str) -> Any:  # the first answer of a stored URL reads it (its eviction then writes it)
        looked_up.append(key)
        return get(key)

    monkeypatch.setattr(fills, "claim", claimed)
    monkeypatch.setattr(memory, "hit", found)
    monkeypatch.setattr(memory, "get", read)
    varied = await conn.request(f"/{ZONE}/varied.bin")
    assert (varied.header("X-Cache"), varied.body, claims) == ("HIT", BODY, [])
    looked_up.clear()
    answered = await conn.request(f"/{ZONE}/plain-hit.bin")
    assert (answered.header("X-Cache"), answered.body) == ("HIT", BODY)
    assert looked_up == [pull_key(ZONE, "/plain-hit.bin", "")]
    conn.close()


LARGE = bytes(range(256)) * (24 * 1024)  # 6 MB: far more than the socket buffers and the 1 MB kept in memory
SEND_TIMEOUT_S = 1.0


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def slow_readers(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[FillCdn]:
    async with pull_zone_on_hit_cdn(tmp_path_factory.mktemp("pull-fills-slow-readers"), ZONE,
                                    ASSETCDN_TLS_SEND_TIMEOUT_S=str(SEND_TIMEOUT_S),
                                    ASSETCDN_ANALYTICS_FLUSH_INTERVAL_S="3600") as (cdn, origin):
        yield FillCdn(cdn, origin)


@pytest.mark.parametrize("path", ["hit", "application"])
async def test_a_client_that_stops_reading_its_fill_is_cut_off_and_the_fill_completes_into_the_cache(
        slow_readers: FillCdn, path: str) -> None:
    """A client asks for a large miss and reads nothing: the fill still reads the origin's whole body and stores
    it, so the next client gets a HIT, and the origin's connection goes back to the pool (the next fill is sent
    on it); the client that does not read is cut off once it has taken nothing for the send timeout. The hit
    path's fill and the application's (its own port) alike."""
    name, after = f"/stops-reading-{path}.bin", f"/after-stops-reading-{path}.bin"
    origin_peers: dict[str, int] = {}  # the edge's port of the origin connection each was asked on

    def answering(body: bytes) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        async def answer(request: web.Request) -> web.StreamResponse:
            origin_peers[request.path] = request.transport.get_extra_info("peername")[1] if request.transport else 0
            response = web.StreamResponse(headers=HEADERS)
            response.content_length = len(body)
            await response.prepare(request)
            for start in range(0, len(body), 256 * 1024):
                await response.write(body[start:start + 256 * 1024])  # waits while the edge does not read
            await response.write_eof()
            return response
        return answer

    slow_readers.origin.route(name, answering(LARGE))
    slow_readers.origin.route(after, answering(BODY))
    cdn = slow_readers.cdn
    loop = asyncio.get_running_loop()
    idle = await slow_reader(cdn.port if path == "hit" else cdn.plain_port)
    try:
        await loop.sock_sendall(idle, request_bytes(f"/{ZONE}{name}"))

        async def fill_asked() -> bool:
            return slow_readers.origin.count(name) == 1

        await wait_until(fill_asked, "the fill under way")
        # Waits for the fill to be stored (the flight), then answered from the cache.
        again = await (cdn.connect() if path == "hit" else cdn.plain())
        answer = await again.request(f"/{ZONE}{name}")
        assert (answer.status, answer.header("X-Cache"), len(answer.body)) == (200, "HIT", len(LARGE))
        assert answer.body == LARGE
        assert slow_readers.origin.count(name) == 1
        # The large body's origin connection was read to its end and kept: the next fill goes out on it.
        assert (await again.request(f"/{ZONE}{after}")).header("X-Cache") == "MISS"
        again.close()
        assert origin_peers[PREFIX + after] == origin_peers[PREFIX + name]
        # The client that reads nothing is cut off once it has taken nothing for the send timeout (a client that
        # reads again in time is sent the rest): its delivery, a MISS, is recorded then; its answer ends short.
        deliveries = cdn.node.deliveries

        async def cut_off() -> bool:
            return any(key[2] == f"{ZONE}{name}" and key[5] == CacheResult.MISS for key in deliveries.counts)

        await wait_until(cut_off, "the client that reads nothing cut off")
        received = 0
        with contextlib.suppress(ConnectionError):
            while chunk := await asyncio.wait_for(loop.sock_recv(idle, 1024 * 1024), READ_S):
                received += len(chunk)
        assert received < len(LARGE)
    finally:
        idle.close()


@pytest.mark.parametrize("path", ["hit", "application"])
async def test_a_request_waiting_for_a_large_fill_that_reads_nothing_is_cut_off_while_the_fill_goes_on(
        slow_readers: FillCdn, path: str) -> None:
    """A request answered from a large fill under way (assetcdn/edge/states/growing.py) whose client reads none of
    it is cut off after the send timeout, as a fill's own client is, while the origin still holds the rest: its
    delivery is recorded then (a HIT, its answer short), and the fill, which it never paced, completes for its
    own client and the cache. Asked on the hit port (handed to the application) or the application's own."""
    name = f"/growing-stalled-{path}.bin"
    release = slow_readers.origin.hold(name, LARGE, HEADERS, first=len(LARGE) // 2)
    cdn = slow_readers.cdn
    loop = asyncio.get_running_loop()
    leader = await cdn.plain()
    first = asyncio.create_task(leader.request(f"/{ZONE}{name}"))
    idle = await slow_reader(cdn.port if path == "hit" else cdn.plain_port)
    deliveries = cdn.node.deliveries
    try:
        async def fill_asked() -> bool:
            return slow_readers.origin.count(name) == 1

        await wait_until(fill_asked, "the fill under way")
        await loop.sock_sendall(idle, request_bytes(f"/{ZONE}{name}"))

        async def cut_off() -> bool:
            return any(key[2] == f"{ZONE}{name}" and key[5] == CacheResult.HIT for key in deliveries.counts)

        await wait_until(cut_off, "the waiting request that reads nothing cut off")
        assert not release.is_set() and not first.done()
        received = 0
        with contextlib.suppress(ConnectionError):
            while chunk := await asyncio.wait_for(loop.sock_recv(idle, 1024 * 1024), READ_S):
                received += len(chunk)
        assert 0 < received < len(LARGE)
        release.set()
        answered = await first
        assert (answered.status, answered.header("X-Cache"), answered.body == LARGE) == (200, "MISS", True)
    finally:
        release.set()
        idle.close()
        leader.close()
    assert slow_readers.origin.count(name) == 1

    async def stored() -> bool:  # its client may have had the last bytes before they were stored
        return stored_url(cdn.node, ZONE, name) is not None

    await wait_until(stored, "the fill stored")

    async def recorded() -> bool:  # the first client's delivery too, which its handler records after its last byte:
        # recorded later, it would count among the next test's bytes served
        return any(key[2] == f"{ZONE}{name}" and key[5] == CacheResult.MISS for key in deliveries.counts)

    await wait_until(recorded, "the first client's delivery recorded")


@pytest.mark.parametrize("answered", ["hit path fill", "application fill", "stored copy"])
async def test_an_answer_cut_short_counts_the_bytes_it_sent_as_served(slow_readers: FillCdn, answered: str) -> None:
    """`assetcdn_bytes_served_total` of a client cut off before its whole body: the bytes that left the edge, as its
    delivery is recorded with (the statistics' bytes), not those written to a connection that was then dropped with
    them: a fill's on the hit path or the application's, and a large stored copy the application sends."""
    name = f"/cut-short-{answered.replace(' ', '-')}.bin"
    slow_readers.origin.answer(name, LARGE, headers=HEADERS)
    cdn = slow_readers.cdn
    plain = await cdn.plain()
    deliveries = cdn.node.deliveries

    async def recorded() -> bool:
        return any(key[2] == f"{ZONE}{name}" for key in deliveries.counts)

    if answered == "stored copy":  # stored whole first (on disk: the application's to send)
        assert len((await plain.request(f"/{ZONE}{name}")).body) == len(LARGE)
        await wait_until(recorded, "the first delivery recorded")
    deliveries.counts.clear()

    async def served() -> float:
        text = (await plain.request("/metrics", Authorization=METRICS["Authorization"])).body.decode()
        return _metric(text, "assetcdn_bytes_served_total", 'process="edge"')

    before = await served()
    loop = asyncio.get_running_loop()
    idle = await slow_reader(cdn.port if answered == "hit path fill" else cdn.plain_port)
    try:
        await loop.sock_sendall(idle, request_bytes(f"/{ZONE}{name}"))
        await wait_until(recorded, "the client that reads nothing cut off")  # recorded then: it reads nothing
    finally:
        idle.close()
    (sent,) = [value[1] for key, value in deliveries.counts.items() if key[2] == f"{ZONE}{name}"]
    assert 0 < sent < len(LARGE)
    assert await served() - before == sent


async def test_a_client_that_resets_an_answer_written_whole_is_recorded_with_what_left_the_edge(
        slow_readers: FillCdn) -> None:
    """On a connection the application holds alone (an edge with `fast_hits = false`; here its plain site), an answer
    written to the connection in one piece (a 6 MB body held in memory: a stored file just fetched from control) whose
    client reads a little and resets the connection is recorded with what had left the edge, not whole: the
    connection's buffer, dropped with it, held the rest. The statistics' bytes and `assetcdn_bytes_served_total` count
    it so."""
    name = f"{STORED_ZONE}/v1/banners/reset-whole.bin"
    cdn = slow_readers.cdn
    await cdn.upload(name, LARGE)
    deliveries = cdn.node.deliveries
    await read_then_reset(cdn.plain_port, request_bytes(f"/{name}"), 64 * 1024, READ_S)  # read a little, then reset

    async def recorded() -> bool:
        return any(key[2] == name for key in deliveries.counts)

    await wait_until(recorded, "the delivery recorded")
    (sent,) = [value[1] for key, value in deliveries.counts.items() if key[2] == name]
    assert sent < len(LARGE)


async def test_a_chunked_answer_its_client_leaves_unread_is_logged_aborted_on_a_connection_the_application_holds(
        slow_readers: FillCdn, tmp_path: Path) -> None:
    """On a connection the application holds alone (`fast_hits = false`; here its plain site), a chunked pull zone
    answer (no declared length) whose client reads nothing and is cut off is logged aborted, with what had left the
    edge. Before, it was logged as whole: every byte written, the ones dropped with the connection too."""
    name = "/chunked-unread.bin"

    async def chunked(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers=HEADERS)  # no length: chunked
        await response.prepare(request)
        for start in range(0, len(LARGE), 256 * 1024):
            await response.write(LARGE[start:start + 256 * 1024])  # waits while the edge does not read
        await response.write_eof()
        return response

    slow_readers.origin.route(name, chunked)
    deliveries = slow_readers.cdn.node.deliveries
    deliveries.access = access = AccessLog("file", "edge-f/0", directory=tmp_path)
    loop = asyncio.get_running_loop()
    idle = await slow_reader(slow_readers.cdn.plain_port)
    lines: list[dict[str, Any]] = []
    try:
        await loop.sock_sendall(idle, request_bytes(f"/{ZONE}{name}"))

        async def logged() -> bool:  # once it is cut off: it reads nothing
            await access.flush()
            if access.path is None or not access.path.exists():
                return False
            lines[:] = [line for line in map(orjson.loads, access.path.read_bytes().splitlines())
                        if line["path"] == f"/{ZONE}{name}"]
            return bool(lines)

        await wait_until(logged, "the answer in the access log")
    finally:
        idle.close()
        deliveries.access = None
        access.close()
    assert [(line["status"], line["aborted"], line["bytes"] < len(LARGE)) for line in lines] == [(200, True, True)]


async def test_a_client_that_resets_a_streamed_file_is_counted_with_the_status_it_got_and_logs_no_error(
        slow_readers: FillCdn, caplog: pytest.LogCaptureFixture) -> None:
    """A stored file the application streams from its cache file (here on the plain site: an edge with `fast_hits =
    false`, or any edge while control is unreachable) whose client resets the connection mid-body: counted in
    `assetcdn_requests_total` with the 200 it got, as the delivery log records it, and no error logged. Before, the
    write that found the connection gone failed the handler: a 500 in the metrics for a client that left, and two
    error tracebacks (the envelope's and aiohttp's) per download a client cancels."""
    name = f"{STORED_ZONE}/v1/banners/reset-streamed.bin"
    cdn = slow_readers.cdn
    await cdn.upload(name, LARGE)
    plain = await cdn.plain()
    assert len((await plain.request(f"/{name}")).body) == len(LARGE)  # fetched: on disk only from now on
    deliveries = cdn.node.deliveries

    async def recorded(count: int) -> bool:
        return sum(value[0] for key, value in deliveries.counts.items() if key[2] == name) == count

    await wait_until(partial(recorded, 1), "the first delivery recorded")

    async def counted() -> dict[str, float]:
        text = (await plain.request("/metrics", Authorization=METRICS["Authorization"])).body.decode()
        return {status: _metric(text, "assetcdn_requests_total", 'route="/{path}"', f'status="{status}"')
                for status in ("200", "500")}

    before = await counted()
    caplog.clear()
    await read_then_reset(cdn.plain_port, request_bytes(f"/{name}"), 64 * 1024, READ_S)  # read a little, then reset
    await wait_until(partial(recorded, 2), "the reset delivery recorded")
    after = await counted()
    assert {status: after[status] - before[status] for status in after} == {"200": 1, "500": 0}
    assert [record.getMessage() for record in caplog.records if record.levelno >= logging.ERROR] == []


@pytest.mark.parametrize("answer", ["404", "no-store", "failure"])
async def test_a_client_gone_before_the_origins_head_is_counted_as_the_application_counts_it(
        patient_filled: FillCdn, answer: str) -> None:
    """A miss whose client resets its connection while the origin is asked, and whose origin then answers with what
    the hit path does not write (a 404, an answer that may not be stored) or fails: counted once whichever path filled
    it, as the application counts it (the request with the status it would have had, its cache result, its delivery
    with no byte sent). The hit path's fill counted it nowhere: no request, no cache result, no delivery."""
    filled = patient_filled  # its origin holds the head until the client is gone
    counted = []
    deliveries = filled.cdn.node.deliveries
    for path in ("hit", "application"):
        name = f"/gone-before-head-{answer}-{path}.bin"
        release = asyncio.Event()

        async def late(request: web.Request, release: asyncio.Event = release) -> web.StreamResponse:
            await release.wait()
            if answer == "failure":
                assert request.transport is not None
                request.transport.abort()  # no answer at all: 502
            return web.Response(status=404 if answer == "404" else 200, body=b"x" * 100,
                                headers={"Content-Type": "text/plain", "Cache-Control": "no-store"})

        filled.origin.route(name, late)
        plain = await filled.cdn.plain()
        before = (await plain.request("/metrics", Authorization=METRICS["Authorization"])).body.decode()
        client = await (filled.cdn.connect() if path == "hit" else filled.cdn.plain())
        await client.send(request_bytes(f"/{ZONE}{name}"))

        async def asked(name: str = name) -> bool:
            return filled.origin.count(name) == 1

        await wait_until(asked, "the origin asked")
        sock = client.writer.transport.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # its close resets
        client.writer.transport.abort()
        release.set()

        async def recorded(name: str = name) -> bool:
            return any(key[2] == f"{ZONE}{name}" for key in deliveries.counts)

        await wait_until(recorded, "the delivery recorded")
        after = (await plain.request("/metrics", Authorization=METRICS["Authorization"])).body.decode()
        grown = {(name, labels): _metric(after, name, *labels) - _metric(before, name, *labels) for name, labels in (
            ("assetcdn_requests_total", ('route="/{path}"', 'status="404"')),
            ("assetcdn_requests_total", ('route="/{path}"', 'status="200"')),
            ("assetcdn_requests_total", ('route="/{path}"', 'status="502"')),
            ("assetcdn_edge_cache_total", ('result="PASS"',)),
            ("assetcdn_edge_cache_total", ('result="MISS"',)))}
        counted.append(([(key[4], key[5], tuple(value)) for key, value in deliveries.counts.items()
                         if key[2] == f"{ZONE}{name}"], {key: value for key, value in grown.items() if value}))
    assert counted[0] == counted[1]
    status = {"404": 404, "no-store": 200, "failure": 502}[answer]
    assert counted[0][0] == [(status, CacheResult.BYPASS, (1, 0))]


UNSAFE_ANSWER = len(LARGE) * 64  # 384 MB, never sent whole


@pytest.mark.parametrize("path", ["hit", "application"])
async def test_a_client_that_stops_reading_an_unsafe_requests_answer_is_cut_off_and_frees_the_origin(
        slow_readers: FillCdn, path: str) -> None:
    """A POST whose large answer its client does not read: the client is cut off once it has taken nothing for
    the send timeout, as a fill's is, and the origin connection is closed. Before, the edge waited for that
    client for ever, holding one of the origin's pooled connections (32 such clients held them all)."""
    name = f"/unsafe-stops-reading-{path}"
    origin_done = asyncio.Event()

    async def answer(request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(headers={"Content-Type": "application/octet-stream"})
        response.content_length = UNSAFE_ANSWER
        await response.prepare(request)
        try:  # more than every buffer on the way holds: written as the edge reads, until it closes
            for _ in range(0, UNSAFE_ANSWER, len(LARGE)):
                await response.write(LARGE)  # waits while the edge does not read
            await response.write_eof()
        finally:
            origin_done.set()  # the whole body taken, or the edge's connection closed
        return response

    slow_readers.origin.route(name, answer)
    cdn = slow_readers.cdn
    loop = asyncio.get_running_loop()
    idle = await slow_reader(cdn.port if path == "hit" else cdn.plain_port)
    try:
        await loop.sock_sendall(idle, request_bytes(f"/{ZONE}{name}", "POST", Content_Length="4") + b"data")
        # Nothing read: the origin's connection is closed once the client has taken nothing for the send timeout.
        await asyncio.wait_for(origin_done.wait(), SEND_TIMEOUT_S + READ_S)
        received = 0
        with contextlib.suppress(ConnectionError):
            while chunk := await asyncio.wait_for(loop.sock_recv(idle, 1024 * 1024), READ_S):
                received += len(chunk)
        assert 0 < received < UNSAFE_ANSWER  # the answer's head and some of its body, then the close
        assert slow_readers.origin.count(name, "POST") == 1
    finally:
        idle.close()


PACED_SEND_TIMEOUT_S = 60.0  # a slow reader is never cut off here
PACED_IDLE_TIMEOUT_S = 60.0  # nor a fill whose origin holds its body back while the test looks at its client
PACED_MAX_OBJECT_MB = 8      # LARGE is kept; OVER_LIMIT is not
OVER_LIMIT = bytes(range(251)) * (40 * 1024)  # 10 MB


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def paced_readers(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[FillCdn]:
    async with pull_zone_on_hit_cdn(tmp_path_factory.mktemp("pull-fills-paced-readers"), ZONE,
                                    ASSETCDN_TLS_SEND_TIMEOUT_S=str(PACED_SEND_TIMEOUT_S),
                                    ASSETCDN_ORIGIN_MAX_OBJECT_MB=str(PACED_MAX_OBJECT_MB),
                                    ASSETCDN_ORIGIN_IDLE_TIMEOUT_S=str(PACED_IDLE_TIMEOUT_S),
                                    ASSETCDN_ANALYTICS_FLUSH_INTERVAL_S="3600") as (cdn, origin):
        yield FillCdn(cdn, origin)


def streaming(body: bytes, *, declared: bool, held: tuple[int, asyncio.Event] | None = None,
              ) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """An origin answer sent in 256 KB writes, of declared length or chunked; `held`: the bytes from its offset on
    are sent once its event is set."""
    async def answer(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers=HEADERS)
        if declared:
            response.content_length = len(body)
        await response.prepare(request)
        for start in range(0, len(body), 256 * 1024):
            if held is not None and start >= held[0]:
                await held[1].wait()
            await response.write(body[start:start + 256 * 1024])
        await response.write_eof()
        return response
    return answer


class SlowReader:
    """A raw connection that reads its answer a few KB at a time (never stopping for long) until `hurry`."""

    def __init__(self, *, slow: bool = True) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if slow:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a small window, set before it opens
        self.sock.setblocking(False)
        self.received = bytearray()
        self.hurried = asyncio.Event()
        if not slow:
            self.hurried.set()
        self.task: asyncio.Task[None] | None = None

    async def ask(self, port: int, target: str) -> None:
        loop = asyncio.get_running_loop()
        await loop.sock_connect(self.sock, ("127.0.0.1", port))
        await loop.sock_sendall(self.sock, request_bytes(target))
        self.task = asyncio.create_task(self._read())

    async def answering(self, origin: ScriptedOrigin, name: str) -> None:
        """Wait until the origin was asked for `name` once and this reader has the first bytes of its answer."""
        async def under_way() -> bool:
            return origin.count(name) == 1 and len(self.received) > 0

        await wait_until(under_way, "the answer under way")

    async def _read(self) -> None:
        loop = asyncio.get_running_loop()
        while not self.whole():
            chunk = await loop.sock_recv(self.sock, 1024 * 1024 if self.hurried.is_set() else 4096)
            if not chunk:
                return
            self.received.extend(chunk)
            if not self.hurried.is_set():
                await asyncio.sleep(0.05)

    def whole(self) -> bool:
        head, found, body = bytes(self.received).partition(b"\r\n\r\n")
        if not found:
            return False
        fields = {name.strip().lower(): value.strip() for name, _, value in
                  (line.partition(b":") for line in head.split(b"\r\n")[1:])}
        if b"content-length" in fields:
            return len(body) >= int(fields[b"content-length"])
        return body.endswith(b"\r\n0\r\n\r\n")

    async def answer(self) -> tuple[bytes, bytes]:
        """Read the rest at once (a window of its own size again): the answer's head and its body (chunks
        joined)."""
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 * 1024 * 1024)
        self.hurried.set()
        assert self.task is not None
        await asyncio.wait_for(self.task, READ_S)
        head, _, body = bytes(self.received).partition(b"\r\n\r\n")
        if b"content-length:" in head.lower():
            return head, body
        decoded = bytearray()
        while True:
            size_line, _, body = body.partition(b"\r\n")
            size = int(size_line.split(b";")[0], 16)
            if not size:
                return head, bytes(decoded)
            decoded += body[:size]
            body = body[size + 2:]

    async def close(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
        self.sock.close()


@pytest.mark.parametrize("declared", [True, False], ids=["length", "chunked"])
@pytest.mark.parametrize("path", ["hit", "application"])
async def test_a_slow_reader_of_a_fill_does_not_hold_the_requests_waiting_for_it_and_gets_its_whole_body(
        paced_readers: FillCdn, path: str, declared: bool) -> None:
    """The first client of a large miss reads a few KB at a time, never stopping for the send timeout: the fill
    still reads the origin's body at the origin's pace and stores it, so a second client for the URL gets a HIT
    while the first is far from done (it waited for the first client's pace before); the first client then gets
    the rest of its whole, exact body from the fill's own copy. One origin request. Both fills' paths alike, and
    a chunked answer (the hit path hands it to the application) as one of declared length."""
    name = f"/paced-{path}-{'length' if declared else 'chunked'}.bin"
    origin = paced_readers.origin
    origin.route(name, streaming(LARGE, declared=declared))
    cdn = paced_readers.cdn
    slow = SlowReader()
    try:
        await slow.ask(cdn.port if path == "hit" else cdn.plain_port, f"/{ZONE}{name}")

        async def fill_asked() -> bool:
            return origin.count(name) == 1

        await wait_until(fill_asked, "the fill under way")
        second = await (cdn.connect() if path == "hit" else cdn.plain())
        answer = await second.request(f"/{ZONE}{name}")
        assert (answer.status, answer.header("X-Cache"), answer.body == LARGE) == (200, "HIT", True)
        second.close()
        assert len(slow.received) < len(LARGE) // 2  # the slow reader is far from done
        head, body = await slow.answer()
        assert head.startswith(b"HTTP/1.1 200 ") and b"X-Cache: MISS" in head
        assert body == LARGE
        assert origin.count(name) == 1
    finally:
        await slow.close()


@pytest.mark.parametrize(("port", "declared"), [("hit", True), ("hit", False), ("plain", True)],
                         ids=["the hit path's fill", "the application's fill", "aiohttp's own connection"])
async def test_a_lagging_client_that_resets_its_connection_gives_its_place_back_at_once(
        paced_readers: FillCdn, monkeypatch: pytest.MonkeyPatch, port: str, declared: bool) -> None:
    """A large miss's first client reads too slowly and lags behind the fill, takes what it was queued, and resets
    its connection while the origin holds the rest of the body: its place among the worker's lagging clients comes
    back at once (it was held until the fill's end, so that clients starting large fills and leaving could hold
    them all), with the origin sending nothing more; the fill then reads on and stores the body. The hit path's fill
    (declared length), the application's (chunked, handed over by the hit path), and aiohttp's own connection."""
    feeds = record_feeds(monkeypatch)
    name = f"/lagging-then-reset-{port}-{'length' if declared else 'chunked'}.bin"
    release = asyncio.Event()
    origin = paced_readers.origin
    origin.route(name, streaming(LARGE, declared=declared, held=(len(LARGE) - 256 * 1024, release)))
    cdn = paced_readers.cdn
    before = ClientFeed.lagging_now
    slow = SlowReader()
    try:
        await slow.ask(cdn.port if port == "hit" else cdn.plain_port, f"/{ZONE}{name}")

        async def lagging() -> bool:
            return bool(feeds) and feeds[-1].lagging

        await wait_until(lagging, "the client lagging behind its fill")
        feed = feeds[-1]
        assert ClientFeed.lagging_now == before + 1
        slow.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 * 1024 * 1024)
        slow.hurried.set()  # it takes what it was queued: its feed waits for the fill

        async def idle() -> bool:
            return waits_for_its_fill(feed)

        await wait_until(idle, "the lagging client sent all it was given")
        slow.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # its close resets
        await slow.close()

        async def place_back() -> bool:
            return ClientFeed.lagging_now == before

        await wait_until(place_back, "the reset client's place back before the origin sends the rest")
        assert (feed.lagging, feed.gone, release.is_set()) == (False, True, False)
    finally:
        release.set()
        await slow.close()

    async def stored() -> bool:
        return stored_url(cdn.node, ZONE, name) is not None

    await wait_until(stored, "the fill stored")
    again = await cdn.connect()
    answer = await again.request(f"/{ZONE}{name}")
    again.close()
    assert (answer.header("X-Cache"), answer.body == LARGE, origin.count(name)) == ("HIT", True, 1)


async def test_a_fill_the_hit_path_hands_to_the_application_still_leads_the_urls_only_origin_request(
        paced_readers: FillCdn) -> None:
    """The hit path asks the origin, and hands an answer it does not write itself (chunked) to the application
    with the request: a second request for the URL while that answer streams waits for it, as for any fill, and
    is answered from the cache (before, the hit path's flight ended at the handover: the second request asked
    the origin itself)."""
    name = "/handed-over-flight.bin"
    body = BODY * 40
    rest = asyncio.Event()  # the origin sends the rest of its body once the second request is in

    async def answer(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers=HEADERS)  # no length: chunked, which the application writes
        await response.prepare(request)
        await response.write(body[:64 * 1024])
        await rest.wait()
        await response.write(body[64 * 1024:])
        await response.write_eof()
        return response

    origin = paced_readers.origin
    origin.route(name, answer)
    cdn = paced_readers.cdn
    first, second = SlowReader(slow=False), SlowReader(slow=False)
    try:
        await first.ask(cdn.port, f"/{ZONE}{name}")
        await first.answering(origin, name)
        await second.ask(cdn.port, f"/{ZONE}{name}")
        # Time for the edge to take the second request in before the fill ends (a second request taken in later
        # gets a HIT whether or not it waited: this only makes the test stronger, never flaky).
        await asyncio.sleep(0.3)
        rest.set()
        (first_head, first_body), (second_head, second_body) = await first.answer(), await second.answer()
        assert (b"X-Cache: MISS" in first_head, first_body == body) == (True, True)
        assert (b"X-Cache: HIT" in second_head, second_body == body) == (True, True)
        assert origin.count(name) == 1
    finally:
        rest.set()
        await first.close()
        await second.close()


async def test_a_slow_reader_of_an_answer_found_over_the_size_limit_gets_it_whole_and_it_is_not_kept(
        paced_readers: FillCdn) -> None:
    """A chunked answer (no declared length: its fill goes at its first client's pace) turns out longer than
    `max_object_mb` while a slow client reads it: the client gets all of it, nothing is kept (the next request
    asks the origin again, and passes its answer on as one declared too large: the worker remembers the URL)."""
    name = "/paced-over-limit.bin"
    origin = paced_readers.origin
    origin.route(name, streaming(OVER_LIMIT, declared=False))
    cdn = paced_readers.cdn
    slow = SlowReader()
    try:
        await slow.ask(cdn.port, f"/{ZONE}{name}")
        await slow.answering(origin, name)
        head, body = await slow.answer()
        assert head.startswith(b"HTTP/1.1 200 ")
        assert body == OVER_LIMIT
        again = SlowReader()  # (a chunked answer: read as the slow one is)
        try:
            await again.ask(cdn.port, f"/{ZONE}{name}")
            head, body = await again.answer()
        finally:
            await again.close()
        assert (b"X-Cache: PASS" in head, body == OVER_LIMIT, origin.count(name)) == (True, True, 2)
    finally:
        await slow.close()


async def test_requests_waiting_for_a_chunked_answer_found_over_the_limit_do_not_wait_for_its_slow_reader(
        paced_readers: FillCdn) -> None:
    """A chunked answer's slow first client lags while the fill reads on at the origin's pace; once the body is
    found longer than `max_object_mb` it is not kept, and a request for the URL meanwhile asks the origin itself
    at once (it waited for the slow reader's whole body before), its answer passed on as one declared too large,
    while the slow reader still gets all of it."""
    name = "/paced-over-limit-waiters.bin"
    origin = paced_readers.origin
    origin.route(name, streaming(OVER_LIMIT, declared=False))
    cdn = paced_readers.cdn
    slow, other = SlowReader(), SlowReader(slow=False)
    try:
        await slow.ask(cdn.port, f"/{ZONE}{name}")
        await slow.answering(origin, name)
        await other.ask(cdn.port, f"/{ZONE}{name}")
        head, body = await other.answer()
        assert (b"X-Cache: PASS" in head, body == OVER_LIMIT, origin.count(name)) == (True, True, 2)
        assert len(slow.received) < len(OVER_LIMIT) // 2  # the slow reader is far from done
        head, body = await slow.answer()
        assert head.startswith(b"HTTP/1.1 200 ") and body == OVER_LIMIT
    finally:
        await slow.close()
        await other.close()


async def test_a_chunked_answer_past_the_limit_whose_client_goes_is_read_no_further(paced_readers: FillCdn) -> None:
    """A chunked answer found longer than `max_object_mb` is not kept; its client gone too (before or after the
    fill finds that), the fill stops reading the origin (before, it read an endless body to its end, fed to no
    one)."""
    name = "/endless-chunked.bin"
    piece = bytes(range(256)) * 1024  # 256 KB
    written = [0]
    stopped = asyncio.Event()

    async def endless(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers=HEADERS)
        await response.prepare(request)
        try:
            while written[0] < 64 * PACED_MAX_OBJECT_MB * 1024 * 1024:  # (a bound for a broken edge: minutes)
                await response.write(piece)
                written[0] += len(piece)
                await asyncio.sleep(0.005)
        finally:
            stopped.set()
        return response

    origin = paced_readers.origin
    origin.route(name, endless)
    slow = SlowReader()
    try:
        await slow.ask(paced_readers.cdn.port, f"/{ZONE}{name}")

        async def under_way() -> bool:
            return written[0] > 1024 * 1024 and len(slow.received) > 0

        await wait_until(under_way, "the answer under way")
    finally:
        await slow.close()  # the client goes

    async def origin_stopped() -> bool:
        return stopped.is_set()

    await wait_until(origin_stopped, "the edge to stop reading the origin")
    assert written[0] < 32 * PACED_MAX_OBJECT_MB * 1024 * 1024


async def other_traffic(cdn: FillCdn) -> None:
    """A request for another URL on this worker (its look-up takes in the purges the worker has not seen yet)."""
    cdn.answer("/other-traffic.bin")
    conn = await cdn.cdn.plain()
    assert (await conn.request(f"/{ZONE}/other-traffic.bin")).status == 200
    conn.close()


BIG = bytes(range(256)) * (8 * 1024)  # 2 MB: past the 1 MB a fill keeps in memory, stored from a file


@pytest.mark.parametrize("path", ["hit", "application"])
async def test_a_request_waiting_for_a_large_fill_made_on_either_path_is_sent_what_it_has(
        patient_filled: FillCdn, path: str) -> None:
    """The first request's fill (on the hit path, or the application's) reads the first 1.5 MB of a 2 MB body and
    the origin holds the rest: a request for the URL on the hit port (handed to the application, which waits for
    the fill) is sent the head and those bytes meanwhile (assetcdn/edge/states/growing.py), then the rest."""
    name = f"/growing-{path}.bin"
    held = len(BIG) * 3 // 4
    release = patient_filled.origin.hold(name, BIG, HEADERS, first=held)
    conn = await (patient_filled.cdn.connect() if path == "hit" else patient_filled.cdn.plain())
    first = asyncio.create_task(conn.request(f"/{ZONE}{name}"))

    async def fill_asked() -> bool:
        return patient_filled.origin.count(name) == 1

    try:
        await wait_until(fill_asked, "the fill under way")
        async with aiohttp.ClientSession() as http:
            async with http.get(f"http://127.0.0.1:{patient_filled.cdn.port}/{ZONE}{name}") as waiter:
                assert (waiter.status, waiter.headers["X-Cache"]) == (200, "HIT")
                assert await asyncio.wait_for(waiter.content.readexactly(held), 30) == BIG[:held]
                release.set()
                assert await waiter.read() == BIG[held:]
        answer_ = await first
        assert (answer_.status, answer_.header("X-Cache"), answer_.body) == (200, "MISS", BIG)
    finally:
        release.set()
        conn.close()
    assert patient_filled.origin.count(name) == 1


@pytest.mark.parametrize("body", [BODY, BIG], ids=["small", "large"])
@pytest.mark.parametrize("purged", ["url", "tag"])
@pytest.mark.parametrize("path", ["hit", "application"])
async def test_a_purge_made_while_a_fill_reads_the_origins_body_keeps_that_body_out_of_the_cache(
        filled: FillCdn, path: str, purged: str, body: bytes) -> None:
    """The origin sends its head, then holds its body until a purge naming the URL (by URL or by a tag of the
    answer) is applied: the fill's client gets the whole answer, but it is not stored, so the next request is a
    miss that asks the origin again (which has a new body by then) rather than a hit of the old body."""
    name = f"/purged-while-filling-{path}-{purged}-{len(body)}.bin"
    tag = f"held-{path}-{purged}-{len(body)}"
    release = filled.origin.hold(name, body, {**HEADERS, "Cache-Tag": tag})
    conn = await (filled.cdn.connect() if path == "hit" else filled.cdn.plain())
    first = asyncio.create_task(conn.request(f"/{ZONE}{name}"))

    async def fill_asked() -> bool:
        return filled.origin.count(name) == 1

    await wait_until(fill_asked, "the fill under way")
    await filled.cdn.purge({"urls": [f"/{ZONE}{name}"]} if purged == "url" else {"tags": [tag]})
    await other_traffic(filled)
    filled.origin.answer(name, b"deployed after the purge", headers=HEADERS)
    release.set()
    answer = await first
    assert (answer.status, answer.header("X-Cache"), answer.body) == (200, "MISS", body)
    again = await conn.request(f"/{ZONE}{name}")
    assert (again.status, again.header("X-Cache"), again.body) == (200, "MISS", b"deployed after the purge")
    assert filled.origin.count(name) == 2
    conn.close()


async def test_a_purge_another_worker_makes_while_a_fill_reads_the_origins_body_keeps_it_out_of_the_cache(
        two_workers: FillCdn) -> None:
    """As above, the purge applied by the edge's other worker (sharing the disk tier, not the memory tier)."""
    name = "/purged-by-the-other-worker.bin"
    release = two_workers.origin.hold(name, BODY, HEADERS)
    conn = await two_workers.cdn.plain()
    first = asyncio.create_task(conn.request(f"/{ZONE}{name}"))

    async def fill_asked() -> bool:
        return two_workers.origin.count(name) == 1

    await wait_until(fill_asked, "the fill under way")
    other = two_workers.cdn.siblings[0][NODE].cache
    await asyncio.get_running_loop().run_in_executor(None, other.purge_tags, [pull_path_tag(ZONE, name)])
    await other_traffic(two_workers)
    two_workers.origin.answer(name, b"deployed after the purge", headers=HEADERS)
    release.set()
    assert (await first).body == BODY
    again = await conn.request(f"/{ZONE}{name}")
    assert (again.header("X-Cache"), again.body) == ("MISS", b"deployed after the purge")
    assert two_workers.origin.count(name) == 2
    conn.close()


async def test_a_pull_zone_is_answered_on_the_hit_path_while_control_is_unreachable(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    """Control gone: a stored zone's cached files become the application's (STALE), but a pull zone's answers never
    depended on control, in the application as here: its fills and fresh hits stay on the hit path."""
    async with pull_zone_on_hit_cdn(tmp_path_factory.mktemp("pull-without-control"), ZONE,
                                    ASSETCDN_ANALYTICS_FLUSH_INTERVAL_S="3600") as (cdn, origin):
        filled = FillCdn(cdn, origin)
        filled.answer("/without-control.bin")
        hits = cdn.site.hits
        assert hits is not None
        await cdn.control.close()

        async def unreachable() -> bool:
            return cdn.node.hit_status() == "STALE"

        await wait_until(unreachable, "the edge noticing control is gone")
        conn = await cdn.connect()
        fills, served = filled.fills.filled, hits.served
        miss = await conn.request(f"/{ZONE}/without-control.bin")
        hit = await conn.request(f"/{ZONE}/without-control.bin")
        assert (miss.status, miss.header("X-Cache"), miss.body) == (200, "MISS", BODY)
        assert (hit.status, hit.header("X-Cache"), hit.body) == (200, "HIT", BODY)
        assert (filled.fills.filled, hits.served) == (fills + 1, served + 1)
        conn.close()


async def test_a_miss_over_tls_or_http_2_is_filled_on_the_hit_path_as_the_application_fills_it(filled: FillCdn) -> None:
    """The https site's hit server fills a plain miss as the plain site's does, on a TLS connection's HTTP/1.1 and on
    an HTTP/2 stream: the application's answer (less the fields a protocol has of its own), the origin told that the
    client came over https, and the answer stored."""
    names = ("/tls-fast.bin", "/h2-fast.bin", "/h2-head-fast.bin", "/secure-app.bin")
    filled.answer(*names)
    assert filled.cdn.site.hits is not None
    secure = HitServer(filled.cdn.app, filled.cdn.site.hits.web_server, secure=True)
    own = PER_REQUEST | {"connection", "keep-alive"}

    def same(response: Response) -> tuple[int, list[tuple[str, str]], bytes]:
        return response.status, sorted((k.lower(), v) for k, v in response.headers.items() if k.lower() not in own), \
            response.body

    try:
        plain = await filled.cdn.plain()
        app = await plain.request(f"/{ZONE}{names[3]}")
        app_head = await plain.request(f"/{ZONE}{names[3]}", "HEAD")
        over_tls = await MemoryHttp11(secure).request(f"/{ZONE}{names[0]}")
        h2 = H2InProcess(secure)
        over_h2 = await h2.get(f"/{ZONE}{names[1]}", [])
        head_h2 = await h2.get(f"/{ZONE}{names[2]}", [], "HEAD")

        async def all_filled() -> bool:  # a HEAD's fill goes on (reading the body to store it) after its answer
            return secure.fills.filled == 3

        await wait_until(all_filled, "the three misses filled on the https site's hit path")
        assert (over_tls.header("X-Cache"), over_h2.headers["x-cache"]) == ("MISS", "MISS")
        assert same(over_tls) == same(over_h2) == same(app)
        assert head_h2.body == b"" and head_h2.headers["content-length"] == str(len(BODY))
        assert same(head_h2)[:2] == same(Response(200, "", app.headers, b""))[:2]
        assert app_head.header("X-Cache") == "HIT"  # the HEAD after the GET, from the cache (fields as a HIT)
        assert [filled.origin.requests(name)[-1].headers["X-Forwarded-Proto"] for name in names] == \
            ["https", "https", "https", "http"]
        # Stored: the next request for each, over HTTP/2, is a hit answered from the stream's fields.
        for name in names[:3]:
            again = await h2.get(f"/{ZONE}{name}", [])
            assert (again.status, again.headers["x-cache"], again.body) == (200, "HIT", BODY)
        assert [filled.origin.count(name) for name in names] == [1, 1, 1, 1]
        # An answer the hit path does not write goes to the application with the request, on either protocol, and
        # the origin is asked once; the TLS connection goes on with the hit path after it.
        gone = ("/gone-tls.bin", "/gone-h2.bin", "/gone-plain.bin")
        for name in gone:
            filled.origin.answer(name, b"not here", status=404, headers={"Content-Type": "text/plain"})
        tls = MemoryHttp11(secure)
        answers = [await tls.request(f"/{ZONE}{gone[0]}"), await h2.get(f"/{ZONE}{gone[1]}", []),
                   await plain.request(f"/{ZONE}{gone[2]}")]
        assert [(a.status, a.body) for a in answers] == [(404, b"not here")] * 3
        assert same(answers[0]) == same(answers[1]) == same(answers[2])
        assert [filled.origin.count(name) for name in gone] == [1, 1, 1]
        filled.answer("/after-gone-tls.bin")
        assert (await tls.request(f"/{ZONE}/after-gone-tls.bin")).body == BODY
    finally:
        secure.stop()


async def test_an_http_2_stream_reset_during_its_fill_leaves_the_fill_to_complete_into_the_cache(
        filled: FillCdn) -> None:
    """A browser that cancels a request (RST_STREAM) while the hit path fills it over HTTP/2: the origin's answer is
    still read and stored, and the connection's next stream gets the stored answer, the origin asked once."""
    name = "/h2-reset.bin"
    body = BODY * 40
    release = filled.origin.hold(name, body, HEADERS, first=100)
    assert filled.cdn.site.hits is not None
    secure = HitServer(filled.cdn.app, filled.cdn.site.hits.web_server, secure=True)
    try:
        h2 = H2InProcess(secure)
        stream_id = h2.client.get_next_available_stream_id()
        h2.answers[stream_id] = [None, bytearray(), False]
        h2.client.send_headers(stream_id, [(b":method", b"GET"), (b":scheme", b"https"),
                                           (b":path", f"/{ZONE}{name}".encode()), (b":authority", b"edge.test")],
                               end_stream=True)

        async def answering() -> bool:  # the head went out with the origin's first bytes
            h2.exchange()
            return h2.answers[stream_id][0] is not None

        await wait_until(answering, "the fill's head on the stream")
        assert secure.fills.started == 1  # on the hit path, not the application's
        h2.client.reset_stream(stream_id)
        h2.exchange()
        release.set()

        async def stored() -> bool:
            return stored_url(filled.cdn.node, ZONE, name, scheme="https") is not None

        await wait_until(stored, "the reset stream's fill stored")
        again = await h2.get(f"/{ZONE}{name}", [])
        assert (again.status, again.headers["x-cache"], again.body) == (200, "HIT", body)
        assert filled.origin.count(name) == 1
    finally:
        secure.stop()


async def test_a_body_the_origin_cuts_short_resets_its_http_2_stream_on_either_path(filled: FillCdn) -> None:
    """Over HTTP/2 a body cut short must not end its stream as if it were whole (END_STREAM): the stream is reset,
    whether the hit path fills the miss or the application does (a request with its own directives), and nothing
    is stored."""
    async def cut(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers=HEADERS)
        response.content_length = 100_000
        await response.prepare(request)
        await response.write(BODY[:1000])
        assert request.transport is not None
        request.transport.close()
        return response

    names = ("/h2-cut-fast.bin", "/h2-cut-app.bin")
    for name in names:
        filled.origin.route(name, cut)
    assert filled.cdn.site.hits is not None
    secure = HitServer(filled.cdn.app, filled.cdn.site.hits.web_server, secure=True)
    try:
        h2 = H2InProcess(secure)
        answers, codes = [], []
        for name, fields in ((names[0], []), (names[1], [("cache-control", "no-cache")])):
            answers.append(await h2.get(f"/{ZONE}{name}", fields, may_reset=True))
            codes.append(h2.resets[h2.last_stream])
        assert secure.fills.started == 1  # the first on the hit path, the second the application's
        assert [(a.status, a.headers.get("content-length")) for a in answers] == [(200, "100000")] * 2
        assert all(len(a.body) < 100_000 for a in answers)
        assert codes == [ErrorCode.INTERNAL_ERROR] * 2
        assert [stored_url(filled.cdn.node, ZONE, name, scheme="https") for name in names] == [None, None]
    finally:
        secure.stop()


async def test_a_tls_connection_reads_on_after_a_fill_that_ended_a_turn_of_pipelined_answers(filled: FillCdn) -> None:
    """Over TLS a turn answers at most TLS_TURN_ANSWERS pipelined requests, reading paused until the next: when the
    next turn's only request is a miss the hit path fills (or hands to the application), the connection reads the
    client's next request once it is answered."""
    filled.answer("/turn-hit.bin", "/turn-miss.bin", "/turn-app.bin")
    assert filled.cdn.site.hits is not None
    secure = HitServer(filled.cdn.app, filled.cdn.site.hits.web_server, secure=True)
    try:
        tls = MemoryHttp11(secure)
        assert (await tls.request(f"/{ZONE}/turn-hit.bin")).header("X-Cache") == "MISS"

        async def stored() -> bool:
            return stored_url(filled.cdn.node, ZONE, "/turn-hit.bin", scheme="https") is not None

        await wait_until(stored, "the first answer stored")
        # The last request of the second turn: a miss the hit path fills, then one it hands to the application
        # (a fragment in the target).
        for last in ("/turn-miss.bin", "/turn-app.bin#part"):
            paths = [f"/{ZONE}/turn-hit.bin"] * TLS_TURN_ANSWERS + [f"/{ZONE}{last}"]
            answers = await tls.pipelined(paths)
            assert [a.header("X-Cache") for a in answers] == ["HIT"] * TLS_TURN_ANSWERS + ["MISS"], last

            async def reading() -> bool:
                return tls.transport.reading

            await wait_until(reading, "the connection reading again")
        assert secure.fills.started == 2  # the turn-hit's first miss, then turn-miss: on the hit path
    finally:
        secure.stop()


async def test_over_tls_a_fill_hands_its_body_to_tls_a_piece_at_a_time(filled: FillCdn) -> None:
    """TLS encrypts at once whatever it is handed, whether the client reads or not: a fill over TLS writes the
    origin's chunks in pieces of at most TLS_PIECE, as the hit path writes a hit's body."""
    big = bytes(range(256)) * 4 * 700  # 700 KB: the origin's chunks are larger than a piece
    filled.origin.answer("/tls-pieces.bin", big, headers=HEADERS)
    assert filled.cdn.site.hits is not None
    secure = HitServer(filled.cdn.app, filled.cdn.site.hits.web_server, secure=True)
    try:
        tls = MemoryHttp11(secure)
        answer = await tls.request(f"/{ZONE}/tls-pieces.bin")
        assert (answer.header("X-Cache"), answer.body == big) == ("MISS", True)
        assert secure.fills.started == 1
        assert max(tls.transport.writes) <= TLS_PIECE + len(answer.raw_head)
    finally:
        secure.stop()


@pytest.mark.parametrize("case", ["fill", "application", "not stored"])
async def test_an_origin_fields_trailing_whitespace_is_no_part_of_its_value_over_http_2(
        filled: FillCdn, case: str) -> None:
    """RFC 9113 8.2.1: an HTTP/2 field value neither starts nor ends with whitespace; a client takes a response
    that has one as malformed. The origin's `X-Trail: value ` reaches clients as `value` on every path."""
    name = f"/trailing-{case.replace(' ', '-')}.txt"
    policy = b"no-store" if case == "not stored" else b"max-age=600"

    async def raw(request: web.Request) -> web.StreamResponse:
        assert request.transport is not None
        request.transport.write(b"HTTP/1.1 200 OK\r\nCache-Control: " + policy + b"\r\nContent-Type: text/plain\r\n"
                                b"X-Trail: value \t\r\nContent-Length: 4\r\n\r\nbody")
        await asyncio.sleep(0.05)
        request.transport.close()
        return web.Response()

    filled.origin.route(name, raw)
    assert filled.cdn.site.hits is not None
    secure = HitServer(filled.cdn.app, filled.cdn.site.hits.web_server, secure=True)
    try:
        h2 = H2InProcess(secure)  # validates what it receives, as h2 clients do
        answer = await h2.get(f"/{ZONE}{name}", [("cache-control", "no-cache")] if case == "application" else [])
        assert (answer.status, answer.body, answer.headers["x-trail"]) == (200, b"body", "value")
        again = await MemoryHttp11(secure).request(f"/{ZONE}{name}")
        assert again.header("X-Trail") == "value" and b"X-Trail: value\r\n" in again.raw_head.replace(b"x-trail", b"X-Trail")
    finally:
        secure.stop()


async def test_an_http_2_hit_a_client_stops_reading_holds_up_no_fill_on_its_connection(filled: FillCdn) -> None:
    """A hit answered from the memory tier is held by reference (it costs no memory): a client that reads none of
    a nearly 1 MB one does not fill the connection's buffer, so a 600 KB fill it asks for next on the same
    connection comes whole at the pace it reads, instead of stopping and being reset at the send timeout."""
    held, filled_next = bytes(range(256)) * 4000, bytes(range(256)) * 2400
    filled.origin.answer("/held-hit.bin", held, headers=HEADERS)
    filled.origin.answer("/after-held.bin", filled_next, headers=HEADERS)
    assert filled.cdn.site.hits is not None
    secure = HitServer(filled.cdn.app, filled.cdn.site.hits.web_server, secure=True)
    try:
        assert (await MemoryHttp11(secure).request(f"/{ZONE}/held-hit.bin")).body == held  # filled: in memory
        h2 = H2InProcess(secure)
        assert (await h2.get(f"/{ZONE}/held-hit.bin", [])).body == held  # a hit from the stream's fields
        stalled = h2.stall(f"/{ZONE}/held-hit.bin")
        for _ in range(5):
            h2.exchange()
        answer = await h2.get(f"/{ZONE}/after-held.bin", [])
        assert (answer.status, answer.headers["x-cache"], answer.body) == (200, "MISS", filled_next)
        assert len(h2.answers[stalled][1]) < len(held)  # still not read, still held
    finally:
        secure.stop()


async def test_requests_waiting_for_a_fill_of_another_vary_variant_ask_for_theirs_at_once(
        patient_filled: FillCdn) -> None:
    """Three requests of other Accept-Encoding variants wait for a fill that is stored (as the gzip variant): it
    is not theirs, and none was given up, so each asks the origin for its own at once, side by side, instead of
    one leading a second flight the others wait behind."""
    filled = patient_filled  # its origin holds each head until every request joined or asked
    name = "/varied-waiters.txt"
    lead_go, all_asked = asyncio.Event(), asyncio.Event()
    side_by_side: list[bool] = []  # each of the first two variants' requests: whether the last came while it waited

    async def varied(request: web.Request) -> web.StreamResponse:
        if filled.origin.count(name) == 1:
            await lead_go.wait()
        elif filled.origin.count(name) == 4:
            all_asked.set()
        else:
            with contextlib.suppress(TimeoutError):  # a waiter held behind another's flight never comes
                await asyncio.wait_for(all_asked.wait(), 5)  # (within the clients' READ_S, tests/support/hit_cdn.py)
            side_by_side.append(all_asked.is_set())
        return web.Response(body=request.headers.get("Accept-Encoding", "").encode(),
                            headers={**HEADERS, "Vary": "Accept-Encoding"})

    filled.origin.route(name, varied)
    target = f"/{ZONE}{name}"
    leader = await filled.cdn.connect()
    led = asyncio.create_task(leader.request(target, Accept_Encoding="gzip"))
    flights = filled.cdn.app[pull_states.FLIGHTS]
    key = flight_key(pull_key(ZONE, name, ""), filled.cdn.node.config.pull_zones[ZONE])

    async def leading() -> bool:
        return filled.origin.count(name) == 1

    await wait_until(leading, "the gzip variant's fill under way")
    conns = [await filled.cdn.plain() for _ in range(3)]
    waiters = [asyncio.create_task(conn.request(target, Accept_Encoding=coding))
               for conn, coding in zip(conns, ("br", "identity", "zstd"), strict=True)]

    async def all_joined() -> bool:
        return flights.joined(key) == 3

    await wait_until(all_joined, "the three other variants waiting for the fill")
    lead_go.set()
    assert (await led).body == b"gzip"
    answers = [await waiter for waiter in waiters]
    assert [(a.status, a.body) for a in answers] == [(200, b"br"), (200, b"identity"), (200, b"zstd")]
    assert side_by_side == [True, True] and filled.origin.count(name) == 4


@pytest.mark.parametrize("leader", ["hit", "application"])
async def test_a_request_waiting_for_another_vary_variants_fill_does_not_wait_for_its_body(
        filled: FillCdn, leader: str) -> None:
    """A gzip client's fill of a Vary: Accept-Encoding URL has its head in and its body still coming (a large or
    slow one): a br client waiting for the URL's flight learns from that head that the answer being kept is
    another variant, and asks the origin for its own at once. It waited for the gzip body to be stored first,
    however long that took (up to the origin's body timeout, 300 s by default), only to find it was not its own."""
    name = f"/varied-slow-{leader}.txt"
    release = asyncio.Event()
    gzip_body = b"g" * 100_000

    async def varied(request: web.Request) -> web.StreamResponse:
        coding = request.headers.get("Accept-Encoding", "")
        headers = {**HEADERS, "Vary": "Accept-Encoding"}
        if coding != "gzip":
            return web.Response(body=coding.encode(), headers=headers)
        response = web.StreamResponse(headers=headers)
        response.content_length = len(gzip_body)
        await response.prepare(request)
        await response.write(gzip_body[:1000])
        await release.wait()
        await response.write(gzip_body[1000:])
        return response

    filled.origin.route(name, varied)
    target = f"/{ZONE}{name}"
    lead_conn = await (filled.cdn.connect() if leader == "hit" else filled.cdn.plain())
    led = asyncio.create_task(lead_conn.request(target, Accept_Encoding="gzip"))
    flights = filled.cdn.app[pull_states.FLIGHTS]
    key = flight_key(pull_key(ZONE, name, ""), filled.cdn.node.config.pull_zones[ZONE])

    async def leading() -> bool:
        return filled.origin.count(name) == 1

    async def joined() -> bool:
        return flights.joined(key) == 1

    await wait_until(leading, "the gzip variant's fill under way")
    waiter = asyncio.create_task((await filled.cdn.plain()).request(target, Accept_Encoding="br"))
    try:
        await wait_until(joined, "the br request waiting for the URL's flight")

        async def answered() -> bool:
            return waiter.done()

        await wait_until(answered, "the br client answered while the gzip body is held")
        answer = waiter.result()
        assert (answer.status, answer.header("X-Cache"), answer.body) == (200, "MISS", b"br")
        assert not led.done() and filled.origin.count(name) == 2
    finally:
        release.set()
    first = await led
    assert (first.status, first.body) == (200, gzip_body)
    again = await (await filled.cdn.plain()).request(target, Accept_Encoding="br")
    assert (again.header("X-Cache"), again.body) == ("HIT", b"br")


def read_answers(data: bytes, count: int) -> list[tuple[int, dict[str, str], bytes]]:
    """The first `count` answers (status, fields with lower-case names, body) of what a connection read to its end,
    framed by their Content-Length or chunks; fewer when fewer came."""
    answers: list[tuple[int, dict[str, str], bytes]] = []
    while len(answers) < count and b"\r\n\r\n" in data:
        head, _, data = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        fields = {name.strip().lower(): value.strip() for name, _, value in (line.partition(":") for line in lines[1:])}
        if fields.get("transfer-encoding") == "chunked":
            body = b""
            while True:
                size_line, _, data = data.partition(b"\r\n")
                size = int(size_line, 16)
                body, data = body + data[:size], data[size + 2:]
                if not size:
                    break
        else:
            length = int(fields.get("content-length", "0"))
            body, data = data[:length], data[length:]
        answers.append((int(lines[0].split(" ")[1]), fields, body))
    return answers


async def test_pipelined_requests_a_client_sent_before_it_half_closed_are_all_answered(filled: FillCdn) -> None:
    """A client that sends its requests and then shuts its side (SHUT_WR) gets every answer, in order, then the
    close: a fill, a chunked fill and an answer the application writes under way when its FIN came no longer end
    the connection with the requests pipelined behind them unanswered."""
    filled.answer("/half-hit.bin", "/half-fill.bin")

    def chunked(cache_control: str) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        async def answer(request: web.Request) -> web.StreamResponse:
            response = web.StreamResponse(headers={**HEADERS, "Cache-Control": cache_control})
            response.enable_chunked_encoding()
            await response.prepare(request)
            await response.write(BODY)
            return response
        return answer

    filled.origin.route("/half-chunked.bin", chunked("max-age=600"))  # kept: filled by the application, chunked
    filled.origin.route("/half-pass.bin", chunked("no-store"))        # not kept: the application relays it
    conn = await filled.cdn.connect()
    assert (await conn.request(f"/{ZONE}/half-hit.bin")).body == BODY
    conn.close()
    names = ["/half-fill.bin", "/half-hit.bin", "/half-chunked.bin", "/half-pass.bin", "/half-hit.bin"]

    def exchange() -> bytes:
        with socket.create_connection(("127.0.0.1", filled.cdn.port)) as sock:
            sock.sendall(b"".join(request_bytes(f"/{ZONE}{name}") for name in names))
            sock.shutdown(socket.SHUT_WR)
            sock.settimeout(READ_S)
            received = b""
            while chunk := sock.recv(65536):
                received += chunk
            return received

    answers = read_answers(await asyncio.to_thread(exchange), len(names) + 1)
    assert [(status, fields["x-cache"], body) for status, fields, body in answers] == [
        (200, "MISS", BODY), (200, "HIT", BODY), (200, "MISS", BODY), (200, "PASS", BODY), (200, "HIT", BODY)]


@pytest.mark.parametrize("upgrade", ["h2c", "websocket"])
async def test_requests_pipelined_behind_one_asking_for_an_upgrade_are_answered(filled: FillCdn, upgrade: str) -> None:
    """A request asking to switch protocols (`Upgrade: h2c`, as `curl --http2` asks on plain http) is answered as any
    other, the edge switching to none (RFC 9110 7.8 lets it ignore the field), and so are the requests pipelined
    behind it: the connection used to go to aiohttp with them, whose parser drops what follows an upgrade it does
    not take, so they were never answered and the client waited for the idle timeout. The origin is asked for no
    upgrade (a hop-by-hop field)."""
    names = [f"/upgrade-{upgrade}-{i}.bin" for i in range(3)]
    filled.answer(*names)
    asking = {"Connection": "Upgrade, HTTP2-Settings", "Upgrade": "h2c", "HTTP2_Settings": "AAMAAABkAARAAAAAAAIAAAAA"} \
        if upgrade == "h2c" else {"Connection": "Upgrade", "Upgrade": "websocket", "Sec_WebSocket_Version": "13",
                                  "Sec_WebSocket_Key": "dGhlIHNhbXBsZSBub25jZQ=="}
    conn = await filled.cdn.connect()
    try:
        await conn.send(request_bytes(f"/{ZONE}{names[0]}", **asking) + request_bytes(f"/{ZONE}{names[1]}")
                        + request_bytes(f"/{ZONE}{names[0]}", **asking) + request_bytes(f"/{ZONE}{names[2]}"))
        answers = [await conn.response() for _ in range(4)]
    finally:
        conn.close()
    assert [(a.status, a.header("X-Cache"), a.body) for a in answers] == [
        (200, "MISS", BODY), (200, "MISS", BODY), (200, "HIT", BODY), (200, "MISS", BODY)]
    assert all(a.header("Upgrade") is None for a in answers)
    seen = filled.origin.requests(names[0])
    assert len(seen) == 1 and "Upgrade" not in seen[0].headers and "HTTP2-Settings" not in seen[0].headers


async def test_a_request_with_a_body_asking_for_an_upgrade_reaches_the_origin_with_its_body(filled: FillCdn) -> None:
    """llhttp ends an upgrade request at its head (its body belongs to the new protocol): a `POST` with a body and
    `Upgrade: h2c` must still go to the application with that body, not be answered as a request of none."""
    name = "/upgrade-post.bin"
    filled.origin.answer(name, b"posted", headers={"Content-Type": "text/plain", "Cache-Control": "no-store"})
    conn = await filled.cdn.connect()
    try:
        await conn.send(request_bytes(f"/{ZONE}{name}", "POST", Content_Length="4", Upgrade="h2c",
                                      Connection="Upgrade, HTTP2-Settings", HTTP2_Settings="AAMAAABkAARAAAAAAAIAAAAA")
                        + b"form")
        answer = await conn.response()
    finally:
        conn.close()
    assert (answer.status, answer.body) == (200, b"posted")
    assert [(seen.method, seen.body) for seen in filled.origin.requests(name)] == [("POST", b"form")]


MORE_FIELDS_THAN_READ = "".join(f"X-Field-{i}: {i}\r\n" for i in range(128))  # with Host, one more than aiohttp reads


@pytest.mark.parametrize("fields", ["User-Agent: a\r\nUser-Agent: b\r\n", "Max-Forwards: 1\r\nMax-Forwards: 1\r\n",
                                    MORE_FIELDS_THAN_READ], ids=["two-user-agents", "two-max-forwards", "129-fields"])
async def test_a_request_head_the_application_refuses_is_refused_on_the_hit_path_too(filled: FillCdn,
                                                                                    fields: str) -> None:
    """The application refuses a head with more than 128 fields, or with a field it reads as a single value
    (User-Agent, Max-Forwards, Content-Type...) twice: 400, the origin never asked. The hit path took such a head
    as sound: it asked the origin for the miss and answered 200 (storing it), and answered the URL's hit, where the
    same request got a 400 wherever the application answers (`fast_hits = false`, a stale copy, a Range...). It
    goes to the application now, over HTTP/1.1 and on an HTTP/2 stream."""
    async def storable(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _n: int) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\n" + KEPT + b"Content-Length: 2\r\n\r\nok")
        await writer.drain()

    assert filled.cdn.site.hits is not None
    secure = HitServer(filled.cdn.app, filled.cdn.site.hits.web_server, secure=True)
    h2_fields = cast(list[tuple[str, str]], [tuple(line.lower().split(": ", 1)) for line in fields.split("\r\n") if line])
    try:
        async with zone_before(filled.cdn, storable) as (zone, origin):
            h2 = H2InProcess(secure)
            for stored in (False, True):
                target = f"/{zone}/refused.bin"
                if stored:  # sound requests store it first (http and https apart): the odd one is then a hit
                    sound = await filled.cdn.connect()
                    assert (await sound.request(target)).header("X-Cache") == "MISS"
                    sound.close()
                    assert [(await h2.get(target, [])).headers["x-cache"] for _ in range(2)] == ["MISS", "HIT"]
                answers = []
                for port in (filled.cdn.port, filled.cdn.plain_port):
                    conn = await RawConnection.open(port)
                    try:
                        await conn.send(f"GET {target} HTTP/1.1\r\nHost: edge.test\r\n{fields}\r\n".encode())
                        answers.append(await conn.response())
                    finally:
                        conn.close()
                answers.append(await h2.get(target, h2_fields))
                assert [answer.status for answer in answers] == [400] * 3, (stored, answers[0].body)
                assert all(orjson.loads(answer.body)["error"]["code"] == "BadRequest" for answer in answers)
                assert origin.requests == 2 * stored
    finally:
        secure.stop()
