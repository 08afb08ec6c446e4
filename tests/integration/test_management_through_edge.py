"""Issue 6 end to end: traffic through a real edge is what statistics and insights report; rules and
domains posted to control are applied by the edge on the very next request."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import aiohttp
import pytest

from tests.integration.harness import ACCESS, ACCOUNT, RunningCdn, start_cdn

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cdn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningCdn]:
    running = start_cdn(tmp_path_factory.mktemp("management"), edges=1,
                        env_extra={"ASSETCDN_ANALYTICS_FLUSH_INTERVAL_S": "0.2"})
    yield running
    running.stop()


async def setup_zone(session: aiohttp.ClientSession, base: str, zone: str, files: dict[str, bytes]) -> None:
    async with session.post(f"{base}/api/core/zones", json={"Name": zone}, headers=ACCOUNT) as resp:
        assert resp.status == 201, await resp.text()
    for path, data in files.items():
        async with session.put(f"{base}/api/storage/{zone}/{path}", data=data, headers=ACCESS) as resp:
            assert resp.status == 201, await resp.text()


async def test_statistics_and_insights_count_exactly_what_the_edge_served(cdn: RunningCdn) -> None:
    base = cdn.edge_urls[0]
    a, b = b"a" * 1000, b"b" * 300
    async with aiohttp.ClientSession() as session:
        await setup_zone(session, base, "stats", {"v1/logos/a.txt": a, "v1/icons/b.txt": b})
        served: list[tuple[str, int, int, str]] = []  # path, status, bytes, country
        for country in ("DE", "DE", "FR"):
            async with session.get(f"{base}/stats/v1/logos/a.txt", headers={"CF-IPCountry": country}) as resp:
                served.append(("stats/v1/logos/a.txt", resp.status, len(await resp.read()), country))
        async with session.get(f"{base}/stats/v1/icons/b.txt") as resp:
            served.append(("stats/v1/icons/b.txt", resp.status, len(await resp.read()), "XX"))
        for _ in range(2):
            async with session.get(f"{base}/stats/v1/logos/missing.txt") as resp:
                served.append(("stats/v1/logos/missing.txt", resp.status, len(await resp.read()), "XX"))
        assert [s[1] for s in served] == [200, 200, 200, 200, 404, 404]

        async def statistics() -> dict:
            async with session.get(f"{base}/api/core/statistics?zone=stats&days=7", headers=ACCOUNT) as resp:
                assert resp.status == 200, await resp.text()
                return await resp.json()

        deadline = time.monotonic() + 15
        stats = await statistics()
        while stats["Summary"]["TotalRequests"] < len(served) and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
            stats = await statistics()

        total_bytes = sum(s[2] for s in served)
        summary = stats["Summary"]
        assert stats["Period"] == {"Days": 7, "Zone": "stats"}
        assert summary["TotalRequests"] == 6
        assert summary["TotalBandwidth"] == total_bytes
        assert summary["CacheHitRate"] == "33.3%"  # a.txt: MISS then two HITs; b.txt MISS; 404s not cached
        assert summary["UniqueCountries"] == 2  # DE and FR; XX is unknown
        # Top assets count deliveries: the two 404s for missing.txt are errors, not assets served.
        assert {r["Path"]: r["Requests"] for r in stats["TopAssets"]} == {
            "/stats/v1/logos/a.txt": 3, "/stats/v1/icons/b.txt": 1}
        assert {r["CountryCode"]: r["Requests"] for r in stats["GeoDistribution"]} == {"DE": 2, "XX": 3, "FR": 1}
        today = stats["Daily"][0]  # newest first
        assert (today["TotalRequests"], today["Bandwidth"], today["CacheHit"], today["CacheMiss"]) == (
            6, total_bytes, 2, 4)

        async with session.get(f"{base}/api/insights/summary?zone=stats", headers=ACCESS) as resp:
            body = await resp.json()
            assert (body["TotalRequests"], body["TotalBandwidthBytes"]) == (6, total_bytes)
        async with session.get(f"{base}/api/insights/top-assets?zone=stats&limit=1", headers=ACCESS) as resp:
            assert (await resp.json())["Assets"] == [{"Path": "/stats/v1/logos/a.txt", "Requests": 3}]
        async with session.get(f"{base}/api/insights/geography?zone=stats", headers=ACCESS) as resp:
            assert (await resp.json())["Countries"][0] == {"CountryCode": "XX", "Requests": 3}
        async with session.get(f"{base}/api/insights/errors?zone=stats", headers=ACCESS) as resp:
            errors = (await resp.json())["Errors"]
            assert errors == [{"StatusCode": 404, "Count": 2,
                               "TopPaths": [{"Path": "/stats/v1/logos/missing.txt", "Count": 2}]}]
        async with session.get(f"{base}/api/insights/asset?path=/stats/v1/logos/a.txt", headers=ACCESS) as resp:
            assert (await resp.json())["TotalRequests"] == 3


async def test_rules_and_domains_apply_at_the_edge_on_the_next_request(cdn: RunningCdn) -> None:
    base = cdn.edge_urls[0]
    async with aiohttp.ClientSession() as session:
        await setup_zone(session, base, "rules", {"v1/logos/logo.svg": b"<svg xmlns='http://www.w3.org/2000/svg'/>"})

        rules = {"File": "_headers", "Content": "/rules/v1/*\n  X-Frame-Options: DENY\n  X-From-Rules: yes\n"}
        async with session.post(f"{base}/api/core/rules", json=rules, headers=ACCOUNT) as resp:
            assert resp.status == 200, await resp.text()
        # The POST waited for the edges' acknowledgement: the very next request already has the headers.
        async with session.get(f"{base}/rules/v1/logos/logo.svg") as resp:
            assert resp.status == 200
            assert resp.headers["X-Frame-Options"] == "DENY" and resp.headers["X-From-Rules"] == "yes"
        async with session.get(f"{base}/api/core/rules", headers=ACCOUNT) as resp:
            assert "X-From-Rules" not in resp.headers  # management responses are not deliveries

        redirects = {"File": "_redirects", "Content": "/brand/logo /rules/v1/logos/logo.svg 301\n"}
        async with session.post(f"{base}/api/core/rules", json=redirects, headers=ACCOUNT) as resp:
            assert resp.status == 200, await resp.text()
        async with session.get(f"{base}/brand/logo", allow_redirects=False) as resp:
            assert resp.status == 301 and resp.headers["Location"] == "/rules/v1/logos/logo.svg"

        async with session.post(f"{base}/api/core/rules", json={"File": "_redirects", "Content": "/a\n"},
                                headers=ACCOUNT) as resp:
            assert resp.status == 400  # a syntax error: nothing committed, the redirect above still works
        async with session.get(f"{base}/brand/logo", allow_redirects=False) as resp:
            assert resp.status == 301

        async with session.post(f"{base}/api/core/zones/rules/domains", json={"Hostname": "img.rules-test.example"},
                                headers=ACCOUNT) as resp:
            assert resp.status == 201, await resp.text()
        for host in ("img.rules-test.example", "rules.cdn.localhost"):
            async with session.get(f"{base}/v1/logos/logo.svg", headers={"Host": host}) as resp:
                assert resp.status == 200, host
                assert resp.headers["Content-Type"] == "image/svg+xml"
