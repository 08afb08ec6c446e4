"""A control plane with webhooks on (development setting: loopback targets, tests/support/webhooks.py), a
receiver on 127.0.0.1 and a resolver the test controls."""

from __future__ import annotations

from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient

from tests.control.webhooks.receiver import FakeResolver, Receiver
from tests.support.webhooks import make_app


@pytest.fixture
def resolver() -> FakeResolver:
    found = FakeResolver()
    found.names["receiver.test"] = ["127.0.0.1"]
    return found


@pytest.fixture
async def receiver(aiohttp_server) -> Receiver:  # type: ignore[no-untyped-def]
    found = Receiver()
    server = await aiohttp_server(found.app())
    found.port = server.port
    yield found
    for gate in found.gates.values():  # let held requests finish before the server closes
        gate.set()


@pytest.fixture
async def control(aiohttp_client, data_dir: Path, resolver: FakeResolver) -> TestClient:  # type: ignore[no-untyped-def]
    return await aiohttp_client(make_app(data_dir, resolver))


