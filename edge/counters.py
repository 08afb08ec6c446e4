"""Usage counters behind one small interface: the monthly transform quota (spec "Limits").

The spec counts 50,000 transforms per calendar month, globally (contract-notes §5: key
`transforms:YYYY-MM`, not per key, client or zone). `InProcessCounters` keeps the counts in
this worker's memory: with N workers (or N edges) the effective ceiling is N times the limit
and a restart forgets the month. A Redis implementation (one INCR per take, shared by every
edge) is the planned second backend; it only has to satisfy `UsageCounters`.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Protocol


class UsageCounters(Protocol):
    def take(self, key: str, limit: int) -> bool:
        """Count one use under `key` if fewer than `limit` were counted; False (nothing counted) if not."""
        ...

    def remaining(self, key: str, limit: int) -> int:
        """Uses left under `key` before `limit` is reached."""
        ...

    def refund(self, key: str) -> None:
        """Give back one use taken under `key` (the work it paid for did not happen)."""
        ...


class InProcessCounters:
    """Counts in this process's memory (thread-safe). One key per month: twelve small ints a year."""

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}
        self._lock = threading.Lock()

    def take(self, key: str, limit: int) -> bool:
        with self._lock:
            used = self._counts.get(key, 0)
            if used >= limit:
                return False
            self._counts[key] = used + 1
            return True

    def remaining(self, key: str, limit: int) -> int:
        with self._lock:
            return max(limit - self._counts.get(key, 0), 0)

    def refund(self, key: str) -> None:
        with self._lock:
            used = self._counts.get(key, 0)
            if used > 0:
                self._counts[key] = used - 1


def counters_from_settings(transform: Mapping[str, Any]) -> UsageCounters:
    """The configured backend; only the in-process one exists so far (Redis later)."""
    backend = str(transform.get("counters", "memory"))
    if backend != "memory":
        raise ValueError(f"unknown counters backend {backend!r}: only 'memory' is implemented")
    return InProcessCounters()


def month_key(prefix: str, now: datetime | None = None) -> str:
    """`<prefix>:YYYY-MM` of the current calendar month in UTC."""
    moment = now or datetime.now(UTC)
    return f"{prefix}:{moment:%Y-%m}"


def next_month_start(now: datetime | None = None) -> datetime:
    """00:00 UTC on the first day of next month: when a monthly count starts again."""
    moment = now or datetime.now(UTC)
    year, month = (moment.year + 1, 1) if moment.month == 12 else (moment.year, moment.month + 1)
    return datetime(year, month, 1, tzinfo=UTC)


def seconds_until_next_month(now: datetime | None = None) -> int:
    """Seconds until 00:00 UTC on the first day of next month (a Retry-After value, at least 1)."""
    moment = now or datetime.now(UTC)
    return max(int((next_month_start(moment) - moment).total_seconds()) + 1, 1)
