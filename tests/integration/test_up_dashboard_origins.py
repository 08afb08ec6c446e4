"""`assetcdn up --edges 2`: the dashboard has an origin of its own (control's dashboard port), where one
can sign in and use the session; the edges, which serve stored files, neither serve the dashboard
(they send to it) nor honour the session cookie the browser also sends them."""

from __future__ import annotations

from pathlib import Path

import aiohttp
import pytest

from tests.control.identity.signin_client import session_from
from tests.integration.harness import start_cdn

pytestmark = pytest.mark.integration
PASSWORD = "a dashboard password for this test"


async def test_the_dashboard_and_its_session_live_on_their_own_port(tmp_path: Path) -> None:
    cdn = start_cdn(tmp_path, edges=2, env_extra={"ASSETCDN_DASHBOARD_SECRET": PASSWORD})
    dashboard_port = cdn.dashboard_url.rsplit(":", 1)[1]
    origin = f"http://localhost:{dashboard_port}"
    try:
        assert f"Dashboard: {origin}/dashboard/" in cdn.log_path.read_text()
        async with aiohttp.ClientSession() as session:
            async with session.post(f"{cdn.dashboard_url}/dashboard/login", data={"password": PASSWORD},
                                    headers={"Origin": origin}, allow_redirects=False) as resp:
                assert resp.status == 302, await resp.text()
                cookie = session_from(resp)
            sent = {"Cookie": f"cdn_session={cookie}"}
            async with session.get(f"{cdn.dashboard_url}/api/tokens", headers=sent) as resp:
                assert resp.status == 200
            async with session.post(f"{cdn.dashboard_url}/api/core/zones", json={"Name": "gallery"},
                                    headers={**sent, "Origin": origin}) as resp:
                assert resp.status == 201, await resp.text()
            for edge in cdn.edge_urls:
                # Same host, other port: the browser sends the cookie here too, and it opens nothing.
                async with session.get(f"{edge}/api/tokens", headers=sent) as resp:
                    assert resp.status == 401
                async with session.post(f"{edge}/api/core/zones", json={"Name": "forged"},
                                        headers={**sent, "Origin": edge}) as resp:
                    assert resp.status == 401
                async with session.get(f"{edge}/dashboard/", headers=sent, allow_redirects=False) as resp:
                    assert (resp.status, resp.headers["Location"]) == (302, f"{origin}/dashboard/")
                async with session.post(f"{edge}/dashboard/login", data={"password": PASSWORD},
                                        headers={"Origin": edge}, allow_redirects=False) as resp:
                    assert resp.status == 404 and "cdn_session" not in resp.cookies
            # Another origin is still refused on the dashboard's own.
            async with session.post(f"{cdn.dashboard_url}/dashboard/login", data={"password": PASSWORD},
                                    headers={"Origin": cdn.edge_urls[0]}, allow_redirects=False) as resp:
                assert resp.status == 403
            # Stored files: delivered by the edges, never as themselves on the dashboard's origin.
            async with session.put(f"{cdn.dashboard_url}/api/storage/gallery/v1/logos/app.js", data=b"alert(1)",
                                   headers={**sent, "Origin": origin}) as resp:
                assert resp.status == 201, await resp.text()
            async with session.get(f"{cdn.dashboard_url}/gallery/v1/logos/app.js", headers=sent) as resp:
                assert resp.status == 404
            async with session.get(f"{cdn.dashboard_url}/api/storage/gallery/v1/logos/app.js", headers=sent) as resp:
                assert resp.headers["Content-Type"] == "application/octet-stream"
                assert resp.headers["Content-Disposition"] == "attachment"
    finally:
        cdn.stop()
