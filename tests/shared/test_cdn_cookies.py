"""What a Set-Cookie sets its cookie for, read as browsers read its Domain attribute (RFC 6265 5.2.3, 5.3): the
edges pass an origin's cookie on the CDN's own hosts only when it names no other host, and on a zone's custom domain
only when it names neither the base domain nor a domain above it (assetcdn/edge/states/pull.py `client_headers`;
through real edges in tests/edge/routes/test_pull_zones.py)."""

from __future__ import annotations

import pytest

from assetcdn.shared.cdn_cookies import cookie_domain, domains_holding, may_set, set_for

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


def test_the_domains_holding_a_base_domain_are_it_and_every_domain_above_it() -> None:
    assert domains_holding("cdn.example.com") == {"cdn.example.com", "example.com", "com"}
    assert domains_holding("") == frozenset()


@pytest.mark.parametrize(("set_cookie", "kept"), [
    ("a=1; Path=/", True),
    ("a=1; Domain=shop.example.com", True),                    # the custom domain's own
    ("a=1; Domain=.Shop.Example.COM", True),
    ("a=1; Domain=example.org", True),                         # one that does not hold the base domain
    ("a=1; Domain=ample.com", True),                           # a suffix of its text, not a domain above it
    ("a=1; Domain=.", True),                                   # names no host (a browser keeps it host-only)
    ("a=1; Domain=example.com", False),                        # every zone's tenant host is below it
    ("a=1; Domain=.EXAMPLE.com", False),
    ("a=1; Domain=com", False),
    ("a=1; Domain=cdn.example.com", False),                    # the base domain itself
    ("a=1; Domain=example.com; Domain=", False),               # the last one with a value counts
    ("a=1; Domain=example.com; Domain=shop.example.com", True),
])
def test_on_a_custom_domain_a_cookie_is_set_for_no_domain_holding_the_base_domain(set_cookie: str,
                                                                                  kept: bool) -> None:
    """A custom domain beside or above the base domain (`shop.example.com` or `example.com` for `cdn.example.com`)
    could otherwise set a cookie that browsers send to every zone's tenant host (`EdgeConfig.cookie_host`)."""
    assert may_set(set_cookie, domains_holding("cdn.example.com")) is kept


@pytest.mark.parametrize(("set_cookie", "cookie_host", "kept"), [
    ("a=1; Domain=example.com", None, True),                   # a custom domain with no base domain: any
    ("a=1; Domain=example.com", "", False),                    # the default host: host-only cookies alone
    ("a=1", "", True),
    ("a=1; Domain=zone1.cdn.example.com", "zone1.cdn.example.com", True),
    ("a=1; Domain=cdn.example.com", "zone1.cdn.example.com", False),
])
def test_on_the_cdns_own_hosts_and_without_a_base_domain_the_rule_is_the_hosts(set_cookie: str,
                                                                               cookie_host: str | None,
                                                                               kept: bool) -> None:
    assert may_set(set_cookie, cookie_host) is kept
