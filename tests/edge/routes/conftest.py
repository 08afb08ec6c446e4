"""The edge route tests' CDNs: a real control app and a real edge app in one event loop, of its own for each
test (tests/support/cdn.py), and the pull-zone tests' CDN and scripted origin, one per module
(tests/support/origins.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from tests.support.cdn import CdnFactory, cdn_factory
from tests.support.origins import Pull, shared_pull_zone


@pytest.fixture
def make_cdn(aiohttp_client, tmp_path: Path) -> CdnFactory:  # type: ignore[no-untyped-def]
    """A CDN of its own for each test that changes settings, limits or process state."""
    return cdn_factory(tmp_path, aiohttp_client)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def pull(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Pull]:
    """One CDN with a pull zone and the origin it pulls from, for a module's tests (each uses paths of its own)."""
    async with shared_pull_zone(tmp_path_factory.mktemp("pull-zones")) as found:
        yield found


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def patient_pull(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Pull]:
    """`pull` whose edge waits 30 s for the origin's first byte: for tests whose origin holds its answer until their
    requests have all joined the one origin request, which a loaded machine may take longer than `pull`'s 1 s, and
    for tests whose subject is not that time but whose fills a loaded machine once delayed past it."""
    async with shared_pull_zone(tmp_path_factory.mktemp("patient-pull-zones"), first_byte_timeout_s="30") as found:
        yield found
