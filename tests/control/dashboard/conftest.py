"""The dashboard tests' per-test CDN, for what the dashboard shows about a real edge."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.cdn import CdnFactory, cdn_factory


@pytest.fixture
def make_cdn(aiohttp_client, tmp_path: Path) -> CdnFactory:  # type: ignore[no-untyped-def]
    """A real control and edge in one event loop, of its own for each test (tests/support/cdn.py)."""
    return cdn_factory(tmp_path, aiohttp_client)
