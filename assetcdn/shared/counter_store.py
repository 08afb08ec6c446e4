"""Every limit the CDN enforces is counted here: one interface, `CounterStore`, with fixed windows.

A limit (`Limit`) allows `limit` hits per window: a number of seconds from a subject's first hit
(per-IP limits such as signed URLs, 300 per minute) or a calendar period in UTC (transforms per
month, purges per day). `hit` counts one and says whether it was allowed; a refused hit is not
counted. `refund` gives one back (a purge that was not recorded, a transform that failed, a
successful sign-in) to the window it was taken from: never to a later one (a refund after midnight,
or after a client's window ended, credits nothing). Every backend does this atomically, so concurrent callers in any number of
processes never pass a limit together:

- `SqliteCounterStore` ("embedded", the default): one SQLite file every process on the machine
  opens (control, every edge, every worker), `<data_dir>/counters.sqlite3`; each hit is one
  `BEGIN IMMEDIATE` transaction (the write lock is taken before the count is read) under a busy
  timeout, in a file of its own, so other SQLite writers never make a counter write fail.
- `RedisCounterStore` ("redis"): one Lua script per hit (read, start the window with its expiry,
  increment), for edges on several machines.
- `MemoryCounterStore`: this process only; the fallback below, and tests.

`Counters` is what routes use: it names keys, switches off limits set to 0 and, when the store
cannot be reached (or answers an error), counts in this process's memory instead, continuing from
the last counts the store gave this process, and tries the store again every `retry_s`. While it
does, health reports the counters degraded. Hits counted locally meanwhile are not added to the
shared count when it returns.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import math
import sqlite3
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")
Period = Literal["day", "month"]
MAX_LOCAL_KEYS = 100_000  # windows the in-process store keeps; past this the oldest is forgotten early
IPV6_CLIENT_PREFIX = 64   # one IPv6 client usually holds a whole /64
PRUNE_EVERY_S = 60.0      # how often a process deletes ended windows from the embedded store
REDIS_CONNECTIONS = 8     # per process
RECHECK_AFTER_S = 5.0     # health asks the store itself when nothing reached it for this long
# A refund goes to the window that ends at the taken decision's reset_at, give or take this: a store's
# own end differs from the one reported (a period's is set to midnight exactly) by milliseconds.
SAME_WINDOW_S = 1.0


class CounterStoreUnavailable(Exception):
    """The store could not be reached or did not answer in time; the message names the cause."""


@dataclass(frozen=True, slots=True)
class Decision:
    allowed: bool
    limit: int         # 0 when the limit is switched off
    remaining: int     # hits left in this window after this one
    reset_at: float    # Unix time the window ends
    decided_at: float  # Unix time of the decision (the store's clock)
    key: str = ""      # the window's key in the store (set by Counters): where a refund goes

    def retry_after_s(self) -> int:
        """Whole seconds from the decision until the window ends (at least 1): a Retry-After value."""
        return max(1, math.ceil(self.reset_at - self.decided_at))

    def headers(self) -> dict[str, str]:
        """X-RateLimit-Limit, -Remaining and -Reset (Unix seconds); none for a limit switched off."""
        if not self.limit:
            return {}
        return {"X-RateLimit-Limit": str(self.limit), "X-RateLimit-Remaining": str(self.remaining),
                "X-RateLimit-Reset": str(math.ceil(self.reset_at))}

    def refusal_headers(self) -> dict[str, str]:
        """The headers of a 429: the limit's, and Retry-After."""
        return {**self.headers(), "Retry-After": str(self.retry_after_s())}


class CounterStore(Protocol):
    backend: str

    async def hit(self, key: str, limit: int, window_s: float) -> Decision:
        """Count one hit under `key` if fewer than `limit` are counted in its window (which starts,
        `window_s` long, at the first hit); a refused hit is not counted."""
        ...

    async def peek(self, key: str, limit: int, window_s: float) -> Decision:
        """The window of `key` as it stands, counting nothing (`allowed`: would one more pass)."""
        ...

    async def refund(self, key: str, window_end: float) -> None:
        """Give back one hit counted under `key` in its current window (never below 0), if that window
        is the one that ended at `window_end` (Unix time; later windows end later)."""
        ...

    async def ping(self) -> None:
        """Raise CounterStoreUnavailable unless the store answers."""
        ...

    async def close(self) -> None:
        ...


def _decision(allowed: bool, limit: int, used: int, reset_at: float, now: float) -> Decision:
    return Decision(allowed, limit, max(limit - used, 0), reset_at, now)


# --- in this process ------------------------------------------------------------------------------

class MemoryCounterStore:
    """Windows in this process's memory, oldest first; ended windows and those past `max_keys` are dropped."""

    backend = "memory"

    def __init__(self, *, max_keys: int = MAX_LOCAL_KEYS, clock: Callable[[], float] = time.time) -> None:
        self._windows: OrderedDict[str, list[float]] = OrderedDict()  # key -> [count, reset_at]
        self._max_keys = max_keys
        self._clock = clock

    def _window(self, key: str, window_s: float, now: float) -> list[float]:
        window = self._windows.get(key)
        if window is None or window[1] <= now:
            window = [0, now + window_s]
            self._windows[key] = window
            self._windows.move_to_end(key)
            self._forget_old(now)
        return window

    def _forget_old(self, now: float) -> None:
        while self._windows:
            first = next(iter(self._windows.values()))
            if first[1] > now and len(self._windows) <= self._max_keys:
                return
            self._windows.popitem(last=False)

    async def hit(self, key: str, limit: int, window_s: float) -> Decision:
        return self.hit_now(key, limit, window_s)

    def hit_now(self, key: str, limit: int, window_s: float) -> Decision:
        now = self._clock()
        window = self._window(key, window_s, now)
        if window[0] >= limit:
            return _decision(False, limit, int(window[0]), window[1], now)
        window[0] += 1
        return _decision(True, limit, int(window[0]), window[1], now)

    async def peek(self, key: str, limit: int, window_s: float) -> Decision:
        now = self._clock()
        window = self._windows.get(key)
        used, reset_at = (0, now + window_s) if window is None or window[1] <= now else (int(window[0]), window[1])
        return _decision(used < limit, limit, used, reset_at, now)

    async def refund(self, key: str, window_end: float) -> None:
        window = self._windows.get(key)
        if window is not None and self._clock() < window[1] <= window_end + SAME_WINDOW_S and window[0] > 0:
            window[0] -= 1

    def seed(self, key: str, used: int, reset_at: float) -> None:
        """Remember what the shared store counted, so a fallback continues from there."""
        if key in self._windows:
            self._windows[key][:] = [used, reset_at]
            return
        self._windows[key] = [used, reset_at]
        self._forget_old(self._clock())

    async def ping(self) -> None:
        return None

    async def close(self) -> None:
        self._windows.clear()


# --- one machine: a SQLite file every process opens -----------------------------------------------

_SCHEMA = """
CREATE TABLE IF NOT EXISTS counters (
    key TEXT PRIMARY KEY,
    count INTEGER NOT NULL,
    reset_at REAL NOT NULL      -- Unix time the window ends
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS counters_by_reset ON counters (reset_at);
"""


def _switch_to_wal(db: sqlite3.Connection, timeout_s: float) -> None:
    """Put the file in WAL mode (it stays so). Connections switching a new file at the same moment deadlock
    on the lock upgrade, and SQLite then answers one of them "database is locked" at once, without waiting
    out the busy timeout: that happens when `assetcdn up` starts control and the edges on a new data
    directory. The other connection's switch takes milliseconds, so try again until the busy timeout."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            db.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if getattr(exc, "sqlite_errorcode", None) != sqlite3.SQLITE_BUSY or time.monotonic() >= deadline:
                raise
        time.sleep(0.005)


class SqliteCounterStore:
    """The counters in one SQLite file, shared by every process that opens it (WAL mode).

    Each call runs on this store's own thread and connection, as one `BEGIN IMMEDIATE` transaction:
    the write lock is held from before the count is read until it is written, so hits from other
    processes wait (up to the busy timeout) instead of racing or failing."""

    backend = "embedded"

    def __init__(self, path: Path, *, busy_timeout_s: float = 5.0, clock: Callable[[], float] = time.time) -> None:
        self.path = Path(path)
        self._busy_ms = max(int(busy_timeout_s * 1000), 1)
        self._clock = clock
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="counters")
        self._db: sqlite3.Connection | None = None
        self._pruned_at = 0.0

    def _connect(self) -> sqlite3.Connection:
        if self._db is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(self.path, isolation_level=None, timeout=self._busy_ms / 1000,
                                 check_same_thread=False)
            try:
                db.execute(f"PRAGMA busy_timeout={self._busy_ms}")
                _switch_to_wal(db, self._busy_ms / 1000)
                db.execute("PRAGMA synchronous=NORMAL")  # WAL: a power cut may lose the last hits, never the file
                db.executescript(_SCHEMA)
            except BaseException:
                db.close()
                raise
            self._db = db
        return self._db

    async def _run(self, work: Callable[[sqlite3.Connection], T], *, write: bool = True) -> T:
        def call() -> T:
            db = self._connect()
            if not write:  # a read in autocommit mode: WAL readers never wait for the writer
                return work(db)
            db.execute("BEGIN IMMEDIATE")
            try:
                result = work(db)
                db.execute("COMMIT")
            except BaseException:
                # A failed COMMIT (disk full, I/O error) leaves the transaction open: end it, or every
                # later BEGIN fails; a connection that cannot even roll back is opened afresh.
                try:
                    if db.in_transaction:
                        db.execute("ROLLBACK")
                except sqlite3.Error:
                    self._db = None
                    db.close()
                raise
            return result
        try:
            return await asyncio.get_running_loop().run_in_executor(self._thread, call)
        except sqlite3.Error as exc:
            raise CounterStoreUnavailable(f"counter database: {exc}") from exc

    def _current(self, db: sqlite3.Connection, key: str, window_s: float, now: float) -> tuple[int, float]:
        row = db.execute("SELECT count, reset_at FROM counters WHERE key = ?", (key,)).fetchone()
        if row is None or row[1] <= now:
            return 0, now + window_s
        return int(row[0]), float(row[1])

    async def hit(self, key: str, limit: int, window_s: float) -> Decision:
        def work(db: sqlite3.Connection) -> Decision:
            now = self._clock()
            used, reset_at = self._current(db, key, window_s, now)
            if used >= limit:
                return _decision(False, limit, used, reset_at, now)
            db.execute("INSERT INTO counters (key, count, reset_at) VALUES (?, ?, ?) ON CONFLICT (key) "
                       "DO UPDATE SET count = excluded.count, reset_at = excluded.reset_at",
                       (key, used + 1, reset_at))
            if now - self._pruned_at > PRUNE_EVERY_S:
                self._pruned_at = now
                db.execute("DELETE FROM counters WHERE reset_at <= ?", (now,))
            return _decision(True, limit, used + 1, reset_at, now)
        return await self._run(work)

    async def peek(self, key: str, limit: int, window_s: float) -> Decision:
        def work(db: sqlite3.Connection) -> Decision:
            now = self._clock()
            used, reset_at = self._current(db, key, window_s, now)
            return _decision(used < limit, limit, used, reset_at, now)
        return await self._run(work, write=False)

    async def refund(self, key: str, window_end: float) -> None:
        def work(db: sqlite3.Connection) -> None:
            db.execute("UPDATE counters SET count = count - 1 WHERE key = ? AND count > 0 AND reset_at > ? "
                       "AND reset_at <= ?", (key, self._clock(), window_end + SAME_WINDOW_S))
        await self._run(work)

    async def ping(self) -> None:
        await self._run(lambda db: db.execute("SELECT 1").fetchone(), write=False)

    async def close(self) -> None:
        def shut() -> None:
            if self._db is not None:
                self._db.close()
                self._db = None
        with contextlib.suppress(RuntimeError):  # the loop may be closing already
            await asyncio.get_running_loop().run_in_executor(self._thread, shut)
        self._thread.shutdown(wait=True)


# --- several machines: Redis ------------------------------------------------------------------------

# KEYS[1]; ARGV: limit, window in ms. A key without an expiry (absent, or left by hand) starts a window.
_HIT = """
local count = tonumber(redis.call('GET', KEYS[1]) or '0')
local ttl = redis.call('PTTL', KEYS[1])
if ttl < 0 then
  count = 0
  ttl = tonumber(ARGV[2])
  redis.call('SET', KEYS[1], 0, 'PX', ttl)
end
if count >= tonumber(ARGV[1]) then
  return {0, count, ttl}
end
return {1, redis.call('INCR', KEYS[1]), ttl}
"""
_PEEK = """
local ttl = redis.call('PTTL', KEYS[1])
if ttl < 0 then return {0, -1} end
return {tonumber(redis.call('GET', KEYS[1]) or '0'), ttl}
"""
# ARGV[1]: the longest the taken window may still have to run, in ms (a later window runs longer).
_REFUND = """
local ttl = redis.call('PTTL', KEYS[1])
if ttl < 0 or ttl > tonumber(ARGV[1]) then return 0 end
if tonumber(redis.call('GET', KEYS[1]) or '0') > 0 then redis.call('DECR', KEYS[1]) end
return 0
"""


class RedisCounterStore:
    """The counters in Redis: each operation one Lua script, atomic on the server. Windows end by
    Redis's own expiry, so the machines' clocks do not have to agree."""

    backend = "redis"

    def __init__(self, url: str, *, key_prefix: str = "", timeout_s: float = 1.0) -> None:
        import redis.asyncio as aioredis
        from redis.asyncio.retry import Retry
        from redis.backoff import NoBackoff
        from redis.exceptions import RedisError

        self._errors: tuple[type[BaseException], ...] = (RedisError, OSError, TimeoutError)
        self._prefix = key_prefix
        self._timeout_s = timeout_s
        # A few connections, reused: a burst of requests queues for one, first come first served (each
        # script takes microseconds), instead of opening one connection per request. One retry: a pooled
        # connection broken by a Redis restart fails once, then reconnects.
        pool = aioredis.ConnectionPool.from_url(
            url, max_connections=REDIS_CONNECTIONS, socket_timeout=timeout_s, socket_connect_timeout=timeout_s,
            retry=Retry(NoBackoff(), 1))
        self._redis = aioredis.Redis(connection_pool=pool)
        self._turns = asyncio.Semaphore(REDIS_CONNECTIONS)
        self._hit = self._redis.register_script(_HIT)
        self._peek = self._redis.register_script(_PEEK)
        self._refund = self._redis.register_script(_REFUND)

    async def _call(self, work: Callable[[], Awaitable[T]]) -> T:
        try:
            async with asyncio.timeout(self._timeout_s * 3):  # a turn, connecting, the command
                async with self._turns:
                    return await work()
        except self._errors as exc:
            raise CounterStoreUnavailable(f"redis: {type(exc).__name__}: {exc}") from exc

    async def hit(self, key: str, limit: int, window_s: float) -> Decision:
        window_ms = max(int(window_s * 1000), 1)
        allowed, used, ttl = await self._call(lambda: self._hit(keys=[self._prefix + key], args=[limit, window_ms]))
        now = time.time()
        return _decision(bool(allowed), limit, int(used), now + int(ttl) / 1000, now)

    async def peek(self, key: str, limit: int, window_s: float) -> Decision:
        used, ttl = await self._call(lambda: self._peek(keys=[self._prefix + key]))
        now = time.time()
        if int(ttl) < 0:
            return _decision(limit > 0, limit, 0, now + window_s, now)
        return _decision(int(used) < limit, limit, int(used), now + int(ttl) / 1000, now)

    async def refund(self, key: str, window_end: float) -> None:
        left_ms = max(int((window_end + SAME_WINDOW_S - time.time()) * 1000), 0)
        await self._call(lambda: self._refund(keys=[self._prefix + key], args=[left_ms]))

    async def ping(self) -> None:
        await self._call(self._redis.ping)

    async def close(self) -> None:
        with contextlib.suppress(*self._errors):
            await self._redis.aclose()


# --- limits and the fallback ------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Limit:
    """`limit` hits per window under keys named `name` (plus a subject and the period): per
    `window_s` seconds from a subject's first hit, or per calendar `period` in UTC. 0 = off."""

    name: str
    limit: int
    window_s: float = 60.0
    period: Period | None = None

    def key(self, subject: str = "", now: datetime | None = None) -> str:
        parts = [self.name]
        if subject:
            parts.append(subject)
        if self.period is not None:
            moment = now or datetime.now(UTC)
            parts.append(f"{moment:%Y-%m}" if self.period == "month" else f"{moment:%Y-%m-%d}")
        return ":".join(parts)

    def window_at(self, now: datetime | None = None) -> float:
        """Seconds the window opened now lasts: `window_s`, or until the period's end."""
        if self.period is None:
            return self.window_s
        moment = now or datetime.now(UTC)
        return max((period_end(self.period, moment) - moment).total_seconds(), 0.001)


def period_end(period: Period, now: datetime | None = None) -> datetime:
    """00:00 UTC of the next day or of the first day of next month."""
    moment = now or datetime.now(UTC)
    if period == "day":
        return (moment + timedelta(days=1)).replace(hour=0, minute=0, second=0, microsecond=0)
    year, month = (moment.year + 1, 1) if moment.month == 12 else (moment.year, moment.month + 1)
    return datetime(year, month, 1, tzinfo=UTC)


def client_key(address: str) -> str:
    """The subject of a per-client limit: the address itself, or its /64 for IPv6."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address or "unknown"
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.ip_network(f"{ip}/{IPV6_CLIENT_PREFIX}", strict=False))
    return str(ip)


def _exact(limit: Limit, now: datetime, decision: Decision) -> Decision:
    """A calendar period ends at midnight exactly, whatever the store computed from its clock."""
    if limit.period is None:
        return decision
    return replace(decision, reset_at=period_end(limit.period, now).timestamp())


RECENT_KEPT = 4096  # counts remembered for Counters.recent

class Counters:
    """The limits of one process: `store` when it answers, this process's memory when it does not."""

    def __init__(self, store: CounterStore, *, retry_s: float = 1.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.store = store
        self.local = MemoryCounterStore()
        self.retry_s = retry_s
        self._clock = clock
        self._down_until = 0.0         # while the clock is before this, the store is not asked
        self._error: str | None = None  # why the store was last unreachable; None while it answers
        self._contact = -math.inf      # when the store last answered
        self._recent: dict[str, tuple[float, Decision]] = {}  # key -> (when, the store's last answer)

    @property
    def backend(self) -> str:
        return self.store.backend

    @property
    def degraded(self) -> bool:
        return self._error is not None

    async def _use(self, operation: Callable[[CounterStore], Awaitable[T]]) -> T:
        if self._error is not None and self._clock() < self._down_until:
            return await operation(self.local)
        try:
            result = await operation(self.store)
        except CounterStoreUnavailable as exc:
            self._failed(exc)
            return await operation(self.local)
        self._answered()
        return result

    def _failed(self, exc: CounterStoreUnavailable) -> None:
        if self._error is None:
            log.warning("counter store (%s) unreachable, counting limits in this process until it answers: %s",
                        self.store.backend, exc)
        self._error = str(exc)
        self._down_until = self._clock() + self.retry_s

    def _answered(self) -> None:
        if self._error is not None:
            log.warning("counter store (%s) answers again; limits are shared again", self.store.backend)
        self._error = None
        self._contact = self._clock()

    async def hit(self, limit: Limit, subject: str = "") -> Decision:
        """Count one hit of `limit` for `subject`; a limit of 0 allows everything and counts nothing."""
        now = datetime.now(UTC)
        window_s = limit.window_at(now)
        if limit.limit <= 0:
            now_s = time.time()
            return Decision(True, 0, 0, now_s + window_s, now_s)
        key = limit.key(subject, now)
        decision = _exact(limit, now, await self._use(lambda store: store.hit(key, limit.limit, window_s)))
        decision = replace(decision, key=key)
        if self._error is None:  # answered by the store: a later fallback continues from its count
            self.local.seed(key, decision.limit - decision.remaining, decision.reset_at)
        self._remember(key, decision)
        return decision

    async def peek(self, limit: Limit, subject: str = "") -> Decision:
        now = datetime.now(UTC)
        window_s = limit.window_at(now)
        if limit.limit <= 0:
            now_s = time.time()
            return Decision(True, 0, 0, now_s + window_s, now_s)
        key = limit.key(subject, now)
        decision = _exact(limit, now, await self._use(lambda store: store.peek(key, limit.limit, window_s)))
        self._remember(key, decision)
        return decision

    def _remember(self, key: str, decision: Decision) -> None:
        if len(self._recent) >= RECENT_KEPT:  # per-client keys come and go: never grow without bound
            self._recent.clear()
        self._recent[key] = (self._clock(), decision)

    async def recent(self, limit: Limit, subject: str = "", max_age_s: float = 1.0) -> Decision:
        """The count as this process last learnt it, if that is at most `max_age_s` old, else `peek`:
        for headers that only report a count (X-RateLimit-* on every cached transform), so a hit
        does not ask the store each time. At most `max_age_s` behind other processes' hits."""
        known = self._recent.get(limit.key(subject)) if limit.limit > 0 else None
        if known is not None and self._clock() - known[0] <= max_age_s:
            return known[1]
        return await self.peek(limit, subject)

    async def refund(self, taken: Decision | None) -> None:
        """Give back the hit `taken` counted (the work it paid for did not happen), to the window it was
        counted in: nothing once that window has ended. A refused hit, or one of a limit switched off,
        counted nothing and gives nothing back."""
        if taken is None or not taken.allowed or not taken.limit or not taken.key:
            return
        key, window_end = taken.key, taken.reset_at
        await self._use(lambda store: store.refund(key, window_end))
        if self._error is None:  # the store answered: the local mirror a fallback would continue from follows
            with contextlib.suppress(Exception):
                await self.local.refund(key, window_end)

    async def healthy(self, *, probe: bool = False) -> bool:
        """Whether limits are shared right now. The store is asked when `probe` is set, when it was
        unreachable and its retry time has come, or when nothing reached it for a few seconds."""
        now = self._clock()
        due = now - self._contact > RECHECK_AFTER_S if self._error is None else now >= self._down_until
        if probe or due:
            try:
                await self.store.ping()
            except CounterStoreUnavailable as exc:
                self._failed(exc)
            else:
                self._answered()
        return self._error is None

    def check(self) -> dict[str, Any]:
        """The health check's fields after `healthy()`: backend, and while degraded the fallback in use."""
        fields: dict[str, Any] = {"backend": self.store.backend}
        if self._error is not None:
            fields.update(fallback="per-process", error="counter store unreachable; limits are counted "
                          "per process until it answers")
        return fields

    def error_detail(self) -> str | None:
        """The last failure's text (for deep health only: it may name an address)."""
        return self._error

    async def close(self) -> None:
        await self.store.close()
        await self.local.close()


# --- configuration -----------------------------------------------------------------------------------

BACKENDS = ("embedded", "redis", "memory")


def counter_store_from_settings(section: Mapping[str, Any], data_dir: Path) -> CounterStore:
    """The `[counters]` backend: "embedded" (SQLite at `path`, default <data_dir>/counters.sqlite3),
    "redis" (`redis_url`), or "memory" (this process only; tests)."""
    backend = str(section.get("backend", "embedded"))
    timeout_s = float(section.get("timeout_s", 1.0))
    if backend == "embedded":
        path = str(section.get("path", "") or "")
        return SqliteCounterStore(Path(path) if path else Path(data_dir) / "counters.sqlite3",
                                  busy_timeout_s=max(timeout_s, 1.0) * 5)
    if backend == "redis":
        url = str(section.get("redis_url", "") or "")
        if not url:
            raise ValueError("[counters] backend = \"redis\" needs redis_url (e.g. redis://127.0.0.1:6379/0)")
        return RedisCounterStore(url, key_prefix=str(section.get("key_prefix", "")), timeout_s=timeout_s)
    if backend == "memory":
        return MemoryCounterStore()
    raise ValueError(f"unknown [counters] backend {backend!r}: one of {', '.join(BACKENDS)}")


def counters_from_settings(section: Mapping[str, Any], data_dir: Path) -> Counters:
    return Counters(counter_store_from_settings(section, data_dir), retry_s=float(section.get("retry_s", 1.0)))
