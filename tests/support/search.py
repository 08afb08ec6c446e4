"""The search tests' control plane: zones, a batch of small files, and the search API's answer."""

from __future__ import annotations

import base64

from aiohttp.test_utils import TestClient

from tests.support.control import ACCESS, ACCOUNT


async def add_zone(client: TestClient, zone: str) -> None:
    resp = await client.post("/api/core/zones", json={"Name": zone}, headers=ACCOUNT)
    assert resp.status == 201, await resp.text()


async def upload(client: TestClient, *paths: str) -> None:
    """One batch commit of small files at these CDN paths (content: the path itself)."""
    files = [{"path": p, "content": base64.b64encode(p.encode()).decode()} for p in paths]
    resp = await client.post("/api/storage/batch", json={"files": files}, headers=ACCESS)
    assert resp.status == 201, await resp.text()


async def search(client: TestClient, q: str, **params: str) -> dict:
    resp = await client.get("/api/search", params={"q": q, **params})
    assert resp.status == 200, await resp.text()
    return await resp.json()
