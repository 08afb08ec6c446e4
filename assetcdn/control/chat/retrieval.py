"""What the chat answers from: the closest documentation passages and catalog assets to a question.

Passages are embedded on the first question (about 60 of them; a second or two of one core, on a
worker thread) and kept for the process; assets come from the search engine, so they are the same matches
GET /api/search gives, on the same calibrated scale.
"""

from __future__ import annotations

import asyncio
import functools
from dataclasses import dataclass

import numpy as np

from assetcdn.control.chat.documentation import Passage
from assetcdn.control.search.calibration import calibrate
from assetcdn.control.search.encoder import SentenceEncoder
from assetcdn.control.search.engine import QUERY_TOKENS, SearchEngine, SearchHit
from assetcdn.control.search.fuzzy import query_tokens

PASSAGES_KEPT = 3
ASSETS_KEPT = 5


@dataclass(frozen=True)
class ScoredPassage:
    passage: Passage
    score: float    # calibrated: above 0.5 is a match


@dataclass(frozen=True)
class Retrieved:
    passages: tuple[ScoredPassage, ...]
    assets: tuple[SearchHit, ...]

    @property
    def sources(self) -> list[str]:
        return [p.passage.id for p in self.passages if p.score > 0.5] + [h.entry.path for h in self.assets]

    @property
    def confidence(self) -> str:
        """From the average of the match scores above 0.5: > 0.75 high, > 0.6 medium, else low."""
        scores = [p.score for p in self.passages if p.score > 0.5] + [h.score for h in self.assets if h.score > 0.5]
        if not scores:
            return "low"
        average = sum(scores) / len(scores)
        return "high" if average > 0.75 else "medium" if average > 0.6 else "low"


@functools.lru_cache(maxsize=4)
def embed_passages(encoder: SentenceEncoder, texts: tuple[str, ...]) -> np.ndarray:
    """Passage vectors, once per process for the same model and README (every control app of a test
    process shares them, as it shares the model)."""
    vectors = encoder.encode(list(texts))
    vectors.setflags(write=False)
    return vectors


class ChatRetriever:
    def __init__(self, passages: list[Passage], search: SearchEngine) -> None:
        self.passages = passages
        self.search = search
        self._vectors: np.ndarray | None = None
        self._lock = asyncio.Lock()

    async def _passage_vectors(self) -> np.ndarray | None:
        encoder = await self.search.index.model()
        if encoder is None or not self.passages:
            return None
        async with self._lock:
            if self._vectors is None:
                texts = tuple(p.embedding_text() for p in self.passages)
                self._vectors = await asyncio.get_running_loop().run_in_executor(
                    self.search.executor, embed_passages, encoder, texts)
        return self._vectors

    async def retrieve(self, question: str) -> Retrieved:
        vectors = await self._passage_vectors()
        encoder = await self.search.index.model()
        if vectors is not None and encoder is not None:
            query = await asyncio.get_running_loop().run_in_executor(
                self.search.executor, encoder.encode_query, question, QUERY_TOKENS)
            scores = calibrate(vectors @ query)
        else:
            scores = self._word_overlap(question)
        order = np.argsort(-scores, kind="stable")[:PASSAGES_KEPT]
        passages = tuple(ScoredPassage(self.passages[i], round(float(scores[i]), 3)) for i in order if scores[i] > 0)
        answer = await self.search.search(question, ASSETS_KEPT, admit=False)  # the chat is limited on its own
        # Word matches alone are too loose for a conversation ("how do I..." matches paths): vector hits only.
        return Retrieved(passages, answer.hits if answer.origin == "vector" else ())

    def _word_overlap(self, question: str) -> np.ndarray:
        # Without the model: the share of the question's words found in the passage.
        tokens = query_tokens(question)
        if not tokens:
            return np.zeros(len(self.passages))
        return np.array([sum(t in p.embedding_text().lower() for t in tokens) / len(tokens) for p in self.passages])
