"""assetcdn/shared/timestamps.py: the one response form of a date-time."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from assetcdn.shared.timestamps import as_iso_utc, from_unix, iso_utc, utc_now_iso


def test_iso_utc_has_milliseconds_and_z() -> None:
    assert iso_utc(datetime(2026, 4, 4, 12, 0, 0, tzinfo=UTC)) == "2026-04-04T12:00:00.000Z"
    assert iso_utc(datetime(2026, 4, 4, 12, 0, 0, 123456, tzinfo=UTC)) == "2026-04-04T12:00:00.123Z"
    assert iso_utc(datetime(2026, 4, 4, 7, 0, tzinfo=timezone(timedelta(hours=-5)))) == "2026-04-04T12:00:00.000Z"
    assert iso_utc(datetime(2026, 4, 4, 12, 0)) == "2026-04-04T12:00:00.000Z"  # naive: taken as UTC


def test_from_unix_is_a_commit_time_in_the_same_form() -> None:
    assert from_unix(1775304000) == "2026-04-04T12:00:00.000Z"


@pytest.mark.parametrize(("stored", "answered"), [
    ("2026-04-04T12:00:00Z", "2026-04-04T12:00:00.000Z"),
    ("2026-04-04T12:00:00.5+00:00", "2026-04-04T12:00:00.500Z"),
    ("2026-04-04T14:00:00.123456+02:00", "2026-04-04T12:00:00.123Z"),
    ("2026-04-04T12:00:00.000Z", "2026-04-04T12:00:00.000Z"),
    ("not a date", "not a date"),
])
def test_as_iso_utc_normalises_stored_text(stored: str, answered: str) -> None:
    assert as_iso_utc(stored) == answered


def test_now_is_in_the_response_form() -> None:
    now = utc_now_iso()
    assert len(now) == len("2026-04-04T12:00:00.000Z") and now.endswith("Z")
