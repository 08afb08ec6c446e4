"""The dashboard's server side: its page (signed-in operators only), its static files, its status
endpoint, and the session accepted, CSRF-checked, on the management routes the dashboard calls."""

from __future__ import annotations

import hashlib

import pytest
from aiohttp.test_utils import TestClient

from assetcdn.control.identity.service import SESSION_SCOPES
from assetcdn.control.identity.tokens import SCOPES
from assetcdn.control.routes.dashboard import static_files
from tests.control.expect import expect_error
from tests.control.identity.signin_client import (  # noqa: F401 (make_control is a fixture)
    ORIGIN,
    PASSWORD,
    make_control,
    signed_in,
    with_session,
)
from tests.support.control import ACCOUNT

EVIL = "https://evil.example"


@pytest.fixture
async def control(make_control) -> TestClient:  # type: ignore[no-untyped-def]  # noqa: F811
    return await make_control()


@pytest.fixture
async def session(control: TestClient) -> str:
    return await signed_in(control)


class TestPage:
    async def test_without_a_session_the_page_sends_to_the_sign_in(self, control: TestClient) -> None:
        for path in ("/dashboard", "/dashboard/"):
            resp = await control.get(path, allow_redirects=False)
            assert (resp.status, resp.headers["Location"]) == (302, "/dashboard/login")
        forged = await control.get("/dashboard/", headers={"Cookie": "cdn_session=1.2.3"}, allow_redirects=False)
        assert forged.status == 302

    async def test_signed_in_the_page_loads_its_own_modules_only(self, control: TestClient, session: str) -> None:
        resp = await control.get("/dashboard/", headers=with_session(session, origin=None))
        assert resp.status == 200 and resp.content_type == "text/html"
        page = await resp.text()
        assert '<script type="module" src="/dashboard/static/app.js">' in page
        assert 'data-rp-id="localhost"' in page and 'data-passkey-origin="http://localhost:8787"' in page
        csp = resp.headers["Content-Security-Policy"]
        assert "script-src 'self';" in csp and "default-src 'none'" in csp and "frame-ancestors 'none'" in csp
        assert "unsafe-inline" not in csp  # no inline script
        # Scripts and styles only from the dashboard's own origin; the edges' public origin (where the
        # previews and streams come from) only for images, media and fetches.
        for directive in csp.split(";"):
            if "http" in directive:
                assert directive.split()[0] in ("img-src", "media-src", "connect-src"), directive
                assert "http://127.0.0.1:8788" in directive
        assert resp.headers["Cache-Control"] == "no-store" and resp.headers["X-Frame-Options"] == "DENY"
        home = await control.get("/dashboard", headers=with_session(session, origin=None), allow_redirects=False)
        assert (home.status, home.headers["Location"]) == (302, "/dashboard/")


class TestStaticFiles:
    async def test_modules_are_served_with_their_type_and_a_validator(self, control: TestClient) -> None:
        resp = await control.get("/dashboard/static/app.js")
        assert resp.status == 200 and resp.content_type == "text/javascript"
        body = await resp.read()
        assert resp.headers["ETag"] == f'"{hashlib.sha256(body).hexdigest()[:32]}"'
        assert resp.headers["Cache-Control"] == "no-cache"
        again = await control.get("/dashboard/static/app.js", headers={"If-None-Match": resp.headers["ETag"]})
        assert again.status == 304
        css = await control.get("/dashboard/static/dashboard.css")
        assert css.content_type == "text/css"
        hls = await control.get("/dashboard/static/vendor/hls.light.min.mjs")
        assert hls.status == 200 and hls.content_type == "text/javascript"

    async def test_every_module_the_page_imports_is_served(self, control: TestClient) -> None:
        names = static_files()
        for name in names:
            if name.endswith(".js"):
                text = names[name].body.decode()
                for line in text.splitlines():
                    if line.startswith("import ") and " from \"" in line:
                        target = line.split(" from \"", 1)[1].split("\"", 1)[0]
                        base = name.rsplit("/", 1)[0] + "/" if "/" in name else ""
                        resolved = _resolve(base, target)
                        assert resolved in names, f"{name} imports {target}, which is not served"

    @pytest.mark.parametrize("path", ["/dashboard/static/../routes/dashboard.py", "/dashboard/static/%2e%2e/index.html",
                                      "/dashboard/static/nothing.js", "/dashboard/static/views/",
                                      "/dashboard/static/..%2fdashboard/__init__.py"])
    async def test_only_the_files_of_the_static_directory(self, control: TestClient, path: str) -> None:
        resp = await control.get(path)
        assert resp.status == 404
        assert "def " not in await resp.text()


def _resolve(base: str, target: str) -> str:
    parts = (base + target).split("/")
    out: list[str] = []
    for part in parts:
        if part == "..":
            out.pop()
        elif part not in (".", ""):
            out.append(part)
    return "/".join(out)


class TestStatus:
    async def test_needs_a_session_or_the_account_key(self, control: TestClient) -> None:
        assert (await control.get("/api/dashboard/status")).status == 401
        assert (await control.get("/api/dashboard/status", headers={"AccessKey": "test-access-key"})).status == 401
        assert (await control.get("/api/dashboard/status", headers=ACCOUNT)).status == 200

    async def test_reports_control_and_the_edges(self, control: TestClient, session: str) -> None:
        resp = await control.get("/api/dashboard/status", headers=with_session(session, origin=None))
        assert resp.status == 200
        report = await resp.json()
        assert report["status"] == "ok"
        checks = {c["name"]: c for c in report["control"]["checks"]}
        assert set(checks) == {"manifest", "sqlite", "git", "counters", "acme"}
        assert all(c["method"] != "shape" and c["healthy"] for c in checks.values())
        assert checks["acme"]["configured"] is False  # no ACME directory in the test settings
        assert report["edges"] == {"total": 0, "alive": 0, "maxLag": 0, "nodes": []}
        assert report["dashboard"]["publicUrl"] == "http://127.0.0.1:8788"
        assert report["dashboard"]["passkeyRpId"] == "localhost"


class TestSessionOnManagementRoutes:
    async def test_zone_storage_purge_and_tokens_with_the_session(self, control: TestClient, session: str) -> None:
        headers = with_session(session)  # Origin: the dashboard's own
        created = await control.post("/api/core/zones", json={"Name": "gallery"}, headers=headers)
        assert created.status == 201, await created.text()
        put = await control.put("/api/storage/gallery/v1/logos/a.txt", data=b"hello", headers=headers)
        assert put.status == 201, await put.text()
        listing = await control.get("/api/storage/gallery/v1/logos/", headers=with_session(session, origin=None))
        assert [e["ObjectName"] for e in await listing.json()] == ["a.txt"]
        purge = await control.post("/api/purge", json={"urls": ["/gallery/v1/logos/a.txt"]}, headers=headers)
        assert purge.status == 200, await purge.text()
        assert (await purge.json())["edges"]["latencyMs"] == {}  # no edge registered here
        token = await control.post("/api/tokens", json={"name": "ci", "scopes": ["storage:read"]}, headers=headers)
        assert token.status == 201
        for path in ("/api/core/statistics", "/api/insights/errors", "/api/logs", "/api/core/rules", "/api/tokens",
                     "/api/core/zones/gallery/domains"):
            assert (await control.get(path, headers=with_session(session, origin=None))).status == 200, path
        deleted = await control.delete("/api/storage/gallery/v1/logos/a.txt", headers=headers)
        assert deleted.status == 200

    async def test_a_session_grants_only_the_scopes_it_may_use_itself(self, control: TestClient,
                                                                      session: str) -> None:
        grantable = control.app[SESSION_SCOPES]
        assert grantable == set(SCOPES) - {"pipeline:write", "ai:read"}  # routes the session does not open
        for scope in ("pipeline:write", "ai:read"):
            resp = await control.post("/api/tokens", json={"name": "wider", "scopes": ["storage:read", scope]},
                                      headers=with_session(session))
            body = await expect_error(resp, 403, "ScopeNotGrantable")
            assert body["invalid"] == [scope]
        assert (await (await control.get("/api/tokens", headers=ACCOUNT)).json())["Count"] == 0
        resp = await control.post("/api/tokens", json={"name": "ok", "scopes": sorted(grantable)},
                                  headers=with_session(session))
        assert resp.status == 201, await resp.text()
        resp = await control.post("/api/tokens", json={"name": "key", "scopes": ["pipeline:write", "ai:read"]},
                                  headers=ACCOUNT)
        assert resp.status == 201  # the account key is the full authority

    @pytest.mark.parametrize(("method", "path", "body"), [
        ("POST", "/api/core/zones", {"Name": "forged"}),
        ("PUT", "/api/storage/gallery/v1/logos/forged.txt", None),
        ("POST", "/api/purge", {"purge_everything": True}),
        ("POST", "/api/tokens", {"name": "forged", "scopes": ["storage:write"]}),
        ("POST", "/api/core/rules", {"File": "_redirects", "Content": "/a /b 301"}),
    ])
    async def test_a_change_from_another_origin_is_refused(self, control: TestClient, session: str, method: str,
                                                           path: str, body: object) -> None:
        assert (await control.post("/api/core/zones", json={"Name": "gallery"}, headers=ACCOUNT)).status == 201
        for origin in (EVIL, None):  # another site, and no Origin at all
            headers = with_session(session, origin=origin)
            if origin is None:
                headers["Sec-Fetch-Site"] = "cross-site"
            resp = await control.request(method, path, json=body, data=None if body is not None else b"x",
                                         headers=headers)
            assert resp.status == 403, (origin, await resp.text())
        assert [z["Name"] for z in await (await control.get("/api/core/zones", headers=ACCOUNT)).json()] == ["gallery"]
        tokens = await (await control.get("/api/tokens", headers=ACCOUNT)).json()
        assert tokens["Count"] == 0
        listing = await control.get("/api/storage/gallery/v1/logos/", headers=ACCOUNT | {"AccessKey": "test-access-key"})
        assert all(e["ObjectName"] != "forged.txt" for e in await listing.json())

    async def test_the_sign_in_origin_is_the_one_allowed(self, control: TestClient, session: str) -> None:
        resp = await control.post("/api/core/zones", json={"Name": "fine"}, headers=with_session(session, origin=ORIGIN))
        assert resp.status == 201
