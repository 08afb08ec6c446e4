"""GET /api/health on control: manifest store, SQLite and git. `deep=1` exercises each binding."""

from __future__ import annotations

import time
from typing import Any

from aiohttp import web

from control.state import DB, GIT, MANIFEST, REGISTRY
from shared import API_VERSION
from shared.errors import utc_now_iso
from shared.middleware import json_response


async def _probe(name: str, method: str, probe: Any) -> dict[str, Any]:
    started = time.perf_counter()
    check: dict[str, Any] = {"name": name, "configured": True, "method": method}
    try:
        await probe()
        check["healthy"] = True
    except Exception as exc:  # a broken binding is reported, not raised
        check["healthy"] = False
        check["error"] = f"{type(exc).__name__}: {exc}"
    check["latencyMs"] = round((time.perf_counter() - started) * 1000)
    return check


async def health(request: web.Request) -> web.Response:
    app = request.app
    deep = request.query.get("deep") in ("1", "true")
    manifest, db, git = app[MANIFEST], app[DB], app[GIT]

    async def manifest_probe() -> None:
        if deep:
            head = await git.run(git.head_commit_id)
            if head != manifest.commit_id:
                raise RuntimeError(f"manifest at {manifest.commit_id} but HEAD is {head}")

    async def sqlite_probe() -> None:
        async with db.execute("SELECT 1") as cur:
            await cur.fetchone()
        if deep:
            async with db.execute("SELECT COUNT(*) FROM manifest_generations") as cur:
                await cur.fetchone()

    async def git_probe() -> None:
        head = await git.run(git.head_commit_id)
        if deep and head is not None:
            files = await git.run(lambda: next(iter(git.iter_files()), None))
            if files is not None and await git.run(git.read_blob, files.blob_id) is None:
                raise RuntimeError("blob unreadable")

    method = "deep" if deep else "shape"
    checks = [await _probe("manifest", method, manifest_probe), await _probe("sqlite", method, sqlite_probe),
              await _probe("git", method, git_probe)]
    ok = all(c["healthy"] for c in checks)
    body = {"status": "ok" if ok else "degraded", "timestamp": utc_now_iso(), "apiVersion": API_VERSION,
            "role": "control", "manifestGeneration": manifest.generation,
            "bindings": {"manifest": True, "sqlite": True, "git": True},
            "checks": checks, "edges": app[REGISTRY].describe()}
    return json_response(body, status=200 if ok else 503, headers={"Cache-Control": "no-cache, no-store"})
