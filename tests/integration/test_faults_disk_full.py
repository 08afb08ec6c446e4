"""Disk full on an edge's cache directory (a 3 MB tmpfs under a 1 GB cache limit): the edge serves every
file all the same (from control), evicts, logs it once and does not crash or restart."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from tests.integration.faults import health
from tests.integration.harness import ACCESS, ACCOUNT, RunningCdn, start_cdn
from tests.integration.small_fs import free_bytes, mount_small_fs, unmount

pytestmark = pytest.mark.integration
FILES = 16
SIZE = 400_000  # 6.4 MB in all, into 3 MB


def edge_cache(data_dir: Path) -> Path:
    return data_dir / "edge-0" / "cache"  # the disk tier of edge-0 (its metrics stay elsewhere)


@pytest.fixture(scope="module")
def cdn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningCdn, Path]]:
    tmp = tmp_path_factory.mktemp("disk-full")
    mounted: list[Path] = []

    def small_cache(data_dir: Path) -> None:
        # On every start attempt: a retry after a port clash runs in a fresh data directory, and a
        # cache left on the ordinary disk would hold all 16 files.
        mount_small_fs(edge_cache(data_dir), 3 * 1024)
        mounted.append(edge_cache(data_dir))

    try:
        running = start_cdn(tmp, edges=1, prepare=small_cache)
        try:
            assert os.path.ismount(edge_cache(running.data_dir))  # the edge that answers caches on it
            yield running, edge_cache(running.data_dir)
        finally:
            running.stop()
    finally:
        for cache_dir in mounted:
            unmount(cache_dir)


async def test_a_full_cache_disk_costs_no_request_and_no_crash(cdn: tuple[RunningCdn, Path]) -> None:
    running, cache_dir = cdn
    edge = running.edge_urls[0]
    bodies = {f"/full/v1/images/f{i}.bin": os.urandom(SIZE) for i in range(FILES)}
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{running.control_url}/api/core/zones", json={"Name": "full"},
                                headers=ACCOUNT) as resp:
            assert resp.status == 201
        for path, body in bodies.items():
            async with session.put(f"{running.control_url}/api/storage{path}", data=body, headers=ACCESS) as resp:
                assert resp.status == 201, await resp.text()
        edge_pids = running.pids("--name edge-0")
        assert edge_pids

        for _ in range(2):  # every file, twice: each is delivered whole whether it could be cached or not
            for path, body in bodies.items():
                async with session.get(f"{edge}{path}") as resp:
                    data = await resp.read()
                    assert resp.status == 200, data[:300]
                    assert hashlib.sha256(data).digest() == hashlib.sha256(body).digest(), path

        status, body = await health(session, edge)
        assert status == 200, body
        assert 0 < body["cache"]["disk_entries"] < FILES  # evicted to fit, still caching
    assert running.pids("--name edge-0") == edge_pids  # not crashed, not restarted
    assert free_bytes(cache_dir) > 0
    log = running.log_path.read_text()
    assert log.count("the filesystem is full") == 1, log[-3000:]
    assert "Traceback" not in log, log[-3000:]
