"""The config control publishes to edges: one typed message, its version unchanged, malformed input refused."""

from __future__ import annotations

import pytest

from assetcdn.shared.published_config import PublishedConfig

HEADERS = "/*\n  X-Frame-Options: DENY\n"


def test_the_version_is_the_hash_edges_already_hold() -> None:
    # As control computed it before the type existed: a changed version would make every edge refetch.
    config = PublishedConfig.build(headers=HEADERS, redirects=None, domains={"img.acme.example": "acme"},
                                   base_domain="cdn.localhost")
    assert config.version == "44bb2e9930cdc822"
    assert config.to_json() == {"version": "44bb2e9930cdc822", "headers": HEADERS, "redirects": None,
                                "domains": {"img.acme.example": "acme"}, "base_domain": "cdn.localhost"}


def test_the_message_round_trips_and_a_config_kept_before_base_domain_existed_still_reads() -> None:
    config = PublishedConfig.build(headers=None, redirects="/a /b 301\n", domains={}, base_domain="")
    assert PublishedConfig.from_json(config.to_json()) == config
    assert PublishedConfig.from_json({"version": "v1"}) == PublishedConfig("v1")
    own = PublishedConfig.build(headers=None, redirects=None, domains={}, base_domain="cdn.localhost",
                                own_hosts=("edge.cdn.localhost",))
    assert PublishedConfig.from_json(own.to_json()) == own and own.own_hosts == ("edge.cdn.localhost",)
    assert own.version != PublishedConfig.build(headers=None, redirects=None, domains={},
                                                base_domain="cdn.localhost").version


@pytest.mark.parametrize("message", [
    [],
    {},
    {"version": ""},
    {"version": 7},
    {"version": "v1", "headers": 3},
    {"version": "v1", "domains": ["img.acme.example"]},
    {"version": "v1", "domains": {"img.acme.example": 1}},
    {"version": "v1", "base_domain": ["cdn"]},
    {"version": "v1", "own_hosts": "edge.cdn.localhost"},
    {"version": "v1", "own_hosts": [1]},
])
def test_a_malformed_message_is_refused(message: object) -> None:
    with pytest.raises(ValueError):
        PublishedConfig.from_json(message)
