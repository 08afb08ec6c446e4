"""Variants that could not be made, remembered briefly (a negative cache).

A source that fails to transform (undecodable, over a budget, killed for overrunning) fails the
same way next time: answering the remembered error for `ttl_s` keeps a hostile input from
being run again on every request. Keys are variant keys, so they name the source's content:
an overwrite is a new key. In this worker's memory, at most `max_entries`, oldest dropped first.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from assetcdn.shared.errors import LegacyError

MAX_ENTRIES = 10_000


@dataclass(frozen=True, slots=True)
class _Failure:
    expires: float
    status: int
    error: str
    message: str | None
    extra: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)


class FailedVariants:
    def __init__(self, ttl_s: float, max_entries: int = MAX_ENTRIES) -> None:
        self.ttl_s = float(ttl_s)
        self.max_entries = max_entries
        self._failures: OrderedDict[str, _Failure] = OrderedDict()

    def __len__(self) -> int:
        return len(self._failures)

    def remember(self, key: str, error: LegacyError) -> None:
        if self.ttl_s <= 0:
            return
        self._failures.pop(key, None)
        self._failures[key] = _Failure(time.monotonic() + self.ttl_s, error.status, error.error, error.message,
                                       dict(error.extra), dict(error.headers))
        while len(self._failures) > self.max_entries:
            self._failures.popitem(last=False)

    def get(self, key: str) -> LegacyError | None:
        """A fresh copy of the error remembered under `key`, or None (never seen, or expired)."""
        failure = self._failures.get(key)
        if failure is None:
            return None
        if time.monotonic() >= failure.expires:
            del self._failures[key]
            return None
        return LegacyError(failure.status, failure.error, failure.message, dict(failure.extra),
                           dict(failure.headers))
