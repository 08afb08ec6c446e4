"""Who writes the chat's answer: an operator's OpenAI-compatible model, or the passages themselves.

`ChatModel` streams from a chat-completions endpoint (llama.cpp server, Ollama, vLLM: ``[ai]
chat_url``), token by token; the connection is closed as soon as the caller stops reading, which
is how a client's disconnect cancels the generation upstream. `extractive_answer` needs no model:
it picks the question's closest sentences from the retrieved documentation and lists matching
assets. Both end with up to three follow-up questions. The documentation's sentences are encoded
the first time an answer weighs them and kept for the process (`sentence_vectors`): they come from
the shipped documentation only, so what is kept is bounded by it.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import aiohttp
import orjson

from assetcdn.control.chat.retrieval import Retrieved
from assetcdn.control.search.engine import QUERY_TOKENS

if TYPE_CHECKING:
    import numpy as np

    from assetcdn.control.search.encoder import SentenceEncoder

FOLLOW_UPS = "FOLLOW_UPS:"
MAX_ANSWER_CHARS = 32_000   # an answer longer than this (whatever max_tokens said) is a runaway model


class GenerationFailed(Exception):
    """The model stopped answering mid-stream (connection lost, timeout, unreadable frames)."""


class ModelRefused(Exception):
    """The model could not start an answer (unreachable, non-200): the chat answers without it."""


@dataclass(frozen=True)
class ChatModelConfig:
    url: str
    model: str
    api_key: str
    timeout_s: float
    max_tokens: int


def system_prompt(retrieved: Retrieved) -> str:
    context = "\n\n".join(f"[{p.passage.id}] {p.passage.title}: {p.passage.text}" for p in retrieved.passages)
    assets = "\n".join(f"- {h.entry.path} ({h.entry.category}, {h.entry.format}, {h.entry.size} bytes)"
                       for h in retrieved.assets)
    return (
        "You are the concierge of a self-hosted asset CDN. Answer briefly and only from the context below; "
        "say so when the context does not answer the question.\n\n"
        f"Documentation:\n{context or '(nothing relevant found)'}\n\n"
        f"Matching assets in the catalog:\n{assets or '(none)'}\n\n"
        f"After the answer, on its own last line, write {FOLLOW_UPS} followed by up to three short follow-up "
        "questions separated by |."
    )


class FollowUpFilter:
    """Passes answer text through and keeps the trailing ``FOLLOW_UPS: a|b|c`` line out of it, even when the
    sentinel arrives split across tokens."""

    def __init__(self) -> None:
        self._held = ""
        self._tail: str | None = None   # text after the sentinel, once seen

    def feed(self, text: str) -> str:
        if self._tail is not None:
            self._tail += text
            return ""
        buffer = self._held + text
        at = buffer.find(FOLLOW_UPS)
        if at >= 0:
            self._tail = buffer[at + len(FOLLOW_UPS):]
            self._held = ""
            return buffer[:at]
        # Hold back a suffix that could be the start of the sentinel.
        keep = 0
        for size in range(min(len(FOLLOW_UPS) - 1, len(buffer)), 0, -1):
            if FOLLOW_UPS.startswith(buffer[-size:]):
                keep = size
                break
        self._held = buffer[len(buffer) - keep:] if keep else ""
        return buffer[:len(buffer) - keep] if keep else buffer

    def finish(self) -> tuple[str, list[str]]:
        """(text still held back, the follow-up questions)."""
        if self._tail is None:
            held, self._held = self._held, ""
            return held, []
        questions = [q.strip() for q in self._tail.strip().splitlines()[0].split("|")] if self._tail.strip() else []
        return "", [q for q in questions if q][:3]


class ChatModel:
    def __init__(self, config: ChatModelConfig, session: aiohttp.ClientSession) -> None:
        self.config = config
        self.session = session

    @property
    def name(self) -> str:
        return self.config.model or "default"

    def _request(self, messages: list[dict[str, str]]) -> dict[str, Any]:
        body: dict[str, Any] = {"messages": messages, "stream": True, "max_tokens": self.config.max_tokens,
                                "temperature": 0.2}
        if self.config.model:
            body["model"] = self.config.model
        return body

    async def open(self, messages: list[dict[str, str]]) -> aiohttp.ClientResponse:
        """Start a completion; raises ModelRefused when no answer can start (then nothing was streamed)."""
        headers = {"Accept": "text/event-stream"}
        if self.config.api_key:
            headers["Authorization"] = f"Bearer {self.config.api_key}"
        timeout = aiohttp.ClientTimeout(total=None, connect=min(self.config.timeout_s, 10),
                                        sock_read=self.config.timeout_s)
        try:
            response = await self.session.post(self.config.url, data=orjson.dumps(self._request(messages)),
                                               headers={**headers, "Content-Type": "application/json"},
                                               timeout=timeout, allow_redirects=False)
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise ModelRefused(f"the chat model at the configured URL is unreachable ({type(exc).__name__})") from None
        if response.status != 200:
            response.release()
            raise ModelRefused(f"the chat model answered HTTP {response.status}")
        return response

    @staticmethod
    async def tokens(response: aiohttp.ClientResponse) -> AsyncIterator[str]:
        """The streamed text pieces of an opened completion. Raises GenerationFailed when the stream breaks."""
        produced = 0
        try:
            while True:
                line = await response.content.readline()  # a line beyond aiohttp's limit raises ValueError
                if not line:
                    raise GenerationFailed("the chat model closed the stream before it finished")
                text = line.strip()
                if not text.startswith(b"data:"):
                    continue
                payload = text[5:].strip()
                if payload == b"[DONE]":
                    return
                try:
                    message = orjson.loads(payload)
                    choice = message["choices"][0]
                    piece = (choice.get("delta") or {}).get("content") or ""
                except (orjson.JSONDecodeError, KeyError, IndexError, TypeError, AttributeError):
                    raise GenerationFailed("the chat model sent a frame that is not a chat completion chunk") from None
                if piece:
                    produced += len(piece)
                    if produced > MAX_ANSWER_CHARS:
                        raise GenerationFailed("the chat model's answer ran past the length limit")
                    yield piece
                if choice.get("finish_reason"):
                    return
        except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as exc:
            raise GenerationFailed(f"the chat model stream failed ({type(exc).__name__})") from None


SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z`(\"'])")


def _sentences(text: str) -> list[str]:
    """A passage's sentences: its lines (paragraphs, list items without their bullet) split at sentence ends."""
    found = []
    for line in text.splitlines():
        line = re.sub(r"^(?:[-*]|\d+\.)\s+", "", line.strip())
        found += [s.strip() for s in SENTENCE.split(line) if len(s.strip()) > 2 and not set(s.strip()) <= set("|-: ")]
    return found


def _candidates(retrieved: Retrieved) -> tuple[list[Any], list[tuple[int, str]]]:
    """The passages above the match line and their sentences, as (passage index, sentence)."""
    relevant = [p for p in retrieved.passages if p.score > 0.5]
    return relevant, [(i, s) for i, p in enumerate(relevant[:3]) for s in _sentences(p.passage.text)]


# (model id, sentence) -> its unit vector. Only documentation sentences reach it (_candidates), so it
# holds at most the documentation's few thousand sentences (384 floats each); a dict's get and set are
# atomic, so answers on several worker threads share it without a lock (two may encode one sentence once each).
_SENTENCE_VECTORS: dict[tuple[str, str], np.ndarray] = {}


def sentence_vectors(encoder: SentenceEncoder, sentences: Sequence[str]) -> np.ndarray:
    """One row per sentence: each encoded once per process (an answer weighs 20-40 sentences of its
    three best passages, and encoding them is most of an extractive answer's CPU)."""
    import numpy as np  # noqa: PLC0415 (with an encoder numpy is loaded; a start without one never needs it)

    missing = [s for s in dict.fromkeys(sentences) if (encoder.model_id, s) not in _SENTENCE_VECTORS]
    if missing:
        for sentence, vector in zip(missing, encoder.encode(missing), strict=True):
            _SENTENCE_VECTORS[(encoder.model_id, sentence)] = vector
    return np.stack([_SENTENCE_VECTORS[(encoder.model_id, s)] for s in sentences])


def extractive_lead(retrieved: Retrieved) -> str:
    """How the extractive answer begins, known before any sentence is scored: the best passage's lead
    sentence always comes first (see extractive_answer), so it can be sent while the rest is chosen."""
    relevant, candidates = _candidates(retrieved)
    if not candidates:
        return ""
    i, sentence = candidates[0]
    return f"From \"{relevant[i].passage.title}\": {sentence}"


def extractive_answer(question: str, retrieved: Retrieved, encoder: SentenceEncoder | None,
                      max_sentences: int = 4) -> tuple[str, list[str]]:
    """An answer made of the documentation's own sentences closest to the question, plus matching assets.
    Pure (runs on a worker thread). Returns (answer text, follow-up questions); the text starts with
    extractive_lead(retrieved)."""
    parts: list[str] = []
    relevant, candidates = _candidates(retrieved)
    if relevant:
        if encoder is not None and len(candidates) > max_sentences:
            scores = sentence_vectors(encoder, [s for _, s in candidates]) @ encoder.encode_query(question, QUERY_TOKENS)
            # The best passage's lead sentence always: it names the thing (an endpoint, a setting) that
            # its other sentences qualify, and those tend to score higher on a question's wording.
            scores[0] = float("inf")
            chosen = sorted((-scores).argsort()[:max_sentences])
        else:
            chosen = list(range(min(len(candidates), max_sentences)))
        by_section: dict[str, list[str]] = {}   # passages of one documentation section read as one
        for k in chosen:
            i, sentence = candidates[int(k)]
            by_section.setdefault(relevant[i].passage.title, []).append(sentence)
        for title, sentences in by_section.items():
            parts.append(f"From \"{title}\": {' '.join(sentences)}")
    assets = [h for h in retrieved.assets if h.score > 0.5][:5]
    if assets:
        listed = "; ".join(f"{h.entry.path} ({h.entry.format}, {h.entry.size} bytes)" for h in assets)
        parts.append(f"Matching assets: {listed}.")
    if not parts:
        parts.append("I could not find this in the documentation or the catalog. Try asking about uploads, zones, "
                     "transforms, purges, video, analytics or search, or name an asset.")
    follow_ups = [f"Tell me more about {p.passage.title.lower()}" for p in _distinct_titles(retrieved.passages)][:3]
    return "\n\n".join(parts), follow_ups


def _distinct_titles(passages: Sequence[Any]) -> list[Any]:
    seen, found = set(), []
    for p in passages:
        if p.passage.title not in seen:
            seen.add(p.passage.title)
            found.append(p)
    return found


def chunks(text: str) -> list[str]:
    """The extractive answer as token-sized pieces (a word and the space after it)."""
    return re.findall(r"\S+\s*|\s+", text)
