"""Whole numbers written in a header field's ASCII digits, read with a bound."""

from __future__ import annotations

# Up to this many digits, int() converts them cheaply whatever the bound: no strip, no comparing of lengths.
SHORT = 18


def bounded_decimal(digits: str, bound: int) -> int:
    """The number that `digits` (ASCII digits, leading zeros allowed) writes, at most `bound`. One of more significant
    digits than `bound` has is larger whatever they are, and is not converted: a field line can hold more digits
    than int() takes (4,300), and each would be a ValueError."""
    if len(digits) <= SHORT:  # nearly every field (a max-age, a range position): converted as it is
        return min(int(digits or "0"), bound)
    digits = digits.lstrip("0")
    return bound if len(digits) > len(str(bound)) else min(int(digits or "0"), bound)
