"""Origin shielding (assetcdn/edge/shield.py): origin requests and fill latency with several edges.

    .venv/bin/python -m benchmarks.shield_bench [--edges 3] [--objects 1000] [--at-once 16]

For each mode (``[origin] shield`` = "" and "off"), one `assetcdn up` with ``--edges`` edges of one worker and
a counting origin (an aiohttp server in its own process, this file run with ``--serve-origin``, so its work
neither competes with the client's event loop nor delays it; each path answers its own 1 KB body, cacheable
for ten minutes; ``GET /_origin_requests`` answers how many requests it has had). Each of ``--objects`` new paths is asked of every edge at once, ``--at-once`` paths at a time. Reported:
the origin's requests (the goal: one per object with shielding), the wall time, and the client latencies
(median, 95th percentile) of all the answers, each a miss at its edge.

Loopback only; bounded; every process started is stopped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
from aiohttp import web

from benchmarks.measure import create_pull_zone, load_average, stop_process
from tests.integration.harness import ACCOUNT, free_port_block, start_cdn

BODY = b"x" * 1024
WAIT_S = 60.0
COUNT_PATH = "/_origin_requests"  # asked of the origin directly, never through an edge: not counted


def serve_origin(port: int) -> None:
    """The counting origin (run in its own process): every path but COUNT_PATH answers BODY and is counted."""
    asked = 0

    async def handler(request: web.Request) -> web.StreamResponse:
        nonlocal asked
        if request.path == COUNT_PATH:
            return web.json_response(asked)
        asked += 1
        return web.Response(body=BODY, headers={"Cache-Control": "max-age=600"})

    app = web.Application()
    app.router.add_get("/{tail:.*}", handler)
    web.run_app(app, host="127.0.0.1", port=port, print=None, handle_signals=True)


async def origin_requests(session: aiohttp.ClientSession, origin: str) -> int:
    """How many requests the origin has had; waits (bounded) for it to listen."""
    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            async with session.get(origin + COUNT_PATH) as resp:
                count: int = await resp.json()
                return count
        except aiohttp.ClientConnectionError:
            if time.monotonic() > deadline:
                raise SystemExit(f"the origin never listened on {origin}") from None
            await asyncio.sleep(0.1)


def start_origin() -> tuple[str, subprocess.Popen[bytes]]:
    """The counting origin in its own process: its URL and the process."""
    port = free_port_block(1)
    process = subprocess.Popen([sys.executable, "-m", "benchmarks.shield_bench", "--serve-origin", str(port)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return f"http://127.0.0.1:{port}", process


async def run_mode(origin: str, mode: str, edges: int, objects: int, at_once: int) -> dict[str, float]:
    async with aiohttp.ClientSession() as session:
        await origin_requests(session, origin)  # listening
    with tempfile.TemporaryDirectory(prefix="shield-bench-") as tmp:
        cdn = await asyncio.to_thread(start_cdn, Path(tmp), edges=edges, env_extra={
            "ASSETCDN_ORIGIN_ALLOW_LOOPBACK": "true", "ASSETCDN_EDGE_HEARTBEAT_INTERVAL_S": "0.5",
            "ASSETCDN_ORIGIN_SHIELD": mode})
        try:
            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
                await ready(session, cdn.control_url, cdn.edge_urls, cdn.data_dir, origin, mode)
                asked_before = await origin_requests(session, origin)
                latencies: list[float] = []
                gate = asyncio.Semaphore(at_once)

                async def one(edge: str, path: str) -> None:
                    started = time.perf_counter()
                    async with session.get(f"{edge}/bench{path}") as resp:
                        assert resp.status == 200 and await resp.read() == BODY, resp.status
                    latencies.append(time.perf_counter() - started)

                async def each_edge(path: str) -> None:
                    async with gate:
                        await asyncio.gather(*(one(edge, path) for edge in cdn.edge_urls))

                started = time.perf_counter()
                await asyncio.gather(*(each_edge(f"/objects/{i}.bin") for i in range(objects)))
                wall = time.perf_counter() - started
                asked = await origin_requests(session, origin) - asked_before
        finally:
            await asyncio.to_thread(cdn.stop)
    latencies.sort()
    return {"origin_requests": asked, "wall_s": wall,
            "p50_ms": statistics.median(latencies) * 1000, "p95_ms": latencies[int(len(latencies) * 0.95)] * 1000}


async def ready(session: aiohttp.ClientSession, control: str, edges: list[str], data_dir: Path, origin: str,
                mode: str) -> None:
    """The pull zone created; returns once every edge has it and knows every edge."""
    await create_pull_zone(control, ACCOUNT, "bench", origin, data_dir, workers=len(edges), wait_s=WAIT_S)
    deadline = time.monotonic() + WAIT_S
    while mode != "off":
        known = []
        for edge in edges:
            async with session.get(f"{edge}/api/health") as resp:
                known.append((await resp.json()).get("shield", {}).get("edges"))
        if known == [len(edges)] * len(edges):
            return
        if time.monotonic() > deadline:
            raise SystemExit("the edges never all knew each other")
        await asyncio.sleep(0.1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--edges", type=int, default=3)
    parser.add_argument("--objects", type=int, default=1000)
    parser.add_argument("--at-once", type=int, default=16)
    parser.add_argument("--serve-origin", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_origin is not None:
        serve_origin(args.serve_origin)
        return
    print(f"{args.edges} edges, {args.objects} new objects asked of every edge, {args.at_once} at a time; "
          f"load average {load_average()}")
    for mode in ("", "off"):
        origin, process = start_origin()
        try:
            result = asyncio.run(run_mode(origin, mode, args.edges, args.objects, args.at_once))
        finally:
            stop_process(process)
        print(f"shield={mode or 'fleet':5}  origin requests {result['origin_requests']:6.0f}  "
              f"wall {result['wall_s']:6.1f} s  p50 {result['p50_ms']:6.1f} ms  p95 {result['p95_ms']:6.1f} ms")


if __name__ == "__main__":
    main()
