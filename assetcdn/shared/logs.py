"""Logging set-up shared by both processes. Secrets are never passed to loggers."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable


def configure_logging(role: str) -> None:
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s {role} %(levelname)s %(name)s: %(message)s")
    # libvips reports every operation at INFO: keep it to warnings.
    logging.getLogger("pyvips").setLevel(logging.WARNING)
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)


class LinePerInterval:
    """At most one log line per key (a zone's name) and `interval_s`: each line says how many of its kind were
    left out since the one before. A failing origin then costs its zone one line per interval, not one per
    request (thousands a second under load). At most `max_keys` keys are remembered (past it all are forgotten)."""

    def __init__(self, logger: logging.Logger, interval_s: float = 10.0, *, max_keys: int = 10_000,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.logger = logger
        self.interval_s = interval_s
        self.max_keys = max_keys
        self.clock = clock
        self._keys: dict[str, list[float]] = {}  # key -> [when its last line was logged, lines left out since]

    def log(self, level: int, key: str, message: str, *args: object) -> None:
        now = self.clock()
        held = self._keys.get(key)
        if held is not None and now - held[0] < self.interval_s:
            held[1] += 1
            return
        left_out = int(held[1]) if held is not None else 0
        if held is None and len(self._keys) >= self.max_keys:
            self._keys.clear()
        self._keys[key] = [now, 0]
        self.logger.log(level, message + " (%d more such lines since the last, one line per %g s)", *args, left_out,
                        self.interval_s)
