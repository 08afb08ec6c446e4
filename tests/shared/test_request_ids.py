"""X-Request-ID values made by the application and the edge's hit path (assetcdn/shared/middleware.py)."""

from __future__ import annotations

import uuid

from assetcdn.shared.middleware import RequestIds


def test_fresh_ids_are_distinct_uuid4_strings_across_the_counter_s_blocks_and_its_wrap() -> None:
    ids = RequestIds()
    made = [ids.new() for _ in range(3 * 4096 + 7)]  # through at least two blocks of 4096
    ids._counter = 2 ** 48 - 3  # the counter's 12 digits wrap: the ids go on from zero
    ids._high = ids._high_digits(ids._counter)
    wrapped = [ids.new() for _ in range(6)]
    for value in made + wrapped:
        parsed = uuid.UUID(value.decode())
        assert str(parsed).encode() == value and parsed.version == 4
    assert len(set(made + wrapped)) == len(made) + len(wrapped)
    tails = [int(value[-12:], 16) for value in made]
    assert tails == list(range(tails[0], tails[0] + len(made)))  # one counter: consecutive, no digit lost
    assert [int(value[-12:], 16) for value in wrapped] == [2 ** 48 - 2, 2 ** 48 - 1, 0, 1, 2, 3]


def test_a_caller_s_uuid_is_kept_in_canonical_form_and_anything_else_replaced() -> None:
    ids = RequestIds()
    sent = "6F9619FF-8B86-D011-B42D-00C04FC964FF"
    assert ids.of(sent.encode()) == sent.lower().encode()
    for other in (None, b"", b"not-a-uuid"):
        assert uuid.UUID(ids.of(other).decode()).version == 4
