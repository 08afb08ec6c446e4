"""Idle HTTP/2 connections on the edge's https port (a real `assetcdn up`, one worker): what each holds in memory
once it has fetched a large hit, the per-worker cap (`tls.h2_max_connections`, a refusal the client can read)
and the idle timeout (`tls.h2_idle_timeout_s`). The memory check is a size, never a time."""

from __future__ import annotations

import asyncio
import contextlib
import os
import struct
from collections.abc import Iterator

import pytest

from tests.edge.tls.client import TIMEOUT_S
from tests.edge.tls.flood import frame
from tests.edge.tls.idle import GOAWAY, IdleClients, open_idle, read_frame
from tests.support.https import ZONE, HttpsCdn, start_https_cdn, worker_rss

pytestmark = pytest.mark.integration

LARGE = "v1/idle/large.bin"   # a memory-tier body
LARGE_SIZE = 1024 * 1024
CONNECTIONS = 48
PER_CONNECTION_MAX = 256 * 1024  # resident bytes an idle connection may hold after a LARGE hit
CAP = 4


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpsCdn]:
    running = start_https_cdn(tmp_path_factory.mktemp("limited"), {
        "ASSETCDN_TLS_H2_MAX_CONNECTIONS": str(CAP), "ASSETCDN_TLS_H2_IDLE_TIMEOUT_S": "600"})
    try:
        yield running
    finally:
        running.cdn.stop()


@pytest.fixture(scope="module")
def roomy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpsCdn]:
    """An edge with the product's TLS handshake timeout (10 s, assetcdn/shared/default.toml), not the harness's 2 s
    (HANDSHAKE_TIMEOUT_S, for the tests of that timeout): this test opens 32 connections at once, and on a loaded
    machine one handshake may take longer than 2 s, which the edge rightly cuts (a reset while the test opens its
    connections, not a finding about memory)."""
    running = start_https_cdn(tmp_path_factory.mktemp("roomy"), {"ASSETCDN_TLS_HANDSHAKE_TIMEOUT_S": "10"})
    try:
        yield running
    finally:
        running.cdn.stop()


def test_idle_connections_that_fetched_a_large_hit_hold_little_memory(roomy: HttpsCdn) -> None:
    https_cdn = roomy
    # Windows as large as a browser's let the whole answer go at once; TLS would keep a buffer of its size.
    https_cdn.upload(LARGE, os.urandom(LARGE_SIZE))
    path = f"/{ZONE}/{LARGE}"

    async def held() -> int:
        (await open_idle(https_cdn.https_port, 1, path=path)).close()  # a hit from here on
        before = worker_rss(https_cdn)
        clients = await open_idle(https_cdn.https_port, CONNECTIONS, path=path)
        try:
            assert len(clients.writers) == CONNECTIONS
            return worker_rss(https_cdn) - before
        finally:
            clients.close()

    grown = asyncio.run(held())
    assert grown / CONNECTIONS < PER_CONNECTION_MAX, f"{grown / CONNECTIONS / 1024:.0f} KiB per idle connection"


async def closed_by_client(clients: IdleClients) -> None:
    """One connection ended by its client (GOAWAY), read until the server has closed it too."""
    writer, reader = clients.writers.pop(), clients.readers.pop()
    writer.write(frame(GOAWAY, struct.pack(">II", 0, 0)))
    with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
        while True:
            await asyncio.wait_for(read_frame(reader), TIMEOUT_S)
    writer.close()


def test_past_the_connection_cap_a_new_connection_is_refused_with_goaway_until_one_closes(limited: HttpsCdn) -> None:
    async def scenario() -> None:
        held = await open_idle(limited.https_port, CAP)
        assert len(held.writers) == CAP and not held.refused
        extra = await open_idle(limited.https_port, 1)
        try:
            assert extra.refused == 1 and extra.goaway_codes == [0]  # NO_ERROR, no stream taken: may try again
            await closed_by_client(held)
            again = await open_idle(limited.https_port, 1)
            assert len(again.writers) == 1, "a closed connection still counted against the cap"
            again.close()
        finally:
            held.close()
            extra.close()

    asyncio.run(scenario())


def test_an_idle_connection_is_closed_with_goaway_after_the_idle_timeout(tmp_path_factory: pytest.TempPathFactory) -> None:
    running = start_https_cdn(tmp_path_factory.mktemp("idle-timeout"), {
        "ASSETCDN_TLS_H2_IDLE_TIMEOUT_S": "1", "ASSETCDN_SERVER_HEADER_TIMEOUT_S": "120"})

    async def goaway_code() -> int | None:
        clients = await open_idle(running.https_port, 1)
        (writer,) = clients.writers
        reader = clients.readers[0]
        try:
            while True:
                kind, _, _, payload = await asyncio.wait_for(read_frame(reader), TIMEOUT_S)
                if kind == GOAWAY:
                    return int(struct.unpack(">II", payload[:8])[1])
        except asyncio.IncompleteReadError:
            return None
        finally:
            writer.close()

    try:
        assert asyncio.run(goaway_code()) == 0
    finally:
        running.cdn.stop()
