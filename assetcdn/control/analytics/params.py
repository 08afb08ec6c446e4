"""Query parameters of the statistics, insights and analytics endpoints, and the asset list's paging.

The API reference clamps rather than refuses, and so do we: a value out of range is
brought into range, and a value that is not a number (``days=abc``) falls back to the default, so
these never raise. Like JavaScript's ``parseInt``, leading digits count (``"7d"`` is 7).
"""

from __future__ import annotations

import re

from assetcdn.shared.decimal_fields import bounded_decimal

DAYS_DEFAULT = 7
DAYS_MAXIMUM = 90            # statistics and insights keep 90 days
ANALYTICS_DAYS_MAXIMUM = 30  # GET /api/analytics
LIMIT_DEFAULT = 20
LIMIT_MAXIMUM = 100          # top-assets

_LEADING_INTEGER = re.compile(r"^\s*([+-]?)(\d+)")
# Beyond every maximum here, and every minimum once negative: a value of more digits clamps alike, unconverted.
_BEYOND = 10**9


def _leading_integer(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if not isinstance(value, str):
        return None
    found = _LEADING_INTEGER.match(value)
    if not found:
        return None
    number = bounded_decimal(found[2], _BEYOND)
    return -number if found[1] == "-" else number


def _clamp(value: object, default: int, maximum: int) -> int:
    number = _leading_integer(value)
    if number is None:
        return default
    return max(1, min(number, maximum))


def parse_days(value: object, *, default: int = DAYS_DEFAULT, maximum: int = DAYS_MAXIMUM) -> int:
    """``days`` clamped to 1..maximum; missing or not a number -> default."""
    return _clamp(value, default, maximum)


def parse_limit(value: object, *, default: int = LIMIT_DEFAULT, maximum: int = LIMIT_MAXIMUM) -> int:
    """``limit`` clamped to 1..maximum; missing or not a number -> default."""
    return _clamp(value, default, maximum)


def parse_count(value: object, *, default: int, maximum: int) -> int:
    """Any other count or page number of a query (the asset list's ``page`` and ``per_page``), read alike: clamped
    to 1..maximum; missing or not a number -> default."""
    return _clamp(value, default, maximum)
