"""A real control plane app (real git repository, real SQLite file) on a pytest-aiohttp test client; its
secrets and headers are in tests/support/control.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient

from assetcdn.control.app import create_app
from assetcdn.shared.config import load_settings
from tests.support.control import ACCOUNT, NO_MODEL, SECRETS


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
async def control(aiohttp_client, data_dir: Path) -> TestClient:  # type: ignore[no-untyped-def]
    settings = load_settings(environ=NO_MODEL)
    app = create_app(settings, SECRETS, data_dir)
    return await aiohttp_client(app)


@pytest.fixture
async def zone(control: TestClient) -> str:
    resp = await control.post("/api/core/zones", json={"Name": "akande"}, headers=ACCOUNT)
    assert resp.status == 201, await resp.text()
    return "akande"
