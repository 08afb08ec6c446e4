"""RFC 9111's rules over stored heads (assetcdn/edge/states/freshness.py): storing, lifetime, age, reuse,
stale use on errors, validation and invalidation."""

from __future__ import annotations

from email.utils import formatdate

import pytest

from assetcdn.edge.states.freshness import (
    HEURISTIC_MAX,
    MAX_DELTA,
    NotStored,
    Reuse,
    corrected_initial_age,
    first_value,
    fresh_for_plain_requests_until,
    freshness,
    freshness_lifetime,
    http_date,
    invalidates,
    not_storable,
    parse_directives,
    request_directives,
    reuse,
    secondary_key,
    split_list,
    stored_headers,
    updated_headers,
    usable_on_error,
    validated_by,
    validators,
    vary_fields,
    withheld_fields,
)

NOW = 1_800_000_000.0


def date(offset: float = 0.0) -> str:
    return formatdate(NOW + offset, usegmt=True)


def test_directives_are_case_insensitive_unquoted_and_the_first_of_a_repeat_wins() -> None:
    assert parse_directives(['Max-Age=60, no-cache="Set-Cookie, X-A"', "max-age=5, public"]) == {
        "max-age": "60", "no-cache": "Set-Cookie, X-A", "public": None}
    assert parse_directives(["  ,, private ,"]) == {"private": None}


@pytest.mark.parametrize(("values", "members"), [
    (["a, b,,c ", " d"], ["a", "b", "c", "d"]),
    (['no-cache="set-cookie, x-id", max-age=5', "private"], ['no-cache="set-cookie, x-id"', "max-age=5", "private"]),
    (['a="x\\"y, z", b'], ['a="x\\"y, z"', "b"]),
    ([" , ", ""], []),
])
def test_list_members_split_at_commas_outside_quoted_strings(values: list[str], members: list[str]) -> None:
    assert split_list(values) == members


def test_pragma_no_cache_counts_only_without_cache_control() -> None:
    assert request_directives([("pragma", "no-cache")]) == {"no-cache": None}
    assert request_directives([("pragma", "no-cache"), ("cache-control", "max-age=5")]) == {"max-age": "5"}


@pytest.mark.parametrize("value", ["Sun, 06 Nov 1994 08:49:37 GMT", "Sunday, 06-Nov-94 08:49:37 GMT",
                                   "Sun Nov  6 08:49:37 1994"])
def test_the_three_http_date_forms(value: str) -> None:
    assert http_date(value) == 784111777.0


def test_an_invalid_date_is_none() -> None:
    assert http_date("0") is None
    assert http_date("yesterday") is None
    assert http_date("Fri, 30 Feb 2024 00:00:00 GMT") is None
    assert http_date("Sat, 31 Dec 2016 23:59:61 GMT") is None
    assert http_date("Sat, 31 Dec 2016 23:60:00 GMT") is None


@pytest.mark.parametrize("value", ["Sat, 31 Dec 2016 23:59:60 GMT", "Saturday, 31-Dec-16 23:59:60 GMT",
                                   "Sat Dec 31 23:59:60 2016"])
def test_a_leap_second_is_a_date(value: str) -> None:
    """RFC 9110 5.6.7 allows a second of 60: the moment before the next day begins (Unix time has no leap seconds,
    so it is that day's first second). It was read as no date: an Expires with one meant already stale."""
    assert http_date(value) == 1483228800.0  # 2017-01-01 00:00:00 UTC
    assert freshness_lifetime(200, [("expires", value), ("date", "Sat, 31 Dec 2016 23:58:00 GMT")], 0.0) == 120.0


@pytest.mark.parametrize(("headers", "lifetime"), [
    ([("cache-control", "max-age=60")], 60.0),
    ([("cache-control", "max-age=60, s-maxage=10")], 10.0),  # a shared cache takes s-maxage
    ([("expires", date(100)), ("date", date())], 100.0),
    ([("expires", date(100)), ("date", date()), ("cache-control", "max-age=7")], 7.0),
    ([("expires", "0"), ("date", date())], 0.0),               # invalid Expires: already stale
    ([("cache-control", "max-age=abc")], 0.0),                 # invalid max-age: already stale
    ([("cache-control", "max-age=99999999999")], float(MAX_DELTA)),
    ([("cdn-cache-control", "max-age=30"), ("cache-control", "max-age=600")], 30.0),
    ([("cdn-cache-control", "max-age=30"), ("expires", date(600)), ("date", date())], 30.0),
    ([("cdn-cache-control", ""), ("cache-control", "max-age=600")], 600.0),  # empty: not targeted
])
def test_explicit_lifetimes(headers: list[tuple[str, str]], lifetime: float) -> None:
    assert freshness_lifetime(200, headers, NOW) == lifetime


def test_heuristic_lifetime_is_a_tenth_of_the_time_since_last_modified_for_allowed_statuses() -> None:
    headers = [("date", date()), ("last-modified", date(-1000))]
    assert freshness_lifetime(200, headers, NOW) == 100.0
    assert freshness_lifetime(404, headers, NOW) == 100.0
    assert freshness_lifetime(302, headers, NOW) == 0.0  # not heuristically cacheable
    assert freshness_lifetime(200, [("last-modified", date(-10**8))], NOW) == HEURISTIC_MAX
    assert freshness_lifetime(200, [("date", date())], NOW) == 0.0


def test_age_adds_the_response_delay_and_the_time_resident() -> None:
    headers = [("date", date(-10)), ("age", "30")]
    # apparent age 10; Age 30 plus 2 s in transit: 32
    assert corrected_initial_age(headers, NOW - 2, NOW) == 32.0
    stored = freshness(200, [*headers, ("cache-control", "max-age=100")], NOW - 2, NOW)
    assert stored.age(NOW + 8) == 40.0
    assert stored.fresh_until() == NOW + 68
    # An Age that is not one integer cannot be trusted: the response counts as stale (RFC 9111 5.1).
    assert corrected_initial_age([("age", "junk")], NOW, NOW) == float(MAX_DELTA)


@pytest.mark.parametrize(("method", "status", "request_", "response", "why"), [
    ("GET", 200, [], [("cache-control", "max-age=60")], None),
    ("POST", 200, [], [("cache-control", "max-age=60")], NotStored.METHOD),
    ("GET", 206, [], [("cache-control", "max-age=60")], NotStored.STATUS),
    ("GET", 200, [], [("cache-control", "no-store, max-age=60")], NotStored.NO_STORE),
    ("GET", 200, [("cache-control", "no-store")], [("cache-control", "max-age=60")], NotStored.NO_STORE),
    ("GET", 200, [], [("cache-control", "private, max-age=60")], NotStored.PRIVATE),
    ("GET", 200, [], [("cache-control", 'private="x-user", max-age=60')], None),
    ("GET", 200, [("authorization", "Basic eA==")], [("cache-control", "max-age=60")], NotStored.AUTHORIZATION),
    ("GET", 200, [("authorization", "Basic eA==")], [("cache-control", "s-maxage=60")], None),
    ("GET", 200, [("authorization", "Basic eA==")], [("cache-control", "public")], None),
    ("GET", 200, [], [("cache-control", "max-age=60"), ("set-cookie", "a=b")], NotStored.SET_COOKIE),
    ("GET", 200, [], [("cache-control", "max-age=60"), ("vary", "Accept, *")], NotStored.VARY_STAR),
    ("GET", 200, [], [("cache-control", "max-age=60"), ("vary", ",".join(f"x-{i}" for i in range(32)))], None),
    ("GET", 200, [], [("cache-control", "max-age=60"), ("vary", ",".join(f"x-{i}" for i in range(16))),
                      ("vary", ",".join(f"y-{i}" for i in range(17)))], NotStored.VARY_TOO_MANY),
    ("GET", 302, [], [], NotStored.NO_FRESHNESS),
    ("GET", 200, [], [], None),  # heuristically cacheable (validated or given a heuristic lifetime)
    ("GET", 299, [], [("cache-control", "max-age=60, must-understand, no-store")], NotStored.STATUS),
    ("GET", 200, [], [("cache-control", "max-age=60, must-understand, no-store")], None),
])
def test_what_a_shared_cache_may_store(method: str, status: int, request_: list[tuple[str, str]],
                                       response: list[tuple[str, str]], why: NotStored | None) -> None:
    assert not_storable(method, status, request_, response) is why


def test_set_cookie_responses_are_stored_only_when_the_zone_says_so() -> None:
    headers = [("cache-control", "max-age=60"), ("set-cookie", "a=b")]
    assert not_storable("GET", 200, [], headers, store_set_cookie=True) is None


def test_stored_headers_leave_out_connection_fields_and_qualified_private_and_no_cache_fields() -> None:
    headers = [("cache-control", 'private="x-user", no-cache="x-token"'), ("connection", "x-hop"),
               ("x-hop", "1"), ("x-user", "u"), ("x-token", "t"), ("keep-alive", "5"), ("etag", '"a"')]
    assert stored_headers(headers) == (("cache-control", 'private="x-user", no-cache="x-token"'), ("etag", '"a"'))


def test_vary() -> None:
    assert vary_fields([("vary", "Accept-Encoding, accept"), ("vary", "X-A")]) == ("accept", "accept-encoding", "x-a")
    assert vary_fields([("vary", "*")]) is None
    one = secondary_key(("accept",), [("accept", "image/webp,  image/png")])
    two = secondary_key(("accept",), [("accept", "image/webp"), ("accept", "image/png")])
    assert one == two
    assert secondary_key(("accept",), []) != secondary_key(("accept",), [("accept", "")])
    # A field of the origin's own is read as a list (several lines are a list's: RFC 9110 5.3).
    assert secondary_key(("foo",), [("foo", "1, 2")]) == secondary_key(("foo",), [("foo", "1"), ("foo", "2")])
    # A field of one value is taken as sent: its spacing and its lines are part of its value.
    assert secondary_key(("user-agent",), [("user-agent", "a, b")]) != secondary_key(("user-agent",),
                                                                                  [("user-agent", "a,b")])
    assert secondary_key(("cookie",), [("cookie", "a=1"), ("cookie", "b=2")]) != secondary_key(
        ("cookie",), [("cookie", "a=1,b=2")])


def test_reuse_of_fresh_and_stale_responses() -> None:
    fresh = freshness(200, [("cache-control", "max-age=100")], NOW, NOW)
    assert reuse(fresh, {}, NOW + 50) is Reuse.FRESH
    assert reuse(fresh, {}, NOW + 101) is Reuse.VALIDATE
    assert reuse(fresh, {"no-cache": None}, NOW + 1) is Reuse.VALIDATE
    assert reuse(fresh, {"max-age": "10"}, NOW + 50) is Reuse.VALIDATE
    assert reuse(fresh, {"max-age": "60"}, NOW + 50) is Reuse.FRESH
    assert reuse(fresh, {"min-fresh": "60"}, NOW + 50) is Reuse.VALIDATE
    assert reuse(fresh, {"max-stale": None}, NOW + 10**6) is Reuse.FRESH
    assert reuse(fresh, {"max-stale": "5"}, NOW + 104) is Reuse.FRESH
    assert reuse(fresh, {"max-stale": "5"}, NOW + 106) is Reuse.VALIDATE


@pytest.mark.parametrize("cache_control", ["max-age=100", "max-age=0", "no-cache, max-age=100", "s-maxage=7",
                                           'no-cache="x-a", max-age=30', "max-age=10, must-revalidate"])
@pytest.mark.parametrize("age", ["0", "5", "99", "100", "250"])
@pytest.mark.parametrize("delay", [0.0, 0.25, 3.0])
def test_the_plain_request_bound_says_what_reuse_says(cache_control: str, age: str, delay: float) -> None:
    stored = freshness(200, [("cache-control", cache_control), ("age", age), ("date", date())], NOW, NOW + delay)
    until = fresh_for_plain_requests_until(stored)
    for now in [NOW - 50, NOW, NOW + delay, *(NOW + delay + step / 4 for step in range(0, 1300))]:
        assert (now < until) == (reuse(stored, {}, now) is Reuse.FRESH), now


def test_no_cache_and_must_revalidate_responses() -> None:
    no_cache = freshness(200, [("cache-control", "no-cache, max-age=100")], NOW, NOW)
    assert reuse(no_cache, {}, NOW) is Reuse.VALIDATE
    qualified = freshness(200, [("cache-control", 'no-cache="x-a", max-age=100')], NOW, NOW)
    assert reuse(qualified, {}, NOW) is Reuse.FRESH
    strict = freshness(200, [("cache-control", "max-age=1, must-revalidate")], NOW, NOW)
    assert reuse(strict, {"max-stale": None}, NOW + 5) is Reuse.VALIDATE
    assert not usable_on_error(strict, {}, NOW + 5)


def test_stale_while_revalidate_and_stale_if_error() -> None:
    headers = [("cache-control", "max-age=10, stale-while-revalidate=20, stale-if-error=60")]
    stored = freshness(200, headers, NOW, NOW)
    assert reuse(stored, {}, NOW + 25) is Reuse.STALE_REVALIDATING
    assert reuse(stored, {}, NOW + 31) is Reuse.VALIDATE
    assert usable_on_error(stored, {}, NOW + 69)
    assert not usable_on_error(stored, {}, NOW + 71)
    assert not usable_on_error(stored, {"stale-if-error": "5"}, NOW + 20)


@pytest.mark.parametrize("cache_control", ["s-maxage=10", "max-age=10, proxy-revalidate"])
def test_s_maxage_and_proxy_revalidate_allow_no_stale_answer_of_a_shared_cache(cache_control: str) -> None:
    """RFC 9111 5.2.2.10 and 4.2.4, as docs/api-guide.md says: neither window answers stale; a field targeted at
    this cache (CDN-Cache-Control) without them gives both."""
    windows = "stale-while-revalidate=20, stale-if-error=60"
    stored = freshness(200, [("cache-control", f"{cache_control}, {windows}")], NOW, NOW)
    assert reuse(stored, {}, NOW + 15) is Reuse.VALIDATE
    assert not usable_on_error(stored, {}, NOW + 15)
    targeted = freshness(200, [("cache-control", f"{cache_control}, {windows}"),
                               ("cdn-cache-control", f"max-age=10, {windows}")], NOW, NOW)
    assert reuse(targeted, {}, NOW + 15) is Reuse.STALE_REVALIDATING
    assert usable_on_error(targeted, {}, NOW + 15)


def test_validators_and_304_updates() -> None:
    headers = [("etag", '"v1"'), ("last-modified", date(-50)), ("content-type", "image/png"),
               ("cache-control", "max-age=10"), ("x-a", "old")]
    assert validators(headers) == [("if-none-match", '"v1"'), ("if-modified-since", date(-50))]
    not_modified = [("cache-control", "max-age=60"), ("x-a", "new"), ("content-type", "text/html"),
                    ("content-length", "0"), ("etag", 'W/"v1"')]
    assert validated_by(headers, not_modified)
    assert not validated_by(headers, [("etag", '"v2"')])
    assert updated_headers(headers, not_modified) == (
        ("etag", '"v1"'), ("last-modified", date(-50)),
        ("cache-control", "max-age=60"), ("x-a", "new"), ("content-type", "text/html"))
    # A 304 without a Date is dated when it arrived (RFC 9110 6.6.1), replacing the first response's; one with a
    # Date keeps its own.
    dated = [*headers, ("date", date(-50))]
    assert ("date", date(0)) in updated_headers(dated, [("cache-control", "max-age=60")], NOW)
    assert ("date", date(-5)) in updated_headers(dated, [("date", date(-5))], NOW)
    # The stored Age is the first exchange's: a 304 replaces it with its own, or leaves none (counted again beside
    # the 304's clocks, it made the confirmed response as old as the first one, RFC 9111 4.2.3).
    aged = [*dated, ("age", "50")]
    assert first_value(updated_headers(aged, [("cache-control", "max-age=60")], NOW), "age") is None
    assert first_value(updated_headers(aged, [("age", "3")], NOW), "age") == "3"
    refreshed = freshness(200, updated_headers(aged, [("date", date(0))], NOW), NOW - 1, NOW)
    assert refreshed.initial_age == 1.0
    # Fields the 304's qualified private or no-cache names leave the stored head, the first response's too.
    named = [("cache-control", 'max-age=60, private="X-A", no-cache="Last-Modified"')]
    assert updated_headers(headers, named) == (("etag", '"v1"'), ("content-type", "image/png"), *named)
    # ...but the 304's own fields they name are still the answer of the request it came for.
    cookie = [("cache-control", 'max-age=60, no-cache="Set-Cookie"'), ("set-cookie", "a=1"), ("etag", '"v1"')]
    assert withheld_fields(updated_headers(headers, cookie), cookie) == (("set-cookie", "a=1"),)
    stored_named = [*headers[:3], ("cache-control", 'max-age=10, private="Set-Cookie"')]
    assert withheld_fields(updated_headers(stored_named, [("set-cookie", "b=2")]), [("set-cookie", "b=2")]) == (
        ("set-cookie", "b=2"),)
    assert withheld_fields(updated_headers(headers, not_modified), not_modified) == ()


def test_a_304_without_an_etag_is_about_the_stored_response_only_with_its_last_modified() -> None:
    """RFC 9111 4.3.4: a stored response asked for with If-Modified-Since alone (it has no ETag) is selected by a 304
    whose Last-Modified is its own (or that has none); one naming another (an older file the origin went back to)
    selects nothing. A stored response with an ETag was asked with If-None-Match, which the origin evaluates first."""
    plain = [("last-modified", date(-50)), ("cache-control", "max-age=10")]
    assert validated_by(plain, [("cache-control", "max-age=60")])
    assert validated_by(plain, [("last-modified", date(-50))])
    assert validated_by(plain, [("last-modified", formatdate(NOW - 50, usegmt=False))])  # the same moment
    assert not validated_by(plain, [("last-modified", date(-500))])
    assert validated_by([("etag", '"v1"'), *plain], [("last-modified", date(-500))])
    assert validated_by([("cache-control", "max-age=10")], [("last-modified", date(-500))])


def test_unsafe_methods_invalidate_unless_they_failed() -> None:
    assert invalidates("POST", 200)
    assert invalidates("DELETE", 302)
    assert not invalidates("POST", 500)
    assert not invalidates("GET", 200)


def test_caching_directives_past_16_kb_in_all_read_as_no_store() -> None:
    """Read again at every look-up of a stored response: a head full of them cost each request for its URL."""
    many = ", ".join(f'ext{i}="v"' for i in range(1000))  # about 10 KB a line
    assert not_storable("GET", 200, [], [("cache-control", f"max-age=60, {many}")]) is None
    over = [("cache-control", f"max-age=60, {many}"), ("cdn-cache-control", many)]
    assert not_storable("GET", 200, [], over) is NotStored.NO_STORE
    assert request_directives([("cache-control", many), ("cache-control", many)]) == {"no-store": None}
    assert request_directives([("pragma", many), ("pragma", many)]) == {"no-store": None}
    assert request_directives([("cache-control", f"max-stale, {many}")])["max-stale"] is None


def test_only_a_second_may_be_60() -> None:
    assert http_date("Sat, 31 Dec 2016 23:60:60 GMT") is None
    assert http_date("Sat, 31 Dec 2016 24:59:60 GMT") is None
    assert http_date("Sat, 31 Dec 2016 23:59:60 +0100") == 1483228800.0 - 3600
