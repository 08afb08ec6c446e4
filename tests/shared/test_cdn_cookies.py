"""What a Set-Cookie sets its cookie for, read as browsers read its Domain attribute (RFC 6265 5.2.3, 5.3): the
edges pass an origin's cookie on the CDN's own hosts only when it names no other host (assetcdn/edge/states/pull.py
`client_headers`; through real edges in tests/edge/routes/test_pull_zones.py)."""

from __future__ import annotations

import pytest

from assetcdn.shared.cdn_cookies import cookie_domain, set_for

HOST = "zone1.cdn.example"


@pytest.mark.parametrize(("set_cookie", "domain"), [
    ("a=1", None),
    ("a=1; Path=/; HttpOnly", None),
    ("a=1; Domain=", None),                                    # an empty value: the attribute ignored
    ("a=1; Domain=cdn.example; Domain=", "cdn.example"),       # ... and the one before it still counts
    ("a=1; Domain=.CDN.Example", "cdn.example"),
    ("a=1;\tdomain\t=\t..cdn.example ", ".cdn.example"),      # one leading dot dropped, no more
    ("a=1; Domain=zone1.cdn.example; Domain=cdn.example", "cdn.example"),  # the last one counts
    ("a=1; Domain=.", ""),
    ("a=1; Domains=cdn.example; X-Domain=cdn.example", None),  # other attributes' names
    ("Domain=cdn.example", None),                              # the cookie's own name and value, no attribute
    ('a="x; Domain=cdn.example"', "cdn.example\""),            # a quote hides no `;`
])
def test_the_domain_is_the_last_domain_attribute_with_a_value(set_cookie: str, domain: str | None) -> None:
    assert cookie_domain(set_cookie) == domain


@pytest.mark.parametrize(("set_cookie", "host", "kept"), [
    ("a=1; Path=/", HOST, True),
    ("a=1; Domain=.ZONE1.cdn.example", HOST, True),
    ("a=1; Domain=cdn.example", HOST, False),
    ("a=1; Domain=other.zone1.cdn.example", HOST, False),
    ("a=1; Domain=.", HOST, False),
    ("a=1", "", True),                          # the default host: host-only cookies alone
    ("a=1; Domain=", "", True),
    ("a=1; Domain=.", "", False),
    ("a=1; Domain=localhost", "", False),
])
def test_a_cookie_is_set_for_the_host_when_it_is_host_only_or_names_that_host(set_cookie: str, host: str,
                                                                              kept: bool) -> None:
    assert set_for(set_cookie, host) is kept
