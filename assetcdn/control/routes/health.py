"""GET /api/health on control: the asset store (manifest and git), SQLite and the counter store, and
what is still warming up (`chat`: loading/ready; `demoVideos`: making/ready/failed on a demo start).

The shallow answer is public and names no internal address or path; `deep=1` (metrics key required)
exercises each binding, reports error text and lists the registered edges.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from assetcdn.control.acme.service import CERTIFICATES
from assetcdn.control.app_keys import COUNTERS, SETTINGS
from assetcdn.control.chat.service import CHAT
from assetcdn.control.publishing.service import REGISTRY
from assetcdn.control.storage.service import DB, GIT, MANIFEST
from assetcdn.control.video.service import VIDEO_INGEST
from assetcdn.shared.health import (
    ASSET_READ,
    HEALTH_HEADERS,
    KV_READ,
    SHAPE,
    counters_check,
    deep_requested,
    health_body,
    shallow_error,
)
from assetcdn.shared.middleware import json_response


async def _probe(name: str, method: str, probe: Callable[[], Awaitable[None]], *, deep: bool) -> dict[str, Any]:
    started = time.perf_counter()
    check: dict[str, Any] = {"name": name, "configured": True, "method": method}
    try:
        await probe()
        check["healthy"] = True
    except Exception as exc:  # a broken binding is reported, not raised
        check["healthy"] = False
        check["error"] = f"{type(exc).__name__}: {exc}" if deep else shallow_error(exc)
    if deep:
        check["latencyMs"] = round((time.perf_counter() - started) * 1000)
    return check


async def control_checks(app: web.Application, *, deep: bool) -> list[dict[str, Any]]:
    """The manifest, SQLite, git and counter store checks (also run by the dashboard's status, always deep
    there)."""
    manifest, db, git = app[MANIFEST], app[DB], app[GIT]

    async def manifest_probe() -> None:
        if deep:
            head = await git.run(git.head_commit_id)
            if head != manifest.commit_id:
                raise RuntimeError(f"manifest at {manifest.commit_id} but HEAD is {head}")

    async def sqlite_probe() -> None:
        await db.fetch("SELECT 1")
        if deep:
            await db.fetch("SELECT COUNT(*) FROM manifest_generations")

    async def git_probe() -> None:
        head = await git.run(git.head_commit_id)
        if deep and head is not None:
            files = await git.run(lambda: next(iter(git.iter_files()), None))
            if files is not None and await git.run(git.read_blob, files.blob_id) is None:
                raise RuntimeError("blob unreadable")

    return [await _probe("manifest", ASSET_READ if deep else SHAPE, manifest_probe, deep=deep),
            await _probe("sqlite", KV_READ if deep else SHAPE, sqlite_probe, deep=deep),
            await _probe("git", ASSET_READ if deep else SHAPE, git_probe, deep=deep),
            await counters_check(app[COUNTERS], deep=deep),
            await acme_check(app, deep=deep)]


async def acme_check(app: web.Application, *, deep: bool) -> dict[str, Any]:
    """The ACME CA: unhealthy while it cannot be reached (issued certificates keep being offered; orders wait).
    Deep, it reads the certificate rows and counts the names by status."""
    issuer = app[CERTIFICATES]
    check = issuer.check()
    problem = issuer.ca_problem()
    if problem is not None:
        check["error"] = problem if deep else "the certificate authority cannot be reached"
    if deep:
        started = time.perf_counter()
        check["method"] = KV_READ
        counts: dict[str, int] = {}
        for record in (await issuer.store.records()).values():
            counts[record.status] = counts.get(record.status, 0) + 1
        check["certificates"] = counts
        if issuer.public_host is not None:  # the public URL's own certificate, which no domain answer shows
            own = await issuer.record(issuer.public_host)
            check["publicHost"] = {"hostname": issuer.public_host, "status": own.status if own else "provisioning",
                                   "expiresAt": own.expires_iso if own else None,
                                   "error": own.error if own else None}
        check["latencyMs"] = round((time.perf_counter() - started) * 1000)
    return check


def serving_ok(checks: list[dict[str, Any]]) -> bool:
    """Whether control serves: every check but `acme`, whose outage delays new certificates only, so it makes
    the status `degraded` without a 503 that would take control out of a load balancer or `assetcdn up`."""
    return all(c["healthy"] for c in checks if c["name"] != "acme")


async def health(request: web.Request) -> web.Response:
    app = request.app
    deep = deep_requested(request)
    manifest = app[MANIFEST]
    checks = await control_checks(app, deep=deep)
    ok = all(c["healthy"] for c in checks)
    extra: dict[str, Any] = {"role": "control", "manifestGeneration": manifest.generation,
                             # What still warms up after start (neither makes the service degraded): the chat's
                             # documentation vectors, and the demo videos of a first start (absent without a demo).
                             "chat": "ready" if app[CHAT].retriever.ready else "loading"}
    if app[VIDEO_INGEST].demo_state is not None:
        extra["demoVideos"] = app[VIDEO_INGEST].demo_state
    if deep:
        # An edge cut off from control stops acknowledging: its lag shows here as generations behind.
        extra["edges"] = [{**edge, "generationsBehind": max(manifest.generation - edge["generation"], 0)}
                          for edge in app[REGISTRY].describe()]
    # Control's own bindings besides the shared ones: the AI endpoints' packaged models, the webhook outbox (a
    # queue with retries and dead letters) and, with semantic search on, the catalog's vector index.
    bindings = {"ai": True, "webhookQueue": True, "vectorize": bool(app[SETTINGS].get("search", "semantic"))}
    return json_response(health_body(ok, checks, bindings, **extra), status=200 if serving_ok(checks) else 503,
                         headers=HEALTH_HEADERS)
