"""Bodies and quotas a stranger cannot drain, against real processes (`assetcdn up`): gzip bombs sent
through the edge are inflated no further than their route's own limit, leave no temporary files behind
and never stop hits from being answered; the forwarded bodies' temporary space has a budget; one client
address cannot make more than its share of transforms or placeholders."""

from __future__ import annotations

import asyncio
import gzip
import os
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.harness import ACCESS, ACCOUNT, METRICS, RunningCdn, start_cdn
from tests.support.images import photo_jpeg

pytestmark = pytest.mark.integration

ZONE = "bodies"
HIT_PATH = f"/{ZONE}/v1/files/hit.txt"
PHOTO = f"{ZONE}/v1/banners/photo.jpg"
SPOOL_MB = 8           # [edge] proxy_body_disk_mb of this cluster
CLIENT_MISSES = 3      # [transform] client_misses_per_minute and client_placeholders_per_minute
WAIT_S = 30.0          # how long a test waits for what should come about (never asserted as a duration)


@pytest.fixture(scope="module")
def spool(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("edge-tmp")


@pytest.fixture(scope="module")
def cdn(tmp_path_factory: pytest.TempPathFactory, spool: Path) -> Iterator[RunningCdn]:
    running = start_cdn(tmp_path_factory.mktemp("bodies"), env_extra={
        "TMPDIR": str(spool),  # the edge's temporary files, told apart from anyone else's
        "ASSETCDN_EDGE_PROXY_BODY_DISK_MB": str(SPOOL_MB),
        "ASSETCDN_TRANSFORM_CLIENT_MISSES_PER_MINUTE": str(CLIENT_MISSES),
        "ASSETCDN_TRANSFORM_CLIENT_PLACEHOLDERS_PER_MINUTE": str(CLIENT_MISSES),
        "ASSETCDN_AI_CHAT_RATE_LIMIT_PER_MINUTE": "0", "ASSETCDN_ANALYTICS_TRACK_RATE_LIMIT": "0"})
    try:
        asyncio.run(_prepare(running))
        yield running
    finally:
        running.stop()


async def _prepare(cdn: RunningCdn) -> None:
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{cdn.control_url}/api/core/zones", json={"Name": ZONE}, headers=ACCOUNT) as resp:
            assert resp.status == 201, await resp.text()
        for path, data in ((HIT_PATH.lstrip("/"), os.urandom(5000)), (PHOTO, photo_jpeg(64, 40))):
            async with session.put(f"{cdn.control_url}/api/storage/{path}", data=data, headers=ACCESS) as resp:
                assert resp.status == 201, await resp.text()
        for _ in range(int(WAIT_S / 0.1)):
            async with session.get(cdn.edge_urls[0] + HIT_PATH) as resp:
                await resp.read()
                if resp.status == 200 and resp.headers.get("X-Cache") == "HIT":
                    return
            await asyncio.sleep(0.1)
    raise AssertionError("the file never became a hit on the edge")


def temp_bytes(pids: list[int], spool: Path) -> int:
    """Bytes in the files (unlinked or not) that `pids` hold open under `spool`."""
    total = 0
    for pid in pids:
        try:
            fds = list(Path(f"/proc/{pid}/fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(fd).startswith(str(spool)):
                    total += os.stat(fd).st_size
            except OSError:
                continue
    return total


class Watch:
    """Hits asked in a loop and the edge's temporary bytes sampled, while a flood runs."""

    def __init__(self, cdn: RunningCdn, spool: Path) -> None:
        self.cdn, self.spool = cdn, spool
        self.pids = cdn.pids("--name edge")
        self.peak_temp = 0
        self.hit_statuses: list[int] = []
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    async def _hits(self) -> None:
        async with aiohttp.ClientSession() as session:
            while not self._stop.is_set():
                async with session.get(self.cdn.edge_urls[0] + HIT_PATH) as resp:
                    await resp.read()
                    self.hit_statuses.append(resp.status)
                await asyncio.sleep(0.01)

    async def _sample(self) -> None:
        while not self._stop.is_set():
            self.peak_temp = max(self.peak_temp, temp_bytes(self.pids, self.spool))
            await asyncio.sleep(0.01)

    async def __aenter__(self) -> Watch:
        assert self.pids, "no edge process found"
        self._tasks = [asyncio.create_task(self._hits()), asyncio.create_task(self._sample())]
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._stop.set()
        await asyncio.gather(*self._tasks)


def bomb(decoded_mb: int) -> bytes:
    return gzip.compress(b"\0" * (decoded_mb * 1024 * 1024), compresslevel=9)


async def send(url: str, data: bytes, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], dict]:
    async with aiohttp.ClientSession() as session, session.post(
            url, data=data, headers={"Content-Encoding": "gzip", "Content-Type": "application/json",
                                     **(headers or {})}) as resp:
        return resp.status, dict(resp.headers), await resp.json(content_type=None)


@pytest.mark.parametrize(("path", "legacy"), [("/api/chat", True), ("/api/analytics", True),
                                               ("/api/core/zones", False)])
async def test_gzip_bombs_stop_at_the_routes_own_limit_and_hits_go_on(
        cdn: RunningCdn, spool: Path, path: str, legacy: bool) -> None:
    data = bomb(64)  # ~64 KB on the wire, 64 MB decoded; these routes take 64 KB
    async with Watch(cdn, spool) as watch:
        answers = await asyncio.gather(*(send(cdn.edge_urls[0] + path, data) for _ in range(8)))
        await asyncio.sleep(0.2)  # a few hits after the flood too
    for status, _, body in answers:
        assert status == 413, body
        if legacy:  # the route's own envelope, as control would answer
            assert body["HttpCode"] == 413 and "Payload too large" in body["error"], body
        else:
            assert body["error"]["code"] == "PayloadTooLarge", body
        assert body["MaxSize"] == 64 * 1024
    # Nothing past 64 KB was kept: no temporary file at all (bodies up to 256 KB stay in memory).
    assert watch.peak_temp == 0
    assert watch.hit_statuses and set(watch.hit_statuses) == {200}


async def spool_metrics(cdn: RunningCdn) -> dict[str, float]:
    """The edge's report of its forwarded bodies' temporary space on /metrics (in use, peak, budget, refusals)."""
    async with aiohttp.ClientSession() as session, session.get(f"{cdn.edge_urls[0]}/metrics", headers=METRICS) as resp:
        assert resp.status == 200
        text = await resp.text()
    return {sample.name.removeprefix("assetcdn_edge_body_spool_"): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples
            if sample.name.startswith("assetcdn_edge_body_spool_")}


async def test_forwarded_bodies_share_a_budget_of_temporary_space(cdn: RunningCdn, spool: Path) -> None:
    # A batch upload may be 100 MB, so each of these is taken up to there: together they pass the budget.
    data = bomb(6)
    before = await spool_metrics(cdn)
    async with Watch(cdn, spool) as watch:
        answers = await asyncio.gather(*(send(cdn.edge_urls[0] + "/api/storage/batch", data) for _ in range(4)))
    statuses = [status for status, _, _ in answers]
    assert 503 in statuses, statuses
    for status, headers, body in answers:
        if status == 503:
            assert body["error"]["code"] == "ServiceUnavailable" and int(headers["Retry-After"]) >= 1
        else:  # received whole and forwarded: control refuses it (no key)
            assert status == 401, body
    # What the edge counted, not what a sampler happened to see: the bodies held temporary space, never more
    # than the budget, and each 503 is a refusal for want of it.
    after = await spool_metrics(cdn)
    assert after["budget_bytes"] == SPOOL_MB * 1024 * 1024
    assert 0 < after["peak_bytes"] <= after["budget_bytes"]
    assert after["refusals_total"] - before.get("refusals_total", 0) == statuses.count(503)
    assert set(watch.hit_statuses) == {200}
    for _ in range(int(WAIT_S / 0.1)):  # every temporary file is gone once its request is answered
        if temp_bytes(watch.pids, spool) == 0:
            break
        await asyncio.sleep(0.1)
    assert temp_bytes(watch.pids, spool) == 0
    assert (await spool_metrics(cdn))["bytes"] == 0


async def get_from(address: str, url: str) -> aiohttp.ClientResponse:
    """GET from a loopback source address of our choice: another client to the edge."""
    connector = aiohttp.TCPConnector(local_addr=(address, 0), force_close=True)
    async with aiohttp.ClientSession(connector=connector) as session, session.get(url) as resp:
        await resp.read()
        return resp


@pytest.mark.parametrize(("route", "client", "other"), [
    ("/api/transform?url=/{photo}&w={n}", "127.0.0.3", "127.0.0.4"),
    ("/api/lqip?url=/{photo}&size={n}", "127.0.0.6", "127.0.0.7"),
    ("/api/blurhash?url=/{photo}&size={n}", "127.0.0.8", "127.0.0.9")])
async def test_one_client_makes_only_its_share_of_variants(cdn: RunningCdn, route: str, client: str,
                                                           other: str) -> None:
    def url(n: int) -> str:
        return cdn.edge_urls[0] + route.format(photo=PHOTO, n=n)

    made = [await get_from(client, url(8 + n)) for n in range(CLIENT_MISSES)]
    assert [(r.status, r.headers["X-Cache"]) for r in made] == [(200, "MISS")] * CLIENT_MISSES
    refused = await get_from(client, url(8 + CLIENT_MISSES))
    assert refused.status == 429
    assert refused.headers["X-RateLimit-Limit"] == str(CLIENT_MISSES)
    assert refused.headers["X-RateLimit-Remaining"] == "0" and 1 <= int(refused.headers["Retry-After"]) <= 60
    # Cached variants are still served to that client; another address makes its own.
    assert (await get_from(client, url(8))).headers["X-Cache"] == "HIT"
    made_by_other = await get_from(other, url(8 + CLIENT_MISSES))
    assert (made_by_other.status, made_by_other.headers["X-Cache"]) == (200, "MISS")


async def test_a_refused_variant_says_why_in_the_routes_envelope(cdn: RunningCdn) -> None:
    edge = cdn.edge_urls[0]
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(local_addr=("127.0.0.5", 0))) as session:
        for n in range(CLIENT_MISSES + 1):
            async with session.get(f"{edge}/api/transform?url=/{PHOTO}&w={20 + n}") as resp:
                transform = (resp.status, await resp.read())
            async with session.get(f"{edge}/api/lqip?url=/{PHOTO}&size={20 + n}") as resp:
                lqip = (resp.status, await resp.read())
    assert transform[0] == 429 and orjson.loads(transform[1])["error"] == "rate_limit_exceeded"
    assert f"{CLIENT_MISSES} new variants per client" in orjson.loads(transform[1])["Message"]
    assert lqip[0] == 429 and orjson.loads(lqip[1])["error"]["code"] == "TooManyRequests"
    assert f"{CLIENT_MISSES} new placeholders per client" in orjson.loads(lqip[1])["error"]["message"]
