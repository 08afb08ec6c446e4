"""GET /api/health on an edge: its own bindings (cache, manifest generation, control reachability).

The control check also says how far behind this edge may be: the circuit breaker's state, seconds
since control last answered, the newest generation control reported and seconds since this edge
last confirmed it was current (`lagSeconds`: it grows while the edge is cut off). The counters check
says whether limits are counted in the shared counter store or, while it is unreachable, per process.

200 ok only when all are healthy (the system is ready); 503 degraded with the reason otherwise.
The shallow answer is public and names no internal address; `deep=1` (metrics key required) exercises
each binding: a cache write/read/delete and a round trip to control, with their error text.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from typing import Any

from aiohttp import web

from assetcdn.edge.app_keys import COUNTERS, NODE
from assetcdn.edge.control_client import ControlUnavailable
from assetcdn.shared.health import (
    ASSET_READ,
    HEALTH_HEADERS,
    KV_READ,
    SHAPE,
    counters_check,
    deep_requested,
    health_body,
)
from assetcdn.shared.middleware import json_response


async def health(request: web.Request) -> web.Response:
    node = request.app[NODE]
    deep = deep_requested(request)
    checks: list[dict[str, Any]] = []

    if deep:
        result = await asyncio.get_running_loop().run_in_executor(None, node.cache.check)
        checks.append({"name": "cache", "configured": True, "method": KV_READ, "healthy": result.ok,
                       "latencyMs": round(result.latency_ms), **({"error": result.error} if result.error else {})})
    else:
        checks.append({"name": "cache", "configured": True, "method": SHAPE, "healthy": True})

    manifest_ok = node.replica.loaded and node.synced
    checks.append({"name": "manifest", "configured": True, "method": SHAPE, "healthy": manifest_ok,
                   "generation": node.applied_generation,
                   **({} if manifest_ok else {"error": "not caught up with control since start"})})

    control_check: dict[str, Any] = {"name": "control", "configured": True, "method": ASSET_READ if deep else SHAPE}
    if deep:
        started = time.perf_counter()
        try:
            await node.control.heartbeat(node.name, node.replica.generation)
            control_check["healthy"] = True
        except ControlUnavailable as exc:
            control_check.update(healthy=False, error=str(exc))
        control_check["latencyMs"] = round((time.perf_counter() - started) * 1000)
    else:
        control_check["healthy"] = node.control_reachable()
        if not control_check["healthy"]:
            control_check["error"] = node.control.refused or "control is not answering this edge's calls"
    if node.control.secrets_differ:  # control answers, but this edge refuses what control's secrets signed
        control_check.update(healthy=False, error=node.control.secrets_differ)
    control_check.update(node.sync_status())  # breaker state and this edge's lag behind control
    checks.append(control_check)
    checks.append(await counters_check(request.app[COUNTERS], deep=deep))

    cache_stats: dict[str, int] | None
    try:
        cache_stats = node.cache.stats().to_json()
    except (OSError, sqlite3.Error) as exc:  # the disk tier failing: this edge is unhealthy, the answer says why
        cache_stats = None
        next(c for c in checks if c["name"] == "cache").update(healthy=False,
                                                               error=f"the disk tier cannot be read: {exc}")
    ok = all(c["healthy"] for c in checks)
    body = health_body(ok, checks, role="edge", node=node.name, manifestGeneration=node.applied_generation,
                       cache=cache_stats, shield=node.shields.status())
    return json_response(body, status=200 if ok else 503, headers=HEALTH_HEADERS)
