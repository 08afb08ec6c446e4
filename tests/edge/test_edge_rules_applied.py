"""The edge's view of control's config: tenant hosts map to zones, header rules touch delivery responses only."""

from __future__ import annotations

from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from assetcdn.edge.app import is_delivery
from assetcdn.edge.site_config import (
    FORWARDED,
    EdgeConfig,
    apply_rule_changes,
    request_host,
    tenant_path,
)
from assetcdn.edge.states.deliver import header_changes
from assetcdn.shared.published_config import PublishedConfig

SNAPSHOT = {
    "version": "v1",
    "headers": "/acme/v1/*\n  X-Frame-Options: DENY\n  ! Cache-Control\n",
    "redirects": "/old/logo.svg /acme/v1/logos/logo.svg 301\n",
    "domains": {"IMG.Acme.example": "acme"},
    "base_domain": "cdn.localhost",
}


def test_tenant_hosts_map_to_their_zone() -> None:
    config = EdgeConfig.from_published(PublishedConfig.from_json(SNAPSHOT))
    assert config.zone_for_host("img.acme.example") == "acme"
    assert config.zone_for_host("img.acme.example:8788") == "acme"
    assert config.zone_for_host("beta.cdn.localhost") == "beta"
    assert config.zone_for_host("x_y.cdn.localhost") is None  # not a zone name
    assert config.zone_for_host("cdn.localhost") is None
    assert config.zone_for_host("127.0.0.1:8788") is None
    assert tenant_path(config.zone_for_host("img.acme.example"), "/v1/logos/logo.svg") == "/acme/v1/logos/logo.svg"
    assert tenant_path(config.zone_for_host("127.0.0.1:8788"), "/acme/v1/logos/logo.svg") \
        == "/acme/v1/logos/logo.svg"


def test_redirect_rules_come_from_the_snapshot() -> None:
    redirect = EdgeConfig.from_published(PublishedConfig.from_json(SNAPSHOT)).rules.redirects.match("/old/logo.svg")
    assert redirect is not None and (redirect.status, redirect.location) == (301, "/acme/v1/logos/logo.svg")


def on_response(config: EdgeConfig, request: web.Request, response: web.StreamResponse) -> None:
    """What the application's response hook does to the headers (assetcdn/edge/app.py)."""
    if is_delivery(request):
        apply_rule_changes(header_changes(config, request.path, request_host(request)), response.headers)


def test_header_rules_apply_to_deliveries_but_not_to_forwarded_api_calls() -> None:
    config = EdgeConfig.from_published(PublishedConfig.from_json(SNAPSHOT))
    request = make_mocked_request("GET", "/acme/v1/logos/logo.svg")
    response = web.Response(headers={"Cache-Control": "public, max-age=3600"})
    on_response(config, request, response)
    assert response.headers["X-Frame-Options"] == "DENY"
    assert "Cache-Control" not in response.headers

    forwarded = make_mocked_request("GET", "/acme/v1/logos/logo.svg")
    forwarded[FORWARDED] = True
    untouched = web.Response(headers={"Cache-Control": "no-store"})
    on_response(config, forwarded, untouched)
    assert untouched.headers["Cache-Control"] == "no-store" and "X-Frame-Options" not in untouched.headers
