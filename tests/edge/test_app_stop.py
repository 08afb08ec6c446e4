"""A stopped edge app leaves no thread behind: a non-daemon thread still running holds the edge worker process
after it was told to stop (assetcdn/shared/process.py waits for it, then names it)."""

from __future__ import annotations

import threading
from pathlib import Path

from tests.support.origins import LONG, shared_pull_zone
from tests.support.wait import WAIT_S


async def test_an_edge_stopped_after_a_pull_zone_fill_leaves_no_thread_running(tmp_path: Path) -> None:
    before = set(threading.enumerate())
    async with shared_pull_zone(tmp_path, first_byte_timeout_s="30") as pull:  # a loaded machine may take 1 s
        pull.origin.answer("/kept.txt", b"kept", headers=LONG)
        first = await pull.get("/kept.txt")  # stored through the cache's writer thread
        assert (first.status, first.headers["X-Cache"]) == (200, "MISS")
        assert (await pull.get("/kept.txt")).headers["X-Cache"] == "HIT"
    # Threads told to end may take a moment to; one nobody told to end is still running after the wait. The test
    # loop's own executor (`asyncio.to_thread`) is not the app's: the process's loop ends it as it closes.
    left = [thread for thread in threading.enumerate()
            if thread not in before and not thread.daemon and not thread.name.startswith("asyncio_")]
    for thread in left:
        thread.join(timeout=WAIT_S)
    assert [thread.name for thread in left if thread.is_alive()] == []
