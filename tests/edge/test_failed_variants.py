"""The negative cache of failed variants: remembered for its TTL, answered as fresh copies, bounded."""

from __future__ import annotations

import pytest

from assetcdn.edge.failed_variants import FailedVariants
from assetcdn.shared.errors import LegacyError


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr("assetcdn.edge.failed_variants.time.monotonic", fake)
    return fake


def test_a_failure_is_answered_until_its_ttl_passes(clock: Clock) -> None:
    failures = FailedVariants(ttl_s=60)
    failures.remember("k", LegacyError(503, "over budget", headers={"Retry-After": "1"}))
    clock.now += 59.9
    answer = failures.get("k")
    assert answer is not None and (answer.status, answer.error, answer.headers) == (503, "over budget",
                                                                                    {"Retry-After": "1"})
    answer.headers["X-Cache"] = "HIT"                       # a caller's change does not leak into the next
    assert failures.get("k").headers == {"Retry-After": "1"}  # type: ignore[union-attr]
    clock.now += 0.1
    assert failures.get("k") is None and len(failures) == 0
    assert failures.get("never") is None


def test_ttl_zero_remembers_nothing(clock: Clock) -> None:
    failures = FailedVariants(ttl_s=0)
    failures.remember("k", LegacyError(422, "bad"))
    assert failures.get("k") is None


def test_the_oldest_failures_go_first_past_the_bound(clock: Clock) -> None:
    failures = FailedVariants(ttl_s=60, max_entries=2)
    for key in ("a", "b", "c"):
        failures.remember(key, LegacyError(422, key))
    assert failures.get("a") is None and failures.get("b") is not None and failures.get("c") is not None
