"""The AI tests' control plane, with [ai_vision] settings of their own; the photographs they upload are in
tests/support/photos.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient

from assetcdn.control.app import create_app
from assetcdn.shared.config import load_settings
from tests.support.control import NO_MODEL, SECRETS, MakeControl


@pytest.fixture
async def make_control(aiohttp_client, data_dir: Path) -> MakeControl:  # type: ignore[no-untyped-def]
    """A control plane with [ai_vision] (or other) settings from ASSETCDN_* variables, and zone 'akande'."""
    async def make(**environ: str) -> TestClient:
        app = create_app(load_settings(environ={**NO_MODEL, **environ}), SECRETS, data_dir)
        client = await aiohttp_client(app)
        resp = await client.post("/api/core/zones", json={"Name": "akande"}, headers={"AccountKey": SECRETS.account_key})
        assert resp.status == 201, await resp.text()
        return client
    return make
