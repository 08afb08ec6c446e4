"""A clock a test moves by hand, for code that takes its clock as a callable (the circuit breaker's)."""

from __future__ import annotations


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now
