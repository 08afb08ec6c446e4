"""Promises of docs/api-guide.md's "Pull zones" section that no other test checked, through a real control and
edge app and an origin the tests script (the `pull` fixture, tests/support/origins.py): what a client of the edge
sees and what the origin saw."""

from __future__ import annotations

import asyncio
import gzip
import io
import time
from email.utils import formatdate
from typing import Any

import pytest
import pytest_asyncio
from aiohttp import web
from multidict import CIMultiDict

from assetcdn.edge.states.keys import pull_key
from assetcdn.edge.states.pull import REQUEST_TIME, RESPONSE_TIME, STATUS, own_tags
from tests.support.cdn import PURGE
from tests.support.origins import LONG, TENANT_HOST, ZONE, Pull, add_pull_zone, wait_stale
from tests.support.wait import wait_until

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def pull(patient_pull: Pull) -> Pull:
    """The patient pull zone (tests/edge/routes/conftest.py): no origin here withholds its head, and no test is about
    the first-byte time, which a loaded machine's loop delays took from origins that answer at once (a 504)."""
    return patient_pull


def ttl(cache_status: str) -> int:
    """The `ttl` of a hit's Cache-Status member."""
    return int(cache_status.rsplit("ttl=", 1)[1].split(";")[0])


async def purge(pull: Pull, body: dict[str, Any]) -> None:
    resp = await pull.cdn.control.post("/api/purge", json=body, headers=PURGE)
    assert resp.status == 200, await resp.text()


# --- what is sent to the origin ------------------------------------------------------------------------------


async def test_the_origin_is_told_surrogate_control_may_target_this_cache(pull: Pull) -> None:
    pull.origin.answer("/promise/capability.txt", b"ok", headers=LONG)
    assert (await pull.get("/promise/capability.txt")).status == 200
    (seen,) = pull.origin.requests("/promise/capability.txt")
    assert seen.headers.getall("Surrogate-Capability") == ['assetcdn="Surrogate/1.0"']


# --- caching: targeted fields, heuristics, Age ----------------------------------------------------------------


@pytest.mark.parametrize(("name", "headers", "stored"), [
    # a Surrogate-Control without a target, or targeted at this cache, wins over Cache-Control
    ("/promise/sc-plain.txt", {"Cache-Control": "no-store", "Surrogate-Control": "max-age=600"}, True),
    ("/promise/sc-ours.txt", {"Cache-Control": "no-store", "Surrogate-Control": "max-age=600;assetcdn"}, True),
    ("/promise/sc-refuses.txt", {"Cache-Control": "max-age=600", "Surrogate-Control": "no-store"}, False),
    # one targeted at another device is not this cache's: Cache-Control decides
    ("/promise/sc-theirs.txt", {"Cache-Control": "max-age=600", "Surrogate-Control": "no-store;othercache"}, True),
    # CDN-Cache-Control comes before Surrogate-Control
    ("/promise/sc-after-cdn.txt", {"CDN-Cache-Control": "no-store", "Surrogate-Control": "max-age=600"}, False),
    # no-store-remote binds a CDN's surrogates (Edge Architecture 2.2.2): stored before, Cache-Control ignored
    ("/promise/sc-remote.txt", {"Cache-Control": "max-age=600", "Surrogate-Control": "no-store-remote",
                                "Last-Modified": "Mon, 01 Jan 2024 00:00:00 GMT"}, False),
    # content="ESI/1.0" is no caching directive (2.2.4): Cache-Control decides, its private too (before: ignored,
    # one user's page kept for every client; its max-age ignored, the answer never a hit)
    ("/promise/sc-esi-private.txt", {"Cache-Control": "private, max-age=600", "Surrogate-Control": 'content="ESI/1.0"',
                                     "Last-Modified": "Mon, 01 Jan 2024 00:00:00 GMT"}, False),
    ("/promise/sc-esi-max-age.txt", {"Cache-Control": "max-age=600", "Surrogate-Control": 'content="ESI/1.0"'}, True),
    # max-age=fresh+stale (2.2.3): fresh for the first (before: no number, never fresh)
    ("/promise/sc-plus.txt", {"Cache-Control": "no-store", "Surrogate-Control": "max-age=600+60"}, True),
])
async def test_surrogate_control_for_this_cache_overrides_cache_control(pull: Pull, name: str,
                                                                        headers: dict[str, str], stored: bool) -> None:
    pull.origin.answer(name, b"surrogate", headers=headers)
    first, second = await pull.get(name), await pull.get(name)
    assert (await first.read(), await second.read()) == (b"surrogate", b"surrogate")
    expected = ("MISS", "HIT") if stored else ("PASS", "PASS")
    assert (first.headers["X-Cache"], second.headers["X-Cache"]) == expected
    assert pull.origin.count(name) == (1 if stored else 2)


async def test_surrogate_control_max_age_plus_seconds_serves_stale_that_long_while_the_origin_fails(pull: Pull) -> None:
    """Edge Architecture 2.2.3: `max-age=1+600` is fresh for 1 s, then usable stale for 600 s more when the origin
    fails. The whole `1+600` was read as one delta-seconds, no number: never fresh, and the origin's 503 passed on."""
    asked: list[int] = []

    async def failing_later(_request: web.Request) -> web.StreamResponse:
        asked.append(1)
        if len(asked) == 1:
            return web.Response(body=b"first", headers={"Surrogate-Control": "max-age=1+600"})
        return web.Response(status=503, body=b"down")

    pull.origin.route("/promise/sc-plus-stale.txt", failing_later)
    assert (await pull.get("/promise/sc-plus-stale.txt")).headers["X-Cache"] == "MISS"
    seen: list[tuple[int, bytes, str]] = []

    async def stale() -> bool:
        resp = await pull.get("/promise/sc-plus-stale.txt")
        seen.append((resp.status, await resp.read(), resp.headers["X-Cache"]))
        return seen[-1][2] != "HIT"

    await wait_until(stale, "the copy no longer fresh")
    assert seen[-1] == (200, b"first", "STALE")


# What an origin says to this CDN alone: its caching directives for surrogates and its purge tags.
SURROGATE_FIELDS = ("Surrogate-Control", "Cache-Tag", "Surrogate-Key")


def surrogate_fields_shown(resp: Any) -> list[str]:
    return [field for field in SURROGATE_FIELDS if field in resp.headers]


async def test_the_fields_an_origin_meant_for_the_cdn_reach_no_client_of_the_application(pull: Pull) -> None:
    """Surrogate-Control, Cache-Tag and Surrogate-Key are the origin's word to the CDN (its directives for
    surrogates, its purge tags, which often name its inner workings) and went out to every client. None of the
    application's answers carries them now: its fill (MISS), hits, 304s and ranges, a revalidation the origin
    confirms with a 304 that carries them (REVALIDATED), a stale copy answering the origin's failure (STALE), and
    answers passed on (PASS: a POST's, a GET's with If-Match). The edge still reads them: the copy is kept for
    Surrogate-Control's lifetime though Cache-Control says `no-store`."""
    fields = {"Cache-Control": "no-store", "Surrogate-Key": "build-88", "Cache-Tag": "customer-4711", "ETag": '"sc"'}
    pull.origin.answer("/promise/surrogate-fields.txt", b"fields", headers={**fields, "Surrogate-Control": "max-age=600"})
    name = "/promise/surrogate-fields.txt"
    posted = await pull.cdn.edge.post(f"/{ZONE}{name}", data=b"posted")
    await posted.read()
    answers = {"MISS": await pull.get(name), "HIT": await pull.get(name),
               "304": await pull.get(name, headers={"If-None-Match": '"sc"'}),
               "206": await pull.get(name, headers={"Range": "bytes=0-1"}),
               "PASS (POST)": posted,
               "PASS (If-Match)": await pull.get(name, headers={"If-Match": '"sc"'})}
    assert {what: (resp.status, resp.headers["X-Cache"]) for what, resp in answers.items()} == {
        "MISS": (200, "MISS"), "HIT": (200, "HIT"), "304": (304, "HIT"), "206": (206, "HIT"),
        "PASS (POST)": (200, "PASS"), "PASS (If-Match)": (200, "PASS")}
    assert {what: surrogate_fields_shown(resp) for what, resp in answers.items()} == dict.fromkeys(answers, [])

    asked: list[str] = []

    async def confirms_then_fails(request: web.Request) -> web.StreamResponse:
        asked.append(request.headers.get("If-None-Match", ""))
        # fresh for 1 s, then usable stale for 600 s more while the origin fails (Edge Architecture 2.2.3)
        head = {**fields, "Surrogate-Control": "max-age=1+600"}
        if len(asked) == 1:
            return web.Response(body=b"stale later", headers=head)
        if len(asked) == 2:
            return web.Response(status=304, headers=head)
        return web.Response(status=503, body=b"down")

    stale_name = "/promise/surrogate-stale.txt"
    pull.origin.route(stale_name, confirms_then_fails)
    later = {"MISS": await pull.get(stale_name)}
    await wait_stale(pull.cdn.node, ZONE, stale_name)
    later["REVALIDATED"] = await pull.get(stale_name)
    await wait_stale(pull.cdn.node, ZONE, stale_name)
    later["STALE"] = await pull.get(stale_name)
    assert asked == ["", '"sc"', '"sc"']
    assert {what: (resp.status, resp.headers["X-Cache"], await resp.read()) for what, resp in later.items()} == {
        what: (200, what, b"stale later") for what in later}
    assert {what: surrogate_fields_shown(resp) for what, resp in later.items()} == dict.fromkeys(later, [])


async def test_heuristic_freshness_is_a_tenth_of_the_age_of_last_modified_and_at_most_a_day(pull: Pull) -> None:
    now = time.time()
    pull.origin.answer("/promise/heuristic-day.txt", b"day",
                       headers={"Last-Modified": formatdate(now - 86400, usegmt=True)})
    pull.origin.answer("/promise/heuristic-year.txt", b"year",
                       headers={"Last-Modified": formatdate(now - 365 * 86400, usegmt=True)})
    for name, most in (("/promise/heuristic-day.txt", 8640), ("/promise/heuristic-year.txt", 86400)):
        assert (await pull.get(name)).headers["X-Cache"] == "MISS"
        hit = await pull.get(name)
        assert hit.headers["X-Cache"] == "HIT", name
        assert most - 10 <= ttl(hit.headers["Cache-Status"]) <= most, name


async def test_a_status_that_allows_no_heuristic_is_not_stored_without_explicit_freshness(pull: Pull) -> None:
    """RFC 9111 4.2.2: only heuristically cacheable statuses (200, 404, 301...) get a heuristic lifetime; a 302
    with nothing but a Last-Modified is passed on, each request asking the origin."""
    old = formatdate(time.time() - 86400, usegmt=True)
    pull.origin.answer("/promise/heuristic-302.txt", b"", status=302,
                       headers={"Last-Modified": old, "Location": "/elsewhere"})
    pull.origin.answer("/promise/heuristic-404.txt", b"gone", status=404, headers={"Last-Modified": old})
    for _ in range(2):
        resp = await pull.get("/promise/heuristic-302.txt", allow_redirects=False)
        assert (resp.status, resp.headers["X-Cache"]) == (302, "PASS")
    assert pull.origin.count("/promise/heuristic-302.txt") == 2
    statuses = [(r.status, r.headers["X-Cache"]) for r in
                [await pull.get("/promise/heuristic-404.txt"), await pull.get("/promise/heuristic-404.txt")]]
    assert statuses == [(404, "MISS"), (404, "HIT")]


async def test_an_age_that_is_not_one_integer_makes_the_response_stale(pull: Pull) -> None:
    pull.origin.answer("/promise/age-list.txt", b"aged", headers={**LONG, "Age": "5, 6"})
    pull.origin.answer("/promise/age-word.txt", b"aged", headers={**LONG, "Age": "soon"})
    for name in ("/promise/age-list.txt", "/promise/age-word.txt"):
        assert [(await pull.get(name)).headers["X-Cache"] for _ in range(2)] == ["MISS", "MISS"], name
        assert pull.origin.count(name) == 2


async def test_expires_less_date_is_the_lifetime_and_an_invalid_expires_is_already_stale(pull: Pull) -> None:
    now = time.time()
    pull.origin.answer("/promise/expires.txt", b"dated", headers={"Date": formatdate(now, usegmt=True),
                                                                   "Expires": formatdate(now + 600, usegmt=True)})
    pull.origin.answer("/promise/expires-zero.txt", b"dated", headers={"Date": formatdate(now, usegmt=True),
                                                                        "Expires": "0"})
    assert (await pull.get("/promise/expires.txt")).headers["X-Cache"] == "MISS"
    hit = await pull.get("/promise/expires.txt")
    assert hit.headers["X-Cache"] == "HIT"
    assert 580 <= ttl(hit.headers["Cache-Status"]) <= 600
    assert [(await pull.get("/promise/expires-zero.txt")).headers["X-Cache"] for _ in range(2)] != ["MISS", "HIT"]
    assert pull.origin.count("/promise/expires-zero.txt") == 2


async def test_age_counts_from_the_origins_date(pull: Pull) -> None:
    """RFC 9111 4.2.3: a response whose Date is 100 s before it arrived is at least 100 s old."""
    pull.origin.answer("/promise/old-date.txt", b"old", headers={**LONG, "Date": formatdate(time.time() - 100,
                                                                                                 usegmt=True)})
    assert (await pull.get("/promise/old-date.txt")).headers["X-Cache"] == "MISS"
    hit = await pull.get("/promise/old-date.txt")
    assert hit.headers["X-Cache"] == "HIT"
    assert 100 <= int(hit.headers["Age"]) <= 110
    assert 490 <= ttl(hit.headers["Cache-Status"]) <= 500


# --- what is stored -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "directive"), [
    ("/promise/qualified-private.txt", 'private="X-User", max-age=600'),
    ("/promise/qualified-no-cache.txt", 'no-cache="X-User", max-age=600'),
])
async def test_fields_a_qualified_directive_names_are_left_out_of_the_stored_copy(pull: Pull, name: str,
                                                                                   directive: str) -> None:
    pull.origin.answer(name, b"shared part", headers={"Cache-Control": directive, "X-User": "first-client",
                                                      "X-Shared": "kept"})
    first = await pull.get(name)
    assert first.headers["X-Cache"] == "MISS"
    hit = await pull.get(name)
    assert (hit.headers["X-Cache"], await hit.read(), hit.headers["X-Shared"]) == ("HIT", b"shared part", "kept")
    assert "X-User" not in hit.headers


async def test_an_origins_x_request_id_is_neither_passed_on_nor_stored(pull: Pull) -> None:
    pull.origin.answer("/promise/request-id.txt", b"ok", headers={**LONG, "X-Request-ID": "origins-own-id"})
    miss, hit = await pull.get("/promise/request-id.txt"), await pull.get("/promise/request-id.txt")
    assert (miss.headers["X-Cache"], hit.headers["X-Cache"]) == ("MISS", "HIT")
    for resp in (miss, hit):
        assert resp.headers.getall("X-Request-ID") != ["origins-own-id"]
        assert "origins-own-id" not in resp.headers.getall("X-Request-ID", [])


async def test_a_304_that_sets_a_cookie_updates_only_its_own_answer(pull: Pull) -> None:
    async def cookie_on_304(request: web.Request) -> web.StreamResponse:
        if request.headers.get("If-None-Match") == '"c1"':
            return web.Response(status=304, headers={"ETag": '"c1"', "Cache-Control": "max-age=600",
                                                     "Set-Cookie": "visitor=one"})
        return web.Response(body=b"cookie-free", headers={"ETag": '"c1"', "Cache-Control": "max-age=0"})

    pull.origin.route("/promise/cookie-304.txt", cookie_on_304)
    assert (await pull.get("/promise/cookie-304.txt")).headers["X-Cache"] == "MISS"
    first = await pull.get("/promise/cookie-304.txt")
    assert (first.headers["X-Cache"], await first.read()) == ("REVALIDATED", b"cookie-free")
    assert first.headers["Set-Cookie"] == "visitor=one"  # the answer it came for
    second = await pull.get("/promise/cookie-304.txt")  # still stale: revalidated again, not a HIT of the cookie
    assert second.headers["X-Cache"] == "REVALIDATED"
    assert pull.origin.count("/promise/cookie-304.txt") == 3


@pytest.mark.parametrize(("name", "directive"), [
    ("/promise/cookie-304-no-cache.txt", 'max-age=600, no-cache="Set-Cookie"'),
    ("/promise/cookie-304-private.txt", 'max-age=600, private="Set-Cookie"'),
])
async def test_a_304_whose_cookie_a_qualified_directive_names_sets_it_for_its_own_client_only(
        pull: Pull, name: str, directive: str) -> None:
    """The qualified directive keeps the Set-Cookie out of the stored copy (which the 304 then updates), but the
    client whose revalidation it answered gets it, as the first response's client gets that one's."""
    async def handler(request: web.Request) -> web.StreamResponse:
        if request.headers.get("If-None-Match") == '"q1"':
            return web.Response(status=304, headers={"ETag": '"q1"', "Cache-Control": directive,
                                                     "Set-Cookie": "visitor=first"})
        return web.Response(body=b"shared", headers={"ETag": '"q1"', "Cache-Control": "max-age=0"})

    pull.origin.route(name, handler)
    assert (await pull.get(name)).headers["X-Cache"] == "MISS"
    first = await pull.get(name)
    assert (first.headers["X-Cache"], await first.read()) == ("REVALIDATED", b"shared")
    assert first.headers.getall("Set-Cookie") == ["visitor=first"]
    hit = await pull.get(name)  # the copy the 304 updated, without the cookie
    assert hit.headers["X-Cache"] == "HIT"
    assert "Set-Cookie" not in hit.headers
    assert pull.origin.count(name) == 2


async def test_a_304_to_an_authorized_request_updates_only_its_own_answer(pull: Pull) -> None:
    """RFC 9111 3.5: the 304 answered a request with Authorization, and does not allow a shared cache to keep it:
    its fields (here one naming the caller) and its freshness are the caller's, never the stored copy's."""
    async def handler(request: web.Request) -> web.StreamResponse:
        if request.headers.get("If-None-Match") == '"a1"' and "Authorization" in request.headers:
            return web.Response(status=304, headers={"ETag": '"a1"', "Cache-Control": "max-age=600",
                                                     "X-Caller": request.headers["Authorization"]})
        if request.headers.get("If-None-Match") == '"a1"':
            return web.Response(status=304, headers={"ETag": '"a1"', "Cache-Control": "max-age=0"})
        return web.Response(body=b"anyone's", headers={"ETag": '"a1"', "Cache-Control": "max-age=0"})

    pull.origin.route("/promise/auth-304.txt", handler)
    assert (await pull.get("/promise/auth-304.txt")).headers["X-Cache"] == "MISS"
    caller = await pull.get("/promise/auth-304.txt", headers={"Authorization": "Bearer alice"})
    assert (caller.headers["X-Cache"], await caller.read()) == ("REVALIDATED", b"anyone's")
    assert caller.headers["X-Caller"] == "Bearer alice"  # the answer it came for
    anyone = await pull.get("/promise/auth-304.txt")  # the copy is still stale: asked again, not a HIT of alice's
    assert anyone.headers["X-Cache"] == "REVALIDATED"
    assert "X-Caller" not in anyone.headers
    assert pull.origin.count("/promise/auth-304.txt") == 3


async def test_a_background_304_to_an_authorized_request_leaves_the_stored_copy_as_it_was(pull: Pull) -> None:
    """stale-while-revalidate: the revalidation a request with Authorization starts is sent with it; its 304 must
    not make the caller's fields and freshness everyone's."""
    async def handler(request: web.Request) -> web.StreamResponse:
        if request.headers.get("If-None-Match") == '"b1"' and "Authorization" in request.headers:
            return web.Response(status=304, headers={"ETag": '"b1"', "Cache-Control": "max-age=600",
                                                     "X-Caller": request.headers["Authorization"]})
        return web.Response(body=b"anyone's", headers={"ETag": '"b1"',
                                                       "Cache-Control": "max-age=0, stale-while-revalidate=600"})

    pull.origin.route("/promise/auth-swr.txt", handler)
    assert (await pull.get("/promise/auth-swr.txt")).headers["X-Cache"] == "MISS"
    stale = await pull.get("/promise/auth-swr.txt", headers={"Authorization": "Bearer alice"})
    assert stale.headers["X-Cache"] == "STALE"
    for _ in range(100):  # the background revalidation's 304
        if pull.origin.count("/promise/auth-swr.txt") == 2:
            break
        await asyncio.sleep(0.02)
    await asyncio.sleep(0.1)
    anyone = await pull.get("/promise/auth-swr.txt")
    assert anyone.headers["X-Cache"] == "STALE"  # not a fresh HIT made by alice's 304
    assert "X-Caller" not in anyone.headers


# --- purges of origin tags ----------------------------------------------------------------------------------


async def test_origin_tags_are_compared_as_written(pull: Pull) -> None:
    pull.origin.answer("/promise/tag-case.txt", b"tagged", headers={**LONG, "Surrogate-Key": "Holiday"})
    assert (await pull.get("/promise/tag-case.txt")).headers["X-Cache"] == "MISS"
    await purge(pull, {"tags": ["holiday"]})
    assert (await pull.get("/promise/tag-case.txt")).headers["X-Cache"] == "HIT"
    await purge(pull, {"tags": ["Holiday"]})
    assert (await pull.get("/promise/tag-case.txt")).headers["X-Cache"] == "MISS"


# --- request directives ---------------------------------------------------------------------------------------


async def test_a_requests_no_store_keeps_its_answer_out_of_the_cache(pull: Pull) -> None:
    pull.origin.answer("/promise/request-no-store.txt", b"unkept", headers=LONG)
    refused = await pull.get("/promise/request-no-store.txt", headers={"Cache-Control": "no-store"})
    assert (refused.status, await refused.read(), refused.headers["X-Cache"]) == (200, b"unkept", "PASS")
    assert (await pull.get("/promise/request-no-store.txt")).headers["X-Cache"] == "MISS"
    # Once stored, a request's no-store is answered from the copy (it only keeps its own answer unstored).
    assert (await pull.get("/promise/request-no-store.txt",
                           headers={"Cache-Control": "no-store"})).headers["X-Cache"] == "HIT"
    assert pull.origin.count("/promise/request-no-store.txt") == 2


async def test_more_than_16_kb_of_request_directives_reads_as_no_store(pull: Pull) -> None:
    """Each field line within the server's 8 KB bound: three of 6 KB make 18 KB of directives."""
    line = "x=" + "a" * (6 * 1024)
    pull.origin.answer("/promise/request-long-cc.txt", b"unkept", headers=LONG)
    pull.origin.answer("/promise/request-long-pragma.txt", b"unkept", headers=LONG)
    for name, field in (("/promise/request-long-cc.txt", "Cache-Control"),
                        ("/promise/request-long-pragma.txt", "Pragma")):
        resp = await pull.get(name, headers=CIMultiDict([(field, line)] * 3))
        assert (resp.status, resp.headers["X-Cache"]) == (200, "PASS"), field
        assert (await pull.get(name)).headers["X-Cache"] == "MISS", field


# --- validation ---------------------------------------------------------------------------------------------


async def test_a_304_never_changes_the_fields_that_describe_the_stored_bytes(pull: Pull) -> None:
    async def versioned(request: web.Request) -> web.StreamResponse:
        if request.headers.get("If-None-Match") == '"bytes"':
            return web.Response(status=304, headers={"ETag": '"bytes"', "Cache-Control": "max-age=600",
                                                     "Content-Encoding": "gzip", "X-Version": "2"})
        return web.Response(body=b"plain bytes", headers={"ETag": '"bytes"', "Cache-Control": "max-age=0",
                                                          "X-Version": "1"})

    pull.origin.route("/promise/bytes-304.txt", versioned)
    assert (await pull.get("/promise/bytes-304.txt")).headers["X-Cache"] == "MISS"
    assert (await pull.get("/promise/bytes-304.txt")).headers["X-Cache"] == "REVALIDATED"
    hit = await pull.get("/promise/bytes-304.txt", auto_decompress=False)
    assert (hit.headers["X-Cache"], hit.headers["X-Version"], await hit.read()) == ("HIT", "2", b"plain bytes")
    assert "Content-Encoding" not in hit.headers
    assert hit.headers["Content-Length"] == str(len(b"plain bytes"))


@pytest.mark.parametrize("directive", ['no-cache="Content-Encoding"', 'private="Content-Encoding, X-Own"'])
async def test_a_qualified_directive_naming_content_encoding_never_serves_coded_bytes_without_it(
        pull: Pull, directive: str) -> None:
    """Left out of the stored copy as any field a qualified no-cache or private names, Content-Encoding went from
    the hits, which then gave gzip bytes as the text they compress. Read as the unqualified directive instead (RFC
    9111 5.2.2.4, 5.2.2.7): validated before each reuse, or not stored; every answer keeps its coding."""
    name = f"/promise/coded-{directive.split('=')[0]}.txt"
    coded = gzip.compress(b"the text it compresses " * 50)
    pull.origin.answer(name, coded, headers={"Cache-Control": f"max-age=600, {directive}", "ETag": '"coded"',
                                             "Content-Encoding": "gzip", "Content-Type": "text/plain"})
    for _ in range(3):
        resp = await pull.get(name, auto_decompress=False)
        assert (resp.status, resp.headers.get("Content-Encoding"), await resp.read()) == (200, "gzip", coded)
        assert resp.headers["X-Cache"] != "HIT"
    assert pull.origin.count(name) == 3


async def test_a_416_says_no_cache_may_keep_it(pull: Pull) -> None:
    """A range past the end of a copy the origin made public for ten minutes was answered 416 with the copy's
    Cache-Control, Expires and CDN-Cache-Control: a cache after the edge could keep that one request's 416 and
    answer every later request for the URL with it (a stored file's 416 is no-store). It says no-store now, and the
    copy's own answers keep their freshness."""
    name = "/promise/public-416.txt"
    pull.origin.answer(name, b"0123456789", headers={"Cache-Control": "public, max-age=600", "ETag": '"pub"',
                                                     "Expires": "Thu, 01 Jan 2099 00:00:00 GMT",
                                                     "CDN-Cache-Control": "max-age=600"})
    assert (await pull.get(name)).headers["Cache-Control"] == "public, max-age=600"
    for method in ("GET", "HEAD"):
        past = await pull.cdn.edge.request(method, f"/{ZONE}{name}", headers={"Range": "bytes=10-"})
        assert (past.status, past.headers.getall("Cache-Control")) == (416, ["no-store"]), method
        assert "Expires" not in past.headers and "CDN-Cache-Control" not in past.headers, method
    again = await pull.get(name)
    assert (again.headers["X-Cache"], again.headers["Cache-Control"]) == ("HIT", "public, max-age=600")


async def test_a_416_of_a_coded_copy_carries_no_coding_for_its_empty_content(pull: Pull) -> None:
    """A range past the end of a gzip-coded copy was answered 416 with the copy's Content-Encoding: gzip (and its
    Content-Type) on an empty content, which is no gzip stream: a client that decodes what the field names (Java's
    GZIPInputStream over the error stream) failed on it. The 416 leaves both out now, as a 304 leaves out the fields
    that describe a content it does not carry."""
    name = "/promise/coded-416.txt"
    coded = gzip.compress(b"ranged text " * 50)
    pull.origin.answer(name, coded, headers={**LONG, "Content-Encoding": "gzip", "Content-Type": "text/plain"})
    assert (await pull.get(name, auto_decompress=False)).headers["Content-Encoding"] == "gzip"
    for method in ("GET", "HEAD"):
        past = await pull.cdn.edge.request(method, f"/{ZONE}{name}", headers={"Range": f"bytes={len(coded)}-"},
                                           auto_decompress=False)
        assert (past.status, await past.read(), past.headers["Content-Range"]) == (416, b"", f"bytes */{len(coded)}")
        assert "Content-Encoding" not in past.headers and "Content-Type" not in past.headers, method
    part = await pull.get(name, headers={"Range": "bytes=0-9"}, auto_decompress=False)
    assert (part.status, part.headers["Content-Encoding"], await part.read()) == (206, "gzip", coded[:10])


async def test_a_304_naming_content_encoding_in_a_qualified_no_cache_keeps_it_on_the_stored_copy(pull: Pull) -> None:
    """The copy was stored with its Content-Encoding; a 304 that says `no-cache="Content-Encoding"` took it off the
    stored head, and the hits after it gave the gzip bytes uncoded."""
    name = "/promise/coded-by-304.txt"
    coded = gzip.compress(b"confirmed text " * 50)

    async def confirming(request: web.Request) -> web.StreamResponse:
        if request.headers.get("If-None-Match") == '"coded"':
            return web.Response(status=304, headers={"ETag": '"coded"',
                                                     "Cache-Control": 'max-age=600, no-cache="Content-Encoding"'})
        return web.Response(body=coded, headers={"Cache-Control": "max-age=0", "ETag": '"coded"',
                                                 "Content-Encoding": "gzip", "Content-Type": "text/plain"})

    pull.origin.route(name, confirming)
    for expected in ("MISS", "REVALIDATED", "REVALIDATED"):
        resp = await pull.get(name, auto_decompress=False)
        assert (resp.headers["X-Cache"], resp.headers.get("Content-Encoding"), await resp.read()) == (
            expected, "gzip", coded)


# --- other methods ------------------------------------------------------------------------------------------


async def test_other_methods_are_passed_with_cache_status_fwd_method_and_invalidate_content_location(
        pull: Pull) -> None:
    pull.origin.answer("/promise/listed", b"listing", headers=LONG)
    pull.origin.answer("/promise/form", b"made", status=201,
                       headers={"Content-Location": "/up/promise/listed"})
    assert (await pull.get("/promise/listed")).headers["X-Cache"] == "MISS"
    assert (await pull.get("/promise/listed")).headers["X-Cache"] == "HIT"
    posted = await pull.cdn.edge.post("/pulled/promise/form", data=b"a=1")
    assert (posted.status, await posted.read(), posted.headers["X-Cache"]) == (201, b"made", "PASS")
    assert posted.headers["Cache-Status"].startswith("assetcdn; fwd=method")
    assert (await pull.get("/promise/listed")).headers["X-Cache"] == "MISS"


async def test_an_unsafe_request_the_origin_refuses_invalidates_nothing(pull: Pull) -> None:
    async def refusing(request: web.Request) -> web.StreamResponse:
        if request.method == "DELETE":
            return web.Response(status=403, body=b"no")
        return web.Response(body=b"kept", headers=LONG)

    pull.origin.route("/promise/refused", refusing)
    assert (await pull.get("/promise/refused")).headers["X-Cache"] == "MISS"
    assert (await pull.cdn.edge.delete("/pulled/promise/refused")).status == 403
    assert (await pull.get("/promise/refused")).headers["X-Cache"] == "HIT"


async def test_a_redirect_to_a_path_of_the_host_the_request_came_on_invalidates_that_path(pull: Pull) -> None:
    """A 3xx answer invalidates too, and its Location may be written in the URL space the request came on (here
    the zone's tenant host) as well as in the origin's; a URL of another of the zone's hosts is another origin
    (RFC 9111 4.4), which it does not invalidate."""
    pull.origin.answer("/promise/redirected", b"old", headers=LONG)
    pull.origin.answer("/promise/elsewhere", b"old", headers=LONG)
    pull.origin.answer("/promise/submit", b"", status=303,
                       headers={"Location": f"http://{TENANT_HOST}/promise/redirected"})
    pull.origin.answer("/promise/submit-elsewhere", b"", status=303,
                       headers={"Location": f"http://{TENANT_HOST}/promise/elsewhere"})
    for name in ("/promise/redirected", "/promise/elsewhere"):
        assert [(await pull.get(name)).headers["X-Cache"] for _ in range(2)] == ["MISS", "HIT"]
    on_tenant = await pull.cdn.edge.post("/promise/submit", data=b"a=1", allow_redirects=False,
                                         headers={"Host": TENANT_HOST})
    on_default = await pull.cdn.edge.post("/pulled/promise/submit-elsewhere", data=b"a=1", allow_redirects=False)
    assert (on_tenant.status, on_default.status) == (303, 303)
    assert (await pull.get("/promise/redirected")).headers["X-Cache"] == "MISS"
    assert (await pull.get("/promise/elsewhere")).headers["X-Cache"] == "HIT"


# --- StoreSetCookie -----------------------------------------------------------------------------------------


async def test_a_zone_that_stores_set_cookie_keeps_such_answers_but_never_the_cdns_own_cookies(pull: Pull) -> None:
    """`StoreSetCookie: true` keeps a response that sets cookies (the ScriptedOrigin's answers, one path each),
    and a Set-Cookie naming this CDN's own cookies still never reaches a client, on the miss or the hits."""
    origin_url = str(pull.cdn.node.config.pull_zones[ZONE].origin.url)
    await add_pull_zone(pull.cdn, "pulledcookies", {"Url": origin_url, "StoreSetCookie": True})

    async def cookies(_request: web.Request) -> web.StreamResponse:
        response = web.Response(body=b"with cookies", headers=LONG)
        response.headers.add("Set-Cookie", "visitor=shared")
        response.headers.add("Set-Cookie", "cdn_session=forged; Path=/")
        return response

    pull.origin.route("/promise/cookies.txt", cookies)
    answers = []
    for _ in range(2):
        resp = await pull.cdn.edge.get("/pulledcookies/promise/cookies.txt")
        answers.append((resp.status, await resp.read(), resp.headers["X-Cache"], resp.headers.getall("Set-Cookie")))
    assert answers == [(200, b"with cookies", "MISS", ["visitor=shared"]),
                       (200, b"with cookies", "HIT", ["visitor=shared"])]
    assert pull.origin.count("/promise/cookies.txt") == 1
    # The same path through the zone that does not store them: passed on every time.
    assert [(await pull.get("/promise/cookies.txt")).headers["X-Cache"] for _ in range(2)] == ["PASS", "PASS"]


# --- stale-if-error -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "cache_control", "stale"), [
    ("/promise/sie-request.txt", "max-age=0", True),
    # RFC 9111 4.2.4: a stale response marked must-revalidate is never served, the request's leave or not
    ("/promise/sie-must-revalidate.txt", "max-age=0, must-revalidate", False),
])
async def test_a_requests_own_stale_if_error_lets_the_stale_copy_answer_an_origin_error(
        pull: Pull, name: str, cache_control: str, stale: bool) -> None:
    async def failing(_request: web.Request) -> web.StreamResponse:
        if pull.origin.count(name) == 1:
            return web.Response(body=b"good", headers={"Cache-Control": cache_control, "ETag": '"sie"'})
        return web.Response(status=503, body=b"overloaded")

    pull.origin.route(name, failing)
    assert (await pull.get(name)).headers["X-Cache"] == "MISS"
    plain = await pull.get(name)
    # No stale-if-error: the origin's own error is passed on, not replaced by one of the edge's.
    assert (plain.status, await plain.read(), plain.headers["X-Cache"]) == (503, b"overloaded", "PASS")
    leave = await pull.get(name, headers={"Cache-Control": "stale-if-error=600"})
    if stale:
        assert (leave.status, await leave.read(), leave.headers["X-Cache"]) == (200, b"good", "STALE")
    else:
        assert (leave.status, await leave.read()) == (503, b"overloaded")


@pytest.mark.parametrize("status", [400, 408, 413, 417, 429, 431])
async def test_an_error_about_the_requests_own_form_is_never_stored(pull: Pull, status: int) -> None:
    """An origin that puts its caching fields on every answer marks its 400 for one client's malformed field as
    storable: kept under the URL, every client would get that error for its lifetime. It is passed on, not kept:
    the next client's plain request is the origin's 200."""
    name = f"/promise/request-error-{status}.txt"

    async def answer(request: web.Request) -> web.Response:
        if "X-Odd" in request.headers:
            return web.Response(status=status, text="bad request", headers=LONG)
        return web.Response(text="fine", headers=LONG)

    pull.origin.route(name, answer)
    odd = await pull.get(name, headers={"X-Odd": "1"})
    assert (odd.status, odd.headers["X-Cache"]) == (status, "PASS")
    assert "detail=request-error" in odd.headers["Cache-Status"]
    plain = await pull.get(name)
    assert (plain.status, await plain.text(), plain.headers["X-Cache"]) == (200, "fine", "MISS")
    assert (await pull.get(name)).headers["X-Cache"] == "HIT"


@pytest.mark.parametrize("status", [400, 431])
async def test_an_error_about_a_requests_own_form_stored_before_it_was_never_stored_is_not_answered(
        pull: Pull, status: int) -> None:
    """An edge that stored such an error before (an origin's 400 marked fresh for a day, kept as RFC 9111 allows)
    and restarted with the rule that never stores them went on answering every client of the URL with that error, as
    a HIT, for the rest of its lifetime. What is never stored is never answered from the cache either: the request
    goes to the origin."""
    name = f"/promise/request-error-stored-before-{status}.txt"
    pull.origin.answer(name, b"fine", headers={**LONG, "Content-Type": "text/plain"})
    now = time.time()
    head = (("content-type", "text/plain"), ("cache-control", "max-age=86400"), ("date", formatdate(now, usegmt=True)))
    meta = (*head, (STATUS, str(status)), (REQUEST_TIME, repr(now)), (RESPONSE_TIME, repr(now)))
    zone = pull.cdn.node.config.pull_zones[ZONE]
    pull.cdn.node.cache.put(pull_key(ZONE, name, ""), io.BytesIO(b"one client's bad request"), "text/plain", "",
                            own_tags(zone, name), headers=meta)  # as the edge stored it before
    first = await pull.get(name)
    assert (first.status, await first.text(), first.headers["X-Cache"]) == (200, "fine", "MISS")
    assert (await pull.get(name)).headers["X-Cache"] == "HIT"
