"""Whole numbers written in a header field's ASCII digits, read with a bound."""

from __future__ import annotations


def bounded_decimal(digits: str, bound: int) -> int:
    """The number that `digits` (ASCII digits, leading zeros allowed) writes, at most `bound`. One of more significant
    digits than `bound` has is larger whatever they are, and is not converted: a field line can hold more digits
    than int() takes (4,300), and each would be a ValueError."""
    digits = digits.lstrip("0")
    return bound if len(digits) > len(str(bound)) else min(int(digits or "0"), bound)
