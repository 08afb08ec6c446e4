"""GET /api/search's work: score every asset by meaning and by its words, pick the mode, cache the answer.

Each asset gets a calibrated vector score (assetcdn/control/search/calibration.py) and the typo-tolerant fuzzy
score (assetcdn/control/search/fuzzy.py), blended as ``1 - (1 - vector) * (1 - 0.3 * fuzzy)``: the words can
lift a near match (a misspelt name) but never carry an asset alone past 0.5. Assets above 0.5 are
the vector results (mode ``vector``); when none is, the fuzzy scores alone answer (mode ``fuzzy``),
which still finds misspelt names. Without the model everything is fuzzy. An answer is cached for
60 s per normalised query and limit, and per manifest generation, so a catalog change is seen at
once; a cached answer says mode ``cached``.

Cost: a query is at most MAX_QUERY_CHARS characters and MAX_QUERY_TERMS words (the route answers 400
past them), the encoder reads at most its first QUERY_TOKENS word pieces, and the fuzzy scorer its
first 32 tokens. Queries run on `workers` threads with at most WAITING_QUERIES more waiting; past that
`search` raises SearchBusy (503 with Retry-After) at once instead of queuing, and a cached answer
never waits at all.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

from assetcdn.control.search.asset_text import searchable
from assetcdn.control.search.calibration import calibrate
from assetcdn.control.search.fuzzy import FuzzyDocument, fuzzy_scores
from assetcdn.control.search.index import SearchIndex, VectorSnapshot
from assetcdn.control.storage.manifest_store import ManifestStore
from assetcdn.shared.manifest import ManifestEntry

if TYPE_CHECKING:
    import numpy as np

    from assetcdn.control.search.encoder import SentenceEncoder

THRESHOLD = 0.5            # the original service's vector threshold, on the calibrated scale
FUZZY_LIFT = 0.3           # how far the words can lift a vector score (see the module docstring)
SETTLE_BACKLOG = 512       # a search waits for at most this many pending embeddings (see SearchIndex.settled)
CACHE_ENTRIES = 1024
MAX_QUERY_CHARS = 200      # a query longer than this is refused (400)
MAX_QUERY_TERMS = 24       # ...and one of more words than this
QUERY_TOKENS = 64          # the word pieces of a query the encoder reads (its time grows with them)
WAITING_QUERIES = 8        # queries that may wait for a thread; more answer SearchBusy at once


class SearchBusy(Exception):
    """Every search thread is busy and WAITING_QUERIES queries already wait: ask again shortly."""


def query_problem(query: str) -> str | None:
    """Why `query` is refused (400), or None: empty, too long, or too many words."""
    if not query.strip():
        return 'Query parameter "q" is required'
    if len(query) > MAX_QUERY_CHARS:
        return f'Query parameter "q" is too long: at most {MAX_QUERY_CHARS} characters.'
    if len(query.split()) > MAX_QUERY_TERMS:
        return f'Query parameter "q" has too many words: at most {MAX_QUERY_TERMS}.'
    return None


@dataclass(frozen=True)
class SearchHit:
    entry: ManifestEntry
    score: float

    def to_json(self) -> dict[str, object]:
        e = self.entry
        return {"name": e.name, "path": e.path, "project": e.zone, "category": e.category, "format": e.format,
                "size": e.size, "score": self.score}


@dataclass(frozen=True)
class SearchAnswer:
    hits: tuple[SearchHit, ...]
    mode: str                    # vector | fuzzy | cached
    origin: str = ""             # vector | fuzzy: how the hits were made (a cached answer's too)

    def __post_init__(self) -> None:
        if not self.origin:
            object.__setattr__(self, "origin", self.mode)


def normalise_query(query: str) -> str:
    return " ".join(query.lower().split())


class AnswerCache:
    """Answers by (normalised query, limit), valid for `ttl_s` and only for the version they were made at
    (the manifest generation and the index's snapshot: an upload or a new alt text makes new answers)."""

    def __init__(self, ttl_s: float, entries: int = CACHE_ENTRIES) -> None:
        self.ttl_s = ttl_s
        self.entries = entries
        self._answers: OrderedDict[tuple[str, int], tuple[float, tuple[int, int], SearchAnswer]] = OrderedDict()

    def get(self, key: tuple[str, int], generation: tuple[int, int]) -> SearchAnswer | None:
        found = self._answers.get(key)
        if found is None:
            return None
        expires, made_at, answer = found
        if expires <= time.monotonic() or made_at != generation:
            del self._answers[key]
            return None
        self._answers.move_to_end(key)
        return answer

    def put(self, key: tuple[str, int], generation: tuple[int, int], answer: SearchAnswer) -> None:
        if self.ttl_s <= 0:
            return
        self._answers[key] = (time.monotonic() + self.ttl_s, generation, answer)
        self._answers.move_to_end(key)
        while len(self._answers) > self.entries:
            self._answers.popitem(last=False)


class FuzzyCatalog:
    """The fuzzy scorer's view of the manifest, rebuilt only for entries that changed."""

    def __init__(self) -> None:
        self.generation = -1
        self.documents: tuple[FuzzyDocument, ...] = ()
        self.vocabulary: frozenset[str] = frozenset()
        self._by_path: dict[str, FuzzyDocument] = {}

    def sync(self, manifest: ManifestStore) -> None:
        if manifest.generation == self.generation:
            return
        by_path = {}
        for path, entry in manifest.entries.items():
            if not searchable(entry):
                continue
            doc = self._by_path.get(path)
            by_path[path] = doc if doc is not None and doc.entry is entry else FuzzyDocument.of(entry)
        self._by_path = by_path
        self.documents = tuple(by_path[p] for p in sorted(by_path))
        self.vocabulary = frozenset().union(*(d.words for d in self.documents)) if self.documents else frozenset()
        self.generation = manifest.generation


def align(documents: tuple[FuzzyDocument, ...], snapshot: VectorSnapshot) -> np.ndarray:
    """For each document, its row in the snapshot, or -1 while it has no vector yet."""
    import numpy as np  # noqa: PLC0415 (numpy loads at the first search, not at every control start)

    return np.fromiter((snapshot.rows.get(doc.entry.path, -1) for doc in documents), dtype=np.int64,
                       count=len(documents))


def rank(query: str, limit: int, documents: tuple[FuzzyDocument, ...], vocabulary: frozenset[str],
         encoder: SentenceEncoder | None, snapshot: VectorSnapshot, rows: np.ndarray) -> SearchAnswer:
    """Score and pick (pure; runs on a worker thread). `rows` is align(documents, snapshot)."""
    import numpy as np  # noqa: PLC0415 (as in align)

    fuzzy = np.asarray(fuzzy_scores(query, list(documents), vocabulary), dtype=np.float64)
    if encoder is not None and len(snapshot.paths):
        cosine = snapshot.matrix @ encoder.encode_query(query, QUERY_TOKENS)
        vector = np.where(rows >= 0, cosine[np.maximum(rows, 0)], 0.0)
        blended = 1.0 - (1.0 - calibrate(vector)) * (1.0 - FUZZY_LIFT * fuzzy)
        if (blended > THRESHOLD).any():
            return SearchAnswer(_top(documents, blended, limit, THRESHOLD), "vector")
    return SearchAnswer(_top(documents, fuzzy, limit, 0.0), "fuzzy")


def _top(documents: tuple[FuzzyDocument, ...], scores: np.ndarray, limit: int, floor: float) -> tuple[SearchHit, ...]:
    # Descending score, then path order (documents are sorted by path): stable answers.
    import numpy as np  # noqa: PLC0415 (as in align)

    order = np.argsort(-scores, kind="stable")
    hits = []
    for i in order[:limit]:
        if scores[i] <= floor:
            break
        hits.append(SearchHit(documents[i].entry, round(float(scores[i]), 3)))
    return tuple(hits)


class SearchEngine:
    def __init__(self, manifest: ManifestStore, index: SearchIndex, cache_ttl_s: float, workers: int = 2) -> None:
        self.manifest = manifest
        self.index = index
        self.cache = AnswerCache(cache_ttl_s)
        self.catalog = FuzzyCatalog()
        # Queries get their own threads, so one never waits behind an index batch.
        self.executor = ThreadPoolExecutor(workers, thread_name_prefix="search-query")
        self.admitted_max = workers + WAITING_QUERIES
        self._admitted = 0  # queries running or waiting for a thread
        self._alignment: tuple[object, object, np.ndarray] | None = None

    @property
    def admitted(self) -> int:
        """Queries running or waiting for a thread now."""
        return self._admitted

    async def search(self, query: str, limit: int, *, admit: bool = True) -> SearchAnswer:
        """The answer to `query`; with `admit`, SearchBusy at once when admitted_max queries are already in."""
        key = (normalise_query(query), limit)
        await self.index.settled(SETTLE_BACKLOG)  # at once unless a change is being indexed
        generation = (self.manifest.generation, self.index.version)
        cached = self.cache.get(key, generation)
        if cached is not None:
            return SearchAnswer(cached.hits, "cached", cached.origin)
        if admit and self._admitted >= self.admitted_max:
            raise SearchBusy()
        self._admitted += 1
        try:
            self.catalog.sync(self.manifest)
            encoder = await self.index.model()
            documents, snapshot = self.catalog.documents, self.index.snapshot
            answer = await asyncio.get_running_loop().run_in_executor(
                self.executor, rank, query, limit, documents, self.catalog.vocabulary, encoder, snapshot,
                self._rows(documents, snapshot))
        finally:
            self._admitted -= 1
        self.cache.put(key, generation, answer)
        return answer

    def _rows(self, documents: tuple[FuzzyDocument, ...], snapshot: VectorSnapshot) -> np.ndarray:
        # Recomputed only when the catalog or the vectors changed.
        cached = self._alignment
        if cached is None or cached[0] is not documents or cached[1] is not snapshot:
            cached = self._alignment = (documents, snapshot, align(documents, snapshot))
        return cached[2]

    def close(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)
