"""The C heap of an edge process: handing the memory freed in it back to the system.

glibc's malloc keeps what is freed in its free lists, among live allocations, so a process stays at its peak
after a burst (a wave of TLS clients, a backlog of cache writes) is gone; ``malloc_trim`` returns the free pages
to the system. It walks the whole heap (a few ms for a hundred MB), so callers run it after a burst, not per
request. Elsewhere than glibc there is nothing to call and nothing is done.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Callable
from functools import cache


@cache
def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):  # not glibc
        return None


def can_trim() -> bool:
    """Whether this process's C library can give freed heap memory back (glibc)."""
    return _malloc_trim() is not None


def trim_heap() -> None:
    """Give the heap's free pages back to the system (glibc's ``malloc_trim(0)``; ctypes releases the GIL for it)."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
