"""Fault measurements on loopback: what a client sees when the control plane is killed, hung or cut off.

    .venv/bin/python -m benchmarks.fault_bench [--short] [--rounds N]

- kill: N rounds of 200 concurrent uploads with control killed (kill -9) after 60 acknowledgements;
  per round the acknowledged uploads, those lost (must be 0), the unacknowledged ones that were
  committed anyway, and the seconds until control answered again and both edges converged.
- hung: control stopped with SIGSTOP; the latency of uncached requests at the edge (origin timeout
  10 s, the default), the first one (sent at once, before the edge knows) and the later ones.
- partition: an edge cut off from control through a blocking proxy for a few seconds while a file
  changes; seconds from healing until it holds control's generation.

Everything runs on 127.0.0.1 and stops by itself; `--short` runs one round of each.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import tempfile
import time
from pathlib import Path

import aiohttp

from tests.integration.faults import BlockingProxy, health, poll, start_edge, wait_healthy
from tests.integration.harness import ACCESS, ACCOUNT, free_port_block, start_cdn
from tests.integration.kill_control import check_after_restart, stored, upload_and_kill


def fresh_dir(parent: str, name: str) -> Path:
    path = Path(parent) / name
    path.mkdir(parents=True)
    return path


async def kill_round(tmp: Path) -> dict[str, float]:
    cdn = start_cdn(tmp, edges=2)
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=200)) as session:
            async with session.post(f"{cdn.control_url}/api/core/zones", json={"Name": "kill"},
                                    headers=ACCOUNT) as resp:
                assert resp.status == 201
            (pid,) = cdn.pids("-m assetcdn.control")
            killed_at = 0.0

            def kill() -> None:
                nonlocal killed_at
                killed_at = time.monotonic()
                os.kill(pid, signal.SIGKILL)

            report = await upload_and_kill(session, [cdn.control_url, *cdn.edge_urls], "kill", 200, kill, 60)

            async def restarted() -> int | None:
                pids = cdn.pids("-m assetcdn.control")
                if not pids or pids == [pid]:
                    return None
                status, body = await health(session, cdn.control_url)
                return body["manifestGeneration"] if status == 200 else None

            generation = await poll(restarted, timeout_s=60, what="control restarted", interval_s=0.02)
            back = time.monotonic() - killed_at
            for edge in cdn.edge_urls:
                async def caught_up(edge: str = edge) -> bool | None:
                    status, body = await health(session, edge)
                    return True if status == 200 and body["manifestGeneration"] >= generation else None

                await poll(caught_up, timeout_s=60, what="edge caught up", interval_s=0.02)
            converged = time.monotonic() - killed_at
            problems = await check_after_restart(session, cdn.control_url, report, cdn.data_dir / "repo.git")
            committed_anyway = sum(
                [(await stored(session, cdn.control_url, o.path))[0] == 200 for o in report.unacknowledged])
    finally:
        cdn.stop()
    return {"acknowledged": len(report.acknowledged), "lost": len(problems),
            "unacknowledged": len(report.unacknowledged), "committed_anyway": committed_anyway,
            "control_back_s": back, "edges_converged_s": converged}


async def hung(tmp: Path, requests: int) -> dict[str, float]:
    cdn = start_cdn(tmp, edges=1, env_extra={"ASSETCDN_EDGE_ORIGIN_TIMEOUT_S": "10"})
    edge = cdn.edge_urls[0]
    latencies: list[float] = []
    try:
        async with aiohttp.ClientSession() as session:
            async with session.post(f"{edge}/api/core/zones", json={"Name": "hung"}, headers=ACCOUNT) as resp:
                assert resp.status == 201
            for i in range(requests):
                async with session.put(f"{edge}/api/storage/hung/v1/docs/{i}.txt", data=b"x",
                                       headers=ACCESS) as resp:
                    assert resp.status == 201
            paused = cdn.signal("-m assetcdn.control", signal.SIGSTOP)
            cdn.stopped_pids.extend(paused)
            for i in range(requests):
                started = time.monotonic()
                async with session.get(f"{edge}/hung/v1/docs/{i}.txt") as resp:
                    await resp.read()
                    assert resp.status == 503
                latencies.append(time.monotonic() - started)
                await asyncio.sleep(0.1)
    finally:
        cdn.stop()
    return {"first_s": latencies[0], "later_median_s": statistics.median(latencies[1:]),
            "later_max_s": max(latencies[1:])}


async def partition(tmp: Path, cut_s: float) -> float:
    cdn = start_cdn(tmp, edges=1)
    to_control = BlockingProxy(int(cdn.control_url.rsplit(":", 1)[1]))
    cluster_port = free_port_block(1)
    to_edge = BlockingProxy(cluster_port)
    to_control.start()
    to_edge.start()
    edge = start_edge(cdn.data_dir, tmp, name="edge-cut", control_url=f"http://127.0.0.1:{to_control.port}",
                      env_extra={"ASSETCDN_EDGE_CLUSTER_PORT": str(cluster_port),
                                 "ASSETCDN_EDGE_CLUSTER_ADVERTISE_PORT": str(to_edge.port),
                                 "ASSETCDN_EDGE_CATCHUP_INTERVAL_S": "2.0"})  # the default, not the tests' 0.5
    try:
        async with aiohttp.ClientSession() as session:
            await wait_healthy(session, edge.url)
            async with session.post(f"{cdn.control_url}/api/core/zones", json={"Name": "cut"},
                                    headers=ACCOUNT) as resp:
                assert resp.status == 201
            to_control.cut()
            to_edge.cut()
            async with session.put(f"{cdn.control_url}/api/storage/cut/v1/docs/a.txt", data=b"a",
                                   headers=ACCESS) as resp:
                assert resp.status == 201
            await asyncio.sleep(cut_s)
            _, body = await health(session, cdn.control_url)
            target = body["manifestGeneration"]
            to_control.heal()
            to_edge.heal()
            healed = time.monotonic()

            async def converged() -> float | None:
                _, body = await health(session, edge.url)
                return time.monotonic() - healed if body["manifestGeneration"] >= target else None

            return await poll(converged, timeout_s=60, what="converged", interval_s=0.005)
    finally:
        edge.stop()
        to_control.close()
        to_edge.close()
        cdn.stop()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--short", action="store_true", help="one round of each")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    rounds = 1 if args.short else args.rounds
    with tempfile.TemporaryDirectory(prefix="fault-bench-") as tmp:
        print(f"kill -9 of control during 200 concurrent uploads ({rounds} rounds):")
        for i in range(rounds):
            result = await kill_round(fresh_dir(tmp, f"kill-{i}"))
            print("  " + ", ".join(f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}"
                                  for k, v in result.items()))
        result = await hung(fresh_dir(tmp, "hung"), 5 if args.short else 20)
        print("control hung (SIGSTOP), uncached requests at the edge: "
              + ", ".join(f"{k} {v:.3f}" for k, v in result.items()))
        times = [await partition(fresh_dir(tmp, f"partition-{i}"), 3.0) for i in range(rounds)]
        print("partition healed -> edge at control's generation (s): "
              + ", ".join(f"{t:.3f}" for t in times))


if __name__ == "__main__":
    asyncio.run(main())
