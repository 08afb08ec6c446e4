"""Pull zones' origins: POST /api/core/zones with "Origin", GET/PUT/DELETE /api/core/zones/{id}/origin (AccountKey
or a token with zones:read / zones:write), and the published config that carries origins to the edges.

The tests share one control plane (each a control app of its own made the module slow and large), each with
zones of its own names; the refusals check that they changed nothing."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import jsonschema_rs
import orjson
import pytest
import pytest_asyncio
from aiohttp.test_utils import TestClient, TestServer

from assetcdn.control.app import create_app
from assetcdn.control.publishing.service import PUBLISHER
from assetcdn.control.storage.service import EDGE_CONFIG
from assetcdn.shared.cluster import PREFIX, sign_request
from assetcdn.shared.config import load_settings
from assetcdn.shared.openapi import document
from assetcdn.shared.pull_origin import parse_origin
from tests.control.expect import commit_count, expect_error
from tests.support.control import ACCESS, ACCOUNT, SECRETS

pytestmark = pytest.mark.asyncio(loop_scope="module")

ORIGIN_SECRET = "do-not-show-this-value"
ORIGIN = {"Url": "https://Origin.Example.com/assets/", "HostHeader": "www.example.com",
          "RequestHeaders": {"X-Origin-Secret": ORIGIN_SECRET}}
SHOWN = {"Url": "https://origin.example.com/assets", "HostHeader": "www.example.com",
         "RequestHeaders": {"X-Origin-Secret": "(set)"}, "StoreSetCookie": False}

BAD_URLS = [
    "origin.example.com/assets",                    # no scheme
    "ftp://origin.example.com/assets",
    "https://user:pass@origin.example.com/",
    "https://user@origin.example.com/",
    "https://origin.example.com/assets?key=1",
    "https://origin.example.com/assets?",
    "https://origin.example.com/assets#top",
    "https://origin.example.com:0/",
    "http:///assets",
    "http://10.0.0.1/assets",
    "http://169.254.169.254/latest/meta-data",
    "http://[fd00::1]/",
    "http://192.168.1.10:8080/",
    "http://localhost:8080/",
    "http://assets.localhost/",
    "http://127.0.0.1:8080/",
    "http://[::1]:8080/",
    "http://intranet/",                             # a single label: a private network's name
    "https://origin.example.com/a b",
    # IPv4 in the spellings a resolver takes as numbers, and hosts that are no host names.
    "http://127.1/", "http://0x7f.1/", "http://0177.0.0.1/", "http://10.1/", "http://169.254.43518/",
    "http://127.0.0.1./", "http://169.254.169.254./", "http://[fec0::1]/",
    "http://[v1.fe80::a+en1]/", "http://ex.com%40127.0.0.1/", "http://a_b.example/",
    # Names Python's IDNA codec takes (dropping the character) but the edges' URL parser refuses, and a
    # bracketed literal that is no IPv6 address.
    "https://ori\u00adgin.example.com/", "https://ori\u200bgin.example.com/", "http://[v1.x]/",
    # A tab, which the URL parser drops: the URL stored and fetched would not be the one given.
    "https://origin.exa\tmple.com/", "https://origin.example.com\t/assets", "https://origin.example.com/a\tb",
    # A host longer than any DNS name (253 characters), which the edges could never look up.
    "https://" + "a." * 125 + "example/",
    # 2048 characters as sent, 2049 with the host in lower case (`İ` is `i` and a combining dot), as it would be
    # stored: a URL no reader of the stored origins takes (every zone's listing and the edges' config were 500).
    "https://\u0130x.example.com/" + "p" * (2048 - len("https://\u0130x.example.com/")),
    "",
    42,
]
BAD_HEADERS: list[Any] = [
    {"Host": "evil.example"},
    {"host": "evil.example"},
    {"Connection": "close"},
    {"Transfer-Encoding": "chunked"},
    {"X-Forwarded-For": "1.2.3.4"},
    {"If-None-Match": '"x"'},
    # Spelled with `_` for `-`: servers that pass fields as CGI variables read them as the reserved ones.
    {"If_None_Match": '"x"'},
    {"X_Forwarded_For": "1.2.3.4"},
    {"CDN-Loop": "mine"},  # the client's values and the edge's loop mark travel in it
    {"Surrogate-Capability": 'mine="Surrogate/1.0"'},  # the edge's own replaced it: it never reached the origin
    {"Surrogate_Capability": 'mine="Surrogate/1.0"'},
    {"Content_Length": "0"},
    # Hop-by-hop fields the edge never passes on from a client (they concern the connection to the next proxy, and
    # the edge is the one that talks to the origin), and Request-Range, the old Range that Apache httpd still
    # honours (its 206 or a 416 for every client of the URL).
    {"Proxy-Authorization": "Basic dXNlcjpwYXNz"},
    {"Proxy_Authorization": "Basic dXNlcjpwYXNz"},
    {"Proxy-Authenticate": "Basic"},
    {"Proxy-Authentication-Info": "nextnonce=x"},
    {"HTTP2-Settings": "AAMAAABkAARAAAAAAAIAAAAA"},
    {"Request-Range": "bytes=0-99"},
    {"Request_Range": "bytes=0-99"},
    # One field named twice, as the edge compares names: it would send one value, or both to such a server.
    {"X-Origin-Secret": "a", "x-origin-secret": "b"},
    {"X-Origin-Secret": "a", "X_Origin_Secret": "b"},
    {"X-Split": "value\r\nInjected: yes"},
    {"X-Split": "value\nInjected: yes"},
    {"X-Nul": "a\x00b"},
    {"Bad Name": "x"},
    {"X-Long": "x" * 1025},
    {"X-Number": 1},
    {f"X-H{i}": "v" for i in range(21)},
    ["X-Origin-Secret", "v"],
    [],
    "",
    False,
]


async def published_origins(control: TestClient) -> dict[str, Any]:
    """The origins in the config the edges fetch (GET /api/cluster/config)."""
    path = PREFIX + "/config"
    resp = await control.get(path, headers=sign_request(SECRETS.cluster_secret, "GET", path))
    assert resp.status == 200
    origins: dict[str, Any] = (await resp.json()).get("origins", {})  # absent while no zone pulls
    return origins


async def create(control: TestClient, name: str, origin: Any) -> Any:
    return await control.post("/api/core/zones", json={"Name": name, "Origin": origin}, headers=ACCOUNT)


async def zone_names(control: TestClient) -> list[str]:
    resp = await control.get("/api/core/zones", headers=ACCOUNT)
    return [zone["Name"] for zone in await resp.json()]


@asynccontextmanager
async def control_app(data_dir: Path, **env: str) -> AsyncIterator[TestClient]:
    client = TestClient(TestServer(create_app(load_settings(environ=env), SECRETS, data_dir)))
    await client.start_server()
    try:
        yield client
    finally:
        await client.close()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def shared(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[tuple[TestClient, Path]]:
    data_dir = tmp_path_factory.mktemp("origins") / "data"
    async with control_app(data_dir) as client:
        yield client, data_dir


@pytest.fixture
def control(shared: tuple[TestClient, Path]) -> TestClient:
    return shared[0]


async def storage_zone(control: TestClient, name: str) -> str:
    resp = await control.post("/api/core/zones", json={"Name": name}, headers=ACCOUNT)
    assert resp.status == 201, await resp.text()
    return name


async def test_a_zone_created_with_an_origin_is_a_pull_zone_and_reaches_the_edges(control: TestClient) -> None:
    resp = await create(control, "created", ORIGIN)
    assert resp.status == 201, await resp.text()
    body = await resp.json()
    assert (body["Kind"], body["Origin"]) == ("pull", SHOWN)
    assert "https://origin.example.com/assets" in body["Message"]
    # The edges get the header's value: they send it to the origin.
    assert (await published_origins(control))["created"] == {**SHOWN, "RequestHeaders": ORIGIN["RequestHeaders"]}
    resp = await control.get("/api/core/zones/created/origin", headers=ACCOUNT)
    assert resp.status == 200
    got = await resp.json()
    assert (got["HttpCode"], got["Zone"], got["Kind"], got["Origin"]) == (200, "created", "pull", SHOWN)


async def test_zone_summaries_say_which_zones_pull_and_from_where(control: TestClient) -> None:
    zone = await storage_zone(control, "summed")
    assert (await create(control, "summedpull", ORIGIN)).status == 201
    resp = await control.get("/api/core/zones", headers=ACCOUNT)
    listed = {z["Name"]: (z["Kind"], z["Origin"]) for z in await resp.json() if z["Name"].startswith("summed")}
    assert listed == {zone: ("storage", None), "summedpull": ("pull", SHOWN)}
    for name, kind, origin in ((zone, "storage", None), ("summedpull", "pull", SHOWN)):
        detail = await (await control.get(f"/api/core/zones/{name}", headers=ACCOUNT)).json()
        assert (detail["Kind"], detail["Origin"]) == (kind, origin)


async def test_header_values_are_never_shown_back(control: TestClient) -> None:
    """Only the names of the zone's request fields: their values are secrets the origin checks."""
    answers = [await create(control, "secretive", ORIGIN)]
    changed = {**ORIGIN, "RequestHeaders": {"X-Origin-Secret": ORIGIN_SECRET, "Authorization": f"Bearer {ORIGIN_SECRET}"}}
    answers.append(await control.put("/api/core/zones/secretive/origin", json=changed, headers=ACCOUNT))
    for path in ("/api/core/zones/secretive/origin", "/api/core/zones/secretive", "/api/core/zones"):
        answers.append(await control.get(path, headers=ACCOUNT))
    for resp in answers:
        assert resp.status in (200, 201)
        text = await resp.text()
        assert "X-Origin-Secret" in text and ORIGIN_SECRET not in text, text


async def test_put_sets_or_replaces_the_origin_and_delete_removes_it(control: TestClient) -> None:
    zone = await storage_zone(control, "switched")
    await expect_error(await control.get(f"/api/core/zones/{zone}/origin", headers=ACCOUNT), 404, "NoOrigin")
    resp = await control.put(f"/api/core/zones/{zone}/origin", json={"Url": "https://a.example.com"}, headers=ACCOUNT)
    assert resp.status == 200, await resp.text()
    body = await resp.json()
    assert (body["Kind"], body["Origin"]["Url"], body["Origin"]["RequestHeaders"]) == \
        ("pull", "https://a.example.com", {})
    resp = await control.put(f"/api/core/zones/{zone}/origin", json={**ORIGIN, "StoreSetCookie": True},
                             headers=ACCOUNT)
    assert resp.status == 200
    assert (await resp.json())["Origin"] == {**SHOWN, "StoreSetCookie": True}
    assert (await published_origins(control))[zone]["StoreSetCookie"] is True
    detail = await (await control.get(f"/api/core/zones/{zone}", headers=ACCOUNT)).json()
    assert detail["Kind"] == "pull"

    resp = await control.delete(f"/api/core/zones/{zone}/origin", headers=ACCOUNT)
    assert resp.status == 200
    assert ((await resp.json())["Kind"], (await resp.json())["Origin"]) == ("storage", None)
    assert zone not in await published_origins(control)
    await expect_error(await control.get(f"/api/core/zones/{zone}/origin", headers=ACCOUNT), 404, "NoOrigin")
    await expect_error(await control.delete(f"/api/core/zones/{zone}/origin", headers=ACCOUNT), 404, "NoOrigin")
    detail = await (await control.get(f"/api/core/zones/{zone}", headers=ACCOUNT)).json()
    assert (detail["Kind"], detail["Origin"]) == ("storage", None)


async def test_an_origin_sent_back_as_an_answer_showed_it_keeps_its_secret(control: TestClient) -> None:
    """A PUT of the origin a GET showed (its URL changed) would replace the zone's secret with the `(set)` shown in
    its place, and the origin would get that: it is refused, and the zone keeps its origin and secret."""
    assert (await create(control, "roundtrip", ORIGIN)).status == 201
    shown = (await (await control.get("/api/core/zones/roundtrip/origin", headers=ACCOUNT)).json())["Origin"]
    assert shown["RequestHeaders"] == {"X-Origin-Secret": "(set)"}
    resp = await control.put("/api/core/zones/roundtrip/origin", json={**shown, "Url": shown["Url"] + "/v2"},
                             headers=ACCOUNT)
    body = await expect_error(resp, 400, "InvalidOrigin")
    assert body["error"]["target"] == "Origin.RequestHeaders" and "X-Origin-Secret" in body["error"]["message"]
    assert (await published_origins(control))["roundtrip"] == {**SHOWN, "RequestHeaders": ORIGIN["RequestHeaders"]}


async def test_the_origin_routes_of_a_zone_that_does_not_exist_are_404(control: TestClient) -> None:
    for method in ("GET", "PUT", "DELETE"):
        resp = await control.request(method, "/api/core/zones/nobody/origin", json=ORIGIN, headers=ACCOUNT)
        await expect_error(resp, 404, "ZoneNotFound")
    assert "nobody" not in await published_origins(control)


async def test_deleting_the_zone_removes_its_origin(control: TestClient) -> None:
    assert (await create(control, "deleted", ORIGIN)).status == 201
    assert (await control.delete("/api/core/zones/deleted", headers=ACCOUNT)).status == 200
    assert "deleted" not in await published_origins(control)
    # A zone created again under the name is a stored zone: nothing of the old origin is left.
    await storage_zone(control, "deleted")
    await expect_error(await control.get("/api/core/zones/deleted/origin", headers=ACCOUNT), 404, "NoOrigin")
    assert "deleted" not in await published_origins(control)


async def test_an_origin_named_in_unicode_is_answered_as_the_api_document_describes_it(control: TestClient) -> None:
    """A host name in Unicode (an IDN: the edges look it up in its ASCII form) and a path prefix outside ASCII (asked
    for percent-encoded) are taken and shown back as given. The document called `Url` a `uri` (RFC 3986: ASCII
    only), which such an answer is not, so a client that held the answers to the document refused them."""
    origin = {"Url": "https://b\u00fccher.example/bilder/gr\u00f6\u00dfe"}
    resp = await create(control, "unicoded", origin)
    assert resp.status == 201, await resp.text()
    answers = [(await resp.json())["Origin"]]
    answers.append((await (await control.get("/api/core/zones/unicoded/origin", headers=ACCOUNT)).json())["Origin"])
    assert [answer["Url"] for answer in answers] == [origin["Url"]] * 2
    schema = {**document()["components"]["schemas"]["PullOrigin"], "components": document()["components"]}
    validator = jsonschema_rs.Draft202012Validator(schema, validate_formats=True)
    assert [error.message for answer in answers for error in validator.iter_errors(answer)] == []


async def refused_both_ways(shared: tuple[TestClient, Path], origin: Any, target: str) -> None:
    """400 InvalidOrigin naming `target`, for a new zone and for a zone's PUT, with nothing changed."""
    control, data_dir = shared
    if "refusing" not in await zone_names(control):
        await storage_zone(control, "refusing")
    commits, before = commit_count(data_dir), await published_origins(control)
    body = await expect_error(await create(control, "refused", origin), 400, "InvalidOrigin")
    assert body["error"]["target"] == target
    resp = await control.put("/api/core/zones/refusing/origin", json=origin, headers=ACCOUNT)
    body = await expect_error(resp, 400, "InvalidOrigin")
    assert body["error"]["target"] == target
    assert commit_count(data_dir) == commits   # no zone without its origin
    assert "refused" not in await zone_names(control)
    assert await published_origins(control) == before
    assert "refusing" not in before


@pytest.mark.parametrize("url", BAD_URLS)
async def test_an_origin_url_that_is_not_a_public_http_url_is_400(shared: tuple[TestClient, Path], url: Any) -> None:
    await refused_both_ways(shared, {"Url": url}, "Origin.Url")


@pytest.mark.parametrize("headers", BAD_HEADERS)
async def test_request_headers_a_zone_may_not_send_are_400(shared: tuple[TestClient, Path], headers: Any) -> None:
    await refused_both_ways(shared, {"Url": "https://origin.example.com", "RequestHeaders": headers},
                            "Origin.RequestHeaders")


@pytest.mark.parametrize(("origin", "target"), [
    ("https://origin.example.com", "Origin"),
    ({"Url": "https://origin.example.com", "Extra": 1}, "Origin"),
    ({"Url": "https://origin.example.com", "HostHeader": "a b"}, "Origin.HostHeader"),
    ({"Url": "https://origin.example.com", "HostHeader": "evil.example\r\nX: y"}, "Origin.HostHeader"),
    ({"Url": "https://origin.example.com", "HostHeader": "www.example.com:0"}, "Origin.HostHeader"),
    ({"Url": "https://origin.example.com", "HostHeader": "www.example.com:65536"}, "Origin.HostHeader"),
    # Longer than a host name may be: every origin request would carry it (origins answer 400 or 431 to it).
    ({"Url": "https://origin.example.com", "HostHeader": "a." * 125 + "example"}, "Origin.HostHeader"),
    ({"Url": "https://origin.example.com", "HostHeader": "a." * 4000 + "example"}, "Origin.HostHeader"),
    ({"Url": "https://origin.example.com", "StoreSetCookie": "yes"}, "Origin.StoreSetCookie"),
    # No Host field (RFC 9110 7.2): empty, an empty port, outside ASCII, a space, a path, an IPv6 literal unclosed,
    # not an IPv6 address, with a zone id (an interface of the edge), or an IPvFuture literal (as the Url refuses).
    *[({"Url": "https://origin.example.com", "HostHeader": host}, "Origin.HostHeader")
      for host in ("", "www.example.com:", "bücher.example", "www.example.com.\t", "www.example.com/a", "[::1",
                   "[::1]]", "[::g]", "[::1%25eth0]", "[v1.x]", "[::1]:0", "[::1]:65536", "[::1]8080", "::1")],
])
async def test_an_origin_of_another_shape_is_400(shared: tuple[TestClient, Path], origin: Any, target: str) -> None:
    await refused_both_ways(shared, origin, target)


@pytest.mark.parametrize("host", ["www.example.com.", "www.example.com.:8443", "[::1]", "[2001:db8::1]:8080",
                                  "192.0.2.1:8080", "my_site.internal", "xn--bcher-kva.example", "a." * 123 + "example."])
async def test_a_host_header_is_taken_in_any_form_a_host_field_may_have(control: TestClient, host: str) -> None:
    """RFC 9110 7.2: a Host is a URI's host (a name, an absolute one with its trailing dot as the edge sends a URL's
    by default, an IPv4 address or an IPv6 literal in brackets) with an optional port. The absolute name and the
    IPv6 literal were refused."""
    name = "hosted" + hashlib.sha256(host.encode()).hexdigest()[:8]
    resp = await create(control, name, {"Url": "https://origin.example.com", "HostHeader": host})
    assert resp.status == 201, await resp.text()
    assert (await resp.json())["Origin"]["HostHeader"] == host
    assert (await published_origins(control))[name]["HostHeader"] == host
    assert parse_origin((await published_origins(control))[name]).host_header == host  # as the edges read it


@pytest.mark.parametrize("url", ["http://127.0.0.1:9000", "http://localhost:8080/assets", "http://[::1]:8080"])
async def test_a_loopback_origin_refused_names_the_setting_that_allows_it(control: TestClient, url: str) -> None:
    """An operator following a tutorial's origin on their own machine is told which development setting lets it
    through; the message said only "a development setting"."""
    body = await expect_error(await create(control, "local", {"Url": url}), 400, "InvalidOrigin")
    assert body["error"]["target"] == "Origin.Url"
    assert "ASSETCDN_ORIGIN_ALLOW_LOOPBACK=true" in body["error"]["message"]
    assert "[origin] allow_loopback" in body["error"]["message"]
    private = await expect_error(await create(control, "private", {"Url": "http://10.0.0.1/"}), 400, "InvalidOrigin")
    assert "allow_loopback" not in private["error"]["message"]  # no setting lets a private network's address in


async def test_loopback_origins_need_the_development_setting(tmp_path: Path) -> None:
    async with control_app(tmp_path / "data", ASSETCDN_ORIGIN_ALLOW_LOOPBACK="true") as control:
        for i, url in enumerate(("http://localhost:8080", "http://127.0.0.1:9000/assets", "http://[::1]:8080")):
            resp = await create(control, f"local{i}", {"Url": url})
            assert resp.status == 201, await resp.text()
        # Private networks and metadata addresses stay refused whatever the setting says.
        for url in ("http://10.0.0.1/", "http://169.254.169.254/", "http://192.168.0.2/"):
            await expect_error(await create(control, "private", {"Url": url}), 400, "InvalidOrigin")
        # An IPv6 zone id names an interface of the edge, not the origin: refused, in either spelling.
        for url in ("http://[::1%25lo]:8080", "http://[::1%lo]:8080"):
            body = await expect_error(await create(control, "zoned", {"Url": url}), 400, "InvalidOrigin")
            assert body["error"]["target"] == "Origin.Url" and "zone" in body["error"]["message"]
        assert sorted(await published_origins(control)) == ["local0", "local1", "local2"]


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


async def mint(control: TestClient, scope: str) -> dict[str, str]:
    resp = await control.post("/api/tokens", json={"name": scope, "scopes": [scope]}, headers=ACCOUNT)
    assert resp.status == 201, await resp.text()
    return bearer((await resp.json())["token"])


async def test_changing_an_origin_needs_zones_write(control: TestClient) -> None:
    zone = await storage_zone(control, "guarded")
    reader, writer = await mint(control, "zones:read"), await mint(control, "zones:write")
    assert (await control.put(f"/api/core/zones/{zone}/origin", json=ORIGIN, headers=ACCOUNT)).status == 200
    refused = [{}, ACCESS, {"AccountKey": "wrong"}, reader]
    for headers in refused:
        for method in ("PUT", "DELETE"):
            resp = await control.request(method, f"/api/core/zones/{zone}/origin", json={"Url": "https://b.example.com"},
                                         headers=headers)
            await expect_error(resp, 401, "Unauthorized")
        resp = await control.post("/api/core/zones", json={"Name": "intruder", "Origin": ORIGIN}, headers=headers)
        await expect_error(resp, 401, "Unauthorized")
    for headers in ({}, ACCESS, {"AccountKey": "wrong"}):
        await expect_error(await control.get(f"/api/core/zones/{zone}/origin", headers=headers), 401, "Unauthorized")
    assert (await published_origins(control))[zone]["Url"] == SHOWN["Url"]     # nothing changed
    assert "intruder" not in await zone_names(control)
    assert (await control.get(f"/api/core/zones/{zone}/origin", headers=reader)).status == 200
    resp = await control.put(f"/api/core/zones/{zone}/origin", json={"Url": "https://b.example.com"}, headers=writer)
    assert resp.status == 200
    assert (await control.delete(f"/api/core/zones/{zone}/origin", headers=writer)).status == 200
    assert zone not in await published_origins(control)


async def test_an_origin_put_whose_body_comes_after_the_zones_deletion_leaves_no_origin(control: TestClient) -> None:
    """The PUT's head is in (its zone checked) when the zone is deleted; its body comes after. It must not leave
    an origin for a zone that is gone: the edges build pull zones from the published origins alone, and a zone
    made again under the name would be a pull zone."""
    assert (await control.post("/api/core/zones", json={"Name": "racy"}, headers=ACCOUNT)).status == 201
    payload = orjson.dumps({"Url": "https://origin.example.com/"})
    assert control.server.port is not None
    reader, writer = await asyncio.open_connection("127.0.0.1", control.server.port)
    try:
        writer.write((f"PUT /api/core/zones/racy/origin HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                      f"AccountKey: {SECRETS.account_key}\r\nContent-Type: application/json\r\n"
                      f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n").encode())
        await writer.drain()
        await asyncio.sleep(0.2)  # the head read, the zone found; whichever comes first, the end must be the same
        assert (await control.delete("/api/core/zones/racy", headers=ACCOUNT)).status == 200
        writer.write(payload)
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()
    assert answer.startswith(b"HTTP/1.1 404 "), answer[:60]
    assert "racy" not in await published_origins(control)
    assert (await control.post("/api/core/zones", json={"Name": "racy"}, headers=ACCOUNT)).status == 201
    await expect_error(await control.get("/api/core/zones/racy/origin", headers=ACCOUNT), 404, "NoOrigin")


async def test_a_lower_case_origin_field_makes_a_pull_zone_as_name_may_be_lower_case(control: TestClient) -> None:
    resp = await control.post("/api/core/zones", json={"name": "lowered", "origin": {"Url": "https://origin.example.com/"}},
                              headers=ACCOUNT)
    assert resp.status == 201
    assert (await resp.json())["Kind"] == "pull"


async def test_no_file_is_stored_in_a_pull_zone(shared: tuple[TestClient, Path]) -> None:
    """Its paths are the origin's: a file stored there would never be served, so the upload is refused (409), a
    batch that holds one commits nothing, and the message says what to do instead."""
    control, data_dir = shared
    assert (await create(control, "pullonly", ORIGIN)).status == 201
    plain = await storage_zone(control, "pullbeside")
    commits = commit_count(data_dir)
    resp = await control.put("/api/storage/pullonly/v1/icons/a.txt", data=b"hello", headers=ACCESS)
    body = await expect_error(resp, 409, "PullZone")
    assert body["error"]["target"] == "path"
    assert "https://origin.example.com/assets" in body["Message"] and "/api/core/zones/pullonly/origin" in body["Message"]

    files = [{"path": f"{plain}/v1/icons/b.txt", "content": "b", "encoding": "utf-8"},
             {"path": "pullonly/v1/icons/c.txt", "content": "c", "encoding": "utf-8"}]
    resp = await control.post("/api/storage/batch", json={"files": files}, headers=ACCESS)
    body = await expect_error(resp, 400, "InvalidBatch")
    assert [(problem["index"], problem["path"]) for problem in body["error"]["details"]] == \
        [(1, "pullonly/v1/icons/c.txt")]
    assert "pull zone" in body["error"]["details"][0]["message"]
    assert commit_count(data_dir) == commits
    for path in (f"{plain}/v1/icons/b.txt", "pullonly/v1/icons/a.txt", "pullonly/v1/icons/c.txt"):
        assert (await control.get(f"/api/storage/{path}", headers=ACCESS)).status == 404, path


async def test_an_origin_set_on_a_zone_with_files_keeps_them_unserved_and_says_so(control: TestClient) -> None:
    zone = await storage_zone(control, "hadfiles")
    resp = await control.put(f"/api/storage/{zone}/v1/icons/kept.txt", data=b"kept", headers=ACCESS)
    assert resp.status == 201, await resp.text()
    resp = await control.put(f"/api/core/zones/{zone}/origin", json={"Url": "https://a.example.com"}, headers=ACCOUNT)
    assert resp.status == 200
    body = await resp.json()
    assert (body["Kind"], body["StoredFiles"]) == ("pull", 1)
    assert "1 stored file is kept but not served" in body["Message"]
    assert (await (await control.get(f"/api/core/zones/{zone}/origin", headers=ACCOUNT)).json())["StoredFiles"] == 1
    resp = await control.delete(f"/api/core/zones/{zone}/origin", headers=ACCOUNT)
    assert ((await resp.json())["Kind"], (await resp.json())["StoredFiles"]) == ("storage", 1)
    got = await control.get(f"/api/storage/{zone}/v1/icons/kept.txt", headers=ACCESS)
    assert (got.status, await got.read()) == (200, b"kept")
    # A storage zone again: uploads are taken.
    assert (await control.put(f"/api/storage/{zone}/v1/icons/new.txt", data=b"n", headers=ACCESS)).status == 201


async def test_a_zone_created_again_while_its_delete_finishes_keeps_its_origin(
        control: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """A delete removes the zone's origin after its commit: a create of the same name with an origin, landing in
    between, made a pull zone that the delete then turned into a storage zone (its origin removed)."""
    assert (await create(control, "reborn", {"Url": "https://a.example.com"})).status == 201
    publisher = control.app[PUBLISHER]  # type: ignore[index]  # the TestServer's application
    commit_planned = publisher.commit_planned

    async def commit_then_create_again(plan: Any) -> Any:
        published = await commit_planned(plan)
        monkeypatch.setattr(publisher, "commit_planned", commit_planned)
        resp = await create(control, "reborn", ORIGIN)
        assert resp.status == 201, await resp.text()
        return published

    monkeypatch.setattr(publisher, "commit_planned", commit_then_create_again)
    assert (await control.delete("/api/core/zones/reborn", headers=ACCOUNT)).status == 200
    resp = await control.get("/api/core/zones/reborn/origin", headers=ACCOUNT)
    assert resp.status == 200, await resp.text()
    assert (await resp.json())["Origin"] == SHOWN
    assert (await published_origins(control))["reborn"]["Url"] == SHOWN["Url"]


@pytest.mark.parametrize(("path", "method", "codes"), [
    ("/api/core/zones", "post", ["InvalidOrigin", "ZoneExists", "InvalidName", "MissingName", "InvalidBody"]),
    ("/api/core/zones/{id}/origin", "get", ["NoOrigin", "ZoneNotFound"]),
    ("/api/core/zones/{id}/origin", "put", ["InvalidOrigin", "ZoneNotFound"]),
    ("/api/core/zones/{id}/origin", "delete", ["NoOrigin", "ZoneNotFound"]),
])
async def test_the_api_document_names_the_error_codes_these_routes_answer(path: str, method: str, codes: list[str]) -> None:
    """The codes the tests above get back (the contract's error envelope leaves `code` open: the operation says)."""
    described = document()["paths"][path][method]["description"]
    assert [code for code in codes if f"`{code}`" not in described] == []



async def test_an_origin_a_stopped_deletion_left_behind_is_neither_published_nor_taken_by_a_new_zone(
        control: TestClient) -> None:
    """Control stopped between a pull zone's deletion commit and the removal of its origin: the edges must not
    go on pulling the deleted zone's paths, and a zone created again under its name is a storage zone, without the
    old origin and its secret fields."""
    store = control.app[EDGE_CONFIG]
    await store.set_origin("left-behind", parse_origin({**ORIGIN, "Url": "http://127.0.0.1:9/old"}))
    assert "left-behind" not in (await store.snapshot()).get("origins", {})
    created = await control.post("/api/core/zones", json={"Name": "left-behind"}, headers=ACCOUNT)
    assert created.status == 201, await created.text()
    assert ((await created.json())["Kind"], (await created.json())["Origin"]) == ("storage", None)
    shown = await control.get("/api/core/zones/left-behind", headers=ACCOUNT)
    assert ((await shown.json())["Kind"], (await shown.json())["Origin"]) == ("storage", None)
    assert await store.origin("left-behind") is None
