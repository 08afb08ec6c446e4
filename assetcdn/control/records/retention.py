"""Retention: stores that keep dated rows are pruned at start and then periodically.

Statistics and insights keep 90 days (GET /api/analytics reads at most 35 of them); the audit log
keeps 90 days; the request log ``[logs] retention_days`` (its count bound is kept on every write).
Each store's ``prune`` knows its own window.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

log = logging.getLogger(__name__)

PRUNE_INTERVAL_S = 3600.0
Prune = Callable[[], Awaitable[int]]


async def prune_forever(prunes: Sequence[tuple[str, Prune]], interval_s: float = PRUNE_INTERVAL_S) -> None:
    """Run every prune now and then every ``interval_s``; a failing prune is logged and retried next time."""
    while True:
        for name, prune in prunes:
            try:
                removed = await prune()
            except Exception:
                log.exception("pruning %s failed", name)
            else:
                if removed:
                    log.info("pruned %d expired %s rows", removed, name)
        await asyncio.sleep(interval_s)


@contextlib.asynccontextmanager
async def pruning(prunes: Sequence[tuple[str, Prune]]) -> AsyncIterator[None]:
    """`prune_forever` in the background while the context is open (a package's cleanup context)."""
    task = asyncio.create_task(prune_forever(prunes))
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
