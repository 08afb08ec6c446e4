"""GET /api/dashboard/status: the health of the control plane and of every edge, for the dashboard.

What `GET /api/health?deep=1` says only to holders of the metrics key, for a signed-in operator (or
the AccountKey), without internal addresses: control's checks (always deep), its manifest generation
and commit, and per edge node each worker's generation, lag behind control (in generations), when
it was last seen, how long its last push took to be acknowledged and when that was. Also what the
page needs to know about where it runs (public URL, passkey relying party) and how this control is
configured where a view says so (the webhooks' retry delays, the scopes a session may put on a token).
"""

from __future__ import annotations

import time
from typing import Any

from aiohttp import web

from assetcdn.control.app_keys import DASHBOARD, public_url
from assetcdn.control.identity.service import SESSION_SCOPES
from assetcdn.control.publishing.service import REGISTRY
from assetcdn.control.routes.health import control_checks
from assetcdn.control.storage.service import MANIFEST
from assetcdn.control.webhooks.service import WEBHOOK_SETTINGS
from assetcdn.shared import API_VERSION
from assetcdn.shared.timestamps import from_unix, utc_now_iso

PROCESS_STARTED = time.time()  # this module is imported when control starts


def _worker(record: dict[str, Any], generation: int) -> dict[str, Any]:
    return {"name": record["name"], "alive": record["alive"], "generation": record["generation"],
            "lag": max(generation - record["generation"], 0), "lastSeenSecondsAgo": record["lastSeenSecondsAgo"],
            "lastPushMs": record["lastPushMs"], "lastAckAt": record.get("lastAckAt"),
            "registeredAt": record["registeredAt"]}


def edge_nodes(described: list[dict[str, Any]], generation: int) -> list[dict[str, Any]]:
    """Workers (`<node>/<worker>`) grouped by node; a node is alive when every worker is, its lag the largest."""
    nodes: dict[str, list[dict[str, Any]]] = {}
    for record in described:
        nodes.setdefault(record["name"].split("/", 1)[0], []).append(_worker(record, generation))
    result = []
    for name in sorted(nodes):
        workers = sorted(nodes[name], key=lambda w: w["name"])
        pushes = [w["lastPushMs"] for w in workers if w["lastPushMs"] is not None]
        acks = [w["lastAckAt"] for w in workers if w["lastAckAt"]]
        result.append({"name": name, "alive": all(w["alive"] for w in workers),
                       "generation": min(w["generation"] for w in workers),
                       "lag": max(w["lag"] for w in workers),
                       "lastPushMs": max(pushes) if pushes else None,
                       "lastAckAt": max(acks) if acks else None,
                       "workers": workers})
    return result


async def status_report(app: web.Application) -> dict[str, Any]:
    manifest = app[MANIFEST]
    checks = await control_checks(app, deep=True)
    generation = manifest.generation
    nodes = edge_nodes(app[REGISTRY].describe(), generation)
    ok = all(c["healthy"] for c in checks)
    config = app[DASHBOARD]
    grantable: frozenset[str] = app[SESSION_SCOPES]
    return {
        "status": "ok" if ok and all(n["alive"] for n in nodes) else "degraded",
        "control": {"status": "ok" if ok else "degraded", "checks": checks, "generation": generation,
                    "commit": manifest.commit_id, "files": len(manifest.snapshot()),
                    "startedAt": from_unix(PROCESS_STARTED), "uptimeSeconds": round(time.time() - PROCESS_STARTED),
                    "apiVersion": API_VERSION},
        "edges": {"total": len(nodes), "alive": sum(1 for n in nodes if n["alive"]),
                  "maxLag": max((n["lag"] for n in nodes), default=0), "nodes": nodes},
        "dashboard": {"publicUrl": public_url(app), "passkeyRpId": config.rp_id,
                      "passkeyOrigins": list(config.passkey_origins),
                      "webhookRetryDelaysS": list(app[WEBHOOK_SETTINGS].retry_delays_s),
                      "grantableScopes": sorted(grantable)},
        "DateFetched": utc_now_iso(),
    }
