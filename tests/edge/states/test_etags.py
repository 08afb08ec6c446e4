"""If-None-Match against the ETag an answer carries (assetcdn/shared/conditionals.py `etag_matches`)."""

from __future__ import annotations

import pytest

from assetcdn.shared.conditionals import etag_matches


@pytest.mark.parametrize(("if_none_match", "etag", "matches"), [
    ('"a"', '"a"', True),
    ('W/"a"', '"a"', True),  # weak comparison (RFC 9110 13.1.2)
    ('"x", W/"a"', '"a"', True),
    ('"a,b"', '"a,b"', True),  # an entity-tag may hold a comma (8.8.3)
    ('"a", "b"', '"a,b"', False),
    ("*", None, True),
    ('"a"', None, False),
    ('"b"', '"a"', False),
    # An ETag an origin wrote malformed matches the very value a client sends back, as caches compare it.
    ('w/"abcdef"', 'w/"abcdef"', True),
    ('W\\"abcdef"', 'W\\"abcdef"', True),
    ('W"abcdef"', 'W"abcdef"', True),
    ('w/"abcdef"', 'w/"other"', False),
    ('"x", *', None, True),
    ('"x", *', '"a"', True),
    (' "a" ', '"a"', True),
    ("abc", '"abc"', True),  # a tag sent back unquoted, compared as if quoted
    ('W/"a,b"', '"a,b"', True),
    ('"a,b"', '"a"', False),
])
def test_if_none_match_names_an_etag(if_none_match: str, etag: str | None, matches: bool) -> None:
    assert etag_matches(if_none_match, etag) is matches
