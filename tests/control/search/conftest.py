"""Control apps for the search tests: real git, real SQLite, the real packaged model."""

from __future__ import annotations

from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient

from assetcdn.control.app import create_app
from assetcdn.shared.config import load_settings
from tests.support.control import SECRETS, MakeControl


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
