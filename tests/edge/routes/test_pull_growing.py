"""Requests that wait for a fill of a large body (over the 1 MB a fill holds in memory: a video, say) are answered as
the fill reads it, not once it is stored (assetcdn/edge/states/growing.py): the head at once, then the bytes the
fill has, whatever the first client takes. The origin here sends the first part of the body and holds the rest
until the test lets it go: what a waiting request gets before then was streamed from the fill under way."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
import pytest_asyncio
from aiohttp import ClientPayloadError, ClientResponse, web

from assetcdn.edge.states.keys import pull_key
from assetcdn.edge.states.pull import FLIGHTS, SPOOL_MEMORY, flight_key
from tests.support.control import METRICS
from tests.support.metrics_text import metric
from tests.support.origins import (
    LONG,
    ZONE,
    Handler,
    Pull,
    held_answer,
    pull_zone_on_hit_cdn,
    shared_pull_zone,
)
from tests.support.wait import wait_until

pytestmark = pytest.mark.asyncio(loop_scope="module")

BIG = bytes(range(256)) * (12 * 1024)  # 3 MB, each byte its offset modulo 256
FIRST = 2 * SPOOL_MEMORY + 1000        # sent before the origin holds the rest: past what the fill holds in memory
# What a waiting request's streamed bytes may take at most; it never waits this long: before the change tested,
# such a request got nothing until the whole body was stored, which the origin holds back until it has them.
STREAMED_S = 30.0


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def pull(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Pull]:
    """A pull zone whose origin may hold a body back for a minute (a loaded machine's test, not the edge's limit)."""
    async with shared_pull_zone(tmp_path_factory.mktemp("growing"), first_byte_timeout_s="30",
                                ASSETCDN_ORIGIN_BODY_TIMEOUT_S="60") as found:
        yield found


def held(go: asyncio.Event, *, cut: bool = False, body: bytes = BIG, first: int = FIRST) -> Handler:
    """An answer of `body`'s declared length, kept for ten minutes: its `first` bytes, then the rest once `go` is set
    (or, `cut`, the connection closed instead)."""
    return held_answer(body, {**LONG, "Content-Type": "video/mp4", "ETag": '"v1"'}, first, go, cut=cut)


async def leading(pull: Pull, name: str, asked_before: int = 0) -> asyncio.Task[bytes | BaseException]:
    """The first request for `name`, read whole in a task, once its fill has asked the origin (which was asked
    `asked_before` times before it)."""
    async def whole() -> bytes | BaseException:
        resp = await pull.cdn.edge.get(f"/{ZONE}{name}")
        try:
            return await resp.read()
        except ClientPayloadError as exc:
            return exc

    task = asyncio.create_task(whole())

    async def asked() -> bool:
        return pull.origin.count(name) == asked_before + 1

    await wait_until(asked, "the first request's origin request")
    return task


async def read_exactly(resp: ClientResponse, size: int) -> bytes:
    return await asyncio.wait_for(resp.content.readexactly(size), STREAMED_S)


async def test_a_request_waiting_for_a_large_fill_gets_its_bytes_as_the_fill_reads_them(pull: Pull) -> None:
    name = "/growing/video.mp4"
    go = asyncio.Event()
    pull.origin.route(name, held(go))
    try:
        first = await leading(pull, name)
        waiter = await asyncio.wait_for(pull.cdn.edge.get(f"/{ZONE}{name}"), STREAMED_S)
        assert waiter.status == 200
        assert waiter.headers["Content-Length"] == str(len(BIG))
        assert waiter.headers["X-Cache"] == "HIT"
        assert waiter.headers["Cache-Status"] == "assetcdn; fwd=uri-miss; collapsed"
        assert waiter.headers["ETag"] == '"v1"'
        # Past the part held in memory: read back from the fill's file while the origin still holds the rest.
        assert await read_exactly(waiter, FIRST) == BIG[:FIRST]
        go.set()
        assert await waiter.read() == BIG[FIRST:]
        assert await first == BIG
    finally:
        go.set()
    assert pull.origin.count(name) == 1
    again = await pull.get(name)  # and it was stored
    assert (again.headers["X-Cache"], await again.read()) == ("HIT", BIG)
    assert pull.origin.count(name) == 1


async def test_ranges_and_heads_waiting_for_a_large_fill_are_answered_from_what_it_has(pull: Pull) -> None:
    name = "/growing/ranges.mp4"
    go = asyncio.Event()
    pull.origin.route(name, held(go))
    flights = pull.cdn.edge.app[FLIGHTS]
    key = flight_key(pull_key(ZONE, name, ""), pull.cdn.node.config.pull_zones[ZONE])
    try:
        first = await leading(pull, name)
        ranges = {"memory": (100, 199), "file": (SPOOL_MEMORY + 5000, SPOOL_MEMORY + 5099),
                  "later": (FIRST + 10, FIRST + 2009)}
        asked = {part: asyncio.create_task(pull.cdn.edge.get(f"/{ZONE}{name}",
                                                             headers={"Range": f"bytes={start}-{end}"}))
                 for part, (start, end) in ranges.items()}
        head = await asyncio.wait_for(pull.cdn.edge.head(f"/{ZONE}{name}"), STREAMED_S)
        assert (head.status, head.headers["Content-Length"], head.headers["X-Cache"]) == (200, str(len(BIG)), "HIT")
        for part in ("memory", "file"):
            resp = await asyncio.wait_for(asked[part], STREAMED_S)
            start, end = ranges[part]
            assert resp.status == 206
            assert resp.headers["Content-Range"] == f"bytes {start}-{end}/{len(BIG)}"
            assert await read_exactly(resp, end + 1 - start) == BIG[start:end + 1]

        async def all_joined() -> bool:  # the HEAD and the three ranges, the last waiting for bytes yet to come
            return flights.joined(key) == 4

        await wait_until(all_joined, "the requests joining the fill")
        go.set()
        later = await asked["later"]
        start, end = ranges["later"]
        assert (later.status, await later.read()) == (206, BIG[start:end + 1])
        assert await first == BIG
    finally:
        go.set()
    assert pull.origin.count(name) == 1


async def test_a_large_fill_the_origin_cuts_short_cuts_its_waiting_requests_short(pull: Pull) -> None:
    """The origin closes its connection mid-body: a request answered from the fill as it was read is cut short too
    (never an answer that looks complete), as the first client's is."""
    name = "/growing/cut.mp4"
    go = asyncio.Event()
    pull.origin.route(name, held(go, cut=True))
    try:
        first = await leading(pull, name)
        waiter = await asyncio.wait_for(pull.cdn.edge.get(f"/{ZONE}{name}"), STREAMED_S)
        assert await read_exactly(waiter, FIRST) == BIG[:FIRST]
        go.set()
        with pytest.raises(ClientPayloadError):
            await waiter.read()
        assert isinstance(await first, ClientPayloadError)
    finally:
        go.set()


async def test_the_requests_a_cut_fill_cuts_short_cost_the_log_one_line_not_one_each(
        pull: Pull, caplog: pytest.LogCaptureFixture) -> None:
    """Many requests answered from a large fill the origin cuts short: each answer is cut, and the log says so once
    (with how many it left out), as the origin's failures are logged, not once per request (thousands under load)."""
    name = "/growing/cut-many.mp4"
    go = asyncio.Event()
    pull.origin.route(name, held(go, cut=True))
    with caplog.at_level(logging.INFO, logger="assetcdn.edge.states.pull"):
        try:
            first = await leading(pull, name)
            waiters = [await asyncio.wait_for(pull.cdn.edge.get(f"/{ZONE}{name}"), STREAMED_S) for _ in range(5)]
            for waiter in waiters:
                assert await read_exactly(waiter, FIRST) == BIG[:FIRST]
            go.set()
            for waiter in waiters:
                with pytest.raises(ClientPayloadError):
                    await waiter.read()
            assert isinstance(await first, ClientPayloadError)
        finally:
            go.set()
    lines = [record for record in caplog.records if "answered from a fill under way" in record.getMessage()]
    assert len(lines) <= 1, [record.getMessage() for record in lines]


async def test_requests_answered_from_a_large_fill_are_counted_as_those_answered_from_what_it_stored(
        pull: Pull) -> None:
    """Each request answered from a fill under way (its whole body, a range, a 304) is a HIT in
    `assetcdn_edge_cache_total` and one `assetcdn_edge_fill_waiters_total` saved the origin, as when answered from
    what the fill stored; the fill's own request is the one MISS."""
    name = "/growing/counted.mp4"
    go = asyncio.Event()
    pull.origin.route(name, held(go))

    async def counts() -> tuple[float, float, float]:
        text = await (await pull.cdn.edge.get("/metrics", headers=METRICS)).text()
        return (metric(text, "assetcdn_edge_cache_total", result="HIT"),
                metric(text, "assetcdn_edge_cache_total", result="MISS"),
                metric(text, "assetcdn_edge_fill_waiters_total"))

    hits, misses, waiters = await counts()
    try:
        first = await leading(pull, name)
        whole = await asyncio.wait_for(pull.cdn.edge.get(f"/{ZONE}{name}"), STREAMED_S)
        ranged = await asyncio.wait_for(pull.cdn.edge.get(f"/{ZONE}{name}", headers={"Range": "bytes=0-99"}),
                                        STREAMED_S)
        matching = await asyncio.wait_for(pull.cdn.edge.get(f"/{ZONE}{name}", headers={"If-None-Match": '"v1"'}),
                                          STREAMED_S)
        assert (ranged.status, await ranged.read(), matching.status) == (206, BIG[:100], 304)
        go.set()
        assert await whole.read() == BIG
        assert await first == BIG
    finally:
        go.set()
    assert await counts() == (hits + 3, misses + 1, waiters + 3)


async def test_a_request_after_a_purge_is_not_answered_from_a_fill_asked_for_before_it(pull: Pull) -> None:
    """A purge published while a large body is read: a request arriving after it is not answered from that fill
    (which the purge keeps out of the cache), but asks the origin again once it is over."""
    name = "/growing/purged.mp4"
    go = asyncio.Event()
    pull.origin.route(name, held(go))
    try:
        first = await leading(pull, name)
        await pull.cdn.purge_urls(f"/{ZONE}{name}")
        later = asyncio.create_task(pull.cdn.edge.get(f"/{ZONE}{name}"))
        flights = pull.cdn.edge.app[FLIGHTS]
        key = flight_key(pull_key(ZONE, name, ""), pull.cdn.node.config.pull_zones[ZONE])

        async def joined() -> bool:
            return flights.joined(key) == 1

        await wait_until(joined, "the request after the purge waiting for the fill")
        assert not later.done()
        go.set()
        assert await first == BIG
        resp = await later
        assert (resp.status, resp.headers["X-Cache"], await resp.read()) == (200, "MISS", BIG)
    finally:
        go.set()
    assert pull.origin.count(name) == 2


async def test_a_purge_of_another_url_leaves_a_large_fill_under_way_to_the_requests_after_it(pull: Pull) -> None:
    """A purge published while a large body is read that names another URL: a request arriving after it is still
    answered from the fill as it is read (which the purge does not keep out of the cache), not left waiting for the
    whole body stored, as after a purge of the URL itself."""
    name = "/growing/unpurged.mp4"
    go = asyncio.Event()
    pull.origin.route(name, held(go))
    try:
        first = await leading(pull, name)
        await pull.cdn.purge_urls(f"/{ZONE}/growing/another.mp4")
        later = await asyncio.wait_for(pull.cdn.edge.get(f"/{ZONE}{name}"), STREAMED_S)
        assert (later.status, later.headers["X-Cache"]) == (200, "HIT")
        assert await read_exactly(later, FIRST) == BIG[:FIRST]
        go.set()
        assert await later.read() == BIG[FIRST:]
        assert await first == BIG
    finally:
        go.set()
    assert pull.origin.count(name) == 1
    again = await pull.get(name)  # and it was stored, the purge naming another URL
    assert (again.headers["X-Cache"], await again.read()) == ("HIT", BIG)


async def test_a_request_waiting_for_a_fill_within_what_is_held_in_memory_waits_for_it_stored(pull: Pull) -> None:
    """A body of 1 MB or less is soon read: its waiting requests get it once stored, whole (a body the origin fails is
    then their stale copy or one more origin request, tests/edge/routes/test_pull_failed_bodies.py)."""
    name = "/growing/small.bin"
    body = BIG[:SPOOL_MEMORY]
    go = asyncio.Event()
    pull.origin.route(name, held(go, body=body, first=1000))
    flights = pull.cdn.edge.app[FLIGHTS]
    key = flight_key(pull_key(ZONE, name, ""), pull.cdn.node.config.pull_zones[ZONE])
    try:
        first = await leading(pull, name)
        waiter = asyncio.create_task(pull.cdn.edge.get(f"/{ZONE}{name}"))  # done once its head is in

        async def joined() -> bool:
            return flights.joined(key) == 1

        await wait_until(joined, "the second request waiting for the fill")
        await asyncio.sleep(0.2)  # a request answered as the fill reads would have its head by now
        assert not waiter.done()
        go.set()
        assert await first == body
        resp = await waiter
        assert (resp.headers["X-Cache"], resp.headers["Cache-Status"], await resp.read()) == (
            "HIT", "assetcdn; fwd=uri-miss; collapsed", body)
    finally:
        go.set()
    assert pull.origin.count(name) == 1


def varied(go: asyncio.Event) -> Handler:
    """`held`'s answer, of a body per Accept-Language (Vary), the English one held back until `go` is set."""
    async def answer(request: web.Request) -> web.StreamResponse:
        language = request.headers.get("Accept-Language", "en")
        body = BIG if language == "en" else BIG[::-1]
        response = web.StreamResponse(headers={**LONG, "Content-Type": "video/mp4", "Vary": "Accept-Language",
                                               "ETag": f'"{language}"'})
        response.content_length = len(body)
        await response.prepare(request)
        await response.write(body[:FIRST])
        if language == "en":
            await go.wait()
        await response.write(body[FIRST:])
        return response

    return answer


async def test_a_request_for_another_variant_is_not_sent_the_body_being_read(pull: Pull) -> None:
    """The fill under way varies by Accept-Language (the first request sent none): a request that sends none either is
    sent its body as it is read, one that asks for French asks the origin for its own at once, never streamed the
    first one's."""
    name = "/growing/varied.mp4"
    go = asyncio.Event()
    pull.origin.route(name, varied(go))
    try:
        first = await leading(pull, name)
        same = await asyncio.wait_for(pull.cdn.edge.get(f"/{ZONE}{name}"), STREAMED_S)  # no Accept-Language either
        assert (same.headers["X-Cache"], same.headers["ETag"]) == ("HIT", '"en"')
        assert await read_exactly(same, FIRST) == BIG[:FIRST]
        other = await asyncio.wait_for(pull.cdn.edge.get(f"/{ZONE}{name}", headers={"Accept-Language": "fr"}),
                                       STREAMED_S)
        assert (other.status, other.headers["X-Cache"], other.headers["ETag"]) == (200, "MISS", '"fr"')
        assert await asyncio.wait_for(other.read(), STREAMED_S) == BIG[::-1]
        go.set()
        assert await same.read() == BIG[FIRST:]
        assert await first == BIG
    finally:
        go.set()
    assert pull.origin.count(name) == 2


async def test_conditions_on_a_large_fill_under_way_are_answered_from_its_head(pull: Pull) -> None:
    """If-None-Match is answered 304 at once, If-Range with the fill's ETag gets its range, with another the whole
    body: as from the stored copy, before the fill is over."""
    name = "/growing/conditions.mp4"
    go = asyncio.Event()
    pull.origin.route(name, held(go))
    try:
        first = await leading(pull, name)
        matching = await asyncio.wait_for(pull.cdn.edge.get(f"/{ZONE}{name}", headers={"If-None-Match": '"v1"'}),
                                          STREAMED_S)
        assert (matching.status, matching.headers["ETag"], matching.headers["X-Cache"]) == (304, '"v1"', "HIT")
        ranged = await asyncio.wait_for(pull.cdn.edge.get(
            f"/{ZONE}{name}", headers={"Range": "bytes=1000-1999", "If-Range": '"v1"'}), STREAMED_S)
        assert (ranged.status, await ranged.read()) == (206, BIG[1000:2000])
        changed = await asyncio.wait_for(pull.cdn.edge.get(
            f"/{ZONE}{name}", headers={"Range": "bytes=1000-1999", "If-Range": '"v0"'}), STREAMED_S)
        assert (changed.status, changed.headers["Content-Length"]) == (200, str(len(BIG)))
        assert await read_exactly(changed, FIRST) == BIG[:FIRST]
        go.set()
        assert await changed.read() == BIG[FIRST:]
        assert await first == BIG
    finally:
        go.set()
    assert pull.origin.count(name) == 1


async def test_a_request_holding_a_stale_copy_is_sent_the_new_body_its_revalidation_reads(pull: Pull) -> None:
    """The stored copy is stale; its revalidation gets a new, large body: a request waiting for that revalidation is
    sent the new body as it is read, not the copy it held."""
    name = "/growing/revalidated.mp4"
    old = b"old" * 1000

    async def stale(request: web.Request) -> web.StreamResponse:
        return web.Response(body=old, headers={"Cache-Control": "max-age=0", "ETag": '"v0"',
                                               "Content-Type": "video/mp4"})

    pull.origin.route(name, stale)
    assert await (await pull.get(name)).read() == old
    go = asyncio.Event()
    pull.origin.route(name, held(go))
    try:
        first = await leading(pull, name, asked_before=1)  # its revalidation under way
        waiter = await asyncio.wait_for(pull.cdn.edge.get(f"/{ZONE}{name}"), STREAMED_S)
        assert (waiter.status, waiter.headers["ETag"], waiter.headers["X-Cache"]) == (200, '"v1"', "HIT")
        assert waiter.headers["Cache-Status"] == "assetcdn; fwd=stale; collapsed"
        assert await read_exactly(waiter, FIRST) == BIG[:FIRST]
        go.set()
        assert await waiter.read() == BIG[FIRST:]
        assert await first == BIG
    finally:
        go.set()
    assert pull.origin.count(name) == 2


def deleted_files_open() -> set[str]:
    """The files removed from their directory that this process holds descriptors of (a spool's temporary file among
    them, with its readers' descriptor of it, assetcdn/edge/states/growing.py): named, not counted, as other tests'
    fills close theirs from threads meanwhile."""
    held = set()
    for name in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/self/fd/{name}")
            if target.endswith(" (deleted)"):
                held.add(target)
    return held


async def test_an_edge_stopped_mid_fill_with_a_request_reading_it_leaves_no_descriptor_of_its_file(
        tmp_path: Path) -> None:
    """The edge stops while a large fill is read (its origin holding the rest a while longer) and a waiting request
    is sent it: neither the fill's temporary file nor the readers' descriptor of it is left open."""
    name = "/growing/stopped.mp4"
    stopping, never = asyncio.Event(), asyncio.Event()

    async def held_past_the_stop(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={**LONG, "Content-Type": "video/mp4"})
        response.content_length = len(BIG)
        await response.prepare(request)
        await response.write(BIG[:FIRST])
        await stopping.wait()
        # Past the edge's stop (its server's shutdown grace is 1 s here), not held for the origin's own (a minute):
        # a stopped edge's origin connection is not this test's subject.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(never.wait(), 3)
        return response

    before = deleted_files_open()
    async with pull_zone_on_hit_cdn(tmp_path, ZONE) as (cdn, origin), aiohttp.ClientSession() as http:
        origin.route(name, held_past_the_stop)
        url = f"http://127.0.0.1:{cdn.plain_port}/{ZONE}{name}"
        first = await http.get(url)

        async def asked() -> bool:
            return origin.count(name) == 1

        await wait_until(asked, "the first request's origin request")
        waiter = await asyncio.wait_for(http.get(url), STREAMED_S)
        assert waiter.headers["X-Cache"] == "HIT"
        assert await read_exactly(waiter, FIRST) == BIG[:FIRST]
        assert await read_exactly(first, FIRST) == BIG[:FIRST]
        assert deleted_files_open() - before  # the fill's file, and its readers' descriptor of it
        stopping.set()

    async def let_go() -> bool:  # at most as many as before: an earlier test's fill may have closed its own since
        return not deleted_files_open() - before

    await wait_until(let_go, "the fill's file and its readers' descriptor closed")
