"""The hit path tests' per-test CDN: a real control app and a real edge app, the edge listening through its hit
site and through aiohttp's own site (tests/support/hit_cdn.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web

from tests.support.hit_cdn import HitCdn, HitCdnFactory, start_hit_cdn


@pytest.fixture
async def make_hit_cdn(aiohttp_client, tmp_path: Path) -> AsyncIterator[HitCdnFactory]:  # type: ignore[no-untyped-def]
    """A CDN of its own for each test that changes settings, rules or what is stored."""
    runners: list[web.AppRunner] = []

    async def start(**env: str) -> HitCdn:
        return await start_hit_cdn(tmp_path, aiohttp_client, runners, env)

    yield start
    for runner in runners:
        await runner.cleanup()
