"""Fixtures of the HTTPS tests: an in-process control and edge (`make_cdn`, tests/support/cdn.py), and a real
`assetcdn up` with an https port whose operator certificates come from a test CA (`https_cdn`,
tests/support/https.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cdn import CdnFactory, cdn_factory
from tests.support.https import HttpsCdn, start_https_cdn


@pytest.fixture
def make_cdn(aiohttp_client, tmp_path: Path) -> CdnFactory:  # type: ignore[no-untyped-def]
    """A real control and edge in one event loop, of its own for each test (tests/support/cdn.py)."""
    return cdn_factory(tmp_path, aiohttp_client)


@pytest.fixture(scope="package")
def https_cdn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpsCdn]:
    cdn = start_https_cdn(tmp_path_factory.mktemp("https"))
    try:
        yield cdn
    finally:
        cdn.cdn.stop()
