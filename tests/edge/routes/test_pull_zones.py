"""Pull zones through a real control and edge app (tests/support/cdn.py) and an origin the tests script
(`ScriptedOrigin`): what a client of the edge sees (status, body, X-Cache, Age, Cache-Status) and what the origin
saw (how many requests, with which fields), for the serve sequence of assetcdn/edge/states/pull.py.

One CDN and one origin serve the module; each test uses paths of its own. Freshness is max-age=1, and a test
waits for the edge's answer to change rather than sleeping."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from email.utils import formatdate
from pathlib import Path
from typing import Any

import orjson
import pytest
import pytest_asyncio
from aiohttp import ClientPayloadError, ClientResponse, web

from assetcdn.edge.cache.entry import CachedObject
from assetcdn.edge.fastpath.protocol import HitProtocol
from assetcdn.edge.states.freshness import http_date
from assetcdn.edge.states.keys import pull_key
from assetcdn.edge.states.pull import FLIGHTS, flight_key
from assetcdn.shared.content_security import SANDBOX_CSP
from tests.control.expect import expect_error
from tests.edge.hit_server import HitTestServer
from tests.support.cdn import PURGE, raw_status
from tests.support.control import ACCOUNT, METRICS
from tests.support.edge_cache import writer_held
from tests.support.metrics_text import metric
from tests.support.origins import (
    FIRST_BYTE_TIMEOUT_S,
    HOST_HEADER,
    LONG,
    MAX_OBJECT_MB,
    PREFIX,
    SECRET,
    TENANT_HOST,
    ZONE,
    Handler,
    Pull,
    ScriptedOrigin,
    add_pull_zone,
    chunked_answer,
    serve_origin,
    shared_pull_zone,
    stored_url,
    wait_stale,
)
from tests.support.wait import WAIT_S, wait_until

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def pull(patient_pull: Pull) -> Pull:
    """The patient pull zone (tests/edge/routes/conftest.py) for this module's tests: a loaded machine's loop delays
    took the plain zone's 1 s first-byte time from fills whose origin answers at once (a 504 where a test expected
    its answer). The one test of that time has `timed_pull`."""
    return patient_pull


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def timed_pull(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Pull]:
    """The pull zone whose edge waits FIRST_BYTE_TIMEOUT_S (1 s) for the origin's first byte."""
    async with shared_pull_zone(tmp_path_factory.mktemp("timed-pull-zones")) as found:
        yield found


async def answer_changes(pull: Pull, name: str, x_cache: str, **kwargs: Any) -> ClientResponse:
    """The edge's first answer for `name` whose X-Cache is `x_cache` (asked again until it is)."""
    found: list[ClientResponse] = []

    async def changed() -> bool:
        resp = await pull.get(name, **kwargs)
        found[:] = [resp]
        return resp.headers["X-Cache"] == x_cache

    await wait_until(changed, f"{name} answered {x_cache}")
    return found[0]


# --- the cache ----------------------------------------------------------------------------------------------


async def test_a_miss_is_stored_and_the_next_request_is_a_hit_with_its_age(pull: Pull) -> None:
    pull.origin.answer("/hit.txt", b"hello", headers={**LONG, "Age": "5", "Content-Type": "text/plain"})
    first = await pull.get("/hit.txt")
    assert (first.status, await first.read(), first.headers["X-Cache"]) == (200, b"hello", "MISS")
    assert first.headers["Cache-Status"] == "assetcdn; fwd=uri-miss; stored"
    second = await pull.get("/hit.txt")
    assert (second.status, await second.read(), second.headers["X-Cache"]) == (200, b"hello", "HIT")
    assert second.headers["Content-Type"] == "text/plain"
    assert int(second.headers["Age"]) >= 5  # the origin's Age, plus the time spent here
    assert second.headers["Cache-Status"].startswith("assetcdn; hit; ttl=")
    assert int(second.headers["Cache-Status"].rsplit("=", 1)[1]) <= 595
    assert pull.origin.count("/hit.txt") == 1


async def test_a_stale_response_is_revalidated_and_the_304_updates_its_head(pull: Pull) -> None:
    async def versioned(request: web.Request) -> web.StreamResponse:
        if request.headers.get("If-None-Match") == '"v1"':
            return web.Response(status=304, headers={"ETag": '"v1"', "Cache-Control": "max-age=600",
                                                     "X-Version": "2"})
        return web.Response(body=b"same bytes", headers={"ETag": '"v1"', "Cache-Control": "max-age=1",
                                                         "X-Version": "1"})

    pull.origin.route("/revalidate.txt", versioned)
    first = await pull.get("/revalidate.txt")
    assert (first.headers["X-Cache"], first.headers["X-Version"]) == ("MISS", "1")
    revalidated = await answer_changes(pull, "/revalidate.txt", "REVALIDATED")
    assert (revalidated.status, await revalidated.read()) == (200, b"same bytes")
    assert revalidated.headers["X-Version"] == "2"
    assert revalidated.headers["Cache-Status"] == "assetcdn; fwd=stale; fwd-status=304"
    seen = pull.origin.requests("/revalidate.txt")
    assert [s.headers.get("If-None-Match") for s in seen] == [None, '"v1"']
    # The updated head is what is stored now, with the 304's freshness.
    after = await pull.get("/revalidate.txt")
    assert (after.headers["X-Cache"], after.headers["X-Version"], await after.read()) == ("HIT", "2", b"same bytes")
    assert pull.origin.count("/revalidate.txt") == 2


@pytest.mark.parametrize(("name", "headers", "detail"), [
    ("/no-store.txt", {"Cache-Control": "no-store, max-age=600"}, "no-store"),
    ("/private.txt", {"Cache-Control": "private, max-age=600"}, "private"),
    ("/cookie.txt", {**LONG, "Set-Cookie": "session=abc"}, "set-cookie"),
    ("/vary-star.txt", {**LONG, "Vary": "*"}, "vary-star"),
    # more request fields than any request should be looked through for (each request for the URL would be)
    ("/vary-many.txt", {**LONG, "Vary": ", ".join(f"X-Field-{i}" for i in range(33))}, "vary-too-many"),
])
async def test_what_may_not_be_stored_goes_to_the_origin_every_time(pull: Pull, name: str,
                                                                   headers: dict[str, str], detail: str) -> None:
    pull.origin.answer(name, b"personal", headers=headers)
    for _ in range(3):
        resp = await pull.get(name)
        assert (resp.status, await resp.read(), resp.headers["X-Cache"]) == (200, b"personal", "PASS")
        assert resp.headers["Cache-Status"] == f"assetcdn; fwd=uri-miss; detail={detail}"
    assert pull.origin.count(name) == 3
    if "Set-Cookie" in headers:
        assert resp.headers["Set-Cookie"] == "session=abc"  # the client that asked still gets its cookie


async def test_every_private_and_no_cache_an_origin_sends_binds_the_copy_not_only_the_first(pull: Pull) -> None:
    """RFC 9111 5.2.2.4, 5.2.2.7: an unqualified `private` after a qualified one still keeps the answer out of the
    shared cache, an unqualified `no-cache` after a qualified one still has it validated before every reuse, and
    two qualified ones keep all the fields they name out of the copy. Before, the first occurrence alone counted:
    one user's page was every client's answer, and the second list's field went out on every hit."""
    pull.origin.answer("/private-twice.txt", b"alice's page",
                       headers={"Cache-Control": 'private="X-User", max-age=600, private', "X-User": "alice"})
    for _ in range(2):
        resp = await pull.get("/private-twice.txt")
        assert (resp.status, await resp.read(), resp.headers["X-Cache"]) == (200, b"alice's page", "PASS")
        assert resp.headers["Cache-Status"] == "assetcdn; fwd=uri-miss; detail=private"
    assert pull.origin.count("/private-twice.txt") == 2
    pull.origin.answer("/no-cache-twice.txt", b"checked",
                       headers={"Cache-Control": 'no-cache="X-User", max-age=600, no-cache', "X-User": "alice"})
    for _ in range(2):
        resp = await pull.get("/no-cache-twice.txt")
        assert (resp.status, await resp.read()) == (200, b"checked")
        assert resp.headers["X-Cache"] != "HIT"
    assert pull.origin.count("/no-cache-twice.txt") == 2
    pull.origin.answer("/private-two-lists.txt", b"shared",
                       headers={"Cache-Control": 'max-age=600, private="X-User", private="X-Session"',
                                "X-User": "alice", "X-Session": "s1", "X-Kept": "yes"})
    assert (await pull.get("/private-two-lists.txt")).headers["X-Cache"] == "MISS"
    hit = await pull.get("/private-two-lists.txt")
    assert (hit.status, await hit.read(), hit.headers["X-Cache"]) == (200, b"shared", "HIT")
    assert (hit.headers.get("X-User"), hit.headers.get("X-Session"), hit.headers.get("X-Kept")) == (None, None, "yes")


async def test_an_answer_that_may_not_be_stored_is_counted_as_its_x_cache_says(pull: Pull) -> None:
    """`assetcdn_edge_cache_total` counts a miss whose answer is not kept as PASS, as its X-Cache and the delivery
    log say: an operator's hit ratio is of what could be cached, as the statistics' is."""
    async def results() -> tuple[float, float]:
        text = await (await pull.cdn.edge.get("/metrics", headers=METRICS)).text()
        return (metric(text, "assetcdn_edge_cache_total", result="MISS"),
                metric(text, "assetcdn_edge_cache_total", result="PASS"))

    pull.origin.answer("/counted-pass.txt", b"personal", headers={"Cache-Control": "private"})
    pull.origin.answer("/counted-error.txt", b"broken", status=500)
    pull.origin.answer("/counted-miss.txt", b"shared", headers=LONG)
    misses, passes = await results()
    for name in ("/counted-pass.txt", "/counted-pass.txt", "/counted-error.txt"):
        assert (await pull.get(name)).headers["X-Cache"] == "PASS"
    assert (await pull.get("/counted-miss.txt")).headers["X-Cache"] == "MISS"
    assert await results() == (misses + 1, passes + 3)


async def test_bodies_relayed_as_they_are_count_as_bytes_served(pull: Pull) -> None:
    """`assetcdn_bytes_served_total` counts the body of an answer relayed from the origin as it is: a GET with
    If-Unmodified-Since or If-Match (a download resumed: the origin's to answer, never looked up), a POST's answer.
    They reach the client as a fill's body does (and the delivery log counts them), and counted none before."""
    async def served() -> float:
        return metric(await (await pull.cdn.edge.get("/metrics", headers=METRICS)).text(),
                      "assetcdn_bytes_served_total")

    pull.origin.answer("/relayed-counted.bin", b"0123456789" * 100, headers=LONG)
    before = await served()
    resumed = await pull.get("/relayed-counted.bin", headers={"If-Unmodified-Since": "Mon, 01 Jun 2026 10:00:00 GMT",
                                                      "Range": "bytes=0-"})
    assert (resumed.status, resumed.headers["X-Cache"], len(await resumed.read())) == (200, "PASS", 1000)
    matched = await pull.get("/relayed-counted.bin", headers={"If-Match": "*"})
    assert (matched.status, len(await matched.read())) == (200, 1000)
    posted = await pull.cdn.edge.post(f"/{ZONE}/relayed-counted.bin", data=b"form")
    assert (posted.status, len(await posted.read())) == (200, 1000)
    assert await served() == before + 3000
    head = await pull.cdn.edge.head(f"/{ZONE}/relayed-counted.bin", headers={"If-Match": "*"})
    assert head.status == 200
    assert await served() == before + 3000  # a HEAD's answer has no body


@pytest.mark.parametrize(("name", "cache_control", "stored"), [
    ("/auth-plain.txt", "max-age=600", False),
    ("/auth-s-maxage.txt", "s-maxage=600", True),
    ("/auth-public.txt", "public, max-age=600", True),
    ("/auth-must-revalidate.txt", "must-revalidate, max-age=600", True),
])
async def test_a_response_to_an_authorized_request_is_stored_only_when_it_says_so(
        pull: Pull, name: str, cache_control: str, stored: bool) -> None:
    pull.origin.answer(name, b"for the caller", headers={"Cache-Control": cache_control})
    auth = {"Authorization": "Bearer caller-token"}
    first = await pull.get(name, headers=auth)
    second = await pull.get(name, headers=auth)
    assert (first.status, second.status, await second.read()) == (200, 200, b"for the caller")
    assert pull.origin.requests(name)[0].headers["Authorization"] == "Bearer caller-token"
    if stored:
        assert (first.headers["X-Cache"], second.headers["X-Cache"]) == ("MISS", "HIT")
        assert pull.origin.count(name) == 1
    else:
        assert (first.headers["X-Cache"], second.headers["X-Cache"]) == ("PASS", "PASS")
        assert first.headers["Cache-Status"].endswith("detail=authorization")
        assert pull.origin.count(name) == 2


async def test_vary_keeps_one_variant_per_value_of_the_fields_it_names(pull: Pull) -> None:
    async def negotiated(request: web.Request) -> web.StreamResponse:
        kind = "json" if "json" in request.headers.get("Accept", "") else "html"
        return web.Response(body=kind.encode(), headers={**LONG, "Vary": "Accept"})

    pull.origin.route("/vary.txt", negotiated)
    json_accept, html_accept = {"Accept": "application/json"}, {"Accept": "text/html"}
    statuses = []
    for accept, x_cache in ((json_accept, "MISS"), (html_accept, "MISS"), (json_accept, "HIT"), (html_accept, "HIT")):
        resp = await pull.get("/vary.txt", headers=accept)
        kind = "json" if "json" in accept["Accept"] else "html"
        assert (await resp.read(), resp.headers["X-Cache"]) == (kind.encode(), x_cache), accept
        statuses.append(resp.headers["Cache-Status"])
    assert pull.origin.count("/vary.txt") == 2
    # RFC 9211 2.2: the second variant's miss is the URL's vary-miss, not a uri-miss.
    assert statuses[:2] == ["assetcdn; fwd=uri-miss; stored", "assetcdn; fwd=vary-miss; stored"]


async def test_a_field_vary_names_spelled_with_an_underscore_picks_the_variant_it_stands_for(pull: Pull) -> None:
    """An origin that reads fields as CGI variables reads `Accept_Language` as `Accept-Language` (both
    HTTP_ACCEPT_LANGUAGE). Its answer to `Accept_Language: fr` says `Vary: Accept-Language`, and the edge kept it
    as the variant of a request without Accept-Language: every such client got French. A field is read for Vary
    with `_` as `-`, as such an origin read it."""
    async def cgi_like(request: web.Request) -> web.StreamResponse:
        language = request.headers.get("Accept-Language", request.headers.get("Accept_Language", "none"))
        return web.Response(text=language, headers={**LONG, "Vary": "Accept-Language"})

    pull.origin.route("/cgi-vary.txt", cgi_like)
    french = await pull.get("/cgi-vary.txt", headers={"Accept_Language": "fr"})
    assert (french.status, await french.read(), french.headers["X-Cache"]) == (200, b"fr", "MISS")
    plain = await pull.get("/cgi-vary.txt")
    assert (plain.status, await plain.read(), plain.headers["X-Cache"]) == (200, b"none", "MISS")
    # The same variant as its own spelling: an origin that reads the field by its name alone answered the request
    # without it, and that answer is one a client asking for French may be given.
    spelled = await pull.get("/cgi-vary.txt", headers={"Accept-Language": "fr"})
    assert (await spelled.read(), spelled.headers["X-Cache"]) == (b"fr", "HIT")
    assert pull.origin.count("/cgi-vary.txt") == 2


@pytest.mark.parametrize(("name", "headers", "stored"), [
    ("/cdn-cc-stores.txt", {"Cache-Control": "no-store", "CDN-Cache-Control": "max-age=600"}, True),
    ("/cdn-cc-refuses.txt", {"Cache-Control": "max-age=600", "CDN-Cache-Control": "no-store"}, False),
])
async def test_cdn_cache_control_overrides_cache_control(pull: Pull, name: str, headers: dict[str, str],
                                                         stored: bool) -> None:
    pull.origin.answer(name, b"targeted", headers=headers)
    first, second = await pull.get(name), await pull.get(name)
    assert (await first.read(), await second.read()) == (b"targeted", b"targeted")
    if stored:
        assert (first.headers["X-Cache"], second.headers["X-Cache"]) == ("MISS", "HIT")
        assert second.headers["Cache-Control"] == "no-store"  # browsers still get the origin's own
    else:
        assert (first.headers["X-Cache"], second.headers["X-Cache"]) == ("PASS", "PASS")
    assert pull.origin.count(name) == (1 if stored else 2)


async def test_a_directive_repeated_in_cdn_cache_control_has_its_last_value(pull: Pull) -> None:
    """CDN-Cache-Control is a structured-field dictionary (RFC 9213 2.1), whose repeated key has its last value (RFC
    8941 3.2): `max-age=600, max-age=0` (two lines joined, an origin's later layer overriding an earlier one) is not
    to be kept fresh. Read first-wins as Cache-Control is (RFC 9111 4.2.1), it was a HIT for ten minutes. The
    first still wins in Cache-Control."""
    pull.origin.answer("/cdn-cc-twice.txt", b"short-lived", headers={"CDN-Cache-Control": "max-age=600, max-age=0"})
    for _ in range(2):
        resp = await pull.get("/cdn-cc-twice.txt")
        assert (resp.status, await resp.read()) == (200, b"short-lived")
        assert resp.headers["X-Cache"] != "HIT"
    assert pull.origin.count("/cdn-cc-twice.txt") == 2
    pull.origin.answer("/cc-twice.txt", b"long-lived", headers={"Cache-Control": "max-age=600, max-age=0"})
    assert [(await pull.get("/cc-twice.txt")).headers["X-Cache"] for _ in range(2)] == ["MISS", "HIT"]


@pytest.mark.parametrize(("name", "field"), [
    ("/no-cache.txt", ("Cache-Control", "no-cache")),
    ("/pragma-no-cache.txt", ("Pragma", "no-cache")),  # HTTP/1.0's, read when there is no Cache-Control
])
async def test_a_request_with_no_cache_has_the_stored_response_validated(pull: Pull, name: str,
                                                                        field: tuple[str, str]) -> None:
    async def tagged(request: web.Request) -> web.StreamResponse:
        if request.headers.get("If-None-Match") == '"tag"':
            return web.Response(status=304, headers={"ETag": '"tag"', **LONG})
        return web.Response(body=b"validated", headers={"ETag": '"tag"', **LONG})

    pull.origin.route(name, tagged)
    assert (await pull.get(name)).headers["X-Cache"] == "MISS"
    assert (await pull.get(name)).headers["X-Cache"] == "HIT"
    forced = await pull.get(name, headers=dict([field]))
    assert (forced.status, await forced.read(), forced.headers["X-Cache"]) == (200, b"validated", "REVALIDATED")
    # RFC 9211 2.2: the stored copy is fresh; the request's own directive sent it forward.
    assert forced.headers["Cache-Status"] == "assetcdn; fwd=request; fwd-status=304"
    seen = pull.origin.requests(name)
    assert len(seen) == 2 and seen[1].headers["If-None-Match"] == '"tag"'


async def test_a_fresh_copy_a_requests_max_age_refuses_is_forwarded_for_the_request(pull: Pull) -> None:
    versions = iter((b"first", b"second"))

    async def changing(_request: web.Request) -> web.StreamResponse:
        return web.Response(body=next(versions), headers=LONG)

    pull.origin.route("/max-age-0.txt", changing)
    assert (await pull.get("/max-age-0.txt")).headers["X-Cache"] == "MISS"
    forced = await pull.get("/max-age-0.txt", headers={"Cache-Control": "max-age=0"})
    assert (await forced.read(), forced.headers["X-Cache"]) == (b"second", "MISS")
    assert forced.headers["Cache-Status"] == "assetcdn; fwd=request; stored"


HUGE_DELTA = "9" * 5000  # more digits than Python's int() converts (4,300): a header line holds it


async def test_a_delta_seconds_too_long_to_convert_counts_as_2_to_the_31(pull: Pull) -> None:
    """RFC 9111 1.2.2: a delta-seconds larger than the cache can represent is taken as 2^31, from a client's
    request directives as from an origin's Cache-Control or Age. Before, each was a 500, and an origin's stored
    answer was a 500 on every hit after the miss that stored it."""
    pull.origin.answer("/huge-client.txt", b"huge", headers=LONG)
    assert (await pull.get("/huge-client.txt")).headers["X-Cache"] == "MISS"
    for directive in ("max-age", "max-stale", "min-fresh", "stale-if-error"):
        resp = await pull.get("/huge-client.txt", headers={"Cache-Control": f"{directive}={HUGE_DELTA}"})
        assert (resp.status, await resp.read()) == (200, b"huge"), directive
        assert resp.headers["X-Cache"] == ("MISS" if directive == "min-fresh" else "HIT"), directive  # no validator
    for name, fields in (("/huge-max-age.txt", {"Cache-Control": f"max-age={HUGE_DELTA}"}),
                         ("/huge-s-maxage.txt", {"Cache-Control": f"s-maxage={HUGE_DELTA}"}),
                         ("/huge-swr.txt", {"Cache-Control": f"max-age=600, stale-while-revalidate={HUGE_DELTA}"})):
        pull.origin.answer(name, b"huge", headers=fields)
        assert (await pull.get(name)).headers["X-Cache"] == "MISS"
        hit = await pull.get(name)
        assert (hit.status, await hit.read(), hit.headers["X-Cache"]) == (200, b"huge", "HIT"), name
    pull.origin.answer("/huge-age.txt", b"aged", headers={**LONG, "Age": HUGE_DELTA})  # older than max-age: stale
    assert [(await pull.get("/huge-age.txt")).status for _ in range(2)] == [200, 200]
    assert pull.origin.count("/huge-age.txt") == 2


async def test_a_range_of_positions_too_long_to_convert_is_answered_not_500(pull: Pull) -> None:
    """A byte position past any body is past this one however many digits it has: the first byte 416, the last
    byte or a suffix the body's end. Before, more digits than int() converts were a 500."""
    pull.origin.answer("/huge-range.txt", b"0123456789", headers=LONG)
    assert (await pull.get("/huge-range.txt")).headers["X-Cache"] == "MISS"
    past = await pull.get("/huge-range.txt", headers={"Range": f"bytes={HUGE_DELTA}-"})
    assert (past.status, past.headers["Content-Range"]) == (416, "bytes */10")
    tail = await pull.get("/huge-range.txt", headers={"Range": f"bytes=2-{HUGE_DELTA}"})
    assert (tail.status, await tail.read(), tail.headers["Content-Range"]) == (206, b"23456789", "bytes 2-9/10")
    whole = await pull.get("/huge-range.txt", headers={"Range": f"bytes=-{HUGE_DELTA}"})
    assert (whole.status, await whole.read(), whole.headers["Content-Range"]) == (206, b"0123456789", "bytes 0-9/10")
    padded = await pull.get("/huge-range.txt", headers={"Range": "bytes=-" + "0" * 5000 + "5"})
    assert (padded.status, await padded.read(), padded.headers["Content-Range"]) == (206, b"56789", "bytes 5-9/10")


async def test_only_if_cached_is_504_when_not_cached_and_never_asks_the_origin(pull: Pull) -> None:
    pull.origin.answer("/only-if-cached.txt", b"cached", headers=LONG)
    resp = await pull.cdn.edge.get(f"/{ZONE}/only-if-cached.txt", headers={"Cache-Control": "only-if-cached"})
    await expect_error(resp, 504, "NotCached")
    assert pull.origin.count("/only-if-cached.txt") == 0
    assert (await pull.get("/only-if-cached.txt")).headers["X-Cache"] == "MISS"
    cached = await pull.get("/only-if-cached.txt", headers={"Cache-Control": "only-if-cached"})
    assert (cached.status, await cached.read(), cached.headers["X-Cache"]) == (200, b"cached", "HIT")
    assert pull.origin.count("/only-if-cached.txt") == 1


async def test_only_if_cached_on_another_method_is_504_and_never_reaches_the_origin(pull: Pull) -> None:
    """`only-if-cached` asks for a stored response or 504, never an origin request (RFC 9111 5.2.1.7), and no stored
    response answers a POST or DELETE: the edge sent them to the origin all the same, which made the change the
    client had asked not to be made (and invalidated the stored copy). They are 504 NotCached, as a GET with no
    stored copy is."""
    async def resource(request: web.Request) -> web.StreamResponse:
        if request.method != "GET":
            return web.Response(status=204)
        return web.Response(body=b"kept", headers=LONG)

    pull.origin.route("/only-if-cached-unsafe.txt", resource)
    assert (await pull.get("/only-if-cached-unsafe.txt")).headers["X-Cache"] == "MISS"
    for method in ("POST", "DELETE", "PURGE"):
        resp = await pull.cdn.edge.request(method, f"/{ZONE}/only-if-cached-unsafe.txt", data=b"a=1",
                                           headers={"Cache-Control": "only-if-cached"})
        await expect_error(resp, 504, "NotCached")
    assert [seen.method for seen in pull.origin.requests("/only-if-cached-unsafe.txt")] == ["GET"]
    kept = await pull.get("/only-if-cached-unsafe.txt")
    assert (kept.status, await kept.read(), kept.headers["X-Cache"]) == (200, b"kept", "HIT")
    posted = await pull.cdn.edge.post(f"/{ZONE}/only-if-cached-unsafe.txt", data=b"a=1")
    assert (posted.status, posted.headers["X-Cache"]) == (204, "PASS")


async def test_stale_if_error_serves_the_stale_copy_while_the_origin_is_down(pull: Pull) -> None:
    """An origin of its own, stopped once both paths are cached: the one with stale-if-error is served
    stale, the other is 502 in the error envelope."""
    down = ScriptedOrigin()
    down.answer("/kept.txt", b"kept", headers={"Cache-Control": "max-age=1, stale-if-error=600"})
    down.answer("/lost.txt", b"lost", headers={"Cache-Control": "max-age=1"})
    server = await serve_origin(down)
    origin_host = f"127.0.0.1:{server.port}"
    await add_pull_zone(pull.cdn, "flaky", {"Url": f"http://{origin_host}{PREFIX}"})
    for name in ("/kept.txt", "/lost.txt"):
        assert (await pull.cdn.edge.get(f"/flaky{name}")).headers["X-Cache"] == "MISS"
    await server.close()

    async def served_stale() -> bool:
        resp = await pull.cdn.edge.get("/flaky/kept.txt")
        assert (resp.status, await resp.read()) == (200, b"kept")
        return resp.headers["X-Cache"] == "STALE"

    await wait_until(served_stale, "the stale copy served while the origin is down")
    resp = await pull.cdn.edge.get("/flaky/kept.txt")
    assert resp.headers["Cache-Status"] == "assetcdn; hit; fwd=stale; detail=origin-unreachable"

    async def refused() -> bool:
        return (await pull.cdn.edge.get("/flaky/lost.txt")).status != 200

    await wait_until(refused, "the response without stale-if-error given up")
    await expect_error(await pull.cdn.edge.get("/flaky/lost.txt"), 502, "OriginUnreachable")
    assert (down.count("/kept.txt"), down.count("/lost.txt")) == (1, 1)
    assert down.requests("/kept.txt")[0].headers["Host"] == origin_host  # without a HostHeader: the URL's


async def test_an_origin_that_sends_no_head_in_time_is_504(timed_pull: Pull) -> None:
    pull = timed_pull
    released = asyncio.Event()

    async def silent(_request: web.Request) -> web.StreamResponse:
        await released.wait()
        return web.Response(body=b"too late")

    pull.origin.route("/silent.txt", silent)
    try:
        resp = await asyncio.wait_for(pull.cdn.edge.get(f"/{ZONE}/silent.txt"), WAIT_S)
    finally:
        released.set()
    body = await expect_error(resp, 504, "OriginTimeout")
    assert f"{FIRST_BYTE_TIMEOUT_S} s" in body["error"]["message"]
    assert pull.origin.count("/silent.txt") == 1


async def test_a_range_is_answered_from_the_whole_stored_response(pull: Pull) -> None:
    data = bytes(range(256)) * 4
    pull.origin.answer("/range.bin", data, headers=LONG)
    first = await pull.get("/range.bin", headers={"Range": "bytes=10-19"})
    # The fill asks for the whole response; this client may get it whole or its range.
    assert (first.status, await first.read()) in ((200, data), (206, data[10:20]))
    second = await pull.get("/range.bin", headers={"Range": "bytes=10-19"})
    assert (second.status, await second.read(), second.headers["X-Cache"]) == (206, data[10:20], "HIT")
    assert second.headers["Content-Range"] == f"bytes 10-19/{len(data)}"
    assert pull.origin.count("/range.bin") == 1
    assert "Range" not in pull.origin.requests("/range.bin")[0].headers


async def test_if_range_with_a_date_holds_only_for_a_strong_last_modified(pull: Pull) -> None:
    """If-Range with a date: the range only while the stored Last-Modified is a strong validator, at least 60 s
    before the stored Date (RFC 9110 8.8.2.2, 13.1.5). A file changed in the second it was served may change
    again within that second: a client resuming with that date got a range of whichever version the edge held."""
    data = bytes(range(256))
    for name, changed_s_ago in (("/recent.bin", 10), ("/settled.bin", 3600)):
        modified = formatdate(time.time() - changed_s_ago, usegmt=True)
        pull.origin.answer(name, data, headers={**LONG, "Last-Modified": modified})
        await pull.get(name)
        await answer_changes(pull, name, "HIT")
        resp = await pull.get(name, headers={"Range": "bytes=10-19", "If-Range": modified})
        assert (resp.status, len(await resp.read())) == ((200, 256) if changed_s_ago < 60 else (206, 10)), name
        other = await pull.get(name, headers={"Range": "bytes=10-19", "If-Range": formatdate(0, usegmt=True)})
        assert (other.status, len(await other.read())) == (200, 256)


async def test_concurrent_requests_for_a_new_url_make_one_origin_request(patient_pull: Pull) -> None:
    pull = patient_pull  # its origin holds the answer until every request joined, which a loaded machine stretches
    clients = 20
    body = os.urandom(300 * 1024)
    go = asyncio.Event()

    async def held(_request: web.Request) -> web.StreamResponse:
        await go.wait()
        return web.Response(body=body, headers=LONG)

    pull.origin.route("/collapsed.bin", held)
    server = pull.cdn.edge.server
    assert isinstance(server, HitTestServer)  # the hit path fills some misses itself: counted too
    handled_before = server.requests_begun
    requests = [asyncio.ensure_future(pull.get("/collapsed.bin")) for _ in range(clients)]

    async def all_arrived() -> bool:
        return server.requests_begun - handled_before >= clients and pull.origin.count("/collapsed.bin") >= 1

    await wait_until(all_arrived, "every client's request reaching the edge")
    go.set()
    answers = await asyncio.gather(*requests)
    assert [resp.status for resp in answers] == [200] * clients
    assert all([await resp.read() == body for resp in answers])
    assert sorted(resp.headers["X-Cache"] for resp in answers) == ["HIT"] * (clients - 1) + ["MISS"]
    # The waiters were collapsed into the one origin request (RFC 9211 2.6), not hits of a copy stored before them.
    assert sorted(resp.headers["Cache-Status"] for resp in answers) == (
        ["assetcdn; fwd=uri-miss; collapsed"] * (clients - 1) + ["assetcdn; fwd=uri-miss; stored"])
    assert pull.origin.count("/collapsed.bin") == 1


@pytest.mark.parametrize("cache_control", ["no-cache", "max-age=0, must-revalidate"])
async def test_requests_waiting_for_an_answer_to_validate_before_each_reuse_get_it_without_asking_again(
        patient_pull: Pull, cache_control: str) -> None:
    """The origin's answer must be validated before each reuse (`no-cache`, `max-age=0`): the requests that waited
    for the one origin request get the answer it brought, which came after they asked, rather than each sending the
    origin a revalidation of its own at once; so do those waiting for the stored copy's one revalidation."""
    pull = patient_pull  # its origin holds the answer until every request joined
    name = f"/validated-each-time-{cache_control.split(',')[0]}.txt"
    clients = 6
    flights, key = pull.cdn.edge.app[FLIGHTS], flight_key(pull_key(ZONE, name, ""), pull.cdn.node.config.pull_zones[ZONE])
    go = asyncio.Event()

    async def validated(request: web.Request) -> web.StreamResponse:
        await go.wait()
        if request.headers.get("If-None-Match") == '"v1"':
            return web.Response(status=304, headers={"ETag": '"v1"', "Cache-Control": cache_control})
        return web.Response(body=b"validated each time", headers={"ETag": '"v1"', "Cache-Control": cache_control})

    pull.origin.route(name, validated)
    for asked in (1, 2):  # a miss, then the stored copy's revalidation
        go.clear()
        requests = [asyncio.ensure_future(pull.get(name)) for _ in range(clients)]

        async def all_joined() -> bool:
            return flights.joined(key) == clients - 1

        await wait_until(all_joined, "every other request waiting for the first one's origin request")
        go.set()
        answers = await asyncio.gather(*requests)
        assert [(resp.status, await resp.read()) for resp in answers] == [(200, b"validated each time")] * clients
        assert sorted(resp.headers["X-Cache"] for resp in answers) == sorted(
            ["MISS" if asked == 1 else "REVALIDATED"] + ["HIT"] * (clients - 1))
        assert pull.origin.count(name) == asked
    assert [seen.headers.get("If-None-Match") for seen in pull.origin.requests(name)] == [None, '"v1"']


async def test_requests_waiting_for_a_revalidation_the_origin_fails_answer_stale_without_asking_again(
        patient_pull: Pull) -> None:
    """The stale copy's revalidation gets a 503 and its client the stale copy (stale-if-error): the requests that
    waited for it answer with that copy too, rather than each sending the failing origin a request of its own; one
    whose own directives keep it from the stale copy (`stale-if-error=0`) still asks, and gets the origin's 503."""
    pull = patient_pull  # its origin holds the answer until every request joined
    name = "/failing-revalidation.txt"
    clients = 6
    flights, key = pull.cdn.edge.app[FLIGHTS], flight_key(pull_key(ZONE, name, ""), pull.cdn.node.config.pull_zones[ZONE])
    go = asyncio.Event()
    go.set()

    async def failing(request: web.Request) -> web.StreamResponse:
        await go.wait()
        if pull.origin.count(name) > 1:
            return web.Response(status=503, body=b"down")
        return web.Response(body=b"kept", headers={"ETag": '"v1"', "Cache-Control": "max-age=1, stale-if-error=600"})

    pull.origin.route(name, failing)
    assert (await pull.get(name)).headers["X-Cache"] == "MISS"

    await wait_stale(pull.cdn.node, ZONE, name)
    go.clear()
    requests = [asyncio.ensure_future(pull.get(name)) for _ in range(clients)]
    for joining in (clients - 1, clients):  # the one that may not take the copy joins last, never leads

        async def all_joined() -> bool:
            return flights.joined(key) == joining  # noqa: B023 (awaited within the iteration)

        await wait_until(all_joined, "every other request waiting for the first one's revalidation")
        if joining < clients:
            requests.append(asyncio.ensure_future(pull.get(name, headers={"Cache-Control": "stale-if-error=0"})))
    go.set()
    answers = await asyncio.gather(*requests)
    assert [(resp.status, await resp.read(), resp.headers["X-Cache"]) for resp in answers] == [
        (200, b"kept", "STALE")] * clients + [(503, b"down", "PASS")]
    assert {resp.headers["Cache-Status"] for resp in answers[:clients]} == {"assetcdn; hit; fwd=stale; fwd-status=503"}
    assert pull.origin.count(name) == 3  # the fill, the revalidation, and the request that may not take the copy


async def test_requests_waiting_for_a_background_revalidation_the_origin_gives_no_answer_do_not_ask_again(
        patient_pull: Pull) -> None:
    """stale-while-revalidate's background revalidation gets no answer (a broken head): a request that must validate
    the copy (`max-age=0`) and waited for that revalidation answers with its failure (here the stale copy, within
    stale-if-error), as it does for a revalidation made in the foreground, rather than sending the failing origin a
    request of its own once it learns of the failure."""
    pull = patient_pull  # its origin holds the answer until the request joined
    name = "/swr-broken-revalidation.txt"
    flights, key = pull.cdn.edge.app[FLIGHTS], flight_key(pull_key(ZONE, name, ""), pull.cdn.node.config.pull_zones[ZONE])
    go = asyncio.Event()
    go.set()

    async def broken(request: web.Request) -> web.StreamResponse:
        if pull.origin.count(name) == 1:
            return web.Response(body=b"kept", headers={
                "ETag": '"v1"', "Cache-Control": "max-age=1, stale-while-revalidate=600, stale-if-error=600"})
        await go.wait()
        assert request.transport is not None
        request.transport.write(b"no HTTP at all\r\n\r\n")  # no status line: the origin gave no answer
        request.transport.close()
        return web.Response()

    pull.origin.route(name, broken)
    assert (await pull.get(name)).headers["X-Cache"] == "MISS"

    await wait_stale(pull.cdn.node, ZONE, name)
    go.clear()
    first = await pull.get(name)  # answered stale at once; its revalidation waits for `go` at the origin
    assert (first.status, await first.read(), first.headers["X-Cache"]) == (200, b"kept", "STALE")
    validating = asyncio.ensure_future(pull.get(name, headers={"Cache-Control": "max-age=0"}))

    async def joined() -> bool:
        return flights.joined(key) == 1

    await wait_until(joined, "the request that must validate waiting for the background revalidation")
    asked = pull.origin.count(name)
    go.set()
    resp = await validating
    assert (resp.status, await resp.read(), resp.headers["X-Cache"]) == (200, b"kept", "STALE")
    assert resp.headers["Cache-Status"] == "assetcdn; hit; fwd=stale; detail=origin-unreachable"
    assert pull.origin.count(name) == asked  # the failing origin was not asked again for it


def kept_then_confirmed(pull: Pull, name: str, kept: dict[str, str], go: asyncio.Event) -> Handler:
    """An origin route: the first request for `name` gets `kept` (ETag "v1"), every later one, a revalidation of
    it, a 304 once `go` is set."""
    async def answer(request: web.Request) -> web.StreamResponse:
        if pull.origin.count(name) == 1:
            return web.Response(body=b"kept", headers=kept)
        await go.wait()
        assert request.headers.get("If-None-Match") == '"v1"'
        return web.Response(status=304, headers=kept)

    return answer


async def test_a_copy_gone_stale_before_its_fill_reached_the_disk_tier_is_revalidated_in_the_background(
        patient_pull: Pull) -> None:
    """The fill's answer answers from the memory tier while its disk batch is still to be written (the writer busy:
    a loaded disk), and the copy is stale by then (max-age=1, its Date up to a second old on arrival): the STALE
    answer still revalidates it in the background, rather than taking the fill, which brought that very copy and
    waits for its disk write only, for a revalidation under way; and a request that must validate the copy
    (`max-age=0`) waits for that revalidation rather than asking the origin itself."""
    pull = patient_pull  # its origin holds the revalidation's answer until the request joined
    name = "/stale-before-written.txt"
    flights, key = pull.cdn.edge.app[FLIGHTS], flight_key(pull_key(ZONE, name, ""), pull.cdn.node.config.pull_zones[ZONE])
    go = asyncio.Event()
    kept = {"ETag": '"v1"', "Cache-Control": "max-age=1, stale-while-revalidate=600"}

    pull.origin.route(name, kept_then_confirmed(pull, name, kept, go))
    with writer_held(pull.cdn.node):  # no disk batch is written meanwhile
        # Answered before it is stored; its connection closed, as the fill holds it until its disk write is done.
        assert (await pull.get(name, headers={"Connection": "close"})).headers["X-Cache"] == "MISS"
        await wait_stale(pull.cdn.node, ZONE, name)
        first = await pull.get(name)
        assert (first.status, await first.read(), first.headers["X-Cache"]) == (200, b"kept", "STALE")

        async def revalidating() -> bool:
            return pull.origin.count(name) == 2

        await wait_until(revalidating, "the stale copy's background revalidation")
        validating = asyncio.ensure_future(pull.get(name, headers={"Cache-Control": "max-age=0"}))

        async def joined() -> bool:
            return flights.joined(key) == 1

        await wait_until(joined, "the request that must validate waiting for the background revalidation")
    go.set()
    resp = await validating
    assert (resp.status, await resp.read()) == (200, b"kept")
    assert resp.headers["Cache-Status"] == "assetcdn; fwd=stale; collapsed"  # the revalidation's answer, not a hit
    assert pull.origin.count(name) == 2  # the fill, then the one revalidation


async def test_requests_validating_a_copy_before_its_fill_reached_the_disk_tier_share_one_revalidation(
        patient_pull: Pull) -> None:
    """The fill's answer answers from the memory tier while its disk batch is still to be written (the writer busy:
    a loaded disk), and requests that must validate the copy (`max-age=0`) come meanwhile: one revalidates it and
    the others wait for that revalidation, rather than each waiting for the fill's disk write (which brings them
    nothing newer than the copy) and then each asking the origin itself."""
    pull = patient_pull  # its origin holds the revalidation's answer until every request joined
    name = "/validated-before-written.txt"
    clients = 3
    flights, key = pull.cdn.edge.app[FLIGHTS], flight_key(pull_key(ZONE, name, ""), pull.cdn.node.config.pull_zones[ZONE])
    go = asyncio.Event()
    kept = {"ETag": '"v1"', "Cache-Control": "max-age=600"}

    pull.origin.route(name, kept_then_confirmed(pull, name, kept, go))
    with writer_held(pull.cdn.node):  # no disk batch is written meanwhile
        # Answered before it is stored; its connection closed, as the fill holds it until its disk write is done.
        assert (await pull.get(name, headers={"Connection": "close"})).headers["X-Cache"] == "MISS"
        requests = [asyncio.ensure_future(pull.get(name, headers={"Cache-Control": "max-age=0"}))
                    for _ in range(clients)]

        async def all_joined() -> bool:
            return pull.origin.count(name) == 2 and flights.joined(key) == clients - 1

        await wait_until(all_joined, "every other request waiting for the first one's revalidation")
    go.set()
    answers = await asyncio.gather(*requests)
    assert [(resp.status, await resp.read()) for resp in answers] == [(200, b"kept")] * clients
    assert sorted(resp.headers["X-Cache"] for resp in answers) == ["HIT"] * (clients - 1) + ["REVALIDATED"]
    assert pull.origin.count(name) == 2  # the fill, then the one revalidation


async def test_a_fill_whose_client_goes_as_the_hit_path_hands_it_over_is_still_kept_for_the_others(
        patient_pull: Pull, monkeypatch: pytest.MonkeyPatch) -> None:
    """The hit path's fill gets an answer it hands to the application (chunked: no declared length), and its client's
    connection is lost at that moment, before the application took the answer: the answer is still read into the
    cache, and the requests waiting for the URL get it from there rather than each asking the origin again."""
    pull = patient_pull  # its origin holds the answer until every request joined
    name = "/gone-at-handover.bin"
    body = os.urandom(200 * 1024)
    waiting = 4
    flights, key = pull.cdn.edge.app[FLIGHTS], flight_key(pull_key(ZONE, name, ""), pull.cdn.node.config.pull_zones[ZONE])
    go = asyncio.Event()

    async def chunked(request: web.Request) -> web.StreamResponse:
        await go.wait()
        response = web.StreamResponse(headers={**LONG, "Content-Type": "application/octet-stream"})
        await response.prepare(request)  # no Content-Length: chunked, which the hit path does not write
        await response.write(body)
        return response

    hand_over = HitProtocol.hand_over

    def client_gone_at_hand_over(conn: HitProtocol, request: bytes, fetched: Any = None, *args: Any) -> None:
        hand_over(conn, request, fetched, *args)
        if fetched is not None and conn.transport is not None:  # the fill's answer: its client goes now
            conn.transport.abort()

    monkeypatch.setattr(HitProtocol, "hand_over", client_gone_at_hand_over)
    pull.origin.route(name, chunked)
    _reader, writer = await asyncio.open_connection("127.0.0.1", pull.cdn.edge.server.port)
    try:
        writer.write(f"GET /{ZONE}{name} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
        await writer.drain()

        async def asked() -> bool:
            return pull.origin.count(name) == 1

        await wait_until(asked, "the first request's origin request")
        requests = [asyncio.ensure_future(pull.get(name)) for _ in range(waiting)]

        async def all_joined() -> bool:
            return flights.joined(key) == waiting

        await wait_until(all_joined, "the other requests waiting for the first one's fill")
        go.set()
        answers = await asyncio.gather(*requests)
    finally:
        writer.close()
    assert [(resp.status, await resp.read(), resp.headers["X-Cache"]) for resp in answers] == [
        (200, body, "HIT")] * waiting
    assert pull.origin.count(name) == 1


async def test_an_unsafe_request_is_forwarded_with_its_body_and_invalidates_its_url(pull: Pull) -> None:
    async def resource(request: web.Request) -> web.StreamResponse:
        if request.method == "POST":
            return web.Response(status=201, body=b"created")
        return web.Response(body=b"listing", headers=LONG)

    pull.origin.route("/items", resource)
    assert (await pull.get("/items")).headers["X-Cache"] == "MISS"
    assert (await pull.get("/items")).headers["X-Cache"] == "HIT"
    posted = await pull.cdn.edge.post(f"/{ZONE}/items", data=b"name=new")
    assert (posted.status, await posted.read(), posted.headers["X-Cache"]) == (201, b"created", "PASS")
    (seen_post,) = [seen for seen in pull.origin.requests("/items") if seen.method == "POST"]
    assert seen_post.body == b"name=new"
    after = await pull.get("/items")
    assert (after.headers["X-Cache"], await after.read()) == ("MISS", b"listing")
    assert pull.origin.count("/items") == 2


async def test_an_unsafe_request_to_a_rewritten_url_goes_where_its_reads_go_and_invalidates_their_copy(
        pull: Pull) -> None:
    """A `_redirects` rewrite (200) answers a URL's GETs with another path's: a POST to the URL went to the origin at
    the URL itself, a path the origin may not have (here 404), and its success dropped that path's copy, not the one
    the URL's GETs are answered with (still a HIT of the old listing). A redirect still answers GET and HEAD only."""
    name, target, moved = "/rewrite-form/old", "/rewrite-form/new", "/rewrite-form/moved"

    async def resource(request: web.Request) -> web.StreamResponse:
        if request.method == "POST":
            return web.Response(status=201, body=b"created")
        return web.Response(body=b"listing", headers=LONG)

    pull.origin.route(target, resource)
    pull.origin.route(moved, resource)
    await pull.redirects(f"/{ZONE}{name} /{ZONE}{target} 200\n/{ZONE}{moved} /{ZONE}{target} 301\n")
    try:
        assert (await pull.get(name)).headers["X-Cache"] == "MISS"
        assert (await pull.get(name)).headers["X-Cache"] == "HIT"
        posted = await pull.cdn.edge.post(f"/{ZONE}{name}", data=b"name=new")
        assert (posted.status, await posted.read(), posted.headers["X-Cache"]) == (201, b"created", "PASS")
        assert [seen.method for seen in pull.origin.requests(target)] == ["GET", "POST"]
        assert pull.origin.requests(name) == []
        after = await pull.get(name)
        assert (after.status, after.headers["X-Cache"], await after.read()) == (200, "MISS", b"listing")
        # A POST to a URL a redirect answers goes to the origin at that URL, as before.
        posted = await pull.cdn.edge.post(f"/{ZONE}{moved}", data=b"name=new", allow_redirects=False)
        assert (posted.status, await posted.read()) == (201, b"created")
        assert [seen.method for seen in pull.origin.requests(moved)] == ["POST"]
    finally:
        await pull.redirects("")


async def test_an_unsafe_request_to_the_default_hosts_root_a_rewrite_names_reaches_that_path(pull: Pull) -> None:
    """`/` of the default host is 404 unless a `_redirects` rule names it, and a rewrite names it for every method: a
    POST to `/` under `/ /<zone>/<path> 200` was 404, where the rule's GET was the origin's page."""
    target = "/rewrite-root/home"

    async def resource(request: web.Request) -> web.StreamResponse:
        if request.method == "POST":
            return web.Response(status=201, body=b"created")
        return web.Response(body=b"home", headers=LONG)

    pull.origin.route(target, resource)
    await pull.redirects(f"/ /{ZONE}{target} 200\n")
    try:
        got = await pull.cdn.edge.get("/")
        assert (got.status, await got.read()) == (200, b"home")
        posted = await pull.cdn.edge.post("/", data=b"name=new")
        assert (posted.status, await posted.read()) == (201, b"created")
        assert [seen.method for seen in pull.origin.requests(target)] == ["GET", "POST"]
    finally:
        await pull.redirects("")
    await expect_error(await pull.cdn.edge.post("/", data=b"x"), 404, "NotFound")


@pytest.mark.parametrize("host", ["assets.origin.example.", "[2001:db8::1]:8080"])
async def test_the_origin_gets_a_host_header_in_any_form_a_host_field_may_have(pull: Pull, host: str) -> None:
    """An absolute name (the Host the edge sends by default for an origin URL naming one) or an IPv6 literal as
    the zone's HostHeader (the zones API refused both) is the Host the origin gets, as set."""
    zone = "hostform" + str(len(host))
    origin_url = str(pull.cdn.node.config.pull_zones[ZONE].origin.url)
    await add_pull_zone(pull.cdn, zone, {"Url": origin_url, "HostHeader": host})
    pull.origin.answer(f"/{zone}-host.txt", b"ok", headers=LONG)
    resp = await pull.cdn.edge.get(f"/{zone}/{zone}-host.txt")
    assert (resp.status, await resp.read()) == (200, b"ok")
    (seen,) = pull.origin.requests(f"/{zone}-host.txt")
    assert seen.headers.getall("Host") == [host]


async def test_the_origin_gets_the_zones_fields_and_never_the_clients_overrides(pull: Pull) -> None:
    pull.origin.answer("/fields.txt", b"ok", headers=LONG)
    resp = await pull.get("/fields.txt", headers={
        "X-Client-Note": "end-to-end", "Connection": "keep-alive, X-Custom-Hop", "X-Custom-Hop": "hop",
        "Keep-Alive": "timeout=5", "TE": "trailers", "Proxy-Authorization": "Basic c2VjcmV0",
        "X-Forwarded-Host": "evil.example", "X-Original-URL": "/admin", "X-Rewrite-URL": "/admin",
        "X-HTTP-Method-Override": "DELETE", SECRET[0]: "forged", "X-Forwarded-For": "203.0.113.9",
        "X-Forwarded-Proto": "https", "Forwarded": "for=203.0.113.9;proto=https", "Via": "1.1 spoofed"})
    assert (resp.status, await resp.read()) == (200, b"ok")
    (seen,) = pull.origin.requests("/fields.txt")
    assert seen.headers["Host"] == HOST_HEADER
    assert seen.headers[SECRET[0]] == SECRET[1]            # the zone's value, not the client's
    assert seen.headers.getall(SECRET[0]) == [SECRET[1]]
    assert seen.headers["X-Client-Note"] == "end-to-end"
    assert seen.headers.getall("Via") == ["1.1 assetcdn"]
    # The client's address and scheme as the edge saw them, not as the client claimed them.
    assert (seen.headers["X-Forwarded-For"], seen.headers["X-Forwarded-Proto"]) == ("127.0.0.1", "http")
    assert "Forwarded" not in seen.headers
    for name in ("X-Custom-Hop", "Keep-Alive", "TE", "Proxy-Authorization", "X-Forwarded-Host", "X-Original-URL",
                 "X-Rewrite-URL", "X-HTTP-Method-Override"):
        assert name not in seen.headers, name


async def test_the_cdns_own_credentials_and_claimed_client_addresses_never_reach_the_origin(pull: Pull) -> None:
    """A tool that sends this CDN's key or token with every request (CDN paths too) must not hand it to an origin,
    which whoever may set a zone's origin chooses; and an address the client claims in a field some origins believe
    is not sent on as if the edge had seen it. The origin's own credentials (another Bearer token, its own
    x-api-key) go on, as any end-to-end field."""
    pull.origin.answer("/credentials.txt", b"ok", headers=LONG)
    resp = await pull.get("/credentials.txt", headers={
        "accesskey": "an-access-key", "AccountKey": "an-account-key",
        "True-Client-IP": "203.0.113.9", "CF-Connecting-IP": "203.0.113.9", "Fastly-Client-IP": "203.0.113.9",
        "X-Client-IP": "203.0.113.9", "X_Cluster_Client_IP": "203.0.113.9", "X-API-Key": "the-origins-own"})
    assert (resp.status, await resp.read()) == (200, b"ok")
    (seen,) = pull.origin.requests("/credentials.txt")
    for name in ("AccessKey", "AccountKey", "True-Client-IP", "CF-Connecting-IP", "Fastly-Client-IP",
                 "X-Client-IP", "X_Cluster_Client_IP"):
        assert name not in seen.headers, name
    assert seen.headers["X-API-Key"] == "the-origins-own"
    assert seen.headers["X-Forwarded-For"] == "127.0.0.1"

    pull.origin.answer("/token.txt", b"ok", headers=LONG)
    pull.origin.answer("/origin-token.txt", b"ok", headers=LONG)
    for path, authorization in (("/token.txt", "Bearer  cdnsk_" + "0" * 40), ("/origin-token.txt", "Bearer abc")):
        resp = await pull.get(path, headers={"Authorization": authorization})
        assert (resp.status, await resp.read()) == (200, b"ok")
    (token,) = pull.origin.requests("/token.txt")
    assert "Authorization" not in token.headers
    (origin_token,) = pull.origin.requests("/origin-token.txt")
    assert origin_token.headers["Authorization"] == "Bearer abc"


async def test_the_clients_overrides_spelled_with_underscores_never_reach_the_origin(pull: Pull) -> None:
    """Servers that pass fields to applications as CGI variables (gunicorn before 22, CGI and WSGI bridges) read
    `X_Forwarded_Host` as `X-Forwarded-Host` (both HTTP_X_FORWARDED_HOST): such a spelling must not carry a
    client's host, URL or method into an answer stored for everyone."""
    pull.origin.answer("/underscored.txt", b"ok", headers=LONG)
    resp = await pull.get("/underscored.txt", headers={
        "X_Forwarded_Host": "evil.example", "X_Original_URL": "/admin", "x_http_method_override": "DELETE",
        "X-Forwarded_Proto": "https", "X_Forwarded_For": "203.0.113.9", "Transfer_Encoding": "chunked",
        "X_Client_Note": "end-to-end", "Connection": "keep-alive, X_Hop", "X_Hop": "hop"})
    assert (resp.status, await resp.read()) == (200, b"ok")
    (seen,) = pull.origin.requests("/underscored.txt")
    sent = {name.lower().replace("_", "-") for name in seen.headers}
    for name in ("x-forwarded-host", "x-original-url", "x-http-method-override", "transfer-encoding", "x-hop"):
        assert name not in sent, name
    assert (seen.headers.getall("X-Forwarded-For"), seen.headers.getall("X-Forwarded-Proto")) == (["127.0.0.1"],
                                                                                                 ["http"])
    assert "X_Forwarded_For" not in seen.headers and "X-Forwarded_Proto" not in seen.headers
    assert seen.headers["X_Client_Note"] == "end-to-end"  # an underscore alone is no reason to drop a field


async def test_a_clients_conditions_spelled_with_underscores_never_reach_the_origin_on_a_fill(pull: Pull) -> None:
    """An origin that reads fields as CGI variables reads `If_Match` as `If-Match` (both HTTP_IF_MATCH). The edge
    took `If_Match: "other"` for no condition at all and passed it on a cache fill: the origin's 412, fresh as its
    answers are, was stored and answered every client; `If_None_Match: *` on a revalidation had the origin answer
    304 to a copy it had changed, which stayed the old one. A fill asks for the whole response, the conditions'
    underscore spellings left out too, as their own spellings are."""
    version: dict[str, str] = {"etag": '"v1"', "body": "first"}

    async def cgi_like(request: web.Request) -> web.StreamResponse:
        def members(name: str) -> list[str]:  # both spellings, one CGI variable
            values = request.headers.getall(name, []) + request.headers.getall(name.replace("-", "_"), [])
            return [member.strip() for value in values for member in value.split(",")]

        headers = {"ETag": version["etag"], "Cache-Control": "max-age=1"}
        if_match = members("If-Match")
        if if_match and version["etag"] not in if_match:
            return web.Response(status=412, headers=headers)
        if_none_match = members("If-None-Match")
        if "*" in if_none_match or version["etag"] in if_none_match:
            return web.Response(status=304, headers=headers)
        return web.Response(text=version["body"], headers=headers)

    pull.origin.route("/cgi-conditions.txt", cgi_like)
    first = await pull.get("/cgi-conditions.txt", headers={"If_Match": '"other"'})
    assert (first.status, await first.read(), first.headers["X-Cache"]) == (200, b"first", "MISS")
    plain = await pull.get("/cgi-conditions.txt")
    # The stored answer, fresh (HIT) or, its max-age=1 gone (its Date's second began before it came), confirmed
    # (REVALIDATED): the 200, never an answer to the first client's condition.
    assert (plain.status, await plain.read()) == (200, b"first")
    assert plain.headers["X-Cache"] in ("HIT", "REVALIDATED")
    version.update(etag='"v2"', body="second")

    async def changed() -> bool:  # once stale, revalidated: the origin's new answer
        resp = await pull.get("/cgi-conditions.txt", headers={"If_None_Match": "*"})
        return (resp.status, await resp.read()) == (200, b"second")

    await wait_until(changed, "the changed answer after a revalidation")
    assert all("If_Match" not in seen.headers and "If_None_Match" not in seen.headers
               for seen in pull.origin.requests("/cgi-conditions.txt"))


@pytest.mark.parametrize("target", [f"/{ZONE}/a/../secret.txt", f"/{ZONE}/a/%2e%2e/secret.txt",
                                    f"/{ZONE}/a/%2E%2e/secret.txt", f"/{ZONE}/..", f"/{ZONE}/a/./secret.txt"])
async def test_a_path_with_a_dot_segment_is_400_and_never_reaches_the_origin(pull: Pull, target: str) -> None:
    before = sum(len(seen) for seen in pull.origin.seen.values())
    assert await raw_status(pull.cdn, target, "127.0.0.1") == 400
    assert sum(len(seen) for seen in pull.origin.seen.values()) == before


@pytest.mark.parametrize("target", [f"/{ZONE}/a/..%2fsecret.txt", f"/{ZONE}/a%2f%2e%2e%2fsecret.txt",
                                    f"/{ZONE}/a/..%5csecret.txt", f"/{ZONE}/a/%2E%2E%5Csecret.txt"])
async def test_a_dot_segment_behind_an_encoded_separator_is_400_too(pull: Pull, target: str) -> None:
    """Origins that decode the path before resolving dot segments would read these as `a/../secret.txt`."""
    before = sum(len(seen) for seen in pull.origin.seen.values())
    assert await raw_status(pull.cdn, target, "127.0.0.1") == 400
    assert sum(len(seen) for seen in pull.origin.seen.values()) == before


@pytest.mark.parametrize(("target", "host"), [
    (f"/{ZONE}/..;/secret.txt", "127.0.0.1"), (f"/{ZONE}/a/..;jsessionid=1/secret.txt", "127.0.0.1"),
    (f"/{ZONE}/a/%2e%2e;/secret.txt", "127.0.0.1"), (f"/{ZONE}/a/..%3Bx/secret.txt", "127.0.0.1"),
    (f"/{ZONE}/a/.;/secret.txt", "127.0.0.1"), ("/..;/secret.txt", TENANT_HOST)])
async def test_a_dot_segment_with_path_parameters_is_400_too(pull: Pull, target: str, host: str) -> None:
    """Tomcat, Jetty and Spring drop a segment's `;` parameters before resolving dot segments: `/up/..;/secret.txt`
    is `/secret.txt` to them, outside the zone's path prefix."""
    before = sum(len(seen) for seen in pull.origin.seen.values())
    assert await raw_status(pull.cdn, target, host) == 400
    assert sum(len(seen) for seen in pull.origin.seen.values()) == before


@pytest.mark.parametrize(("target", "host"), [
    (f"/{ZONE}/a%0Ab.txt", "127.0.0.1"), (f"/{ZONE}/a%0ab.txt", "127.0.0.1"), (f"/{ZONE}/a%0Db.txt", "127.0.0.1"),
    (f"/{ZONE}/a%00b.txt", "127.0.0.1"), (f"/{ZONE}/%0A", "127.0.0.1"), ("/a%0Ab.txt", TENANT_HOST)])
async def test_a_path_with_an_encoded_nul_cr_or_lf_is_400_invalid_path(pull: Pull, target: str, host: str) -> None:
    """Such a path is refused before any origin request, in the envelope: 400 InvalidPath. One with an encoded LF
    was answered 404 NotFound ("No endpoint matches"), as if the edge had no such route: the CDN paths' route
    took no newline."""
    before = sum(len(seen) for seen in pull.origin.seen.values())
    assert await raw_status(pull.cdn, target, host) == 400
    resp = await pull.cdn.edge.get(target, headers={"Host": host})
    await expect_error(resp, 400, "InvalidPath")
    assert sum(len(seen) for seen in pull.origin.seen.values()) == before


async def test_path_parameters_without_dots_still_reach_the_origin(pull: Pull) -> None:
    pull.origin.answer("/params;v=2/file.txt", b"parameters", headers=LONG)
    resp = await pull.get("/params;v=2/file.txt")
    assert (resp.status, await resp.read()) == (200, b"parameters")


async def test_an_encoded_separator_without_dots_still_reaches_the_origin(pull: Pull) -> None:
    pull.origin.answer("/dir%2Ffile.txt", b"encoded slash", headers=LONG)
    resp = await pull.get("/dir%2Ffile.txt")
    assert (resp.status, await resp.read()) == (200, b"encoded slash")


async def test_an_origins_own_policy_never_lifts_the_sandbox_on_the_default_host(pull: Pull) -> None:
    """The default host serves every zone and the API as one browser origin: an origin's HTML there runs no script,
    whatever policy of its own it sends (one that allowed script, alone, would let the page read the other zones
    and register a service worker over them). On the zone's own host the origin's policy is its own."""
    own = "script-src 'unsafe-inline'"
    pull.origin.answer("/own-policy.html", b"<script>1</script>", headers={
        **LONG, "Content-Type": "text/html", "Content-Security-Policy": own})
    for x_cache in ("MISS", "HIT"):
        resp = await pull.get("/own-policy.html")
        assert resp.headers["X-Cache"] == x_cache
        assert resp.headers.getall("Content-Security-Policy") == [own, SANDBOX_CSP]
    tenant = await pull.cdn.edge.get("/own-policy.html", headers={"Host": TENANT_HOST})
    assert (tenant.headers["X-Cache"], tenant.headers.getall("Content-Security-Policy")) == ("HIT", [own])
    forwarded = await pull.cdn.edge.post(f"/{ZONE}/own-policy.html", data=b"x")
    assert forwarded.headers.getall("Content-Security-Policy") == [own, SANDBOX_CSP]


async def test_a_list_of_types_with_an_active_one_gets_the_sandbox_on_the_default_host(pull: Pull) -> None:
    """`Content-Type: image/png, text/html` is a page to a browser (Fetch takes the last type of the list): it went out
    without the sandbox, its first member being passive, and its script ran as the origin every zone shares."""
    pull.origin.answer("/listed-types.png", b"<script>1</script>", headers={
        **LONG, "Content-Type": "image/png, text/html"})
    for x_cache in ("MISS", "HIT"):
        resp = await pull.get("/listed-types.png")
        assert (resp.headers["X-Cache"], resp.headers["Content-Type"]) == (x_cache, "image/png, text/html")
        assert resp.headers.getall("Content-Security-Policy") == [SANDBOX_CSP]


async def test_the_dashboard_session_a_browser_sends_the_edges_never_reaches_an_origin(pull: Pull) -> None:
    """Cookies ignore ports, so a browser signed in to the dashboard sends `cdn_session` to the edges' default host
    too: the zone's origin was sent it with every request, and could sign in to the dashboard with it."""
    pull.origin.answer("/cookies.txt", b"ok", headers=LONG)
    pull.origin.answer("/only-session.txt", b"ok", headers=LONG)
    pull.cdn.edge.session.cookie_jar.clear()  # what an earlier test's origin set: the client's jar would send it
    resp = await pull.get("/cookies.txt", headers={"Cookie": "theme=dark; cdn_session=abc.def; cdn_logged_in=1"})
    assert resp.status == 200
    resp = await pull.get("/only-session.txt", headers={"Cookie": "cdn_session=abc.def"})
    assert resp.status == 200
    assert pull.origin.requests("/cookies.txt")[0].headers.getall("Cookie") == ["theme=dark"]
    assert "Cookie" not in pull.origin.requests("/only-session.txt")[0].headers


async def test_an_origin_cannot_set_the_dashboards_cookies(pull: Pull) -> None:
    """The reverse: cookies ignore ports, so an origin's `Set-Cookie: cdn_session=...` on the edges' host reached
    the dashboard's origin (its user signed in as the origin's choice, or out); its other cookies still go out."""
    pull.origin.answer("/sets-cookies.txt", b"ok", headers={
        **LONG, "Set-Cookie": "cdn_session=theirs; Path=/; HttpOnly"})
    pull.origin.route("/sets-several.txt", set_cookies(["theme=dark", " cdn_logged_in=1", "cdn_sessions=kept"]))
    others = ["theme=dark", "cdn_sessions=kept"]
    for name, host, expected in (("/sets-cookies.txt", None, []), ("/sets-several.txt", None, others),
                                 ("/sets-several.txt", TENANT_HOST, others)):
        resp = await pull.get(name) if host is None else await pull.cdn.edge.get(name, headers={"Host": host})
        assert (resp.status, resp.headers.getall("Set-Cookie", [])) == (200, expected), (name, host)


async def test_an_origin_sets_cookies_for_no_other_host_of_the_cdns(pull: Pull) -> None:
    """On the zone's tenant host (`<zone>.<base domain>`) an origin's `Set-Cookie` with `Domain=<base domain>` went
    out as it came, and browsers then sent that cookie to every zone's tenant host, whose origins were sent it: one
    zone's origin planted cookies for the others'. On the CDN's own hosts a cookie's Domain may name the request's
    host alone (RFC 6265 5.2.3: a leading dot ignored, without case, the last Domain counting); on the default host,
    every zone's, none (`Domain=<host>` reaches every host below it). On the zone's custom domain the origin's cookies
    are its own choice but for the base domain and the domains above it (`Domain=localhost` for `cdn.localhost`),
    every zone's tenant host being below them. Host-only cookies go out everywhere."""
    domain = "cookies.pulled-brand.example"
    resp = await pull.cdn.control.post(f"/api/core/zones/{ZONE}/domains", json={"Hostname": domain}, headers=ACCOUNT)
    assert resp.status == 201, await resp.text()

    async def domain_arrived() -> bool:
        return pull.cdn.node.config.zone_for_host(domain) == ZONE

    await wait_until(domain_arrived, "the custom domain reaching the edge")
    base = pull.cdn.node.config.base_domain
    tossed, host_only, own = f"a=1; Domain={base}; Path=/", "b=2; Path=/", f"c=3; Domain={TENANT_HOST}"
    spelled = [f"d=4; domain = .{TENANT_HOST.upper()}", f"e=5; Domain={base}; Domain={TENANT_HOST}",
               f"f=6; Domain={TENANT_HOST}; Domain=.{base}", "g=7; Domain=", f"h=8; Domain=other.{base}",
               f"i=9; Domain={base.partition('.')[2].upper()}"]
    pull.origin.route("/tossing.txt", set_cookies([tossed, host_only, own, *spelled]))
    expected = {TENANT_HOST: [host_only, own, spelled[0], spelled[1], spelled[3]],
                domain: [host_only, own, spelled[0], spelled[1], spelled[3], spelled[4]], None: [host_only, spelled[3]]}
    pull.cdn.edge.session.cookie_jar.clear()
    try:
        for host, cookies in expected.items():
            resp = await pull.get("/tossing.txt") if host is None else await pull.cdn.edge.get(
                "/tossing.txt", headers={"Host": host})
            assert (resp.status, resp.headers["X-Cache"], resp.headers.getall("Set-Cookie", [])) == (
                200, "PASS", cookies), host
            # An unsafe method's answer, passed on as it comes, is judged alike.
            target = "/tossing.txt" if host is not None else f"/{ZONE}/tossing.txt"
            posted = await pull.cdn.edge.post(target, data=b"x", headers={} if host is None else {"Host": host})
            assert (posted.status, posted.headers.getall("Set-Cookie", [])) == (200, cookies), host
    finally:
        pull.cdn.edge.session.cookie_jar.clear()  # what the origin set: the client's jar would send it on


async def test_a_custom_domain_beside_or_above_the_base_domain_sets_no_cookie_for_a_domain_holding_it(
        tmp_path: Path) -> None:
    """A custom domain beside the base domain (`shop.<parent>` for the base domain `cdn.<parent>`) or above it
    (`<parent>`) passed on an origin's `Set-Cookie` with `Domain=<parent>`, which browsers then sent to every zone's
    tenant host (`<zone>.cdn.<parent>`), whose origins were sent it: cookie tossing across tenants. On a custom domain
    a cookie for the base domain or a domain above it is left out; the custom domain's own, one for a domain that
    does not hold the base domain and host-only ones still go out."""
    parent = "pulled-brand.example"
    # Patient as `pull` is (its subject is not the origin's time): a loaded machine once took the 1 s first byte.
    async with shared_pull_zone(tmp_path, first_byte_timeout_s="30", ASSETCDN_DOMAINS_BASE_DOMAIN=f"cdn.{parent}") as own:
        beside, above, tenant = f"shop.{parent}", parent, f"{ZONE}.cdn.{parent}"
        for domain in (beside, above):
            resp = await own.cdn.control.post(f"/api/core/zones/{ZONE}/domains", json={"Hostname": domain},
                                              headers=ACCOUNT)
            assert resp.status == 201, await resp.text()

        async def arrived() -> bool:
            return all(own.cdn.node.config.zone_for_host(domain) == ZONE for domain in (beside, above))

        await wait_until(arrived, "the custom domains reaching the edge")
        tossed, top, base = f"a=1; Domain={parent}", "b=2; Domain=.EXAMPLE", f"c=3; Domain=cdn.{parent}"
        shop, host_only, elsewhere = f"d=4; Domain=.{beside}", "e=5; Path=/", "f=6; Domain=other-brand.example"
        last = f"g=7; Domain={beside}; Domain={parent}"
        own.origin.route("/tossing.txt", set_cookies([tossed, top, base, shop, host_only, elsewhere, last]))
        expected = {beside: [shop, host_only, elsewhere], above: [shop, host_only, elsewhere], tenant: [host_only]}
        for host, cookies in expected.items():
            resp = await own.cdn.edge.get("/tossing.txt", headers={"Host": host})
            assert (resp.status, resp.headers["X-Cache"], resp.headers.getall("Set-Cookie", [])) == (
                200, "PASS", cookies), host
            posted = await own.cdn.edge.post("/tossing.txt", data=b"x", headers={"Host": host})
            assert (posted.status, posted.headers.getall("Set-Cookie", [])) == (200, cookies), host


def set_cookies(cookies: list[str]) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """An origin handler answering with one Set-Cookie field per cookie."""
    async def answer(_request: web.Request) -> web.StreamResponse:
        response = web.Response(body=b"ok", headers=LONG)
        for cookie in cookies:
            response.headers.add("Set-Cookie", cookie)
        return response

    return answer


async def test_the_tenant_host_and_a_custom_domain_serve_every_path_from_the_origin(pull: Pull) -> None:
    domain = "assets.pulled-brand.example"
    resp = await pull.cdn.control.post(f"/api/core/zones/{ZONE}/domains", json={"Hostname": domain}, headers=ACCOUNT)
    assert resp.status == 201, await resp.text()

    async def domain_arrived() -> bool:
        return pull.cdn.node.config.zone_for_host(domain) == ZONE

    await wait_until(domain_arrived, "the custom domain reaching the edge")
    pull.origin.answer("/any/path.txt", b"tenant", headers=LONG)
    pull.origin.answer("/v1/logos/x.png", b"not a stored file", headers=LONG)
    for host, x_cache in ((TENANT_HOST, "MISS"), (TENANT_HOST, "HIT"), (domain, "HIT")):
        resp = await pull.cdn.edge.get("/any/path.txt", headers={"Host": host})
        assert (resp.status, await resp.read(), resp.headers["X-Cache"]) == (200, b"tenant", x_cache), host
        resp = await pull.cdn.edge.get("/v1/logos/x.png", headers={"Host": host})
        assert (resp.status, await resp.read()) == (200, b"not a stored file"), host
    # The same URL of the zone on the default host is the same cached response.
    assert (await pull.get("/any/path.txt")).headers["X-Cache"] == "HIT"
    assert pull.origin.count("/any/path.txt") == 1


async def test_the_zones_own_host_serves_the_origins_root_on_every_request(pull: Pull) -> None:
    """`/` of a pull zone's tenant host is the origin's `/` (below its path prefix), as every other path of that host:
    the delivery route's pattern needs a character after the `/`, so the application answered 404 for it, and every
    request the hit path hands over (a browser's reload with `Cache-Control: max-age=0`, a stale copy, HTTP/1.0, a
    POST) got 404 where the first got the home page. `/` of the default host and of a stored zone's host stays 404."""
    async def home(request: web.Request) -> web.StreamResponse:
        return web.Response(body=b"home page " + request.method.encode(), headers=LONG)

    pull.origin.route("/", home)
    first = await pull.cdn.edge.get("/", headers={"Host": TENANT_HOST})
    assert (first.status, await first.read(), first.headers["X-Cache"]) == (200, b"home page GET", "MISS")
    again = await pull.cdn.edge.get("/", headers={"Host": TENANT_HOST})
    assert (again.status, await again.read(), again.headers["X-Cache"]) == (200, b"home page GET", "HIT")
    reload = await pull.cdn.edge.get("/", headers={"Host": TENANT_HOST, "Cache-Control": "max-age=0"})
    assert (reload.status, await reload.read(), reload.headers["X-Cache"]) == (200, b"home page GET", "MISS")
    # The same URL as `/<zone>/` on the default host: one cached response.
    assert (await pull.get("/")).headers["X-Cache"] == "HIT"
    posted = await pull.cdn.edge.post("/", data=b"form", headers={"Host": TENANT_HOST})
    assert (posted.status, await posted.read(), posted.headers["X-Cache"]) == (200, b"home page POST", "PASS")
    assert [seen.method for seen in pull.origin.requests("/")] == ["GET", "GET", "POST"]
    await expect_error(await pull.cdn.edge.get("/"), 404, "NotFound")
    await expect_error(await pull.cdn.edge.get("/", headers={"Host": "other.cdn.localhost"}), 404, "NotFound")
    await expect_error(await pull.cdn.edge.post("/", data=b"x"), 404, "NotFound")


async def test_a_large_body_streams_to_the_client_while_it_is_stored(pull: Pull) -> None:
    """The origin sends the first half and waits for the client to have read some of it: an edge that held the
    body back until it had all of it would never answer."""
    data = os.urandom(5 * 1024 * 1024)
    half = len(data) // 2
    client_reading = asyncio.Event()

    async def halves(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers=LONG)
        response.content_length = len(data)
        await response.prepare(request)
        await response.write(data[:half])
        await client_reading.wait()
        await response.write(data[half:])
        await response.write_eof()
        return response

    pull.origin.route("/large.bin", halves)
    resp = await pull.cdn.edge.get(f"/{ZONE}/large.bin")
    assert (resp.status, resp.headers["X-Cache"], resp.content_length) == (200, "MISS", len(data))
    start = await asyncio.wait_for(resp.content.readexactly(1024 * 1024), WAIT_S)
    client_reading.set()
    assert start + await resp.read() == data
    again = await pull.get("/large.bin")
    assert (again.headers["X-Cache"], await again.read()) == ("HIT", data)
    assert pull.origin.count("/large.bin") == 1


# --- more of the serve sequence -----------------------------------------------------------------------------


async def test_head_on_a_miss_fetches_and_stores_the_whole_response(pull: Pull) -> None:
    pull.origin.answer("/head.txt", b"head then get", headers=LONG)
    head = await pull.cdn.edge.head(f"/{ZONE}/head.txt")
    assert (head.status, await head.read(), head.headers["X-Cache"]) == (200, b"", "MISS")
    assert head.headers["Content-Length"] == str(len(b"head then get"))
    get = await pull.get("/head.txt")
    assert (get.status, await get.read(), get.headers["X-Cache"]) == (200, b"head then get", "HIT")
    assert [seen.method for seen in pull.origin.requests("/head.txt")] == ["GET"]


async def test_the_query_is_sent_to_the_origin_and_is_part_of_the_key(pull: Pull) -> None:
    async def echo(request: web.Request) -> web.StreamResponse:
        return web.Response(body=request.query_string.encode(), headers=LONG)

    pull.origin.route("/query.txt", echo)
    for query, x_cache in (("a=1", "MISS"), ("a=2", "MISS"), ("a=1", "HIT"), ("a=2", "HIT")):
        resp = await pull.get(f"/query.txt?{query}")
        assert (await resp.read(), resp.headers["X-Cache"]) == (query.encode(), x_cache)
    assert pull.origin.count("/query.txt") == 2


async def test_a_response_with_more_than_16_kb_of_caching_directives_is_passed_on_not_stored(pull: Pull) -> None:
    """A stored response's directives are read again at every look-up on the application's path: a head full of
    them (up to about 1 MB) cost every request for the URL some 0.3 s of the worker's event loop."""
    many = ", ".join(f'ext{i}="v"' for i in range(600))  # 6 KB a line

    async def verbose(_request: web.Request) -> web.StreamResponse:
        response = web.Response(body=b"verbose", headers={"Cache-Control": "max-age=600"})
        for _ in range(3):
            response.headers.add("Cache-Control", many)
        return response

    pull.origin.route("/verbose.txt", verbose)
    for _ in range(2):
        resp = await pull.get("/verbose.txt")
        assert (resp.status, await resp.read(), resp.headers["X-Cache"]) == (200, b"verbose", "PASS")
        assert resp.headers["Cache-Status"] == "assetcdn; fwd=uri-miss; detail=no-store"
    assert pull.origin.count("/verbose.txt") == 2


async def test_a_304_to_a_request_without_conditions_is_502_not_passed_on(pull: Pull) -> None:
    """The fill sends no condition (the client's own are answered here): a 304 from the origin answers none, and
    passed on it would leave a client that asked for the body with no body and nothing to reuse."""
    pull.origin.answer("/unasked-304.txt", status=304, headers={**LONG, "ETag": '"e1"'})
    for headers in ({}, {"If-None-Match": '"e1"'}):
        resp = await pull.get("/unasked-304.txt", headers=headers)
        await expect_error(resp, 502, "OriginUnreachable")
    assert pull.origin.count("/unasked-304.txt") == 2


@pytest.mark.parametrize("lifetime", ["max-age=1", "max-age=1, stale-while-revalidate=60"])
async def test_a_304_to_the_revalidation_of_a_response_without_validators_does_not_refresh_it(
        pull: Pull, lifetime: str) -> None:
    """A stale response without ETag or Last-Modified is asked for again without conditions: a 304 then answers
    none, so it does not make the old copy fresh for the 304's lifetime (nor, through it, a transform's source),
    in the foreground (502, as without a stored copy) or in stale-while-revalidate's background (still stale)."""
    name = "/plain-swr.txt" if "stale-while" in lifetime else "/plain-stale.txt"
    answers = 0

    async def origin(_request: web.Request) -> web.StreamResponse:
        nonlocal answers
        answers += 1
        if answers > 1:
            return web.Response(status=304, headers={"Cache-Control": "max-age=600"})
        return web.Response(body=b"old", headers={"Cache-Control": lifetime})

    pull.origin.route(name, origin)
    assert (await pull.get(name)).status == 200
    await asyncio.sleep(1.2)  # stale
    resp = await pull.get(name)
    if "stale-while" not in lifetime:
        await expect_error(resp, 502, "OriginUnreachable")
        return
    assert (resp.status, resp.headers["X-Cache"]) == (200, "STALE")

    async def revalidated() -> bool:
        return pull.origin.count(name) >= 2

    await wait_until(revalidated, "the background revalidation")
    await asyncio.sleep(0.1)
    resp = await pull.get(name)
    assert (resp.status, resp.headers["X-Cache"]) == (200, "STALE"), resp.headers.get("Cache-Status")
    assert all("If-None-Match" not in seen.headers for seen in pull.origin.requests(name))


async def test_a_304_naming_another_last_modified_does_not_refresh_the_copy(pull: Pull) -> None:
    """An origin without ETags rolled back to an older release: the stored copy (the newer file) is revalidated
    with If-Modified-Since, which the older file meets, so the origin answers 304 with the older Last-Modified.
    That 304 is about another response (RFC 9111 4.3.4), but it refreshed the newer copy (under the older date),
    which then went on being served for the 304's lifetime. It is asked for whole, and the client gets the file
    the origin serves now."""
    newer, older = "Tue, 02 Jan 2024 00:00:00 GMT", "Mon, 01 Jan 2024 00:00:00 GMT"
    release = {"body": "release 2", "modified": newer, "cache": "max-age=1"}

    async def origin(request: web.Request) -> web.StreamResponse:
        headers = {"Last-Modified": release["modified"], "Cache-Control": release["cache"]}
        since = http_date(request.headers.get("If-Modified-Since"))
        modified = http_date(release["modified"])
        if since is not None and modified is not None and modified <= since:
            return web.Response(status=304, headers=headers)
        return web.Response(body=release["body"].encode(), headers=headers)

    pull.origin.route("/rolled-back.txt", origin)
    assert (await pull.get("/rolled-back.txt")).headers["X-Cache"] == "MISS"
    release.update(body="release 1", modified=older, cache="max-age=600")
    answer = await answer_changes(pull, "/rolled-back.txt", "MISS")
    assert (await answer.read(), answer.headers["Last-Modified"]) == (b"release 1", older)
    hit = await pull.get("/rolled-back.txt")
    assert (await hit.read(), hit.headers["X-Cache"]) == (b"release 1", "HIT")
    seen = pull.origin.requests("/rolled-back.txt")
    assert [s.headers.get("If-Modified-Since") for s in seen] == [None, newer, None]


async def test_a_clients_own_conditions_are_answered_from_the_stored_response(pull: Pull) -> None:
    pull.origin.answer("/conditional.txt", b"etagged", headers={**LONG, "ETag": '"e1"'})
    resp = await pull.get("/conditional.txt", headers={"If-None-Match": '"e1"'})
    assert resp.status in (200, 304)  # the fill asks for the whole response
    assert "If-None-Match" not in pull.origin.requests("/conditional.txt")[0].headers
    matched = await pull.get("/conditional.txt", headers={"If-None-Match": '"e1"'})
    assert (matched.status, await matched.read(), matched.headers["ETag"]) == (304, b"", '"e1"')
    other = await pull.get("/conditional.txt", headers={"If-None-Match": '"e0"'})
    assert (other.status, await other.read()) == (200, b"etagged")
    assert pull.origin.count("/conditional.txt") == 1


async def test_an_etag_with_bytes_beyond_ascii_is_matched_on_hits_as_by_the_application(pull: Pull) -> None:
    """An entity-tag may hold bytes beyond ASCII (RFC 9110 8.8.3's obs-text); the edge passes an origin's UTF-8
    ETag on as it came, and a client sends it back so. The hit path read the client's If-None-Match as Latin-1, a
    character per byte, so its fresh hits never matched such an ETag and answered the whole body (200) where the
    application, reading the field as UTF-8, answers 304."""
    etag = '"caf\u00e9-1"'
    pull.origin.answer("/utf8-etag.txt", b"etagged", headers={**LONG, "ETag": etag})
    first = await pull.get("/utf8-etag.txt")
    assert (first.headers["X-Cache"], first.headers["ETag"]) == ("MISS", etag)
    hit = await pull.get("/utf8-etag.txt")
    assert (hit.headers["X-Cache"], hit.headers["ETag"]) == ("HIT", etag)
    for _ in range(3):  # the hit path answers once the hit is prepared
        matched = await pull.get("/utf8-etag.txt", headers={"If-None-Match": hit.headers["ETag"]})
        assert (matched.status, await matched.read(), matched.headers["ETag"]) == (304, b"", etag)
        listed = await pull.get("/utf8-etag.txt", headers={"If-None-Match": f'"other", {etag}'})
        assert (listed.status, await listed.read()) == (304, b"")
    other = await pull.get("/utf8-etag.txt", headers={"If-None-Match": '"caf-1"'})
    assert (other.status, await other.read()) == (200, b"etagged")
    assert pull.origin.count("/utf8-etag.txt") == 1


async def test_an_if_modified_since_that_is_no_http_date_is_ignored(pull: Pull) -> None:
    """RFC 9110 13.1.3: an If-Modified-Since that is not a valid HTTP-date is ignored, the whole response sent. The
    dates of stored responses are read leniently, and so was this one: a time without seconds, another zone, text
    after the date were taken for a date (`Mon, 01 Jan 2024 00:00 GMT` at or after the Last-Modified: 304). The three
    forms of HTTP-date (5.6.7) are still compared."""
    modified = "Mon, 01 Jan 2024 00:00:00 GMT"
    pull.origin.answer("/since.txt", b"dated", headers={**LONG, "Last-Modified": modified})
    assert (await pull.get("/since.txt")).headers["X-Cache"] == "MISS"
    for since, status in (("Mon, 01 Jan 2024 00:00 GMT", 200), ("Mon, 01 Jan 2024 00:00:00 EST", 200),
                          (f"{modified} and later", 200), ("mon, 01 jan 2024 00:00:00 gmt", 200),
                          ("01 Jan 2024 00:00:00 GMT", 200), (f"{modified}, {modified}", 200),
                          (modified, 304), ("Monday, 01-Jan-24 00:00:00 GMT", 304),
                          ("Mon Jan  1 00:00:00 2024", 304), ("Sun, 31 Dec 2023 23:59:59 GMT", 200)):
        for method in ("GET", "HEAD"):
            resp = await pull.cdn.edge.request(method, f"/{ZONE}/since.txt", headers={"If-Modified-Since": since})
            body = await resp.read()
            assert (resp.status, body) == (status, b"dated" if status == 200 and method == "GET" else b""), since
            assert resp.headers["X-Cache"] == "HIT"
    assert pull.origin.count("/since.txt") == 1


async def test_if_match_and_if_unmodified_since_are_the_origins_to_evaluate(pull: Pull) -> None:
    """A client resuming a download of the version it has (`If-Match` or `If-Unmodified-Since` with a Range) while
    the edge holds an older one: the edge answered the range from its copy, ignoring the precondition, so the
    client joined bytes of two versions. A cache does not evaluate them (RFC 9111 4.3.2): the request goes to the
    origin as it is, which answers it, and the stored copy is neither used nor replaced."""
    versions = {"current": "first version, stored", "etag": '"v1"', "modified": "Mon, 01 Jan 2024 00:00:00 GMT"}

    async def origin(request: web.Request) -> web.StreamResponse:
        headers = {**LONG, "ETag": versions["etag"], "Last-Modified": versions["modified"]}
        if_match = request.headers.get("If-Match")
        if if_match is not None and if_match != versions["etag"]:
            return web.Response(status=412, headers=headers)
        if request.headers.get("If-Unmodified-Since", versions["modified"]) != versions["modified"]:
            return web.Response(status=412, headers=headers)
        body = versions["current"].encode()
        if request.headers.get("Range") == "bytes=0-6":
            return web.Response(status=206, body=body[:7], headers={**headers, "Content-Range": f"bytes 0-6/{len(body)}"})
        return web.Response(body=body, headers=headers)

    pull.origin.route("/resumed.bin", origin)
    assert (await pull.get("/resumed.bin")).headers["X-Cache"] == "MISS"
    await answer_changes(pull, "/resumed.bin", "HIT")
    versions.update(current="second version, current", etag='"v2"', modified="Tue, 02 Jan 2024 00:00:00 GMT")
    for condition in ({"If-Match": '"v2"'}, {"If-Unmodified-Since": "Tue, 02 Jan 2024 00:00:00 GMT"}):
        resp = await pull.get("/resumed.bin", headers={**condition, "Range": "bytes=0-6"})
        assert (resp.status, await resp.read(), resp.headers["X-Cache"]) == (206, b"second ", "PASS"), condition
        assert resp.headers["Cache-Status"] == "assetcdn; fwd=request"
        seen = pull.origin.requests("/resumed.bin")[-1].headers
        assert (seen.get("Range"), {name: seen.get(name) for name in condition}) == ("bytes=0-6", condition)
    for condition in ({"If-Match": '"v1"'}, {"If-Unmodified-Since": "Mon, 01 Jan 2024 00:00:00 GMT"}):
        resp = await pull.get("/resumed.bin", headers={**condition, "Range": "bytes=8-10"})
        assert (resp.status, resp.headers["X-Cache"]) == (412, "PASS"), condition
    stored = await pull.get("/resumed.bin")  # the stored copy stays as it was, and answers the others
    assert (await stored.read(), stored.headers["X-Cache"]) == (b"first version, stored", "HIT")
    assert pull.origin.count("/resumed.bin") == 5
    # Such a request is never answered from the cache, so a client that wants only that gets 504 (RFC 9111 5.2.1.7).
    await expect_error(await pull.get("/resumed.bin", headers={"If-Match": '"v2"', "Cache-Control": "only-if-cached"}),
                       504, "NotCached")
    assert pull.origin.count("/resumed.bin") == 5


async def test_a_412_is_never_stored_and_one_to_the_edges_own_validators_is_asked_again_whole(pull: Pull) -> None:
    """An origin that answers the edge's revalidation (`If-None-Match` of its stale copy) with 412 rather than 304
    (not conforming: RFC 9110 13.1.2) and a lifetime: the edge relayed that 412 to its client, which had sent no
    condition, and stored it as the URL's answer, every client's for its lifetime. A 412 answers a request's own
    conditions, never the URL: it is not stored, and one to the edge's own validators is asked again without them,
    in the foreground as in the background (stale-while-revalidate); the 200 then replaces the stale copy."""
    async def refusing(request: web.Request) -> web.StreamResponse:
        if request.headers.get("If-None-Match") is not None:
            return web.Response(status=412, text="refused", headers=LONG)
        lifetime = "max-age=1, stale-while-revalidate=60" if "background" in request.path else "max-age=1"
        return web.Response(text="the body", headers={"ETag": '"v1"', "Cache-Control": lifetime})

    for name in ("/refused-412.txt", "/refused-412-background.txt"):
        pull.origin.route(name, refusing)
        assert (await pull.get(name)).headers["X-Cache"] == "MISS"
    again = await answer_changes(pull, "/refused-412.txt", "MISS")
    assert (again.status, await again.read()) == (200, b"the body")
    assert [seen.headers.get("If-None-Match") for seen in pull.origin.requests("/refused-412.txt")] == [
        None, '"v1"', None]
    after = await pull.get("/refused-412.txt")
    assert (after.status, await after.read(), after.headers["X-Cache"]) == (200, b"the body", "HIT")

    stale = await answer_changes(pull, "/refused-412-background.txt", "STALE")
    assert (stale.status, await stale.read()) == (200, b"the body")

    async def asked_again() -> bool:
        return len(pull.origin.requests("/refused-412-background.txt")) == 3

    await wait_until(asked_again, "the background revalidation asking again without its validators")
    fresh = await answer_changes(pull, "/refused-412-background.txt", "HIT")
    assert (fresh.status, await fresh.read()) == (200, b"the body")
    assert [seen.headers.get("If-None-Match") for seen in pull.origin.requests("/refused-412-background.txt")][:3] == [
        None, '"v1"', None]

    # A 412 to a request without conditions (an origin that answers so whatever it is asked) is not stored either.
    pull.origin.answer("/always-412.txt", b"refused", status=412, headers=LONG)
    for _ in range(2):
        resp = await pull.get("/always-412.txt")
        assert (resp.status, resp.headers["X-Cache"]) == (412, "PASS")
        assert resp.headers["Cache-Status"] == "assetcdn; fwd=uri-miss; detail=request-error"
    assert pull.origin.count("/always-412.txt") == 2


async def test_a_304_without_a_date_makes_the_refreshed_response_young_again(pull: Pull) -> None:
    """An origin whose 304 carries no Date (one without a clock, RFC 9110 6.6.1): the refreshed response kept the
    first response's Date, so its age went on counting from then (RFC 9111 4.2.3). Here the answer after the
    revalidation still said Age 50 and ttl 49; an entry staler than its lifetime was stale again at once, and
    every request revalidated. The 304 is dated when it arrived, as the recipient of an undated response must."""
    answered_at = formatdate(time.time() - 50, usegmt=True).encode()

    async def origin(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        common = b'ETag: "d"\r\nCache-Control: max-age=100\r\nConnection: close\r\n'
        if b"\r\nif-none-match:" in head.lower():
            writer.write(b"HTTP/1.1 304 Not Modified\r\n" + common + b"\r\n")
        else:
            writer.write(b"HTTP/1.1 200 OK\r\nDate: " + answered_at + b"\r\n" + common
                         + b"Content-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(origin, "127.0.0.1", 0)
    try:
        await add_pull_zone(pull.cdn, "undated", {"Url": f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"})
        assert (await pull.cdn.edge.get("/undated/page.txt")).headers["X-Cache"] == "MISS"
        hit = await pull.cdn.edge.get("/undated/page.txt")
        assert hit.headers["X-Cache"] == "HIT" and int(hit.headers["Age"]) >= 50   # 50 s and the time since
        started = time.time()
        revalidated = await pull.cdn.edge.get("/undated/page.txt", headers={"Cache-Control": "no-cache"})
        assert (revalidated.headers["X-Cache"], await revalidated.read()) == ("REVALIDATED", b"hello")
        again = await pull.cdn.edge.get("/undated/page.txt")
        since = time.time() - started  # what the refreshed response's age may be, beside the Date's whole seconds
        assert again.headers["X-Cache"] == "HIT" and int(again.headers["Cache-Status"].rsplit("=", 1)[1]) >= 98 - since
        for answer in (revalidated, again):
            assert int(answer.headers["Age"]) <= 2 + since and answer.headers["Date"] != answered_at.decode()
    finally:
        server.close()
        await server.wait_closed()


async def test_a_304_without_an_age_makes_the_refreshed_response_young_again(pull: Pull) -> None:
    """The first response came with an Age (the origin is behind a cache of its own), its 304 with none: the stored
    Age stayed beside the 304's fields, so the refreshed response counted that age again (RFC 9111 4.2.3's
    age_value): answered with Age 50 and more after the origin had just confirmed it, and 50 s short of the
    304's lifetime. A 304 without an Age is the origin's own answer now: the age is that exchange's alone."""
    async def origin(request: web.Request) -> web.StreamResponse:
        if request.headers.get("If-None-Match") == '"a"':
            return web.Response(status=304, headers={"ETag": '"a"', "Cache-Control": "max-age=600"})
        return web.Response(body=b"aged", headers={"ETag": '"a"', "Cache-Control": "max-age=600", "Age": "50"})

    pull.origin.route("/aged-304.txt", origin)
    assert (await pull.get("/aged-304.txt")).headers["X-Cache"] == "MISS"
    hit = await pull.get("/aged-304.txt")
    assert hit.headers["X-Cache"] == "HIT" and int(hit.headers["Age"]) >= 50
    started = time.time()
    revalidated = await pull.get("/aged-304.txt", headers={"Cache-Control": "no-cache"})
    assert (revalidated.headers["X-Cache"], await revalidated.read()) == ("REVALIDATED", b"aged")
    again = await pull.get("/aged-304.txt")
    since = time.time() - started
    assert again.headers["X-Cache"] == "HIT"
    assert int(again.headers["Cache-Status"].rsplit("=", 1)[1]) >= 598 - since
    for answer in (revalidated, again):
        assert int(answer.headers["Age"]) <= 2 + since


@pytest.mark.parametrize("status", ["000", "099", "600", "999"])
async def test_a_status_outside_100_to_599_is_the_origin_failing(pull: Pull, status: str) -> None:
    """An origin answering with three digits outside 100-599: passed on, the client got a malformed status line
    ("HTTP/1.1 0") or one no HTTP client knows. It is taken as the origin failing (RFC 9110 15: as a server error):
    502, or the stale copy where stale-if-error allows it."""
    answers = iter((b"200 OK\r\nCache-Control: max-age=0, stale-if-error=600", f"{status} Odd".encode(),
                    f"{status} Odd".encode()))

    async def origin(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 " + next(answers) + b"\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n"
                         b"Connection: close\r\n\r\nhello")
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(origin, "127.0.0.1", 0)
    zone = f"odd{status}"
    try:
        await add_pull_zone(pull.cdn, zone, {"Url": f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"})
        assert (await pull.cdn.edge.get(f"/{zone}/kept.txt")).headers["X-Cache"] == "MISS"
        stale = await pull.cdn.edge.get(f"/{zone}/kept.txt")
        assert (stale.status, stale.headers["X-Cache"], await stale.read()) == (200, "STALE", b"hello")
        assert stale.headers["Cache-Status"].endswith("detail=origin-unreachable")
        failed = await pull.cdn.edge.get(f"/{zone}/never-kept.txt")
        assert failed.status == 502 and (await failed.json())["error"]["code"] == "OriginUnreachable"
    finally:
        server.close()
        await server.wait_closed()


async def test_stale_while_revalidate_answers_stale_and_updates_in_the_background(pull: Pull) -> None:
    # The second version stays fresh once stored: with max-age=1 a loaded machine's poll found it stale again, and the
    # third origin request that revalidation made was one this origin had no answer for.
    versions = iter(((b"first", "max-age=1, stale-while-revalidate=600"), (b"second", "max-age=600")))

    async def changing(_request: web.Request) -> web.StreamResponse:
        body, cache_control = next(versions)
        return web.Response(body=body, headers={"Cache-Control": cache_control})

    pull.origin.route("/swr.txt", changing)
    assert (await pull.get("/swr.txt")).headers["X-Cache"] == "MISS"
    stale = await answer_changes(pull, "/swr.txt", "STALE")
    assert await stale.read() == b"first"
    assert stale.headers["Cache-Status"] == "assetcdn; hit; fwd=stale"

    async def replaced() -> bool:
        resp = await pull.get("/swr.txt")
        return await resp.read() == b"second" and resp.headers["X-Cache"] == "HIT"

    await wait_until(replaced, "the background revalidation storing the new response")
    assert pull.origin.count("/swr.txt") == 2


async def test_a_background_304_naming_another_etag_has_the_new_response_fetched_whole(pull: Pull) -> None:
    """stale-while-revalidate's revalidation answered 304 with another ETag (an origin whose servers tag one file
    differently, answering the If-Modified-Since both share): the 304 selects no stored response (RFC 9111
    4.3.4), so the stale copy stayed as it was, and every request until stale-while-revalidate ran out got the
    old body and asked the origin again. It is fetched whole, as a revalidation in the foreground does."""
    modified = "Mon, 01 Jan 2024 00:00:00 GMT"
    current = {"etag": '"a"', "body": "old body", "cache": "max-age=1, stale-while-revalidate=600"}

    async def origin(request: web.Request) -> web.StreamResponse:
        headers = {"ETag": current["etag"], "Last-Modified": modified, "Cache-Control": current["cache"]}
        if request.headers.get("If-Modified-Since") == modified:
            return web.Response(status=304, headers=headers)
        return web.Response(body=current["body"].encode(), headers=headers)

    pull.origin.route("/swr-other-etag.txt", origin)
    assert (await pull.get("/swr-other-etag.txt")).headers["X-Cache"] == "MISS"
    current.update(etag='"b"', body="new body", cache="max-age=600")
    stale = await answer_changes(pull, "/swr-other-etag.txt", "STALE")
    assert await stale.read() == b"old body"

    async def asked_whole() -> bool:
        return pull.origin.count("/swr-other-etag.txt") >= 3

    await wait_until(asked_whole, "the background revalidation asking for the response whole")
    fresh = await answer_changes(pull, "/swr-other-etag.txt", "HIT")
    assert (await fresh.read(), fresh.headers["ETag"]) == (b"new body", '"b"')
    seen = pull.origin.requests("/swr-other-etag.txt")
    assert [s.headers.get("If-None-Match") for s in seen] == [None, '"a"', None]
    assert "If-Modified-Since" not in seen[2].headers


@pytest.mark.parametrize("now", ["no-store", "private, max-age=600"])
async def test_a_background_revalidation_answered_with_what_may_not_be_kept_drops_the_stale_copy(
        patient_pull: Pull, now: str) -> None:
    """stale-while-revalidate's revalidation answered with a full response the edge may not keep (the origin
    now says `no-store` or `private`): the stale copy stayed, and every request until stale-while-revalidate ran
    out got the old body as STALE (and sent the origin another revalidation). A full answer says the stored copy
    is not current (RFC 9111 4.3.3): it is dropped, and the requests after it get the origin's own answer."""
    pull = patient_pull  # its subject is not the 1 s first byte, which a loaded machine took from one of its fills
    name = f"/swr-now-{now.split(',')[0]}.txt"
    current = {"body": "old body", "cache": "max-age=1, stale-while-revalidate=600"}

    async def origin(_request: web.Request) -> web.StreamResponse:
        return web.Response(body=current["body"].encode(), headers={"ETag": f'"{len(current["body"])}{now[0]}"',
                                                                    "Cache-Control": current["cache"]})

    pull.origin.route(name, origin)
    assert (await pull.get(name)).headers["X-Cache"] == "MISS"
    current.update(body="new body, not for caches", cache=now)
    stale = await answer_changes(pull, name, "STALE")
    assert await stale.read() == b"old body"

    async def revalidated() -> bool:
        return pull.origin.count(name) >= 2

    await wait_until(revalidated, "the background revalidation")
    passed = await answer_changes(pull, name, "PASS")
    assert (passed.status, await passed.read()) == (200, b"new body, not for caches")
    asked = pull.origin.count(name)
    again = await pull.get(name)
    assert (await again.read(), again.headers["X-Cache"]) == (b"new body, not for caches", "PASS")
    assert pull.origin.count(name) == asked + 1


@pytest.mark.parametrize("framing", ["declared", "chunked"])
async def test_a_background_revalidation_answered_with_a_body_too_large_to_keep_drops_the_stale_copy(
        pull: Pull, framing: str) -> None:
    """The file grew past `origin.max_object_mb`: stale-while-revalidate's revalidation read its new body up to the
    limit, kept nothing, and left the stale copy, so every request until stale-while-revalidate ran out got the
    old body and had the origin send the new one again (each time up to the limit). The copy is dropped, as for
    any full answer that may not be kept: the requests after it get the origin's new body."""
    name = f"/swr-grown-{framing}.bin"
    large = os.urandom(MAX_OBJECT_MB * 1024 * 1024 + 1)
    grown: list[bool] = []

    async def origin(request: web.Request) -> web.StreamResponse:
        if not grown:
            return web.Response(body=b"small", headers={"Cache-Control": "max-age=1, stale-while-revalidate=600"})
        response = web.StreamResponse(headers=LONG)
        if framing == "chunked":
            response.enable_chunked_encoding()
        else:
            response.content_length = len(large)
        await response.prepare(request)
        await response.write(large)
        await response.write_eof()
        return response

    pull.origin.route(name, origin)
    assert (await pull.get(name)).headers["X-Cache"] == "MISS"
    grown.append(True)
    stale = await answer_changes(pull, name, "STALE")
    assert await stale.read() == b"small"

    async def revalidated() -> bool:
        # Asked again while it is not under way: a stale answer given while the URL's fill was still landing (a
        # loaded machine) starts no revalidation of its own (one per URL at a time), the next stale request does.
        if pull.origin.count(name) < 2:
            await pull.get(name)
        return pull.origin.count(name) >= 2

    await wait_until(revalidated, "the background revalidation")

    async def grown_body() -> bool:
        resp = await pull.get(name)
        return resp.headers["X-Cache"] != "STALE"

    await wait_until(grown_body, "the stale copy dropped")
    resp = await pull.get(name)
    assert (resp.status, await resp.read()) == (200, large)


async def test_a_revalidation_answered_with_what_may_not_be_kept_leaves_no_copy_for_stale_if_error(
        pull: Pull) -> None:
    """A stale copy (with stale-if-error) is revalidated and the origin answers it whole, now `no-store`: that client
    gets the new answer, but the copy stayed, and when the origin failed later, the superseded body was answered
    as STALE. A full answer says the stored copy is not current (RFC 9111 4.3.3): it is dropped, as the background
    revalidation drops it, and the origin's error is passed on."""
    name = "/superseded-then-failing.txt"
    state = {"now": "cached"}

    async def origin(_request: web.Request) -> web.StreamResponse:
        if state["now"] == "cached":
            return web.Response(body=b"old body", headers={"ETag": '"old"',
                                                           "Cache-Control": "max-age=1, stale-if-error=600"})
        if state["now"] == "no-store":
            return web.Response(body=b"new body", headers={"Cache-Control": "no-store"})
        return web.Response(status=503, body=b"down")

    pull.origin.route(name, origin)
    assert (await pull.get(name)).headers["X-Cache"] == "MISS"
    state["now"] = "no-store"
    passed = await answer_changes(pull, name, "PASS")
    assert (await passed.read(), passed.headers["Cache-Status"]) == (b"new body", "assetcdn; fwd=stale; detail=no-store")
    state["now"] = "failing"
    failed = await pull.get(name)
    assert (failed.status, await failed.read(), failed.headers["X-Cache"]) == (503, b"down", "PASS")


async def test_a_revalidation_answered_with_a_chunked_body_found_too_large_leaves_no_copy_for_stale_if_error(
        pull: Pull) -> None:
    """A stale copy (with stale-if-error) is revalidated for a client and the origin answers it whole, chunked and
    longer than `origin.max_object_mb`: that client gets the new body, but the copy stayed (only one declared too
    large was dropped), and when the origin failed later the superseded body was answered as STALE. It is dropped
    once the body is found too large to keep, and the origin's error is passed on."""
    name = "/superseded-by-a-grown-chunked-body.bin"
    large = os.urandom(MAX_OBJECT_MB * 1024 * 1024 + 1)
    state = {"now": "cached"}

    async def origin(request: web.Request) -> web.StreamResponse:
        if state["now"] == "cached":
            return web.Response(body=b"old body", headers={"Cache-Control": "max-age=1, stale-if-error=600"})
        if state["now"] == "failing":
            return web.Response(status=503, body=b"down")
        response = web.StreamResponse(headers=LONG)
        response.enable_chunked_encoding()
        await response.prepare(request)
        await response.write(large)
        await response.write_eof()
        return response

    pull.origin.route(name, origin)
    assert (await pull.get(name)).headers["X-Cache"] == "MISS"
    state["now"] = "grown"
    grown = await answer_changes(pull, name, "MISS")
    assert await grown.read() == large

    async def dropped() -> bool:  # once the body passed the limit, off the event loop
        return stored_url(pull.cdn.node, ZONE, name) is None

    await wait_until(dropped, "the replaced copy dropped")
    state["now"] = "failing"
    failed = await pull.get(name)
    assert (failed.status, await failed.read(), failed.headers["X-Cache"]) == (503, b"down", "PASS")


async def test_a_requests_own_no_store_on_a_stale_copy_does_not_drop_it(pull: Pull) -> None:
    """The background revalidation of a request that says `no-store` itself keeps nothing of its answer (the
    request's wish), but the stale copy is not dropped for it: the origin did not say it may not be kept."""
    name = "/swr-request-no-store.txt"
    answers = iter((b"old body", b"new body"))

    async def origin(_request: web.Request) -> web.StreamResponse:
        return web.Response(body=next(answers, b"newer body"),
                            headers={"Cache-Control": "max-age=1, stale-while-revalidate=600"})

    pull.origin.route(name, origin)
    assert (await pull.get(name)).headers["X-Cache"] == "MISS"
    stale = await answer_changes(pull, name, "STALE", headers={"Cache-Control": "no-store"})
    assert await stale.read() == b"old body"

    async def revalidated() -> bool:
        return pull.origin.count(name) >= 2

    await wait_until(revalidated, "the background revalidation")
    await asyncio.sleep(0.2)  # its answer read (and not kept) by now
    kept = await pull.get(name, headers={"Cache-Control": "only-if-cached, max-stale"})
    assert (kept.status, await kept.read()) == (200, b"old body")


@pytest.mark.parametrize("status", [400, 429, 431])
@pytest.mark.parametrize("where", ["foreground", "background"])
async def test_an_origins_refusal_of_one_requests_own_fields_drops_no_stale_copy(
        pull: Pull, status: int, where: str) -> None:
    """A stale copy revalidated for a client whose own fields the origin refuses (400, 431: an error about that
    request's form, never stored) was dropped as if the origin had replaced the URL's response: one client's
    malformed or oversized field took the copy from every other client, so stale-if-error had nothing to answer the
    origin's failure with, and stale-while-revalidate's copy was gone. Such an error says nothing of the URL: the
    copy stays, in the foreground and in stale-while-revalidate's background alike."""
    name = f"/refused-fields-{where}-{status}.txt"
    kept_for = "stale-if-error=600" if where == "foreground" else "stale-while-revalidate=600"
    failing = {"now": False}

    async def origin(request: web.Request) -> web.StreamResponse:
        if "X-Refused" in request.headers:
            return web.Response(status=status, body=b"refused")
        if failing["now"]:
            return web.Response(status=503, body=b"down")
        return web.Response(body=b"old body", headers={"ETag": '"old"', "Cache-Control": f"max-age=1, {kept_for}"})

    pull.origin.route(name, origin)
    assert (await pull.get(name)).headers["X-Cache"] == "MISS"
    failing["now"] = True
    if where == "foreground":
        refused = await answer_changes(pull, name, "PASS", headers={"X-Refused": "1"})
        assert (refused.status, await refused.read()) == (status, b"refused")
        stale = await pull.get(name)
        assert (stale.status, await stale.read(), stale.headers["X-Cache"]) == (200, b"old body", "STALE")
        return
    stale = await answer_changes(pull, name, "STALE", headers={"X-Refused": "1"})
    assert await stale.read() == b"old body"

    async def revalidated() -> bool:
        return pull.origin.count(name) >= 2 and not pull.cdn.node.background

    await wait_until(revalidated, "the background revalidation")
    kept = await pull.get(name, headers={"Cache-Control": "only-if-cached, max-stale"})
    assert (kept.status, await kept.read()) == (200, b"old body")


async def test_stale_if_error_serves_the_stale_copy_when_the_origin_answers_5xx(pull: Pull) -> None:
    async def failing(_request: web.Request) -> web.StreamResponse:
        if pull.origin.count("/5xx.txt") == 1:
            return web.Response(body=b"good", headers={"Cache-Control": "max-age=1, stale-if-error=600"})
        return web.Response(status=503, body=b"overloaded")

    pull.origin.route("/5xx.txt", failing)
    assert (await pull.get("/5xx.txt")).headers["X-Cache"] == "MISS"
    stale = await answer_changes(pull, "/5xx.txt", "STALE")
    assert (stale.status, await stale.read()) == (200, b"good")
    assert stale.headers["Cache-Status"] == "assetcdn; hit; fwd=stale; fwd-status=503"


@pytest.mark.parametrize("status", [501, 505])
async def test_stale_if_error_does_not_hide_a_5xx_that_is_no_error_of_rfc_5861(pull: Pull, status: int) -> None:
    """RFC 5861 4: only 500, 502, 503 and 504 count as errors; a 501 or 505 is the origin's answer, passed on."""
    name = f"/5xx-{status}.txt"

    async def answering(_request: web.Request) -> web.StreamResponse:
        if pull.origin.count(name) == 1:
            return web.Response(body=b"good", headers={"Cache-Control": "max-age=1, stale-if-error=600"})
        return web.Response(status=status, body=b"the origin's own answer")

    pull.origin.route(name, answering)
    assert (await pull.get(name)).headers["X-Cache"] == "MISS"
    found: list[ClientResponse] = []

    async def asked_again() -> bool:
        resp = await pull.get(name)
        found[:] = [resp]
        return pull.origin.count(name) > 1

    await wait_until(asked_again, f"{name} asked of the origin again")
    resp = found[0]
    assert (resp.status, await resp.read()) == (status, b"the origin's own answer")
    assert resp.headers["X-Cache"] != "STALE"


async def test_an_origin_error_without_a_stored_copy_is_passed_on(pull: Pull) -> None:
    pull.origin.answer("/broken.txt", b"origin error page", status=500)
    for _ in range(2):
        resp = await pull.get("/broken.txt")
        assert (resp.status, await resp.read(), resp.headers["X-Cache"]) == (500, b"origin error page", "PASS")
    assert pull.origin.count("/broken.txt") == 2


async def test_hop_by_hop_fields_of_the_origin_never_reach_the_client(pull: Pull) -> None:
    headers = {**LONG, "Connection": "X-Origin-Hop", "X-Origin-Hop": "internal", "Keep-Alive": "timeout=99",
               "Proxy-Authenticate": "Basic", "X-Kept": "yes"}
    pull.origin.answer("/hop.txt", b"hop", headers=headers)
    for x_cache in ("MISS", "HIT"):
        resp = await pull.get("/hop.txt")
        assert (resp.headers["X-Cache"], resp.headers["X-Kept"]) == (x_cache, "yes")
        for name in ("X-Origin-Hop", "Keep-Alive", "Proxy-Authenticate"):
            assert name not in resp.headers, (x_cache, name)


async def test_a_chunked_answer_is_stored_whole(pull: Pull) -> None:
    parts = [os.urandom(64 * 1024) for _ in range(5)]

    async def chunked(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers=LONG)
        response.enable_chunked_encoding()
        await response.prepare(request)
        for part in parts:
            await response.write(part)
        await response.write_eof()
        return response

    pull.origin.route("/chunked.bin", chunked)
    first = await pull.get("/chunked.bin")
    assert (await first.read(), first.headers["X-Cache"]) == (b"".join(parts), "MISS")
    second = await pull.get("/chunked.bin")
    assert (await second.read(), second.headers["X-Cache"]) == (b"".join(parts), "HIT")
    assert second.headers["Content-Length"] == str(len(b"".join(parts)))
    assert pull.origin.count("/chunked.bin") == 1


async def test_a_body_the_origin_cuts_short_ends_the_connection_and_is_not_stored(pull: Pull) -> None:
    """The client must see a broken answer: the connection ends where the origin's body did, and a request
    pipelined behind it is not answered on it (its bytes would read as the rest of the body)."""
    async def cut(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers=LONG)
        response.content_length = 1000
        await response.prepare(request)
        await response.write(b"x" * 400)
        assert request.transport is not None
        request.transport.close()
        return response

    pull.origin.route("/cut.bin", cut)
    assert pull.cdn.edge.server.port is not None
    reader, writer = await asyncio.open_connection("127.0.0.1", pull.cdn.edge.server.port)
    try:
        writer.write(f"GET /{ZONE}/cut.bin HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode() * 2)
        received = await asyncio.wait_for(reader.read(), WAIT_S)
    finally:
        writer.close()
    head, _, body = received.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200") and b"\r\nContent-Length: 1000\r\n" in head, head
    assert body == b"x" * 400
    resp = await pull.cdn.edge.get(f"/{ZONE}/cut.bin")
    assert resp.headers["X-Cache"] == "MISS"
    with pytest.raises(ClientPayloadError):
        await resp.read()
    assert pull.origin.count("/cut.bin") == 2


async def test_a_purge_of_a_url_or_an_origin_tag_drops_what_it_names_only(pull: Pull) -> None:
    pull.origin.answer("/purge/url.txt", b"url", headers=LONG)
    pull.origin.answer("/purge/tagged.txt", b"tagged", headers={**LONG, "Cache-Tag": "news, sport"})
    pull.origin.answer("/purge/kept.txt", b"kept", headers={**LONG, "Cache-Tag": "news"})
    names = ("/purge/url.txt", "/purge/tagged.txt", "/purge/kept.txt")
    for name in names:
        assert (await pull.get(name)).headers["X-Cache"] == "MISS"
    for body in ({"urls": [f"/{ZONE}/purge/url.txt"]}, {"tags": ["sport"]}):
        resp = await pull.cdn.control.post("/api/purge", json=body, headers=PURGE)
        assert resp.status == 200, await resp.text()
    assert [(await pull.get(name)).headers["X-Cache"] for name in names] == ["MISS", "MISS", "HIT"]
    assert [pull.origin.count(name) for name in names] == [2, 2, 1]


async def test_a_zone_created_again_under_a_deleted_pull_zones_name_gets_nothing_it_stored(pull: Pull) -> None:
    """Whether the first owner's response was stored as it came or updated by a 304."""
    first, second = ScriptedOrigin(), ScriptedOrigin()

    async def revalidated(request: web.Request) -> web.StreamResponse:
        if request.headers.get("If-None-Match") == '"first"':
            return web.Response(status=304, headers={**LONG, "ETag": '"first"'})
        return web.Response(body=b"first owner", headers={"Cache-Control": "max-age=1", "ETag": '"first"'})

    first.route("/page.txt", revalidated)
    second.answer("/page.txt", b"second owner", headers=LONG)
    first_server, second_server = await serve_origin(first), await serve_origin(second)
    try:
        await add_pull_zone(pull.cdn, "churn", {"Url": f"http://127.0.0.1:{first_server.port}{PREFIX}"})
        assert (await pull.cdn.edge.get("/churn/page.txt")).headers["X-Cache"] == "MISS"

        async def updated_by_a_304() -> bool:
            return (await pull.cdn.edge.get("/churn/page.txt")).headers["X-Cache"] == "REVALIDATED"

        await wait_until(updated_by_a_304, "the first owner's response revalidated")
        assert (await pull.cdn.control.delete("/api/core/zones/churn", headers=ACCOUNT)).status == 200

        async def gone() -> bool:
            return "churn" not in pull.cdn.node.config.pull_zones

        await wait_until(gone, "the deleted zone leaving the edge's config")
        await add_pull_zone(pull.cdn, "churn", {"Url": f"http://127.0.0.1:{second_server.port}{PREFIX}"})
        resp = await pull.cdn.edge.get("/churn/page.txt")
        assert (await resp.read(), resp.headers["X-Cache"]) == (b"second owner", "MISS")
        assert (first.count("/page.txt"), second.count("/page.txt")) == (2, 1)
    finally:
        await first_server.close()
        await second_server.close()


async def test_a_body_above_the_object_limit_is_passed_on_whole_and_not_stored(pull: Pull) -> None:
    data = os.urandom(MAX_OBJECT_MB * 1024 * 1024 + 1)

    async def declared(_request: web.Request) -> web.StreamResponse:
        return web.Response(body=data, headers=LONG)

    pull.origin.route("/too-large.bin", declared)
    pull.origin.route("/too-large-chunked.bin", chunked_answer(data, LONG, 1024 * 1024))
    for _ in range(2):
        resp = await pull.get("/too-large.bin")
        assert (resp.status, await resp.read(), resp.headers["X-Cache"]) == (200, data, "PASS")
        assert resp.headers["Cache-Status"] == "assetcdn; fwd=uri-miss; detail=too-large"
        resp = await pull.get("/too-large-chunked.bin")   # found too large as it arrives, after its head went
        assert (resp.status, await resp.read()) == (200, data)
        assert resp.headers["X-Cache"] != "HIT"
    assert (pull.origin.count("/too-large.bin"), pull.origin.count("/too-large-chunked.bin")) == (2, 2)


def ranged_or_chunked(data: bytes, whole: Handler) -> Handler:
    """An origin route: `data`'s range (206) for a request with `Range: bytes=<first>-<last>`, else `whole`'s answer."""
    async def answer(request: web.Request) -> web.StreamResponse:
        asked = request.headers.get("Range", "")
        if not asked.startswith("bytes="):
            return await whole(request)
        first, _, last = asked.removeprefix("bytes=").partition("-")
        start, end = int(first), min(int(last) + 1, len(data)) if last else len(data)
        return web.Response(status=206, body=data[start:end], headers={
            **LONG, "Content-Range": f"bytes {start}-{end - 1}/{len(data)}"})

    return answer


async def test_a_chunked_body_found_over_the_object_limit_is_then_answered_as_one_declared_so(pull: Pull) -> None:
    """A chunked body found longer than `origin.max_object_mb` only while it was read was not remembered: every later
    request had the origin send it whole again, read at the origin's pace up to the limit under a head saying it
    was kept (`X-Cache: MISS`, `Cache-Status: ...; stored`), and a `Range` request got the whole `200` where one for
    a body declared too large gets the origin's `206`. The worker remembers the URL: what follows is answered as
    for a body declared too large (passed on, `detail=too-large`, the Range the origin's), until a purge."""
    name = "/too-large-chunked-remembered.bin"
    data = os.urandom(MAX_OBJECT_MB * 1024 * 1024 + 1)
    pull.origin.route(name, ranged_or_chunked(data, chunked_answer(data, LONG, 1024 * 1024)))
    first = await pull.get(name)
    assert (first.status, await first.read()) == (200, data)  # its head went before its length was known
    resp = await pull.get(name)
    assert (resp.status, await resp.read(), resp.headers["X-Cache"]) == (200, data, "PASS")
    assert resp.headers["Cache-Status"] == "assetcdn; fwd=uri-miss; detail=too-large"
    resp = await pull.get(name, headers={"Range": "bytes=10-19"})
    assert (resp.status, await resp.read(), resp.headers["X-Cache"]) == (206, data[10:20], "PASS")
    assert resp.headers["Content-Range"] == f"bytes 10-19/{len(data)}"
    # The range asked of the origin as it came, once: no whole body asked for first.
    assert [seen.headers.get("Range") for seen in pull.origin.requests(name)] == [None, None, "bytes=10-19"]
    await pull.cdn.purge_urls(f"/{ZONE}{name}")  # the URL asked for whole again, as if never seen
    resp = await pull.get(name)
    assert (resp.status, await resp.read(), resp.headers["X-Cache"]) == (200, data, "MISS")
    assert stored_url(pull.cdn.node, ZONE, name) is None


async def test_a_chunked_body_found_over_the_object_limit_leaves_the_other_variants_of_its_url_kept(
        pull: Pull) -> None:
    """The URL's memory of a body too large is not its other variants': an answer that varies (another
    Accept-Encoding's, here `X-Size`'s) may be small enough to keep, and is kept as before."""
    name = "/too-large-chunked-variant.bin"
    data = os.urandom(MAX_OBJECT_MB * 1024 * 1024 + 1)
    varied = {**LONG, "Vary": "X-Size"}
    large, small = chunked_answer(data, varied, 1024 * 1024), chunked_answer(b"small", varied)

    async def sized(request: web.Request) -> web.StreamResponse:
        return await (small if request.headers.get("X-Size") == "small" else large)(request)

    pull.origin.route(name, sized)
    assert await (await pull.get(name, headers={"X-Size": "large"})).read() == data
    answers = [await pull.get(name, headers={"X-Size": "small"}) for _ in range(2)]
    assert [(await resp.read(), resp.headers["X-Cache"]) for resp in answers] == [(b"small", "MISS"),
                                                                                  (b"small", "HIT")]


async def test_requests_waiting_on_a_chunked_body_found_over_the_object_limit_pass_it_on(patient_pull: Pull) -> None:
    """The requests that waited for a fill whose chunked body turned out longer than `origin.max_object_mb` each
    asked the origin for it to keep it again (each read up to the limit, each head saying `stored`): they learn it
    is too large with the flight, and get the origin's answer passed on, as for a body declared too large."""
    pull = patient_pull  # its origin holds an answer back: a loaded machine may take the plain zone's 1 s first byte
    name = "/too-large-chunked-waited.bin"
    limit = MAX_OBJECT_MB * 1024 * 1024
    data = os.urandom(limit + 1)
    release = asyncio.Event()
    whole = chunked_answer(data, LONG, 1024 * 1024)

    async def held(request: web.Request) -> web.StreamResponse:
        if pull.origin.count(name) > 1:
            return await whole(request)
        response = web.StreamResponse(headers=LONG)
        response.enable_chunked_encoding()
        await response.prepare(request)
        await response.write(data[:limit])  # all it may keep: the rest, once the others wait, is one byte too many
        await release.wait()
        await response.write(data[limit:])
        await response.write_eof()
        return response

    pull.origin.route(name, held)
    clients = 4
    flights, key = pull.cdn.edge.app[FLIGHTS], flight_key(pull_key(ZONE, name, ""), pull.cdn.node.config.pull_zones[ZONE])
    requests = [asyncio.ensure_future(pull.get(name)) for _ in range(clients)]

    async def all_joined() -> bool:
        return flights.joined(key) == clients - 1

    await wait_until(all_joined, "every other request waiting for the first one's fill")
    release.set()
    answers = await asyncio.gather(*requests)
    assert [(resp.status, await resp.read()) for resp in answers] == [(200, data)] * clients
    others = [(resp.headers["X-Cache"], resp.headers["Cache-Status"]) for resp in answers
              if resp.headers["X-Cache"] != "MISS"]
    assert others == [("PASS", "assetcdn; fwd=uri-miss; detail=too-large")] * (clients - 1)


async def test_a_range_of_a_body_declared_over_the_object_limit_is_the_origins_range(pull: Pull) -> None:
    """A body over `origin.max_object_mb` is never stored, so no range of it is ever answered from the cache: the
    fill asked for the whole body (a client's Range is left out of a fill) and passed it on, and a client resuming
    a download or a player seeking in a long video got the whole body from its first byte, every time. Once the
    origin's head declares a body too large to keep, the client's request goes to the origin as it came, Range
    and If-Range included, and the origin's 206 is its answer."""
    name = "/too-large-ranged.bin"
    data = os.urandom(MAX_OBJECT_MB * 1024 * 1024 + 1)

    async def ranged(request: web.Request) -> web.StreamResponse:
        asked = request.headers.get("Range", "")
        if asked.startswith("bytes=") and request.headers.get("If-Range", '"v1"') == '"v1"':
            first, _, last = asked.removeprefix("bytes=").partition("-")
            start, end = int(first), min(int(last) + 1, len(data)) if last else len(data)
            return web.Response(status=206, body=data[start:end], headers={
                **LONG, "ETag": '"v1"', "Content-Range": f"bytes {start}-{end - 1}/{len(data)}"})
        return web.Response(body=data, headers={**LONG, "ETag": '"v1"'})

    pull.origin.route(name, ranged)
    resp = await pull.get(name, headers={"Range": "bytes=10-19"})
    assert (resp.status, await resp.read(), resp.headers["X-Cache"]) == (206, data[10:20], "PASS")
    assert resp.headers["Content-Range"] == f"bytes 10-19/{len(data)}"
    resp = await pull.get(name, headers={"Range": f"bytes={len(data) - 1}-", "If-Range": '"v1"'})
    assert (resp.status, await resp.read()) == (206, data[-1:])
    resp = await pull.get(name, headers={"Range": "bytes=0-0", "If-Range": '"v0"'})  # another version: whole
    assert (resp.status, await resp.read()) == (200, data)
    assert stored_url(pull.cdn.node, ZONE, name) is None


async def test_requests_waiting_on_a_response_that_may_not_be_stored_get_their_own(patient_pull: Pull) -> None:
    """The first request's answer is `private`: the others that waited for it ask the origin themselves, and
    each client gets the answer made for it."""
    pull = patient_pull  # its origin holds an answer back: a loaded machine may take the plain zone's 1 s first byte
    clients = 5
    go = asyncio.Event()

    async def personal(request: web.Request) -> web.StreamResponse:
        await go.wait()
        return web.Response(body=request.headers["X-Client"].encode(), headers={"Cache-Control": "private"})

    pull.origin.route("/personal.txt", personal)
    server = pull.cdn.edge.server
    assert isinstance(server, HitTestServer)  # the hit path fills some misses itself: counted too
    handled_before = server.requests_begun
    requests = [asyncio.ensure_future(pull.get("/personal.txt", headers={"X-Client": str(i)})) for i in range(clients)]

    async def all_arrived() -> bool:
        return server.requests_begun - handled_before >= clients and pull.origin.count("/personal.txt") >= 1

    await wait_until(all_arrived, "every client's request reaching the edge")
    go.set()
    answers = await asyncio.gather(*requests)
    assert [(resp.status, await resp.read()) for resp in answers] == [(200, str(i).encode()) for i in range(clients)]
    assert {resp.headers["X-Cache"] for resp in answers} == {"PASS"}
    assert pull.origin.count("/personal.txt") == clients


async def test_requests_that_waited_but_asked_the_origin_themselves_are_not_counted_as_collapsed(
        patient_pull: Pull) -> None:
    """`assetcdn_edge_fill_waiters_total` is what collapsing saved the origin: requests that waited for a fill whose
    `private` answer they could not share, then asked the origin each, saved it nothing and are not counted; those
    answered from what a fill stored are."""
    pull = patient_pull  # its origin holds the answer until every request joined
    go = asyncio.Event()

    async def personal(request: web.Request) -> web.StreamResponse:
        await go.wait()
        return web.Response(body=b"yours", headers={"Cache-Control": "private"})

    async def waiters() -> float:
        text = await (await pull.cdn.edge.get("/metrics", headers=METRICS)).text()
        return metric(text, "assetcdn_edge_fill_waiters_total")

    async def collapse(name: str, clients: int, release: asyncio.Event) -> None:
        flights, key = pull.cdn.edge.app[FLIGHTS], flight_key(pull_key(ZONE, name, ""), pull.cdn.node.config.pull_zones[ZONE])
        requests = [asyncio.ensure_future(pull.get(name)) for _ in range(clients)]

        async def all_joined() -> bool:
            return flights.joined(key) == clients - 1

        await wait_until(all_joined, "every other request waiting for the first one's fill")
        release.set()
        answers = await asyncio.gather(*requests)
        assert len({(resp.status, await resp.read()) for resp in answers}) == 1

    pull.origin.route("/personal-count.txt", personal)
    before = await waiters()  # the edge is the module's: earlier tests' requests counted too
    await collapse("/personal-count.txt", 4, go)
    assert pull.origin.count("/personal-count.txt") == 4
    assert await waiters() == before
    await collapse("/shared-count.txt", 4, pull.origin.hold("/shared-count.txt", b"x" * 1000, LONG))
    assert pull.origin.count("/shared-count.txt") == 1
    assert await waiters() == before + 3


async def test_a_request_behind_one_whose_answer_may_not_be_stored_does_not_wait_for_its_body(patient_pull: Pull) -> None:
    """The first client's `private` answer is still arriving (its origin holds the rest of the body): the next
    request learns at once that nothing will be kept for it and gets its own answer meanwhile."""
    pull = patient_pull  # its origin holds an answer back: a loaded machine may take the plain zone's 1 s first byte
    rest = asyncio.Event()

    async def personal(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Cache-Control": "private"})
        await response.prepare(request)
        await response.write(b"for " + request.headers["X-Client"].encode())
        if request.headers["X-Client"] == "first":
            await rest.wait()
        await response.write(b", whole")
        return response

    pull.origin.route("/personal-stream.txt", personal)
    first = await pull.cdn.edge.get(f"/{ZONE}/personal-stream.txt", headers={"X-Client": "first"})
    try:
        second = await asyncio.wait_for(pull.get("/personal-stream.txt", headers={"X-Client": "second"}), WAIT_S)
        assert (second.status, await second.read(), second.headers["X-Cache"]) == (200, b"for second, whole", "PASS")
    finally:
        rest.set()
    assert (first.headers["X-Cache"], await first.read()) == ("PASS", b"for first, whole")
    assert pull.origin.count("/personal-stream.txt") == 2


async def test_a_trickling_body_is_cut_off_and_the_requests_waiting_for_it_ask_themselves(pull: Pull) -> None:
    """The origin sends the first client's body a byte at a time without end: that client's answer breaks off
    after the origin's body timeout, and a request that waited for it to be stored then gets its own."""
    done = asyncio.Event()

    async def trickle(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers=LONG)
        await response.prepare(request)
        if pull.origin.count("/trickle.txt") > 1:
            await response.write(b"whole")
            return response
        while not done.is_set():
            await response.write(b".")
            await asyncio.sleep(0.1)
        return response

    pull.origin.route("/trickle.txt", trickle)
    first = await pull.cdn.edge.get(f"/{ZONE}/trickle.txt")
    try:
        second = await asyncio.wait_for(pull.get("/trickle.txt"), WAIT_S)
        with pytest.raises(ClientPayloadError):
            await asyncio.wait_for(first.read(), WAIT_S)
    finally:
        done.set()
    assert (second.status, await second.read(), second.headers["X-Cache"]) == (200, b"whole", "MISS")
    assert pull.origin.count("/trickle.txt") == 2


def stored_on_disk(pull: Pull, key: str) -> Callable[[], Awaitable[bool]]:
    async def stored() -> bool:
        return pull.cdn.node.cache.disk.get(key, load_limit=0) is not None

    return stored


async def test_a_body_purged_between_its_lookup_and_its_delivery_is_fetched_again_whole(
        pull: Pull, monkeypatch: pytest.MonkeyPatch) -> None:
    """A stored body kept as a file (over 1 MB) is purged just after the lookup found it: the client gets the
    whole response (fetched again), never a head followed by a broken body."""
    data = os.urandom(1536 * 1024)
    pull.origin.answer("/purged-meanwhile.bin", data, headers=LONG)
    assert (await pull.get("/purged-meanwhile.bin")).headers["X-Cache"] == "MISS"
    cache = pull.cdn.node.cache
    key = pull_key(ZONE, "/purged-meanwhile.bin", "")
    await wait_until(stored_on_disk(pull, key), "the body stored")   # its client may have it all first
    real_get = cache.get
    purged: list[str] = []

    def get_then_purge(asked: str) -> CachedObject | None:
        obj = real_get(asked)
        if asked == key and obj is not None and obj.path is not None and not purged:
            purged.append(asked)
            cache.purge_keys([asked])   # as a purge from control would, between the lookup and the delivery
        return obj

    monkeypatch.setattr(cache, "get", get_then_purge)
    resp = await pull.cdn.edge.get(f"/{ZONE}/purged-meanwhile.bin")
    assert (resp.status, await resp.read(), resp.headers["X-Cache"]) == (200, data, "MISS")
    assert purged == [key]
    assert pull.origin.count("/purged-meanwhile.bin") == 2


async def test_a_304_updates_the_head_of_a_body_kept_as_a_file_without_rewriting_it(pull: Pull) -> None:
    data = os.urandom(1536 * 1024)

    async def versioned(request: web.Request) -> web.StreamResponse:
        if request.headers.get("If-None-Match") == '"big"':
            return web.Response(status=304, headers={"ETag": '"big"', "Cache-Control": "max-age=600",
                                                     "X-Version": "2"})
        return web.Response(body=data, headers={"ETag": '"big"', "Cache-Control": "max-age=1", "X-Version": "1"})

    pull.origin.route("/big-revalidated.bin", versioned)
    assert (await pull.get("/big-revalidated.bin")).headers["X-Cache"] == "MISS"
    key = pull_key(ZONE, "/big-revalidated.bin", "")
    await wait_until(stored_on_disk(pull, key), "the body stored")   # its client may have it all first
    before = pull.cdn.node.cache.disk.get(key, load_limit=0)
    assert before is not None and before.path is not None
    revalidated = await answer_changes(pull, "/big-revalidated.bin", "REVALIDATED")
    assert (await revalidated.read(), revalidated.headers["X-Version"]) == (data, "2")
    after = await pull.get("/big-revalidated.bin")
    assert (after.headers["X-Cache"], after.headers["X-Version"], await after.read()) == ("HIT", "2", data)
    stored = pull.cdn.node.cache.disk.get(key, load_limit=0)
    assert stored is not None and stored.path == before.path   # the same file: only the head was written
    assert pull.origin.count("/big-revalidated.bin") == 2


async def raw_exchange(pull: Pull, request: bytes) -> bytes:
    """What the edge sends back, to its close, for `request` written as it is."""
    assert pull.cdn.edge.server.port is not None
    reader, writer = await asyncio.open_connection("127.0.0.1", pull.cdn.edge.server.port)
    try:
        writer.write(request)
        return await asyncio.wait_for(reader.read(), WAIT_S)
    finally:
        writer.close()


async def test_an_unsafe_request_whose_body_does_not_arrive_in_time_is_408(pull: Pull) -> None:
    pull.origin.answer("/slow-upload", b"created", status=201)
    received = await raw_exchange(pull, f"POST /{ZONE}/slow-upload HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                        "Content-Length: 100\r\n\r\nten bytes.".encode())   # and nothing more
    head, _, body = received.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408 "), head
    assert orjson.loads(body)["error"]["code"] == "RequestTimeout"
    assert pull.origin.requests("/slow-upload") == []


async def test_a_new_origin_retires_what_was_cached_from_the_old_one(pull: Pull) -> None:
    first, second = ScriptedOrigin(), ScriptedOrigin()
    first.answer("/moved.txt", b"old origin", headers=LONG)
    second.answer("/moved.txt", b"new origin", headers=LONG)
    first_server, second_server = await serve_origin(first), await serve_origin(second)
    try:
        await add_pull_zone(pull.cdn, "moving", {"Url": f"http://127.0.0.1:{first_server.port}{PREFIX}"})
        assert await (await pull.cdn.edge.get("/moving/moved.txt")).read() == b"old origin"
        resp = await pull.cdn.control.put("/api/core/zones/moving/origin", headers=ACCOUNT,
                                          json={"Url": f"http://127.0.0.1:{second_server.port}{PREFIX}"})
        assert resp.status == 200, await resp.text()
        resp = await pull.cdn.edge.get("/moving/moved.txt")
        assert (await resp.read(), resp.headers["X-Cache"]) == (b"new origin", "MISS")
        assert (first.count("/moved.txt"), second.count("/moved.txt")) == (1, 1)
    finally:
        await first_server.close()
        await second_server.close()


async def test_trace_is_405_and_never_shows_the_client_the_zones_origin_fields(pull: Pull) -> None:
    """An origin that echoes TRACE (as Apache does by default) would show the client the zone's RequestHeaders,
    the secret the origin trusts the edge by."""
    async def echo(request: web.Request) -> web.StreamResponse:
        return web.Response(text="".join(f"{name}: {value}\n" for name, value in request.headers.items()),
                            content_type="message/http")

    pull.origin.route("/traced", echo)
    resp = await pull.cdn.edge.request("TRACE", f"/{ZONE}/traced")
    text = await resp.text()
    assert resp.status == 405 and SECRET[1] not in text
    assert orjson.loads(text)["error"]["code"] == "MethodNotAllowed" and "TRACE" not in resp.headers["Allow"]
    assert pull.origin.requests("/traced") == []


async def test_a_pull_zones_origin_decides_which_origins_read_its_answers(pull: Pull) -> None:
    """A stored file's path carries Access-Control-Allow-Origin: * (the edge is its origin), a pull zone's never one
    the origin did not send: the origin's own comes as it sent it, on a miss and a hit; none is added to one that sent
    none (it may mean its answers for its own pages only), nor to the edge's own answers on the zone's paths; and an
    OPTIONS preflight is the origin's to answer."""
    pull.origin.answer("/cors/shared.json", b"{}", headers={**LONG, "Content-Type": "application/json",
                                                          "Access-Control-Allow-Origin": "https://shop.example"})
    pull.origin.answer("/cors/own.json", b"{}", headers={**LONG, "Content-Type": "application/json"})
    pull.origin.answer("/cors/options", b"", status=204, headers={"Access-Control-Allow-Origin": "https://a.example"})
    page = {"Origin": "https://shop.example"}
    for _ in range(2):   # a miss, then a hit
        shared, own = await pull.get("/cors/shared.json", headers=page), await pull.get("/cors/own.json", headers=page)
        assert (shared.status, shared.headers.getall("Access-Control-Allow-Origin")) == (200, ["https://shop.example"])
        assert own.status == 200 and "Access-Control-Allow-Origin" not in own.headers
    refused = await pull.get("/cors/..%2fsecret", headers=page)
    assert refused.status == 400 and "Access-Control-Allow-Origin" not in refused.headers
    preflight = await pull.cdn.edge.options(f"/{ZONE}/cors/options", headers={**page, "Access-Control-Request-Method": "GET"})
    assert (preflight.status, preflight.headers.get("Access-Control-Allow-Origin")) == (204, "https://a.example")


async def test_options_with_max_forwards_zero_is_answered_by_the_edge_and_others_are_counted_down(pull: Pull) -> None:
    """RFC 9110 7.6.2: an intermediary answers an OPTIONS whose Max-Forwards is 0 as its final recipient, and
    forwards a larger one counted down by one."""
    pull.origin.answer("/options", b"", status=204, headers={"Allow": "GET, OPTIONS"})
    here = await pull.cdn.edge.options(f"/{ZONE}/options", headers={"Max-Forwards": "0"})
    assert (here.status, await here.read()) == (200, b"")
    assert here.headers["Allow"] == "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS"
    assert pull.origin.requests("/options") == []
    forwarded = await pull.cdn.edge.options(f"/{ZONE}/options", headers={"Max-Forwards": "3"})
    assert (forwarded.status, forwarded.headers["Allow"]) == (204, "GET, OPTIONS")
    plain = await pull.cdn.edge.options(f"/{ZONE}/options")
    assert plain.status == 204
    for hops in ("9" * 5000, "\u00b2", "x"):  # past int()'s digit limit, a digit int() refuses, no number
        assert (await pull.cdn.edge.options(f"/{ZONE}/options", headers={"Max-Forwards": hops})).status == 204
    first, second, third, superscript, word = pull.origin.requests("/options")
    assert first.headers.getall("Max-Forwards") == ["2"]
    assert "Max-Forwards" not in second.headers
    assert third.headers.getall("Max-Forwards") == ["254"]


async def test_a_body_declared_over_the_limit_is_413_before_any_100_continue(pull: Pull) -> None:
    pull.origin.answer("/big-upload", b"created", status=201)
    received = await raw_exchange(pull, f"POST /{ZONE}/big-upload HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                        "Content-Length: 3000000000\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n"
                                        .encode())
    assert received.startswith(b"HTTP/1.1 413 "), received[:80]
    assert orjson.loads(received.partition(b"\r\n\r\n")[2])["error"]["code"] == "PayloadTooLarge"
    assert pull.origin.requests("/big-upload") == []


async def test_the_origin_gets_no_expect_field_the_edge_has_met_itself(pull: Pull) -> None:
    pull.origin.answer("/expected", b"created", status=201)
    posted = await pull.cdn.edge.post(f"/{ZONE}/expected", data=b"payload", headers={"Expect": "100-continue"})
    assert posted.status == 201
    fetched = await pull.get("/expected-get", headers={"Expect": "nonsense"})
    assert fetched.status in (404, 417)  # aiohttp refuses an expectation it does not know, or the origin has none
    (seen,) = pull.origin.requests("/expected")
    assert "Expect" not in seen.headers and seen.body == b"payload"


async def test_a_location_in_the_host_header_space_invalidates_what_it_names(pull: Pull) -> None:
    """The zone sends `Host: assets.origin.example`: that is the site the origin answers for, and the URL space
    its Location and Content-Location are written in, whatever address the edge connects to."""
    pull.origin.answer("/hosted", b"old", headers=LONG)
    pull.origin.answer("/writer", b"", status=204,
                       headers={"Location": f"http://{HOST_HEADER}{PREFIX}/hosted"})
    assert (await pull.get("/hosted")).headers["X-Cache"] == "MISS"
    assert (await pull.get("/hosted")).headers["X-Cache"] == "HIT"
    assert (await pull.cdn.edge.put(f"/{ZONE}/writer", data=b"x")).status == 204
    assert (await pull.get("/hosted")).headers["X-Cache"] == "MISS"


async def test_a_location_that_spells_out_the_default_port_is_the_same_origin(pull: Pull) -> None:
    """`http://host:80/x` and `http://host/x` are one URL (RFC 9110 4.2.3): a Location or Content-Location that
    spells out the scheme's default port, in the request's URL space or the origin's, names the same origin and
    invalidates what it names (the URLs compared differed in their port's spelling only, and were left in place),
    and so does one without a port answering a request whose Host spelt it out."""
    names = ("/port-public", "/port-hosted", "/port-asked")
    for name in names:
        pull.origin.answer(name, b"old", headers=LONG)
    pull.origin.answer("/port-writer-public", b"", status=201,
                       headers={"Location": f"http://{TENANT_HOST}:80/port-public"})
    pull.origin.answer("/port-writer-hosted", b"", status=204,
                       headers={"Content-Location": f"http://{HOST_HEADER}:80{PREFIX}/port-hosted"})
    pull.origin.answer("/port-writer-asked", b"", status=303,
                       headers={"Location": f"http://{TENANT_HOST}/port-asked"})
    for name in names:
        assert [(await pull.get(name)).headers["X-Cache"] for _ in range(2)] == ["MISS", "HIT"]
    for writer, host in (("/port-writer-public", TENANT_HOST), ("/port-writer-hosted", TENANT_HOST),
                         ("/port-writer-asked", f"{TENANT_HOST}:80")):
        resp = await pull.cdn.edge.post(writer, data=b"x", headers={"Host": host}, allow_redirects=False)
        assert resp.status in (201, 204, 303), (writer, resp.status, await resp.text())
    assert [(await pull.get(name)).headers["X-Cache"] for name in names] == ["MISS"] * 3


async def test_a_request_that_waited_through_an_origin_change_stores_nothing_of_the_old_origin(
        patient_pull: Pull) -> None:
    """A request for a URL whose fill is under way waits for it; when that answer may not be shared, it asks the
    origin itself. If the zone's origin changed meanwhile (the new config and its purge applied here), what the
    old origin answers it must not be stored: every later request would get it until it expired."""
    pull = patient_pull  # its origin holds the answer through a config change, which a loaded machine takes over 1 s
    first, second = ScriptedOrigin(), ScriptedOrigin()
    release = asyncio.Event()
    asked = asyncio.Event()

    async def old(_request: web.Request) -> web.StreamResponse:
        if not asked.is_set():  # the flight's own request: held, then an answer no one else may share
            asked.set()
            await release.wait()
            return web.Response(body=b"private", headers={"Cache-Control": "private"})
        return web.Response(body=b"old origin", headers=LONG)

    first.route("/raced.txt", old)
    first.answer("/marker.txt", b"old marker", headers=LONG)
    second.answer("/raced.txt", b"new origin", headers=LONG)
    first_server, second_server = await serve_origin(first), await serve_origin(second)
    try:
        await add_pull_zone(pull.cdn, "racing", {"Url": f"http://127.0.0.1:{first_server.port}{PREFIX}"})
        assert (await pull.cdn.edge.get("/racing/marker.txt")).headers["X-Cache"] == "MISS"
        leader = asyncio.ensure_future(pull.cdn.edge.get("/racing/raced.txt"))
        await asyncio.wait_for(asked.wait(), WAIT_S)
        waiter = asyncio.ensure_future(pull.cdn.edge.get("/racing/raced.txt"))

        flights, flight = pull.cdn.edge.app[FLIGHTS], flight_key(pull_key("racing", "/raced.txt", ""),
                                                                  pull.cdn.node.config.pull_zones["racing"])

        async def waiting() -> bool:
            return flights.joined(flight) == 1

        await wait_until(waiting, "the second request waiting for the first one's fill")
        resp = await pull.cdn.control.put("/api/core/zones/racing/origin", headers=ACCOUNT,
                                          json={"Url": f"http://127.0.0.1:{second_server.port}{PREFIX}"})
        assert resp.status == 200, await resp.text()

        async def retired() -> bool:
            return stored_url(pull.cdn.node, "racing", "/marker.txt") is None

        await wait_until(retired, "the old origin's responses purged on the edge")
        release.set()
        assert await (await leader).read() == b"private"
        assert await (await waiter).read() in (b"old origin", b"new origin")  # it was sent before the change
        resp = await pull.cdn.edge.get("/racing/raced.txt")
        assert await resp.read() == b"new origin"
    finally:
        await first_server.close()
        await second_server.close()


async def test_an_origin_sets_no_policy_of_the_whole_default_host(pull: Pull) -> None:
    """NEL and Report-To, Clear-Site-Data and Alt-Svc are the policy of a whole browser origin, as HSTS is, and the
    default host is every zone's and the API's: one zone's origin registered there a reporting endpoint of its own
    (`success_fraction` 1.0) to which browsers then sent the URL, query string included, of every later request to
    that host, other zones' paths and `/api/signed` URLs among them; or cleared the host's cookies (the dashboard's
    session: cookies ignore ports), cache and storage for every zone. On the zone's own host they are its own."""
    policies = {"NEL": '{"report_to": "zone", "max_age": 31536000, "include_subdomains": true, '
                       '"success_fraction": 1.0}',
                "Report-To": '{"group": "zone", "max_age": 31536000, '
                             '"endpoints": [{"url": "https://reports.invalid/collect"}]}',
                "Clear-Site-Data": '"cookies", "storage", "cache"',
                "Alt-Svc": 'h2="alt.invalid:443"; ma=31536000'}
    pull.origin.answer("/host-policies.txt", b"ok", headers={**LONG, "Content-Type": "text/plain", **policies})
    for x_cache in ("MISS", "HIT"):
        resp = await pull.get("/host-policies.txt")
        assert resp.headers["X-Cache"] == x_cache
        assert {name: resp.headers.get(name) for name in policies} == dict.fromkeys(policies)
    tenant = await pull.cdn.edge.get("/host-policies.txt", headers={"Host": TENANT_HOST})
    assert tenant.headers["X-Cache"] == "HIT"
    assert {name: tenant.headers.get(name) for name in policies} == policies
    forwarded = await pull.cdn.edge.post(f"/{ZONE}/host-policies.txt", data=b"x")
    assert {name: forwarded.headers.get(name) for name in policies} == dict.fromkeys(policies)


async def test_a_dead_origin_is_logged_once_per_interval_not_once_per_request(
        pull: Pull, caplog: pytest.LogCaptureFixture) -> None:
    """Every request to a zone whose origin is down fails (502), but the edge's log gets one line for them per
    interval, which says how many were left out: a dead origin under load cannot flood the log."""
    down = ScriptedOrigin()
    server = await serve_origin(down)
    await add_pull_zone(pull.cdn, "deadlog", {"Url": f"http://127.0.0.1:{server.port}{PREFIX}"})
    await server.close()
    caplog.set_level("INFO", logger="assetcdn.edge.states.pull")
    for index in range(20):
        resp = await pull.cdn.edge.get(f"/deadlog/gone-{index}.txt")
        assert resp.status == 502
    lines = [record.getMessage() for record in caplog.records
             if record.getMessage().startswith("pull zone deadlog: the origin failed")]
    assert len(lines) == 1, lines
    assert "(0 more such lines since the last" in lines[0]


async def test_a_clients_request_range_never_reaches_the_origin_on_a_fill(pull: Pull) -> None:
    """`Request-Range` is the draft spelling of `Range` that Apache httpd still honours (byterange_filter.c reads it
    when there is no Range). A fill passed a client's on: such an origin answered the fill with a 206, which is not
    stored (that client got a range of its own choosing, X-Cache PASS), or, for a range past the end, with a 416
    that carried the origin's Cache-Control, which was stored as the URL's answer: every later client got 416 and
    no body until it expired. A fill asks for the whole response, as for the client's Range."""
    data = b"0123456789"

    async def apache_like(request: web.Request) -> web.StreamResponse:
        wanted = request.headers.get("Range") or request.headers.get("Request-Range")
        if wanted is None:
            return web.Response(body=data, headers=LONG)
        first = int(wanted.removeprefix("bytes=").partition("-")[0])
        if first >= len(data):  # `Header always set Cache-Control`: on the error too
            return web.Response(status=416, headers={**LONG, "Content-Range": f"bytes */{len(data)}"})
        return web.Response(status=206, body=data[first:], headers={
            **LONG, "Content-Range": f"bytes {first}-{len(data) - 1}/{len(data)}"})

    for name, asked in (("/request-range-past.bin", "bytes=99-"), ("/request-range.bin", "bytes=4-")):
        pull.origin.route(name, apache_like)
        first = await pull.get(name, headers={"Request-Range": asked})
        assert (first.status, await first.read(), first.headers["X-Cache"]) == (200, data, "MISS"), name
        later = await pull.get(name)
        assert (later.status, await later.read(), later.headers["X-Cache"]) == (200, data, "HIT"), name
        assert [seen.headers.get("Request-Range") for seen in pull.origin.requests(name)] == [None], name
