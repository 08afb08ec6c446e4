"""The edge route tests' per-test CDN: a real control app and a real edge app in one event loop
(tests/support/cdn.py), with real images made with pyvips (tests/support/images.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.cdn import CdnFactory, cdn_factory


@pytest.fixture
def make_cdn(aiohttp_client, tmp_path: Path) -> CdnFactory:  # type: ignore[no-untyped-def]
    """A CDN of its own for each test that changes settings, limits or process state."""
    return cdn_factory(tmp_path, aiohttp_client)
