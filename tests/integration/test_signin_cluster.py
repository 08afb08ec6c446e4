"""A real `assetcdn up` with two edges: the dashboard password generated at first start signs in
through either edge, and failed sign-ins through both edges add up to one count per client."""

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
    async with http.post(f"{base}/dashboard/login", data={"password": password}, allow_redirects=False) as resp:
        await resp.read()
        return resp


async def test_the_generated_password_signs_in_through_every_edge(cdn: RunningCdn) -> None:
    password = dashboard_secret(cdn)
    assert password not in cdn.log_path.read_text()
    async with aiohttp.ClientSession() as http:
        for base in cdn.edge_urls:
            resp = await login(http, base, password)
            assert resp.status == 302, base
            assert [c.split("=", 1)[0] for c in resp.headers.getall("Set-Cookie")] == \
                ["cdn_session", "cdn_logged_in", "cdn_session"]


async def test_failures_through_both_edges_share_one_count(cdn: RunningCdn) -> None:
    client = "198.51.100.23"  # the address the edges' peer (a proxy on loopback) says it forwards for
    async with aiohttp.ClientSession(headers={"X-Forwarded-For": client}) as http:
        first, second = cdn.edge_urls
        for base in (first, second, first, second, first):
            assert (await login(http, base, "guess")).status == 401
        for base in (second, first):
            resp = await login(http, base, dashboard_secret(cdn))
            assert resp.status == 429, base
            assert 0 < int(resp.headers["Retry-After"]) <= 900
