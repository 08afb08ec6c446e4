"""The dashboard's own listener (assetcdn/control/identity/dashboard_origin.py): the session is honoured there only,
control's API listener sends /dashboard to it, and stored files there are inert downloads."""

from __future__ import annotations

import pytest
from aiohttp.test_utils import TestClient

from assetcdn.control.identity.dashboard_origin import DASHBOARD_PORTS
from assetcdn.shared.content_security import SANDBOX_CSP
from tests.control.identity.signin_client import (  # noqa: F401 (make_control is a fixture)
    ORIGIN,
    PASSWORD,
    make_control,
    signed_in,
    with_session,
)
from tests.support.control import ACCESS, ACCOUNT


@pytest.fixture
async def control(make_control) -> TestClient:  # type: ignore[no-untyped-def]  # noqa: F811
    return await make_control()


@pytest.fixture
async def session(control: TestClient) -> str:
    return await signed_in(control)


async def test_the_session_is_honoured_only_on_the_dashboard_listener(control: TestClient, session: str) -> None:
    """Cookies ignore ports: the browser sends cdn_session to the edges too, which forward it to
    control's API listener. There it opens nothing, and /dashboard sends to the dashboard's origin."""
    assert (await control.get("/api/tokens", headers=with_session(session, origin=None))).status == 200
    assert control.server.port is not None
    control.app[DASHBOARD_PORTS].discard(control.server.port)  # now this server is control's API listener
    for path in ("/api/tokens", "/api/core/zones", "/api/dashboard/status", "/api/passkeys"):
        resp = await control.get(path, headers=with_session(session, origin=None))
        assert resp.status == 401, path
    resp = await control.post("/api/tokens", json={"name": "x", "scopes": ["storage:read"]},
                              headers=with_session(session))
    assert resp.status == 401
    for path in ("/dashboard/", "/dashboard/login?next=1"):
        resp = await control.get(path, headers=with_session(session, origin=None), allow_redirects=False)
        assert (resp.status, resp.headers["Location"]) == (302, "http://localhost:8787" + path)
    resp = await control.post("/dashboard/login", data={"password": PASSWORD}, headers={"Origin": ORIGIN},
                              allow_redirects=False)
    assert resp.status == 404 and "Set-Cookie" not in resp.headers


async def test_the_dashboard_listeners_root_leads_to_the_dashboard(control: TestClient) -> None:
    """The dashboard's port opened without a path (http://localhost:8787/) leads to the dashboard (its sign-in page
    without a session), not to an API's JSON 404; control's API listener answers / as before."""
    for method in ("GET", "HEAD"):
        resp = await control.request(method, "/", allow_redirects=False)
        assert (resp.status, resp.headers.get("Location")) == (302, "/dashboard/"), method
    resp = await control.get("/")
    assert (resp.status, resp.url.path) == (200, "/dashboard/login")
    control.app[DASHBOARD_PORTS].clear()  # now this server is control's API listener
    assert (await control.get("/", allow_redirects=False)).status == 404


async def test_stored_files_on_the_dashboard_listener_are_inert_downloads(control: TestClient, session: str) -> None:
    assert (await control.post("/api/core/zones", json={"Name": "gallery"}, headers=ACCOUNT)).status == 201
    for name, body in (("evil.js", b"fetch('/api/tokens')"), ("evil.html", b"<script>alert(1)</script>"),
                       ("logo.svg", b"<svg xmlns='http://www.w3.org/2000/svg'/>")):
        path = f"/api/storage/gallery/v1/logos/{name}"
        put = await control.put(path, data=body, headers=with_session(session))
        assert (put.status, put.content_type) == (201, "application/json")  # answers stay JSON
        for method in ("GET", "HEAD"):
            resp = await control.request(method, path, headers=with_session(session, origin=None))
            assert resp.status == 200
            assert resp.headers["Content-Type"] == "application/octet-stream", name
            assert resp.headers["Content-Disposition"] == "attachment"
            assert resp.headers["X-Content-Type-Options"] == "nosniff"
            assert resp.headers["Content-Security-Policy"] == SANDBOX_CSP
        assert await (await control.get(path, headers=ACCESS)).read() == body
    listing = await control.get("/api/storage/gallery/v1/logos/", headers=with_session(session, origin=None))
    assert listing.headers["Content-Type"].startswith("application/json")
    control.app[DASHBOARD_PORTS].clear()  # control's API listener (what edges call) keeps the types
    resp = await control.get("/api/storage/gallery/v1/logos/evil.js", headers=ACCESS)
    assert resp.headers["Content-Type"].startswith("text/javascript")
