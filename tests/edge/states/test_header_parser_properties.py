"""Property tests of the pull zone's parsers of untrusted fields (assetcdn/edge/states/freshness.py, deliver.py):
well-formed values read as RFC 9110/9111 read them, and no value at all makes them raise. Derandomized and without
an example database, so a run is the same every time and writes nothing."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from assetcdn.edge.states import freshness
from assetcdn.edge.states.deliver import parse_range
from assetcdn.shared.conditionals import etag_matches, if_match_holds

PROPERTIES = settings(max_examples=400, derandomize=True, database=None, deadline=None,
                      suppress_health_check=list(HealthCheck))
OWS = st.sampled_from(["", " ", "\t", "  "])
# The opaque part of an entity-tag: any visible character but DQUOTE (RFC 9110 8.8.3), commas and slashes among them.
ENTITY_TAG = st.tuples(st.booleans(), st.text(alphabet=st.sampled_from(list('ab,;/W=*- \\')), max_size=5)).map(
    lambda weak_opaque: ("W/" if weak_opaque[0] else "") + '"' + weak_opaque[1].replace(" ", "") + '"')


@PROPERTIES
@given(st.lists(st.tuples(ENTITY_TAG, OWS, OWS), min_size=1, max_size=4), ENTITY_TAG)
def test_if_none_match_is_the_weak_comparison_of_each_member(members: list[tuple[str, str, str]], etag: str) -> None:
    """RFC 9110 13.1.2: If-None-Match holds when a member is weakly equal to the answer's ETag, whichever side is
    weak, commas inside entity-tags splitting nothing."""
    value = ",".join(before + tag + after for tag, before, after in members).strip(" \t")
    expected = any(tag.removeprefix("W/") == etag.removeprefix("W/") for tag, _, _ in members)
    assert etag_matches(value, etag) is expected
    assert etag_matches(value, etag.removeprefix("W/")) is expected  # a pull zone's hit compares it so


NAMES = st.sampled_from(["max-age", "Max-Age", "s-maxage", "stale-if-error", "x-ext", "no-cache", "private"])
TOKEN = st.from_regex(r"\A[a-z0-9-]{1,4}\Z")
QUOTED = st.text(alphabet=st.sampled_from(list('ab, ;=') + ["\\", '"']), max_size=6)


def quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


@PROPERTIES
@given(st.lists(st.tuples(NAMES, st.one_of(st.none(), TOKEN, QUOTED.map(lambda text: ("quoted", text))), OWS, OWS),
                min_size=1, max_size=5), st.booleans(), st.booleans())
def test_directives_are_read_as_written(members: list[tuple[str, object, str, str]], empty_members: bool,
                                        last_wins: bool) -> None:
    """Cache-Control (RFC 9111 5.2): names case-insensitive, quoted arguments unquoted (a comma or an escaped quote
    inside them splitting nothing), empty list members skipped; the first of a repeated directive counts (the last
    in CDN-Cache-Control, a dictionary), but every `no-cache` and `private` binds: an unqualified one makes it
    unqualified, qualified ones name their fields together."""
    parts: list[str] = []
    expected: dict[str, str | None] = {}
    for name, argument, before, after in members:
        if argument is None:
            text, value = name, None
        elif isinstance(argument, tuple):
            text, value = f"{name}={quote(argument[1])}", argument[1]
        else:
            assert isinstance(argument, str)
            text, value = f"{name}={argument}", argument
        parts.append(before + text + after)
        key = name.lower()
        if key in ("no-cache", "private") and key in expected:
            listed = expected[key]
            expected[key] = f"{listed}, {value}" if listed and value else None
        elif last_wins or key not in expected:
            expected[key] = value
    field = (", ," if empty_members else ",").join(parts)
    assert freshness.parse_directives([field], last_wins=last_wins) == expected


TEXT = st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x2FF), max_size=60)


@PROPERTIES
@given(TEXT)
def test_no_field_value_makes_a_parser_raise(value: str) -> None:
    """Every reader of an origin's or a client's field takes any text: a value it cannot read means what the RFCs
    say an invalid one means (stale, ignored, the whole body), never an exception (a 500, a dropped connection)."""
    response = [(name, value) for name in ("cache-control", "cdn-cache-control", "surrogate-control", "expires",
                                           "date", "age", "last-modified", "vary", "etag")]
    for head in (response, response[1:], response[2:]):
        freshness.not_storable("GET", 200, [("cache-control", value)], head)
        stored = freshness.freshness(200, head, 0.0, 1.0)
        freshness.reuse(stored, freshness.request_directives([("cache-control", value)]), 5.0)
        freshness.usable_on_error(stored, freshness.request_directives([("pragma", value)]), 5.0)
        freshness.stored_headers(head)
        freshness.vary_fields(head)
    freshness.request_http_date(value)
    for etag in ('"x"', 'W/"x"', None):
        etag_matches(value, etag)
        if_match_holds(value, etag)
    for size in (0, 10):
        parse_range(value, size)
