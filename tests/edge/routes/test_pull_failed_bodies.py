"""Requests waiting for a fill whose origin sends its head and then cuts or stalls the body (the patient pull zone
of tests/edge/routes/conftest.py, whose origin holds its answer until the requests have joined): what they get
(the stale copy within stale-if-error; else one more origin request for all of them, answered whole; else 502 or
504 in the edge's envelope, never a body cut short) and how many requests the origin was sent."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import ClientPayloadError, ClientResponse, web

from assetcdn.edge.states.keys import pull_key
from assetcdn.edge.states.pull import FLIGHTS, flight_key
from tests.control.expect import expect_error
from tests.support.origins import LONG, ZONE, Handler, Pull, wait_stale
from tests.support.wait import wait_until

pytestmark = pytest.mark.asyncio(loop_scope="module")

WAITING = 4
FAILURES = ["cut", "stall"]  # the origin closes its connection mid-body, or sends nothing more (body_timeout_s)
BODY = b"x" * 1000


def failing(failure: str, go: asyncio.Event, done: asyncio.Event) -> Handler:
    """An origin route's answer once `go` is set: a kept answer's head declaring BODY's length, its first 100 bytes,
    then the connection closed (`cut`) or nothing more until `done` is set (`stall`)."""
    async def answer(request: web.Request) -> web.StreamResponse:
        await go.wait()
        response = web.StreamResponse(headers=LONG)
        response.content_length = len(BODY)
        await response.prepare(request)
        await response.write(BODY[:100])
        if failure == "cut":
            assert request.transport is not None
            request.transport.close()
        else:
            await done.wait()
        return response

    return answer


async def lead_and_wait(pull: Pull, name: str) -> tuple[asyncio.Task[ClientResponse],
                                                        list[asyncio.Task[ClientResponse]]]:
    """A request for `name` whose fill has asked the origin (its answer, head only: the body is the test's to read),
    and WAITING requests (each read whole) that joined its flight."""
    flights = pull.cdn.edge.app[FLIGHTS]
    key = flight_key(pull_key(ZONE, name, ""), pull.cdn.node.config.pull_zones[ZONE])
    before = pull.origin.count(name)
    leading = asyncio.create_task(pull.cdn.edge.get(f"/{ZONE}{name}"))

    async def asked() -> bool:
        return pull.origin.count(name) == before + 1

    await wait_until(asked, "the first request's origin request")
    waiters = [asyncio.create_task(pull.get(name)) for _ in range(WAITING)]

    async def all_joined() -> bool:
        return flights.joined(key) == WAITING

    await wait_until(all_joined, "the other requests waiting for the first one's fill")
    return leading, waiters


async def broken(leading: asyncio.Task[ClientResponse]) -> None:
    """The leading request's answer had begun when the origin's body failed: cut short, as the origin's was."""
    first = await leading
    assert first.status == 200
    with pytest.raises(ClientPayloadError):
        await first.read()


@pytest.mark.parametrize("failure", FAILURES)
async def test_requests_waiting_for_a_body_that_fails_answer_with_their_stale_copy_at_once(
        patient_pull: Pull, failure: str) -> None:
    """The stale copy's revalidation gets a new answer's head, then its body is cut or stalls: the requests that
    waited for it answer with the stale copy within its stale-if-error (RFC 5861: an error after the head is an
    error too), whole, rather than each waiting for another fill and then asking the failing origin itself."""
    pull = patient_pull
    name = f"/stale-when-body-{failure}.bin"
    go, done = asyncio.Event(), asyncio.Event()
    revalidation = failing(failure, go, done)

    async def answer(request: web.Request) -> web.StreamResponse:
        if pull.origin.count(name) == 1:
            return web.Response(body=b"kept", headers={"Cache-Control": "max-age=1, stale-if-error=600"})
        return await revalidation(request)

    pull.origin.route(name, answer)
    try:
        assert (await pull.get(name)).headers["X-Cache"] == "MISS"
        await wait_stale(pull.cdn.node, ZONE, name)
        leading, waiters = await lead_and_wait(pull, name)
        go.set()
        await broken(leading)
        answers = await asyncio.gather(*waiters)
    finally:
        done.set()
    assert [(resp.status, await resp.read(), resp.headers["X-Cache"]) for resp in answers] == [
        (200, b"kept", "STALE")] * WAITING
    assert {resp.headers["Cache-Status"] for resp in answers} == {"assetcdn; hit; fwd=stale; detail=origin-unreachable"}
    assert pull.origin.count(name) == 2  # the fill, then the one revalidation: the failing origin not asked again


@pytest.mark.parametrize("failure", FAILURES)
async def test_requests_waiting_for_a_body_that_fails_share_one_more_origin_request(
        patient_pull: Pull, failure: str) -> None:
    """A miss's body is cut or stalls, and no copy may answer the requests that waited for it: one more origin
    request answers all of them (one of them asks, the others wait for it), each whole."""
    pull = patient_pull
    name = f"/again-when-body-{failure}.bin"
    go, done = asyncio.Event(), asyncio.Event()
    first = failing(failure, go, done)

    async def answer(request: web.Request) -> web.StreamResponse:
        if pull.origin.count(name) == 1:
            return await first(request)
        return web.Response(body=BODY, headers=LONG)

    pull.origin.route(name, answer)
    try:
        leading, waiters = await lead_and_wait(pull, name)
        go.set()
        await broken(leading)
        answers = await asyncio.gather(*waiters)
    finally:
        done.set()
    assert [(resp.status, await resp.read()) for resp in answers] == [(200, BODY)] * WAITING
    assert sorted(resp.headers["X-Cache"] for resp in answers) == ["HIT"] * (WAITING - 1) + ["MISS"]
    assert pull.origin.count(name) == 2


@pytest.mark.parametrize("failure", FAILURES)
async def test_requests_waiting_for_a_body_that_fails_twice_get_the_origins_failure_whole(
        patient_pull: Pull, failure: str) -> None:
    """A miss's body is cut or stalls, and so is the one more origin request made for the requests that waited for
    it: each of them gets 502 `OriginUnreachable` (cut) or 504 `OriginTimeout` (stalled) in the edge's envelope,
    whole, not an answer cut short like the first client's, and the origin is asked no more."""
    pull = patient_pull
    name = f"/failed-twice-body-{failure}.bin"
    go, done = asyncio.Event(), asyncio.Event()
    pull.origin.route(name, failing(failure, go, done))
    try:
        leading, waiters = await lead_and_wait(pull, name)
        go.set()
        await broken(leading)
        answers = await asyncio.gather(*waiters)
    finally:
        done.set()
    status, code = (502, "OriginUnreachable") if failure == "cut" else (504, "OriginTimeout")
    for resp in answers:
        await expect_error(resp, status, code)
        assert resp.headers.get("X-Cache") != "STALE"
    assert pull.origin.count(name) == 2


@pytest.mark.parametrize("failure", FAILURES)
async def test_a_request_waiting_for_a_background_revalidation_whose_body_fails_answers_stale(
        patient_pull: Pull, failure: str) -> None:
    """stale-while-revalidate's background revalidation gets a new answer's head, then its body is cut or stalls: a
    request that must validate the copy (`max-age=0`) and waited for that revalidation answers with the stale copy
    (stale-if-error), as for a revalidation made in the foreground, rather than asking the failing origin again."""
    pull = patient_pull
    name = f"/swr-body-{failure}.bin"
    flights = pull.cdn.edge.app[FLIGHTS]
    key = flight_key(pull_key(ZONE, name, ""), pull.cdn.node.config.pull_zones[ZONE])
    go, done = asyncio.Event(), asyncio.Event()
    revalidation = failing(failure, go, done)

    async def answer(request: web.Request) -> web.StreamResponse:
        if pull.origin.count(name) == 1:
            return web.Response(body=b"kept", headers={
                "Cache-Control": "max-age=1, stale-while-revalidate=600, stale-if-error=600"})
        return await revalidation(request)

    pull.origin.route(name, answer)
    try:
        assert (await pull.get(name)).headers["X-Cache"] == "MISS"
        await wait_stale(pull.cdn.node, ZONE, name)
        first = await pull.get(name)  # answered stale at once; its revalidation waits for `go` at the origin
        assert (first.status, await first.read(), first.headers["X-Cache"]) == (200, b"kept", "STALE")
        validating = asyncio.ensure_future(pull.get(name, headers={"Cache-Control": "max-age=0"}))

        async def joined() -> bool:
            return flights.joined(key) == 1

        await wait_until(joined, "the request that must validate waiting for the background revalidation")
        go.set()
        resp = await validating
    finally:
        done.set()
    assert (resp.status, await resp.read(), resp.headers["X-Cache"]) == (200, b"kept", "STALE")
    assert resp.headers["Cache-Status"] == "assetcdn; hit; fwd=stale; detail=origin-unreachable"
    assert pull.origin.count(name) == 2  # the fill, then the one revalidation
