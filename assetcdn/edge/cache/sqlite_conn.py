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
# Where SQLite keeps its temporary data, above all the statement journal: a statement that writes many rows inside a
# transaction (the batch's upsert of ROWS_PER_UPSERT rows, a cull, a purge) copies each page it changes there first,
# so that it can be undone alone. In a file (SQLite's default, in /var/tmp) that was a write system call per page,
# more of them than the write-ahead log's; in memory it is a copy, freed when the statement ends.
SQLITE_TEMP_STORE_MEMORY = 2
# Pages the write-ahead log grows to before a commit copies them into the database (a checkpoint: a write per page
# and an fdatasync). SQLite's default is 1,000 (4 MB): the writer's batches, each touching index pages all over
# the key index, checkpointed every few batches, writing the same pages again and again. At 8,192 (32 MB of log
# on disk) a page changed by several batches in between is copied once.
SQLITE_WAL_PAGES = 8192


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
            # As diskcache's own connections to the same file (assetcdn/edge/cache/disk.py): a commit here (a purge,
            # a head's update) checkpoints at the same size of log, and its statements' journals stay in memory.
            con.execute(f"PRAGMA temp_store = {SQLITE_TEMP_STORE_MEMORY}")
            con.execute(f"PRAGMA wal_autocheckpoint = {SQLITE_WAL_PAGES}")
            self._local.con = con
        return con

    def close(self) -> None:
        """Close this thread's connection (the one the owner opened and used)."""
        con: sqlite3.Connection | None = getattr(self._local, "con", None)
        if con is not None:
            con.close()
            self._local.con = None
