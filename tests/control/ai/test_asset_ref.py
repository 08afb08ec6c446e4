"""Which `url` values name an asset, and which asset."""

from __future__ import annotations

import pytest

from assetcdn.control.ai.asset_ref import OwnHosts, cdn_path_of_url
from assetcdn.shared.errors import ApiError

HOSTS = OwnHosts.build(["https://cdn.example.net", "http://127.0.0.1:18788", "http://10.1.2.3:8788"],
                       {"img.akande.example": "akande"}, "cdn.example.net")


@pytest.mark.parametrize("raw, path", [
    ("/akande/v1/logos/logo.svg", "akande/v1/logos/logo.svg"),
    ("akande/v1/logos/logo.svg", "akande/v1/logos/logo.svg"),
    ("clients/akande/v1/logos/logo.svg", "akande/v1/logos/logo.svg"),
    ("/clients/akande/v1/logos/logo.svg", "akande/v1/logos/logo.svg"),
    ("/stocks/images/hero.png", "stocks/images/hero.png"),
    ("https://cdn.example.net/akande/v1/logos/logo.svg", "akande/v1/logos/logo.svg"),
    ("HTTPS://CDN.EXAMPLE.NET/akande/v1/logos/my%20logo.svg", "akande/v1/logos/my logo.svg"),
    ("http://127.0.0.1:18788/stocks/images/hero.png", "stocks/images/hero.png"),
    ("http://10.1.2.3:8788/akande/v1/logos/logo.svg", "akande/v1/logos/logo.svg"),   # a registered edge
    ("https://img.akande.example/v1/logos/logo.svg", "akande/v1/logos/logo.svg"),
    ("https://img.akande.example/stocks/images/hero.png", "stocks/images/hero.png"),
    ("https://akande.cdn.example.net/v1/logos/logo.svg", "akande/v1/logos/logo.svg"),
])
def test_asset_forms(raw: str, path: str) -> None:
    assert cdn_path_of_url(raw, HOSTS) == path


@pytest.mark.parametrize("raw, status, code", [
    ("https://cdn.example.net.evil.com/akande/v1/logos/logo.svg", 400, "AbsoluteUrlForbidden"),
    ("https://evilcdn.example.net/akande/v1/logos/logo.svg", 400, "AbsoluteUrlForbidden"),
    ("http://cdn.example.net/akande/v1/logos/logo.svg", 400, "AbsoluteUrlForbidden"),     # port 80, not 443
    ("http://127.0.0.1:18789/akande/v1/logos/logo.svg", 400, "AbsoluteUrlForbidden"),
    ("http://10.1.2.4:8788/akande/v1/logos/logo.svg", 400, "AbsoluteUrlForbidden"),
    ("http://0x7f000001:18788/akande/v1/logos/logo.svg", 400, "AbsoluteUrlForbidden"),
    ("gopher://cdn.example.net/akande/v1/logos/logo.svg", 400, "AbsoluteUrlForbidden"),
    ("https://cdn.example.net:99999/x", 400, "AbsoluteUrlForbidden"),
    ("https://cdn.example.net/akande/v1/logos/%252e%252e/x", 400, "InvalidUrl"),
    ("https://cdn.example.net/clients/akande/v1/logos/logo.svg", 400, "InvalidUrl"),
    ("https://cdn.example.net/api/ai/alt-text", 400, "InvalidUrl"),
    ("https://img.akande.example/other/v1/logos/logo.svg", 404, "AssetNotFound"),
    ("/akande/v1/logos/.git/config", 400, "InvalidUrl"),
    ("/akande/v1/logos/a\nb.svg", 400, "InvalidUrl"),
    ("clients", 400, "InvalidUrl"),
])
def test_refusals(raw: str, status: int, code: str) -> None:
    with pytest.raises(ApiError) as caught:
        cdn_path_of_url(raw, HOSTS)
    assert (caught.value.status, caught.value.code, caught.value.target) == (status, code, "url")


def test_absolute_urls_need_the_host_list() -> None:
    with pytest.raises(ApiError) as caught:
        cdn_path_of_url("https://cdn.example.net/akande/v1/logos/logo.svg")
    assert caught.value.code == "AbsoluteUrlForbidden"


def test_the_cdns_own_hosts_under_the_base_domain_name_every_zone() -> None:
    """The public URL's host may be `<label>.<base domain>`: it is the default host, as the edges read it (the
    published config's own hosts), not the tenant host of a zone `<label>`."""
    hosts = OwnHosts.build(["https://assets.cdn.example.net"], {}, "cdn.example.net", ["assets.cdn.example.net"])
    assert cdn_path_of_url("https://assets.cdn.example.net/akande/v1/logos/logo.svg", hosts) == \
        "akande/v1/logos/logo.svg"
    assert cdn_path_of_url("https://akande.cdn.example.net/v1/logos/logo.svg", hosts) == "akande/v1/logos/logo.svg"


def test_a_base_domain_written_with_its_trailing_dot_still_names_the_tenant_hosts() -> None:
    """`[domains] base_domain = "cdn.example.net."`, which the edges read as `cdn.example.net`."""
    hosts = OwnHosts.build(["https://cdn.example.net"], {}, "cdn.example.net.")
    assert cdn_path_of_url("https://akande.cdn.example.net/v1/logos/logo.svg", hosts) == "akande/v1/logos/logo.svg"
