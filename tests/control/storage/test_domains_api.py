"""Core domains: POST/GET/DELETE /api/core/zones/{id}/domains (AccountKey), and the edge config they feed."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import TestClient

from assetcdn.control.acme.service import CERTIFICATES
from assetcdn.control.app import create_app
from assetcdn.control.storage.service import EDGE_CONFIG
from assetcdn.shared.cluster import PREFIX, sign_request
from assetcdn.shared.config import load_settings
from tests.control.expect import expect_error, parse_time
from tests.support.control import ACCESS, ACCOUNT, SECRETS


async def edge_domains(control: TestClient) -> dict[str, str]:
    path = PREFIX + "/config"
    resp = await control.get(path, headers=sign_request(SECRETS.cluster_secret, "GET", path))
    assert resp.status == 200
    return (await resp.json())["domains"]


async def add(control: TestClient, zone: str, hostname: Any) -> Any:
    return await control.post(f"/api/core/zones/{zone}/domains", json={"Hostname": hostname}, headers=ACCOUNT)


async def test_add_is_201_with_dns_instructions_and_reaches_the_edge(control: TestClient, zone: str) -> None:
    resp = await add(control, zone, "  CDN.Akande.COM ")
    assert resp.status == 201, await resp.text()
    body = await resp.json()
    assert set(body) == {"HttpCode", "Message", "Zone", "Hostname", "SslStatus", "SslExpiresAt", "SslError",
                         "SslRetryAt", "Note", "DateCreated"}
    # [acme] is off by default: no certificate is ordered, and the note says so
    assert (body["SslExpiresAt"], body["SslError"], body["SslRetryAt"]) == (None, None, None)
    assert "directory_url is not set" in body["Note"]
    assert (body["HttpCode"], body["Zone"], body["Hostname"], body["SslStatus"]) == \
        (201, "akande", "cdn.akande.com", "provisioning")
    assert "CNAME" in body["Note"] and "edge.cdn.localhost" in body["Note"] and "cdn.akande.com" in body["Note"]
    parse_time(body["DateCreated"])
    assert await edge_domains(control) == {"cdn.akande.com": "akande"}


async def test_list_and_remove(control: TestClient, zone: str) -> None:
    for host in ("b.akande.com", "a.akande.com", "c.akande.com"):
        assert (await add(control, zone, host)).status == 201
    resp = await control.get(f"/api/core/zones/{zone}/domains", headers=ACCOUNT)
    assert resp.status == 200
    listed = await resp.json()
    assert listed["Count"] == 3 and listed["Zone"] == "akande"
    assert [d["Hostname"] for d in listed["Domains"]] == ["a.akande.com", "b.akande.com", "c.akande.com"]
    assert all(d["SslStatus"] == "provisioning" and d["Zone"] == "akande" for d in listed["Domains"])

    resp = await control.delete(f"/api/core/zones/{zone}/domains/a.akande.com", headers=ACCOUNT)
    assert resp.status == 200
    assert (await resp.json())["Hostname"] == "a.akande.com"
    resp = await control.delete(f"/api/core/zones/{zone}/domains", params={"hostname": "B.akande.com"},
                                headers=ACCOUNT)
    assert resp.status == 200
    assert await edge_domains(control) == {"c.akande.com": "akande"}
    resp = await control.delete(f"/api/core/zones/{zone}/domains/a.akande.com", headers=ACCOUNT)
    await expect_error(resp, 404, "DomainNotFound")
    await expect_error(await control.delete(f"/api/core/zones/{zone}/domains", headers=ACCOUNT),
                       400, "MissingHostname")


async def test_a_used_hostname_is_409_in_any_zone(control: TestClient, zone: str) -> None:
    assert (await control.post("/api/core/zones", json={"Name": "other"}, headers=ACCOUNT)).status == 201
    assert (await add(control, zone, "cdn.akande.com")).status == 201
    await expect_error(await add(control, zone, "cdn.akande.com"), 409, "DomainExists")
    await expect_error(await add(control, "other", "CDN.akande.com"), 409, "DomainExists")
    # Removing it through the wrong zone is refused.
    resp = await control.delete("/api/core/zones/other/domains/cdn.akande.com", headers=ACCOUNT)
    await expect_error(resp, 404, "DomainNotFound")


@pytest.mark.parametrize("hostname", [
    "localhost", "akande", "192.168.1.10", "::1", "[2001:db8::1]", "10.0.0.1",
    "-bad.example.com", "bad-.example.com", "a..example.com", "under_score.example.com", "cdn.example.123",
    "x" * 64 + ".example.com", ("a" * 60 + ".") * 5 + "com", "cdn.akande.local", "printer.internal",
    "app.localhost", "cdn.localhost", "akande.cdn.localhost", "caf\u00e9.example.com", "cdn.example.com/x",
    "http://cdn.example.com",
])
async def test_invalid_hostnames_are_400(control: TestClient, zone: str, hostname: str) -> None:
    await expect_error(await add(control, zone, hostname), 400, "InvalidHostname")
    assert await edge_domains(control) == {}


@pytest.mark.parametrize("body", [{}, {"Hostname": ""}, {"Hostname": "  "}, {"Hostname": None}])
async def test_missing_hostname_is_400(control: TestClient, zone: str, body: dict[str, Any]) -> None:
    resp = await control.post(f"/api/core/zones/{zone}/domains", json=body, headers=ACCOUNT)
    await expect_error(resp, 400, "MissingHostname")


@pytest.mark.parametrize("hostname", [7, True, ["cdn.akande.com"], {"Hostname": "cdn.akande.com"}])
async def test_a_hostname_of_another_type_is_invalid_not_missing(control: TestClient, zone: str,
                                                                 hostname: Any) -> None:
    """`{"Hostname": 7}` was answered MissingHostname, though a hostname was sent."""
    body = await expect_error(await add(control, zone, hostname), 400, "InvalidHostname")
    assert body["error"]["target"] == "Hostname"
    assert await edge_domains(control) == {}


async def test_non_object_body_is_400(control: TestClient, zone: str) -> None:
    resp = await control.post(f"/api/core/zones/{zone}/domains", json=["cdn.akande.com"], headers=ACCOUNT)
    await expect_error(resp, 400, "InvalidBody")


async def test_unknown_zone_is_404(control: TestClient) -> None:
    await expect_error(await add(control, "nobody", "cdn.nobody.com"), 404, "ZoneNotFound")
    await expect_error(await control.get("/api/core/zones/nobody/domains", headers=ACCOUNT), 404, "ZoneNotFound")
    resp = await control.delete("/api/core/zones/nobody/domains/cdn.nobody.com", headers=ACCOUNT)
    await expect_error(resp, 404, "ZoneNotFound")


async def test_zone_delete_removes_its_domains(control: TestClient, zone: str) -> None:
    assert (await add(control, zone, "cdn.akande.com")).status == 201
    assert (await control.delete(f"/api/core/zones/{zone}", headers=ACCOUNT)).status == 200
    assert await edge_domains(control) == {}
    assert (await control.post("/api/core/zones", json={"Name": "akande"}, headers=ACCOUNT)).status == 201
    resp = await control.get("/api/core/zones/akande/domains", headers=ACCOUNT)
    assert (await resp.json())["Domains"] == []


async def test_a_domain_whose_body_comes_after_the_zones_deletion_is_not_added(control: TestClient) -> None:
    """The POST's head is in (its zone checked) when the zone is deleted; its body comes after. It must not add
    the name to the zone that is gone: such a domain could be neither removed (the zone is 404) nor added to
    another zone (409 DomainExists), and the edges would map the name to nothing."""
    assert (await control.post("/api/core/zones", json={"Name": "doomed"}, headers=ACCOUNT)).status == 201
    payload = orjson.dumps({"Hostname": "cdn.doomed.com"})
    assert control.server.port is not None
    reader, writer = await asyncio.open_connection("127.0.0.1", control.server.port)
    try:
        writer.write((f"POST /api/core/zones/doomed/domains HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                      f"AccountKey: {SECRETS.account_key}\r\nContent-Type: application/json\r\n"
                      f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n").encode())
        await writer.drain()
        await asyncio.sleep(0.2)  # the head read, the zone found; whichever comes first, the end must be the same
        assert (await control.delete("/api/core/zones/doomed", headers=ACCOUNT)).status == 200
        writer.write(payload)
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()
    assert answer.startswith(b"HTTP/1.1 404 "), answer[:60]
    assert "cdn.doomed.com" not in await edge_domains(control)
    assert (await control.post("/api/core/zones", json={"Name": "other"}, headers=ACCOUNT)).status == 201
    assert (await add(control, "other", "cdn.doomed.com")).status == 201


async def test_domains_a_stopped_deletion_left_behind_are_neither_published_nor_kept(control: TestClient) -> None:
    """Control stopped between a zone's deletion commit and the removal of its domains: the names must not stay
    mapped to the deleted zone on every edge, a zone made again under its name is not served on them, and each
    name can be added to a zone again (it was 409 DomainExists, and no DELETE could reach it: the zone is 404)."""
    store = control.app[EDGE_CONFIG]
    await store.add_domain("cdn.gone.com", "gone")
    await store.add_domain("www.gone.com", "gone")
    assert await edge_domains(control) == {}
    await control.app[CERTIFICATES].reconcile()  # nor is a certificate kept for them
    assert not {"cdn.gone.com", "www.gone.com"} & set(await control.app[CERTIFICATES].store.records())
    assert (await control.post("/api/core/zones", json={"Name": "taker"}, headers=ACCOUNT)).status == 201
    assert (await add(control, "taker", "cdn.gone.com")).status == 201
    assert (await control.post("/api/core/zones", json={"Name": "gone"}, headers=ACCOUNT)).status == 201
    resp = await control.get("/api/core/zones/gone/domains", headers=ACCOUNT)
    assert (await resp.json())["Domains"] == []
    assert await edge_domains(control) == {"cdn.gone.com": "taker"}
    assert (await add(control, "gone", "www.gone.com")).status == 201


@pytest.mark.parametrize("headers", [{}, ACCESS])
async def test_account_key_is_required(control: TestClient, zone: str, headers: dict[str, str]) -> None:
    resp = await control.post(f"/api/core/zones/{zone}/domains", json={"Hostname": "cdn.akande.com"},
                              headers=headers)
    await expect_error(resp, 401, "Unauthorized")
    await expect_error(await control.get(f"/api/core/zones/{zone}/domains", headers=headers), 401, "Unauthorized")


OWN_HOSTS = {"ASSETCDN_SERVER_PUBLIC_URL": "https://CDN.example.test/", "ASSETCDN_SERVER_HOST": "control.example.test",
             "ASSETCDN_DASHBOARD_PUBLIC_URL": "https://admin.example.test:8443",
             "ASSETCDN_DASHBOARD_ORIGINS": "https://admin.example.test:8443,https://ops.example.test",
             "ASSETCDN_DOMAINS_CNAME_TARGET": "edge.example.net"}


@pytest.fixture
async def own_hosts_control(aiohttp_client: Any, data_dir: Path) -> TestClient:
    """A control plane whose public, dashboard, control and CNAME hosts are names a zone could ask for."""
    client: TestClient = await aiohttp_client(create_app(load_settings(environ=OWN_HOSTS), SECRETS, data_dir))
    assert (await client.post("/api/core/zones", json={"Name": "akande"}, headers=ACCOUNT)).status == 201
    return client


@pytest.mark.parametrize("hostname", [
    "CDN.example.test.", "cdn.example.test", "Admin.Example.Test", "ops.example.test", "control.example.test.",
    "EDGE.example.net", "edge-7.example.test",
])
async def test_the_cdns_own_hosts_are_refused_in_any_case_and_with_a_trailing_dot(
        own_hosts_control: TestClient, hostname: str) -> None:
    control = own_hosts_control
    body = orjson.dumps({"name": "edge-7", "url": "http://Edge-7.Example.Test:9000", "generation": 0})
    path = PREFIX + "/register"
    resp = await control.post(path, data=body, headers=sign_request(SECRETS.cluster_secret, "POST", path, body))
    assert resp.status == 200, await resp.text()
    body_json = await expect_error(await add(control, "akande", hostname), 400, "InvalidHostname")
    assert body_json["error"]["target"] == "Hostname" and "host of this CDN" in body_json["Message"]
    assert await edge_domains(control) == {}
    listed = await (await control.get("/api/core/zones/akande/domains", headers=ACCOUNT)).json()
    assert listed["Domains"] == []
    assert (await add(control, "akande", "cdn.akande.com")).status == 201  # other names are still taken


async def test_a_stored_record_of_the_public_host_is_not_published(own_hosts_control: TestClient) -> None:
    control = own_hosts_control
    # A row written before the CDN's own hosts were refused: the edges never get it.
    await control.app[EDGE_CONFIG].add_domain("cdn.example.test", "akande")
    assert (await add(control, "akande", "cdn.akande.com")).status == 201
    assert await edge_domains(control) == {"cdn.akande.com": "akande"}
    resp = await control.delete("/api/core/zones/akande/domains/cdn.example.test", headers=ACCOUNT)
    assert resp.status == 200  # and its zone can still remove it


async def test_domains_are_capped_per_zone_and_per_installation(aiohttp_client: Any, data_dir: Path) -> None:
    settings = load_settings(environ={"ASSETCDN_DOMAINS_MAX_PER_ZONE": "2", "ASSETCDN_DOMAINS_MAX_TOTAL": "3"})
    control: TestClient = await aiohttp_client(create_app(settings, SECRETS, data_dir))
    for name in ("akande", "other"):
        assert (await control.post("/api/core/zones", json={"Name": name}, headers=ACCOUNT)).status == 201
    for host in ("a.akande.com", "b.akande.com"):
        assert (await add(control, "akande", host)).status == 201
    body = await expect_error(await add(control, "akande", "c.akande.com"), 400, "TooManyDomains")
    assert "domains.max_per_zone" in body["Message"] and body["error"]["target"] == "Hostname"
    assert (await add(control, "other", "a.other.com")).status == 201
    body = await expect_error(await add(control, "other", "b.other.com"), 400, "TooManyDomains")
    assert "domains.max_total" in body["Message"]
    assert await edge_domains(control) == {"a.akande.com": "akande", "b.akande.com": "akande",
                                           "a.other.com": "other"}
    assert (await control.delete("/api/core/zones/akande/domains/a.akande.com", headers=ACCOUNT)).status == 200
    assert (await add(control, "other", "b.other.com")).status == 201
