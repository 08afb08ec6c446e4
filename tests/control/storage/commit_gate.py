"""Hold the publisher's commit lock so that a test decides the order of concurrent mutations.

Everything a mutation checks before it queues for the lock has then been checked, and everything it
checks under the lock is checked after the mutations queued ahead of it committed: the interleaving
a race needs, made deterministic (no sleeps).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from aiohttp.test_utils import TestClient

from assetcdn.control.publishing.service import PUBLISHER

QUEUE_WAIT_S = 60  # bound on how long a request may take to reach the lock on a loaded machine


class CommitGate(asyncio.Lock):
    """An asyncio.Lock that counts the acquirers that had to queue."""

    def __init__(self) -> None:
        super().__init__()
        self.queued = 0
        self._changed = asyncio.Event()

    async def acquire(self) -> bool:
        if self.locked():
            self.queued += 1
            self._changed.set()
        return await super().acquire()  # joins the FIFO of waiters before it yields

    async def until_queued(self, count: int) -> None:
        async with asyncio.timeout(QUEUE_WAIT_S):
            while self.queued < count:
                self._changed.clear()
                await self._changed.wait()


@asynccontextmanager
async def held_commit_lock(client: TestClient) -> AsyncIterator[CommitGate]:
    """Replace the app's commit lock with a held gate; leaving the block releases it."""
    publisher = client.app[PUBLISHER]
    gate = CommitGate()
    publisher._lock = gate  # the one lock that orders commits (assetcdn/control/publishing/publisher.py)
    await gate.acquire()
    try:
        yield gate
    finally:
        gate.release()
