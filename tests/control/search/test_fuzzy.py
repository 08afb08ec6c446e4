"""The fuzzy fallback scores as the original service did, and tolerates typos on top."""

from __future__ import annotations

from assetcdn.control.search.fuzzy import FuzzyDocument, edit_distance, fuzzy_scores, query_tokens
from assetcdn.shared.manifest import make_entry


def docs(*paths: str) -> list[FuzzyDocument]:
    return [FuzzyDocument.of(make_entry(p, 10, "0" * 64, "b" * 40, "2026-01-01T00:00:00.000Z")) for p in paths]


def vocabulary(documents: list[FuzzyDocument]) -> frozenset[str]:
    return frozenset().union(*(d.words for d in documents))


def test_tokens_are_lowercase_alphanumeric_runs_of_two_or_more() -> None:
    assert query_tokens("Dark-Blue  banking_BG a 4k!") == ["dark", "blue", "banking", "bg", "4k"]


def test_score_is_the_share_of_tokens_found_in_the_haystack() -> None:
    documents = docs("bankingonai/v1/banners/hero-dark.webp", "bankingonai/v1/logos/logo.svg", "acme/v1/icons/app.png")
    # "dark" and "banking" are substrings of the first haystack; "blue" of none.
    assert fuzzy_scores("dark blue banking", documents, ()) == [0.667, 0.333, 0.0]
    assert fuzzy_scores("webp", documents, ()) == [1.0, 0.0, 0.0]   # the format is part of the haystack


def test_a_misspelt_word_earns_partial_credit_below_an_exact_match() -> None:
    documents = docs("autoworld/v1/banners/ferrari-488.jpg", "autoworld/v1/banners/ferris-wheel.jpg")
    scores = fuzzy_scores("ferari", documents, vocabulary(documents))
    assert scores == [0.8, 0.0]
    assert fuzzy_scores("ferrari", documents, vocabulary(documents)) == [1.0, 0.0]


def test_swapped_letters_and_long_words_with_two_typos_still_match() -> None:
    documents = docs("petcare/v1/banners/golden-retriever-puppy.jpg", "medcare/v1/banners/stethoscope.jpg")
    voc = vocabulary(documents)
    assert fuzzy_scores("golden retreiver", documents, voc)[0] == 0.9     # (1 + 0.8) / 2
    assert fuzzy_scores("stethescope", documents, voc)[1] == 0.8          # one substitution
    assert fuzzy_scores("stthescope", documents, voc)[1] == 0.6           # two edits on a long word


def test_short_words_and_numbers_need_exact_matches() -> None:
    documents = docs("acme/v1/logos/cat.svg", "acme/v1/banners/model-488.jpg")
    voc = vocabulary(documents)
    assert fuzzy_scores("bat", documents, voc) == [0.0, 0.0]
    assert fuzzy_scores("489", documents, voc) == [0.0, 0.0]


def test_edit_distance_counts_an_adjacent_swap_as_one() -> None:
    assert edit_distance("retreiver", "retriever", 2) == 1
    assert edit_distance("kitten", "sitting", 3) == 3
    assert edit_distance("abc", "abcdefgh", 2) == 3   # beyond the limit: limit + 1
