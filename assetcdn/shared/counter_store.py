"""Every limit the CDN enforces is counted here, in fixed windows, through one interface
(`CounterStore`, with its backends in assetcdn/shared/counter_backends/).

A limit (`Limit`) allows `limit` hits per window: a number of seconds from a subject's first hit
(per-IP limits such as signed URLs, 300 per minute) or a calendar period in UTC (transforms per
month, purges per day). `hit` counts one and says whether it was allowed; a refused hit is not
counted. `refund` gives one back (a purge that was not recorded, a transform that failed, a
successful sign-in) to the window it was taken from: never to a later one (a refund after midnight,
or after a client's window ended, credits nothing).

`Counters` is what routes use: it names keys, switches off limits set to 0 and, when the store
cannot be reached (or answers an error), counts in this process's memory instead, continuing from
the last counts the store gave this process, and tries the store again every `retry_s`. While it
does, health reports the counters degraded. Hits counted locally meanwhile are not added to the
shared count when it returns.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import math
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal, TypeVar

from assetcdn.shared.counter_backends.base import CounterStore, CounterStoreUnavailable, Decision
from assetcdn.shared.counter_backends.memory import MemoryCounterStore
from assetcdn.shared.counter_backends.redis import RedisCounterStore
from assetcdn.shared.counter_backends.sqlite import SqliteCounterStore

# What routes and services use; the backends are imported from their own modules.
__all__ = ["CounterStore", "CounterStoreUnavailable", "Counters", "Decision", "Limit", "client_key",
           "counter_store_from_settings", "counters_from_settings", "period_end"]

log = logging.getLogger(__name__)

T = TypeVar("T")
Period = Literal["day", "month"]
IPV6_CLIENT_PREFIX = 64   # one IPv6 client usually holds a whole /64
RECHECK_AFTER_S = 5.0     # health asks the store itself when nothing reached it for this long



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
