"""The one way a date-time leaves the service: UTC, milliseconds, ``Z`` (``2026-04-04T12:00:00.000Z``).

Every ``date-time`` field of a response (DateCreated, DateModified, DateFetched, LastChanged) goes
through ``iso_utc`` or ``as_iso_utc``, so a client sees one precision whatever produced the value:
the clock, a git commit (whole seconds) or a row stored by an older version.
"""

from __future__ import annotations

from datetime import UTC, datetime


def iso_utc(moment: datetime) -> str:
    """``moment`` in the response form; a naive datetime is taken as UTC."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def utc_now_iso() -> str:
    return iso_utc(datetime.now(UTC))


def from_unix(seconds: float) -> str:
    return iso_utc(datetime.fromtimestamp(seconds, UTC))


def as_iso_utc(value: str) -> str:
    """A stored ISO 8601 text (any precision, ``Z`` or an offset) in the response form.

    Text that is not a date-time is returned unchanged rather than failing the whole response."""
    try:
        return iso_utc(datetime.fromisoformat(value.replace("Z", "+00:00")))
    except (ValueError, TypeError, AttributeError):
        return value
