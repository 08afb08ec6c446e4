"""A circuit breaker for the edge's calls to control: once control is known to be unreachable, requests
that need it fail at once instead of each waiting out a timeout.

- closed: calls go through; `failure_threshold` failures in a row (timeouts, refused or reset
  connections, 502-504 answers) open it. Any success resets the count.
- open: `allow()` refuses, and calls already waiting are told to give up (`tripped`). After
  `open_s` it lets one call through (half-open).
- half-open: that one call is the probe: success closes the breaker, failure opens it again for
  another `open_s`. A probe that never reports back (cancelled) stops blocking after `open_s`.

Only a control plane that does not answer costs a caller time; one that refuses connections (stopped,
restarting) fails a call at once. So refusing calls is kept for when the last failure was slow (a
timeout: hung, or cut off); while the failures are fast, calls still go through (and fail as fast as
refusing would), which lets the first one after a restart succeed without waiting for a probe.

The edge's background sync (heartbeats, catch-up: assetcdn/edge/control_client.py) always calls control and
reports here, so the breaker also opens with no client traffic and closes as soon as control answers
again.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

CLOSED, OPEN, HALF_OPEN = "closed", "open", "half-open"


class CircuitBreaker:
    def __init__(self, failure_threshold: int = 1, open_s: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.failure_threshold = max(1, failure_threshold)
        self.open_s = open_s
        self._clock = clock
        self._state = CLOSED
        self._failures = 0
        self._slow = False  # whether the last failure was a timeout (refusing calls saves time only then)
        self._changed_at = clock()
        self._tripped = asyncio.Event()  # set while open: waiting calls give up
        self.opened_count = 0  # times it opened since start (for health and metrics)

    @property
    def state(self) -> str:
        return self._state

    @property
    def fails_fast(self) -> bool:
        """Whether calls are being refused: open (or probing) after a failure that took a timeout."""
        return self._state != CLOSED and self._slow

    def available(self) -> bool:
        """Whether a call would be let through now (without claiming the half-open probe)."""
        if self._state == CLOSED or not self._slow:
            return True
        return self._clock() - self._changed_at >= self.open_s

    def allow(self) -> bool:
        """Whether to make a call now; in the open state after `open_s`, this call becomes the probe."""
        if self._state == CLOSED or not self._slow:
            return True
        if self._clock() - self._changed_at < self.open_s:
            return False
        self._set(HALF_OPEN)  # this caller probes; the others keep failing fast until it reports
        return True

    def succeeded(self) -> None:
        self._failures = 0
        if self._state != CLOSED:
            self._set(CLOSED)

    def failed(self, *, slow: bool = True) -> None:
        """A call failed; `slow`: by a timeout (not answering), not a refusal (not there at all)."""
        self._failures += 1
        self._slow = slow
        if self._state == HALF_OPEN or (self._state == CLOSED and self._failures >= self.failure_threshold):
            self._set(OPEN)
            self.opened_count += 1
        elif self._state == OPEN:
            self._changed_at = self._clock()  # still failing: wait a full period before the next probe
        self._signal()

    async def tripped(self) -> None:
        """Returns when the breaker opens on a slow failure (at once if it is open on one now)."""
        await self._tripped.wait()

    def seconds_in_state(self) -> float:
        return self._clock() - self._changed_at

    def _set(self, state: str) -> None:
        self._state = state
        self._changed_at = self._clock()
        self._signal()

    def _signal(self) -> None:
        # Waiting calls give up only when waiting is what it costs (the breaker refuses calls).
        if self._state == OPEN and self._slow:
            self._tripped.set()
        else:
            self._tripped.clear()
