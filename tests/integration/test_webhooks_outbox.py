"""kill -9 of the control plane (real processes): every event of an acknowledged mutation arrives at
least once, sent by the restarted control.

The receiver holds every request until control has been killed and restarted, so no delivery was
acknowledged to the killed process: what arrives afterwards comes from the durable outbox.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from tests.control.webhooks.receiver import Receiver
from tests.integration.faults import wait_control_restarted
from tests.integration.harness import ACCESS, ACCOUNT, start_cdn

pytestmark = pytest.mark.integration
RESTART_BOUND_S = 90
FILES = 5


async def test_events_of_acknowledged_mutations_survive_a_kill_9_of_control(tmp_path: Path) -> None:
    receiver = Receiver()
    runner = web.AppRunner(receiver.app())
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    receiver.port = runner.addresses[0][1]
    receiver.hold("kill")
    cdn = await asyncio.to_thread(start_cdn, tmp_path, env_extra={
        "ASSETCDN_WEBHOOKS_ALLOW_LOOPBACK": "true", "ASSETCDN_WEBHOOKS_RETRY_DELAYS_S": "0.5,1,2,4,8,16"})
    try:
        async with aiohttp.ClientSession() as session:
            async with session.post(f"{cdn.control_url}/api/webhooks", headers=ACCOUNT, json={
                    "url": receiver.url("kill", host="127.0.0.1"),
                    "events": ["zone.created", "asset.created"]}) as resp:
                assert resp.status == 201, await resp.text()
                receiver.secrets["kill"] = (await resp.json())["secret"]
            async with session.post(f"{cdn.control_url}/api/core/zones", json={"Name": "durable"},
                                    headers=ACCOUNT) as resp:
                assert resp.status == 201, await resp.text()
            expected = {("zone.created", "durable")}
            for i in range(FILES):
                path = f"durable/v1/logos/f{i}.txt"
                async with session.put(f"{cdn.control_url}/api/storage/{path}", data=f"file {i}".encode(),
                                       headers=ACCESS) as resp:
                    assert resp.status == 201, await resp.text()
                expected.add(("asset.created", f"/{path}"))

            killed = cdn.pids("-m assetcdn.control")
            assert killed
            killed_at = time.time()
            for pid in killed:
                os.kill(pid, signal.SIGKILL)
            await wait_control_restarted(session, cdn, killed, timeout_s=RESTART_BOUND_S)
            receiver.gates["kill"].set()

            def arrived_after_the_kill() -> set[tuple[str, str]]:
                return {(r.event, r.payload["data"].get("zone") or r.payload["data"].get("path"))
                        for r in receiver.delivered("kill") if r.arrived > killed_at}

            await receiver.wait(lambda: expected <= arrived_after_the_kill())
            assert receiver.bad_signatures == []
    finally:
        await asyncio.to_thread(cdn.stop)
        await runner.cleanup()
