"""A real `assetcdn up` with two edges: the dashboard password generated at first start signs in on the
dashboard's own origin (control's dashboard port) and through no edge, and failed sign-ins count per
client there."""

from __future__ import annotations

from collections.abc import Iterator

import aiohttp
import pytest

from assetcdn.shared.secrets import SECRETS_FILE
from tests.integration.harness import RunningCdn, start_cdn

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cdn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningCdn]:
    running = start_cdn(tmp_path_factory.mktemp("signin"), edges=2)
    yield running
    running.stop()


def dashboard_secret(cdn: RunningCdn) -> str:
    for line in (cdn.data_dir / SECRETS_FILE).read_text().splitlines():
        if line.startswith("ASSETCDN_DASHBOARD_SECRET="):
            return line.split("=", 1)[1]
    raise AssertionError("no dashboard secret in secrets.env")


async def login(http: aiohttp.ClientSession, base: str, password: str) -> aiohttp.ClientResponse:
    async with http.post(f"{base}/dashboard/login", data={"password": password}, headers={"Origin": base},
                         allow_redirects=False) as resp:
        await resp.read()
        return resp


async def test_the_generated_password_signs_in_on_the_dashboards_origin_only(cdn: RunningCdn) -> None:
    password = dashboard_secret(cdn)
    assert password not in cdn.log_path.read_text()
    async with aiohttp.ClientSession() as http:
        resp = await login(http, cdn.dashboard_url, password)
        assert resp.status == 302
        assert [c.split("=", 1)[0] for c in resp.headers.getall("Set-Cookie")] == \
            ["cdn_session", "cdn_logged_in", "cdn_session"]
        for base in cdn.edge_urls:
            resp = await login(http, base, password)
            assert resp.status == 404 and "Set-Cookie" not in resp.headers, base


async def test_failures_count_per_client(cdn: RunningCdn) -> None:
    async with aiohttp.ClientSession() as http:
        for _ in range(5):
            assert (await login(http, cdn.dashboard_url, "guess")).status == 401
        resp = await login(http, cdn.dashboard_url, dashboard_secret(cdn))
        assert resp.status == 429
        assert 0 < int(resp.headers["Retry-After"]) <= 900
