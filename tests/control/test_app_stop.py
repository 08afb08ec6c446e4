"""A stopped control app leaves no thread behind: a non-daemon thread still running holds the control process
after it was told to stop (assetcdn/shared/process.py waits for it, then names it)."""

from __future__ import annotations

import threading
from pathlib import Path

from aiohttp.test_utils import TestClient, TestServer

from assetcdn.control.app import create_app
from assetcdn.shared.config import load_settings
from tests.support.control import METRICS, SECRETS
from tests.support.wait import WAIT_S


async def test_control_stopped_after_deep_health_leaves_no_thread_running(data_dir: Path) -> None:
    before = set(threading.enumerate())
    client = TestClient(TestServer(create_app(load_settings(environ={}), SECRETS, data_dir)))
    await client.start_server()
    try:
        resp = await client.get("/api/health?deep=1", headers=METRICS)  # asks every store, the counters too
        assert "counters" in await resp.text(), await resp.text()
    finally:
        await client.close()
    # Threads told to end may take a moment to; one nobody told to end is still running after the wait.
    left = [thread for thread in threading.enumerate() if thread not in before and not thread.daemon]
    for thread in left:
        thread.join(timeout=WAIT_S)
    assert [thread.name for thread in left if thread.is_alive()] == []
