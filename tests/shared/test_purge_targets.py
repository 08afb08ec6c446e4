"""The one spelling purge URLs and pull zone tags are compared in, and the purge items control accepts."""

from __future__ import annotations

import pytest

from assetcdn.shared.purge_targets import PurgeTarget, normal_path, split_target


@pytest.mark.parametrize(("raw", "normal"), [
    ("/a%7eb/%7E/~", "/a~b/~/~"),                      # escapes of unreserved characters decoded
    ("/caf%c3%a9", "/caf%C3%A9"), ("/café", "/caf%C3%A9"),   # one case; what may not stand as it is escaped
    ("/a%2fb/a%2Fb", "/a%2Fb/a%2Fb"),                 # an escaped separator is no separator
    ("/sp ace/%20", "/sp%20ace/%20"), ("/100%/%zz", "/100%25/%25zz"),
    ("/keep/!$&'()*+,;=:@", "/keep/!$&'()*+,;=:@"),
])
def test_a_path_has_one_spelling_of_its_escapes(raw: str, normal: str) -> None:
    assert normal_path(raw) == normal
    assert normal_path(normal) == normal


@pytest.mark.parametrize(("item", "target"), [
    ("https://Zone.CDN.example:8443/v1/a%20b?x=1#f", PurgeTarget("zone.cdn.example", "/v1/a%20b")),
    ("http://cdn.example", PurgeTarget("cdn.example", "/")),
    ("/zone/v1/a.svg?x=1", PurgeTarget(None, "/zone/v1/a.svg")),
])
def test_a_url_or_path_is_taken_apart(item: str, target: PurgeTarget) -> None:
    assert split_target(item) == target


@pytest.mark.parametrize("item", [
    "", "zone/v1/a.svg", "//cdn.example/a", "ftp://cdn.example/a", "http:///a", "http://[::1/a", "/a\ud800",
    "/zone/../other", "/zone/%2E%2e/x", "/zone/..%5cx", "/zone/a%00b", "https://h/a%0d%0aX: y", "/a\tb",
    "/" + "a" * 2048, 7, None,
])
def test_what_names_no_url_is_refused(item: object) -> None:
    assert split_target(item) is None
