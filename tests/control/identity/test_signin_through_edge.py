"""The dashboard through an edge: not served there (a redirect to its own origin, control's dashboard
port), and its session cookie, which browsers send to every port of the host, opens nothing there."""

from __future__ import annotations

from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient

import assetcdn.control.app  # noqa: F401
import assetcdn.edge.app  # noqa: F401
from assetcdn import control, edge
from assetcdn.control.identity.service import SESSIONS
from assetcdn.edge.app import EdgeIdentity
from assetcdn.shared.config import load_settings
from tests.control.expect import expect_error
from tests.control.identity.signin_client import (
    SIGNIN_SECRETS,
    cookies_set,
    password_login,
    with_session,
)
from tests.integration.harness import LAZY_IMAGE_POOL
from tests.support.wait import wait_until


@pytest.fixture
async def cdn(aiohttp_server, aiohttp_client, tmp_path: Path) -> tuple[TestClient, TestClient]:  # type: ignore[no-untyped-def]
    """(control, edge): real apps on loopback, the edge forwarding to control."""
    settings = load_settings(environ={"ASSETCDN_EDGE_HEARTBEAT_INTERVAL_S": "0.5", **LAZY_IMAGE_POOL})
    control_server = await aiohttp_server(control.app.create_app(settings, SIGNIN_SECRETS, tmp_path / "data"))
    identity = EdgeIdentity(name="edge-s", worker=0, control_url=str(control_server.make_url("")).rstrip("/"),
                            cache_dir=tmp_path / "edge", advertise_host="127.0.0.1")
    edge_client = await aiohttp_client(edge.app.create_app(settings, SIGNIN_SECRETS, identity))

    async def edge_healthy() -> bool:
        return (await edge_client.get("/api/health")).status == 200

    await wait_until(edge_healthy, "edge health 200")
    return await aiohttp_client(control_server), edge_client


async def test_the_edge_sends_to_the_dashboards_own_origin(cdn: tuple[TestClient, TestClient]) -> None:
    """The edges serve stored files, so the dashboard is not theirs: its pages answer with a redirect to
    the dashboard's own origin (control's dashboard port), and sign-in through them is refused."""
    _, edge = cdn
    for path in ("/dashboard", "/dashboard/", "/dashboard/login", "/dashboard/login.js", "/dashboard/static/app.js"):
        resp = await edge.get(path, allow_redirects=False)
        assert (resp.status, resp.headers["Location"]) == (302, "http://localhost:8787" + path), path
        assert "Set-Cookie" not in resp.headers
    resp = await password_login(edge)
    await expect_error(resp, 404, "NotFound")
    assert cookies_set(resp) == []


async def test_a_session_opens_nothing_through_the_edge(cdn: tuple[TestClient, TestClient]) -> None:
    """Browsers send the cookie to every port of the host, the edges' included: there it is no credential."""
    control, edge = cdn
    session = control.app[SESSIONS].issue()
    for path in ("/api/passkeys", "/api/tokens", "/api/core/zones", "/api/dashboard/status"):
        await expect_error(await edge.get(path, headers=with_session(session, origin=None)), 401, "Unauthorized")
    resp = await edge.post("/api/core/zones", json={"Name": "forged"}, headers=with_session(session))
    await expect_error(resp, 401, "Unauthorized")
    resp = await edge.post("/api/passkeys/register/begin", headers=with_session(session))
    await expect_error(resp, 401, "Unauthorized")
    resp = await edge.get("/dashboard/logout", headers=with_session(session, origin=None), allow_redirects=False)
    assert resp.status == 302 and cookies_set(resp) == []  # a redirect to the dashboard, which signs out


async def test_paths_that_only_begin_with_dashboard_stay_cdn_paths(cdn: tuple[TestClient, TestClient]) -> None:
    _, edge = cdn
    resp = await edge.post("/dashboardx/login")
    assert resp.status == 405  # a CDN path: GET and HEAD only, not forwarded to control
