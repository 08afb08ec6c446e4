"""Tells every worker process of a node about purges made by any of them.

The memory tier lives in each worker; a purge pushed by control reaches only the one worker
whose socket (SO_REUSEPORT) accepted it. That worker appends the purge to ``EdgePurge`` (a
table in the disk tier's ``cache.db``) and raises a sequence number in a small mmap'd file.
Every worker compares that number with the last one it applied on each lookup (one integer
read from shared memory, no system call) and replays newer purges on its memory tier.
"""

from __future__ import annotations

import fcntl
import mmap
import os
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from assetcdn.edge.cache.sqlite_conn import ThreadLocalConnection

PurgeKind = Literal["keys", "tags", "prefix", "all"]
SEQUENCE_FILE = "edge-purge.seq"
# Rows kept for workers that are behind; a worker further behind clears its memory tier.
KEEP_ROWS = 10_000

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS EdgePurge ("
    " seq INTEGER PRIMARY KEY AUTOINCREMENT, kind TEXT NOT NULL, value TEXT NOT NULL)"
)


@dataclass(frozen=True, slots=True)
class Purge:
    kind: PurgeKind
    value: str  # a key, a tag, a tag prefix, or "" for "all"


class PurgeLog:
    def __init__(self, database: Path, directory: Path) -> None:
        self._database = database
        self._connection = ThreadLocalConnection(self._database)
        self._sql().execute(_SCHEMA)
        fd = os.open(directory / SEQUENCE_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if os.fstat(fd).st_size < 8:
                os.ftruncate(fd, 8)
            self._map = mmap.mmap(fd, 8)
        finally:
            os.close(fd)
        self._lock_path = directory / SEQUENCE_FILE
        self._published = memoryview(self._map).cast("Q")
        self._applied = self._published[0]

    def pending(self) -> bool:
        """Whether another worker (or this one) published purges not yet applied here."""
        return self._published[0] != self._applied

    def record(self, kind: PurgeKind, values: Iterable[str]) -> None:
        """Append purges and publish their sequence number to every worker."""
        rows = [(kind, value) for value in values] if kind != "all" else [("all", "")]
        if not rows:
            return
        con = self._sql()
        con.execute("BEGIN IMMEDIATE")
        try:
            con.executemany("INSERT INTO EdgePurge (kind, value) VALUES (?, ?)", rows)
            (last,) = con.execute("SELECT MAX(seq) FROM EdgePurge").fetchone()
            con.execute("DELETE FROM EdgePurge WHERE seq <= ?", (last - KEEP_ROWS,))
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
        with open(self._lock_path, "rb") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                if self._published[0] < last:
                    self._published[0] = last
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def mark(self) -> int:
        """Where the log stands: the last purge published (one shared-memory integer read). A purge published later
        has a higher sequence number, so ``names_since`` of this mark finds it."""
        return int(self._published[0])

    def names_since(self, mark: int, key: str, tags: Iterable[str]) -> bool:
        """Whether a purge published since `mark` names the entry under `key` with `tags` (its key, one of its
        tags or a prefix of one, or everything); also True when the log no longer holds all of them."""
        if self._published[0] == mark:  # none since: no query
            return False
        rows = self._sql().execute("SELECT kind, value FROM EdgePurge WHERE seq > ?", (mark,)).fetchall()
        (oldest,) = self._sql().execute("SELECT MIN(seq) FROM EdgePurge").fetchone()
        if oldest is None or oldest > mark + 1:
            return True
        tag_set = set(tags)
        for kind, value in rows:
            if (kind == "all" or (kind == "keys" and value == key) or (kind == "tags" and value in tag_set)
                    or (kind == "prefix" and any(tag.startswith(value) for tag in tag_set))):
                return True
        return False

    def take_pending(self) -> list[Purge]:
        """Purges published since the last call; one ``all`` purge if this worker fell behind
        further than the log keeps."""
        published = self._published[0]
        if published == self._applied:
            return []
        rows = (
            self._sql()
            .execute(
                "SELECT seq, kind, value FROM EdgePurge WHERE seq > ? ORDER BY seq",
                (self._applied,),
            )
            .fetchall()
        )
        (oldest,) = self._sql().execute("SELECT MIN(seq) FROM EdgePurge").fetchone()
        behind = oldest is not None and oldest > self._applied + 1
        self._applied = max([published, *(row[0] for row in rows)])
        if behind:
            return [Purge("all", "")]
        return [Purge(kind, value) for _, kind, value in rows]

    def close(self) -> None:
        self._published.release()
        self._map.close()
        self._connection.close()

    def close_connection(self) -> None:
        """Close the calling thread's connection (a thread that is done with the log)."""
        self._connection.close()

    def _sql(self) -> sqlite3.Connection:
        return self._connection.get()
