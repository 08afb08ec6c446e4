"""What every client sees around the handlers: 401 and 404 in the standard envelope, request ids, version
headers, and which credential each plane accepts."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import orjson
import pytest
import pytest_asyncio
from aiohttp.test_utils import TestClient

from assetcdn.control.identity.auth import SESSION_COOKIE, session_cookie_value
from tests.control.expect import expect_error
from tests.control.identity.signin_client import as_dashboard_listener
from tests.support.control import ACCESS, ACCOUNT, SECRETS, control_with_zone
from tests.support.sockets import raw_answer

ACCESS_ROUTES = [
    ("PUT", "/api/storage/akande/v1/logos/logo.svg"),
    ("GET", "/api/storage/akande/v1/logos/logo.svg"),
    ("GET", "/api/storage/akande/v1/"),
    ("DELETE", "/api/storage/akande/v1/logos/logo.svg"),
    ("POST", "/api/storage/batch"),
    ("GET", "/api/assets"),
    ("GET", "/api/assets/metadata?path=akande/v1/logos/logo.svg"),
]
ACCOUNT_ROUTES = [
    ("GET", "/api/core/zones"),
    ("POST", "/api/core/zones"),
    ("GET", "/api/core/zones/akande"),
    ("DELETE", "/api/core/zones/akande"),
    ("POST", "/api/tokens"),
    ("GET", "/api/tokens"),
    ("DELETE", "/api/tokens?id=x"),
]
WRONG = [{}, {"AccessKey": "wrong"}, {"AccountKey": "wrong"}, {"AccessKey": ""},
         {"AccessKey": SECRETS.access_key + "x"}, {"x-api-key": SECRETS.purge_key},
         {"Authorization": f"Bearer {SECRETS.access_key}"}]
# The refusals below change nothing (a 401 or 404 answers before any handler runs), so their ~130 cases
# share one control plane, with the zone `akande`, instead of starting one each.
IN_MODULE_LOOP = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def refusing(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[TestClient]:
    async with control_with_zone(tmp_path_factory.mktemp("envelopes") / "data") as client:
        yield client


@IN_MODULE_LOOP
@pytest.mark.parametrize(("method", "path"), ACCESS_ROUTES)
@pytest.mark.parametrize("headers", WRONG + [ACCOUNT])
async def test_access_routes_without_the_access_key_are_401(refusing: TestClient, method: str, path: str,
                                                            headers: dict[str, str]) -> None:
    resp = await refusing.request(method, path, data=b"<svg/>", headers=headers)
    body = await expect_error(resp, 401, "Unauthorized")
    assert "AccessKey" in body["Message"]
    assert body["error"]["target"] is None and body["error"]["details"] == []


@IN_MODULE_LOOP
@pytest.mark.parametrize(("method", "path"), ACCOUNT_ROUTES)
@pytest.mark.parametrize("headers", WRONG + [ACCESS])
async def test_account_routes_without_the_account_key_are_401(refusing: TestClient, method: str,
                                                              path: str, headers: dict[str, str]) -> None:
    resp = await refusing.request(method, path, json={"Name": "other"}, headers=headers)
    body = await expect_error(resp, 401, "Unauthorized")
    assert "AccountKey" in body["Message"]


async def test_head_without_a_key_is_401_with_headers_and_no_body(control: TestClient, zone: str) -> None:
    resp = await control.head("/api/storage/akande/v1/logos/logo.svg")
    assert resp.status == 401
    uuid.UUID(resp.headers["X-Request-ID"])
    assert resp.headers["X-API-Version"] == "2026-04-01"
    assert await resp.read() == b""


async def test_every_response_gets_a_fresh_request_id(control: TestClient) -> None:
    first = await expect_error(await control.get("/api/assets"), 401, "Unauthorized")
    second = await expect_error(await control.get("/api/assets"), 401, "Unauthorized")
    assert first["requestId"] != second["requestId"]


async def test_a_client_request_id_is_kept_when_it_is_a_uuid(control: TestClient) -> None:
    mine = str(uuid.uuid4())
    body = await expect_error(await control.get("/api/assets", headers={"X-Request-ID": mine}), 401, "Unauthorized")
    assert body["requestId"] == mine
    body = await expect_error(await control.get("/api/assets", headers={"X-Request-ID": "<script>"}),
                              401, "Unauthorized")
    assert body["requestId"] != "<script>"


@pytest.mark.parametrize("form", ["{%s}", "urn:uuid:%s", "%s"])
async def test_a_client_request_id_comes_back_in_canonical_form(control: TestClient, form: str) -> None:
    mine = uuid.uuid4()
    sent = form % mine.hex.upper()
    body = await expect_error(await control.get("/api/assets", headers={"X-Request-ID": sent}), 401, "Unauthorized")
    assert body["requestId"] == str(mine)


async def test_successful_responses_carry_the_version_headers(control: TestClient, zone: str) -> None:
    for resp in (await control.get("/api/assets", headers=ACCESS), await control.get("/api/core/zones", headers=ACCOUNT),
                 await control.get("/api/storage/", headers=ACCESS)):
        assert resp.status == 200
        assert resp.headers["X-API-Version"] == "2026-04-01"
        uuid.UUID(resp.headers["X-Request-ID"])


@pytest.mark.parametrize(("path", "headers"), [
    ("/api/storage/akande/v1/", ACCESS), ("/api/assets/metadata?path=akande/v1/logos/logo.svg", ACCESS),
    ("/api/core/zones", ACCOUNT), ("/api/core/zones/akande", ACCOUNT), ("/api/core/rules", ACCOUNT),
    ("/api/core/statistics", ACCOUNT), ("/api/insights/summary", ACCESS), ("/api/core/audit-logs", ACCOUNT),
    ("/api/tokens", ACCOUNT), ("/api/core/zones", {}),
])
async def test_answers_behind_a_key_are_never_kept_by_a_shared_cache(control: TestClient, zone: str, path: str,
                                                                    headers: dict[str, str]) -> None:
    # The keys travel in headers of their own (AccessKey, AccountKey), not Authorization, so RFC 9111 3.5 does not
    # keep a shared cache (a proxy in front of the API) from storing these answers and giving them to anyone.
    resp = await control.put("/api/storage/akande/v1/logos/logo.svg", data=b"<svg/>", headers=ACCESS)
    assert resp.status == 201
    resp = await control.get(path, headers=headers)
    assert resp.status == (200 if headers else 401), await resp.text()
    assert resp.headers["Cache-Control"] == "no-store"


async def test_a_stored_file_is_kept_by_its_readers_own_cache_only_and_revalidated(control: TestClient,
                                                                                 zone: str) -> None:
    resp = await control.put("/api/storage/akande/v1/logos/logo.svg", data=b"<svg/>", headers=ACCESS)
    assert resp.status == 201
    for method in ("GET", "HEAD"):
        read = await control.request(method, "/api/storage/akande/v1/logos/logo.svg", headers=ACCESS)
        assert (read.status, read.headers["Cache-Control"]) == (200, "private, no-cache")
        again = await control.request(method, "/api/storage/akande/v1/logos/logo.svg",
                                      headers={**ACCESS, "If-None-Match": read.headers["ETag"]})
        assert (again.status, again.headers["Cache-Control"]) == (304, "private, no-cache")
    listed = await control.get("/api/assets", headers=ACCESS)  # the catalog says its own: a 30 s private copy
    assert listed.headers["Cache-Control"] == "private, max-age=30"


@IN_MODULE_LOOP
@pytest.mark.parametrize(("method", "path"), [
    ("GET", "/api/nothing"), ("POST", "/api/nothing/here"), ("GET", "/api/"), ("GET", "/api/core/zones/akande/x"),
    ("PATCH", "/api/nothing"), ("GET", "/api/core"), ("GET", "/api/storagex/a.svg"),
])
async def test_unknown_api_paths_are_404_in_the_standard_envelope(refusing: TestClient, method: str,
                                                                  path: str) -> None:
    # Unknown paths are 404 whatever the credential: no route, no auth to declare.
    for headers in ({}, ACCESS, ACCOUNT):
        body = await expect_error(await refusing.request(method, path, headers=headers), 404, "NotFound")
        assert path in body["Message"]


@IN_MODULE_LOOP
@pytest.mark.parametrize(("method", "path", "allowed"), [
    ("PUT", "/api/core/zones", {"GET", "HEAD", "POST"}),
    ("PUT", "/api/core/rules", {"GET", "HEAD", "POST"}),
    ("PATCH", "/api/core/zones/akande", {"GET", "HEAD", "DELETE"}),
    ("PATCH", "/api/tokens", {"GET", "HEAD", "POST", "DELETE"}),
    ("POST", "/api/storage/akande/v1/logos/logo.svg", {"GET", "HEAD", "PUT", "DELETE"}),
    ("DELETE", "/api/insights/summary", {"GET", "HEAD"}),
    ("PUT", "/api/webhooks", {"GET", "HEAD", "POST", "DELETE"}),
    ("GET", "/api/pipeline", {"POST"}),
])
async def test_a_method_a_known_path_does_not_take_is_405_naming_the_methods_it_takes(
        refusing: TestClient, method: str, path: str, allowed: set[str]) -> None:
    # RFC 9110 15.5.6: the path exists, the method does not apply to it; Allow names the ones that do. Whatever the
    # credential: the methods of a path are public (/api/openapi.json lists them).
    for headers in ({}, ACCESS, ACCOUNT):
        resp = await refusing.request(method, path, headers=headers)
        body = await expect_error(resp, 405, "MethodNotAllowed")
        assert method in body["Message"] and path in body["Message"]
        assert {name.strip() for name in resp.headers["Allow"].split(",")} == allowed


@IN_MODULE_LOOP
@pytest.mark.parametrize(("method", "path", "allowed"), [
    ("GET", "/api/purge", {"POST"}), ("DELETE", "/api/search", {"GET", "HEAD", "OPTIONS"}), ("PUT", "/api/chat", {"POST"}),
])
async def test_a_legacy_endpoint_answers_405_in_its_own_envelope(refusing: TestClient, method: str, path: str,
                                                                 allowed: set[str]) -> None:
    resp = await refusing.request(method, path)
    body = await resp.json()
    assert resp.status == 405 and body["HttpCode"] == 405, body
    assert isinstance(body["error"], str) and body["Message"] == body["error"]
    assert {m.strip() for m in resp.headers["Allow"].split(",")} == allowed


@IN_MODULE_LOOP
@pytest.mark.parametrize(("head", "status", "code"), [
    (f"GET /api/assets?q={'q' * 9000} HTTP/1.1\r\nHost: x\r\n\r\n", 414, "URITooLong"),
    (f"GET /api/purge?q={'q' * 9000} HTTP/1.1\r\nHost: x\r\n\r\n", 414, None),  # a legacy route: its envelope
    (f"GET /api/assets HTTP/1.1\r\nHost: x\r\nCookie: {'c' * 9000}\r\n\r\n", 431, "RequestHeaderFieldsTooLarge"),
    (f"GET /api/assets HTTP/1.1\r\nHost: x\r\nX-{'n' * 9000}: 1\r\n\r\n", 431, "RequestHeaderFieldsTooLarge"),
])
async def test_an_over_long_request_line_is_414_and_an_over_long_field_431(refusing: TestClient, head: str,
                                                                           status: int, code: str | None) -> None:
    """RFC 9110 15.5.15 and RFC 6585 5, in the envelope of the route asked for (the request's path is not known when
    a field is too long: the standard one); both were 400 BadRequest, which told a client nothing of what to shorten.
    The connection is closed after it (the rest of the head is not read)."""
    assert refusing.port is not None
    answer = await raw_answer(refusing.port, head.encode())
    status_line, _, rest = answer.partition(b"\r\n")
    body = orjson.loads(rest.partition(b"\r\n\r\n")[2])
    assert status_line.split()[1] == str(status).encode() and body["HttpCode"] == status, answer[:300]
    if code is None:
        assert isinstance(body["error"], str) and body["Message"] == body["error"]
    else:
        assert body["error"]["code"] == code and body["Message"] == body["error"]["message"]


class TestSessionCookie:
    @pytest.fixture(autouse=True)
    def on_the_dashboard_listener(self, control: TestClient) -> None:
        as_dashboard_listener(control)  # the session is honoured there only (assetcdn/control/identity/dashboard_origin.py)

    async def test_valid_session_reads_storage(self, control: TestClient, zone: str) -> None:
        cookie = session_cookie_value(SECRETS.session_secret, nonce=uuid.uuid4().hex)
        await control.put("/api/storage/akande/v1/logos/logo.svg", data=b"<svg/>", headers=ACCESS)
        resp = await control.get("/api/storage/akande/v1/logos/", headers={"Cookie": f"{SESSION_COOKIE}={cookie}"})
        assert resp.status == 200
        names = [entry["ObjectName"] for entry in await resp.json()]
        # The same listing the AccessKey gets, with the file just stored in it.
        with_key = await (await control.get("/api/storage/akande/v1/logos/", headers=ACCESS)).json()
        assert names == [entry["ObjectName"] for entry in with_key]
        assert "logo.svg" in names

    async def test_session_writes_only_from_the_dashboard_origin(self, control: TestClient, zone: str) -> None:
        cookie = {"Cookie": f"{SESSION_COOKIE}={session_cookie_value(SECRETS.session_secret, nonce='n')}"}
        resp = await control.put("/api/storage/akande/v1/logos/logo.svg", data=b"<svg/>", headers=cookie)
        await expect_error(resp, 403, "Forbidden")  # no Origin: not the dashboard (assetcdn.control.identity.auth)
        resp = await control.put("/api/storage/akande/v1/logos/logo.svg", data=b"<svg/>",
                                 headers={**cookie, "Origin": "http://localhost:8787"})
        assert resp.status == 201
        assert (await control.head("/api/storage/akande/v1/logos/logo.svg", headers=cookie)).status == 200
        assert (await control.get("/api/assets", headers=cookie)).status == 200

    @pytest.mark.parametrize("cookie", [
        session_cookie_value(SECRETS.session_secret, nonce="n", ttl=-10),
        session_cookie_value("another-secret", nonce="n"),
        "9999999999.n.deadbeef",
        "garbage",
    ], ids=["expired", "other-secret", "bad-signature", "garbage"])  # values hold the time: ids must not
    async def test_expired_or_forged_session_is_401(self, control: TestClient, zone: str, cookie: str) -> None:
        resp = await control.get("/api/storage/akande/v1/", headers={"Cookie": f"{SESSION_COOKIE}={cookie}"})
        await expect_error(resp, 401, "Unauthorized")
