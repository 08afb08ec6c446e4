"""An image worker process: the main loop the pool's workers run (assetcdn/edge/image_pool.py).

A worker loads Python, libvips and the pipeline once (PRELOAD, in the fork server before it forks),
reports READY, then runs jobs from its pipe one at a time until told to stop or the edge goes. A job
is a module-level function and its arguments (assetcdn/edge/transform/jobs.py); its answer is
("ok", result), ("refused", a LegacyError's fields) or ("failed", a traceback). When a job's last
argument is its source's bytes the worker keeps them (a bounded LRU, `KeptSources`) and, sent a job
without them, asks the pool for them (NEED_SOURCE) before it starts.
"""

from __future__ import annotations

import gc
import importlib
import os
import signal
import traceback
from collections import OrderedDict
from multiprocessing.connection import Connection
from typing import Any

from assetcdn.edge.heap import trim_heap
from assetcdn.edge.process_stats import rss_bytes, started_for
from assetcdn.shared.errors import LegacyError
from assetcdn.shared.process import die_with_parent

TRIM_ABOVE_BYTES = 64 * 1024 * 1024   # a worker this far above its size at start gives memory back
# Modules a worker imports before it reports ready, so no job pays for them.
PRELOAD = ("assetcdn.edge.transform.jobs", "assetcdn.edge.transform.steps", "assetcdn.edge.transform.placeholder_images")
# Called with the decoded-source cache's bound in bytes as a worker starts (module, function).
KEEP_DECODED = ("assetcdn.edge.transform.jobs", "keep_decoded_sources")
# A worker keeps the bytes of recent sources within this share of its decode cache's bound.
KEPT_SOURCES_SHARE = 4
NEED_SOURCE = "need-source"
READY = "ready"


def configure_libvips() -> None:
    """No libvips operation cache in a worker (no state between jobs; the edge cache keeps results).
    libvips is imported here, not with the module: the pool imports this module in the edge's own
    process, which runs no image work and so never loads it."""
    import pyvips  # noqa: PLC0415

    pyvips.cache_set_max(0)
    pyvips.cache_set_max_mem(0)


def release_memory() -> None:
    """Free what a job left in reference cycles and hand the freed heap back to the system (glibc
    keeps it otherwise). Costly: only worth it after a job that grew the process."""
    gc.collect()
    trim_heap()


def worker_main(conn: Connection, edge_pid: int, decoded_cache_bytes: int = 0, vips_threads: int = 0) -> None:
    """A worker process: run jobs from `conn` one at a time until told to stop or the edge goes."""
    die_with_parent()
    if not started_for(edge_pid):   # the edge or its fork server died before the death signal was armed
        return
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # Ctrl-C is for the edge, which stops us
    configure_libvips()
    if vips_threads:
        import pyvips  # noqa: PLC0415 (loaded by configure_libvips)

        pyvips.concurrency_set(vips_threads)
    for module in PRELOAD:
        importlib.import_module(module)
    module, function = KEEP_DECODED
    getattr(importlib.import_module(module), function)(decoded_cache_bytes)
    # The kept decodes are memory the worker means to hold: without counting them it would collect
    # and trim after every job, which costs more than a small job itself.
    kept_sources = KeptSources(decoded_cache_bytes // KEPT_SOURCES_SHARE)
    trim_above = rss_bytes(os.getpid()) + TRIM_ABOVE_BYTES + decoded_cache_bytes + kept_sources.max_bytes
    conn.send(READY)
    while True:
        try:
            message = conn.recv()
        except (EOFError, ConnectionError):   # the edge worker went (its end closed, or reset as it died)
            return
        except Exception:   # a job that cannot be unpickled here
            conn.send(("failed", traceback.format_exc()))
            continue
        if message is None:
            return
        work, args, source_id = message
        try:
            if source_id is not None:
                args = (*args[:-1], kept_sources.take(conn, source_id, args[-1]))
            reply: tuple[str, Any] = ("ok", work(*args))
        except LegacyError as exc:
            reply = ("refused", (exc.status, exc.error, exc.message, exc.extra, exc.headers))
        except Exception:
            reply = ("failed", traceback.format_exc())
        del message, work, args
        if rss_bytes(os.getpid()) > trim_above:
            release_memory()   # before answering: the pool reads this process's RSS when the answer arrives
        try:
            conn.send(reply)
        except ConnectionError:   # the edge worker went while the job ran: nobody to answer
            return
        del reply


class KeptSources:
    """The bytes of sources a worker ran jobs for, by content id, so the pool need not send them again."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._sources: OrderedDict[str, bytes] = OrderedDict()
        self._bytes = 0

    def take(self, conn: Connection, source_id: str, sent: bytes | None) -> bytes:
        """The job's source: as sent, else kept, else asked of the pool (which always answers with it)."""
        source = sent if sent is not None else self._sources.get(source_id)
        if source is None:
            conn.send((NEED_SOURCE, None))
            source = conn.recv()
        self._keep(source_id, source)
        return source

    def _keep(self, source_id: str, source: bytes) -> None:
        old = self._sources.pop(source_id, None)
        if old is not None:
            self._bytes -= len(old)
        if len(source) > self.max_bytes:
            return
        while self._sources and self._bytes + len(source) > self.max_bytes:
            _, evicted = self._sources.popitem(last=False)
            self._bytes -= len(evicted)
        self._sources[source_id] = source
        self._bytes += len(source)

