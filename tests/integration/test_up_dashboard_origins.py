"""`assetcdn up --edges 2`: the dashboard can be signed in to on every edge it starts, not only the
first (a sign-in POST must come from an allowed Origin, and each edge is its own origin)."""

from __future__ import annotations

from pathlib import Path

import aiohttp
import pytest

from assetcdn.shared.cli import edge_origins
from tests.integration.harness import start_cdn

pytestmark = pytest.mark.integration
PASSWORD = "a dashboard password for this test"


def test_edge_origins_name_every_edge_and_localhost_beside_loopback() -> None:
    assert edge_origins("127.0.0.1", 8788, 2) == ["http://127.0.0.1:8788", "http://localhost:8788",
                                                  "http://127.0.0.1:8789", "http://localhost:8789"]
    assert edge_origins("cdn.internal", 80, 1) == ["http://cdn.internal:80"]
    assert edge_origins("::1", 8788, 1) == ["http://[::1]:8788", "http://localhost:8788"]
    assert edge_origins("cdn.internal", 80, 2, https_port=443) == [
        "http://cdn.internal:80", "http://cdn.internal:81", "https://cdn.internal:443", "https://cdn.internal:444"]


async def test_every_edge_of_up_accepts_a_sign_in_from_its_own_origin(tmp_path: Path) -> None:
    cdn = start_cdn(tmp_path, edges=2, env_extra={"ASSETCDN_DASHBOARD_SECRET": PASSWORD})
    try:
        async with aiohttp.ClientSession() as session:
            for edge in cdn.edge_urls:
                async with session.post(f"{edge}/dashboard/login", data={"password": PASSWORD},
                                        headers={"Origin": edge}, allow_redirects=False) as resp:
                    assert resp.status == 302, (edge, resp.status, await resp.text())
                    assert "cdn_session" in resp.cookies
            # An origin that is none of them is still refused.
            async with session.post(f"{cdn.edge_urls[1]}/dashboard/login", data={"password": PASSWORD},
                                    headers={"Origin": "http://evil.example"}, allow_redirects=False) as resp:
                assert resp.status == 403
    finally:
        cdn.stop()
