"""What both processes' GET /api/health have in common: the `bindings` object, check methods, deep mode.

`bindings` has the API reference's HealthResponse shape: one boolean per binding name, saying whether the
service has that binding at all (its health is in `checks`). Check `method` is one of the API reference's
values: `shape` (no I/O), `manifest-fetch` (a read from the asset store), `kv-get` (a key-value read).

The shallow answer is public and carries no internal addresses, ports, paths or exception text.
`deep=1` exercises each binding and says more (errors, edges); it needs the metrics key.
"""

from __future__ import annotations

import time
from typing import Any

from aiohttp import web

from assetcdn.shared import API_VERSION
from assetcdn.shared.counter_store import Counters
from assetcdn.shared.metrics import require_metrics_key
from assetcdn.shared.timestamps import utc_now_iso

# assets: the git repository and its manifest; kv: SQLite (control) and the edge cache; rateLimiter:
# every limit, counted in the shared counter store (assetcdn/shared/counter_store.py); metrics: Prometheus and the analytics store; auditLogKv: the audit
# log. An edge has no AI, vector index or webhook queue; control adds its own (CONTROL_BINDINGS).
SERVICE_BINDINGS: dict[str, bool] = {
    "assets": True, "kv": True, "ai": False, "vectorize": False, "rateLimiter": True, "metrics": True,
    "webhookQueue": False, "auditLogKv": True,
}
SHAPE = "shape"
ASSET_READ = "manifest-fetch"
KV_READ = "kv-get"
HEALTH_HEADERS = {"Cache-Control": "no-cache, no-store"}


def deep_requested(request: web.Request) -> bool:
    """True for `deep=1` (or `true`) from a caller holding the metrics key; 401 without the key."""
    if request.query.get("deep") not in ("1", "true"):
        return False
    require_metrics_key(request, "/api/health?deep=1")
    return True


def shallow_error(exc: BaseException) -> str:
    """A failure reason fit for the public answer: the kind of error, not its text (paths, addresses)."""
    return f"probe failed ({type(exc).__name__})"


def health_body(status_ok: bool, checks: list[dict[str, Any]], bindings: dict[str, bool] | None = None,
                **extra: Any) -> dict[str, Any]:
    return {"status": "ok" if status_ok else "degraded", "timestamp": utc_now_iso(), "apiVersion": API_VERSION,
            "bindings": {**SERVICE_BINDINGS, **(bindings or {})}, "checks": checks, **extra}


async def counters_check(counters: Counters, *, deep: bool) -> dict[str, Any]:
    """The shared counter store: healthy while limits are counted there; while it cannot be reached,
    unhealthy with `fallback: per-process` (each process counts alone; the instance is degraded)."""
    started = time.perf_counter()
    healthy = await counters.healthy(probe=deep)
    check: dict[str, Any] = {"name": "counters", "configured": True, "method": KV_READ if deep else SHAPE,
                             "healthy": healthy, **counters.check()}
    if deep:
        check["latencyMs"] = round((time.perf_counter() - started) * 1000)
        if not healthy:
            check["error"] = counters.error_detail() or check["error"]
    return check
