"""POST /api/chat's answer as a stream of SSE frames: metadata, tokens, then done (or error).

The answer comes from the configured model when there is one and today's soft limit is not spent;
otherwise (or when the model cannot start an answer) from the retrieved passages themselves, with
``degraded`` saying the model was skipped. `source` is ``ai`` for the model and ``curated`` for the
extractive answer, and ``engine``/``model`` name exactly which answered. A model that fails after
it started ends the stream with an ``error`` frame.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator

from assetcdn.control.chat.conversation import Question
from assetcdn.control.chat.generation import (
    ChatModel,
    FollowUpFilter,
    GenerationFailed,
    ModelRefused,
    chunks,
    extractive_answer,
    extractive_lead,
    system_prompt,
)
from assetcdn.control.chat.quota import ChatAllowance
from assetcdn.control.chat.retrieval import ChatRetriever
from assetcdn.control.chat.sse import frame

log = logging.getLogger(__name__)


class Concierge:
    def __init__(self, retriever: ChatRetriever, model: ChatModel | None) -> None:
        self.retriever = retriever
        self.model = model

    async def answer(self, question: Question, allowance: ChatAllowance) -> AsyncGenerator[bytes, None]:
        retrieved = await self.retriever.retrieve(question.message)
        upstream = None
        degraded = False
        if self.model is not None:
            if not allowance.use_model:
                degraded = True
            else:
                messages = [{"role": "system", "content": system_prompt(retrieved)}, *question.history,
                            {"role": "user", "content": question.message}]
                try:
                    upstream = await self.model.open(messages)
                except ModelRefused as exc:
                    log.warning("chat answers without its model: %s", exc)
                    degraded = True
                    allowance.use_model = False  # the extractive answer costs nothing: the caller gives the count back
        # The month's questions left: none with its limit switched off (`ai.chat_monthly_limit = 0`).
        remaining = {"remaining": allowance.remaining} if allowance.remaining is not None else {}
        metadata = {"sources": retrieved.sources, "confidence": retrieved.confidence, **remaining, "degraded": degraded,
                    "source": "ai" if upstream is not None else "curated",
                    "engine": "model" if upstream is not None else "extractive",
                    "model": self.model.name if upstream is not None and self.model else None}
        yield frame("metadata", metadata)
        if upstream is None:
            # The lead sentence goes out at once; scoring the other sentences takes the encoder a second or so.
            lead = extractive_lead(retrieved)
            for piece in chunks(lead):
                yield frame("token", {"text": piece})
            encoder = await self.retriever.search.index.model()
            text, follow_ups = await asyncio.get_running_loop().run_in_executor(
                self.retriever.search.executor, extractive_answer, question.message, retrieved, encoder)
            for piece in chunks(text.removeprefix(lead)):
                yield frame("token", {"text": piece})
            yield frame("done", {"followUps": follow_ups})
            return
        finished = False
        try:
            follow = FollowUpFilter()
            try:
                async for piece in ChatModel.tokens(upstream):
                    text = follow.feed(piece)
                    if text:
                        yield frame("token", {"text": text})
            except GenerationFailed as exc:
                log.warning("chat model failed mid-answer: %s", exc)
                yield frame("error", {"error": f"The answer was interrupted: {exc}. Please ask again."})
                return
            finished = True
            rest, follow_ups = follow.finish()
            if rest:
                yield frame("token", {"text": rest})
            yield frame("done", {"followUps": follow_ups})
        finally:
            # Not read to the end (the client left, or the stream broke): close the connection, which
            # stops the model generating for nobody.
            if finished:
                upstream.release()
            else:
                upstream.close()
