"""/dashboard reaches control through an edge: the login page, the login POST with its three cookies
intact, sign-out, and passkeys, with the client's own address counted for the failure limit."""

from __future__ import annotations

from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient

import assetcdn.control.app  # noqa: F401
import assetcdn.edge.app  # noqa: F401
from assetcdn import control, edge
from assetcdn.control.state import AUDIT
from assetcdn.edge.app import EdgeIdentity
from assetcdn.shared.config import load_settings
from tests.control.expect import expect_error
from tests.control.signin_client import (
    PASSWORD,
    SIGNIN_SECRETS,
    cookies_set,
    passkey_login,
    password_login,
    register,
    session_from,
    with_session,
)
from tests.control.soft_authenticator import SoftAuthenticator
from tests.edge.routes.conftest import wait_until


@pytest.fixture
async def cdn(aiohttp_server, aiohttp_client, tmp_path: Path) -> tuple[TestClient, TestClient]:  # type: ignore[no-untyped-def]
    """(control, edge): real apps on loopback, the edge forwarding to control."""
    settings = load_settings(environ={"ASSETCDN_EDGE_HEARTBEAT_INTERVAL_S": "0.5"})
    control_server = await aiohttp_server(control.app.create_app(settings, SIGNIN_SECRETS, tmp_path / "data"))
    identity = EdgeIdentity(name="edge-s", worker=0, control_url=str(control_server.make_url("")).rstrip("/"),
                            cache_dir=tmp_path / "edge", advertise_host="127.0.0.1")
    edge_client = await aiohttp_client(edge.app.create_app(settings, SIGNIN_SECRETS, identity))

    async def edge_healthy() -> bool:
        return (await edge_client.get("/api/health")).status == 200

    await wait_until(edge_healthy, "edge health 200")
    return await aiohttp_client(control_server), edge_client


async def test_the_login_page_and_post_go_through_the_edge(cdn: tuple[TestClient, TestClient]) -> None:
    control, edge = cdn
    page = await edge.get("/dashboard/login")
    assert page.status == 200 and page.content_type == "text/html"
    assert "Content-Security-Policy" in page.headers
    assert (await edge.get("/dashboard/login.js")).status == 200
    resp = await password_login(edge)
    assert resp.status == 302 and resp.headers["Location"] == "/dashboard/setup-passkey"
    # All three Set-Cookie headers arrive, in control's order (a proxy folding them keeps one).
    cookies = cookies_set(resp)
    assert [c.split("=", 1)[0] for c in cookies] == ["cdn_session", "cdn_logged_in", "cdn_session"]
    assert "Path=/dashboard" in cookies[2]
    session = session_from(resp)
    assert (await edge.get("/dashboard/", headers=with_session(session, origin=None))).status == 200
    home = await edge.get("/dashboard", allow_redirects=False)
    assert (home.status, home.headers["Location"]) == (302, "/dashboard/login")
    out = await edge.get("/dashboard/logout", headers=with_session(session, origin=None), allow_redirects=False)
    assert out.status == 302 and len(cookies_set(out)) == 3
    await expect_error(await edge.get("/api/passkeys", headers=with_session(session, origin=None)),
                       401, "Unauthorized")


async def test_failures_are_counted_for_the_client_behind_the_edge(cdn: tuple[TestClient, TestClient]) -> None:
    control, edge = cdn
    client = {"X-Forwarded-For": "203.0.113.9"}  # as if the edge's peer were this address's proxy
    for _ in range(5):
        assert (await password_login(edge, "guess", **client)).status == 401
    resp = await password_login(edge, PASSWORD, **client)
    assert resp.status == 429 and int(resp.headers["Retry-After"]) > 0
    assert (await password_login(edge)).status == 302  # the edge's own address is another client
    failures = await control.app[AUDIT].entries(days=1, action="login.failure", limit=10)
    assert {f["ip"] for f in failures} == {"203.0.113.9"}


async def test_passkeys_through_the_edge(cdn: tuple[TestClient, TestClient]) -> None:
    _, edge = cdn
    session = session_from(await password_login(edge))
    authenticator = SoftAuthenticator()
    assert (await register(edge, session, authenticator)).status == 201
    resp = await passkey_login(edge, authenticator)
    assert resp.status == 200
    assert len(cookies_set(resp)) == 3


async def test_paths_that_only_begin_with_dashboard_stay_cdn_paths(cdn: tuple[TestClient, TestClient]) -> None:
    _, edge = cdn
    resp = await edge.post("/dashboardx/login")
    assert resp.status == 405  # a CDN path: GET and HEAD only, not forwarded to control
