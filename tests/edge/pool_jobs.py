"""Jobs for the image pool tests: module-level functions, so a worker process can import them."""

from __future__ import annotations

import os
import time

import pyvips

from assetcdn.edge.transform.jobs import DECODED_SOURCES
from assetcdn.shared.errors import LegacyError


def worker_pid(*_args: object) -> int:
    return os.getpid()


def wait_then_pid(path: str) -> int:
    """Wait (bounded) until the test creates `path`: a job held running as long as the test needs."""
    deadline = time.monotonic() + 30
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.01)
    return os.getpid()


def never_ends() -> None:
    """Computes forever: the CPU time the budget counts."""
    while True:
        pass


def sleep_then_pid(seconds: float) -> int:
    """Waits without computing, as a job does while other programs hold the cores."""
    time.sleep(seconds)
    return os.getpid()


def hold_memory(megabytes: int) -> int:
    block = b"x" * (megabytes * 1024 * 1024)   # written, so resident
    time.sleep(30)
    return len(block)


def refuse(status: int, message: str) -> None:
    raise LegacyError(status, message, headers={"Retry-After": "7"})


def crash() -> None:
    os._exit(3)


def break_down() -> None:
    raise ZeroDivisionError("a bug in a job")


def kept_decodes() -> tuple[int, int, int, int]:
    """What this worker's decoded-source cache holds: (bound, entries, hits, misses)."""
    return (DECODED_SOURCES.max_bytes, len(DECODED_SOURCES), DECODED_SOURCES.hits, DECODED_SOURCES.misses)


def vips_threads() -> int:
    return int(pyvips.concurrency_get())


def source_length(source: bytes) -> int:
    """A job on a source: what reached the worker."""
    return len(source)
