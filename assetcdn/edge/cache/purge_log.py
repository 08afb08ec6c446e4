"""Tells every worker process of a node about purges made by any of them.

The memory tier lives in each worker; a purge pushed by control reaches only the one worker
whose socket (SO_REUSEPORT) accepted it. That worker appends the purge to ``EdgePurge`` (a
table in the disk tier's ``cache.db``) and raises a sequence number in a small mmap'd file.
Every worker compares that number with the last one it applied on each lookup (one integer
read from shared memory, no system call) and replays newer purges on its memory tier.

The log also tells the workers which keys one of them stored anew in the shared disk tier (a fill, a 304's
refreshed head: ``note_stored``), so that each drops an older copy its memory tier holds rather than go on
serving it beside the newer response the node stored. Those notices are published in a second number of the
file: a fill's purge mark (``mark``) counts purges only, so a notice never keeps a fill out of the cache.

A third number is the manifest generation whose purges the node's cache has taken or is taking
(``publish_generation``): a worker that has not learnt that generation itself yet (its push is still on its way,
or it has not handed its own purge back) asks a pull zone URL's shield with it all the same, so that a shield that
has not applied those purges declines instead of handing back what they removed here.
"""

from __future__ import annotations

import fcntl
import logging
import mmap
import os
import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from assetcdn.edge.cache.sqlite_conn import ThreadLocalConnection
from assetcdn.shared.logs import LinePerInterval

PurgeKind = Literal["keys", "tags", "prefix", "all", "within"]
# A notice, not a purge: ``stored`` names a key and when it was stored (``note_stored``).
LogKind = PurgeKind | Literal["stored"]
SEQUENCE_FILE = "edge-purge.seq"
SEQUENCE_SIZE = 24  # three 8-byte numbers: purges published, notices published, the purges' manifest generation
# Rows kept for workers that are behind; a worker further behind clears its memory tier.
KEEP_ROWS = 10_000
log = logging.getLogger(__name__)
# A log that cannot be read (`take_pending`): a line per interval, not one per request.
UNREAD = LinePerInterval(log, 60.0)

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS EdgePurge ("
    " seq INTEGER PRIMARY KEY AUTOINCREMENT, kind TEXT NOT NULL, value TEXT NOT NULL)"
)
_INSERT_STORED = "INSERT INTO EdgeStored (key, stored_at) VALUES (?, ?)"
# The notices (``note_stored``), in a table and a sequence of their own: however many fills they count, they never
# push out of ``EdgePurge`` a purge that a fill under way must still find (``names_since``).
_STORED_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS EdgeStored ("
    " seq INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT NOT NULL, stored_at REAL NOT NULL)"
)


@dataclass(frozen=True, slots=True)
class Purge:
    kind: LogKind
    value: str  # a key, a tag, a tag prefix, "" for "all", or the key stored anew for "stored"
    stored_at: float = 0.0  # "stored": when it was stored (a copy stored before goes)
    within: str = ""  # "within": the tag the entries `value` names must carry too (a zone's)


def within_value(tag: str, within: str) -> str:
    """The row of a ``within`` purge (the entries carrying `tag` and `within`): the two tags, separated by a space,
    which no tag holds (an origin's are separated by spaces, a purge's are letters, digits and hyphens)."""
    return f"{tag} {within}"


def _read_within(value: str) -> tuple[str, str]:
    tag, _, within = value.partition(" ")
    return tag, within


def _logged(kind: LogKind, value: str) -> Purge:
    """A row of ``EdgePurge`` as the purge it is."""
    if kind == "within":
        tag, within = _read_within(value)
        return Purge(kind, tag, within=within)
    return Purge(kind, value)


class PurgeLog:
    def __init__(self, database: Path, directory: Path) -> None:
        self._database = database
        self._connection = ThreadLocalConnection(self._database)
        self._sql().execute(_SCHEMA)
        self._sql().execute(_STORED_SCHEMA)
        fd = os.open(directory / SEQUENCE_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if os.fstat(fd).st_size < SEQUENCE_SIZE:  # the purges' number, the notices', the purges' generation
                os.ftruncate(fd, SEQUENCE_SIZE)
            self._map = mmap.mmap(fd, SEQUENCE_SIZE)
        finally:
            os.close(fd)
        self._lock_path = directory / SEQUENCE_FILE
        self._published = memoryview(self._map).cast("Q")
        self._continue_sequences()
        self._applied = self._published[0]
        self._noted = self._published[1]  # the last notice applied here

    def _continue_sequences(self) -> None:
        """Number the log's rows on from what the shared file published: a database made anew beside an older file
        (``cache.db`` removed, or lost to a damaged disk, while the edge was down) would number its purges from 1,
        below what the file holds, and ``_publish`` would never raise it to them: no other worker would replay
        them. Nothing is written when the database's numbers are as high already (every start but such a one)."""
        con = self._sql()
        due = [(table, int(self._published[slot])) for slot, table in ((0, "EdgePurge"), (1, "EdgeStored"))]
        if all(self._sequence(con, table) >= published for table, published in due):
            return
        con.execute("BEGIN IMMEDIATE")
        try:
            for table, published in due:
                held = self._sequence(con, table)
                if held < published:  # AUTOINCREMENT numbers on from sqlite_sequence's row of the table
                    con.execute("DELETE FROM sqlite_sequence WHERE name = ?", (table,))
                    con.execute("INSERT INTO sqlite_sequence (name, seq) VALUES (?, ?)", (table, published))
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise

    @staticmethod
    def _sequence(con: sqlite3.Connection, table: str) -> int:
        """The last sequence number `table` gave (its rows' seq: AUTOINCREMENT never gives one again)."""
        row = con.execute("SELECT seq FROM sqlite_sequence WHERE name = ?", (table,)).fetchone()
        return 0 if row is None else int(row[0])

    def pending(self) -> bool:
        """Whether another worker (or this one) published purges or notices not yet applied here."""
        published = self._published
        return published[0] != self._applied or published[1] != self._noted

    def record(self, kind: PurgeKind, values: Iterable[str]) -> None:
        """Append purges and publish their sequence number to every worker (a ``within`` purge's values are
        ``within_value``'s)."""
        rows = [(kind, value) for value in values] if kind != "all" else [("all", "")]
        self._append("INSERT INTO EdgePurge (kind, value) VALUES (?, ?)", rows, "EdgePurge", 0)

    def note_stored(self, entries: Iterable[tuple[str, float]]) -> None:
        """Tell every worker that the entries (key, stored-at) are in the disk tier now: each drops a copy it holds
        that was stored before. Not a purge: a purge mark (``mark``) does not move."""
        self._append(_INSERT_STORED, list(entries), "EdgeStored", 1)

    def stage_stored(self, con: sqlite3.Connection, entries: Sequence[tuple[str, float]]) -> int:
        """``note_stored`` inside the write transaction (on `con`, a connection to the same database) that stores
        the entries: the notices commit with them, in no transaction of their own. Returns the last one's sequence
        number, for ``publish_stored`` once that transaction committed."""
        return self._insert(con, _INSERT_STORED, entries, "EdgeStored")

    def publish_stored(self, last: int) -> None:
        """Publish the notices ``stage_stored`` added, up to `last`, once their transaction committed."""
        self._publish(1, last)

    def _append(self, insert: str, rows: Sequence[tuple[str, str | float]], table: str, slot: int) -> None:
        """Append `rows` to `table` (`insert`), keeping its last ``KEEP_ROWS``, and publish their sequence number in
        `slot` of the shared file (0: purges, 1: notices)."""
        if not rows:
            return
        con = self._sql()
        con.execute("BEGIN IMMEDIATE")
        try:
            last = self._insert(con, insert, rows, table)
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
        self._publish(slot, last)

    @staticmethod
    def _insert(con: sqlite3.Connection, insert: str, rows: Sequence[tuple[str, str | float]], table: str) -> int:
        """Inside a write transaction: `rows` appended to `table`, its last ``KEEP_ROWS`` kept; the last sequence
        number."""
        con.executemany(insert, rows)
        (last,) = con.execute(f"SELECT MAX(seq) FROM {table}").fetchone()
        con.execute(f"DELETE FROM {table} WHERE seq <= ?", (last - KEEP_ROWS,))
        return int(last)

    def _publish(self, slot: int, last: int) -> None:
        """Raise `slot` of the shared file (0: purges, 1: notices) to `last`, under the file's lock."""
        with open(self._lock_path, "rb") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                if self._published[slot] < last:
                    self._published[slot] = last
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def publish_generation(self, generation: int) -> None:
        """Publish to every worker that the node's cache takes the purges of the manifest generations up to
        `generation`: called before they run, so that no worker asks a shield below it once they have begun. Set
        as it is (lower too: control's generations started again, ``EdgeCache.purge_generations``' restart)."""
        with open(self._lock_path, "rb") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                self._published[2] = generation
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def generation(self) -> int:
        """The manifest generation ``publish_generation`` last published (one shared-memory integer read)."""
        return int(self._published[2])

    def mark(self) -> int:
        """Where the log stands: the last purge published (one shared-memory integer read; notices are not
        counted). A purge published later has a higher sequence number, so ``names_since`` of this mark finds it."""
        return int(self._published[0])

    def names_since(self, mark: int, key: str, tags: Iterable[str]) -> bool:
        """Whether a purge published since `mark` names the entry under `key` with `tags` (its key, one of its
        tags or a prefix of one, one of its tags within another of them, or everything); also True when the log no
        longer holds all of them."""
        if self._published[0] == mark:  # none since: no query
            return False
        rows = self._sql().execute("SELECT kind, value FROM EdgePurge WHERE seq > ?", (mark,)).fetchall()
        (oldest,) = self._sql().execute("SELECT MIN(seq) FROM EdgePurge").fetchone()
        if oldest is None or oldest > mark + 1:
            return True
        tag_set = set(tags)
        for kind, value in rows:
            if (kind == "all" or (kind == "keys" and value == key) or (kind == "tags" and value in tag_set)
                    or (kind == "prefix" and any(tag.startswith(value) for tag in tag_set))
                    or (kind == "within" and tag_set.issuperset(_read_within(value)))):
                return True
        return False

    def take_pending(self) -> list[Purge]:
        """Purges, then notices, published since the last call; one ``all`` purge if this worker fell behind
        further than the log keeps, or when the log cannot be read (its database failing: which purges were
        published is not known, and a worker that went on without them would serve what they removed)."""
        try:
            return self._take_pending()
        except sqlite3.Error as exc:
            self._applied, self._noted = self._published[0], self._published[1]
            UNREAD.log(logging.ERROR, "purges", "edge cache: the purges other workers published could not be read "
                       "(%s); this worker's memory tier is emptied instead", exc)
            return [Purge("all", "")]

    def _take_pending(self) -> list[Purge]:
        published, noted = self._published[0], self._published[1]
        taken: list[Purge] = []
        behind = False
        if published != self._applied:
            rows = self._sql().execute("SELECT seq, kind, value FROM EdgePurge WHERE seq > ? ORDER BY seq",
                                       (self._applied,)).fetchall()
            (oldest,) = self._sql().execute("SELECT MIN(seq) FROM EdgePurge").fetchone()
            behind = oldest is not None and oldest > self._applied + 1
            self._applied = max([published, *(row[0] for row in rows)])
            taken += [_logged(kind, value) for _, kind, value in rows]
        if noted != self._noted:
            notices = self._sql().execute("SELECT seq, key, stored_at FROM EdgeStored WHERE seq > ? ORDER BY seq",
                                          (self._noted,)).fetchall()
            (oldest,) = self._sql().execute("SELECT MIN(seq) FROM EdgeStored").fetchone()
            behind = behind or (oldest is not None and oldest > self._noted + 1)
            self._noted = max([noted, *(row[0] for row in notices)])
            taken += [Purge("stored", key, stored_at) for _, key, stored_at in notices]
        if behind:
            return [Purge("all", "")]
        return taken

    def close(self) -> None:
        self._published.release()
        self._map.close()
        self._connection.close()

    def close_connection(self) -> None:
        """Close the calling thread's connection (a thread that is done with the log)."""
        self._connection.close()

    def _sql(self) -> sqlite3.Connection:
        return self._connection.get()
