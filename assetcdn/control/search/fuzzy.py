"""The token-scored fuzzy match of the search fallback, tolerant of typos.

As the original service scored it: the query's tokens are its lowercase alphanumeric runs of two
or more characters; an asset's haystack is ``name path project category format`` lowercased; the
score is the share of tokens found in the haystack, rounded to 3 decimals. A token found as a
substring counts 1. Ours adds typo tolerance: a token of 4+ characters that is not found but is
within one edit (two for 8+ characters; a swap of neighbours is one edit) of a haystack word counts
0.8 (0.6 for two edits), so "ferari" still finds ``ferrari-488.jpg``, below an exact match.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from assetcdn.shared.manifest import ManifestEntry

TOKEN = re.compile(r"[a-z0-9]{2,}")
WORD = re.compile(r"[a-z0-9]+")
MAX_TOKENS = 32          # a query's tokens beyond this are ignored (bounded work per request)
MAX_TYPO_TOKENS = 8      # typo matching (an edit distance per vocabulary word) for the first 8 only
TYPO_CREDIT = {1: 0.8, 2: 0.6}


def query_tokens(query: str) -> list[str]:
    return TOKEN.findall(query.lower())[:MAX_TOKENS]


def haystack(entry: ManifestEntry) -> str:
    return f"{entry.name} {entry.path} {entry.zone} {entry.category} {entry.format}".lower()


def allowed_edits(token: str) -> int:
    if len(token) < 4 or token.isdigit():
        return 0
    return 1 if len(token) < 8 else 2


def edit_distance(a: str, b: str, limit: int) -> int:
    """Optimal string alignment distance (adjacent swaps count one), or limit + 1 once it exceeds limit."""
    if abs(len(a) - len(b)) > limit:
        return limit + 1
    previous2: list[int] = []
    previous = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        current = [i] + [0] * len(b)
        best = current[0]
        for j in range(1, len(b) + 1):
            cost = 0 if a[i - 1] == b[j - 1] else 1
            value = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + cost)
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                value = min(value, previous2[j - 2] + 1)
            current[j] = value
            best = min(best, value)
        if best > limit:
            return limit + 1
        previous2, previous = previous, current
    return previous[len(b)]


@dataclass(frozen=True)
class FuzzyDocument:
    """What the scorer needs of one asset, computed once per manifest entry."""
    entry: ManifestEntry
    text: str
    words: frozenset[str]

    @staticmethod
    def of(entry: ManifestEntry) -> FuzzyDocument:
        text = haystack(entry)
        return FuzzyDocument(entry, text, frozenset(WORD.findall(text)))


def typo_credits(token: str, vocabulary: Iterable[str]) -> dict[str, float]:
    """Words of the vocabulary a token may be a misspelling of, with the credit each earns."""
    limit = allowed_edits(token)
    if limit == 0:
        return {}
    found = {}
    for word in vocabulary:
        if len(word) < 3:
            continue
        distance = edit_distance(token, word, limit)
        if 0 < distance <= limit:
            found[word] = TYPO_CREDIT[distance]
    return found


def fuzzy_scores(query: str, documents: list[FuzzyDocument], vocabulary: Iterable[str]) -> list[float]:
    """The score of every document for `query` (0 when nothing matches), in the documents' order."""
    tokens = query_tokens(query)
    if not tokens:
        return [0.0] * len(documents)
    vocabulary = tuple(vocabulary)
    credits = [typo_credits(token, vocabulary) if i < MAX_TYPO_TOKENS else {} for i, token in enumerate(tokens)]
    scores = []
    for doc in documents:
        matched = 0.0
        for token, typos in zip(tokens, credits, strict=True):
            if token in doc.text:
                matched += 1.0
            elif typos:
                matched += max((credit for word, credit in typos.items() if word in doc.words), default=0.0)
        scores.append(round(matched / len(tokens), 3))
    return scores
