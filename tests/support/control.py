"""The control plane of the in-process tests: its secrets, the headers that carry them, a control app with a
zone for module-scoped fixtures (the per-test `control` and `zone` fixtures are in tests/control/conftest.py),
and the dashboard's own listener."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

from aiohttp import web
from aiohttp.test_utils import BaseTestServer, TestClient, TestServer

from assetcdn.control.app import create_app
from assetcdn.shared.cluster import FORWARDED_HEADER, sign_forwarded
from assetcdn.shared.config import load_settings
from assetcdn.shared.secrets import Secrets

SECRETS = Secrets(access_key="test-access-key", account_key="test-account-key", purge_key="test-purge-key",
                  analytics_key="test-analytics-key", signed_url_secret="test-signed-secret",
                  cluster_secret="test-cluster-secret", session_secret="test-session-secret",
                  metrics_key="test-metrics-key")
ACCESS = {"AccessKey": SECRETS.access_key}
ACCOUNT = {"AccountKey": SECRETS.account_key}
METRICS = {"Authorization": f"Bearer {SECRETS.metrics_key}"}  # /metrics and /api/health?deep=1

MakeControl = Callable[..., Awaitable[TestClient]]  # what a `make_control` fixture returns
SMALL_LIMIT = 1000  # the per-file limit (bytes) of the storage tests' `small_control`
# The control apps of tests that search nothing: with the sentence model on (the default), every upload of
# every test is embedded in the background. The search, chat and AI tests make their apps with it.
NO_MODEL = {"ASSETCDN_SEARCH_SEMANTIC": "false"}


def forwarded_for(address: str) -> dict[str, str]:
    """The headers of a call an edge forwards for the client at `address`: X-Forwarded-For, signed."""
    return {"X-Forwarded-For": address, FORWARDED_HEADER: sign_forwarded(SECRETS.cluster_secret, address)}


def restarted(data_dir: Path) -> TestClient:
    """A control plane over `data_dir`, as a start makes it (`start_server` it, `close` it)."""
    return TestClient(TestServer(create_app(load_settings(environ=NO_MODEL), SECRETS, data_dir)))


@contextlib.asynccontextmanager
async def control_with_zone(data_dir: Path) -> AsyncIterator[TestClient]:
    """A control plane with the zone `akande`, for a module-scoped fixture: the tests sharing it must change
    nothing (refusals), and each checks that itself where it could (the head commit, the commit count)."""
    client = restarted(data_dir)
    await client.start_server()
    try:
        resp = await client.post("/api/core/zones", json={"Name": "akande"}, headers=ACCOUNT)
        assert resp.status == 201, await resp.text()
        yield client
    finally:
        await client.close()


async def serve_dashboard(control_server: BaseTestServer, listener: socket.socket) -> None:
    """Control's second listener, the dashboard's own origin (`server.dashboard_port` must name the
    listener's port); it stops with the control server."""
    assert control_server.runner is not None
    await web.SockSite(control_server.runner, listener).start()


@contextlib.contextmanager
def write_lock_held(path: Path) -> Iterator[sqlite3.Connection]:
    """Another process's view: a connection of its own holding control.sqlite3's write lock; what it
    writes meanwhile is committed when the block ends."""
    other = sqlite3.connect(path, isolation_level=None, timeout=10)
    try:
        other.execute("BEGIN IMMEDIATE")
        yield other
        other.execute("COMMIT")
    finally:
        other.close()


@contextlib.asynccontextmanager
async def write_lock_taken(path: Path) -> AsyncIterator[sqlite3.Connection]:
    """`write_lock_held` for a test whose control app runs on the same event loop: the lock is asked for without
    waiting in SQLite (which would block the loop, and with it a transaction of control's own that holds the
    lock) and asked again after yielding to the loop, until it is free."""
    other = sqlite3.connect(path, isolation_level=None, timeout=0)
    try:
        while True:
            try:
                other.execute("BEGIN IMMEDIATE")
                break
            except sqlite3.OperationalError as error:
                if getattr(error, "sqlite_errorcode", None) != sqlite3.SQLITE_BUSY:
                    raise
            await asyncio.sleep(0.01)
        yield other
        other.execute("COMMIT")
    finally:
        other.close()
