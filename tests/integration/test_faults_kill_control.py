"""kill -9 of the control plane while uploads are in flight: every acknowledged upload survives with its bytes,
every other one is absent or complete, git fsck is clean, the catalog matches the repository, the edges
converge; and a kill that lands while libgit2 holds `refs/heads/main.lock` does not stop later writes."""

from __future__ import annotations

import functools
import logging
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from tests.integration.faults import health, poll, wait_control_restarted
from tests.integration.harness import ACCESS, ACCOUNT, RunningCdn, start_cdn
from tests.integration.kill_control import (
    LOCK,
    ControlProcess,
    catalog,
    check_after_restart,
    git_files,
    kill_now,
    kill_when_locked,
    stored,
    upload_and_kill,
    wait_exit,
)

pytestmark = pytest.mark.integration
log = logging.getLogger(__name__)
UPLOADS = 200
KILL_AFTER = 60     # acknowledgements before the kill: many more are in flight then
MAX_ROUNDS = 10     # kills aimed at the ref lock, at most
ROUND_UPLOADS = 40


@pytest.fixture
def cdn(tmp_path: Path) -> Iterator[RunningCdn]:
    running = start_cdn(tmp_path, edges=2)
    yield running
    running.stop()


async def test_kill_9_during_200_uploads_loses_no_acknowledged_write(cdn: RunningCdn) -> None:
    repo = cdn.data_dir / "repo.git"
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=UPLOADS)) as session:
        async with session.post(f"{cdn.control_url}/api/core/zones", json={"Name": "kill"}, headers=ACCOUNT) as resp:
            assert resp.status == 201
        (control_pid,) = cdn.pids("-m assetcdn.control")
        killed_at = 0.0

        def kill() -> None:
            nonlocal killed_at
            killed_at = time.monotonic()
            os.kill(control_pid, signal.SIGKILL)

        report = await upload_and_kill(session, [cdn.control_url, *cdn.edge_urls], "kill", UPLOADS, kill,
                                       KILL_AFTER)
        log.warning("kill -9 after %d acknowledged uploads: %d acknowledged in all, %d not",
                    report.killed_after, len(report.acknowledged), len(report.unacknowledged))
        assert report.unacknowledged, "the kill came after every upload had been answered"

        await wait_control_restarted(session, cdn, [control_pid])  # `assetcdn up` restarts it
        status, body = await health(session, cdn.control_url)
        assert status == 200, body
        generation = body["manifestGeneration"]
        log.warning("control answered again %.1f s after the kill", time.monotonic() - killed_at)
        assert await check_after_restart(session, cdn.control_url, report, repo) == []

        files = git_files(repo)
        in_zone = {path: size for path, (_blob, size) in files.items()
                   if path.startswith("/kill/") and not path.endswith("/.gitkeep")}  # not catalogued
        assert await catalog(session, cdn.control_url, "kill") == in_zone
        assert {o.path for o in report.acknowledged} <= in_zone.keys()

        for edge in cdn.edge_urls:  # each edge reaches control's generation and serves what git holds
            async def caught_up(edge: str = edge) -> bool | None:
                # Healthy too: in contact with control again, not only holding the generation already.
                status, body = await health(session, edge)
                return True if status == 200 and body["manifestGeneration"] >= generation else None

            await poll(caught_up, timeout_s=60, what=f"{edge} caught up")
            for path in in_zone:
                async with session.get(f"{edge}{path}") as resp:
                    served = await resp.read()
                expected = (await stored(session, cdn.control_url, path))[1]
                assert (resp.status, served) == (200, expected), (edge, path, resp.status, served[:300])

        log.warning("checked and converged %.1f s after the kill", time.monotonic() - killed_at)
        async with session.put(f"{cdn.control_url}/api/storage/kill/v1/docs/after.txt", data=b"after",
                               headers=ACCESS) as resp:
            assert resp.status == 201, await resp.text()


async def test_a_kill_while_the_ref_is_locked_leaves_writes_working_after_restart(tmp_path: Path) -> None:
    """Kill control at the moment libgit2 holds refs/heads/main.lock, until a kill leaves the lock behind
    (bounded): the next start clears it, keeps every acknowledged write and accepts new ones."""
    data_dir = tmp_path / "data"
    repo = data_dir / "repo.git"
    control = ControlProcess(data_dir, tmp_path / "control.log")
    control.start()
    left_behind = rounds = 0
    try:
        async with aiohttp.ClientSession() as session:
            await control.wait_ready(session)
            async with session.post(f"{control.url}/api/core/zones", json={"Name": "locks"},
                                    headers=ACCOUNT) as resp:
                assert resp.status == 201
            while left_behind == 0 and rounds < MAX_ROUNDS:
                rounds += 1
                assert control.process is not None
                watcher = kill_when_locked(control.process.pid, repo, within_s=10)
                report = await upload_and_kill(session, [control.url], "locks", ROUND_UPLOADS,
                                               functools.partial(kill_now, watcher), ROUND_UPLOADS + 1,
                                               prefix=f"r{rounds}-")
                wait_exit(watcher)
                control.process.wait()
                left_behind += (repo / LOCK).exists()
                control.start()
                await control.wait_ready(session)
                assert not (repo / LOCK).exists()
                assert await check_after_restart(session, control.url, report, repo) == []
                async with session.put(f"{control.url}/api/storage/locks/v1/docs/after-{rounds}.txt",
                                       data=b"after", headers=ACCESS) as resp:
                    assert resp.status == 201, await resp.text()
    finally:
        control.stop()
    log.warning("the ref lock was left behind after %d of %d kills", left_behind, rounds)
    assert left_behind, f"no kill in {rounds} left refs/heads/main.lock behind"
    assert "removed refs/heads/main.lock" in (tmp_path / "control.log").read_text()


async def test_a_second_control_plane_on_the_same_data_dir_refuses_to_start_and_harms_nothing(
        tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    first = ControlProcess(data_dir, tmp_path / "first.log")
    second = ControlProcess(data_dir, tmp_path / "second.log")
    first.start()
    try:
        async with aiohttp.ClientSession() as session:
            await first.wait_ready(session)
            async with session.post(f"{first.url}/api/core/zones", json={"Name": "solo"}, headers=ACCOUNT) as resp:
                assert resp.status == 201
            second.start()  # started by hand beside the first, without `assetcdn up` and its data dir lock
            assert second.process is not None
            wait_exit(second.process)
            assert second.process.returncode == 5
            assert "another control plane" in (tmp_path / "second.log").read_text()
            async with session.put(f"{first.url}/api/storage/solo/v1/docs/a.txt", data=b"still mine",
                                   headers=ACCESS) as resp:
                assert resp.status == 201, await resp.text()
            assert await stored(session, first.url, "/solo/v1/docs/a.txt") == (200, b"still mine")
    finally:
        second.stop()
        first.stop()
