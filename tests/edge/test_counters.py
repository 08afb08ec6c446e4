"""The usage counters: take/remaining semantics, calendar-month keys in UTC, Retry-After to next month."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

import pytest

from edge.counters import (
    InProcessCounters,
    counters_from_settings,
    month_key,
    next_month_start,
    seconds_until_next_month,
)


def test_take_counts_up_to_the_limit_and_then_refuses_without_counting() -> None:
    counters = InProcessCounters()
    assert [counters.take("k", 3) for _ in range(5)] == [True, True, True, False, False]
    assert counters.remaining("k", 3) == 0
    assert counters.remaining("k", 5) == 2   # refusals were not counted
    assert counters.remaining("other", 3) == 3


def test_takes_from_many_threads_never_exceed_the_limit() -> None:
    counters = InProcessCounters()
    with ThreadPoolExecutor(8) as pool:
        granted = sum(pool.map(lambda _: counters.take("k", 1000), range(5000)))
    assert granted == 1000


def test_month_keys_and_retry_after() -> None:
    assert month_key("transforms", datetime(2026, 4, 30, 23, 59, tzinfo=UTC)) == "transforms:2026-04"
    assert month_key("transforms", datetime(2026, 5, 1, tzinfo=UTC)) == "transforms:2026-05"
    assert seconds_until_next_month(datetime(2026, 12, 31, 23, 59, 0, tzinfo=UTC)) == 61
    assert seconds_until_next_month(datetime(2026, 2, 1, tzinfo=UTC)) == 28 * 86400 + 1


def test_factory_offers_only_the_in_process_backend() -> None:
    assert isinstance(counters_from_settings({}), InProcessCounters)
    with pytest.raises(ValueError, match="redis"):
        counters_from_settings({"counters": "redis"})


def test_refund_gives_back_one_use_and_never_goes_below_zero() -> None:
    counters = InProcessCounters()
    assert [counters.take("k", 2) for _ in range(3)] == [True, True, False]
    counters.refund("k")
    assert counters.remaining("k", 2) == 1
    assert counters.take("k", 2) is True
    counters.refund("other")
    assert counters.remaining("other", 2) == 2


def test_next_month_start_is_the_reset_moment() -> None:
    assert next_month_start(datetime(2026, 12, 31, 23, 59, tzinfo=UTC)) == datetime(2027, 1, 1, tzinfo=UTC)
    assert next_month_start(datetime(2026, 4, 1, tzinfo=UTC)) == datetime(2026, 5, 1, tzinfo=UTC)
