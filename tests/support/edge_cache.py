"""The edge cache's write-behind in tests: an executor whose batches run when the test says, the real writer thread
held busy (`writer_held`), what the disk tier holds under a key, the segment files a crash leaves behind, and a body
file whose reads fail (`FailingRead`)."""

from __future__ import annotations

import errno
import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

from assetcdn.edge.cache.store import EdgeCache
from assetcdn.edge.node import EdgeNode

KB = 1024
MB = 1024 * KB
HEAD = ((":status", "200"), ("cache-control", "max-age=60"))


@contextmanager
def writer_held(node: EdgeNode) -> Iterator[None]:
    """The edge cache's one writer thread (`node.stores`) busy until the block ends: no disk batch is written
    meanwhile, as on a loaded disk (a fill's answer already answers from the memory tier)."""
    writing = threading.Event()
    node.stores.submit(writing.wait)
    try:
        yield
    finally:
        writing.set()


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


def leave_orphans(live: Path) -> tuple[Path, Path]:
    """Beside the segment `live` (made two hours old), two segment files no row names, as a crash between a batch's
    write and its commit leaves them: one two hours old, one new (another worker's batch about to commit)."""
    old, young = live.parent / ("0" * 30 + ".seg"), live.parent / ("1" * 30 + ".seg")
    for orphan in (old, young):
        orphan.write_bytes(b"left behind")
    hours_ago = time.time() - 2 * 3600
    for path in (old, live):
        os.utime(path, (hours_ago, hours_ago))
    return old, young


class FailingRead:
    """A body file whose reads fail after its first (a bad sector past it)."""

    def __init__(self, file: BinaryIO) -> None:
        self.file, self.reads = file, 0

    def __enter__(self) -> FailingRead:
        return self

    def __exit__(self, *exc: object) -> None:
        self.file.close()

    def fileno(self) -> int:
        return self.file.fileno()

    def seek(self, offset: int) -> int:
        return self.file.seek(offset)

    def read(self, size: int) -> bytes:
        self.reads += 1
        if self.reads > 1:
            raise OSError(errno.EIO, "Input/output error")
        return self.file.read(size)
