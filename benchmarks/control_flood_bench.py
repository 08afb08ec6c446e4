"""Control's writes under an anonymous flood, on loopback against a real `assetcdn up` (one edge).

    .venv/bin/python -m benchmarks.control_flood_bench [--requests 1000] [--route passkey-begin]

With one passkey registered: upload latency alone, then `--requests` anonymous requests to the
route (10 at a time, from 50 addresses named in X-Forwarded-For by a loopback peer) while small
uploads run one after another; the flood's answers by status, the uploads' statuses and latency
(median, p95, max), and whether an upload after the flood answers 201 and is served by the edge.
The client, control and the edge share the machine: read the load printed beside the numbers.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp

from benchmarks.measure import load_average, percentile
from tests.integration.flood import PASSWORD, flood, prepare, served_by_edge, upload, uploads_beside
from tests.integration.harness import start_cdn

ROUTES: dict[str, tuple[str, str, dict[str, Any]]] = {
    "passkey-begin": ("POST", "/api/passkeys/auth/begin", {}),
    "login": ("POST", "/dashboard/login", {"data": {"password": "a guess"}}),
    "analytics": ("POST", "/api/analytics", {"json": {"path": "/flood/v1/docs/a.txt", "bytes": 10}}),
}


def latency(samples: list[float]) -> str:
    return (f"n={len(samples)} median {statistics.median(samples) * 1000:.0f} ms, "
            f"p95 {percentile(samples, 0.95) * 1000:.0f} ms, max {max(samples) * 1000:.0f} ms")


async def measure(requests: int, route: str) -> None:
    method, path, request = ROUTES[route]
    with tempfile.TemporaryDirectory() as tmp:
        cdn = start_cdn(Path(tmp), env_extra={"ASSETCDN_DASHBOARD_SECRET": PASSWORD,
                                              "ASSETCDN_SEARCH_SEMANTIC": "false"})
        try:
            await prepare(cdn)
            async with aiohttp.ClientSession() as http:
                alone = [(await upload(http, cdn, f"alone-{n}")).seconds for n in range(20)]
            print(f"load average before: {load_average()}")
            print(f"uploads alone: {latency(alone)}")
            started = time.monotonic()
            # Sign-in is served on the dashboard's own origin only; the rest on control's API port.
            base_url = cdn.dashboard_url if path.startswith("/dashboard/") else cdn.control_url
            flooding = asyncio.create_task(flood(cdn, method, path, requests, base_url=base_url, **request))
            made = await uploads_beside(cdn, flooding)
            statuses: Counter[int] = await flooding
            took = time.monotonic() - started
            print(f"load average after: {load_average()}")
            print(f"flood: {requests} x {method} {path} in {took:.1f} s: {dict(sorted(statuses.items()))}")
            print(f"uploads during the flood: statuses {dict(Counter(s for s, _ in made))}; "
                  f"{latency([seconds for _, seconds in made])}")
            async with aiohttp.ClientSession() as http:
                after = await upload(http, cdn, f"after-{uuid.uuid4().hex[:8]}")
                served = after.status == 201 and await served_by_edge(http, cdn, after)
            print(f"upload after the flood: {after.status} in {after.seconds * 1000:.0f} ms; acknowledged by the "
                  f"edge: {after.acknowledged}; served by the edge: {served}")
        finally:
            cdn.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--route", choices=sorted(ROUTES), default="passkey-begin")
    args = parser.parse_args()
    asyncio.run(measure(args.requests, args.route))


if __name__ == "__main__":
    main()
