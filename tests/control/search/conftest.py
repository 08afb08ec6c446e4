"""Control apps for the search tests: real git, real SQLite, the real packaged model."""

from __future__ import annotations

import base64
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient

from assetcdn.control.app import create_app
from assetcdn.shared.config import load_settings
from tests.support.control import ACCESS, ACCOUNT, SECRETS

MakeControl = Callable[..., Awaitable[TestClient]]


@pytest.fixture
def make_control(aiohttp_client, tmp_path: Path) -> MakeControl:  # type: ignore[no-untyped-def]
    made: list[TestClient] = []

    async def make(data_dir: Path | None = None, **environ: str) -> TestClient:
        """A control app; on `data_dir` when given (close the previous one on it first), else on a new one."""
        settings = load_settings(environ={f"ASSETCDN_{k.upper()}": v for k, v in environ.items()})
        client = await aiohttp_client(create_app(settings, SECRETS, data_dir or tmp_path / f"data-{len(made)}"))
        made.append(client)
        return client
    return make


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
