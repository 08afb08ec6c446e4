"""Fixtures of the storage tests: a control plane with a small per-file limit."""

from __future__ import annotations

from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient

from assetcdn.control.app import create_app
from assetcdn.shared.config import load_settings
from tests.support.control import ACCOUNT, NO_MODEL, SECRETS, SMALL_LIMIT


@pytest.fixture
async def small_control(aiohttp_client, data_dir: Path) -> TestClient:  # type: ignore[no-untyped-def]
    """A control plane whose per-file limit is SMALL_LIMIT bytes, with zone 'akande'."""
    settings = load_settings(environ={"ASSETCDN_CONTROL_MAX_UPLOAD_BYTES": str(SMALL_LIMIT), **NO_MODEL})
    client = await aiohttp_client(create_app(settings, SECRETS, data_dir))
    resp = await client.post("/api/core/zones", json={"Name": "akande"}, headers=ACCOUNT)
    assert resp.status == 201
    return client
