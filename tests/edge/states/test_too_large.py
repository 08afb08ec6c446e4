"""A worker's memory of URLs found too large (assetcdn/edge/states/too_large.py): per URL, let go by any purge
since, by its time, and the oldest first past its bound."""

from __future__ import annotations

from assetcdn.edge.states.too_large import TooLarge


def test_a_url_found_too_large_stands_until_a_purge_is_published() -> None:
    memory = TooLarge()
    memory.remember("a", 7, 2_000, 1_000)
    assert "a" in memory and "b" not in memory
    assert (memory.refusal("a", 7), memory.refusal("b", 7)) == ((2_000, 1_000), None)
    assert memory.refusal("a", 8) is None  # a purge since (of anything) lets it go, for good
    assert "a" not in memory and memory.refusal("a", 7) is None


def test_a_url_found_too_large_is_let_go_after_its_time() -> None:
    memory = TooLarge(kept_s=0)
    memory.remember("a", 7, 2_000, 1_000)
    assert memory.refusal("a", 7) is None and "a" not in memory


def test_past_its_bound_the_url_found_too_large_longest_ago_goes_first() -> None:
    memory = TooLarge(names=2)
    for key in ("a", "b", "a", "c"):  # "a" found again: the newest of the three
        memory.remember(key, 7, 2_000, 1_000)
    assert [key for key in ("a", "b", "c") if memory.refusal(key, 7) is not None] == ["a", "c"]
