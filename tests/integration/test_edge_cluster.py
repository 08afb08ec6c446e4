"""Control plus three edges from `assetcdn up --edges 3`: propagation, purges, conditional and range requests,
request coalescing. Each test uses its own zone so they can share one cluster."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest
from multidict import CIMultiDict

from tests.integration.harness import ACCESS, ACCOUNT, METRICS, PURGE, RunningCdn, start_cdn

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cdn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningCdn]:
    running = start_cdn(tmp_path_factory.mktemp("cluster"), edges=3)
    yield running
    assert running.stop() == 0


async def make_zone(session: aiohttp.ClientSession, cdn: RunningCdn, zone: str) -> None:
    async with session.post(f"{cdn.edge_urls[0]}/api/core/zones", json={"Name": zone}, headers=ACCOUNT) as resp:
        assert resp.status == 201, await resp.text()


async def upload(session: aiohttp.ClientSession, cdn: RunningCdn, path: str, data: bytes) -> dict:
    async with session.put(f"{cdn.edge_urls[0]}/api/storage/{path}", data=data, headers=ACCESS) as resp:
        assert resp.status == 201, await resp.text()
        return await resp.json()


async def fetch(session: aiohttp.ClientSession, url: str, **headers: str) -> tuple[int, CIMultiDict[str], bytes]:
    async with session.get(url, headers=headers) as resp:
        return resp.status, resp.headers.copy(), await resp.read()


async def test_new_file_is_served_by_every_edge_right_after_the_201(cdn: RunningCdn) -> None:
    async with aiohttp.ClientSession() as session:
        await make_zone(session, cdn, "prop")
        body = await upload(session, cdn, "prop/v1/logos/new.svg", b"<svg xmlns='http://www.w3.org/2000/svg'/>")
        assert body["EdgeStatus"] == "pending"
        assert "Acknowledged by 3 of 3 edges" in body["EdgeNote"]
        for edge in cdn.edge_urls:  # no sleep: the 201 waited for the acknowledgements
            status, headers, data = await fetch(session, f"{edge}/prop/v1/logos/new.svg")
            assert status == 200
            assert data == b"<svg xmlns='http://www.w3.org/2000/svg'/>"
            assert headers["Content-Type"] == "image/svg+xml"
            assert headers["X-Cache"] == "MISS"
            assert headers["Cache-Tag"] == "project-prop,type-logos,format-svg,all-assets"
            assert re.fullmatch(r'"[0-9a-f]{64}"', headers["ETag"])
            assert "max-age=" in headers["Cache-Control"]
            status, headers, _ = await fetch(session, f"{edge}/prop/v1/logos/new.svg")
            assert headers["X-Cache"] == "HIT"


async def test_overwrite_and_delete_reach_edges_that_cached_the_old_bytes(cdn: RunningCdn) -> None:
    async with aiohttp.ClientSession() as session:
        await make_zone(session, cdn, "overwrite")
        path = "overwrite/v1/banners/hero.txt"
        await upload(session, cdn, path, b"version one")
        for edge in cdn.edge_urls:
            assert (await fetch(session, f"{edge}/{path}"))[2] == b"version one"
            assert (await fetch(session, f"{edge}/{path}"))[1]["X-Cache"] == "HIT"
        body = await upload(session, cdn, path, b"version two")
        assert body["EdgeStatus"] == "purging"
        for edge in cdn.edge_urls:
            status, headers, data = await fetch(session, f"{edge}/{path}")
            assert (status, data) == (200, b"version two")
            assert headers["X-Cache"] == "MISS"
        async with session.delete(f"{cdn.edge_urls[1]}/api/storage/{path}", headers=ACCESS) as resp:
            assert resp.status == 200
            assert (await resp.json())["EdgeStatus"] == "purging"
        for edge in cdn.edge_urls:
            status, _, _ = await fetch(session, f"{edge}/{path}")
            assert status == 404


async def _warm(session: aiohttp.ClientSession, cdn: RunningCdn, paths: list[str]) -> None:
    for edge in cdn.edge_urls:
        for path in paths:
            await fetch(session, f"{edge}/{path}")
            assert (await fetch(session, f"{edge}/{path}"))[1]["X-Cache"] == "HIT"


async def _cache_states(session: aiohttp.ClientSession, cdn: RunningCdn, path: str) -> list[str]:
    return [(await fetch(session, f"{edge}/{path}"))[1]["X-Cache"] for edge in cdn.edge_urls]


async def purge(session: aiohttp.ClientSession, cdn: RunningCdn, body: dict) -> tuple[int, dict]:
    async with session.post(f"{cdn.edge_urls[2]}/api/purge", json=body, headers=PURGE) as resp:
        return resp.status, await resp.json()


async def test_url_tag_and_everything_purges_empty_every_edge(cdn: RunningCdn) -> None:
    async with aiohttp.ClientSession() as session:
        await make_zone(session, cdn, "purges")
        a, b = "purges/v1/logos/a.txt", "purges/v1/icons/b.txt"
        await upload(session, cdn, a, b"a")
        await upload(session, cdn, b, b"b")

        await _warm(session, cdn, [a, b])
        status, body = await purge(session, cdn, {"urls": [f"https://cdn.example.com/{a}"]})
        assert status == 200, body
        assert body["success"] is True and body["purged"] == [f"https://cdn.example.com/{a}"]
        assert body["edges"]["total"] == 3 and body["edges"]["pending"] == []
        assert await _cache_states(session, cdn, a) == ["MISS"] * 3
        assert await _cache_states(session, cdn, b) == ["HIT"] * 3

        await _warm(session, cdn, [a, b])
        status, body = await purge(session, cdn, {"tags": ["type-icons"]})
        assert status == 200
        assert await _cache_states(session, cdn, b) == ["MISS"] * 3
        assert await _cache_states(session, cdn, a) == ["HIT"] * 3

        await _warm(session, cdn, [a, b])
        status, body = await purge(session, cdn, {"purge_everything": True})
        assert status == 200 and body["purged"] == "everything"
        assert all(n >= 2 for n in body["edges"]["entriesRemoved"].values())
        assert await _cache_states(session, cdn, a) == ["MISS"] * 3
        assert await _cache_states(session, cdn, b) == ["MISS"] * 3


async def test_a_prefix_purge_empties_the_prefix_on_every_edge_soft_or_not(cdn: RunningCdn) -> None:
    async with aiohttp.ClientSession() as session:
        await make_zone(session, cdn, "prefixes")
        logos = ["prefixes/v1/logos/a.txt", "prefixes/v1/logos/b.txt"]
        icon = "prefixes/v1/icons/c.txt"
        for path in (*logos, icon):
            await upload(session, cdn, path, path.encode())

        await _warm(session, cdn, [*logos, icon])
        status, body = await purge(session, cdn, {"prefixes": ["/prefixes/v1/logos/"]})
        assert status == 200, body
        assert (body["purged"], body["mode"], body["soft"]) == (["/prefixes/v1/logos/"], "prefixes", False)
        assert body["edges"]["total"] == 3 and body["edges"]["pending"] == []
        assert sum(body["edges"]["entriesRemoved"].values()) == 2 * 3  # each node's shared disk tier, once
        for path in logos:
            assert await _cache_states(session, cdn, path) == ["MISS"] * 3
        assert await _cache_states(session, cdn, icon) == ["HIT"] * 3

        status, body = await purge(session, cdn, {"prefixes": ["https://cdn.example.com/prefixes/v1/icons/"],
                                                  "soft": True})
        assert status == 200 and body["soft"] is True, body
        assert await _cache_states(session, cdn, icon) == ["MISS"] * 3  # a stored file: soft is hard
        assert await _cache_states(session, cdn, logos[0]) == ["HIT"] * 3


async def test_identical_reupload_purges_the_path_on_every_edge(cdn: RunningCdn) -> None:
    async with aiohttp.ClientSession() as session:
        await make_zone(session, cdn, "reupload")
        same, other = "reupload/v1/logos/same.txt", "reupload/v1/logos/other.txt"
        await upload(session, cdn, same, b"unchanged bytes")
        await upload(session, cdn, other, b"other bytes")
        await _warm(session, cdn, [same, other])
        body = await upload(session, cdn, same, b"unchanged bytes")
        assert (body["Message"], body["EdgeStatus"]) == ("File overwritten successfully", "purging")
        assert "Acknowledged by 3 of 3 edges" in body["EdgeNote"]
        assert await _cache_states(session, cdn, same) == ["MISS"] * 3
        assert await _cache_states(session, cdn, other) == ["HIT"] * 3
        for edge in cdn.edge_urls:
            assert (await fetch(session, f"{edge}/{same}"))[2] == b"unchanged bytes"


async def test_purge_rejects_bad_requests_in_the_legacy_envelope(cdn: RunningCdn) -> None:
    async with aiohttp.ClientSession() as session:
        status, body = await purge(session, cdn, {"tags": ["ok-tag", "bad tag!", "x_y"]})
        assert status == 400
        assert body["error"] == "Tags must be alphanumeric with hyphens only"
        assert body["invalid"] == ["bad tag!", "x_y"]
        assert body["HttpCode"] == 400 and body["Message"] == body["error"] and body["requestId"]
        status, body = await purge(session, cdn, {"urls": [f"/x/v1/a/{i}.png" for i in range(31)]})
        assert (status, body["error"]) == (400, "Too many URLs: max 30 per request")
        status, body = await purge(session, cdn, {"urls": ["/a.png"], "tags": ["x"]})
        assert status == 400 and "Only one of" in body["error"]
        status, body = await purge(session, cdn, {})
        assert status == 400
        async with session.post(f"{cdn.edge_urls[0]}/api/purge", json={"purge_everything": True},
                                headers={"x-api-key": "wrong"}) as resp:
            assert resp.status == 401
            assert isinstance((await resp.json())["error"], str)


async def test_conditional_and_range_requests(cdn: RunningCdn) -> None:
    async with aiohttp.ClientSession() as session:
        await make_zone(session, cdn, "ranges")
        path = "ranges/v1/banners/data.bin"
        # Larger than the memory tier's object limit (memory_object_max_kb, 1 MiB): hits are sent from
        # the disk tier's file (sendfile), never held in memory.
        payload = bytes(range(256)) * 4096 * 3 + b"tail"
        await upload(session, cdn, path, payload)
        edge = cdn.edge_urls[1]
        status, headers, data = await fetch(session, f"{edge}/{path}")
        assert status == 200 and data == payload and headers["X-Cache"] == "MISS"
        for _ in range(3):  # hits, from the file, whole and in order on one connection
            status, headers, data = await fetch(session, f"{edge}/{path}")
            assert (status, headers["X-Cache"], len(data)) == (200, "HIT", len(payload))
            assert data == payload
        etag = headers["ETag"]
        status, headers, data = await fetch(session, f"{edge}/{path}", **{"If-None-Match": etag})
        assert (status, data) == (304, b"")
        assert headers["ETag"] == etag
        status, headers, data = await fetch(session, f"{edge}/{path}", Range="bytes=1000-1999")
        assert status == 206 and data == payload[1000:2000]
        assert headers["Content-Range"] == f"bytes 1000-1999/{len(payload)}"
        status, headers, data = await fetch(session, f"{edge}/{path}", Range="bytes=-10")
        assert status == 206 and data == payload[-10:]
        status, headers, data = await fetch(session, f"{edge}/{path}", Range="bytes=1048000-2100000")
        assert status == 206 and data == payload[1048000:2100001]
        status, headers, _ = await fetch(session, f"{edge}/{path}", Range=f"bytes={len(payload)}-")
        assert status == 416 and headers["Content-Range"] == f"bytes */{len(payload)}"
        async with session.head(f"{edge}/{path}") as resp:
            assert resp.status == 200
            assert resp.headers["Content-Length"] == str(len(payload))
            assert await resp.read() == b""


def _blob_fetches(metrics_text: str) -> float:
    total = 0.0
    for line in metrics_text.splitlines():
        if line.startswith("assetcdn_requests_total{") and 'route="/_cluster/blobs/{blob_id}"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


async def test_hundred_concurrent_requests_for_a_cold_file_cause_one_origin_fetch(cdn: RunningCdn) -> None:
    async with aiohttp.ClientSession() as session:
        await make_zone(session, cdn, "coalesce")
        path = "coalesce/v1/banners/cold.bin"
        payload = b"z" * 300_000
        await upload(session, cdn, path, payload)
        async with session.get(f"{cdn.control_url}/metrics", headers=METRICS) as resp:
            before = _blob_fetches(await resp.text())
        results = await asyncio.gather(*(fetch(session, f"{cdn.edge_urls[0]}/{path}") for _ in range(100)))
        assert all(status == 200 and data == payload for status, _, data in results)
        async with session.get(f"{cdn.control_url}/metrics", headers=METRICS) as resp:
            after = _blob_fetches(await resp.text())
        assert after - before == 1


async def test_every_edge_reports_health_and_metrics(cdn: RunningCdn) -> None:
    async with aiohttp.ClientSession() as session:
        for edge in cdn.edge_urls:
            async with session.get(f"{edge}/api/health?deep=1", headers=METRICS) as resp:
                body = await resp.json()
                assert resp.status == 200, body
                assert body["status"] == "ok"
                assert {c["name"] for c in body["checks"]} == {"cache", "manifest", "control", "counters"}
            async with session.get(f"{edge}/metrics", headers=METRICS) as resp:
                text = await resp.text()
                assert "assetcdn_manifest_generation" in text
                assert "assetcdn_requests_total" in text


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_stopping_up_leaves_no_process(tmp_path: Path) -> None:
    running = start_cdn(tmp_path, edges=2, workers=2, image_workers_at_start=True, semantic_search=True)
    tree = running.descendants()
    assert len(tree) >= 7  # control, and per edge its main process plus two workers
    assert running.stop() == 0
    assert [pid for pid in tree if _alive(pid)] == []


def test_killing_up_outright_takes_its_children_with_it(tmp_path: Path) -> None:
    running = start_cdn(tmp_path, edges=1, workers=2, image_workers_at_start=True, semantic_search=True)
    tree = running.descendants()
    assert len(tree) >= 4
    running.process.kill()  # no chance to clean up: children rely on the parent-death signal
    running.process.wait()
    deadline = time.monotonic() + 20
    while [pid for pid in tree if _alive(pid)] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert [pid for pid in tree if _alive(pid)] == []
