"""One SQLite connection per thread to the cache's ``cache.db`` (diskcache keeps its own private),
used by the tag index and the cross-worker purge log. Autocommit; waits on locks held by other workers."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

SQLITE_TIMEOUT_S = 60.0
# Pages of SQLite's cache per connection (the cache's connections are one per thread, several per process). A
# look-up or a write of a random key reads a leaf page no cache of this size holds anyway: it keeps the upper levels of
# the b-trees and the pages a statement is changing. 64 (256 KB) rather than 256: 4.3 MiB less for a one-worker edge
# holding 100,000 entries, with neither its fills nor its disk-tier reads slower (benchmarks/README.md).
SQLITE_CACHE_PAGES = 64


class ThreadLocalConnection:
    def __init__(self, database: Path) -> None:
        self.database = database
        self._local = threading.local()

    def get(self) -> sqlite3.Connection:
        con: sqlite3.Connection | None = getattr(self._local, "con", None)
        if con is None:
            con = sqlite3.connect(self.database, timeout=SQLITE_TIMEOUT_S, isolation_level=None,
                                  check_same_thread=False)
            con.execute(f"PRAGMA cache_size = {SQLITE_CACHE_PAGES}")  # one per thread: see the constant
            self._local.con = con
        return con

    def close(self) -> None:
        """Close this thread's connection (the one the owner opened and used)."""
        con: sqlite3.Connection | None = getattr(self._local, "con", None)
        if con is not None:
            con.close()
            self._local.con = None
