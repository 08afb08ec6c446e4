"""What the chat answers from: the closest documentation passages and catalog assets to a question.

Passage vectors are ready soon after start: `start()` takes them from the shipped file
(assetcdn/control/chat/passage_vectors.py) once the model is loaded, embedding on a worker thread only
the passages the file lacks; `ready` says when that is done, and a question asked before waits for it.
Assets come from the search engine, so they are the same matches GET /api/search gives, on the same
calibrated scale.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from assetcdn.control.chat.documentation import Passage
from assetcdn.control.search.calibration import calibrate
from assetcdn.control.search.engine import QUERY_TOKENS, SearchEngine, SearchHit
from assetcdn.control.search.fuzzy import query_tokens

if TYPE_CHECKING:
    import numpy as np

log = logging.getLogger(__name__)

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


class ChatRetriever:
    def __init__(self, passages: Callable[[], list[Passage]], search: SearchEngine) -> None:
        self._read_passages = passages
        self.search = search
        self._vectors: np.ndarray | None = None
        self._ready = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @functools.cached_property
    def passages(self) -> list[Passage]:
        """The documentation's passages, read and split when first needed (their vectors, or the first
        question): a control plane that is never asked anything does not read the documentation."""
        return self._read_passages()

    @property
    def ready(self) -> bool:
        """True once a question is answered without waiting for the passage vectors."""
        return self._ready.is_set()

    def start(self) -> None:
        self._task = asyncio.create_task(self._prepare())

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _prepare(self) -> None:
        try:
            encoder = await self.search.index.model()
            if encoder is not None and self.passages:
                # Imported here, as the model is: numpy only for a control plane that has it.
                from assetcdn.control.chat.passage_vectors import passage_matrix  # noqa: PLC0415

                started = time.perf_counter()
                texts = tuple(p.embedding_text() for p in self.passages)
                # On the index's background thread: passages the shipped file lacks are embedded
                # there, never on the threads searches are answered on.
                self._vectors, embedded = await asyncio.get_running_loop().run_in_executor(
                    self.search.index.embed_executor, passage_matrix, encoder, texts)
                log.info("chat ready: %d documentation passages (%d embedded now) in %.2f s",
                         len(texts), embedded, time.perf_counter() - started)
        except Exception:  # the chat still answers, from word overlap
            log.exception("documentation vectors could not be prepared")
        finally:
            self._ready.set()

    async def _passage_vectors(self) -> np.ndarray | None:
        if self._task is None:
            self.start()   # not started by the app (a retriever built on its own): prepare now
        await self._ready.wait()
        return self._vectors

    async def retrieve(self, question: str) -> Retrieved:
        import numpy as np  # noqa: PLC0415 (loaded at the first question, not at every control start)

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
        import numpy as np  # noqa: PLC0415 (as in retrieve)

        tokens = query_tokens(question)
        if not tokens:
            return np.zeros(len(self.passages))
        return np.array([sum(t in p.embedding_text().lower() for t in tokens) / len(tokens) for p in self.passages])
