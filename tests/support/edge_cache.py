"""The edge cache's write-behind in tests: an executor whose batches run when the test says, and what the disk
tier holds under a key."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any

from assetcdn.edge.cache.store import EdgeCache

KB = 1024
MB = 1024 * KB
HEAD = ((":status", "200"), ("cache-control", "max-age=60"))


class HeldWriter(Executor):
    """An executor whose jobs run when the test says: what the cache does while a batch is still queued."""

    def __init__(self) -> None:
        self.jobs: list[Callable[[], Any]] = []

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        self.jobs.append(lambda: fn(*args, **kwargs))
        return Future()

    def run(self) -> None:
        jobs, self.jobs = self.jobs, []
        for job in jobs:
            job()


def on_disk(cache: EdgeCache, key: str) -> bytes | None:
    obj = cache.disk.get(key, load_limit=MB)
    return None if obj is None else obj.body
